bin_PROGRAMS += slate
slate_SOURCES = src/slate/main.c src/slate/slate.h src/slate/version.c src/slate/doctor.c \
	src/slate/workspace.c src/slate/image.c src/slate/catalog.c src/slate/vm.c
slate_CFLAGS = $(LIBSLATE_CFLAGS)
slate_LDADD = $(LIBSLATE_LIBS)

sbin_PROGRAMS += slated
slated_SOURCES = src/slated/main.c
slated_CFLAGS = $(LIBSLATE_CFLAGS)
slated_LDADD = $(LIBSLATE_LIBS)

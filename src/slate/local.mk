bin_PROGRAMS += slate
slate_SOURCES = src/slate/main.c src/slate/slate.h src/slate/exec.c src/slate/version.c src/slate/doctor.c \
	src/slate/workspace.c src/slate/image.c src/slate/catalog.c src/slate/vm.c \
	src/slate/sshkey.c src/slate/secret.c src/slate/egress.c src/slate/trace.c src/slate/cp.c \
	src/slate/ci.c src/slate/system.c src/slate/browser.c
slate_CFLAGS = $(LIBSLATE_CFLAGS) $(ARCHIVE_CFLAGS)
slate_LDADD = $(LIBSLATE_LIBS) $(ARCHIVE_LIBS)
# The client uses a few of libslate's libraries (json-c, libcurl): do not load the rest (libvirt,
# libxml2, liburing...) at every start; it costs milliseconds per command.
slate_LDFLAGS = $(AM_LDFLAGS) -Wl,--as-needed

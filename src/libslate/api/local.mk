# api/: the HTTP API on slated's socket (doc/api.md): the server and client, the protocol, and
# the routes. Handlers parse a request, check who may see what, call one daemon operation
# (daemon/) or module function, and render its result or error.
src_libslate_libslate_la_SOURCES += \
	src/libslate/api/protocol.c src/libslate/api/protocol.h \
	src/libslate/api/server.c src/libslate/api/server.h \
	src/libslate/api/client.c src/libslate/api/client.h \
	src/libslate/api/dial.c src/libslate/api/dial.h \
	src/libslate/api/routes.c src/libslate/api/routes.h \
	src/libslate/api/access.c src/libslate/api/access.h \
	src/libslate/api/parse.c src/libslate/api/parse.h \
	src/libslate/api/render.c src/libslate/api/render.h \
	src/libslate/api/workspaces.c src/libslate/api/images.c src/libslate/api/trace.c \
	src/libslate/api/catalog.c \
	src/libslate/api/secrets.c \
	src/libslate/api/sshkey.c \
	src/libslate/api/egress.c \
	src/libslate/api/vm.c \
	src/libslate/api/browser.c \
	src/libslate/api/exec.c src/libslate/api/exec.h
# The ssh:// URL of slate --host (api/dial.c), whose parts become ssh's arguments.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-ssh-url
tests_fuzz_fuzz_ssh_url_SOURCES = tests/fuzz/fuzz-ssh-url.c src/libslate/api/dial.c
tests_fuzz_fuzz_ssh_url_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_ssh_url_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_ssh_url_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-ssh-url
tests_unit_test_fuzz_corpus_ssh_url_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-ssh-url.c

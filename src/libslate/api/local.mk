# api/: the HTTP API on slated's socket (doc/api.md): the server and client, the protocol, and
# the routes. Handlers parse a request, check who may see what, call one daemon operation
# (daemon/) or module function, and render its result or error.
src_libslate_libslate_la_SOURCES += \
	src/libslate/api/protocol.c src/libslate/api/protocol.h \
	src/libslate/api/server.c src/libslate/api/server.h \
	src/libslate/api/client.c src/libslate/api/client.h \
	src/libslate/api/routes.c src/libslate/api/routes.h \
	src/libslate/api/workspaces.c src/libslate/api/images.c src/libslate/api/trace.c \
	src/libslate/api/catalog.c \
	src/libslate/api/secrets.c \
	src/libslate/api/sshkey.c \
	src/libslate/api/egress.c \
	src/libslate/api/vm.c \
	src/libslate/api/exec.c src/libslate/api/exec.h

# channel/: the guest channel (doc/guest-channel.md). proto.c is libc only: slate-guest compiles
# it too.
src_libslate_libslate_la_SOURCES += \
	src/libslate/channel/proto.c src/libslate/channel/proto.h
EXTRA_DIST += doc/guest-channel.md
# The host side: the event loop, one connection's multiplexer, every workspace's channel.
src_libslate_libslate_la_SOURCES += \
	src/libslate/channel/loop.c src/libslate/channel/loop.h \
	src/libslate/channel/mux.c src/libslate/channel/mux.h \
	src/libslate/channel/channels.c src/libslate/channel/channels.h

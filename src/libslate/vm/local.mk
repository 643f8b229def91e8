# vm/: libvirt domains.
src_libslate_libslate_la_SOURCES += \
	src/libslate/vm/domain.c src/libslate/vm/domain.h

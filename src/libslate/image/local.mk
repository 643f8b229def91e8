# image/: catalogs (parse, verify, rollback state), the image store, downloads.
src_libslate_libslate_la_SOURCES += \
	src/libslate/image/store.h

# storage/: reflink clones, btrfs subvolumes, the loop-backed pool, the qcow2 fallback.
src_libslate_libslate_la_SOURCES += \
	src/libslate/storage/reflink.c src/libslate/storage/reflink.h \
	src/libslate/storage/storage.h

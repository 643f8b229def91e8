# storage/: reflink clones, btrfs subvolumes, the loop-backed pool, the qcow2 fallback.
src_libslate_libslate_la_SOURCES += \
	src/libslate/storage/reflink.c src/libslate/storage/reflink.h \
	src/libslate/storage/storage.h
src_libslate_libslate_la_SOURCES += \
	src/libslate/storage/internal.h src/libslate/storage/storage.c \
	src/libslate/storage/subvol.c src/libslate/storage/subvol.h \
	src/libslate/storage/pool.c src/libslate/storage/pool.h \
	src/libslate/storage/loop.c src/libslate/storage/loop.h \
	src/libslate/storage/qcow2.c src/libslate/storage/qcow2.h \
	src/libslate/storage/rmtree.c src/libslate/storage/rmtree.h \
	src/libslate/storage/sparse.c src/libslate/storage/sparse.h \
	src/libslate/storage/spawn.c src/libslate/storage/spawn.h \
	src/libslate/storage/residue.c src/libslate/storage/residue.h \
	src/libslate/storage/usage.c

# Storage and image store tests on real loop-mounted btrfs, XFS (reflink=1) and ext4 made in
# the fixture (root; skipped with exit 77 otherwise). SLATE_STORAGE_BENCH=1 runs the timings.
unit_tests += tests/unit/test-storage
unit_programs += tests/unit/test-image-store
check_PROGRAMS += tests/unit/test-storage
tests_unit_test_storage_SOURCES = tests/unit/test-storage.c
tests_unit_test_storage_CFLAGS = $(UNIT_CFLAGS) $(BTRFSUTIL_CFLAGS)
tests_unit_test_storage_LDADD = $(UNIT_LDADD) $(BTRFSUTIL_LIBS)
EXTRA_DIST += doc/storage.md

# spawn_run_confined(), the root qemu-img converts catalog disks in: only its files are there,
# no capability, and the real qemu-img cannot open the data file a hostile qcow2 names (root;
# skipped with exit 77 otherwise).
unit_programs += tests/unit/test-spawn

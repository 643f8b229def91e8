# image/: catalogs (parse, verify, rollback state), the image store, downloads.
src_libslate_libslate_la_SOURCES += \
	src/libslate/image/store.h
src_libslate_libslate_la_SOURCES += \
	src/libslate/image/sign.c src/libslate/image/sign.h \
	src/libslate/image/catalog.c src/libslate/image/catalog.h \
	src/libslate/image/catalog-parse.c src/libslate/image/catalog-internal.h

# Catalog unit tests: the format, every refusal, keys, signatures (with an OpenSSL-made one),
# rollback state and key rotation. tests/data/catalog holds fixtures and the script that made them.
unit_programs += tests/unit/test-catalog
EXTRA_DIST += tests/data/catalog

# The catalog parser's libFuzzer target (with the key and signature file parsers) and the replay
# of its corpus as a unit test.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-catalog
tests_fuzz_fuzz_catalog_SOURCES = tests/fuzz/fuzz-catalog.c \
	src/libslate/image/catalog.c src/libslate/image/catalog-parse.c src/libslate/image/sign.c \
	src/libslate/util/json.c src/libslate/util/buf.c src/libslate/util/fs.c \
	src/libslate/util/error.c src/libslate/util/hex.c
tests_fuzz_fuzz_catalog_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_catalog_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_catalog_LDADD = $(JSONC_LIBS) $(SODIUM_LIBS) $(OPENSSL_LIBS) -lm
endif
unit_programs += tests/unit/test-fuzz-corpus-catalog
tests_unit_test_fuzz_corpus_catalog_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-catalog.c

# slate-catalog as built: keygen/sign/verify, exit codes, refusals, an OpenSSL-made signature.
integration_tests += tests/integration/slate-catalog.sh
EXTRA_DIST += tests/integration/slate-catalog.sh

# slate-catalog(1) and (5): doc/local.mk generates them with the man pages.
EXTRA_DIST += doc/catalog.md
src_libslate_libslate_la_SOURCES += src/libslate/image/store.c

# Downloads (libcurl), streaming expansion into sparse raw files (zlib, libzstd, liblzma),
# re-hashing with liburing, and the catalog update / pull / verify that slated runs.
src_libslate_libslate_la_SOURCES += \
	src/libslate/image/fetch.c src/libslate/image/fetch.h \
	src/libslate/image/expand.c src/libslate/image/expand.h \
	src/libslate/image/verify.c src/libslate/image/verify.h \
	src/libslate/image/pull.c src/libslate/image/pull.h

# The strict qcow2 header check a catalog's qcow2 disk passes before qemu-img reads it (no
# backing file, no external data file, no encryption, no unknown incompatible feature).
src_libslate_libslate_la_SOURCES += \
	src/libslate/image/qcow2-header.c src/libslate/image/qcow2-header.h

# Its unit test: a hand-built header with one thing changed per case (every refusal), and the
# images the real qemu-img makes (plain, v2, zstd, extended L2 taken; data file, backing, LUKS
# refused).
unit_programs += tests/unit/test-qcow2-header

# The header check's libFuzzer target (the bytes come from a catalog's mirror) and its corpus
# replayed as a unit test.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-qcow2-header
tests_fuzz_fuzz_qcow2_header_SOURCES = tests/fuzz/fuzz-qcow2-header.c \
	src/libslate/image/qcow2-header.c
tests_fuzz_fuzz_qcow2_header_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_qcow2_header_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_qcow2_header_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-qcow2-header
tests_unit_test_fuzz_corpus_qcow2_header_SOURCES = tests/fuzz/replay.c \
	tests/fuzz/fuzz-qcow2-header.c
src_libslate_libslate_la_CFLAGS += $(ZLIB_CFLAGS) $(ZSTD_CFLAGS) $(LZMA_CFLAGS)
src_libslate_libslate_la_LIBADD += $(ZLIB_LIBS) $(ZSTD_LIBS) $(LZMA_LIBS)

# Expansion round trips (none/gzip/zstd/xz, holes kept, SHA-256 of the output) and refusals
# (truncated, corrupt, too large); downloads against a local HTTP server (python3 on 127.0.0.1):
# Range resume, the size cap, 404, redirects to file:// refused.
unit_tests += tests/unit/test-expand
unit_programs += tests/unit/test-fetch
check_PROGRAMS += tests/unit/test-expand
tests_unit_test_expand_SOURCES = tests/unit/test-expand.c
tests_unit_test_expand_CFLAGS = $(UNIT_CFLAGS) $(ZLIB_CFLAGS) $(ZSTD_CFLAGS) $(LZMA_CFLAGS)
tests_unit_test_expand_LDADD = $(UNIT_LDADD) $(ZLIB_LIBS) $(ZSTD_LIBS) $(LZMA_LIBS)
EXTRA_DIST += tests/unit/fetch-server.py

# catalog update, image pull, image ls, create, image verify and every refusal, end to end
# against a local HTTP server on 127.0.0.1.
integration_tests += tests/integration/image-pull.sh
EXTRA_DIST += tests/integration/image-pull.sh

# qcow2 disks end to end (no libvirt): good ones convert to their exact raw bytes; a data file
# naming a host file or the master key, a backing file, unknown features, encryption and broken
# headers are refused by the header check, and no host secret reaches the state directory.
integration_tests += tests/integration/image-pull-qcow2.sh
EXTRA_DIST += tests/integration/image-pull-qcow2.sh

# The expansion's libFuzzer target (compressed streams come from the network) and its corpus
# replayed as a unit test.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-expand
tests_fuzz_fuzz_expand_SOURCES = tests/fuzz/fuzz-expand.c
tests_fuzz_fuzz_expand_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_expand_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_expand_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-expand
tests_unit_test_fuzz_corpus_expand_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-expand.c
EXTRA_DIST += tests/fuzz/corpus/fuzz-expand

# Postinstall steps: run in seq order on a clone of the base inside a short-lived installer VM
# (the test image's kernel and initramfs, installer mode), installed only when all succeed.
src_libslate_libslate_la_SOURCES += \
	src/libslate/image/postinstall.c src/libslate/image/postinstall.h
src_libslate_libslate_la_CFLAGS += -DSLATE_BIN_DIR=\"$(bindir)\"

# Postinstall end to end: consent (client and daemon), success (clone installed, version bumped,
# drift, marker in new workspaces), failure (base unchanged, output shown), on the test image.
integration_tests += tests/integration/postinstall.sh
EXTRA_DIST += tests/integration/postinstall.sh

# The installer console parser: transcripts (unit test), its libFuzzer target and the corpus
# replayed as a unit test.
unit_programs += tests/unit/test-postinstall
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-postinstall-log
tests_fuzz_fuzz_postinstall_log_SOURCES = tests/fuzz/fuzz-postinstall-log.c
tests_fuzz_fuzz_postinstall_log_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_postinstall_log_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_postinstall_log_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-postinstall-log
tests_unit_test_fuzz_corpus_postinstall_log_SOURCES = tests/fuzz/replay.c \
	tests/fuzz/fuzz-postinstall-log.c
EXTRA_DIST += tests/fuzz/corpus/fuzz-postinstall-log

# images/ubuntu-24.04 stays publishable: the entry parses and signs, the unit verifies.
unit_tests += tests/unit/ubuntu-entry.test
EXTRA_DIST += tests/unit/ubuntu-entry.test

# libFuzzer targets, one per parser. Built with: ./configure CC=clang --enable-fuzzing
# Each target compiles the modules it exercises itself, so that libFuzzer's coverage
# instrumentation reaches them (libslate.la is built without it).
# Each target's corpus in tests/fuzz/corpus/<target>/ (seeds and every input that ever crashed
# it) is replayed by a unit test, tests/unit/test-fuzz-corpus-<name>: the same target source
# linked with tests/fuzz/replay.c instead of libFuzzer, built and run by every "make check".
EXTRA_DIST += tests/fuzz/corpus
FUZZ_FLAGS = -fsanitize=fuzzer,address,undefined
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-json tests/fuzz/fuzz-buf
tests_fuzz_fuzz_json_SOURCES = tests/fuzz/fuzz-json.c \
	src/libslate/util/json.c src/libslate/util/error.c
tests_fuzz_fuzz_json_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_json_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_json_LDADD = $(JSONC_LIBS) -lm
tests_fuzz_fuzz_buf_SOURCES = tests/fuzz/fuzz-buf.c \
	src/libslate/util/buf.c src/libslate/util/error.c
tests_fuzz_fuzz_buf_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_buf_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_buf_LDADD = $(SODIUM_LIBS)
endif

FUZZ_REPLAY_CFLAGS = $(LIBSLATE_CFLAGS)
unit_tests += tests/unit/test-fuzz-corpus-json tests/unit/test-fuzz-corpus-buf
check_PROGRAMS += tests/unit/test-fuzz-corpus-json tests/unit/test-fuzz-corpus-buf
tests_unit_test_fuzz_corpus_json_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-json.c
tests_unit_test_fuzz_corpus_json_CFLAGS = $(FUZZ_REPLAY_CFLAGS) \
	-DFUZZ_CORPUS_DIR=\"$(abs_top_srcdir)/tests/fuzz/corpus/fuzz-json\"
tests_unit_test_fuzz_corpus_json_LDADD = $(LIBSLATE_LIBS)
tests_unit_test_fuzz_corpus_buf_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-buf.c
tests_unit_test_fuzz_corpus_buf_CFLAGS = $(FUZZ_REPLAY_CFLAGS) \
	-DFUZZ_CORPUS_DIR=\"$(abs_top_srcdir)/tests/fuzz/corpus/fuzz-buf\"
tests_unit_test_fuzz_corpus_buf_LDADD = $(LIBSLATE_LIBS)

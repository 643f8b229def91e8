# proxy/sigv4: SigV4 re-signing (doc/sigv4.md): the signer and its tests, fuzz target and benchmark.
src_libslate_libslate_la_SOURCES += src/libslate/proxy/sigv4.c src/libslate/proxy/sigv4.h \
	src/libslate/proxy/sigv4-canon.c src/libslate/proxy/sigv4-stream.c \
	src/libslate/proxy/sigv4-internal.h

unit_programs += tests/unit/test-sigv4
EXTRA_DIST += tests/data/sigv4

# The parsers and the aws-chunked transformer under libFuzzer; its corpus replayed by every
# make check (the pattern of tests/fuzz/local.mk).
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-sigv4
tests_fuzz_fuzz_sigv4_SOURCES = tests/fuzz/fuzz-sigv4.c src/libslate/proxy/sigv4.c \
	src/libslate/proxy/sigv4-canon.c src/libslate/proxy/sigv4-stream.c
tests_fuzz_fuzz_sigv4_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_sigv4_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_sigv4_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-sigv4
tests_unit_test_fuzz_corpus_sigv4_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-sigv4.c

# The re-signer driven the way the egress proxy drives it, for tests/integration/sigv4.sh.
check_PROGRAMS += tests/integration/sigv4-resign
tests_integration_sigv4_resign_SOURCES = tests/integration/sigv4-resign.c
tests_integration_sigv4_resign_CFLAGS = $(LIBSLATE_CFLAGS)
tests_integration_sigv4_resign_LDADD = $(LIBSLATE_LIBS)
# End to end: the AWS CLI and botocore against tests/integration/s3server.py (run as root by
# make check, like every integration test; it needs no VM).
integration_tests += tests/integration/sigv4.sh
EXTRA_DIST += tests/integration/s3server.py
# The same through the egress proxy (tests/unit/proxy-listen): the AWS CLI with the placeholder
# credentials, re-signed by the proxy; leaks to unbound hosts; streaming throughput.
integration_tests += tests/integration/sigv4-proxy.sh
EXTRA_DIST += tests/integration/sigv4-proxy.sh

# bench/sigv4: re-signing cost per request and aws-chunked throughput ("make bench-sigv4";
# "make bench" runs it too). A check program so that make check keeps it compiling (bench/local.mk
# sets EXTRA_PROGRAMS with "=", after this file).
check_PROGRAMS += bench/sigv4
bench_sigv4_SOURCES = bench/sigv4.c
bench_sigv4_CFLAGS = $(LIBSLATE_CFLAGS)
bench_sigv4_LDADD = $(LIBSLATE_LIBS)
bench-sigv4: bench/sigv4
	BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt ./bench/sigv4
bench: bench-sigv4
.PHONY: bench-sigv4
EXTRA_DIST += doc/sigv4.md

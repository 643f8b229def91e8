# browser/: the Chrome DevTools Protocol client for a workspace's browser VM (issue 24,
# doc/browser.md "CDP client"): HTTP/1.1 (proxy/http.c's parser), WebSocket, CDP calls.
src_libslate_libslate_la_SOURCES += src/libslate/browser/cdp.c src/libslate/browser/cdp.h \
	src/libslate/browser/cdp-http.c src/libslate/browser/cdp-ws.c \
	src/libslate/browser/internal.h

# The frame codec, the HTTP reader and the CDP layer against peers written in the test, over
# socketpairs (a fake browser behind a dial callback).
unit_programs += tests/unit/test-cdp
# Against a real chromium-headless-shell on 127.0.0.1 (skipped where it is not installed):
# navigate to a page a local python3 http.server serves, its title, a screenshot decoded red.
check_PROGRAMS += tests/unit/cdp-client
tests_unit_cdp_client_SOURCES = tests/unit/cdp-client.c
tests_unit_cdp_client_CFLAGS = $(LIBSLATE_CFLAGS)
tests_unit_cdp_client_LDADD = $(LIBSLATE_LIBS)
unit_tests += tests/unit/cdp-chromium.test
EXTRA_DIST += tests/unit/cdp-chromium.test

# The WebSocket frame reader and the HTTP response reader from hostile bytes.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-cdp
tests_fuzz_fuzz_cdp_SOURCES = tests/fuzz/fuzz-cdp.c src/libslate/browser/cdp-ws.c \
	src/libslate/browser/cdp-http.c src/libslate/proxy/http.c src/libslate/util/buf.c \
	src/libslate/util/error.c src/libslate/util/hex.c src/libslate/util/time.c
tests_fuzz_fuzz_cdp_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_cdp_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_cdp_LDADD = $(SODIUM_LIBS) $(OPENSSL_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-cdp
tests_unit_test_fuzz_corpus_cdp_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-cdp.c

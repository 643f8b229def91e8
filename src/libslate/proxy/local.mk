# proxy/: the egress proxy (doc/egress-proxy.md). sigv4.* is in sigv4.mk.
src_libslate_libslate_la_SOURCES += \
	src/libslate/proxy/http.c src/libslate/proxy/http.h \
	src/libslate/proxy/scan.c src/libslate/proxy/scan.h \
	src/libslate/proxy/tripwire.c src/libslate/proxy/tripwire.h \
	src/libslate/proxy/policy.c src/libslate/proxy/policy.h \
	src/libslate/proxy/ca.c src/libslate/proxy/ca.h \
	src/libslate/proxy/proxy.c src/libslate/proxy/proxy.h
# The proxy core by concern (doc/egress-proxy.md, "Modules"); internal.h is what they share.
src_libslate_libslate_la_SOURCES += src/libslate/proxy/internal.h src/libslate/proxy/io.c \
	src/libslate/proxy/request.c src/libslate/proxy/rewrite.c src/libslate/proxy/resign.c \
	src/libslate/proxy/upstream.c src/libslate/proxy/forward.c src/libslate/proxy/tunnel.c \
	src/libslate/proxy/audit.c
src_libslate_libslate_la_SOURCES += src/libslate/proxy/subst.c src/libslate/proxy/subst.h
EXTRA_DIST += doc/egress-proxy.md

# The proxy core outside slated, on a 127.0.0.1 listener: host-side tests and bench/egress-proxy.
check_PROGRAMS += tests/unit/proxy-listen
tests_unit_proxy_listen_SOURCES = tests/unit/proxy-listen.c
tests_unit_proxy_listen_CFLAGS = $(LIBSLATE_CFLAGS)
tests_unit_proxy_listen_LDADD = $(LIBSLATE_LIBS)

# Unit tests: the parser, hosts and addresses, the scan, the policy, the CA, the core.
unit_programs += tests/unit/test-http
unit_programs += tests/unit/test-host
unit_programs += tests/unit/test-proxy
tests_unit_test_host_SOURCES = tests/unit/test-host.c tests/unit/host-cases.h
tests_unit_test_proxy_SOURCES = tests/unit/test-proxy.c tests/unit/host-cases.h
unit_programs += tests/unit/test-tripwire

# The request parser, fuzzed (heads whole and in pieces, chunked bodies); its corpus replayed.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-http
tests_fuzz_fuzz_http_SOURCES = tests/fuzz/fuzz-http.c \
	src/libslate/proxy/http.c src/libslate/util/buf.c src/libslate/util/error.c \
	src/libslate/util/hex.c
tests_fuzz_fuzz_http_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_http_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_http_LDADD = $(SODIUM_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-http
tests_unit_test_fuzz_corpus_http_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-http.c
# The one host normaliser (util/host.c): secret bindings, egress rules, request hosts.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-host
tests_fuzz_fuzz_host_SOURCES = tests/fuzz/fuzz-host.c src/libslate/util/host.c
tests_fuzz_fuzz_host_CFLAGS = $(LIBSLATE_CFLAGS) $(IDN2_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_host_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_host_LDADD = $(IDN2_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-host
tests_unit_test_fuzz_corpus_host_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-host.c
# The leak scanner's patterns and their automaton (proxy/tripwire.c, proxy/scan.c).
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-tripwire
tests_fuzz_fuzz_tripwire_SOURCES = tests/fuzz/fuzz-tripwire.c src/libslate/proxy/tripwire.c \
	src/libslate/proxy/scan.c
tests_fuzz_fuzz_tripwire_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_tripwire_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_tripwire_LDADD = $(SODIUM_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-tripwire
tests_unit_test_fuzz_corpus_tripwire_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-tripwire.c

# End to end with real peers (curl, Python's http.server over ssl, a raw TCP server): host side
# through tests/unit/proxy-listen, and inside a test VM through a private slated.
integration_tests += tests/integration/proxy.sh
# Body and query substitution (secret set --body, --query), host side, with curl.
integration_tests += tests/integration/proxy-subst.sh
# secret set --body/--query and create --egress/--allow/--deny through a private slated (no VM).
integration_tests += tests/integration/egress-cli.sh
EXTRA_DIST += tests/integration/proxy-peer.py tests/integration/proxy-raw.py
integration_tests += tests/integration/proxy-vm.sh
# bench/egress-proxy: the proxy core against a direct download and mitmproxy.
EXTRA_DIST += bench/egress-proxy

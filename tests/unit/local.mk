# One cmocka binary per module: list it in unit_programs (Makefile.am builds it from
# tests/unit/NAME.c with UNIT_CFLAGS and UNIT_LDADD, and runs it in make check).
UNIT_CFLAGS = $(LIBSLATE_CFLAGS) $(CMOCKA_CFLAGS) -DTEST_DATA_DIR=\"$(abs_top_srcdir)/tests/data\" \
	-DFUZZ_CORPUS_ROOT=\"$(abs_top_srcdir)/tests/fuzz/corpus\"
UNIT_LDADD = $(LIBSLATE_LIBS) $(CMOCKA_LIBS)
unit_programs += tests/unit/test-buf tests/unit/test-log tests/unit/test-fs tests/unit/test-json \
	tests/unit/test-api
# Wrapped so the test can see that secure buffers are wiped before their memory is freed.
tests_unit_test_buf_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=free
unit_programs += tests/unit/test-error
# Wrapped so journald output is checked field by field instead of going to the host journal.
tests_unit_test_log_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=sd_journal_sendv
# Wrapped so the test can take O_TMPFILE away and drive the named-temporary-file path.
tests_unit_test_fs_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=openat
EXTRA_DIST += tests/data/json
# The scratch directory the unit tests make (test-fs, test-mac, test-spawn, ...).
EXTRA_DIST += tests/unit/scratch.h
unit_programs += tests/unit/test-conf
# Script tests that need neither root nor libvirt.
TEST_EXTENSIONS += .test
TEST_LOG_COMPILER = $(SHELL)
unit_tests += tests/unit/man-coverage.test
EXTRA_DIST += tests/unit/man-coverage.test
# doc/security.md names, for every defence, tests that exist.
unit_tests += tests/unit/security-tests.test
EXTRA_DIST += tests/unit/security-tests.test
unit_tests += tests/unit/include-graph.test
EXTRA_DIST += tests/unit/include-graph.test
# The integration tests' own helpers (tests/integration/lib.sh): each fails when it should.
unit_tests += tests/unit/integration-lib.test
EXTRA_DIST += tests/unit/integration-lib.test
unit_programs += tests/unit/test-size
unit_programs += tests/unit/test-hex
unit_programs += tests/unit/test-time
# The guest channel's host side against a peer speaking the protocol by hand.
unit_programs += tests/unit/test-channel
# slate-guest against a scripted host (tests/unit/guest-driver.py), without a VM.
unit_tests += tests/unit/slate-guest.test
EXTRA_DIST += tests/unit/slate-guest.test tests/unit/guest-driver.py
# Body and query substitution (proxy/subst.c) and the secret settings asking for it.
unit_programs += tests/unit/test-subst
# The sha256-1m disk digest (image/verify.c): hole layout does not matter, one byte does.
unit_programs += tests/unit/test-verify
# api/dial: the ssh:// parser, failed-ssh messages, dial-stdio's bridge.
unit_programs += tests/unit/test-dial

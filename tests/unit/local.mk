# One cmocka binary per module. Add a module's test here and to unit_tests.
UNIT_CFLAGS = $(LIBSLATE_CFLAGS) $(CMOCKA_CFLAGS) -DTEST_DATA_DIR=\"$(abs_top_srcdir)/tests/data\"
UNIT_LDADD = $(LIBSLATE_LIBS) $(CMOCKA_LIBS)
unit_tests += tests/unit/test-buf tests/unit/test-log tests/unit/test-fs tests/unit/test-json tests/unit/test-api
check_PROGRAMS += tests/unit/test-buf tests/unit/test-log tests/unit/test-fs tests/unit/test-json tests/unit/test-api
tests_unit_test_buf_SOURCES = tests/unit/test-buf.c
tests_unit_test_buf_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_buf_LDADD = $(UNIT_LDADD)
# Wrapped so the test can see that secure buffers are wiped before their memory is freed.
tests_unit_test_buf_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=free
unit_tests += tests/unit/test-error
check_PROGRAMS += tests/unit/test-error
tests_unit_test_error_SOURCES = tests/unit/test-error.c
tests_unit_test_error_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_error_LDADD = $(UNIT_LDADD)
tests_unit_test_log_SOURCES = tests/unit/test-log.c
tests_unit_test_log_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_log_LDADD = $(UNIT_LDADD)
# Wrapped so journald output is checked field by field instead of going to the host journal.
tests_unit_test_log_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=sd_journal_sendv
tests_unit_test_fs_SOURCES = tests/unit/test-fs.c
tests_unit_test_fs_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_fs_LDADD = $(UNIT_LDADD)
# Wrapped so the test can take O_TMPFILE away and drive the named-temporary-file path.
tests_unit_test_fs_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=openat
tests_unit_test_json_SOURCES = tests/unit/test-json.c
tests_unit_test_json_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_json_LDADD = $(UNIT_LDADD)
EXTRA_DIST += tests/data/json
tests_unit_test_api_SOURCES = tests/unit/test-api.c
tests_unit_test_api_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_api_LDADD = $(UNIT_LDADD)
unit_tests += tests/unit/test-conf
check_PROGRAMS += tests/unit/test-conf
tests_unit_test_conf_SOURCES = tests/unit/test-conf.c
tests_unit_test_conf_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_conf_LDADD = $(UNIT_LDADD)
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
unit_tests += tests/unit/test-size
check_PROGRAMS += tests/unit/test-size
tests_unit_test_size_SOURCES = tests/unit/test-size.c
tests_unit_test_size_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_size_LDADD = $(UNIT_LDADD)
unit_tests += tests/unit/test-hex
check_PROGRAMS += tests/unit/test-hex
tests_unit_test_hex_SOURCES = tests/unit/test-hex.c
tests_unit_test_hex_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_hex_LDADD = $(UNIT_LDADD)
# The guest channel's host side against a peer speaking the protocol by hand.
unit_tests += tests/unit/test-channel
check_PROGRAMS += tests/unit/test-channel
tests_unit_test_channel_SOURCES = tests/unit/test-channel.c
tests_unit_test_channel_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_channel_LDADD = $(UNIT_LDADD)
# slate-guest against a scripted host (tests/unit/guest-driver.py), without a VM.
unit_tests += tests/unit/slate-guest.test
EXTRA_DIST += tests/unit/slate-guest.test tests/unit/guest-driver.py
# Body and query substitution (proxy/subst.c) and the secret settings asking for it.
unit_tests += tests/unit/test-subst
check_PROGRAMS += tests/unit/test-subst
tests_unit_test_subst_SOURCES = tests/unit/test-subst.c
tests_unit_test_subst_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_subst_LDADD = $(UNIT_LDADD)
# The sha256-1m disk digest (image/verify.c): hole layout does not matter, one byte does.
unit_tests += tests/unit/test-verify
check_PROGRAMS += tests/unit/test-verify
tests_unit_test_verify_SOURCES = tests/unit/test-verify.c
tests_unit_test_verify_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_verify_LDADD = $(UNIT_LDADD)

# helper/: slated-helper, the small root process that does what slated itself no longer may
# (loop-mount the pool, start virtiofsd as a share's owner): the wire format and its checks,
# the helper's side, slated's side (doc/helper.md).
src_libslate_libslate_la_SOURCES += \
	src/libslate/helper/proto.c src/libslate/helper/proto.h \
	src/libslate/helper/server.c src/libslate/helper/server.h \
	src/libslate/helper/client.c src/libslate/helper/client.h
EXTRA_DIST += doc/helper.md

# Every malformed request refused without effect, a peer that is not root refused, the pool
# mounted and unmounted on a real loop-backed btrfs, the real binary through the client
# (root and loop devices; skipped with 77 otherwise). virtiofs_spawn is wrapped: the test sees
# what the helper would start.
unit_tests += tests/unit/test-helper
check_PROGRAMS += tests/unit/test-helper
tests_unit_test_helper_SOURCES = tests/unit/test-helper.c
tests_unit_test_helper_CFLAGS = $(UNIT_CFLAGS) -DTEST_BUILDDIR=\"$(abs_top_builddir)\"
tests_unit_test_helper_LDADD = $(UNIT_LDADD)
tests_unit_test_helper_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=virtiofs_share_open \
	-Wl,--wrap=virtiofs_spawn -Wl,--wrap=virtiofs_kill

# slated without CAP_SYS_ADMIN, in a slave mount namespace of its own, with a helper started
# before: a workspace on the loop pool is created, started and deleted; the control without it.
integration_tests += tests/integration/helper.sh
EXTRA_DIST += tests/integration/helper.sh

# workspace/: layout, create/reset/wipe-home/delete, checkpoints, MAC registry, state.
src_libslate_libslate_la_SOURCES += \
	src/libslate/workspace/workspace.h src/libslate/workspace/layout.h \
	src/libslate/workspace/internal.h \
	src/libslate/workspace/workspace.c \
	src/libslate/workspace/state.c \
	src/libslate/workspace/home.c \
	src/libslate/workspace/checkpoint.c \
	src/libslate/workspace/mac.c src/libslate/workspace/mac.h \
	src/libslate/workspace/audit.c src/libslate/workspace/audit.h \
	src/libslate/workspace/crash.c src/libslate/workspace/crash.h
EXTRA_DIST += doc/workspace.md doc/crash-points.md
# Tests: the MAC registry on a temporary directory; workspaces on loop-mounted btrfs and XFS
# (root only, skipped otherwise).
unit_tests += tests/unit/test-mac tests/unit/test-workspace
check_PROGRAMS += tests/unit/test-mac tests/unit/test-workspace
tests_unit_test_mac_SOURCES = tests/unit/test-mac.c
tests_unit_test_mac_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_mac_LDADD = $(UNIT_LDADD)
tests_unit_test_workspace_SOURCES = tests/unit/test-workspace.c
tests_unit_test_workspace_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_workspace_LDADD = $(UNIT_LDADD)

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
unit_programs += tests/unit/test-mac
unit_programs += tests/unit/test-workspace

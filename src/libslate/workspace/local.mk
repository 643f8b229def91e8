# workspace/: layout, create/reset/wipe-home/delete, checkpoints, MAC registry, state.
src_libslate_libslate_la_SOURCES += \
	src/libslate/workspace/workspace.h

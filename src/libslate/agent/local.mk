# agent/: see ARCHITECTURE.md
src_libslate_libslate_la_SOURCES += src/libslate/api/sshkey.c

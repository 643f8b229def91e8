# secrets/: see ARCHITECTURE.md
src_libslate_libslate_la_SOURCES += src/libslate/api/secrets.c
src_libslate_libslate_la_SOURCES += src/libslate/secrets/install.c src/libslate/secrets/install.h

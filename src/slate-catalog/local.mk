bin_PROGRAMS += slate-catalog
slate_catalog_SOURCES = src/slate-catalog/main.c
slate_catalog_CFLAGS = $(LIBSLATE_CFLAGS)
slate_catalog_LDADD = $(LIBSLATE_LIBS)

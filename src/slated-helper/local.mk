# slated-helper: a thin main over helper/server.c, installed in $(pkglibexecdir), where slated
# (and slated-helper.service) look for it; built beside slated at the top of the build tree,
# where an uninstalled slated finds it.
pkglibexec_PROGRAMS += slated-helper
slated_helper_SOURCES = src/slated-helper/main.c
slated_helper_CFLAGS = $(LIBSLATE_CFLAGS)
slated_helper_LDADD = $(LIBSLATE_LIBS)

# libslate: all logic, a non-installed libtool library that the programs and tests link.
noinst_LTLIBRARIES += src/libslate/libslate.la
src_libslate_libslate_la_SOURCES = \
	src/libslate/util/macro.h \
	src/libslate/util/error.c src/libslate/util/error.h \
	src/libslate/util/buf.c src/libslate/util/buf.h \
	src/libslate/util/log.c src/libslate/util/log.h \
	src/libslate/util/fs.c src/libslate/util/fs.h \
	src/libslate/util/json.c src/libslate/util/json.h \
	src/libslate/util/conf.c src/libslate/util/conf.h \
	src/libslate/util/size.c src/libslate/util/size.h \
	src/libslate/util/host.c src/libslate/util/host.h \
	src/libslate/util/hex.c src/libslate/util/hex.h \
	src/libslate/util/time.c src/libslate/util/time.h \
	src/libslate/version.h
src_libslate_libslate_la_CFLAGS = $(PROG_CFLAGS) $(SODIUM_CFLAGS) $(JSONC_CFLAGS) $(SYSTEMD_CFLAGS) \
	$(MHD_CFLAGS) $(CURL_CFLAGS) $(LIBVIRT_CFLAGS) $(XML_CFLAGS) $(OPENSSL_CFLAGS) $(URING_CFLAGS) \
	$(BTRFSUTIL_CFLAGS) $(VNCSERVER_CFLAGS) $(PNG_CFLAGS)
src_libslate_libslate_la_LIBADD = $(SODIUM_LIBS) $(JSONC_LIBS) $(SYSTEMD_LIBS) $(MHD_LIBS) \
	$(CURL_LIBS) $(LIBVIRT_LIBS) $(XML_LIBS) $(OPENSSL_LIBS) $(URING_LIBS) $(BTRFSUTIL_LIBS) \
	$(VNCSERVER_LIBS) $(PNG_LIBS) -lpthread
# Flags for everything that links libslate.
LIBSLATE_CFLAGS = $(PROG_CFLAGS) $(SODIUM_CFLAGS) $(JSONC_CFLAGS) $(SYSTEMD_CFLAGS) $(MHD_CFLAGS) \
	$(CURL_CFLAGS) $(LIBVIRT_CFLAGS) $(XML_CFLAGS) $(OPENSSL_CFLAGS)
LIBSLATE_LIBS = $(top_builddir)/src/libslate/libslate.la

# slate-guest runs inside the VM: static, libc only, never linked against libslate. It compiles
# the channel's wire codec (libc only) itself.
bin_PROGRAMS += slate-guest
slate_guest_SOURCES = src/slate-guest/main.c src/slate-guest/guest.h src/slate-guest/chan.c \
	src/slate-guest/exec.c src/slate-guest/fwd.c src/slate-guest/user.c src/slate-guest/provision.c \
	src/slate-guest/probe.c src/slate-guest/identity.c src/slate-guest/parse.c \
	src/slate-guest/parse.h src/slate-guest/browser.c src/slate-guest/browser-req.c \
	src/slate-guest/browser-req.h \
	src/libslate/channel/proto.c src/libslate/channel/proto.h
# No build paths in the binary: the same sources give the same bytes, and so the same test image.
slate_guest_CFLAGS = $(BASE_CFLAGS) -ffile-prefix-map=$(abs_top_srcdir)=. \
	-ffile-prefix-map=$(abs_top_builddir)=.
# Sanitizer runtimes cannot be linked statically; the guest agent is built without them.
slate_guest_CPPFLAGS = -include $(top_builddir)/config.h -I$(top_srcdir)/src/libslate/channel
slate_guest_LDFLAGS = -all-static
slate_guest_LDADD =

# slate-guest --identity refuses to run outside a slate guest (doc/security.md).
unit_tests += tests/unit/identity-host.test
EXTRA_DIST += tests/unit/identity-host.test

# The browser protocol's request lines (browser-req.c), on the host: libc only.
unit_programs += tests/unit/test-browser-req
tests_unit_test_browser_req_SOURCES = tests/unit/test-browser-req.c src/slate-guest/browser-req.c \
	src/slate-guest/parse.c
tests_unit_test_browser_req_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/slate-guest

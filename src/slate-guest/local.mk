# slate-guest runs inside the VM: static, libc only, never linked against libslate.
bin_PROGRAMS += slate-guest
slate_guest_SOURCES = src/slate-guest/main.c
# No build paths in the binary: the same sources give the same bytes, and so the same test image.
slate_guest_CFLAGS = $(BASE_CFLAGS) -ffile-prefix-map=$(abs_top_srcdir)=. \
	-ffile-prefix-map=$(abs_top_builddir)=.
# Sanitizer runtimes cannot be linked statically; the guest agent is built without them.
slate_guest_CPPFLAGS = -include $(top_builddir)/config.h
slate_guest_LDFLAGS = -all-static

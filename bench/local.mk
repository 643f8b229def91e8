EXTRA_DIST += bench/run bench/api-roundtrip bench/workspace-create bench/workspace-ops-run \
	bench/image-verify bench/image-pull bench/vm-boot bench/guest-channel bench/README.md
EXTRA_DIST += bench/ssh-agent bench/sigv4-stream bench/tripwire-scan bench/concurrent-jobs \
	bench/remote-ssh bench/probe bench/boot-snapshot bench/browser
# Benchmark programs: built by "make bench" only, never installed.
EXTRA_PROGRAMS = bench/workspace-ops
bench_workspace_ops_SOURCES = bench/workspace-ops.c
bench_workspace_ops_CFLAGS = $(LIBSLATE_CFLAGS)
bench_workspace_ops_LDADD = $(LIBSLATE_LIBS) -lm
EXTRA_PROGRAMS += bench/scan
bench_scan_SOURCES = bench/scan.c
bench_scan_CFLAGS = $(LIBSLATE_CFLAGS)
bench_scan_LDADD = $(LIBSLATE_LIBS)
CLEANFILES += $(EXTRA_PROGRAMS)
bench: all $(EXTRA_PROGRAMS)
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/api-roundtrip
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/workspace-create
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/workspace-ops-run
	top_builddir=$(abs_top_builddir) top_srcdir=$(abs_top_srcdir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/image-verify
	top_builddir=$(abs_top_builddir) top_srcdir=$(abs_top_srcdir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/image-pull
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/vm-boot
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/guest-channel
	top_builddir=$(abs_top_builddir) top_srcdir=$(abs_top_srcdir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/sigv4-stream
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/tripwire-scan
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/concurrent-jobs
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/probe
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/boot-snapshot
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/browser
.PHONY: bench

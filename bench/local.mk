EXTRA_DIST += bench/run bench/api-roundtrip bench/workspace-create bench/README.md
bench: all
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/api-roundtrip
	top_builddir=$(abs_top_builddir) BENCH_RESULTS=$(abs_top_builddir)/bench/results.txt $(top_srcdir)/bench/workspace-create
.PHONY: bench

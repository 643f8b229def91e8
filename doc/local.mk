EXTRA_DIST += doc/api.md doc/performance.md
dist_man_MANS += doc/slate.1 doc/slated.8

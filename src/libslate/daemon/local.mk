# daemon/: what slated holds while it runs and the workspace operations on it (daemon/daemon.h),
# calling each other in one direction: run -> start -> provision -> exec.
src_libslate_libslate_la_SOURCES += \
	src/libslate/daemon/daemon.h \
	src/libslate/daemon/exec.c src/libslate/daemon/exec.h \
	src/libslate/daemon/provision.c src/libslate/daemon/provision.h \
	src/libslate/daemon/shares.c src/libslate/daemon/shares.h \
	src/libslate/daemon/start.c src/libslate/daemon/start.h \
	src/libslate/daemon/snapshot.c src/libslate/daemon/snapshot.h \
	src/libslate/daemon/domains.c src/libslate/daemon/domains.h \
	src/libslate/daemon/egress.c src/libslate/daemon/egress.h \
	src/libslate/daemon/agent.c src/libslate/daemon/agent.h \
	src/libslate/daemon/view.c src/libslate/daemon/view.h \
	src/libslate/daemon/create.c src/libslate/daemon/create.h \
	src/libslate/daemon/run.c src/libslate/daemon/run.h \
	src/libslate/daemon/verbs.c src/libslate/daemon/verbs.h \
	src/libslate/daemon/limits.c src/libslate/daemon/limits.h \
	src/libslate/daemon/probe.c src/libslate/daemon/probe.h \
	src/libslate/daemon/browser.c src/libslate/daemon/browser.h \
	src/libslate/daemon/browser-view.c src/libslate/daemon/browser-view.h

# The operations on a real store (qcow2 mode in a temporary directory), the refusals that come
# before libvirt, and the API's error table; what needs a domain is tests/integration's.
unit_programs += tests/unit/test-daemon

unit_programs += tests/unit/test-limits

# The browser view's pure parts (keysyms, button masks, PNG frames into the framebuffer); the
# bridge against a real chromium-headless-shell on 127.0.0.1 (skipped where it is not installed):
# red, a click makes it green, Return makes it blue, read back by an RFB client.
unit_programs += tests/unit/test-browser-view
unit_tests += tests/unit/view-chromium.test
EXTRA_DIST += tests/unit/view-chromium.test tests/integration/rfb-client.py

# The lines slate-guest --probe prints, read by slated from a hostile guest (daemon/probe.c).
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-probe
tests_fuzz_fuzz_probe_SOURCES = tests/fuzz/fuzz-probe.c src/libslate/daemon/probe.c
tests_fuzz_fuzz_probe_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_probe_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_probe_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-probe
tests_unit_test_fuzz_corpus_probe_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-probe.c

# slate probe's parts that need no guest: the guest-line parser, the choice of regions, and the
# host file classification on real sparse files (and a reflink clone where the filesystem has one).
unit_programs += tests/unit/test-probe

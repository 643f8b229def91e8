# libFuzzer targets, one per parser. Built with: ./configure CC=clang --enable-fuzzing
# Each target compiles the modules it exercises itself, so that libFuzzer's coverage
# instrumentation reaches them (libslate.la is built without it).
# Each target's corpus in tests/fuzz/corpus/<target>/ (seeds and every input that ever crashed
# it) is replayed by a unit test, tests/unit/test-fuzz-corpus-<name>: the same target source
# linked with tests/fuzz/replay.c instead of libFuzzer, built and run by every "make check".
EXTRA_DIST += tests/fuzz/corpus
FUZZ_FLAGS = -fsanitize=fuzzer,address,undefined
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-json tests/fuzz/fuzz-buf
tests_fuzz_fuzz_json_SOURCES = tests/fuzz/fuzz-json.c \
	src/libslate/util/json.c src/libslate/util/error.c
tests_fuzz_fuzz_json_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_json_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_json_LDADD = $(JSONC_LIBS) -lm
tests_fuzz_fuzz_buf_SOURCES = tests/fuzz/fuzz-buf.c \
	src/libslate/util/buf.c src/libslate/util/error.c
tests_fuzz_fuzz_buf_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_buf_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_buf_LDADD = $(SODIUM_LIBS)
# The on-disk state parsers: workspace.json, the MAC registry (.macs.json) and image.json.
# fuzz-macs.c and fuzz-image-json.c include their module's .c (the parsers are static); the
# rest of libslate comes uninstrumented from libslate.la.
noinst_PROGRAMS += tests/fuzz/fuzz-workspace-json tests/fuzz/fuzz-macs tests/fuzz/fuzz-image-json
tests_fuzz_fuzz_workspace_json_SOURCES = tests/fuzz/fuzz-workspace-json.c \
	src/libslate/workspace/state.c src/libslate/util/json.c
tests_fuzz_fuzz_workspace_json_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_workspace_json_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_workspace_json_LDADD = $(LIBSLATE_LIBS)
tests_fuzz_fuzz_macs_SOURCES = tests/fuzz/fuzz-macs.c src/libslate/util/json.c
tests_fuzz_fuzz_macs_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_macs_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_macs_LDADD = $(LIBSLATE_LIBS)
tests_fuzz_fuzz_image_json_SOURCES = tests/fuzz/fuzz-image-json.c src/libslate/util/json.c
tests_fuzz_fuzz_image_json_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_image_json_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_image_json_LDADD = $(LIBSLATE_LIBS)
# The guest channel: the host's multiplexer fed a guest's bytes, and the exec records.
noinst_PROGRAMS += tests/fuzz/fuzz-channel
tests_fuzz_fuzz_channel_SOURCES = tests/fuzz/fuzz-channel.c \
	src/libslate/channel/mux.c src/libslate/channel/proto.c
tests_fuzz_fuzz_channel_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_channel_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_channel_LDADD = $(LIBSLATE_LIBS)
endif

FUZZ_REPLAY_CFLAGS = $(LIBSLATE_CFLAGS)
unit_programs += tests/unit/test-fuzz-corpus-json
unit_programs += tests/unit/test-fuzz-corpus-buf
tests_unit_test_fuzz_corpus_json_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-json.c
tests_unit_test_fuzz_corpus_buf_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-buf.c
unit_programs += tests/unit/test-fuzz-corpus-workspace-json
unit_programs += tests/unit/test-fuzz-corpus-macs
unit_programs += tests/unit/test-fuzz-corpus-image-json
tests_unit_test_fuzz_corpus_workspace_json_SOURCES = tests/fuzz/replay.c \
	tests/fuzz/fuzz-workspace-json.c
tests_unit_test_fuzz_corpus_macs_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-macs.c
tests_unit_test_fuzz_corpus_image_json_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-image-json.c
unit_programs += tests/unit/test-fuzz-corpus-channel
tests_unit_test_fuzz_corpus_channel_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-channel.c
# Body and query substitution (proxy/subst.c): escaping and the placeholder's place.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-subst
tests_fuzz_fuzz_subst_SOURCES = tests/fuzz/fuzz-subst.c src/libslate/proxy/subst.c
tests_fuzz_fuzz_subst_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_subst_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_subst_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-subst
tests_unit_test_fuzz_corpus_subst_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-subst.c
# slated-helper's request check (helper/proto.c): whatever it lets through is what the helper's
# actions may rely on.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-helper-request
tests_fuzz_fuzz_helper_request_SOURCES = tests/fuzz/fuzz-helper-request.c \
	src/libslate/helper/proto.c
tests_fuzz_fuzz_helper_request_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_helper_request_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_helper_request_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-helper-request
tests_unit_test_fuzz_corpus_helper_request_SOURCES = tests/fuzz/replay.c \
	tests/fuzz/fuzz-helper-request.c
# The browser VM's request lines (slate-guest's browser-req.c): host input that decides what the
# agent formats, mounts and starts.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-browser-req
tests_fuzz_fuzz_browser_req_SOURCES = tests/fuzz/fuzz-browser-req.c \
	src/slate-guest/browser-req.c src/slate-guest/parse.c
tests_fuzz_fuzz_browser_req_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/slate-guest
tests_fuzz_fuzz_browser_req_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_browser_req_LDFLAGS = $(FUZZ_FLAGS)
endif
unit_programs += tests/unit/test-fuzz-corpus-browser-req
tests_unit_test_fuzz_corpus_browser_req_SOURCES = tests/fuzz/replay.c \
	tests/fuzz/fuzz-browser-req.c src/slate-guest/browser-req.c src/slate-guest/parse.c
tests_unit_test_fuzz_corpus_browser_req_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/slate-guest

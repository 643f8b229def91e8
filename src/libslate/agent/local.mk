# agent/: the sign-only SSH agent (doc/ssh-agent.md): protocol, key store, OpenSSH's tools for
# imported keys, the service; api/sshkey.c is its API and guest-channel side.
src_libslate_libslate_la_SOURCES += \
	src/libslate/agent/proto.c src/libslate/agent/proto.h \
	src/libslate/agent/keys.c src/libslate/agent/keys.h \
	src/libslate/agent/openssh.c src/libslate/agent/openssh.h \
	src/libslate/agent/agent.c src/libslate/agent/agent.h
EXTRA_DIST += doc/ssh-agent.md
# Tests: the agent against a peer speaking the protocol by hand (cmocka; keys sealed in a
# temporary state directory, private agents of real OpenSSH for imported keys), and
# test-agent-openssh.test: real OpenSSH clients (ssh-add, ssh-keygen -Y sign/verify, ssh into
# a test-owned sshd on 127.0.0.1) against tests/unit/agent-serve, the agent outside slated.
unit_tests += tests/unit/test-agent-openssh.test
unit_programs += tests/unit/test-agent
check_PROGRAMS += tests/unit/agent-serve
tests_unit_agent_serve_SOURCES = tests/unit/agent-serve.c
tests_unit_agent_serve_CFLAGS = $(LIBSLATE_CFLAGS)
tests_unit_agent_serve_LDADD = $(LIBSLATE_LIBS)
EXTRA_DIST += tests/unit/test-agent-openssh.test
# The agent's parsers fed a guest's bytes: frames and messages through a connection holding a
# managed key, and keys.json, public key lines and signature replies on their own.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-agent
tests_fuzz_fuzz_agent_SOURCES = tests/fuzz/fuzz-agent.c \
	src/libslate/agent/proto.c src/libslate/agent/keys.c src/libslate/agent/agent.c
tests_fuzz_fuzz_agent_CFLAGS = $(LIBSLATE_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_agent_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_agent_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-agent
tests_unit_test_fuzz_corpus_agent_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-agent.c
# The agent end to end: slate ssh-key through a private slated, OpenSSH inside the guest.
integration_tests += tests/integration/ssh-agent.sh

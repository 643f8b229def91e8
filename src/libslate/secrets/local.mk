# secrets/: see doc/secrets.md and doc/architecture.md
src_libslate_libslate_la_SOURCES += src/libslate/secrets/install.c src/libslate/secrets/install.h
src_libslate_libslate_la_SOURCES += src/libslate/secrets/secrets.h \
	src/libslate/secrets/secret.c \
	src/libslate/secrets/placeholder.c src/libslate/secrets/placeholder.h \
	src/libslate/secrets/vault.c src/libslate/secrets/vault.h \
	src/libslate/secrets/provision.c src/libslate/secrets/provision.h
# Host names are normalised to IDNA A-labels with libidn2 (util/host.c, the one normaliser).
src_libslate_libslate_la_CFLAGS += $(IDN2_CFLAGS)
src_libslate_libslate_la_LIBADD += $(IDN2_LIBS)

# Placeholders: shape, GitHub's checksum, determinism, salt rotation.
unit_tests += tests/unit/test-placeholder
unit_programs += tests/unit/test-vault
unit_programs += tests/unit/test-provision
check_PROGRAMS += tests/unit/test-placeholder
tests_unit_test_placeholder_SOURCES = tests/unit/test-placeholder.c
tests_unit_test_placeholder_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_placeholder_LDADD = $(UNIT_LDADD) $(ZLIB_LIBS)
# The vault: sealing, purpose binding, tampering, merge, host normalisation, the key file.
tests_unit_test_vault_SOURCES = tests/unit/test-vault.c tests/unit/host-cases.h
# What the guest is given: environment and files, placeholders only.

# The vault's plaintext parser (what install_unseal hands it), fuzzed and its corpus replayed.
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz-vault
tests_fuzz_fuzz_vault_SOURCES = tests/fuzz/fuzz-vault.c \
	src/libslate/secrets/vault.c src/libslate/secrets/secret.c \
	src/libslate/util/host.c src/libslate/secrets/placeholder.c
tests_fuzz_fuzz_vault_CFLAGS = $(LIBSLATE_CFLAGS) $(IDN2_CFLAGS) $(FUZZ_FLAGS)
tests_fuzz_fuzz_vault_LDFLAGS = $(FUZZ_FLAGS)
tests_fuzz_fuzz_vault_LDADD = $(LIBSLATE_LIBS)
endif
unit_programs += tests/unit/test-fuzz-corpus-vault
tests_unit_test_fuzz_corpus_vault_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz-vault.c

# secret set/ls/rm through a private slated and the real client (no VM).
integration_tests += tests/integration/secrets.sh
EXTRA_DIST += doc/secrets.md

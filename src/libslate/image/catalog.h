/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Signed image catalogs: the strict parser, the verifier (after TUF's attack list), the rollback
 * state and the artifact check that downloads use. The format is specified in doc/catalog.md and
 * slate-catalog(5); keys and signature files are in image/sign.h.
 *
 * A catalog is accepted only when, in this order: it is at most CATALOG_MAX_SIZE bytes (checked
 * before anything reads it), it has a signature, the signature file is well formed, its key is
 * trusted, the signature over the domain-separated bytes for the expected channel is good, the
 * JSON is a well-formed catalog, it names the expected channel, it has not expired, and its
 * version is above the last accepted one (or equal, with identical bytes).
 *
 * Functions return >= 0 on success and -errno or a slate_err code on failure; output parameters
 * are untouched on failure; err (may be NULL) receives the code and a message naming the field
 * or the check that failed.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/sign.h"
#include "util/macro.h"

#define CATALOG_FORMAT "slate-catalog"
#define CATALOG_FORMAT_VERSION 1
/* Catalogs larger than this are refused before they are parsed or even verified. */
#define CATALOG_MAX_SIZE (4u * 1024u * 1024u)
#define CATALOG_MAX_IMAGES 1024
#define CATALOG_MAX_STEPS 256 /* postinstall steps per image */
#define CATALOG_MAX_KEYS 16
#define CATALOG_ID_MAX 64
#define CATALOG_URL_MAX 4096
#define CATALOG_TEXT_MAX 4096     /* description, cmdline */
#define CATALOG_COMMAND_MAX 65536 /* one postinstall command */
#define CATALOG_TRUSTED_KEYS_DIR SLATE_SYSCONF_DIR "/trusted-keys"
/* Below the state directory: current.json, current.sig, state.json, keys/, .lock */
#define CATALOG_STATE_SUBDIR "catalog"

enum catalog_compression {
	CATALOG_COMPRESSION_NONE,
	CATALOG_COMPRESSION_GZIP,
	CATALOG_COMPRESSION_ZSTD,
	CATALOG_COMPRESSION_XZ,
};

enum catalog_disk_format {
	CATALOG_DISK_RAW,
	CATALOG_DISK_QCOW2,
};

enum catalog_boot_type {
	CATALOG_BOOT_FIRMWARE,
	CATALOG_BOOT_KERNEL,
};

/* One file to download: exactly size bytes whose SHA-256 is sha256. */
struct catalog_artifact {
	char *url;
	char sha256_hex[65];
	uint8_t sha256[32];
	uint64_t size;
};

struct catalog_step {
	char uuid[37];
	int64_t seq;
	char *description;
	char *command;
};

struct catalog_image {
	char *id;
	int64_t version;
	char *description;
	struct catalog_artifact disk;
	uint64_t uncompressed_size;
	enum catalog_compression compression;
	enum catalog_disk_format format;
	enum catalog_boot_type boot;
	struct catalog_artifact kernel; /* CATALOG_BOOT_KERNEL only */
	struct catalog_artifact initrd; /* CATALOG_BOOT_KERNEL only */
	char *cmdline;                  /* CATALOG_BOOT_KERNEL only, may be "" */
	struct catalog_step *steps;     /* postinstall, in seq order */
	size_t n_steps;
};

struct catalog {
	char *channel;
	int64_t version;
	int64_t signed_at; /* unix time */
	int64_t expires;   /* unix time */
	struct catalog_image *images;
	size_t n_images;
	struct sign_public_key *keys; /* keys this catalog introduces (rotation) */
	size_t n_keys;
	uint8_t *bytes; /* the exact bytes that were parsed (and signed) */
	size_t len;
	uint8_t sha256[32]; /* of bytes */
	uint8_t *sig;       /* the signature file as given; NULL from catalog_parse() */
	size_t sig_len;
	char key_id[SIGN_KEY_ID_LEN + 1]; /* the key that signed it; "" from catalog_parse() */
};

void catalog_free(struct catalog *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct catalog *, catalog_free);
#define _cleanup_catalog_ _cleanup_(catalog_freep)

/* The last accepted catalog, as state.json records it. */
struct catalog_state {
	char channel[SIGN_CHANNEL_MAX + 1];
	int64_t version;
	uint8_t sha256[32]; /* of current.json */
	char key_id[SIGN_KEY_ID_LEN + 1];
	int64_t accepted_at;
};

/* The keys a catalog may be signed with. */
struct catalog_trust;

/* Returns 0 if id matches [a-z0-9][a-z0-9._-]{0,63} without "..", else -EINVAL. */
int catalog_id_check(const char *id);
/*
 * Parses an RFC 3339 UTC timestamp of exactly the form YYYY-MM-DDTHH:MM:SSZ (no fraction, no
 * offset other than Z, no leap second, years 1970-9999) into unix time. -EINVAL otherwise.
 */
int catalog_time_parse(const char *s, int64_t *ret);
/* Writes t as YYYY-MM-DDTHH:MM:SSZ into buf (at least 21 bytes). -ERANGE outside 1970-9999. */
int catalog_time_format(int64_t t, char *buf, size_t size);
/* Returns a stable lower-case name for an error code ("rollback", "expired", ...). */
const char *catalog_error_name(int code);

/*
 * Parses and checks a catalog WITHOUT looking at any signature: for the publisher's tool and
 * the fuzzer. Everything but the signature, channel, expiry and rollback checks applies,
 * including the size cap.
 */
int catalog_parse(const uint8_t *bytes, size_t len, struct catalog **ret, struct slate_error *err);
/* Returns the "channel" member of an UNVERIFIED catalog as a new string in *ret, for the
 * publisher's tool, which defaults to the catalog's own channel. Consumers pin theirs. */
int catalog_peek_channel(const uint8_t *bytes, size_t len, char **ret);

/*
 * Verifies a catalog: bytes/len are the catalog file's exact bytes, sig/sig_len the detached
 * signature file's (NULL/0 when there is none), channel the channel the caller expects (never
 * taken from the catalog), last the last accepted state (NULL when none, and ignored when it
 * belongs to another channel), now the current unix time. On success *ret is the parsed catalog
 * holding copies of both inputs.
 */
int catalog_verify(const struct catalog_trust *trust, const char *channel, const uint8_t *bytes,
                   size_t len, const uint8_t *sig, size_t sig_len, const struct catalog_state *last,
                   int64_t now, struct catalog **ret, struct slate_error *err);

/* Returns the image called id, or NULL. */
const struct catalog_image *catalog_find_image(const struct catalog *c, const char *id);

/* Trust: a set of public keys, looked up by key ID. */
int catalog_trust_new(struct catalog_trust **ret);
void catalog_trust_free(struct catalog_trust *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct catalog_trust *, catalog_trust_free);
#define _cleanup_trust_ _cleanup_(catalog_trust_freep)
/* Adds k (a key already present is fine). */
int catalog_trust_add(struct catalog_trust *t, const struct sign_public_key *k);
/*
 * Adds the key file path, or every "*.pub" file in it when it is a directory (dot files and
 * other names are ignored; one malformed *.pub fails the whole call, naming the file, and adds
 * none of them).
 */
int catalog_trust_add_path(struct catalog_trust *t, int dirfd, const char *path,
                           struct slate_error *err);
/* Adds the keys earlier catalogs introduced: the .pub files in <state>/catalog/keys (none is
 * fine). */
int catalog_trust_add_state_keys(struct catalog_trust *t, int state_dirfd, struct slate_error *err);
/* Returns the number of keys. */
size_t catalog_trust_count(const struct catalog_trust *t);
/* Returns the key with that ID, or NULL. */
const struct sign_public_key *catalog_trust_find(const struct catalog_trust *t, const char *id);

/*
 * Rollback state in <state>/catalog/. Callers serialise load, verify and accept with
 * catalog_state_lock(), which returns a held flock in *ret_fd (creating the directory).
 */
int catalog_state_lock(int state_dirfd, int *ret_fd);
/* Loads state.json. -ENOENT when no catalog was ever accepted. */
int catalog_state_load(int state_dirfd, struct catalog_state *ret, struct slate_error *err);
/*
 * Stores a verified catalog as the accepted one: current.sig and current.json, then state.json
 * (the commit point), each with fs_write_atomic_at; then keys/ is made to hold exactly the keys
 * the catalog carries (keys it no longer lists are removed before the commit, new ones added
 * after it, so a crash never trusts a key early). Re-checks rollback against the stored state,
 * so a stale verification cannot go backwards. Accepting the same bytes again is a no-op that
 * repairs keys/.
 */
int catalog_state_accept(int state_dirfd, const struct catalog *c, int64_t now,
                         struct slate_error *err);
/*
 * Loads the accepted catalog (current.json and current.sig), checking that its SHA-256 is the
 * one state.json recorded: a crash between the writes is reported as SLATE_ERR_DIGEST_MISMATCH.
 * The signature is not checked again; the state directory is trusted storage.
 */
int catalog_state_load_current(int state_dirfd, struct catalog **ret, struct slate_error *err);

/*
 * Streaming check of one artifact: feed the bytes in order; an update that takes the total past
 * the declared size fails at once with SLATE_ERR_SIZE_MISMATCH (endless data), final fails with
 * SLATE_ERR_SIZE_MISMATCH when bytes are missing and SLATE_ERR_DIGEST_MISMATCH when the SHA-256
 * (OpenSSL EVP) differs.
 */
struct catalog_artifact_check;
int catalog_artifact_check_new(const struct catalog_artifact *a,
                               struct catalog_artifact_check **ret);
int catalog_artifact_check_update(struct catalog_artifact_check *c, const void *p, size_t n,
                                  struct slate_error *err);
int catalog_artifact_check_final(struct catalog_artifact_check *c, struct slate_error *err);
void catalog_artifact_check_free(struct catalog_artifact_check *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct catalog_artifact_check *, catalog_artifact_check_free);
/*
 * Reads fd from its current offset to end of file through the check above. A regular file
 * whose size is already over the declared one is refused without reading; a pipe or growing
 * file is refused as soon as one byte too many arrives, without waiting for its end.
 */
int catalog_artifact_check_fd(const struct catalog_artifact *a, int fd, struct slate_error *err);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * ed25519 keys and detached catalog signatures (the formats are specified in doc/catalog.md and
 * slate-catalog(5)). libsodium does the signing and verifying; OpenSSL only decodes PEM public
 * keys, so that a key made with `openssl genpkey -algorithm ed25519` can be trusted as it is.
 *
 * What is signed is never the catalog alone but sign_message_new()'s bytes:
 *     "slate-catalog-v1" NUL "channel=" CHANNEL NUL CATALOG-BYTES
 * so that a signature cannot be replayed for another channel or as anything but a catalog.
 *
 * Secret keys live in libsodium guarded memory (sodium_malloc) and are wiped when freed.
 * Functions return >= 0 on success and -errno or a slate_err code on failure; output parameters
 * are untouched on failure. Where an error struct is passed (it may be NULL), it receives the
 * code and a message that names what was wrong.
 */

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"
#include "util/macro.h"

#define SIGN_PUBLIC_KEY_BYTES 32
#define SIGN_SIGNATURE_BYTES 64
#define SIGN_SEED_BYTES 32
/* A key ID is the lowercase hex of the first 8 bytes of SHA-256(raw 32-byte public key). */
#define SIGN_KEY_ID_BYTES 8
#define SIGN_KEY_ID_LEN (2 * SIGN_KEY_ID_BYTES)
#define SIGN_COMMENT_MAX 256
#define SIGN_CHANNEL_MAX 64
/* Key and signature files larger than these are refused before they are read. */
#define SIGN_KEY_FILE_MAX 4096
#define SIGN_SIG_FILE_MAX 1024

#define SIGN_PUBLIC_KEY_TAG "slate-ed25519"
#define SIGN_SECRET_KEY_TAG "slate-ed25519-secret"
#define SIGN_SIGNATURE_TAG "slate-catalog-sig-v1"
#define SIGN_DOMAIN "slate-catalog-v1"

struct sign_public_key {
	uint8_t key[SIGN_PUBLIC_KEY_BYTES];
	char id[SIGN_KEY_ID_LEN + 1];
	char comment[SIGN_COMMENT_MAX + 1]; /* printable ASCII, may be empty */
};

struct sign_secret_key; /* guarded memory; holds its public half too */

/*
 * Decodes exactly n characters of padded base64 (RFC 4648 section 4) at s into exactly want
 * bytes at out: no whitespace, no other alphabet, no non-zero trailing bits, so that every byte
 * string has exactly one encoding. Returns 0 or SLATE_ERR_INVALID_FORMAT.
 */
int sign_base64_decode(const char *s, size_t n, uint8_t *out, size_t want);

/* Returns 0 if channel matches [a-z0-9][a-z0-9._-]{0,63} without "..", else -EINVAL. */
int sign_channel_check(const char *channel);
/* Returns 0 if s is a valid comment (at most SIGN_COMMENT_MAX printable ASCII), else -EINVAL. */
int sign_comment_check(const char *s);

/*
 * Makes a public key from 32 raw bytes: refuses encodings that are not a canonical point of the
 * prime-order subgroup (SLATE_ERR_INVALID_FORMAT) and computes the key ID. comment may be NULL.
 */
int sign_public_key_from_raw(const uint8_t raw[SIGN_PUBLIC_KEY_BYTES], const char *comment,
                             struct sign_public_key *ret);
/*
 * Parses a public key file's contents: one line "slate-ed25519 BASE64[ COMMENT]" with an
 * optional final newline, or one PEM "PUBLIC KEY" block holding an Ed25519 key (as
 * `openssl pkey -pubout` writes it). Anything else is SLATE_ERR_INVALID_FORMAT.
 */
int sign_public_key_parse(const char *text, size_t len, struct sign_public_key *ret,
                          struct slate_error *err);
/* Reads and parses the public key file dirfd/path. */
int sign_public_key_load_at(int dirfd, const char *path, struct sign_public_key *ret,
                            struct slate_error *err);
/* Returns the one-line text form, "slate-ed25519 BASE64[ COMMENT]\n", in a new string. */
int sign_public_key_format(const struct sign_public_key *k, char **ret);

/* Generates a new key pair. comment may be NULL. */
int sign_secret_key_generate(const char *comment, struct sign_secret_key **ret);
/*
 * Loads the secret key file dirfd/path ("slate-ed25519-secret BASE64-SEED[ COMMENT]"). Refuses a
 * file that group or others may access in any way (SLATE_ERR_KEY_PERMISSIONS) and anything that
 * is not a regular file. The file's bytes only ever sit in guarded memory.
 */
int sign_secret_key_load_at(int dirfd, const char *path, struct sign_secret_key **ret,
                            struct slate_error *err);
/* Returns the public half (owned by k). */
const struct sign_public_key *sign_secret_key_public(const struct sign_secret_key *k);
/* Wipes and frees k; NULL is fine. */
void sign_secret_key_free(struct sign_secret_key *k);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct sign_secret_key *, sign_secret_key_free);
#define _cleanup_secret_key_ _cleanup_(sign_secret_key_freep)

/*
 * Writes k as a secret key file, dirfd/secret_path (created with O_EXCL, mode 0600), and its
 * public key file, dirfd/public_path (O_EXCL, mode 0644). Neither may exist (-EEXIST); on
 * failure nothing of ours is left behind.
 */
int sign_keygen_write_at(int dirfd, const char *secret_path, const char *public_path,
                         const struct sign_secret_key *k, struct slate_error *err);

/*
 * Builds the signed message for data on channel: SIGN_DOMAIN, NUL, "channel=", channel, NUL,
 * then data. Returns a new buffer in *ret and its length in *ret_len.
 */
int sign_message_new(const char *channel, const uint8_t *data, size_t len, uint8_t **ret,
                     size_t *ret_len);
/* Signs data for channel. */
int sign_detached(const struct sign_secret_key *k, const char *channel, const uint8_t *data,
                  size_t len, uint8_t ret_sig[SIGN_SIGNATURE_BYTES]);
/* Returns 0 for a good signature over data for channel by k, else SLATE_ERR_SIGNATURE_INVALID. */
int sign_verify_detached(const struct sign_public_key *k, const char *channel, const uint8_t *data,
                         size_t len, const uint8_t sig[SIGN_SIGNATURE_BYTES]);

/* Returns a signature file's text, "slate-catalog-sig-v1 KEYID BASE64\n", in a new string. */
int sign_signature_format(const char *key_id, const uint8_t sig[SIGN_SIGNATURE_BYTES], char **ret);
/*
 * Parses a signature file: exactly one line as sign_signature_format() writes it (the final
 * newline is optional). SLATE_ERR_SIGNATURE_MISSING for no bytes at all,
 * SLATE_ERR_SIGNATURE_FORMAT for anything else that is not exactly that (and for more than
 * SIGN_SIG_FILE_MAX bytes, which are refused unread).
 */
int sign_signature_parse(const uint8_t *text, size_t len, char ret_key_id[SIGN_KEY_ID_LEN + 1],
                         uint8_t ret_sig[SIGN_SIGNATURE_BYTES], struct slate_error *err);

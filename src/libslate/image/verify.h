/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Digests of installed images (`slate image verify`, the pull, the import).
 *
 * The disk digest recorded in image.json is "sha256-1m" (doc/catalog.md has the definition):
 * the file is cut into blocks of VERIFY_BLOCK bytes (the last one may be shorter), each block is
 * hashed with SHA-256, and the digest is the SHA-256 of a domain string, the file's size and the
 * list of block hashes. It depends on the file's bytes only, never on which ranges are holes; but
 * a block of zeros (a hole, or zeros written out) has a known hash, VERIFY_ZERO_BLOCK_SHA256, so
 * nobody has to read or hash the 3 GiB of zeros of a 4 GiB disk holding 1 GiB of data. Written as
 * "sha256-1m:" and 64 lowercase hex digits.
 *
 * The plain SHA-256 of a whole file (verify_file_sha256()) stays for the kernel and initrd
 * (the catalog's artifact hashes) and for image.json files written before the block digest.
 *
 * Both read with a pipeline of liburing reads kept in flight while the bytes already read are
 * hashed (OpenSSL EVP); ranges the filesystem reports as holes are not read at all.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VERIFY_BLOCK (1u << 20)
#define VERIFY_CHUNK (4u << 20) /* a read: VERIFY_CHUNK / VERIFY_BLOCK blocks */
#define VERIFY_DEPTH 4          /* reads in flight */
#define VERIFY_DIGEST_PREFIX "sha256-1m:"
/* "sha256-1m:" + 64 hex digits + NUL */
#define VERIFY_DIGEST_STRLEN (sizeof(VERIFY_DIGEST_PREFIX) - 1 + 64)
/* What the outer hash starts with (16 bytes, the NUL included). */
#define VERIFY_DIGEST_DOMAIN "slate-sha256-1m"

/* SHA-256 of VERIFY_BLOCK zero bytes. */
extern const uint8_t VERIFY_ZERO_BLOCK_SHA256[32];

typedef void (*verify_progress_fn)(uint64_t done, uint64_t total, void *ud);

/*
 * The sha256-1m digest, computed from a stream of bytes and zero runs given in file order.
 * verify_digest_init() needs the file's size up front; verify_digest_final() fails (-EINVAL)
 * unless exactly that many bytes came.
 */
struct verify_digest {
	void *outer, *inner; /* EVP_MD_CTX */
	uint64_t size;       /* declared */
	uint64_t off;        /* bytes so far */
	size_t fill;         /* bytes of the current block in inner */
};

int verify_digest_init(struct verify_digest *d, uint64_t size);
/* The next n bytes of the file. */
int verify_digest_update(struct verify_digest *d, const void *p, size_t n);
/* The next n bytes of the file are zeros (a hole): whole blocks are not hashed at all. */
int verify_digest_zeros(struct verify_digest *d, uint64_t n);
/*
 * The hash of the next whole block (VERIFY_BLOCK bytes, or the last block's length), computed
 * by the caller (verify_block_sha256()): d must be at a block boundary.
 */
int verify_digest_add_block(struct verify_digest *d, const uint8_t h[32], size_t len);
/* Ends it: the digest's 32 bytes in ret. Frees the contexts whatever the result. */
int verify_digest_final(struct verify_digest *d, uint8_t ret[32]);
/* Frees the contexts (after an error; final does it itself). */
void verify_digest_done(struct verify_digest *d);

/* Whether n bytes at p are all zero. */
bool verify_all_zero(const uint8_t *p, size_t n);
/* SHA-256 of one block (n <= VERIFY_BLOCK); a whole block of zeros costs only the zero check. */
int verify_block_sha256(const uint8_t *p, size_t n, uint8_t ret[32]);

/*
 * The sha256-1m digest of the regular file dirfd/name as "sha256-1m:<hex>" in ret (at least
 * VERIFY_DIGEST_STRLEN + 1 bytes). Data blocks are hashed on two threads. progress (may be
 * NULL) sees the bytes done so far. -EIO when the file changes size under us.
 */
int verify_file_digest(int dirfd, const char *name, char *ret, verify_progress_fn progress,
                       void *ud);

/*
 * Hashes the regular file dirfd/name into ret_sha256 (plain SHA-256, holes read as zeros).
 * progress (may be NULL) sees the bytes hashed so far. -EIO when the file changes size under us.
 */
int verify_file_sha256(int dirfd, const char *name, uint8_t ret_sha256[32],
                       verify_progress_fn progress, void *ud);

/* Lowercase hex of 32 bytes into out (65 bytes). */
void verify_hex(const uint8_t sha256[32], char out[65]);
/* "sha256-1m:<hex>" of a digest's 32 bytes into out (VERIFY_DIGEST_STRLEN + 1 bytes). */
void verify_digest_string(const uint8_t digest[32], char *out);
/* Whether s is "sha256-1m:" and 64 lowercase hex digits. */
bool verify_digest_string_ok(const char *s);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Re-hashing installed images (`slate image verify`): SHA-256 (OpenSSL EVP) of a whole file,
 * holes read as zeros, with a pipeline of liburing reads kept in flight while the bytes already
 * read are hashed. Ranges the filesystem reports as holes are not read at all.
 */

#include <stdint.h>

#define VERIFY_CHUNK (4u << 20)
#define VERIFY_DEPTH 4 /* reads in flight */

typedef void (*verify_progress_fn)(uint64_t done, uint64_t total, void *ud);

/*
 * Hashes the regular file dirfd/name into ret_sha256. progress (may be NULL) sees the bytes
 * hashed so far. -EIO when the file changes size under us.
 */
int verify_file_sha256(int dirfd, const char *name, uint8_t ret_sha256[32],
                       verify_progress_fn progress, void *ud);
/* Lowercase hex of 32 bytes into out (65 bytes). */
void verify_hex(const uint8_t sha256[32], char out[65]);

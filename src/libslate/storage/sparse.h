/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Reading and copying files that have holes, without reading or writing the holes. */

#include <stdint.h>

/*
 * Called for each piece of a file, in order: data at p (len bytes), or a hole (p == NULL: len
 * zero bytes that were not read). Returns >= 0 to go on, or a negative error that stops the
 * walk and is returned by it.
 */
typedef int (*sparse_fn)(uint64_t offset, const uint8_t *p, uint64_t len, void *ud);

/*
 * Walks fd from offset 0 to size: data regions (SEEK_DATA/SEEK_HOLE, whole file when the
 * filesystem cannot tell) are read in large chunks and handed to fn, holes are reported
 * without reading. -EIO when the file is shorter than size.
 */
int sparse_walk(int fd, uint64_t size, sparse_fn fn, void *ud);

/*
 * Copies size bytes of in to out, which must be a new empty file: out is extended to size
 * first, so holes stay holes; blocks that read as zeros are not written either, so a file
 * whose zeros were written out becomes sparse. each (may be NULL) sees every piece of in after
 * it is written, as sparse_walk() would hand it over (for hashing and progress).
 */
int sparse_copy(int in, int out, uint64_t size, sparse_fn each, void *ud);

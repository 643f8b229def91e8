/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Streaming expansion of a downloaded disk artifact into a sparse raw file: compressed bytes go
 * in as they arrive (gzip with zlib, zstd with libzstd, xz with liblzma, or none), the output is
 * written at its offsets with every all-zero block left as a hole, so a 24 GiB image holding
 * 7 GiB of data takes about 7 GiB. The sha256-1m digest of the output (image/verify.h: the SHA-256
 * of its 1 MiB blocks' SHA-256s, where a block of zeros costs a zero check and no hashing) is
 * computed on the way, so the installed disk never has to be read again.
 *
 * The digest runs on a thread of its own, scanning for zeros and writing on another, so that both
 * overlap with receiving and decompressing; a third starts the writeback of what was written
 * every 128 MiB (sync_file_range), so the device works during the download and the caller's
 * fsync at the end, which makes it durable, finds little left to do.
 *
 * The output may never exceed the declared size (decompression bombs stop at once), and at the
 * end the stream must be complete and the output exactly that size: a truncated or corrupt
 * stream is SLATE_ERR_INVALID_FORMAT, a wrong size SLATE_ERR_SIZE_MISMATCH.
 */

#include <stddef.h>
#include <stdint.h>

#include "image/catalog.h"
#include "util/macro.h"

/* Output blocks at this granularity that are all zeros become holes. */
#define EXPAND_HOLE_BLOCK 4096u

struct expand;

/*
 * Starts expanding into out_fd, an empty regular file opened for writing (it is extended to
 * size at the end). size is the declared uncompressed size.
 */
int expand_new(enum catalog_compression compression, int out_fd, uint64_t size,
               struct expand **ret);
/* Feeds the next n compressed bytes. Returns 0, or the first error of either thread. */
int expand_write(struct expand *e, const void *p, size_t n);
/*
 * Ends the stream: checks that it is complete and that exactly size bytes came out, sets the
 * file's size (trailing holes included) and returns the output's sha256-1m digest in ret_digest
 * (verify_digest_string() writes it out). Nothing is durable yet: that is the caller's fsync.
 */
int expand_finish(struct expand *e, uint8_t ret_digest[32]);
/* How a zstd artifact was taken: frames decoded whole straight into the buffers, frames of zeros
 * recognised without decoding, and output bytes that went through the streaming decoder. */
struct expand_stats {
	uint64_t whole_frames, zero_frames, streamed;
};
void expand_get_stats(const struct expand *e, struct expand_stats *ret);
/* Bytes written out so far (holes included). */
uint64_t expand_output_size(const struct expand *e);
/* Stops the second thread and frees; NULL is fine. */
void expand_free(struct expand *e);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct expand *, expand_free);

/* Expands everything readable from in_fd into out_fd (for tests and tools). */
int expand_fd(enum catalog_compression compression, int in_fd, int out_fd, uint64_t size,
              uint8_t ret_digest[32]);

/*
 * Compresses everything readable from in_fd into out_fd as zstd in independent frames of
 * EXPAND_PACK_FRAME bytes of input each (the last one shorter), each with its content size and
 * checksum: an ordinary zstd stream (zstd -d reads it) that the expander decodes a frame at a
 * time straight into its buffers, without decoding the frames that are all zeros. level is
 * zstd's. ret_in, ret_out (may be NULL): the sizes read and written; ret_sha256: the SHA-256 of
 * what was written (the catalog's sha256).
 */
#define EXPAND_PACK_FRAME (4u << 20)
int expand_pack_zstd(int in_fd, int out_fd, int level, uint64_t *ret_in, uint64_t *ret_out,
                     uint8_t ret_sha256[32]);

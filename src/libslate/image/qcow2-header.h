/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The strict qcow2 header check a catalog's qcow2 disk passes before qemu-img reads it
 * (QEMU's docs/interop/qcow2.txt, versions 2 and 3, every number big-endian).
 *
 * qemu-img follows file names a qcow2 header carries: a backing file, and an external data file
 * whose bytes it reads as the guest's clusters. A catalog image naming
 * /var/lib/slate/install/master.key, /dev/sda or another workspace's home.img as its data file
 * would have that host file copied into the base image every workspace boots. The signature
 * only says who published the bytes, not that they are harmless, so the header is read here,
 * bounded and trusting nothing, and refused when it names any other file or asks for anything
 * slate does not take:
 *   - a backing file (backing_file_offset or backing_file_size not 0);
 *   - an external data file: incompatible feature bit 2, the autoclear bit 1 (raw external
 *     data) or a data file name extension (0x44415441);
 *   - encryption: crypt_method not 0, or a full disk encryption header extension;
 *   - the dirty bit (refcounts need repairing, i.e. writing to the image) and the corrupt bit;
 *   - any incompatible feature bit other than 0-4, a compression type other than zlib (0) or
 *     zstd (1) or one that does not agree with incompatible bit 3, extended L2 entries with
 *     clusters under 16 KiB;
 *   - a bad magic, a version other than 2 or 3, cluster_bits outside 9..21, refcount_order
 *     over 6, an L1 or refcount table offset not on a cluster boundary;
 *   - a header_length under 104, not a multiple of 8 or past the first cluster (version 3), a
 *     file shorter than its header, header extensions that run past the first cluster or the
 *     end of the file or lack the end marker, and a known extension that appears twice.
 * Compatible features, autoclear bit 0 (bitmaps) and unknown extensions are ignored, as the
 * specification allows: none of them makes qemu-img open another file.
 *
 * Every refusal is SLATE_ERR_INVALID_FORMAT with a message naming what was found.
 */

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

/* The most of a file the check reads: the first cluster of the largest cluster size (2 MiB). */
#define QCOW2_HEADER_AREA_MAX (1u << 21)

#define QCOW2_INCOMPAT_DIRTY (UINT64_C(1) << 0)
#define QCOW2_INCOMPAT_CORRUPT (UINT64_C(1) << 1)
#define QCOW2_INCOMPAT_DATA_FILE (UINT64_C(1) << 2)
#define QCOW2_INCOMPAT_COMPRESSION (UINT64_C(1) << 3)
#define QCOW2_INCOMPAT_EXTL2 (UINT64_C(1) << 4)
#define QCOW2_AUTOCLEAR_BITMAPS (UINT64_C(1) << 0)
#define QCOW2_AUTOCLEAR_DATA_FILE_RAW (UINT64_C(1) << 1)

/* Header extension types. */
#define QCOW2_EXT_END 0x00000000u
#define QCOW2_EXT_BACKING_FORMAT 0xe2792acau
#define QCOW2_EXT_FEATURE_TABLE 0x6803f857u
#define QCOW2_EXT_BITMAPS 0x23852875u
#define QCOW2_EXT_CRYPTO 0x0537be77u
#define QCOW2_EXT_DATA_FILE 0x44415441u

/* What the check read, in host byte order. */
struct qcow2_header {
	uint32_t version;       /* 2 or 3 */
	uint32_t cluster_bits;  /* 9..21 */
	uint64_t size;          /* the virtual disk's size in bytes */
	uint32_t header_length; /* 72 for version 2 */
	uint64_t incompatible_features;
	uint64_t compatible_features;
	uint64_t autoclear_features;
	uint32_t refcount_order;  /* 4 for version 2 */
	uint8_t compression_type; /* 0 zlib, 1 zstd */
	uint32_t n_extensions;    /* before the end marker */
};

/*
 * Checks the qcow2 header in data: the first len bytes of the file, which must be the whole file
 * or at least its first QCOW2_HEADER_AREA_MAX bytes (the check reads no further than the first
 * cluster). Returns 0 and fills *ret (may be NULL) when slate takes the image; otherwise
 * SLATE_ERR_INVALID_FORMAT, with err (may be NULL) saying why.
 */
int qcow2_header_check(const uint8_t *data, size_t len, struct qcow2_header *ret,
                       struct slate_error *err);

/*
 * Reads the start of the regular file open as fd (at most QCOW2_HEADER_AREA_MAX bytes, with
 * pread: the file offset does not move) and checks it with qcow2_header_check(). Returns 0,
 * SLATE_ERR_INVALID_FORMAT, -EIO when the file shrinks while it is read, or another -errno.
 */
int qcow2_header_check_fd(int fd, struct qcow2_header *ret, struct slate_error *err);

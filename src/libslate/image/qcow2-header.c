/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/qcow2-header.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/macro.h"

#define QCOW2_MAGIC 0x514649fbu /* "QFI\xfb" */
#define QCOW2_V2_HEADER_LENGTH 72u
#define QCOW2_V3_HEADER_LENGTH 104u /* up to and including header_length */
#define QCOW2_COMPRESSION_TYPE_OFFSET 104u
#define QCOW2_CLUSTER_BITS_MIN 9u
#define QCOW2_CLUSTER_BITS_MAX 21u /* QEMU opens nothing larger: 2 MiB */
#define QCOW2_EXTL2_CLUSTER_BITS_MIN 14u
#define QCOW2_REFCOUNT_ORDER_MAX 6u
#define QCOW2_INCOMPAT_KNOWN                                                                       \
	(QCOW2_INCOMPAT_DIRTY | QCOW2_INCOMPAT_CORRUPT | QCOW2_INCOMPAT_DATA_FILE |                \
	 QCOW2_INCOMPAT_COMPRESSION | QCOW2_INCOMPAT_EXTL2)
#define QCOW2_COMPRESSION_ZLIB 0u
#define QCOW2_COMPRESSION_ZSTD 1u
#define NAME_SHOWN_MAX 80 /* of a data file name, in a message */

_printf_(2, 3) static int refuse(struct slate_error *err, const char *fmt, ...)
{
	char m[SLATE_ERROR_MSG_MAX];
	va_list ap;

	if (!err)
		return SLATE_ERR_INVALID_FORMAT;
	va_start(ap, fmt);
	(void)vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "qcow2 disk refused: %s", m);
}

/* A file name from the image, shown in a message: printable ASCII only, cut short. */
static void show_name(const uint8_t *p, size_t n, char *out, size_t size)
{
	size_t i, o = 0;

	for (i = 0; i < n && o + 4 < size && i < NAME_SHOWN_MAX; i++)
		out[o++] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' ? (char)p[i] : '?';
	if (i < n && o + 4 < size) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

static bool aligned(uint64_t offset, uint32_t cluster_bits)
{
	return (offset & ((UINT64_C(1) << cluster_bits) - 1)) == 0;
}

/* The header extensions: from the end of the header to the end marker, inside end. */
static int check_extensions(const uint8_t *data, size_t start, size_t end, const char *bound,
                            struct qcow2_header *h, struct slate_error *err)
{
	bool seen_backing_format = false, seen_feature_table = false, seen_bitmaps = false;
	size_t off = start;

	for (;;) {
		uint32_t type, len;
		size_t padded;
		bool *seen = NULL;
		_cleanup_buf_ struct buf *b = NULL;

		if (end - off < 8)
			return refuse(err,
			              "its header extensions run past the end of the %s at offset "
			              "%zu without an end marker",
			              bound, off);
		b = buf_from(data + off, 8);
		if (!b)
			return -ENOMEM;
		if (buf_get_u32(b, &type) < 0 || buf_get_u32(b, &len) < 0)
			return SLATE_ERR_INTERNAL;
		off += 8;
		if (type == QCOW2_EXT_END)
			return 0;
		padded = ((size_t)len + 7) & ~(size_t)7;
		if ((size_t)len > end - off || padded > end - off)
			return refuse(err,
			              "header extension 0x%08x at offset %zu is %" PRIu32
			              " bytes long, past the end of the %s",
			              type, off - 8, len, bound);
		switch (type) {
		case QCOW2_EXT_DATA_FILE: {
			char name[NAME_SHOWN_MAX + 8];

			show_name(data + off, len, name, sizeof(name));
			return refuse(err,
			              "it names an external data file (\"%s\"), which would make "
			              "qemu-img copy a host file into the image",
			              name);
		}
		case QCOW2_EXT_CRYPTO:
			return refuse(err, "it has a full disk encryption header (encrypted images "
			                   "are not taken)");
		case QCOW2_EXT_BACKING_FORMAT:
			seen = &seen_backing_format;
			break;
		case QCOW2_EXT_FEATURE_TABLE:
			seen = &seen_feature_table;
			break;
		case QCOW2_EXT_BITMAPS:
			seen = &seen_bitmaps;
			break;
		default: /* unknown: the specification says it may be ignored */
			break;
		}
		if (seen && *seen)
			return refuse(err, "header extension 0x%08x appears twice", type);
		if (seen)
			*seen = true;
		h->n_extensions++;
		off += padded;
	}
}

int qcow2_header_check(const uint8_t *data, size_t len, struct qcow2_header *ret,
                       struct slate_error *err)
{
	_cleanup_buf_ struct buf *b = NULL;
	struct qcow2_header h = {0};
	uint32_t magic, backing_size, crypt_method, l1_size, refcount_clusters, nb_snapshots;
	uint64_t backing_offset, l1_offset, refcount_offset, snapshots_offset, cluster_size,
	        unknown;
	size_t end;
	int r;

	if (!data && len > 0)
		return -EINVAL;
	if (len < QCOW2_V2_HEADER_LENGTH)
		return refuse(err, "the file is %zu bytes, shorter than a qcow2 header (%u)", len,
		              QCOW2_V2_HEADER_LENGTH);
	b = buf_from(data, len);
	if (!b)
		return -ENOMEM;
	/* 72 bytes are there: none of these reads can fail. */
	if (buf_get_u32(b, &magic) < 0 || buf_get_u32(b, &h.version) < 0 ||
	    buf_get_u64(b, &backing_offset) < 0 || buf_get_u32(b, &backing_size) < 0 ||
	    buf_get_u32(b, &h.cluster_bits) < 0 || buf_get_u64(b, &h.size) < 0 ||
	    buf_get_u32(b, &crypt_method) < 0 || buf_get_u32(b, &l1_size) < 0 ||
	    buf_get_u64(b, &l1_offset) < 0 || buf_get_u64(b, &refcount_offset) < 0 ||
	    buf_get_u32(b, &refcount_clusters) < 0 || buf_get_u32(b, &nb_snapshots) < 0 ||
	    buf_get_u64(b, &snapshots_offset) < 0)
		return SLATE_ERR_INTERNAL;
	(void)l1_size;
	(void)refcount_clusters;

	if (magic != QCOW2_MAGIC)
		return refuse(err, "not a qcow2 image (magic 0x%08x)", magic);
	if (h.version != 2 && h.version != 3)
		return refuse(err, "qcow2 version %" PRIu32 " (only 2 and 3 are taken)", h.version);
	if (h.cluster_bits < QCOW2_CLUSTER_BITS_MIN || h.cluster_bits > QCOW2_CLUSTER_BITS_MAX)
		return refuse(err, "cluster_bits %" PRIu32 " is outside %u..%u", h.cluster_bits,
		              QCOW2_CLUSTER_BITS_MIN, QCOW2_CLUSTER_BITS_MAX);
	cluster_size = UINT64_C(1) << h.cluster_bits;
	/* Refused whatever the rest says: only the image's own bytes were verified. */
	if (backing_offset != 0 || backing_size != 0)
		return refuse(err,
		              "it names a backing file (offset %" PRIu64 ", %" PRIu32
		              " bytes), which would make qemu-img read another file",
		              backing_offset, backing_size);
	if (crypt_method != 0)
		return refuse(err, "it is encrypted (crypt_method %" PRIu32 ")", crypt_method);
	if (!aligned(l1_offset, h.cluster_bits) || !aligned(refcount_offset, h.cluster_bits) ||
	    (nb_snapshots > 0 && !aligned(snapshots_offset, h.cluster_bits)))
		return refuse(err, "a table offset is not on a cluster boundary");

	if (h.version == 2) {
		h.header_length = QCOW2_V2_HEADER_LENGTH;
		h.refcount_order = 4;
	} else {
		if (len < QCOW2_V3_HEADER_LENGTH)
			return refuse(err,
			              "the file is %zu bytes, shorter than a version 3 header (%u)",
			              len, QCOW2_V3_HEADER_LENGTH);
		if (buf_get_u64(b, &h.incompatible_features) < 0 ||
		    buf_get_u64(b, &h.compatible_features) < 0 ||
		    buf_get_u64(b, &h.autoclear_features) < 0 ||
		    buf_get_u32(b, &h.refcount_order) < 0 || buf_get_u32(b, &h.header_length) < 0)
			return SLATE_ERR_INTERNAL;
		if (h.header_length < QCOW2_V3_HEADER_LENGTH || h.header_length % 8 != 0 ||
		    h.header_length > cluster_size)
			return refuse(err,
			              "header_length %" PRIu32
			              " (version 3 wants a multiple of 8 from %u up to the cluster "
			              "size, %" PRIu64 ")",
			              h.header_length, QCOW2_V3_HEADER_LENGTH, cluster_size);
		if (h.header_length > len)
			return refuse(
			        err, "the file is %zu bytes, shorter than its header (%" PRIu32 ")",
			        len, h.header_length);
		if (h.refcount_order > QCOW2_REFCOUNT_ORDER_MAX)
			return refuse(err, "refcount_order %" PRIu32 " is over %u",
			              h.refcount_order, QCOW2_REFCOUNT_ORDER_MAX);
		if (h.header_length > QCOW2_COMPRESSION_TYPE_OFFSET)
			h.compression_type = data[QCOW2_COMPRESSION_TYPE_OFFSET];
	}

	/* The extensions follow the header inside the first cluster (QEMU reads them up to its
	 * end) and, here, inside the file: nothing past either is read as an extension. First, so that a data
	 * file is refused by its name. */
	end = cluster_size < len ? (size_t)cluster_size : len;
	r = check_extensions(data, h.header_length, end,
	                     cluster_size <= len ? "first cluster" : "file", &h, err);
	if (r < 0)
		return r;

	/* Incompatible features: an implementation must refuse a bit it does not know; of the
	 * known ones, slate takes compression type and extended L2 entries only. */
	if (h.incompatible_features & QCOW2_INCOMPAT_DATA_FILE)
		return refuse(err, "it uses an external data file (incompatible feature bit 2), "
		                   "which would make qemu-img copy a host file into the image");
	if (h.autoclear_features & QCOW2_AUTOCLEAR_DATA_FILE_RAW)
		return refuse(err, "it uses a raw external data file (autoclear feature bit 1), "
		                   "which would make qemu-img copy a host file into the image");
	unknown = h.incompatible_features & ~QCOW2_INCOMPAT_KNOWN;
	if (unknown)
		return refuse(err, "unknown incompatible feature bits 0x%" PRIx64, unknown);
	if (h.incompatible_features & QCOW2_INCOMPAT_CORRUPT)
		return refuse(err, "it is marked corrupt (incompatible feature bit 1)");
	/* Dirty: refcounts may be wrong and QEMU repairs them by writing to the image before
	 * use. A published image is closed cleanly; one that was not is refused, not repaired. */
	if (h.incompatible_features & QCOW2_INCOMPAT_DIRTY)
		return refuse(err, "it is marked dirty (incompatible feature bit 0): it was not "
		                   "closed cleanly, run qemu-img check -r all on it");
	if (h.compression_type > QCOW2_COMPRESSION_ZSTD)
		return refuse(err, "compression type %u (only 0, zlib, and 1, zstd, are taken)",
		              h.compression_type);
	if (!!(h.incompatible_features & QCOW2_INCOMPAT_COMPRESSION) !=
	    (h.compression_type != QCOW2_COMPRESSION_ZLIB))
		return refuse(err,
		              "the compression type bit (incompatible feature bit 3) says %s but "
		              "compression_type is %u",
		              h.incompatible_features & QCOW2_INCOMPAT_COMPRESSION ? "set"
		                                                                   : "clear",
		              h.compression_type);
	if ((h.incompatible_features & QCOW2_INCOMPAT_EXTL2) &&
	    h.cluster_bits < QCOW2_EXTL2_CLUSTER_BITS_MIN)
		return refuse(err,
		              "extended L2 entries with cluster_bits %" PRIu32 " (at least %u "
		              "wanted)",
		              h.cluster_bits, QCOW2_EXTL2_CLUSTER_BITS_MIN);

	if (ret)
		*ret = h;
	return 0;
}

int qcow2_header_check_fd(int fd, struct qcow2_header *ret, struct slate_error *err)
{
	_cleanup_free_ uint8_t *data = NULL;
	struct stat st;
	size_t want, got = 0;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EBADFD;
	want = (uint64_t)st.st_size < QCOW2_HEADER_AREA_MAX ? (size_t)st.st_size
	                                                    : QCOW2_HEADER_AREA_MAX;
	data = malloc(want > 0 ? want : 1);
	if (!data)
		return -ENOMEM;
	while (got < want) {
		ssize_t n = pread(fd, data + got, want - got, (off_t)got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO; /* shrank under us */
		got += (size_t)n;
	}
	return qcow2_header_check(data, got, ret, err);
}

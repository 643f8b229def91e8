/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for image/qcow2-header: the input is the start of a qcow2 file from a catalog.
 * Whatever it holds, the check reads inside it only (ASan), and what it takes names no other
 * file: no backing file, no external data file by bit or by extension, no encryption, no unknown
 * incompatible bit, and the structure qemu-img relies on (version, cluster_bits, header_length,
 * an end marker inside the file and the first cluster). A refusal says why, in printable text.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/qcow2-header.h"
#include "util/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t be(const uint8_t *p, unsigned width)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < width; i++)
		v = v << 8 | p[i];
	return v;
}

/* Walks the extensions the plain way; aborts on one the check should have refused. */
static void check_extensions(const uint8_t *data, size_t size, const struct qcow2_header *h)
{
	size_t end = size < ((size_t)1 << h->cluster_bits) ? size : (size_t)1 << h->cluster_bits;
	size_t off = h->header_length;
	uint32_t n = 0;

	for (;;) {
		uint64_t type, len;

		if (off + 8 > end)
			abort();
		type = be(data + off, 4);
		len = be(data + off + 4, 4);
		off += 8;
		if (type == 0)
			break;
		if (type == QCOW2_EXT_DATA_FILE || type == QCOW2_EXT_CRYPTO)
			abort();
		off += (size_t)((len + 7) & ~UINT64_C(7));
		if (off > end)
			abort();
		n++;
	}
	if (n != h->n_extensions)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct slate_error err = {0};
	struct qcow2_header h;
	int r;

	r = qcow2_header_check(data, size, &h, &err);
	if (r < 0) {
		if (r != SLATE_ERR_INVALID_FORMAT || err.code != r || !err.msg[0])
			abort();
		for (const char *p = err.msg; *p; p++)
			if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
				abort();
		return 0;
	}
	if (size < 72 || memcmp(data, "QFI\xfb", 4) != 0)
		abort();
	if ((h.version != 2 && h.version != 3) || h.version != be(data + 4, 4))
		abort();
	if (be(data + 8, 8) != 0 || be(data + 16, 4) != 0 || be(data + 32, 4) != 0)
		abort();
	if (h.cluster_bits < 9 || h.cluster_bits > 21 || h.header_length > size ||
	    h.header_length > (1u << h.cluster_bits))
		abort();
	if (h.version == 3 && (be(data + 72, 8) != h.incompatible_features ||
	                       be(data + 88, 8) != h.autoclear_features || h.header_length < 104 ||
	                       h.header_length % 8 != 0))
		abort();
	if (h.version == 2 && (h.header_length != 72 || h.incompatible_features != 0))
		abort();
	if (h.incompatible_features & ~(QCOW2_INCOMPAT_COMPRESSION | QCOW2_INCOMPAT_EXTL2))
		abort();
	if (h.autoclear_features & QCOW2_AUTOCLEAR_DATA_FILE_RAW)
		abort();
	if (h.compression_type > 1 ||
	    !!(h.incompatible_features & QCOW2_INCOMPAT_COMPRESSION) != (h.compression_type == 1))
		abort();
	check_extensions(data, size, &h);
	return 0;
}

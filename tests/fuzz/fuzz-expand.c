/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for image/expand: bytes from the network (a disk artifact) through each
 * decompressor into a sparse file. The first byte picks the compression and the declared size;
 * whatever the stream, the output never exceeds the declared size, and a success means exactly
 * that many bytes came out. For zstd, a success must also be what libzstd's own one-shot decoder
 * makes of the same bytes (the expander takes whole frames and frames of zeros its own way).
 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string.h>
#include <zstd.h>

#include "image/expand.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t sizes[] = {1, 4096, 65536, 1u << 20};
	uint8_t sha[32];
	struct stat st;
	uint64_t want;
	int fd, r;

	if (size < 1)
		return 0;
	want = sizes[(data[0] >> 2) & 3];
	fd = memfd_create("fuzz-expand", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	{
		struct expand *e = NULL;
		size_t half = (size - 1) / 2;

		r = expand_new((enum catalog_compression)(data[0] & 3), fd, want, &e);
		if (r >= 0)
			r = expand_write(e, data + 1, half);
		if (r >= 0)
			r = expand_write(e, data + 1 + half, size - 1 - half);
		if (r >= 0)
			r = expand_finish(e, sha);
		expand_free(e);
	}
	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size > want)
		abort();
	if (r >= 0 && (uint64_t)st.st_size != want)
		abort();
	if (r >= 0 && (data[0] & 3) == CATALOG_COMPRESSION_ZSTD) {
		uint8_t *a = malloc(want), *b = malloc(want);
		if (a && b) {
			size_t n = ZSTD_decompress(a, want, data + 1, size - 1);
			if (ZSTD_isError(n) || n != want ||
			    pread(fd, b, want, 0) != (ssize_t)want || memcmp(a, b, want) != 0)
				abort();
		}
		free(a);
		free(b);
	}
	close(fd);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "storage/sparse.h"
#include "util/macro.h"

/* Large reads: a base image is gigabytes, and its data comes in long runs. */
#define SPARSE_CHUNK (4u << 20)
#define SPARSE_BLOCK 4096u

static int read_full(int fd, uint8_t *p, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t k = pread(fd, p, n, (off_t)off);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -EIO; /* the file shrank under us */
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

/* Returns the start of the next data region at or after off, or size when there is none. */
static int next_data(int fd, uint64_t off, uint64_t size, bool *seek_ok, uint64_t *ret)
{
	off_t o;

	if (!*seek_ok) {
		*ret = off;
		return 0;
	}
	o = lseek(fd, (off_t)off, SEEK_DATA);
	if (o < 0) {
		if (errno == ENXIO) {
			*ret = size; /* only a hole up to the end */
			return 0;
		}
		if (errno == EINVAL || errno == EOPNOTSUPP) {
			*seek_ok = false; /* the filesystem cannot tell: everything is data */
			*ret = off;
			return 0;
		}
		return -errno;
	}
	*ret = (uint64_t)o < size ? (uint64_t)o : size;
	return 0;
}

static int next_hole(int fd, uint64_t off, uint64_t size, bool seek_ok, uint64_t *ret)
{
	off_t o;

	if (!seek_ok) {
		*ret = size;
		return 0;
	}
	o = lseek(fd, (off_t)off, SEEK_HOLE);
	if (o < 0) {
		if (errno == ENXIO) {
			*ret = size;
			return 0;
		}
		return -errno;
	}
	*ret = (uint64_t)o < size ? (uint64_t)o : size;
	return 0;
}

int sparse_walk(int fd, uint64_t size, sparse_fn fn, void *ud)
{
	_cleanup_free_ uint8_t *buf = NULL;
	bool seek_ok = true;
	uint64_t off = 0;
	int r;

	if (fd < 0 || !fn)
		return -EINVAL;
	buf = malloc(SPARSE_CHUNK);
	if (!buf)
		return -ENOMEM;
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

	while (off < size) {
		uint64_t data = 0, hole = 0;

		r = next_data(fd, off, size, &seek_ok, &data);
		if (r < 0)
			return r;
		if (data > off) {
			r = fn(off, NULL, data - off, ud);
			if (r < 0)
				return r;
			off = data;
			if (off >= size)
				break;
		}
		r = next_hole(fd, off, size, seek_ok, &hole);
		if (r < 0)
			return r;
		if (hole <= off)
			hole = size; /* cannot happen after SEEK_DATA said data is here; be safe */
		while (off < hole) {
			size_t n = hole - off < SPARSE_CHUNK ? (size_t)(hole - off) : SPARSE_CHUNK;

			r = read_full(fd, buf, n, off);
			if (r < 0)
				return r;
			r = fn(off, buf, n, ud);
			if (r < 0)
				return r;
			off += n;
		}
	}
	return 0;
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static bool block_is_zero(const uint8_t *p, size_t n)
{
	/* n is at most SPARSE_BLOCK; compare with itself shifted, after the first byte. */
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

struct copy_state {
	int out;
	sparse_fn each;
	void *ud;
};

static int write_at(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t k = pwrite(fd, p, n, (off_t)off);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -EIO;
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

static int copy_piece(uint64_t off, const uint8_t *p, uint64_t len, void *ud)
{
	struct copy_state *c = ud;
	int r;

	if (p) {
		/* Write runs of non-zero blocks; zero blocks stay holes of the new file. */
		size_t n = (size_t)len, i = 0;

		while (i < n) {
			size_t start, end;

			while (i < n && block_is_zero(p + i, min_size(SPARSE_BLOCK, n - i)))
				i += min_size(SPARSE_BLOCK, n - i);
			if (i >= n)
				break;
			start = i;
			while (i < n && !block_is_zero(p + i, min_size(SPARSE_BLOCK, n - i)))
				i += min_size(SPARSE_BLOCK, n - i);
			end = i;
			r = write_at(c->out, p + start, end - start, off + start);
			if (r < 0)
				return r;
		}
	}
	return c->each ? c->each(off, p, len, c->ud) : 0;
}

int sparse_copy(int in, int out, uint64_t size, sparse_fn each, void *ud)
{
	struct copy_state c = {.out = out, .each = each, .ud = ud};

	if (in < 0 || out < 0 || size > INT64_MAX)
		return -EINVAL;
	if (ftruncate(out, (off_t)size) < 0)
		return -errno;
	return sparse_walk(in, size, copy_piece, &c);
}

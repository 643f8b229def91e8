/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for vm/savefile: the input is the start of a libvirt save image (slated
 * reads the ones in its image store). Whatever it holds, the parser reads inside it only
 * (ASan), answers with one of its documented codes, and what it takes is what the bytes say:
 * version 2, uncompressed, a non-empty XML ending at the data's first NUL, a cookie inside the
 * data after it, the stream right after the data and inside the file. A second parse that is
 * told the file is longer takes the same or asks for more. What it takes, the rewrite writes
 * back (aligned, and at the source's own offset) to an image that parses to the same XML and
 * cookie, with the same stream bytes.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/fs.h"
#include "util/macro.h"
#include "vm/savefile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a longer file than the input is said to be, for the second parse. */
#define EXTRA (128u * 1024u)

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool header_ok(const uint8_t *data, size_t size)
{
	return size >= VM_SAVE_HEADER_LEN &&
	       memcmp(data, VM_SAVE_MAGIC, strlen(VM_SAVE_MAGIC)) == 0;
}

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Aborts unless img is what the bytes say. */
static void check_parsed(const uint8_t *data, size_t size, uint64_t file_size,
                         const struct vm_save_image *img)
{
	const uint8_t *d = data + VM_SAVE_HEADER_LEN;
	size_t xml_len;

	if (!header_ok(data, size) || img->version != 2 || img->compressed != 0 ||
	    img->version != le32(data + 16) || img->data_len != le32(data + 20) ||
	    img->was_running != le32(data + 24) || img->cookie_off != le32(data + 32))
		abort();
	if (img->data_len == 0 || img->data_len > VM_SAVE_DATA_MAX ||
	    VM_SAVE_HEADER_LEN + (size_t)img->data_len > size)
		abort();
	if (img->stream_off != VM_SAVE_HEADER_LEN + (uint64_t)img->data_len ||
	    img->stream_off > file_size || img->size != file_size)
		abort();
	/* The XML: not empty, the data's bytes up to its first NUL. */
	if (!img->xml)
		abort();
	xml_len = strlen(img->xml);
	if (xml_len == 0 || xml_len >= img->data_len || memchr(d, '\0', xml_len) ||
	    memcmp(d, img->xml, xml_len) != 0 || d[xml_len] != '\0')
		abort();
	/* The cookie: there exactly when the header has an offset, after the XML's NUL,
	 * NUL-terminated inside the data. */
	if (img->cookie_off == 0) {
		if (img->cookie)
			abort();
	} else {
		size_t cookie_len;

		if (!img->cookie || img->cookie_off <= xml_len)
			abort();
		cookie_len = strlen(img->cookie);
		if ((uint64_t)img->cookie_off + cookie_len >= img->data_len ||
		    memcmp(d + img->cookie_off, img->cookie, cookie_len) != 0 ||
		    d[img->cookie_off + cookie_len] != '\0')
			abort();
	}
}

static int memfd_with(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-savefile", MFD_CLOEXEC);

	if (fd < 0)
		abort();
	if (size > 0 && pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	return fd;
}

/* Rewrites the image in in_fd (parsed as src) with its own XML; aborts unless the result parses
 * to the same XML and cookie and holds the same stream. */
static void check_rewrite(const uint8_t *data, size_t size, int in_fd,
                          const struct vm_save_image *src, bool align)
{
	_cleanup_close_ int out_fd = memfd_create("fuzz-savefile-out", MFD_CLOEXEC);
	struct vm_save_image out = {0};
	uint64_t stream_len = size - src->stream_off;
	_cleanup_free_ uint8_t *stream = malloc(stream_len + 1);
	bool cloned;
	int r;

	if (out_fd < 0 || !stream)
		abort();
	r = vm_save_rewrite(in_fd, src, src->xml, align, out_fd, &cloned);
	if (r == -ENOMEM)
		return;
	/* The XML and cookie came out of the data: they fit there, and aligned below the
	 * parser's limit unless the data was already near it. */
	if (r == -E2BIG && align && src->data_len > VM_SAVE_DATA_MAX - VM_SAVE_ROOM - VM_SAVE_ALIGN)
		return;
	if (r != 0)
		abort();
	r = vm_save_read(out_fd, &out);
	if (r == -ENOMEM)
		return;
	if (r != 0 || !same_str(out.xml, src->xml) || !same_str(out.cookie, src->cookie) ||
	    out.version != src->version || out.was_running != src->was_running)
		abort();
	if (align ? out.stream_off % VM_SAVE_ALIGN != 0 : out.stream_off != src->stream_off)
		abort();
	if (out.size != out.stream_off + stream_len ||
	    pread(out_fd, stream, stream_len + 1, (off_t)out.stream_off) != (ssize_t)stream_len ||
	    memcmp(stream, data + src->stream_off, stream_len) != 0)
		abort();
	vm_save_image_done(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vm_save_image img = {0}, longer = {0};
	_cleanup_close_ int fd = -1;
	int r, r2;

	/* As a whole file, then as the start of a longer one. */
	r = vm_save_parse(data, size, size, &img);
	r2 = vm_save_parse(data, size, (uint64_t)size + EXTRA, &longer);
	if (r == -ENOMEM || r2 == -ENOMEM) {
		vm_save_image_done(&img);
		vm_save_image_done(&longer);
		return 0;
	}
	if (r == -EOPNOTSUPP &&
	    (!header_ok(data, size) || (le32(data + 16) == 2 && le32(data + 28) == 0)))
		abort();
	if (r != 0 && r != SLATE_ERR_INVALID_FORMAT && r != -EOPNOTSUPP)
		abort(); /* -EAGAIN too: the whole file was there */
	if (r2 != 0 && r2 != SLATE_ERR_INVALID_FORMAT && r2 != -EOPNOTSUPP && r2 != -EAGAIN)
		abort();
	if (r2 == -EAGAIN &&
	    (!header_ok(data, size) || VM_SAVE_HEADER_LEN + (uint64_t)le32(data + 20) <= size))
		abort();
	/* A longer file takes whatever the whole one took, and refuses what it refused for
	 * anything but the file's size. */
	if (r == 0 && r2 != 0)
		abort();
	if (r == -EOPNOTSUPP && r2 != -EOPNOTSUPP)
		abort();
	if (r2 == 0) {
		check_parsed(data, size, (uint64_t)size + EXTRA, &longer);
		vm_save_image_done(&longer);
	}
	if (r != 0)
		return 0;
	check_parsed(data, size, size, &img);

	/* Read back from a file, then rewritten. */
	fd = memfd_with(data, size);
	vm_save_image_done(&img);
	r = vm_save_read(fd, &img);
	if (r == -ENOMEM)
		return 0;
	if (r != 0)
		abort();
	check_parsed(data, size, size, &img);
	check_rewrite(data, size, fd, &img, true);
	check_rewrite(data, size, fd, &img, false);
	vm_save_image_done(&img);
	return 0;
}

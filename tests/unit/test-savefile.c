/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libvirt's QEMU save image (vm/savefile.h), on synthetic images built here the way libvirt
 * writes them (qemu_saveimage.c: the 92-byte header, the XML, NUL, the cookie, NUL, zero
 * padding, then a stream of recognisable pseudo-random bytes): parsed with and without a
 * cookie, asked for more bytes when short, every refusal (magic, version, compression, data_len
 * and cookie_offset out of place, no NUL, an empty XML, a truncated file); rewritten with
 * another XML, aligned for FICLONERANGE (the offset, the room, the cookie and every stream byte
 * kept) or at the source's own offset (-E2BIG when the XML does not fit), from a stream already
 * aligned (cloned where the file system can, copied where it cannot: only the bytes are
 * checked), into a file that is not empty, and an aligned rewrite that would exceed the data
 * the parser takes.
 */

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "scratch.h"
#include "util/error.h"
#include "util/macro.h"
#include "vm/savefile.h"

#define XML "<domain type='qemu' id='3'><name>slate-base</name></domain>"
#define COOKIE "<cookie><cpu mode='custom'/></cookie>"
#define NEW_XML "<domain type='qemu'><name>slate-ws1</name><genid/></domain>"
#define STREAM_LEN (300u * 1024u + 123u) /* not a whole number of blocks */
#define PAD (64u * 1024u)                /* libvirt's padding after the XML */

/* Header field offsets. */
enum {
	O_VERSION = 16,
	O_DATA_LEN = 20,
	O_WAS_RUNNING = 24,
	O_COMPRESSED = 28,
	O_COOKIE_OFF = 32,
};

static char tmpdir[256];
static unsigned file_seq;

static void put_u32(uint8_t *p, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The stream's byte at offset i: a position-dependent hash, so that a shifted or clipped
 * copy never matches. */
static uint8_t stream_byte(uint64_t i)
{
	uint64_t x = (i + 1) * UINT64_C(0x9e3779b97f4a7c15);

	x ^= x >> 29;
	return (uint8_t)(x ^ (x >> 17));
}

struct image {
	uint8_t *p;
	size_t len;
	uint32_t data_len;
};

/* A save image as libvirt writes one: data_len 0 means the XML, cookie and libvirt's 64 KiB of
 * padding; cookie may be NULL. */
static struct image image_new(const char *xml, const char *cookie, uint32_t data_len,
                              size_t stream_len)
{
	size_t xml_len = strlen(xml) + 1, cookie_len = cookie ? strlen(cookie) + 1 : 0;
	struct image im;

	if (data_len == 0)
		data_len = (uint32_t)(xml_len + cookie_len + PAD);
	assert_true(xml_len + cookie_len <= data_len);
	im.data_len = data_len;
	im.len = VM_SAVE_HEADER_LEN + data_len + stream_len;
	im.p = calloc(1, im.len);
	assert_non_null(im.p);
	memcpy(im.p, VM_SAVE_MAGIC, strlen(VM_SAVE_MAGIC));
	put_u32(im.p + O_VERSION, 2);
	put_u32(im.p + O_DATA_LEN, data_len);
	put_u32(im.p + O_WAS_RUNNING, 1);
	put_u32(im.p + O_COMPRESSED, 0);
	put_u32(im.p + O_COOKIE_OFF, cookie ? (uint32_t)xml_len : 0);
	memcpy(im.p + VM_SAVE_HEADER_LEN, xml, xml_len);
	if (cookie)
		memcpy(im.p + VM_SAVE_HEADER_LEN + xml_len, cookie, cookie_len);
	for (size_t i = 0; i < stream_len; i++)
		im.p[VM_SAVE_HEADER_LEN + data_len + i] = stream_byte(i);
	return im;
}

static char *tmp_path(void)
{
	char *path = NULL;

	assert_true(asprintf(&path, "%s/f%u", tmpdir, file_seq++) > 0);
	return path;
}

/* A new file in the scratch directory holding p, open read-write at offset 0. */
static int file_with(const void *p, size_t len)
{
	_cleanup_free_ char *path = tmp_path();
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, p, len, 0), (ssize_t)len);
	return fd;
}

static int empty_file(void)
{
	return file_with("", 0);
}

static off_t file_size(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return st.st_size;
}

/* The stream of the image at fd (parsed as img) is the one image_new() wrote, byte for byte. */
static void assert_stream(int fd, const struct vm_save_image *img, size_t stream_len)
{
	_cleanup_free_ uint8_t *p = malloc(stream_len + 1);

	assert_non_null(p);
	assert_int_equal(img->size, img->stream_off + stream_len);
	assert_int_equal(file_size(fd), (off_t)img->size);
	assert_int_equal(pread(fd, p, stream_len + 1, (off_t)img->stream_off), (ssize_t)stream_len);
	for (size_t i = 0; i < stream_len; i++)
		if (p[i] != stream_byte(i))
			fail_msg("stream byte %zu differs", i);
}

static void test_parse(void **state)
{
	struct image im = image_new(XML, COOKIE, 0, STREAM_LEN);
	struct vm_save_image img = {0};
	int fd;

	(void)state;
	assert_int_equal(vm_save_parse(im.p, im.len, im.len, &img), 0);
	assert_string_equal(img.xml, XML);
	assert_string_equal(img.cookie, COOKIE);
	assert_int_equal(img.version, 2);
	assert_int_equal(img.was_running, 1);
	assert_int_equal(img.compressed, 0);
	assert_int_equal(img.data_len, im.data_len);
	assert_int_equal(img.cookie_off, strlen(XML) + 1);
	assert_int_equal(img.stream_off, VM_SAVE_HEADER_LEN + im.data_len);
	assert_int_equal(img.size, im.len);
	vm_save_image_done(&img);
	assert_null(img.xml);
	assert_null(img.cookie);
	vm_save_image_done(&img); /* twice: harmless */

	/* Only the header and the data are needed; the stream may be on disk. */
	assert_int_equal(vm_save_parse(im.p, VM_SAVE_HEADER_LEN + im.data_len, im.len, &img), 0);
	assert_int_equal(img.size, im.len);
	vm_save_image_done(&img);

	fd = file_with(im.p, im.len);
	assert_int_equal(vm_save_read(fd, &img), 0);
	assert_string_equal(img.xml, XML);
	assert_string_equal(img.cookie, COOKIE);
	assert_int_equal(img.size, im.len);
	assert_stream(fd, &img, STREAM_LEN);
	vm_save_image_done(&img);
	(void)close(fd);
	free(im.p);

	/* Without a cookie; no padding; no stream at all. */
	im = image_new(XML, NULL, (uint32_t)strlen(XML) + 1, 0);
	assert_int_equal(vm_save_parse(im.p, im.len, im.len, &img), 0);
	assert_string_equal(img.xml, XML);
	assert_null(img.cookie);
	assert_int_equal(img.cookie_off, 0);
	assert_int_equal(img.stream_off, im.len);
	vm_save_image_done(&img);
	fd = file_with(im.p, im.len);
	assert_int_equal(vm_save_read(fd, &img), 0);
	assert_null(img.cookie);
	vm_save_image_done(&img);
	(void)close(fd);
	free(im.p);

	/* An empty cookie is a cookie. */
	im = image_new(XML, "", 0, 16);
	assert_int_equal(vm_save_parse(im.p, im.len, im.len, &img), 0);
	assert_string_equal(img.cookie, "");
	vm_save_image_done(&img);
	free(im.p);
}

/* Fewer bytes than the header says: ask for them (the file holds them). */
static void test_short(void **state)
{
	struct image im = image_new(XML, COOKIE, 0, STREAM_LEN);
	struct vm_save_image img = {0};
	int fd;

	(void)state;
	assert_int_equal(vm_save_parse(im.p, VM_SAVE_HEADER_LEN, im.len, &img), -EAGAIN);
	assert_int_equal(vm_save_parse(im.p, VM_SAVE_HEADER_LEN + im.data_len - 1, im.len, &img),
	                 -EAGAIN);
	/* Not even a header: no save image. */
	assert_int_equal(vm_save_parse(im.p, VM_SAVE_HEADER_LEN - 1, im.len, &img),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(vm_save_parse(im.p, 0, 0, &img), SLATE_ERR_INVALID_FORMAT);

	/* A file cut inside its data, inside its header, empty: refused, never -EAGAIN. */
	fd = file_with(im.p, VM_SAVE_HEADER_LEN + im.data_len - 1);
	assert_int_equal(vm_save_read(fd, &img), SLATE_ERR_INVALID_FORMAT);
	(void)close(fd);
	fd = file_with(im.p, VM_SAVE_HEADER_LEN - 1);
	assert_int_equal(vm_save_read(fd, &img), SLATE_ERR_INVALID_FORMAT);
	(void)close(fd);
	fd = empty_file();
	assert_int_equal(vm_save_read(fd, &img), SLATE_ERR_INVALID_FORMAT);
	(void)close(fd);
	/* Cut right after its data: a save image whose stream is empty. */
	fd = file_with(im.p, VM_SAVE_HEADER_LEN + im.data_len);
	assert_int_equal(vm_save_read(fd, &img), 0);
	vm_save_image_done(&img);
	(void)close(fd);
	assert_int_equal(vm_save_read(-1, &img), -EBADF);
	free(im.p);
}

struct refusal {
	const char *what;
	unsigned off; /* a header field, or one past the header for the data's bytes */
	uint32_t value;
	int want;
};

static void test_refusals(void **state)
{
	/* The data: XML (0..xml_len-1), NUL, cookie, NUL, padding. */
	const uint32_t xml_len = (uint32_t)strlen(XML), cookie_end = xml_len + 1 + strlen(COOKIE);
	const struct refusal cases[] = {
	        {"bad magic", 0, 0x6b726f77, SLATE_ERR_INVALID_FORMAT},
	        {"partial save", 12, 0x74726150 /* "Part" */, SLATE_ERR_INVALID_FORMAT},
	        {"version 3", O_VERSION, 3, -EOPNOTSUPP},
	        {"version 1", O_VERSION, 1, -EOPNOTSUPP},
	        {"version, big-endian", O_VERSION, 0x02000000, -EOPNOTSUPP},
	        {"gzip", O_COMPRESSED, 1, -EOPNOTSUPP},
	        {"zstd", O_COMPRESSED, 5, -EOPNOTSUPP},
	        {"data_len 0", O_DATA_LEN, 0, SLATE_ERR_INVALID_FORMAT},
	        {"data_len past 1 MiB", O_DATA_LEN, VM_SAVE_DATA_MAX + 1, SLATE_ERR_INVALID_FORMAT},
	        {"data_len huge", O_DATA_LEN, UINT32_MAX, SLATE_ERR_INVALID_FORMAT},
	        {"data_len past the file", O_DATA_LEN, 2 * PAD + STREAM_LEN,
	         SLATE_ERR_INVALID_FORMAT},
	        {"cookie inside the XML", O_COOKIE_OFF, 5, SLATE_ERR_INVALID_FORMAT},
	        {"cookie at the XML's second byte", O_COOKIE_OFF, 1, SLATE_ERR_INVALID_FORMAT},
	        {"cookie at the XML's NUL", O_COOKIE_OFF, xml_len, SLATE_ERR_INVALID_FORMAT},
	        {"cookie at data_len", O_COOKIE_OFF, UINT32_MAX /* set below */,
	         SLATE_ERR_INVALID_FORMAT},
	        {"cookie past data_len", O_COOKIE_OFF, UINT32_MAX - 1, SLATE_ERR_INVALID_FORMAT},
	};
	struct image im = image_new(XML, COOKIE, 0, STREAM_LEN);
	struct vm_save_image img = {0};

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		_cleanup_free_ uint8_t *p = malloc(im.len);
		uint32_t v = cases[i].value;
		int fd, r;

		assert_non_null(p);
		memcpy(p, im.p, im.len);
		if (cases[i].off == O_COOKIE_OFF && v == UINT32_MAX)
			v = im.data_len;
		put_u32(p + cases[i].off, v);
		r = vm_save_parse(p, im.len, im.len, &img);
		if (r != cases[i].want)
			fail_msg("%s: %d, not %d", cases[i].what, r, cases[i].want);
		fd = file_with(p, im.len);
		r = vm_save_read(fd, &img);
		(void)close(fd);
		if (r != cases[i].want)
			fail_msg("%s (from a file): %d, not %d", cases[i].what, r, cases[i].want);
	}

	/* No NUL in the data: the XML would run into the stream. */
	{
		struct image b = image_new(XML, NULL, xml_len + 1, 64);
		b.p[VM_SAVE_HEADER_LEN + xml_len] = '>';
		assert_int_equal(vm_save_parse(b.p, b.len, b.len, &img), SLATE_ERR_INVALID_FORMAT);
		free(b.p);
	}
	/* An empty XML. */
	{
		struct image b = image_new(XML, NULL, 0, 64);
		b.p[VM_SAVE_HEADER_LEN] = '\0';
		assert_int_equal(vm_save_parse(b.p, b.len, b.len, &img), SLATE_ERR_INVALID_FORMAT);
		free(b.p);
	}
	/* A cookie with no NUL after it inside the data. */
	{
		struct image b = image_new(XML, COOKIE, cookie_end + 1, 64);
		assert_int_equal(vm_save_parse(b.p, b.len, b.len, &img), 0);
		vm_save_image_done(&img);
		b.p[VM_SAVE_HEADER_LEN + cookie_end] = '>';
		assert_int_equal(vm_save_parse(b.p, b.len, b.len, &img), SLATE_ERR_INVALID_FORMAT);
		/* A cookie offset into the padding of a cookie-less image: its NUL is there. */
		free(b.p);
		b = image_new(XML, NULL, 0, 64);
		put_u32(b.p + O_COOKIE_OFF, b.data_len - 1);
		assert_int_equal(vm_save_parse(b.p, b.len, b.len, &img), 0);
		assert_string_equal(img.cookie, "");
		vm_save_image_done(&img);
		free(b.p);
	}
	free(im.p);
}

/* Aligned: the stream at a multiple of VM_SAVE_ALIGN with VM_SAVE_ROOM to spare, the new XML,
 * the old cookie and every stream byte. */
static void test_rewrite_align(void **state)
{
	static const char *const cookies[] = {COOKIE, NULL};

	(void)state;
	for (size_t c = 0; c < ELEMENTSOF(cookies); c++) {
		struct image im = image_new(XML, cookies[c], 0, STREAM_LEN);
		struct vm_save_image src = {0}, out = {0}, again = {0};
		int in = file_with(im.p, im.len), fd = empty_file(), fd2 = empty_file();
		size_t used = strlen(NEW_XML) + 1 + (cookies[c] ? strlen(cookies[c]) + 1 : 0);
		bool cloned = true;

		assert_int_equal(vm_save_read(in, &src), 0);
		assert_int_not_equal(src.stream_off % VM_SAVE_ALIGN, 0);
		assert_int_equal(vm_save_rewrite(in, &src, NEW_XML, true, fd, &cloned), 0);
		assert_false(cloned); /* the offsets differ: copied */
		assert_int_equal(vm_save_read(fd, &out), 0);
		assert_int_equal(out.stream_off % VM_SAVE_ALIGN, 0);
		assert_true(out.stream_off >= VM_SAVE_HEADER_LEN + used + VM_SAVE_ROOM);
		assert_true(out.stream_off <
		            VM_SAVE_HEADER_LEN + used + VM_SAVE_ROOM + VM_SAVE_ALIGN);
		assert_string_equal(out.xml, NEW_XML);
		if (cookies[c]) {
			assert_string_equal(out.cookie, cookies[c]);
			assert_int_equal(out.cookie_off, strlen(NEW_XML) + 1);
		} else {
			assert_null(out.cookie);
			assert_int_equal(out.cookie_off, 0);
		}
		assert_int_equal(out.version, 2);
		assert_int_equal(out.was_running, 1);
		assert_int_equal(out.compressed, 0);
		assert_stream(fd, &out, STREAM_LEN);

		/* Aligned again with the same XML: the same offset, so a clone is tried. */
		assert_int_equal(vm_save_rewrite(fd, &out, out.xml, true, fd2, &cloned), 0);
		assert_int_equal(vm_save_read(fd2, &again), 0);
		assert_int_equal(again.stream_off, out.stream_off);
		assert_string_equal(again.xml, NEW_XML);
		assert_stream(fd2, &again, STREAM_LEN);
		print_message("aligned rewrite of an aligned image: %s\n",
		              cloned ? "cloned" : "copied (no reflink here)");

		vm_save_image_done(&src);
		vm_save_image_done(&out);
		vm_save_image_done(&again);
		(void)close(in);
		(void)close(fd);
		(void)close(fd2);
		free(im.p);
	}
}

/* At the source's offset: the XML must fit in the source's data. */
static void test_rewrite_keep(void **state)
{
	struct image im = image_new(XML, COOKIE, 0, STREAM_LEN);
	struct vm_save_image src = {0}, out = {0};
	int in = file_with(im.p, im.len), fd = empty_file();
	size_t room = im.data_len - (strlen(COOKIE) + 1) - 1; /* the longest XML that fits */
	_cleanup_free_ char *big = malloc(room + 2);
	bool cloned = true;

	(void)state;
	assert_non_null(big);
	assert_int_equal(vm_save_read(in, &src), 0);
	assert_int_equal(vm_save_rewrite(in, &src, NEW_XML, false, fd, &cloned), 0);
	assert_false(cloned);
	assert_int_equal(vm_save_read(fd, &out), 0);
	assert_int_equal(out.stream_off, src.stream_off);
	assert_int_equal(out.data_len, src.data_len);
	assert_string_equal(out.xml, NEW_XML);
	assert_string_equal(out.cookie, COOKIE);
	assert_stream(fd, &out, STREAM_LEN);
	vm_save_image_done(&out);
	(void)close(fd);

	/* Exactly full: XML, NUL, cookie, NUL. */
	memset(big, 'x', room);
	big[room] = '\0';
	fd = empty_file();
	assert_int_equal(vm_save_rewrite(in, &src, big, false, fd, NULL), 0);
	assert_int_equal(vm_save_read(fd, &out), 0);
	assert_string_equal(out.xml, big);
	assert_string_equal(out.cookie, COOKIE);
	assert_stream(fd, &out, STREAM_LEN);
	vm_save_image_done(&out);
	(void)close(fd);

	/* One byte more: does not fit, and nothing is written. */
	big[room] = 'x';
	big[room + 1] = '\0';
	fd = empty_file();
	assert_int_equal(vm_save_rewrite(in, &src, big, false, fd, NULL), -E2BIG);
	assert_int_equal(file_size(fd), 0);
	(void)close(fd);
	/* Nor does an empty XML. */
	fd = empty_file();
	assert_int_equal(vm_save_rewrite(in, &src, "", false, fd, NULL), -E2BIG);
	assert_int_equal(vm_save_rewrite(in, &src, "", true, fd, NULL), -E2BIG);
	(void)close(fd);

	vm_save_image_done(&src);
	(void)close(in);
	free(im.p);
}

/* A stream at an aligned offset (what an aligned rewrite makes): kept there, cloned where the
 * file system can, copied where it cannot; either way the same bytes. Whole blocks and a tail. */
static void test_rewrite_aligned_source(void **state)
{
	static const size_t stream_lens[] = {STREAM_LEN, 75u * VM_SAVE_ALIGN, 100, 0};

	(void)state;
	for (size_t s = 0; s < ELEMENTSOF(stream_lens); s++) {
		struct image im = image_new(XML, COOKIE, 20 * VM_SAVE_ALIGN - VM_SAVE_HEADER_LEN,
		                            stream_lens[s]);
		struct vm_save_image src = {0}, out = {0};
		int in = file_with(im.p, im.len), fd = empty_file();
		bool cloned = false;

		assert_int_equal(vm_save_read(in, &src), 0);
		assert_int_equal(src.stream_off, 20 * VM_SAVE_ALIGN);
		assert_int_equal(vm_save_rewrite(in, &src, NEW_XML, false, fd, &cloned), 0);
		print_message("stream of %zu bytes at an aligned offset: %s\n", stream_lens[s],
		              cloned ? "cloned" : "copied");
		assert_int_equal(vm_save_read(fd, &out), 0);
		assert_int_equal(out.stream_off, src.stream_off);
		assert_string_equal(out.xml, NEW_XML);
		assert_string_equal(out.cookie, COOKIE);
		assert_stream(fd, &out, stream_lens[s]);
		vm_save_image_done(&src);
		vm_save_image_done(&out);
		(void)close(in);
		(void)close(fd);
		free(im.p);
	}
}

/* The output file need not be empty, nor its offset at 0: its old bytes are gone and the
 * header is at the start. */
static void test_rewrite_reused_file(void **state)
{
	struct image im = image_new(XML, COOKIE, 0, STREAM_LEN);
	struct vm_save_image src = {0}, out = {0};
	int in = file_with(im.p, im.len), fd;
	uint8_t junk[8192];

	(void)state;
	memset(junk, 0xa5, sizeof(junk));
	fd = file_with(junk, sizeof(junk));
	assert_int_equal(lseek(fd, 0, SEEK_END), (off_t)sizeof(junk));
	assert_int_equal(vm_save_read(in, &src), 0);
	assert_int_equal(vm_save_rewrite(in, &src, NEW_XML, true, fd, NULL), 0);
	assert_int_equal(vm_save_read(fd, &out), 0);
	assert_string_equal(out.xml, NEW_XML);
	assert_string_equal(out.cookie, COOKIE);
	assert_stream(fd, &out, STREAM_LEN);
	vm_save_image_done(&src);
	vm_save_image_done(&out);
	(void)close(in);
	(void)close(fd);
	free(im.p);
}

/* What an aligned rewrite writes, the parser takes: an XML close to VM_SAVE_DATA_MAX either
 * fits with its room, or is refused with -E2BIG; never a file vm_save_read() refuses. */
static void test_rewrite_limits(void **state)
{
	static const size_t lens[] = {
	        VM_SAVE_DATA_MAX - VM_SAVE_ROOM - VM_SAVE_ALIGN - 200,
	        VM_SAVE_DATA_MAX - VM_SAVE_ROOM - 200,
	        VM_SAVE_DATA_MAX - 200,
	        VM_SAVE_DATA_MAX - strlen(COOKIE) - 2,
	        VM_SAVE_DATA_MAX,
	};
	struct image im = image_new(XML, COOKIE, 0, 4096);
	struct vm_save_image src = {0}, out = {0};
	int in = file_with(im.p, im.len);

	(void)state;
	assert_int_equal(vm_save_read(in, &src), 0);
	for (size_t i = 0; i < ELEMENTSOF(lens); i++) {
		_cleanup_free_ char *big = malloc(lens[i] + 1);
		int fd = empty_file(), r;

		assert_non_null(big);
		memset(big, 'x', lens[i]);
		big[lens[i]] = '\0';
		r = vm_save_rewrite(in, &src, big, true, fd, NULL);
		if (r == 0) {
			r = vm_save_read(fd, &out);
			if (r != 0)
				fail_msg("an XML of %zu bytes: written, then refused (%d)", lens[i],
				         r);
			assert_int_equal(out.stream_off % VM_SAVE_ALIGN, 0);
			assert_true(out.stream_off - VM_SAVE_HEADER_LEN - lens[i] >= VM_SAVE_ROOM);
			assert_string_equal(out.cookie, COOKIE);
			vm_save_image_done(&out);
		} else {
			/* Refused, and only when the room would not fit below VM_SAVE_DATA_MAX. */
			assert_int_equal(r, -E2BIG);
			assert_int_not_equal(i, 0);
		}
		(void)close(fd);
	}
	vm_save_image_done(&src);
	(void)close(in);
	free(im.p);
}

static int setup(void **state)
{
	(void)state;
	return test_mkdtemp(tmpdir, sizeof(tmpdir), "savefile");
}

static int teardown(void **state)
{
	(void)state;
	return test_rmtree(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse),
	        cmocka_unit_test(test_short),
	        cmocka_unit_test(test_refusals),
	        cmocka_unit_test(test_rewrite_align),
	        cmocka_unit_test(test_rewrite_keep),
	        cmocka_unit_test(test_rewrite_aligned_source),
	        cmocka_unit_test(test_rewrite_reused_file),
	        cmocka_unit_test(test_rewrite_limits),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}

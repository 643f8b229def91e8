/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Streaming expansion: round trips through none, gzip, zstd and xz (compressed here with the
 * same libraries) into sparse files, fed whole and in odd-sized pieces; holes stay holes, the
 * output and its sha256-1m digest (checked against a plain reference implementation here) are
 * exact; truncated, corrupt, trailing-garbage and wrong-size streams
 * are refused. A larger output (past the point where written data is flushed on the way) comes
 * out exact too, and a failing write stops the expansion with its error.
 */

#include <fcntl.h>
#include <lzma.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cmocka.h>

#include "image/expand.h"
#include "util/error.h"

#define MIB (1024u * 1024u)
#define RAW_SIZE (24u * MIB + 123u)

static uint8_t *raw;
static uint8_t raw_sha[32];
static char dir[64];

/* sha256-1m as doc/catalog.md defines it, the plain way: every block read and hashed. */
static void digest_ref_init(EVP_MD_CTX *outer, uint64_t size)
{
	uint8_t le[8];

	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(size >> (8 * i));
	assert_int_equal(EVP_DigestInit_ex(outer, EVP_sha256(), NULL), 1);
	assert_int_equal(EVP_DigestUpdate(outer, "slate-sha256-1m", 16), 1);
	assert_int_equal(EVP_DigestUpdate(outer, le, 8), 1);
}

static void digest_ref_block(EVP_MD_CTX *outer, const uint8_t *p, size_t n)
{
	uint8_t h[32];
	unsigned len;

	assert_int_equal(EVP_Digest(p, n, h, &len, EVP_sha256(), NULL), 1);
	assert_int_equal(EVP_DigestUpdate(outer, h, 32), 1);
}

static void digest_ref(const uint8_t *p, size_t size, uint8_t out[32])
{
	EVP_MD_CTX *outer = EVP_MD_CTX_new();

	assert_non_null(outer);
	digest_ref_init(outer, size);
	for (size_t off = 0; off < size; off += MIB)
		digest_ref_block(outer, p + off, size - off < MIB ? size - off : MIB);
	assert_int_equal(EVP_DigestFinal_ex(outer, out, NULL), 1);
	EVP_MD_CTX_free(outer);
}

static void fill_random(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

static int setup(void **state)
{
	raw = calloc(1, RAW_SIZE);
	if (!raw)
		return -1;
	/* Data in three places, zeros (future holes) everywhere else. */
	fill_random(raw + 1 * MIB, 2 * MIB, 1);
	fill_random(raw + 10 * MIB + 5, 3 * 4096, 2);
	fill_random(raw + RAW_SIZE - 100, 100, 3);
	digest_ref(raw, RAW_SIZE, raw_sha);
	(void)snprintf(dir, sizeof(dir), "%s", "/tmp/test-expand.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	free(raw);
	(void)rmdir(dir);
	return 0;
}

static uint8_t *compress_raw(enum catalog_compression c, size_t *ret_len)
{
	uint8_t *out = NULL;
	size_t cap = RAW_SIZE + RAW_SIZE / 8 + (1u << 16);

	out = malloc(cap);
	assert_non_null(out);
	switch (c) {
	case CATALOG_COMPRESSION_NONE:
		memcpy(out, raw, RAW_SIZE);
		*ret_len = RAW_SIZE;
		break;
	case CATALOG_COMPRESSION_GZIP: {
		z_stream z = {0};
		assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY),
		                 Z_OK);
		z.next_in = raw;
		z.avail_in = RAW_SIZE;
		z.next_out = out;
		z.avail_out = (uInt)cap;
		assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
		*ret_len = z.total_out;
		deflateEnd(&z);
		break;
	}
	case CATALOG_COMPRESSION_ZSTD: {
		size_t n = ZSTD_compress(out, cap, raw, RAW_SIZE, 3);
		assert_false(ZSTD_isError(n));
		*ret_len = n;
		break;
	}
	case CATALOG_COMPRESSION_XZ: {
		size_t pos = 0;
		assert_int_equal(lzma_easy_buffer_encode(1, LZMA_CHECK_CRC64, NULL, raw, RAW_SIZE,
		                                         out, &pos, cap),
		                 LZMA_OK);
		*ret_len = pos;
		break;
	}
	}
	return out;
}

static int out_file(const char *name)
{
	char path[128];
	int fd;

	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	(void)unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	(void)unlink(path); /* the fd is enough */
	return fd;
}

/* Expands comp (len bytes) in pieces of at most piece bytes (0: all at once); st (may be NULL)
 * gets the expander's account of it. */
static int expand_pieces_st(enum catalog_compression c, const uint8_t *comp, size_t len, int fd,
                            uint64_t size, size_t piece, uint8_t sha[32], struct expand_stats *st)
{
	struct expand *e = NULL;
	uint32_t seed = 7;
	size_t off = 0;
	int r;

	r = expand_new(c, fd, size, &e);
	if (r < 0)
		return r;
	while (off < len) {
		size_t n = len - off;
		if (piece) {
			seed = seed * 1103515245u + 12345u;
			n = 1 + (seed >> 8) % piece;
			if (n > len - off)
				n = len - off;
		}
		r = expand_write(e, comp + off, n);
		if (r < 0)
			goto out;
		off += n;
	}
	r = expand_finish(e, sha);
out:
	if (st)
		expand_get_stats(e, st);
	expand_free(e);
	return r;
}

static int expand_pieces(enum catalog_compression c, const uint8_t *comp, size_t len, int fd,
                         uint64_t size, size_t piece, uint8_t sha[32])
{
	return expand_pieces_st(c, comp, len, fd, size, piece, sha, NULL);
}

static void check_output(int fd)
{
	struct stat st;
	uint8_t *back = malloc(RAW_SIZE);

	assert_non_null(back);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, RAW_SIZE);
	assert_int_equal(pread(fd, back, RAW_SIZE, 0), RAW_SIZE);
	assert_memory_equal(back, raw, RAW_SIZE);
	free(back);
	/* About 2 MiB of data; the 22 MiB of zeros are holes (some slack for metadata). */
	assert_true((uint64_t)st.st_blocks * 512 < 3 * MIB);
}

static void round_trip(enum catalog_compression c)
{
	size_t len;
	uint8_t *comp = compress_raw(c, &len);
	size_t pieces[] = {0, 7001, 65536};

	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		uint8_t sha[32] = {0};
		int fd = out_file("rt");

		assert_int_equal(expand_pieces(c, comp, len, fd, RAW_SIZE, pieces[i], sha), 0);
		assert_memory_equal(sha, raw_sha, 32);
		check_output(fd);
		close(fd);
	}
	free(comp);
}

static void test_none(void **state)
{
	round_trip(CATALOG_COMPRESSION_NONE);
}
static void test_gzip(void **state)
{
	round_trip(CATALOG_COMPRESSION_GZIP);
}
static void test_zstd(void **state)
{
	round_trip(CATALOG_COMPRESSION_ZSTD);
}
static void test_xz(void **state)
{
	round_trip(CATALOG_COMPRESSION_XZ);
}

static void refusals(enum catalog_compression c)
{
	size_t len;
	uint8_t *comp = compress_raw(c, &len), *bad;
	uint8_t sha[32];
	int fd, r;

	/* Truncated. */
	fd = out_file("tr");
	r = expand_pieces(c, comp, len - 10, fd, RAW_SIZE, 0, sha);
	assert_int_equal(r, c == CATALOG_COMPRESSION_NONE ? SLATE_ERR_SIZE_MISMATCH
	                                                  : SLATE_ERR_INVALID_FORMAT);
	close(fd);
	/* Declared smaller than it expands to: stopped at once. */
	fd = out_file("small");
	assert_int_equal(expand_pieces(c, comp, len, fd, RAW_SIZE - 1, 4096, sha),
	                 SLATE_ERR_SIZE_MISMATCH);
	close(fd);
	/* Declared larger. */
	fd = out_file("large");
	assert_int_equal(expand_pieces(c, comp, len, fd, RAW_SIZE + 1, 0, sha),
	                 SLATE_ERR_SIZE_MISMATCH);
	close(fd);
	if (c == CATALOG_COMPRESSION_NONE) {
		free(comp);
		return;
	}
	/* A corrupt header; for gzip and xz also a flipped byte inside (their CRCs). */
	bad = malloc(len + 16);
	assert_non_null(bad);
	memcpy(bad, comp, len);
	bad[0] ^= 0xff;
	fd = out_file("hdr");
	assert_int_equal(expand_pieces(c, bad, len, fd, RAW_SIZE, 0, sha),
	                 SLATE_ERR_INVALID_FORMAT);
	close(fd);
	if (c != CATALOG_COMPRESSION_ZSTD) {
		memcpy(bad, comp, len);
		bad[len / 2] ^= 0x01;
		fd = out_file("mid");
		r = expand_pieces(c, bad, len, fd, RAW_SIZE, 0, sha);
		assert_true(r == SLATE_ERR_INVALID_FORMAT || r == SLATE_ERR_SIZE_MISMATCH);
		close(fd);
	}
	/* Trailing garbage after a complete stream. */
	memcpy(bad, comp, len);
	memcpy(bad + len, "garbage-garbage!", 16);
	fd = out_file("trail");
	r = expand_pieces(c, bad, len + 16, fd, RAW_SIZE, 0, sha);
	assert_true(r == SLATE_ERR_INVALID_FORMAT || r == SLATE_ERR_SIZE_MISMATCH);
	close(fd);
	free(bad);
	free(comp);
}

/* raw packed by expand_pack_zstd (slate-catalog pack), through two files. */
static uint8_t *pack_raw(size_t *ret_len)
{
	int in = out_file("pack-in"), out = out_file("pack-out");
	uint64_t n_in = 0, n_out = 0;
	uint8_t *comp, sha[32], want[32];
	unsigned sha_len;

	assert_int_equal(pwrite(in, raw, RAW_SIZE, 0), RAW_SIZE);
	assert_int_equal(lseek(in, 0, SEEK_SET), 0);
	assert_int_equal(expand_pack_zstd(in, out, 3, &n_in, &n_out, sha), 0);
	assert_int_equal(n_in, RAW_SIZE);
	comp = malloc(n_out);
	assert_non_null(comp);
	assert_int_equal(pread(out, comp, n_out, 0), (ssize_t)n_out);
	/* The SHA-256 it reports is the one of what it wrote. */
	assert_int_equal(EVP_Digest(comp, n_out, want, &sha_len, EVP_sha256(), NULL), 1);
	assert_memory_equal(sha, want, 32);
	/* An ordinary zstd stream: libzstd's one-shot decoder reads all the frames. */
	uint8_t *back = malloc(RAW_SIZE);
	assert_non_null(back);
	assert_int_equal(ZSTD_decompress(back, RAW_SIZE, comp, n_out), RAW_SIZE);
	assert_memory_equal(back, raw, RAW_SIZE);
	free(back);
	close(in);
	close(out);
	*ret_len = n_out;
	return comp;
}

/* Frames made here, one ZSTD_compress() each for the given output sizes (adding up to
 * RAW_SIZE), with a skippable frame after the first. */
static uint8_t *frames_raw(const size_t *sizes, size_t n, size_t *ret_len)
{
	size_t cap = RAW_SIZE + RAW_SIZE / 8 + (1u << 20), len = 0, off = 0;
	uint8_t *out = malloc(cap);

	assert_non_null(out);
	for (size_t i = 0; i < n; i++) {
		size_t z = ZSTD_compress(out + len, cap - len, raw + off, sizes[i], 1);
		assert_false(ZSTD_isError(z));
		len += z;
		off += sizes[i];
		if (i == 0) {
			/* Skippable frame: magic 0x184D2A53, length 5, five bytes. */
			static const uint8_t skip[] = {0x53, 0x2a, 0x4d, 0x18, 5,   0,  0,
			                               0,    'h',  'e',  'l',  'l', 'o'};
			memcpy(out + len, skip, sizeof(skip));
			len += sizeof(skip);
		}
	}
	assert_int_equal(off, RAW_SIZE);
	*ret_len = len;
	return out;
}

static void expect_frames(const uint8_t *comp, size_t len, uint64_t whole, uint64_t zero,
                          bool streamed)
{
	size_t pieces[] = {0, 7001, 65536, MIB + 3};

	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		struct expand_stats st = {0};
		uint8_t sha[32] = {0};
		int fd = out_file("frames");

		assert_int_equal(expand_pieces_st(CATALOG_COMPRESSION_ZSTD, comp, len, fd, RAW_SIZE,
		                                  pieces[i], sha, &st),
		                 0);
		assert_memory_equal(sha, raw_sha, 32);
		check_output(fd);
		close(fd);
		assert_int_equal(st.whole_frames, whole);
		assert_int_equal(st.zero_frames, zero);
		assert_true(streamed ? st.streamed > 0 : st.streamed == 0);
	}
}

/* Independent frames: each decoded whole straight into the expander's buffers, the ones of
 * zeros not decoded at all; whatever does not fit a buffer goes through the stream decoder. */
static void test_zstd_frames(void **state)
{
	size_t len;
	uint8_t *comp = pack_raw(&len);
	struct expand_stats st = {0};
	uint8_t sha[32];
	int fd;

	/* 24 MiB + 123 in 4 MiB frames: data in [0,4), [8,12) and the last 123 bytes; the four
	 * others are zeros. */
	expect_frames(comp, len, 3, 4, false);
	/* Declared one byte smaller: the last frame is refused before it is decoded. */
	fd = out_file("small");
	assert_int_equal(
	        expand_pieces(CATALOG_COMPRESSION_ZSTD, comp, len, fd, RAW_SIZE - 1, 0, sha),
	        SLATE_ERR_SIZE_MISMATCH);
	close(fd);
	/* Cut short inside the last frame; then with the last frame missing altogether. */
	fd = out_file("cut");
	assert_int_equal(
	        expand_pieces(CATALOG_COMPRESSION_ZSTD, comp, len - 3, fd, RAW_SIZE, 999, sha),
	        SLATE_ERR_INVALID_FORMAT);
	close(fd);
	free(comp);

	/* One frame for the whole image (zstd(1)): all of it streamed. */
	comp = compress_raw(CATALOG_COMPRESSION_ZSTD, &len);
	fd = out_file("single");
	assert_int_equal(
	        expand_pieces_st(CATALOG_COMPRESSION_ZSTD, comp, len, fd, RAW_SIZE, 0, sha, &st),
	        0);
	assert_memory_equal(sha, raw_sha, 32);
	assert_int_equal(st.whole_frames + st.zero_frames, 0);
	assert_int_equal(st.streamed, RAW_SIZE);
	close(fd);
	free(comp);

	/* Frames of other sizes, made by libzstd directly (so no frame is RLE blocks only: libzstd
	 * never starts a frame with one), a skippable frame among them: the second 3 MiB frame does
	 * not fit what is left of its buffer and is streamed, as is the last, 4 MiB + 123. */
	size_t sizes[] = {4 * MIB, 3 * MIB, 3 * MIB, 2 * MIB, 4 * MIB, 4 * MIB, 4 * MIB + 123};
	comp = frames_raw(sizes, sizeof(sizes) / sizeof(sizes[0]), &len);
	expect_frames(comp, len, 5, 0, true);
	free(comp);
}

/* A frame of RLE zero blocks is only taken as zeros when its blocks add up to what it declares;
 * otherwise the decoder sees it, and refuses it. */
static void test_zstd_lying_zero_frame(void **state)
{
	/* Magic; single segment, 4-byte content size (4 MiB); one last RLE block of 128 KiB of 0. */
	uint8_t f[] = {0x28, 0xb5, 0x2f, 0xfd, 0xa0, 0x00, 0x00,
	               0x40, 0x00, 0x03, 0x00, 0x10, 0x00};
	uint8_t sha[32];
	int fd = out_file("lie");

	assert_int_equal(expand_pieces(CATALOG_COMPRESSION_ZSTD, f, sizeof(f), fd, 4 * MIB, 0, sha),
	                 SLATE_ERR_INVALID_FORMAT);
	close(fd);
	/* The same frame telling the truth (32 blocks of 128 KiB) is 4 MiB of zeros. */
	uint8_t t[9 + 32 * 4];
	struct expand_stats st = {0};
	struct stat sb;
	memcpy(t, f, 9);
	for (int i = 0; i < 32; i++) {
		uint32_t bh = (i == 31 ? 1u : 0u) | (1u << 1) | ((128u << 10) << 3);
		t[9 + 4 * i] = (uint8_t)bh;
		t[9 + 4 * i + 1] = (uint8_t)(bh >> 8);
		t[9 + 4 * i + 2] = (uint8_t)(bh >> 16);
		t[9 + 4 * i + 3] = 0;
	}
	fd = out_file("truth");
	assert_int_equal(
	        expand_pieces_st(CATALOG_COMPRESSION_ZSTD, t, sizeof(t), fd, 4 * MIB, 0, sha, &st),
	        0);
	assert_int_equal(st.zero_frames, 1);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, 4 * MIB);
	assert_true(sb.st_blocks == 0);
	close(fd);
	/* And libzstd agrees that it is 4 MiB of zeros. */
	uint8_t *back = malloc(4 * MIB);
	assert_non_null(back);
	assert_int_equal(ZSTD_decompress(back, 4 * MIB, t, sizeof(t)), 4 * MIB);
	for (size_t i = 0; i < 4 * MIB; i++)
		if (back[i])
			fail();
	free(back);
}

static void test_refuse_none(void **state)
{
	refusals(CATALOG_COMPRESSION_NONE);
}
static void test_refuse_gzip(void **state)
{
	refusals(CATALOG_COMPRESSION_GZIP);
}
static void test_refuse_zstd(void **state)
{
	refusals(CATALOG_COMPRESSION_ZSTD);
}
static void test_refuse_xz(void **state)
{
	refusals(CATALOG_COMPRESSION_XZ);
}

static void test_expand_fd(void **state)
{
	size_t len;
	uint8_t *comp = compress_raw(CATALOG_COMPRESSION_ZSTD, &len), sha[32];
	int in = out_file("in"), out = out_file("out");

	assert_int_equal(pwrite(in, comp, len, 0), (ssize_t)len);
	assert_int_equal(lseek(in, 0, SEEK_SET), 0);
	assert_int_equal(expand_fd(CATALOG_COMPRESSION_ZSTD, in, out, RAW_SIZE, sha), 0);
	assert_memory_equal(sha, raw_sha, 32);
	check_output(out);
	close(in);
	close(out);
	free(comp);
	assert_int_equal(expand_new(CATALOG_COMPRESSION_ZSTD, -1, 1, &(struct expand *){NULL}),
	                 -EINVAL);
}

/* Piece k of the large output: 1 MiB, zeros for every fourth piece, else a pattern. */
static void large_piece(uint8_t *p, unsigned k)
{
	if (k % 4 == 0)
		memset(p, 0, MIB);
	else
		fill_random(p, MIB, k + 100);
}

static void test_large(void **state)
{
	const unsigned pieces = 176; /* 132 MiB of data: past the first flush */
	uint8_t *p = malloc(MIB), *back = malloc(MIB), sha[32], want[32];
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	struct expand *e = NULL;
	int fd = out_file("large");
	struct stat st;

	assert_non_null(p);
	assert_non_null(back);
	assert_non_null(md);
	digest_ref_init(md, (uint64_t)pieces * MIB);
	assert_int_equal(expand_new(CATALOG_COMPRESSION_NONE, fd, (uint64_t)pieces * MIB, &e), 0);
	for (unsigned k = 0; k < pieces; k++) {
		large_piece(p, k);
		digest_ref_block(md, p, MIB);
		assert_int_equal(expand_write(e, p, MIB), 0);
	}
	assert_int_equal(expand_finish(e, sha), 0);
	expand_free(e);
	assert_int_equal(EVP_DigestFinal_ex(md, want, NULL), 1);
	assert_memory_equal(sha, want, 32);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, (off_t)pieces * MIB);
	assert_true((uint64_t)st.st_blocks * 512 < (uint64_t)(pieces / 4 * 3 + 2) * MIB);
	for (unsigned k = 0; k < pieces; k++) {
		large_piece(p, k);
		assert_int_equal(pread(fd, back, MIB, (off_t)k * MIB), (ssize_t)MIB);
		assert_memory_equal(back, p, MIB);
	}
	EVP_MD_CTX_free(md);
	free(back);
	free(p);
	close(fd);
}

static void test_write_error(void **state)
{
	uint8_t *p = malloc(MIB), sha[32];
	struct expand *e = NULL;
	int fd = out_file("ro"), ro, r = 0;
	char path[128];

	/* The same file again, read-only: every write fails. */
	(void)snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(ro >= 0);
	assert_non_null(p);
	fill_random(p, MIB, 9);
	assert_int_equal(expand_new(CATALOG_COMPRESSION_NONE, ro, 64 * MIB, &e), 0);
	for (unsigned k = 0; k < 64 && r == 0; k++)
		r = expand_write(e, p, MIB);
	if (r == 0)
		r = expand_finish(e, sha);
	assert_int_equal(r, -EBADF);
	expand_free(e);
	free(p);
	close(ro);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_none),        cmocka_unit_test(test_gzip),
	        cmocka_unit_test(test_zstd),        cmocka_unit_test(test_xz),
	        cmocka_unit_test(test_zstd_frames), cmocka_unit_test(test_zstd_lying_zero_frame),
	        cmocka_unit_test(test_refuse_none), cmocka_unit_test(test_refuse_gzip),
	        cmocka_unit_test(test_refuse_zstd), cmocka_unit_test(test_refuse_xz),
	        cmocka_unit_test(test_expand_fd),   cmocka_unit_test(test_large),
	        cmocka_unit_test(test_write_error),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

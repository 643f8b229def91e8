/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The sha256-1m disk digest (image/verify.h, doc/catalog.md): against a plain reference
 * implementation here (every block read and hashed) and against python3's hashlib; the same
 * content gives the same digest written dense, sparse (holes) or anything between; one byte
 * changed anywhere (in data, in a hole that gets written, in the short last block) or a different
 * size changes it; the streaming API gives the same digest whatever the pieces, and refuses more
 * or fewer bytes than declared. The plain SHA-256 of a sparse file (older image.json files) still
 * equals sha256sum's.
 */

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "image/verify.h"
#include "util/error.h"

#define MIB (1024u * 1024u)
/* 9 chunks and a short last block: the two hashing threads and the tail both get work. */
#define SIZE (37u * MIB + 777u)

static uint8_t *content;
static char dir[64];

static void fill_random(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

/* sha256-1m the plain way. */
static void digest_ref(const uint8_t *p, size_t size, char out[VERIFY_DIGEST_STRLEN + 1])
{
	EVP_MD_CTX *outer = EVP_MD_CTX_new();
	uint8_t le[8], h[32];
	unsigned len;

	assert_non_null(outer);
	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)((uint64_t)size >> (8 * i));
	assert_int_equal(EVP_DigestInit_ex(outer, EVP_sha256(), NULL), 1);
	assert_int_equal(EVP_DigestUpdate(outer, "slate-sha256-1m", 16), 1);
	assert_int_equal(EVP_DigestUpdate(outer, le, 8), 1);
	for (size_t off = 0; off < size; off += MIB) {
		assert_int_equal(EVP_Digest(p + off, size - off < MIB ? size - off : MIB, h, &len,
		                            EVP_sha256(), NULL),
		                 1);
		assert_int_equal(EVP_DigestUpdate(outer, h, 32), 1);
	}
	assert_int_equal(EVP_DigestFinal_ex(outer, h, NULL), 1);
	EVP_MD_CTX_free(outer);
	verify_digest_string(h, out);
}

static int setup(void **state)
{
	content = calloc(1, SIZE);
	if (!content)
		return -1;
	/* Data across a block boundary, a few pages alone, data in the short last block; the
	 * rest zeros. */
	fill_random(content + 3 * MIB - 5000, 2 * MIB, 1);
	fill_random(content + 9 * MIB + 4096 * 7, 3 * 4096 + 1, 2);
	fill_random(content + 20 * MIB, 4 * MIB, 3);
	fill_random(content + SIZE - 300, 200, 4);
	(void)snprintf(dir, sizeof(dir), "%s", "/tmp/test-verify.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	free(content);
	(void)rmdir(dir);
	return 0;
}

static int dir_fd(void)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

static void pwrite_ok(int fd, const void *p, size_t n, uint64_t off)
{
	assert_int_equal(pwrite(fd, p, n, (off_t)off), (ssize_t)n);
}

/* name with p's bytes: every byte written (dense), or only the 4 KiB pages holding something
 * other than zeros (sparse: the rest are holes). */
static void write_file(const char *name, const uint8_t *p, size_t size, bool sparse)
{
	char path[128];
	int fd;

	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	for (size_t off = 0; off < size; off += 4096) {
		size_t n = size - off < 4096 ? size - off : 4096;
		if (!sparse || !verify_all_zero(p + off, n))
			pwrite_ok(fd, p + off, n, off);
	}
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

static void file_digest(const char *name, char out[VERIFY_DIGEST_STRLEN + 1])
{
	int dfd = dir_fd();

	assert_int_equal(verify_file_digest(dfd, name, out, NULL, NULL), 0);
	close(dfd);
}

static void unlink_file(const char *name)
{
	char path[128];

	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	(void)unlink(path);
}

static void test_zero_block(void **state)
{
	uint8_t *z = calloc(1, MIB), h[32];
	unsigned len;

	assert_non_null(z);
	assert_int_equal(EVP_Digest(z, MIB, h, &len, EVP_sha256(), NULL), 1);
	assert_memory_equal(h, VERIFY_ZERO_BLOCK_SHA256, 32);
	assert_int_equal(verify_block_sha256(z, MIB, h), 0);
	assert_memory_equal(h, VERIFY_ZERO_BLOCK_SHA256, 32);
	z[MIB - 1] = 1;
	assert_false(verify_all_zero(z, MIB));
	assert_int_equal(verify_block_sha256(z, MIB, h), 0);
	assert_memory_not_equal(h, VERIFY_ZERO_BLOCK_SHA256, 32);
	free(z);
}

/* An independent implementation of the definition in doc/catalog.md. */
static void python_digest(const char *name, char out[VERIFY_DIGEST_STRLEN + 1])
{
	static const char prog[] =
	        "import hashlib,struct,sys\n"
	        "f=open(sys.argv[1],'rb'); d=f.read()\n"
	        "o=hashlib.sha256(b'slate-sha256-1m\\0'+struct.pack('<Q',len(d)))\n"
	        "for i in range(0,len(d),1<<20): "
	        "o.update(hashlib.sha256(d[i:i+(1<<20)]).digest())\n"
	        "print('sha256-1m:'+o.hexdigest())\n";
	char path[128], cmd[512], line[128];
	FILE *f;

	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	(void)snprintf(cmd, sizeof(cmd), "python3 -c \"$P\" '%s'", path);
	assert_int_equal(setenv("P", prog, 1), 0);
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	assert_int_equal(pclose(f), 0);
	line[strcspn(line, "\n")] = '\0';
	assert_int_equal(strlen(line), VERIFY_DIGEST_STRLEN);
	memcpy(out, line, VERIFY_DIGEST_STRLEN + 1);
}

static void test_dense_sparse(void **state)
{
	char ref[VERIFY_DIGEST_STRLEN + 1], py[VERIFY_DIGEST_STRLEN + 1];
	char dense[VERIFY_DIGEST_STRLEN + 1], sparse[VERIFY_DIGEST_STRLEN + 1];
	char path[128];
	struct stat st;

	digest_ref(content, SIZE, ref);
	write_file("dense", content, SIZE, false);
	write_file("sparse", content, SIZE, true);
	(void)snprintf(path, sizeof(path), "%s/sparse", dir);
	assert_int_equal(stat(path, &st), 0);
	/* Holes indeed (about 6 MiB of data in 37 MiB). */
	assert_true((uint64_t)st.st_blocks * 512 < 12ull * MIB);
	file_digest("dense", dense);
	file_digest("sparse", sparse);
	assert_true(verify_digest_string_ok(dense));
	assert_string_equal(dense, ref);
	assert_string_equal(sparse, ref);
	python_digest("sparse", py);
	assert_string_equal(py, ref);
	unlink_file("dense");
	unlink_file("sparse");
}

/* Changes one byte at off in a sparse copy of content: the digest changes; put back (written
 * now, no longer a hole), it is the original again. */
static void flip_at(uint64_t off, const char *orig)
{
	char d[VERIFY_DIGEST_STRLEN + 1], path[128];
	uint8_t b = content[off] ^ 0x01;
	int fd;

	(void)snprintf(path, sizeof(path), "%s/flip", dir);
	write_file("flip", content, SIZE, true);
	fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	pwrite_ok(fd, &b, 1, off);
	file_digest("flip", d);
	assert_string_not_equal(d, orig);
	pwrite_ok(fd, &content[off], 1, off);
	assert_int_equal(fsync(fd), 0);
	close(fd);
	file_digest("flip", d);
	assert_string_equal(d, orig);
	unlink_file("flip");
}

static void test_one_byte(void **state)
{
	char orig[VERIFY_DIGEST_STRLEN + 1];

	digest_ref(content, SIZE, orig);
	flip_at(0, orig);                        /* a hole at the start */
	flip_at(3 * MIB - 4999, orig);           /* data */
	flip_at(15 * MIB + 12345, orig);         /* in the middle of a long hole */
	flip_at(24 * MIB - 1, orig);             /* the last byte of a data run */
	flip_at(SIZE - 1, orig);                 /* the short last block, in its zeros */
	flip_at((uint64_t)SIZE - 777 - 1, orig); /* the last byte of the last full block */
}

static void test_size(void **state)
{
	char a[VERIFY_DIGEST_STRLEN + 1], b[VERIFY_DIGEST_STRLEN + 1],
	        ref[VERIFY_DIGEST_STRLEN + 1];
	uint8_t *z = calloc(1, 2 * MIB + 1);

	assert_non_null(z);
	/* Only zeros: the sizes alone tell them apart, even at a block boundary. */
	write_file("z1", z, 2 * MIB, true);
	write_file("z2", z, 2 * MIB + 1, true);
	file_digest("z1", a);
	file_digest("z2", b);
	assert_string_not_equal(a, b);
	digest_ref(z, 2 * MIB, ref);
	assert_string_equal(a, ref);
	digest_ref(z, 2 * MIB + 1, ref);
	assert_string_equal(b, ref);
	/* The empty file: no block at all. */
	write_file("empty", z, 0, true);
	file_digest("empty", a);
	digest_ref(z, 0, ref);
	assert_string_equal(a, ref);
	unlink_file("z1");
	unlink_file("z2");
	unlink_file("empty");
	free(z);
}

/* The streaming API in odd pieces, zero runs given as such wherever content is zero. */
static void test_stream(void **state)
{
	static const size_t pieces[] = {1, 4095, 4096, 100000, MIB, MIB + 1, 3 * MIB + 17};
	char ref[VERIFY_DIGEST_STRLEN + 1], got[VERIFY_DIGEST_STRLEN + 1];
	struct verify_digest d;
	uint8_t out[32];

	digest_ref(content, SIZE, ref);
	for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
		size_t off = 0;

		assert_int_equal(verify_digest_init(&d, SIZE), 0);
		while (off < SIZE) {
			size_t n = SIZE - off < pieces[k] ? SIZE - off : pieces[k];
			if (verify_all_zero(content + off, n))
				assert_int_equal(verify_digest_zeros(&d, n), 0);
			else
				assert_int_equal(verify_digest_update(&d, content + off, n), 0);
			off += n;
		}
		assert_int_equal(verify_digest_final(&d, out), 0);
		verify_digest_string(out, got);
		assert_string_equal(got, ref);
	}
	/* Fewer bytes than declared, or more: refused. */
	assert_int_equal(verify_digest_init(&d, 10), 0);
	assert_int_equal(verify_digest_update(&d, content, 9), 0);
	assert_int_equal(verify_digest_final(&d, out), -EINVAL);
	assert_int_equal(verify_digest_init(&d, 10), 0);
	assert_int_equal(verify_digest_zeros(&d, 11), -EINVAL);
	verify_digest_done(&d);
	assert_int_equal(verify_digest_init(&d, 2 * MIB), 0);
	assert_int_equal(verify_digest_update(&d, content, 10), 0);
	/* A block hash only at a block boundary. */
	assert_int_equal(verify_digest_add_block(&d, VERIFY_ZERO_BLOCK_SHA256, MIB), -EINVAL);
	verify_digest_done(&d);
}

static void test_strings(void **state)
{
	char s[VERIFY_DIGEST_STRLEN + 1];

	verify_digest_string(VERIFY_ZERO_BLOCK_SHA256, s);
	assert_string_equal(
	        s, "sha256-1m:30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58");
	assert_true(verify_digest_string_ok(s));
	s[20] = 'A';
	assert_false(verify_digest_string_ok(s));
	assert_false(verify_digest_string_ok(
	        "30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58"));
	assert_false(verify_digest_string_ok("sha256-1m:30e1"));
	assert_false(verify_digest_string_ok(NULL));
}

/* Older image.json files have the plain SHA-256: it still equals sha256sum's on a sparse file. */
static void test_plain(void **state)
{
	char path[128], cmd[256], want[65], got[65];
	uint8_t h[32];
	FILE *f;
	int dfd = dir_fd();

	write_file("plain", content, SIZE, true);
	assert_int_equal(verify_file_sha256(dfd, "plain", h, NULL, NULL), 0);
	verify_hex(h, got);
	(void)snprintf(path, sizeof(path), "%s/plain", dir);
	(void)snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
	f = popen(cmd, "r");
	assert_non_null(f);
	assert_non_null(fgets(want, sizeof(want), f));
	(void)pclose(f);
	assert_string_equal(got, want);
	close(dfd);
	unlink_file("plain");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_zero_block), cmocka_unit_test(test_dense_sparse),
	        cmocka_unit_test(test_one_byte),   cmocka_unit_test(test_size),
	        cmocka_unit_test(test_stream),     cmocka_unit_test(test_strings),
	        cmocka_unit_test(test_plain),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

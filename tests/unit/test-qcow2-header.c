/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The strict qcow2 header check (image/qcow2-header.h; doc/security.md, "Catalog"): a hand-built version 3 header
 * (QEMU's docs/interop/qcow2.txt) with one field or extension changed per case, table-driven:
 * what slate takes (v2, v3, zstd, extended L2, lazy refcounts, bitmaps, unknown extensions) and
 * every refusal (backing file, external data file by bit, by name or by the raw autoclear bit,
 * encryption, dirty, corrupt, unknown incompatible bits, compression type disagreements, bad
 * magic, version, cluster_bits, refcount_order, header_length, misaligned tables, a file shorter
 * than its header, extensions past the cluster or the file or without an end marker,
 * duplicates). Then images made by the real qemu-img (skipped without it): its plain, v2, zstd,
 * extended L2 and lazy-refcount images pass; its data_file (naming a file holding a marker),
 * data_file_raw, backing and LUKS images are refused. Then the fd reader: bounded, regular files
 * only.
 */

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "image/qcow2-header.h"
#include "scratch.h"
#include "storage/spawn.h"
#include "util/error.h"
#include "util/macro.h"

#define CLUSTER_BITS 16u
#define CLUSTER (1u << CLUSTER_BITS)
#define FILE_LEN (4u * CLUSTER) /* header cluster, refcount table, refcount block, L1 */
#define MARKER "SLATE-QCOW2-HOST-MARKER"

/* Header field offsets. */
enum {
	O_MAGIC = 0,
	O_VERSION = 4,
	O_BACKING_OFFSET = 8,
	O_BACKING_SIZE = 16,
	O_CLUSTER_BITS = 20,
	O_SIZE = 24,
	O_CRYPT = 32,
	O_L1_SIZE = 36,
	O_L1_OFFSET = 40,
	O_REFCOUNT_OFFSET = 48,
	O_REFCOUNT_CLUSTERS = 56,
	O_NB_SNAPSHOTS = 60,
	O_SNAPSHOTS_OFFSET = 64,
	O_INCOMPAT = 72,
	O_COMPAT = 80,
	O_AUTOCLEAR = 88,
	O_REFCOUNT_ORDER = 96,
	O_HEADER_LENGTH = 100,
	O_COMPRESSION = 104,
	HEADER_LENGTH = 112,
};

static uint8_t img[FILE_LEN];
static char tmpdir[256];

static void put_be(uint8_t *p, unsigned width, uint64_t v)
{
	for (unsigned i = 0; i < width; i++)
		p[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
}

/* Appends an extension at *off (data padded to 8) and returns nothing; the caller ends it. */
static void ext_put(uint8_t *b, size_t *off, uint32_t type, const void *data, uint32_t len)
{
	put_be(b + *off, 4, type);
	put_be(b + *off + 4, 4, len);
	if (len)
		memcpy(b + *off + 8, data, len);
	*off += 8 + ((len + 7u) & ~7u);
}

static void ext_end(uint8_t *b, size_t off)
{
	memset(b + off, 0, 8);
}

/* What qemu-img writes for an empty 1 GiB image, less the L1 and refcount contents nobody
 * checks here: version 3, 64 KiB clusters, a feature name table, the end marker. */
static void build_base(void)
{
	uint8_t feature[48] = {0, 0, 'd', 'i', 'r', 't', 'y', ' ', 'b', 'i', 't'};
	size_t off = HEADER_LENGTH;

	memset(img, 0, sizeof(img));
	memcpy(img, "QFI\xfb", 4);
	put_be(img + O_VERSION, 4, 3);
	put_be(img + O_CLUSTER_BITS, 4, CLUSTER_BITS);
	put_be(img + O_SIZE, 8, UINT64_C(1) << 30);
	put_be(img + O_L1_SIZE, 4, 2);
	put_be(img + O_L1_OFFSET, 8, 3 * CLUSTER);
	put_be(img + O_REFCOUNT_OFFSET, 8, CLUSTER);
	put_be(img + O_REFCOUNT_CLUSTERS, 4, 1);
	put_be(img + O_REFCOUNT_ORDER, 4, 4);
	put_be(img + O_HEADER_LENGTH, 4, HEADER_LENGTH);
	ext_put(img, &off, QCOW2_EXT_FEATURE_TABLE, feature, sizeof(feature));
	ext_end(img, off);
}

/* ---- edits the table's cases apply ---------------------------------------------------------- */

static void edit_v2(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + O_VERSION, 4, 2);
	memset(b + 72, 0, 256); /* no v3 fields; the extension area starts at 72 and is empty */
}

static void edit_v2_data_file(uint8_t *b, size_t *len)
{
	static const char name[] = "/var/lib/slate/install/master.key";
	size_t off = 72;

	edit_v2(b, len);
	ext_put(b, &off, QCOW2_EXT_DATA_FILE, name, sizeof(name) - 1);
	ext_end(b, off);
}

/* An extension list replacing the base's: kinds given as type/len pairs of filler data. */
static void put_exts(uint8_t *b, const uint32_t *types, const uint32_t *lens, size_t n)
{
	static const uint8_t filler[256] = {1};
	size_t off = HEADER_LENGTH;

	memset(b + HEADER_LENGTH, 0, 512);
	for (size_t i = 0; i < n; i++)
		ext_put(b, &off, types[i], filler, lens[i]);
	ext_end(b, off);
}

static void edit_known_exts(uint8_t *b, size_t *len)
{
	static const uint32_t t[] = {QCOW2_EXT_FEATURE_TABLE, QCOW2_EXT_BITMAPS,
	                             QCOW2_EXT_BACKING_FORMAT, 0x12345678u};
	static const uint32_t l[] = {96, 24, 3, 5};
	(void)len;
	put_exts(b, t, l, ELEMENTSOF(t));
}

/* A data-file extension naming name, the only extension. */
static void put_data_file_ext(uint8_t *b, const char *name)
{
	size_t off = HEADER_LENGTH;

	ext_put(b, &off, QCOW2_EXT_DATA_FILE, name, strlen(name));
	ext_end(b, off);
}

static void edit_data_file_ext(uint8_t *b, size_t *len)
{
	(void)len;
	put_data_file_ext(b, "/var/lib/slate/install/master.key");
}

static void edit_data_file_ext_hostile_name(uint8_t *b, size_t *len)
{
	(void)len;
	put_data_file_ext(b, "/dev/sda\n\x1b[31m\"");
}

static void edit_crypto_ext(uint8_t *b, size_t *len)
{
	static const uint32_t t[] = {QCOW2_EXT_CRYPTO};
	static const uint32_t l[] = {16};
	(void)len;
	put_exts(b, t, l, 1);
}

static void edit_duplicate_feature_table(uint8_t *b, size_t *len)
{
	static const uint32_t t[] = {QCOW2_EXT_FEATURE_TABLE, QCOW2_EXT_FEATURE_TABLE};
	static const uint32_t l[] = {48, 48};
	(void)len;
	put_exts(b, t, l, 2);
}

static void edit_unknown_ext_twice(uint8_t *b, size_t *len)
{
	static const uint32_t t[] = {0x12345678u, 0x12345678u};
	static const uint32_t l[] = {8, 8};
	(void)len;
	put_exts(b, t, l, 2);
}

/* An extension whose length runs past the first cluster. */
static void edit_ext_past_cluster(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + HEADER_LENGTH, 4, 0x12345678u);
	put_be(b + HEADER_LENGTH + 4, 4, CLUSTER - HEADER_LENGTH - 8 + 1);
}

/* An extension that fits the file, but whose padding does not (the file ends mid-padding). */
static void edit_ext_padding_past_file(uint8_t *b, size_t *len)
{
	put_be(b + HEADER_LENGTH, 4, 0x12345678u);
	put_be(b + HEADER_LENGTH + 4, 4, 5);
	*len = HEADER_LENGTH + 8 + 5;
}

/* A length of 4 GiB - 1: no wrap-around in the bounds check. */
static void edit_ext_huge(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + HEADER_LENGTH, 4, QCOW2_EXT_FEATURE_TABLE);
	put_be(b + HEADER_LENGTH + 4, 4, UINT32_MAX);
}

/* Extensions filling the whole cluster, no end marker. */
static void edit_no_end_marker(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + HEADER_LENGTH, 4, 0x12345678u);
	put_be(b + HEADER_LENGTH + 4, 4, CLUSTER - HEADER_LENGTH - 8);
}

/* The file ends inside the extension area (a short file, as a truncated download would be). */
static void edit_short_file_ext(uint8_t *b, size_t *len)
{
	put_be(b + HEADER_LENGTH, 4, 0x12345678u);
	put_be(b + HEADER_LENGTH + 4, 4, 64);
	*len = HEADER_LENGTH + 8 + 32;
}

static void edit_end_marker_cut(uint8_t *b, size_t *len)
{
	(void)b;
	*len = HEADER_LENGTH + 8 + 48 + 4; /* half the end marker */
}

static void edit_zstd(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + O_INCOMPAT, 8, QCOW2_INCOMPAT_COMPRESSION);
	b[O_COMPRESSION] = 1;
}

static void edit_zstd_short_header(uint8_t *b, size_t *len)
{
	size_t off = 104;

	(void)len;
	put_be(b + O_INCOMPAT, 8, QCOW2_INCOMPAT_COMPRESSION);
	put_be(b + O_HEADER_LENGTH, 4, 104);
	memset(b + 104, 0, 256);
	ext_end(b, off);
}

static void edit_extl2(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + O_INCOMPAT, 8, QCOW2_INCOMPAT_EXTL2);
}

static void edit_extl2_small_clusters(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + O_INCOMPAT, 8, QCOW2_INCOMPAT_EXTL2);
	put_be(b + O_CLUSTER_BITS, 4, 12);
	put_be(b + O_L1_OFFSET, 8, 3 * 4096);
	put_be(b + O_REFCOUNT_OFFSET, 8, 4096);
}

static void edit_2m_clusters(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + O_CLUSTER_BITS, 4, 21);
	put_be(b + O_L1_OFFSET, 8, 0);
	put_be(b + O_REFCOUNT_OFFSET, 8, 0);
}

/* A 512-byte cluster, the smallest: the extension area ends at 512. */
static void edit_small_cluster(uint8_t *b, size_t *len)
{
	(void)len;
	put_be(b + O_CLUSTER_BITS, 4, 9);
	put_be(b + O_L1_OFFSET, 8, 3 * 512);
	put_be(b + O_REFCOUNT_OFFSET, 8, 512);
}

static void edit_small_cluster_ext_past(uint8_t *b, size_t *len)
{
	edit_small_cluster(b, len);
	put_be(b + HEADER_LENGTH, 4, 0x12345678u);
	put_be(b + HEADER_LENGTH + 4, 4, 512 - HEADER_LENGTH); /* 8 bytes too many */
}

/* One case: the base header, up to two fields set (width 0: none), then edit (may be NULL). */
#define POKE(off, width, v) off, width, v
#define NO_POKE 0, 0, 0
struct header_case {
	const char *name;
	int want;
	const char *msg; /* a part of the refusal */
	void (*edit)(uint8_t *b, size_t *len);
	size_t len; /* 0: FILE_LEN; 1: an empty file */
	unsigned off1, width1;
	uint64_t v1;
	unsigned off2, width2;
	uint64_t v2;
};

#define REFUSED SLATE_ERR_INVALID_FORMAT

static const struct header_case cases[] = {
        /* taken */
        {"qemu-img's empty v3 image", 0, NULL, NULL, 0, NO_POKE, NO_POKE},
        {"v2 (compat=0.10)", 0, NULL, edit_v2, 0, NO_POKE, NO_POKE},
        {"known and unknown extensions", 0, NULL, edit_known_exts, 0, NO_POKE, NO_POKE},
        {"an unknown extension twice (nothing says what it is)", 0, NULL, edit_unknown_ext_twice, 0,
         NO_POKE, NO_POKE},
        {"zstd compression", 0, NULL, edit_zstd, 0, NO_POKE, NO_POKE},
        {"extended L2 entries", 0, NULL, edit_extl2, 0, NO_POKE, NO_POKE},
        {"lazy refcounts and unknown compatible bits", 0, NULL, NULL, 0,
         POKE(O_COMPAT, 8, 0xffffffffffffffffu), NO_POKE},
        {"bitmaps and unknown autoclear bits", 0, NULL, NULL, 0,
         POKE(O_AUTOCLEAR, 8, 0xfffffffffffffffdu), NO_POKE},
        {"2 MiB clusters", 0, NULL, edit_2m_clusters, 0, NO_POKE, NO_POKE},
        {"512-byte clusters", 0, NULL, edit_small_cluster, 0, NO_POKE, NO_POKE},
        {"refcount_order 6", 0, NULL, NULL, 0, POKE(O_REFCOUNT_ORDER, 4, 6), NO_POKE},
        {"a file exactly its header and end marker", 0, NULL, NULL, HEADER_LENGTH + 8 + 48 + 8,
         NO_POKE, NO_POKE},
        /* other files */
        {"a backing file", REFUSED, "backing file", NULL, 0, POKE(O_BACKING_OFFSET, 8, 512),
         POKE(O_BACKING_SIZE, 4, 10)},
        {"a backing file size alone", REFUSED, "backing file", NULL, 0, POKE(O_BACKING_SIZE, 4, 1),
         NO_POKE},
        {"a backing file offset alone", REFUSED, "backing file", NULL, 0,
         POKE(O_BACKING_OFFSET, 8, 4096), NO_POKE},
        {"the external data file bit", REFUSED, "external data file (incompatible feature bit 2)",
         NULL, 0, POKE(O_INCOMPAT, 8, QCOW2_INCOMPAT_DATA_FILE), NO_POKE},
        {"a data file name extension", REFUSED,
         "external data file (\"/var/lib/slate/install/master.key\")", edit_data_file_ext, 0,
         NO_POKE, NO_POKE},
        {"a data file name and the bit", REFUSED,
         "external data file (\"/var/lib/slate/install/master.key\")", edit_data_file_ext, 0,
         POKE(O_INCOMPAT, 8, QCOW2_INCOMPAT_DATA_FILE),
         POKE(O_AUTOCLEAR, 8, QCOW2_AUTOCLEAR_DATA_FILE_RAW)},
        {"a data file name with control characters", REFUSED,
         "external data file (\"/dev/sda??[31m?\")", edit_data_file_ext_hostile_name, 0, NO_POKE,
         NO_POKE},
        {"a data file name in a v2 image", REFUSED, "external data file", edit_v2_data_file, 0,
         NO_POKE, NO_POKE},
        {"the raw external data autoclear bit", REFUSED,
         "raw external data file (autoclear feature bit 1)", NULL, 0,
         POKE(O_AUTOCLEAR, 8, QCOW2_AUTOCLEAR_DATA_FILE_RAW), NO_POKE},
        /* encryption */
        {"AES encryption", REFUSED, "encrypted (crypt_method 1)", NULL, 0, POKE(O_CRYPT, 4, 1),
         NO_POKE},
        {"LUKS encryption", REFUSED, "encrypted (crypt_method 2)", NULL, 0, POKE(O_CRYPT, 4, 2),
         NO_POKE},
        {"a full disk encryption header", REFUSED, "full disk encryption header", edit_crypto_ext,
         0, NO_POKE, NO_POKE},
        /* incompatible features */
        {"dirty", REFUSED, "marked dirty", NULL, 0, POKE(O_INCOMPAT, 8, QCOW2_INCOMPAT_DIRTY),
         NO_POKE},
        {"corrupt", REFUSED, "marked corrupt", NULL, 0, POKE(O_INCOMPAT, 8, QCOW2_INCOMPAT_CORRUPT),
         NO_POKE},
        {"unknown incompatible bit 5", REFUSED, "unknown incompatible feature bits 0x20", NULL, 0,
         POKE(O_INCOMPAT, 8, 1u << 5), NO_POKE},
        {"unknown incompatible bit 63", REFUSED,
         "unknown incompatible feature bits 0x8000000000000000", NULL, 0,
         POKE(O_INCOMPAT, 8, UINT64_C(1) << 63), NO_POKE},
        {"compression type 2", REFUSED, "compression type 2", NULL, 0,
         POKE(O_INCOMPAT, 8, QCOW2_INCOMPAT_COMPRESSION), POKE(O_COMPRESSION, 1, 2)},
        {"the compression bit with zlib", REFUSED, "says set but compression_type is 0", NULL, 0,
         POKE(O_INCOMPAT, 8, QCOW2_INCOMPAT_COMPRESSION), NO_POKE},
        {"zstd without the compression bit", REFUSED, "says clear but compression_type is 1", NULL,
         0, POKE(O_COMPRESSION, 1, 1), NO_POKE},
        {"the compression bit, no compression_type field", REFUSED, "compression_type is 0",
         edit_zstd_short_header, 0, NO_POKE, NO_POKE},
        {"extended L2 entries with 4 KiB clusters", REFUSED,
         "extended L2 entries with cluster_bits 12", edit_extl2_small_clusters, 0, NO_POKE,
         NO_POKE},
        /* structure */
        {"bad magic", REFUSED, "not a qcow2 image", NULL, 0, POKE(O_MAGIC, 4, 0x514649fcu),
         NO_POKE},
        {"qcow version 1", REFUSED, "qcow2 version 1", NULL, 0, POKE(O_VERSION, 4, 1), NO_POKE},
        {"version 4", REFUSED, "qcow2 version 4", NULL, 0, POKE(O_VERSION, 4, 4), NO_POKE},
        {"cluster_bits 8", REFUSED, "cluster_bits 8", NULL, 0, POKE(O_CLUSTER_BITS, 4, 8), NO_POKE},
        {"cluster_bits 22", REFUSED, "cluster_bits 22", NULL, 0, POKE(O_CLUSTER_BITS, 4, 22),
         NO_POKE},
        {"cluster_bits 2^32 - 1", REFUSED, "cluster_bits 4294967295", NULL, 0,
         POKE(O_CLUSTER_BITS, 4, UINT32_MAX), NO_POKE},
        {"refcount_order 7", REFUSED, "refcount_order 7", NULL, 0, POKE(O_REFCOUNT_ORDER, 4, 7),
         NO_POKE},
        {"header_length 100", REFUSED, "header_length 100", NULL, 0, POKE(O_HEADER_LENGTH, 4, 100),
         NO_POKE},
        {"header_length 108 (not a multiple of 8)", REFUSED, "header_length 108", NULL, 0,
         POKE(O_HEADER_LENGTH, 4, 108), NO_POKE},
        {"header_length past the cluster", REFUSED, "header_length 65544", NULL, 0,
         POKE(O_HEADER_LENGTH, 4, CLUSTER + 8), NO_POKE},
        {"header_length 2^32 - 8", REFUSED, "header_length", NULL, 0,
         POKE(O_HEADER_LENGTH, 4, UINT32_MAX - 7), NO_POKE},
        {"header_length past the end of the file", REFUSED, "shorter than its header (4096)", NULL,
         1024, POKE(O_HEADER_LENGTH, 4, 4096), NO_POKE},
        {"an L1 table off a cluster boundary", REFUSED, "cluster boundary", NULL, 0,
         POKE(O_L1_OFFSET, 8, 3 * CLUSTER + 512), NO_POKE},
        {"a refcount table off a cluster boundary", REFUSED, "cluster boundary", NULL, 0,
         POKE(O_REFCOUNT_OFFSET, 8, 4096), NO_POKE},
        {"a snapshot table off a cluster boundary", REFUSED, "cluster boundary", NULL, 0,
         POKE(O_NB_SNAPSHOTS, 4, 1), POKE(O_SNAPSHOTS_OFFSET, 8, 100)},
        /* truncated */
        {"an empty file", REFUSED, "shorter than a qcow2 header", NULL, 1, NO_POKE, NO_POKE},
        {"71 bytes", REFUSED, "71 bytes, shorter than a qcow2 header", NULL, 71, NO_POKE, NO_POKE},
        {"a v3 header cut at 100 bytes", REFUSED, "shorter than a version 3", NULL, 100, NO_POKE,
         NO_POKE},
        {"a v3 header cut before its end (112)", REFUSED, "shorter than its header (112)", NULL,
         110, NO_POKE, NO_POKE},
        {"a v3 header without extensions", REFUSED, "without an end marker", NULL, HEADER_LENGTH,
         NO_POKE, NO_POKE},
        /* extensions */
        {"an extension past the cluster", REFUSED, "past the end of the first cluster",
         edit_ext_past_cluster, 0, NO_POKE, NO_POKE},
        {"an extension's padding past the file", REFUSED, "5 bytes long, past the end of the file",
         edit_ext_padding_past_file, 0, NO_POKE, NO_POKE},
        {"an extension of 4 GiB", REFUSED, "4294967295 bytes long", edit_ext_huge, 0, NO_POKE,
         NO_POKE},
        {"no end marker in the cluster", REFUSED, "without an end marker", edit_no_end_marker, 0,
         NO_POKE, NO_POKE},
        {"an extension past the end of the file", REFUSED, "past the end of the file",
         edit_short_file_ext, 0, NO_POKE, NO_POKE},
        {"a file ending inside the end marker", REFUSED, "without an end marker",
         edit_end_marker_cut, 0, NO_POKE, NO_POKE},
        {"512-byte clusters, an extension past the cluster", REFUSED,
         "past the end of the first cluster", edit_small_cluster_ext_past, 0, NO_POKE, NO_POKE},
        {"a known extension twice", REFUSED, "0x6803f857 appears twice",
         edit_duplicate_feature_table, 0, NO_POKE, NO_POKE},
};

/* Every case runs; each mismatch is printed, and the test fails at the end if there was one. */
static void test_table(void **state)
{
	unsigned failed = 0;

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		const struct header_case *c = &cases[i];
		struct slate_error err = {0};
		struct qcow2_header h = {0};
		size_t len = c->len == 1 ? 0 : c->len ? c->len : FILE_LEN;
		int r;

		build_base();
		if (c->width1)
			put_be(img + c->off1, c->width1, c->v1);
		if (c->width2)
			put_be(img + c->off2, c->width2, c->v2);
		if (c->edit)
			c->edit(img, &len);
		r = qcow2_header_check(img, len, &h, &err);
		if (r != c->want || (c->msg && !strstr(err.msg, c->msg)) ||
		    (r == REFUSED &&
		     (err.code != REFUSED || strncmp(err.msg, "qcow2 disk refused: ", 20) != 0)) ||
		    (r == 0 && h.header_length != (h.version == 2 ? 72 : HEADER_LENGTH)) ||
		    /* a refusal is also a refusal without an error struct */
		    qcow2_header_check(img, len, NULL, NULL) != c->want) {
			print_error("%s: got %d \"%s\", want %d \"%s\"\n", c->name, r, err.msg,
			            c->want, c->msg ? c->msg : "");
			failed++;
		}
	}
	if (failed)
		fail_msg("%u of %zu cases", failed, ELEMENTSOF(cases));
}

static void test_fields(void **state)
{
	struct qcow2_header h;

	(void)state;
	build_base();
	edit_zstd(img, NULL);
	assert_int_equal(qcow2_header_check(img, FILE_LEN, &h, NULL), 0);
	assert_int_equal(h.version, 3);
	assert_int_equal(h.cluster_bits, CLUSTER_BITS);
	assert_int_equal(h.size, UINT64_C(1) << 30);
	assert_int_equal(h.compression_type, 1);
	assert_int_equal(h.refcount_order, 4);
	assert_int_equal(h.n_extensions, 1);
	assert_int_equal(h.incompatible_features, QCOW2_INCOMPAT_COMPRESSION);
	/* Untouched on failure. */
	memset(&h, 0x5a, sizeof(h));
	img[0] = 'X';
	assert_int_equal(qcow2_header_check(img, FILE_LEN, &h, NULL), REFUSED);
	assert_int_equal(h.version, 0x5a5a5a5a);
	assert_int_equal(qcow2_header_check(NULL, 10, &h, NULL), -EINVAL);
}

/* ---- images made by qemu-img -------------------------------------------------------------- */

static int make_image(const char *name, const char *const *opts, char **ret_path)
{
	const char *argv[16] = {"qemu-img", "create", "-q", "-f", "qcow2"};
	_cleanup_free_ char *out = NULL;
	size_t n = 5;
	int r;

	for (; *opts; opts++)
		argv[n++] = *opts;
	assert_true(asprintf(ret_path, "%s/%s", tmpdir, name) > 0);
	argv[n++] = *ret_path;
	argv[n++] = "1M";
	argv[n] = NULL;
	assert_true(n < ELEMENTSOF(argv));
	r = spawn_run(argv, &out);
	if (r < 0 && r != -ENOENT)
		fail_msg("qemu-img create %s: %s", name, out ? out : strerror(-r));
	return r;
}

static int check_file(const char *path, struct slate_error *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	return qcow2_header_check_fd(fd, NULL, err);
}

struct qemu_case {
	const char *name;
	const char *opts[6];
	const char *msg; /* NULL: taken */
};

static void test_qemu_img(void **state)
{
	char data_file[300], raw_opt[340], df_opt[340], backing[300];
	const struct qemu_case qc[] = {
	        {"plain.qcow2", {NULL}, NULL},
	        {"v2.qcow2", {"-o", "compat=0.10", NULL}, NULL},
	        {"zstd.qcow2", {"-o", "compression_type=zstd", NULL}, NULL},
	        {"extl2.qcow2", {"-o", "extended_l2=on,cluster_size=128k", NULL}, NULL},
	        {"lazy.qcow2", {"-o", "lazy_refcounts=on", NULL}, NULL},
	        {"small.qcow2", {"-o", "cluster_size=512", NULL}, NULL},
	        {"data-file.qcow2", {"-o", df_opt, NULL}, "external data file (\""},
	        {"data-file-raw.qcow2", {"-o", raw_opt, NULL}, "external data file (\""},
	        {"backing.qcow2", {"-b", backing, "-F", "raw", NULL}, "backing file"},
	        {"luks.qcow2",
	         {"--object", "secret,id=sec0,data=slate", "-o",
	          "encrypt.format=luks,encrypt.key-secret=sec0", NULL},
	         "encrypted (crypt_method 2)"},
	};
	_cleanup_close_ int mfd = -1;

	(void)state;
	/* The host file the data file names: qemu-img create empties it, so the marker goes in
	 * after, as a host secret would already be there. */
	(void)snprintf(data_file, sizeof(data_file), "%s/host.marker", tmpdir);
	(void)snprintf(df_opt, sizeof(df_opt), "data_file=%s", data_file);
	(void)snprintf(raw_opt, sizeof(raw_opt), "data_file=%s,data_file_raw=on", data_file);
	(void)snprintf(backing, sizeof(backing), "%s", data_file);
	for (size_t i = 0; i < ELEMENTSOF(qc); i++) {
		_cleanup_free_ char *path = NULL;
		struct slate_error err = {0};
		int r;

		if (make_image(qc[i].name, qc[i].opts, &path) == -ENOENT)
			skip();
		mfd = safe_close(mfd);
		mfd = open(data_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(mfd >= 0);
		assert_int_equal(write(mfd, MARKER, strlen(MARKER)), (ssize_t)strlen(MARKER));
		r = check_file(path, &err);
		if (!qc[i].msg) {
			if (r != 0)
				fail_msg("%s: refused: %s", qc[i].name, err.msg);
			continue;
		}
		if (r != REFUSED || !strstr(err.msg, qc[i].msg))
			fail_msg("%s: got %d \"%s\", want \"%s\"", qc[i].name, r, err.msg,
			         qc[i].msg);
		if (strstr(qc[i].name, "data-file") && !strstr(err.msg, data_file))
			fail_msg("%s: the refusal does not name the data file: %s", qc[i].name,
			         err.msg);
	}
}

/* ---- the fd reader ------------------------------------------------------------------------ */

static int tmpfile_with(const void *p, size_t n)
{
	char path[300];
	int fd;

	(void)snprintf(path, sizeof(path), "%s/fdXXXXXX", tmpdir);
	fd = mkostemp(path, O_CLOEXEC);
	assert_true(fd >= 0);
	(void)unlink(path);
	assert_int_equal(pwrite(fd, p, n, 0), (ssize_t)n);
	return fd;
}

static void test_fd(void **state)
{
	struct slate_error err = {0};
	int p[2];

	(void)state;
	build_base();
	{
		_cleanup_close_ int fd = tmpfile_with(img, FILE_LEN);
		/* The file offset does not move. */
		assert_int_equal(lseek(fd, 7, SEEK_SET), 7);
		assert_int_equal(qcow2_header_check_fd(fd, NULL, &err), 0);
		assert_int_equal(lseek(fd, 0, SEEK_CUR), 7);
	}
	{
		_cleanup_close_ int fd = tmpfile_with(img, 90);
		assert_int_equal(qcow2_header_check_fd(fd, NULL, &err), REFUSED);
		assert_non_null(strstr(err.msg, "90 bytes"));
	}
	{
		_cleanup_close_ int fd = tmpfile_with(img, 0);
		assert_int_equal(qcow2_header_check_fd(fd, NULL, &err), REFUSED);
	}
	/* 2 MiB clusters in a 5 MiB file: only the first 2 MiB are read, and they are enough. */
	{
		_cleanup_free_ uint8_t *big = calloc(1, 5u << 20);
		_cleanup_close_ int fd = -1;

		assert_non_null(big);
		memcpy(big, img, CLUSTER);
		put_be(big + O_CLUSTER_BITS, 4, 21);
		put_be(big + O_L1_OFFSET, 8, 2u << 20);
		put_be(big + O_REFCOUNT_OFFSET, 8, 4u << 20);
		fd = tmpfile_with(big, 5u << 20);
		assert_int_equal(qcow2_header_check_fd(fd, NULL, &err), 0);
		/* No end marker in the 2 MiB: refused, however long the file. */
		put_be(big + HEADER_LENGTH, 4, 0x12345678u);
		put_be(big + HEADER_LENGTH + 4, 4, (2u << 20) - HEADER_LENGTH - 8);
		assert_int_equal(pwrite(fd, big, 4096, 0), 4096);
		assert_int_equal(qcow2_header_check_fd(fd, NULL, &err), REFUSED);
		assert_non_null(strstr(err.msg, "first cluster"));
	}
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(qcow2_header_check_fd(p[0], NULL, &err), -EBADFD);
	(void)close(p[0]);
	(void)close(p[1]);
	assert_int_equal(qcow2_header_check_fd(-1, NULL, &err), -EBADF);
}

static int setup(void **state)
{
	(void)state;
	return test_mkdtemp(tmpdir, sizeof(tmpdir), "qcow2-hdr");
}

static int teardown(void **state)
{
	(void)state;
	return test_rmtree(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_table),
	        cmocka_unit_test(test_fields),
	        cmocka_unit_test(test_qemu_img),
	        cmocka_unit_test(test_fd),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}

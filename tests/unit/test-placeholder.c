/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Placeholders (secrets/placeholder.c): the shape client-side validators check (prefix, length,
 * alphabet, GitHub's CRC32 checksum, checked here independently with zlib), a visible marker,
 * never the real value, deterministic across calls and across a restart of the install, and
 * rotated when the salt file is deleted.
 */

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
#include <zlib.h>

#include <cmocka.h>

#include "secrets/install.h"
#include "secrets/placeholder.h"
#include "secrets/secrets.h"
#include "util/error.h"

#define B62 "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#define B64URL B62 "-_"
#define B32 "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

static unsigned char salt_a[INSTALL_SALT_LEN], salt_b[INSTALL_SALT_LEN];

/* A deterministic made-up real value: prefix, then chars of alphabet up to len. */
static char *fake(const char *prefix, size_t len, const char *alphabet, uint32_t seed)
{
	char *s = malloc(len + 1);
	size_t p = strlen(prefix), n = strlen(alphabet);
	uint32_t x = seed ? seed : 1;

	assert_non_null(s);
	memcpy(s, prefix, p);
	for (size_t i = p; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		s[i] = alphabet[x % n];
	}
	s[len] = '\0';
	return s;
}

/* GitHub's client-side check, written from its description: the last 6 characters are the
 * base62 (0-9A-Za-z) CRC32 of the part between the prefix's '_' and them. */
static bool github_checksum_valid(const char *tok)
{
	const char *us = strrchr(tok, '_');
	size_t n;
	uint64_t v = 0;

	if (!us)
		return false;
	us++;
	n = strlen(us);
	if (n <= 6)
		return false;
	for (size_t i = n - 6; i < n; i++) {
		const char *c = strchr(B62, us[i]);
		if (!c || !*c)
			return false;
		v = v * 62 + (uint64_t)(c - B62);
	}
	return v == crc32(0L, (const Bytef *)us, (uInt)(n - 6));
}

/* The same check the way the stricter validators do it: unpadded base62 text compared. */
static bool github_checksum_text_matches(const char *tok)
{
	const char *us = strrchr(tok, '_') + 1;
	size_t n = strlen(us);
	uint32_t c = (uint32_t)crc32(0L, (const Bytef *)us, (uInt)(n - 6));
	char enc[16];
	int i = 15;

	enc[i] = '\0';
	do {
		enc[--i] = B62[c % 62];
		c /= 62;
	} while (c);
	return streq(enc + i, us + n - 6);
}

static bool all_in(const char *s, size_t from, size_t to, const char *alphabet)
{
	for (size_t i = from; i < to; i++)
		if (!s[i] || !strchr(alphabet, s[i]))
			return false;
	return true;
}

static char *derive(const unsigned char *salt, enum secret_kind k, const char *name,
                    const char *real)
{
	char *p = NULL;
	assert_int_equal(placeholder_derive(salt, k, name, real, strlen(real), &p), 0);
	assert_non_null(p);
	return p;
}

struct shape_case {
	const char *what;
	enum secret_kind kind;
	const char *name;
	const char *prefix; /* of the real value and of the placeholder */
	size_t len;         /* of the real value */
	const char *real_alphabet;
	const char *marker;   /* right after the prefix */
	const char *alphabet; /* of the placeholder after prefix and marker */
	size_t want_len;      /* 0: the real length */
};

static const struct shape_case shape_cases[] = {
        {"anthropic api03", SECRET_KIND_ANTHROPIC, "value", "sk-ant-api03-", 108, B64URL, "slate",
         B62, 0},
        {"anthropic admin", SECRET_KIND_ANTHROPIC, "value", "sk-ant-admin01-", 108, B64URL, "slate",
         B62, 0},
        {"openai project", SECRET_KIND_OPENAI, "value", "sk-proj-", 164, B64URL, "slate", B62, 0},
        {"openai legacy", SECRET_KIND_OPENAI, "value", "sk-", 51, B62, "slate", B62, 0},
        {"github ghp", SECRET_KIND_GITHUB, "value", "ghp_", 40, B62, "slate", B62, 0},
        {"github gho", SECRET_KIND_GITHUB, "value", "gho_", 40, B62, "slate", B62, 0},
        {"github ghu", SECRET_KIND_GITHUB, "value", "ghu_", 40, B62, "slate", B62, 0},
        {"github ghs", SECRET_KIND_GITHUB, "value", "ghs_", 40, B62, "slate", B62, 0},
        {"github fine-grained", SECRET_KIND_GITHUB, "value", "github_pat_", 93, B62, "slate",
         B62 "_", 0},
        {"gitlab", SECRET_KIND_GITLAB, "value", "glpat-", 26, B64URL, "slate", B62, 0},
        {"aws key id", SECRET_KIND_AWS, "access-key-id", "AKIA", 20, B32, "SLATE", B32, 0},
        {"aws temporary key id", SECRET_KIND_AWS, "access-key-id", "ASIA", 20, B32, "SLATE", B32,
         0},
        {"aws secret", SECRET_KIND_AWS, "secret-access-key", "", 40, B62 "+/", "slate", B62, 0},
        {"aws session token", SECRET_KIND_AWS, "session-token", "", 356, B62 "+/", "slate", B62, 0},
        {"generic long", SECRET_KIND_GENERIC, "value", "", 60, B62 "!#%", "slt_", B62, 0},
        {"generic short", SECRET_KIND_GENERIC, "value", "", 12, B62, "slt_", B62, 36},
};

static void test_shapes(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(shape_cases) / sizeof(shape_cases[0]); i++) {
		const struct shape_case *c = &shape_cases[i];
		_cleanup_free_ char *real =
		        fake(c->prefix, c->len, c->real_alphabet, (uint32_t)i + 7);
		_cleanup_free_ char *p = NULL, *again = NULL, *other = NULL;
		size_t want = c->want_len ? c->want_len : c->len, pl = strlen(c->prefix);
		size_t ml = strlen(c->marker);

		if (c->kind == SECRET_KIND_GITHUB && strlen(c->prefix) == 4) {
			/* A real classic token carries a valid checksum itself. */
			char sum[7];
			placeholder_github_checksum(real + 4, c->len - 10, sum);
			memcpy(real + c->len - 6, sum, 6);
		}
		if (c->kind == SECRET_KIND_ANTHROPIC)
			memcpy(real + c->len - 2, "AA", 2);
		if (streq(c->prefix, "github_pat_"))
			real[11 + 22] = '_';
		p = derive(salt_a, c->kind, c->name, real);
		print_message("%-22s %s\n", c->what, p);

		assert_int_equal(strlen(p), want);
		if (c->kind == SECRET_KIND_GENERIC)
			assert_memory_equal(p, "slt_", 4);
		else {
			assert_memory_equal(p, c->prefix, pl);
			assert_memory_equal(p + pl, c->marker, ml);
		}
		assert_true(all_in(p, pl + ml, strlen(p), c->alphabet));
		assert_string_not_equal(p, real);
		assert_null(strstr(p, real));

		again = derive(salt_a, c->kind, c->name, real);
		assert_string_equal(p, again);
		other = derive(salt_b, c->kind, c->name, real);
		assert_string_not_equal(p, other);
		assert_int_equal(strlen(other), want);

		if (c->kind == SECRET_KIND_ANTHROPIC)
			assert_memory_equal(p + want - 2, "AA", 2);
		if (c->kind == SECRET_KIND_GITHUB && pl == 4) {
			assert_true(
			        github_checksum_valid(real)); /* the validator itself is sound */
			assert_true(github_checksum_valid(p));
			assert_true(github_checksum_text_matches(p));
			assert_true(github_checksum_valid(other));
		}
		if (streq(c->prefix, "github_pat_")) {
			assert_int_equal(p[11 + 22], '_');
			assert_null(strchr(p + 11 + 23, '_'));
		}
	}
}

/* The validator must refuse a checksum off by one character: it is not vacuous. */
static void test_github_checksum_refuses_damage(void **state)
{
	_cleanup_free_ char *real = fake("ghp_", 40, B62, 99), *p = NULL;
	char sum[7];

	(void)state;
	placeholder_github_checksum(real + 4, 30, sum);
	memcpy(real + 34, sum, 6);
	p = derive(salt_a, SECRET_KIND_GITHUB, "value", real);
	assert_true(github_checksum_valid(p));
	p[20] = p[20] == 'a' ? 'b' : 'a';
	assert_false(github_checksum_valid(p));
	/* A known answer computed apart (Python's zlib.crc32, base62 0-9A-Za-z). */
	placeholder_github_checksum("KnownAnswer0123456789abcdefXYZ", 30, sum);
	assert_string_equal(sum, "2yzs8F");
	assert_true(github_checksum_valid("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"));
}

/* openai keys keep base64("OpenAI") where the real key has it. */
static void test_openai_marker_kept(void **state)
{
	_cleanup_free_ char *real = fake("sk-", 51, B62, 5), *p = NULL;

	(void)state;
	memcpy(real + 23, "T3BlbkFJ", 8);
	p = derive(salt_a, SECRET_KIND_OPENAI, "value", real);
	assert_memory_equal(p + 23, "T3BlbkFJ", 8);
	assert_int_equal(strlen(p), 51);
}

/* A value without its provider's prefix still gets a marked placeholder of the kind's shape. */
static void test_unprefixed(void **state)
{
	_cleanup_free_ char *hex = fake("", 40, "0123456789abcdef", 3), *p = NULL, *q = NULL;

	(void)state;
	p = derive(salt_a, SECRET_KIND_GITHUB, "value", hex);
	assert_int_equal(strlen(p), 40);
	assert_true(all_in(p, 0, 40, "0123456789abcdef"));
	assert_string_not_equal(p, hex);
	q = derive(salt_a, SECRET_KIND_ANTHROPIC, "value", "not-an-anthropic-key-at-all");
	assert_memory_equal(q, "sk-ant-api03-slate", 18);
}

/* Different values, kinds and value names give different placeholders. */
static void test_distinct(void **state)
{
	_cleanup_free_ char *a = NULL, *b = NULL, *c = NULL, *d = NULL;

	(void)state;
	a = derive(salt_a, SECRET_KIND_GENERIC, "value", "correct horse battery staple");
	b = derive(salt_a, SECRET_KIND_GENERIC, "value", "correct horse battery stapler");
	c = derive(salt_a, SECRET_KIND_AWS, "secret-access-key", "correct horse battery staple");
	d = derive(salt_a, SECRET_KIND_AWS, "session-token", "correct horse battery staple");
	assert_string_not_equal(a, b);
	assert_string_not_equal(c, d);
	assert_int_equal(placeholder_derive(salt_a, SECRET_KIND_AWS, "bogus", "x12345678", 9, &a),
	                 -EINVAL);
}

static char *mkstate(void)
{
	char *dir = strdup("/tmp/test-placeholder.XXXXXX");
	assert_non_null(dir);
	assert_non_null(mkdtemp(dir));
	return dir;
}

static void rm_state(const char *dir)
{
	char cmd[512];
	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

/* Deterministic across a restart (the salt file is read again), rotated when it is deleted. */
static void test_salt_file(void **state)
{
	_cleanup_free_ char *dir = mkstate(), *p1 = NULL, *p2 = NULL, *p3 = NULL;
	const char *real = "sk-ant-api03-"
	                   "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ";
	struct install *in = NULL;
	struct stat st;
	int dfd;

	(void)state;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	assert_int_equal(install_open(dfd, "/nonexistent", &in, NULL), 0);
	p1 = derive(install_salt(in), SECRET_KIND_ANTHROPIC, "value", real);
	install_free(in);

	assert_int_equal(fstatat(dfd, "install/salt", &st, 0), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_size, INSTALL_SALT_LEN);

	assert_int_equal(install_open(dfd, "/nonexistent", &in, NULL), 0);
	p2 = derive(install_salt(in), SECRET_KIND_ANTHROPIC, "value", real);
	install_free(in);
	assert_string_equal(p1, p2);

	assert_int_equal(unlinkat(dfd, "install/salt", 0), 0);
	assert_int_equal(install_open(dfd, "/nonexistent", &in, NULL), 0);
	p3 = derive(install_salt(in), SECRET_KIND_ANTHROPIC, "value", real);
	install_free(in);
	assert_string_not_equal(p1, p3);
	assert_int_equal(strlen(p1), strlen(p3));

	(void)close(dfd);
	rm_state(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_shapes),
	        cmocka_unit_test(test_github_checksum_refuses_damage),
	        cmocka_unit_test(test_openai_marker_kept),
	        cmocka_unit_test(test_unprefixed),
	        cmocka_unit_test(test_distinct),
	        cmocka_unit_test(test_salt_file),
	};

	for (size_t i = 0; i < sizeof(salt_a); i++) {
		salt_a[i] = (unsigned char)i;
		salt_b[i] = (unsigned char)(i * 7 + 1);
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}

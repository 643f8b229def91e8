/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The leak scanner's patterns (proxy/tripwire.c): the forms each placeholder gets, that every
 * whole encoding of a placeholder (percent, \u, base64 and base64url at each alignment, after
 * anything, split anywhere) is found by the one automaton, what is not a form, and the cache
 * that builds a set's patterns once.
 */

#include <setjmp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/tripwire.h"

/* What the automaton reported: one bit per pattern, and the first pattern of each encoding. */
struct seen {
	const struct tripwire *t;
	bool enc[_TRIPWIRE_ENC_MAX];
	long placeholder; /* the placeholder of the last hit, or -1 */
	size_t hits;
};

static int seen_fn(size_t pattern, size_t end, void *userdata)
{
	struct seen *s = userdata;
	const struct tripwire_pat *p = tripwire_pat(s->t, pattern);

	(void)end;
	assert_non_null(p);
	s->enc[p->enc] = true;
	s->placeholder = p->placeholder;
	s->hits++;
	return 0;
}

/* Scans text in pieces of step bytes (the state carried across), filling *s. */
static void scan_text(const struct tripwire *t, const char *text, size_t n, size_t step,
                      struct seen *s)
{
	uint32_t st = SCAN_START;

	*s = (struct seen){.t = t, .placeholder = -1};
	for (size_t o = 0; o < n; o += step)
		(void)scan_feed(tripwire_scan(t), &st, (const uint8_t *)text + o,
		                o + step <= n ? step : n - o, seen_fn, s);
}

/* The whole placeholder encoded as a hijacked agent would, after prefix; into out. */
static size_t encode_whole(const char *ph, const char *prefix, const char *how, char *out)
{
	char in[256];
	size_t n = (size_t)snprintf(in, sizeof(in), "%s%s", prefix, ph), o = 0;

	if (strcmp(how, "pct") == 0 || strcmp(how, "PCT") == 0)
		for (size_t i = 0; i < n; i++)
			o += (size_t)sprintf(out + o, how[0] == 'p' ? "%%%02x" : "%%%02X",
			                     (unsigned char)in[i]);
	else if (strcmp(how, "json") == 0 || strcmp(how, "JSON") == 0)
		for (size_t i = 0; i < n; i++)
			o += (size_t)sprintf(out + o, how[0] == 'j' ? "\\u%04x" : "\\u%04X",
			                     (unsigned char)in[i]);
	else {
		int v = strcmp(how, "b64") == 0 ? sodium_base64_VARIANT_ORIGINAL
		                                : sodium_base64_VARIANT_URLSAFE_NO_PADDING;
		(void)sodium_bin2base64(out, 1024, (const unsigned char *)in, n, v);
		o = strlen(out);
	}
	out[o] = '\0';
	return o;
}

static void test_forms(void **state)
{
	/* 36 bytes: the encoded forms are of the last 32 ("s8nL..."), the raw one of all. */
	const char *ph = "slt_s8nL6Uj1zVF2POXRs4W64qlpIiLVOcKE";
	const char *w = ph + 4;
	char out[512], want[512];
	long n;

	(void)state;
	n = tripwire_encode(ph, strlen(ph), TRIPWIRE_RAW, 0, out, sizeof(out));
	assert_int_equal(n, 36);
	assert_memory_equal(out, ph, 36);
	assert_int_equal(tripwire_encode(ph, strlen(ph), TRIPWIRE_RAW, 1, out, sizeof(out)), 0);
	n = tripwire_encode(ph, strlen(ph), TRIPWIRE_PERCENT, 0, out, sizeof(out));
	assert_int_equal(n, 96);
	assert_memory_equal(out, "%73%38%6E%4C", 12);
	n = tripwire_encode(ph, strlen(ph), TRIPWIRE_PERCENT, 1, out, sizeof(out));
	assert_memory_equal(out, "%73%38%6e%4c", 12);
	n = tripwire_encode(ph, strlen(ph), TRIPWIRE_JSON_U, 1, out, sizeof(out));
	assert_int_equal(n, 192);
	assert_memory_equal(out, "\\u0073\\u0038\\u006e", 18);
	/* base64 at alignment a: the whole groups after the window's first a bytes. */
	for (unsigned a = 0; a < 3; a++) {
		size_t groups = (32 - a) / 3;
		n = tripwire_encode(ph, strlen(ph), TRIPWIRE_BASE64, a, out, sizeof(out));
		assert_int_equal(n, (long)(groups * 4));
		(void)sodium_bin2base64(want, sizeof(want), (const unsigned char *)w + a,
		                        groups * 3, sodium_base64_VARIANT_ORIGINAL);
		assert_memory_equal(out, want, (size_t)n);
	}
	assert_int_equal(tripwire_encode(ph, strlen(ph), TRIPWIRE_BASE64, 3, out, sizeof(out)), 0);
	/* Too small a buffer is said, never overrun. */
	assert_int_equal(tripwire_encode(ph, strlen(ph), TRIPWIRE_JSON_U, 0, out, 100), -ENOBUFS);
	/* A URL-safe form only where the alphabets differ: ">>>" is "Pj4+", "???" is "Pz8/". */
	assert_int_equal(tripwire_encode(ph, strlen(ph), TRIPWIRE_BASE64URL, 0, out, sizeof(out)),
	                 0);
	n = tripwire_encode("slt_>>>???xyzxyzxyz", 19, TRIPWIRE_BASE64URL, 1, out, sizeof(out));
	assert_true(n > 0);
	assert_non_null(memmem(out, (size_t)n, "Pj4-Pz8_", 8));
	assert_string_equal(tripwire_enc_name(TRIPWIRE_BASE64URL), "base64url-encoded");
	assert_null(tripwire_enc_name(TRIPWIRE_RAW));
}

static void test_patterns(void **state)
{
	/* Digits only: the lower case hex forms are the upper case ones, so not repeated. */
	const char *phs[] = {"12345678901234567890", NULL, "", "slt_>>>???xyzxyzxyz"};
	struct tripwire *t = NULL;
	size_t per[4] = {0};

	(void)state;
	assert_int_equal(tripwire_new(phs, 4, &t), 0);
	for (size_t i = 0; i < tripwire_n_pats(t); i++) {
		const struct tripwire_pat *p = tripwire_pat(t, i);
		assert_true(p->placeholder < 4);
		assert_int_equal(strlen(p->form), p->len);
		per[p->placeholder]++;
	}
	assert_null(tripwire_pat(t, tripwire_n_pats(t)));
	/* raw, %XX, \u00XX, base64 x3 */
	assert_int_equal(per[0], 6);
	assert_int_equal(per[1] + per[2], 0);
	/* raw, %XX x2, \u00XX x2, base64 x3, base64url where it differs */
	assert_true(per[3] >= 8 && per[3] <= 11);
	tripwire_unref(t);
	/* No placeholders: an automaton that finds nothing. */
	assert_int_equal(tripwire_new(NULL, 0, &t), 0);
	assert_int_equal(tripwire_n_pats(t), 0);
	tripwire_unref(t);
}

static void test_found(void **state)
{
	const char *phs[] = {"ghp_slateRfabXqf3LZj86gdyZjz8Kslnu64ILkeO",
	                     "slt_s8nL6Uj1zVF2POXRs4W64qlpIiLVOcKE", "AKIASLATEQ2WE3RT5YUI",
	                     "slt_>>>???xyzxyzxyz>>>???"};
	static const char *const hows[] = {"pct", "PCT", "json", "JSON", "b64", "b64url"};
	static const char *const prefixes[] = {"", "a", "ab", "abc", "user:", "{\"t\":\""};
	static const enum tripwire_enc want_enc[] = {TRIPWIRE_PERCENT, TRIPWIRE_PERCENT,
	                                             TRIPWIRE_JSON_U,  TRIPWIRE_JSON_U,
	                                             TRIPWIRE_BASE64,  TRIPWIRE_BASE64URL};
	struct tripwire *t = NULL;
	char enc[1024], text[2048];
	struct seen s;

	(void)state;
	assert_int_equal(tripwire_new(phs, 4, &t), 0);
	for (size_t k = 0; k < 4; k++)
		for (size_t h = 0; h < 6; h++)
			for (size_t p = 0; p < 6; p++) {
				size_t n = encode_whole(phs[k], prefixes[p], hows[h], enc);
				int tn = snprintf(text, sizeof(text), "GET /?q=%s&x=1 HTTP/1.1",
				                  enc);
				for (size_t step = 1; step <= 7; step += 6) {
					scan_text(t, text, (size_t)tn, step, &s);
					assert_true(s.hits > 0);
					assert_int_equal(s.placeholder, (long)k);
					/* base64url of text whose window has no -/_ is the
					 * base64 form */
					assert_true(s.enc[want_enc[h]] ||
					            (want_enc[h] == TRIPWIRE_BASE64URL &&
					             s.enc[TRIPWIRE_BASE64]));
				}
				(void)n;
			}
	/* The placeholder itself: its raw pattern. */
	scan_text(t, phs[0], strlen(phs[0]), 3, &s);
	assert_true(s.enc[TRIPWIRE_RAW]);
	/* Not a form: one character off inside the window, a truncated encoding, mixed case hex,
	 * base64 with a line break in the window. */
	{
		char off[64];
		strcpy(off, phs[1]);
		off[20] = off[20] == 'A' ? 'B' : 'A';
		encode_whole(off, "", "b64", enc);
		scan_text(t, enc, strlen(enc), 5, &s);
		assert_int_equal(s.hits, 0);
		encode_whole(off, "", "pct", enc);
		scan_text(t, enc, strlen(enc), 5, &s);
		assert_int_equal(s.hits, 0);
		encode_whole(phs[1], "", "pct", enc);
		enc[strlen(enc) - 3 * 20] = '\0';
		scan_text(t, enc, strlen(enc), 5, &s);
		assert_int_equal(s.hits, 0);
		encode_whole(phs[1], "", "PCT", enc);
		for (char *c = enc; *c; c += 6) /* every other escape in lower case */
			for (size_t i = 1; i < 3 && c[i]; i++)
				c[i] = (char)(c[i] >= 'A' && c[i] <= 'F' ? c[i] + 32 : c[i]);
		scan_text(t, enc, strlen(enc), 5, &s);
		assert_int_equal(s.hits, 0);
	}
	tripwire_unref(t);
}

static void test_cache(void **state)
{
	const char *a[] = {"slt_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	                   "ghp_slatebbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"};
	const char *b[] = {a[1], a[0]}; /* the same placeholders in another order: other indexes */
	struct tripwire_cache *c = NULL;
	struct tripwire *t1 = NULL, *t2 = NULL, *t3 = NULL, *keep = NULL;
	char ph[TRIPWIRE_CACHE_SIZE + 1][48];

	(void)state;
	assert_int_equal(tripwire_cache_new(&c), 0);
	assert_int_equal(tripwire_cache_get(c, a, 2, &t1), 0);
	assert_int_equal(tripwire_cache_get(c, a, 2, &t2), 0);
	assert_ptr_equal(t1, t2);
	assert_int_equal(tripwire_cache_builds(c), 1);
	assert_int_equal(tripwire_cache_get(c, b, 2, &t3), 0);
	assert_ptr_not_equal(t1, t3);
	assert_int_equal(tripwire_pat(t3, 0)->placeholder, 0);
	assert_string_equal(tripwire_pat(t3, 0)->form, b[0]);
	assert_int_equal(tripwire_cache_builds(c), 2);
	tripwire_unref(t2);
	tripwire_unref(t3);
	/* TRIPWIRE_CACHE_SIZE other sets push a's out; t1, still held, stays usable. */
	for (size_t i = 0; i < TRIPWIRE_CACHE_SIZE; i++) {
		const char *one[1] = {ph[i]};
		(void)snprintf(ph[i], sizeof(ph[i]), "slt_%032zu", i);
		assert_int_equal(tripwire_cache_get(c, one, 1, &keep), 0);
		tripwire_unref(keep);
	}
	assert_int_equal(tripwire_cache_builds(c), 2 + TRIPWIRE_CACHE_SIZE);
	assert_string_equal(tripwire_pat(t1, 0)->form, a[0]);
	assert_int_equal(tripwire_cache_get(c, a, 2, &t2), 0);
	assert_int_equal(tripwire_cache_builds(c), 3 + TRIPWIRE_CACHE_SIZE);
	tripwire_unref(t2);
	tripwire_unref(t1);
	tripwire_cache_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_forms),
	        cmocka_unit_test(test_patterns),
	        cmocka_unit_test(test_found),
	        cmocka_unit_test(test_cache),
	};
	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

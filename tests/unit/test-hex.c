/* SPDX-License-Identifier: GPL-2.0-or-later */
/* util/hex: the one hex and percent decoder that the catalog, the HTTP parser, the proxy's
 * scanner, the substituter and the SigV4 re-signer share. One table: each row names the call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/error.h"
#include "util/hex.h"
#include "util/macro.h"

enum op { DIGIT, IS, DECODE, ESCAPE, PCT };

static void test_table(void **state)
{
	static const struct {
		enum op op;
		const char *in;
		size_t n; /* bytes of in read (PCT, ESCAPE, IS, DECODE: digits / 2) */
		unsigned flags;
		size_t max;      /* PCT: room in the output */
		long r;          /* the return value */
		const char *out; /* DECODE, PCT: the bytes written when r >= 0 */
	} cases[] = {
	        /* one digit (every byte is tried below too) */
	        {DIGIT, "9", 1, 0, 0, 9, NULL},
	        {DIGIT, "F", 1, 0, 0, 15, NULL},
	        {DIGIT, "F", 1, HEX_LOWER, 0, -1, NULL},
	        {DIGIT, "f", 1, HEX_LOWER, 0, 15, NULL},
	        {DIGIT, "G", 1, 0, 0, -1, NULL},
	        /* runs of digits */
	        {IS, "0123456789abcdef", 16, HEX_LOWER, 0, 1, NULL},
	        {IS, "0123456789abcdeF", 16, HEX_LOWER, 0, 0, NULL},
	        {IS, "0123456789ABCDEF", 16, 0, 0, 1, NULL},
	        {IS, "", 0, 0, 0, 1, NULL},
	        {IS, "12 4", 4, 0, 0, 0, NULL},
	        /* n digit pairs into bytes */
	        {DECODE, "00ff7f80", 4, HEX_LOWER, 0, 0, "\x00\xff\x7f\x80"},
	        {DECODE, "00FF", 2, HEX_LOWER, 0, -1, NULL},
	        {DECODE, "00FF", 2, 0, 0, 0, "\x00\xff"},
	        {DECODE, "0g", 1, 0, 0, -1, NULL},
	        {DECODE, "", 0, HEX_LOWER, 0, 0, ""},
	        /* one escape at the start */
	        {ESCAPE, "%41", 3, 0, 0, 'A', NULL},
	        {ESCAPE, "%2f", 3, 0, 0, '/', NULL},
	        {ESCAPE, "%2F", 3, 0, 0, '/', NULL},
	        {ESCAPE, "%00", 3, 0, 0, 0, NULL},
	        {ESCAPE, "%ff", 3, 0, 0, 255, NULL},
	        {ESCAPE, "%41", 2, 0, 0, -1, NULL}, /* cut short by n, not by the NUL */
	        {ESCAPE, "%4", 2, 0, 0, -1, NULL},
	        {ESCAPE, "%", 1, 0, 0, -1, NULL},
	        {ESCAPE, "%zz", 3, 0, 0, -1, NULL},
	        {ESCAPE, "%4z", 3, 0, 0, -1, NULL},
	        {ESCAPE, "%+1", 3, 0, 0, -1, NULL},
	        {ESCAPE, "A41", 3, 0, 0, -1, NULL},
	        {ESCAPE, "+", 1, 0, 0, -1, NULL},
	        /* lenient (the scanner, the substituter): a bad escape is three ordinary bytes */
	        {PCT, "a%41b", 5, 0, 64, 3, "aAb"},
	        {PCT, "a%4", 3, 0, 64, 3, "a%4"},
	        {PCT, "%", 1, 0, 64, 1, "%"},
	        {PCT, "%zz%2f", 6, 0, 64, 4, "%zz/"},
	        {PCT, "%%41", 4, 0, 64, 2, "%A"},
	        {PCT, "%2541", 5, 0, 64, 3, "%41"}, /* one pass: %25 is '%', not the start of one */
	        {PCT, "a+b", 3, 0, 64, 3, "a+b"},   /* '+' is no space */
	        {PCT, "%00x", 4, 0, 64, 2, "\0x"},
	        {PCT, "", 0, 0, 64, 0, ""},
	        /* strict (the re-signer's canonical forms) */
	        {PCT, "a%41b", 5, PCT_STRICT, 64, 3, "aAb"},
	        {PCT, "a%4", 3, PCT_STRICT, 64, SLATE_ERR_INVALID_FORMAT, NULL},
	        {PCT, "%", 1, PCT_STRICT, 64, SLATE_ERR_INVALID_FORMAT, NULL},
	        {PCT, "%zz", 3, PCT_STRICT, 64, SLATE_ERR_INVALID_FORMAT, NULL},
	        {PCT, "a+b%2B", 6, PCT_STRICT, 64, 4, "a+b+"},
	        /* room: refused, or cut (the scanner's bounded copy of a target) */
	        {PCT, "abcd", 4, 0, 4, 4, "abcd"},
	        {PCT, "abcde", 5, 0, 4, SLATE_ERR_TOO_LARGE, NULL},
	        {PCT, "abcde", 5, PCT_STRICT, 4, SLATE_ERR_TOO_LARGE, NULL},
	        {PCT, "abcde", 5, PCT_TRUNCATE, 4, 4, "abcd"},
	        {PCT, "abc%41%42", 9, PCT_TRUNCATE, 4, 4, "abcA"},
	        {PCT, "abcd%zz", 7, PCT_STRICT | PCT_TRUNCATE, 4, SLATE_ERR_INVALID_FORMAT, NULL},
	        {PCT, "abcd%41", 7, PCT_STRICT | PCT_TRUNCATE, 4, 4, "abcd"},
	        {PCT, "x", 1, 0, 0, SLATE_ERR_TOO_LARGE, NULL},
	};

	/* Every byte as a digit: either case, or lower case only (catalog digests, signatures). */
	for (int c = 0; c < 256; c++) {
		static const char lo[] = "0123456789abcdef", up[] = "0123456789ABCDEF";
		const char *l = c ? memchr(lo, c, 16) : NULL, *u = c ? memchr(up, c, 16) : NULL;
		int want = l ? (int)(l - lo) : -1;

		assert_int_equal(hex_digit(c, HEX_LOWER), want);
		assert_int_equal(hex_digit(c, 0), u ? (int)(u - up) : want);
	}
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		char out[65];
		uint8_t bytes[32];
		long r = 0;

		memset(out, 'Z', sizeof(out));
		switch (cases[i].op) {
		case DIGIT:
			r = hex_digit((unsigned char)cases[i].in[0], cases[i].flags);
			break;
		case IS:
			r = hex_is(cases[i].in, cases[i].n, cases[i].flags);
			break;
		case DECODE:
			r = hex_decode(cases[i].in, cases[i].n, bytes, cases[i].flags);
			if (r == 0)
				assert_memory_equal(bytes, cases[i].out, cases[i].n);
			break;
		case ESCAPE:
			r = hex_pct_escape(cases[i].in, cases[i].n);
			break;
		case PCT:
			r = hex_pct_decode(cases[i].in, cases[i].n, out, cases[i].max,
			                   cases[i].flags);
			if (r >= 0) {
				assert_memory_equal(out, cases[i].out, (size_t)r);
				assert_int_equal(out[r], 0);
			}
			break;
		}
		if (r != cases[i].r)
			fail_msg("case %zu (\"%s\"): %ld, not %ld", i, cases[i].in, r, cases[i].r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

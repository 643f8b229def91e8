/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The "browser" protocol's request lines (src/slate-guest/browser-req.c): what slate-guest in the
 * browser VM accepts before it formats a disk or starts Chromium. One table of whole requests:
 * each line's expected result, in order.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "browser-req.h"

#define KEY128                                                                                     \
	"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"                         \
	"202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"

static void test_requests(void **state)
{
	static const struct {
		const char *lines[6];
		int want[6]; /* each line's result: a kind or -EINVAL */
	} cases[] = {
	        {{"start", "stop"}, {BL_START, BL_STOP}},
	        {{"ca 1200", "persist " KEY128, "window 1920x1080", "start", "stop"},
	         {BL_CA, BL_PERSIST, BL_WINDOW, BL_START, BL_STOP}},
	        {{"window 16x16384", "start"}, {BL_WINDOW, BL_START}},
	        {{"ca 65536", "start"}, {BL_CA, BL_START}},
	        /* order: each at most once, in order; stop only after start */
	        {{"persist " KEY128, "ca 10"}, {BL_PERSIST, -EINVAL}},
	        {{"start", "start"}, {BL_START, -EINVAL}},
	        {{"stop"}, {-EINVAL}},
	        {{"start", "stop", "stop"}, {BL_START, BL_STOP, -EINVAL}},
	        {{"start", "window 800x600"}, {BL_START, -EINVAL}},
	        {{"ca 10", "ca 10"}, {BL_CA, -EINVAL}},
	        /* a refused line changes nothing: the next may still come */
	        {{"window 1x1", "window 800x600", "start"}, {-EINVAL, BL_WINDOW, BL_START}},
	        /* syntax */
	        {{"ca 0"}, {-EINVAL}},
	        {{"ca 65537"}, {-EINVAL}},
	        {{"ca 012"}, {-EINVAL}},
	        {{"ca -1"}, {-EINVAL}},
	        {{"ca"}, {-EINVAL}},
	        {{"ca  12"}, {-EINVAL}},
	        {{"ca 12 "}, {-EINVAL}},
	        {{"start "}, {-EINVAL}},
	        {{"start now"}, {-EINVAL}},
	        {{"START"}, {-EINVAL}},
	        {{""}, {-EINVAL}},
	        {{"persist"}, {-EINVAL}},
	        {{"persist " KEY128 "00"}, {-EINVAL}},
	        {{"persist 0001"}, {-EINVAL}},
	        {{"persist 000102030405060708090A0B0C0D0E0F101112131415161718191a1b1c1d1e1f"
	          "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"},
	         {-EINVAL}},
	        {{"window 800"}, {-EINVAL}},
	        {{"window 800x"}, {-EINVAL}},
	        {{"window x600"}, {-EINVAL}},
	        {{"window 800x600x2"}, {-EINVAL}},
	        {{"window 15x600"}, {-EINVAL}},
	        {{"window 800x16385"}, {-EINVAL}},
	        {{"window 0800x600"}, {-EINVAL}},
	        {{"window 800X600"}, {-EINVAL}},
	        {{"start\r"}, {-EINVAL}},
	        {{"stop\t"}, {-EINVAL}},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct browser_req r;

		browser_req_init(&r);
		for (size_t j = 0; j < 6 && cases[i].lines[j]; j++) {
			const char *why = NULL;
			const char *l = cases[i].lines[j];
			int got = browser_req_line(&r, l, strlen(l), &why);

			if (got != cases[i].want[j])
				fail_msg("case %zu line %zu \"%s\": %d, want %d", i, j, l, got,
				         cases[i].want[j]);
			assert_true(got >= 0 || (why && *why));
		}
	}
}

static void test_values(void **state)
{
	struct browser_req r;
	const char *why;
	static const char key[] = "persist " KEY128;

	(void)state;
	browser_req_init(&r);
	assert_int_equal(r.width, BROWSER_DEFAULT_WIDTH);
	assert_int_equal(r.height, BROWSER_DEFAULT_HEIGHT);
	assert_false(r.persist);
	assert_int_equal(browser_req_line(&r, "ca 1234", 7, &why), BL_CA);
	assert_int_equal(r.ca_len, 1234);
	assert_int_equal(browser_req_line(&r, key, strlen(key), &why), BL_PERSIST);
	assert_true(r.persist);
	for (int i = 0; i < BROWSER_KEY_LEN; i++)
		assert_int_equal(r.key[i], i);
	assert_int_equal(browser_req_line(&r, "window 333x222", 14, &why), BL_WINDOW);
	assert_int_equal(r.width, 333);
	assert_int_equal(r.height, 222);
	/* n counts: what follows is not read */
	assert_int_equal(browser_req_line(&r, "startXYZ", 5, &why), BL_START);
	/* a NUL inside a line */
	browser_req_init(&r);
	assert_int_equal(browser_req_line(&r, "start\0", 6, &why), -EINVAL);
	/* too long */
	char big[BROWSER_LINE_MAX + 2];
	memset(big, 'a', sizeof(big));
	assert_int_equal(browser_req_line(&r, big, sizeof(big), &why), -EINVAL);
	assert_string_equal(why, "line too long");
}

static void test_ca(void **state)
{
	static const char good[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
	static const char later[] = "junk\r\n-----BEGIN CERTIFICATE-----\nMIIB\n";
	static const char inline_[] = "x-----BEGIN CERTIFICATE-----\n";
	static const char nul[] = "-----BEGIN CERTIFICATE-----\n\0\n";

	(void)state;
	assert_true(browser_ca_valid((const uint8_t *)good, strlen(good)));
	assert_true(browser_ca_valid((const uint8_t *)later, strlen(later)));
	assert_false(browser_ca_valid((const uint8_t *)inline_, strlen(inline_)));
	assert_false(browser_ca_valid((const uint8_t *)nul, sizeof(nul) - 1));
	assert_false(browser_ca_valid((const uint8_t *)good, 20));
	assert_false(browser_ca_valid((const uint8_t *)"", 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_requests),
	        cmocka_unit_test(test_values),
	        cmocka_unit_test(test_ca),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

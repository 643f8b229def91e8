/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/macro.h"
#include "util/size.h"

static void test_parse(void **state)
{
	static const struct {
		const char *s;
		int r;
		uint64_t v;
	} cases[] = {
	        {"0", 0, 0},
	        {"4096", 0, 4096},
	        {"1K", 0, 1024},
	        {"1k", 0, 1024},
	        {"64G", 0, 64ull << 30},
	        {"64GiB", 0, 64ull << 30},
	        {"64GB", 0, 64ull << 30},
	        {"1.5T", 0, 3ull << 39},
	        {"512M", 0, 512ull << 20},
	        {"10B", 0, 10},
	        {"8E", 0, 1ull << 63},
	        {"9E", -ERANGE, 0},
	        {"99999999999999999999", -ERANGE, 0},
	        {"", -EINVAL, 0},
	        {"G", -EINVAL, 0},
	        {"-1", -EINVAL, 0},
	        {"1.", -EINVAL, 0},
	        {"1X", -EINVAL, 0},
	        {"1GG", -EINVAL, 0},
	        {"1 G", -EINVAL, 0},
	        {" 1", -EINVAL, 0},
	        {"1Bi", -EINVAL, 0},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		uint64_t v = 7;
		assert_int_equal(size_parse(cases[i].s, &v), cases[i].r);
		assert_int_equal(v, cases[i].r == 0 ? cases[i].v : 7);
	}
}

static void test_format(void **state)
{
	char buf[32];

	assert_string_equal(size_format(0, buf, sizeof(buf)), "0 B");
	assert_string_equal(size_format(1023, buf, sizeof(buf)), "1023 B");
	assert_string_equal(size_format(1536, buf, sizeof(buf)), "1.5 KiB");
	assert_string_equal(size_format(64ull << 30, buf, sizeof(buf)), "64.0 GiB");
	assert_string_equal(size_format(UINT64_MAX, buf, sizeof(buf)), "16.0 EiB");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse),
	        cmocka_unit_test(test_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

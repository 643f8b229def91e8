/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/conf.h"
#include "util/error.h"

static void test_parse_table(void **state)
{
	static const struct {
		const char *text;
		int r;
		unsigned line;
		const char *key, *value;
	} cases[] = {
	        {"state-dir = /srv/slate\n", 0, 0, "state-dir", "/srv/slate"},
	        {"# comment\n\n  libvirt-uri=qemu:///session  \n", 0, 0, "libvirt-uri",
	         "qemu:///session"},
	        {"a = b = c", 0, 0, "a", "b = c"},
	        {"empty =", 0, 0, "empty", ""},
	        {"crlf = x\r\n", 0, 0, "crlf", "x"},
	        {"ok = 1\nnoequals\n", SLATE_ERR_INVALID_FORMAT, 2, NULL, NULL},
	        {"= value", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL},
	        {"Upper = 1", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL},
	        {"sp ace = 1", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL},
	        {"a = 1\n# x\na = 2\n", SLATE_ERR_INVALID_FORMAT, 3, NULL, NULL},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		struct conf *c = NULL;
		unsigned line = 0;
		int r = conf_parse(cases[i].text, strlen(cases[i].text), &c, &line);

		assert_int_equal(r, cases[i].r);
		if (r == 0) {
			assert_non_null(c);
			assert_string_equal(conf_get(c, cases[i].key), cases[i].value);
			assert_null(conf_get(c, "missing"));
		} else {
			assert_null(c);
			assert_int_equal(line, cases[i].line);
		}
		conf_free(c);
	}
}

static void test_nul_and_size(void **state)
{
	static const char with_nul[] = "a = b\0c\n";
	struct conf *c = NULL;
	char *big;

	assert_int_equal(conf_parse(with_nul, sizeof(with_nul) - 1, &c, NULL),
	                 SLATE_ERR_INVALID_FORMAT);
	big = calloc(1, CONF_MAX_SIZE + 2);
	memset(big, '#', CONF_MAX_SIZE + 1);
	assert_int_equal(conf_parse(big, CONF_MAX_SIZE + 1, &c, NULL), SLATE_ERR_TOO_LARGE);
	assert_null(c);
	free(big);
}

static void test_load_missing(void **state)
{
	struct conf *c = NULL;

	assert_int_equal(conf_load("/nonexistent/slate.conf", &c, NULL), -ENOENT);
	assert_null(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse_table),
	        cmocka_unit_test(test_nul_and_size),
	        cmocka_unit_test(test_load_missing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The error context type (util/error.h): set, errno descriptions said once, context wrapped
 * outermost first, NULL errors, truncation, and a description for every code. */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/error.h"

static void test_set_and_wrap(void **state)
{
	struct slate_error e = {0};

	(void)state;
	assert_string_equal(slate_error_text(&e), "Success");
	assert_int_equal(slate_error_set(&e, -EBUSY, "ws1 runs"), -EBUSY);
	assert_int_equal(e.code, -EBUSY);
	assert_string_equal(e.msg, "ws1 runs");
	assert_int_equal(slate_error_wrap(&e, -EIO, "stop %s", "ws1"), -EBUSY);
	assert_string_equal(e.msg, "stop ws1: ws1 runs");
	assert_int_equal(slate_error_wrap(&e, -EIO, "run"), -EBUSY);
	assert_string_equal(slate_error_text(&e), "run: stop ws1: ws1 runs");

	/* The description once, not twice. */
	e = (struct slate_error){0};
	assert_int_equal(slate_error_errno(&e, -ENOSPC, "preparing its disks"), -ENOSPC);
	assert_string_equal(e.msg, "preparing its disks: No space left on device");
	assert_int_equal(slate_error_errno(&e, -ENOSPC, "%s", "disks: No space left on device"),
	                 -ENOSPC);
	assert_string_equal(e.msg, "disks: No space left on device");
	assert_int_equal(slate_error_errno(&e, SLATE_ERR_LIBVIRT, "%s", ""), SLATE_ERR_LIBVIRT);
	assert_string_equal(e.msg, "libvirt cannot be reached");

	/* Wrapping an empty error: the code's description is the innermost message. */
	e = (struct slate_error){0};
	assert_int_equal(slate_error_wrap(&e, -ENOENT, "start %s", "ws2"), -ENOENT);
	assert_string_equal(e.msg, "start ws2: No such file or directory");

	/* NULL: the code goes back, nothing else happens. */
	assert_int_equal(slate_error_set(NULL, -EPERM, "x"), -EPERM);
	assert_int_equal(slate_error_errno(NULL, -EPERM, "x"), -EPERM);
	assert_int_equal(slate_error_wrap(NULL, -EPERM, "x"), -EPERM);
	assert_non_null(slate_error_text(NULL));
}

static void test_truncation(void **state)
{
	struct slate_error e = {0};
	char big[SLATE_ERROR_MSG_MAX * 2];

	(void)state;
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	(void)slate_error_set(&e, -EIO, "%s", big);
	assert_int_equal(strlen(e.msg), SLATE_ERROR_MSG_MAX - 1);
	(void)slate_error_wrap(&e, -EIO, "context");
	assert_int_equal(strlen(e.msg), SLATE_ERROR_MSG_MAX - 1);
	assert_memory_equal(e.msg, "context: aaa", 12);
	(void)slate_error_errno(&e, -EIO, "%s", big);
	assert_int_equal(strlen(e.msg), SLATE_ERROR_MSG_MAX - 1);
}

static void test_codes(void **state)
{
	(void)state;
	for (int c = SLATE_ERR_INTERNAL; c > SLATE_ERR_LAST_; c--)
		assert_string_not_equal(slate_strerror(c), "Unknown slate error");
	assert_string_equal(slate_strerror(SLATE_ERR_COMPROMISED),
	                    "Compromised: may not start until wiped");
	assert_string_equal(slate_strerror(SLATE_ERR_LAST_), "Unknown slate error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_set_and_wrap),
	        cmocka_unit_test(test_truncation),
	        cmocka_unit_test(test_codes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* util/time: the monotonic clock in seconds and milliseconds, against clock_gettime and a sleep. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "util/time.h"

static void test_agree(void **state)
{
	struct timespec ts;
	double s;
	int64_t ms;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	s = time_mono_s();
	ms = time_mono_ms();
	/* Read in that order: each is at or after the one before, and all within a second. */
	assert_true(s >= (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
	assert_true(s - ((double)ts.tv_sec + (double)ts.tv_nsec / 1e9) < 1.0);
	assert_true((double)ms >= s * 1000.0 - 1.0);
	assert_true((double)ms - s * 1000.0 < 1000.0);
}

static void test_advances(void **state)
{
	const struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
	double s0 = time_mono_s();
	int64_t ms0 = time_mono_ms();

	(void)nanosleep(&pause, NULL);
	assert_true(time_mono_s() - s0 >= 0.019);
	assert_true(time_mono_ms() - ms0 >= 19);
	/* Never backwards, reading after reading. */
	for (int i = 0; i < 1000; i++) {
		int64_t a = time_mono_ms(), b = time_mono_ms();
		assert_true(b >= a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_agree),
	        cmocka_unit_test(test_advances),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <time.h>

#include "util/time.h"

/* CLOCK_MONOTONIC cannot fail for a valid clock id and pointer: its result is not checked. */

double time_mono_s(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t time_mono_ms(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

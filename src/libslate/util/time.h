/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The one reading of CLOCK_MONOTONIC: deadlines, timeouts and durations, never wall time. */

#include <stdint.h>

/* Seconds since an arbitrary fixed point, with the clock's fraction. */
double time_mono_s(void);
/* Whole milliseconds since the same point (signed: deadline - now may go below zero). */
int64_t time_mono_ms(void);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Crash points for the crash-safety tests: crash_point("create:after-clone") kills the process
 * with SIGKILL when the environment variable SLATE_CRASH_POINT equals that name. The variable is
 * read once (the first time any point is passed), so a disarmed point costs one comparison with
 * NULL. doc/crash-points.md lists every point and the state a crash there must leave.
 */

#define CRASH_POINT_ENV "SLATE_CRASH_POINT"

void crash_point(const char *name);
/* Reads SLATE_CRASH_POINT again: for a test child that sets it after fork(). */
void crash_point_reload(void);

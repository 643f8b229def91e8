/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/macro.h"
#include "workspace/crash.h"

static pthread_once_t crash_once = PTHREAD_ONCE_INIT;
static char *crash_armed; /* the point to die at, or NULL */

static void crash_load(void)
{
	const char *e = getenv(CRASH_POINT_ENV);

	free(crash_armed);
	crash_armed = e && *e ? strdup(e) : NULL;
}

void crash_point_reload(void)
{
	(void)pthread_once(&crash_once, crash_load);
	crash_load();
}

void crash_point(const char *name)
{
	(void)pthread_once(&crash_once, crash_load);
	if (!crash_armed || !streq(crash_armed, name))
		return;
	/* No cleanup, no atexit handlers, no flushing: exactly what kill -9 does. */
	(void)raise(SIGKILL);
	_exit(137);
}

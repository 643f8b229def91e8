/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The daemon's routes: what each /v1 path does. slated's main wires them to the server. */

#include <stddef.h>
#include <time.h>

#include "api/server.h"

struct daemon_ctx {
	const char *state_dir;
	const char *runtime_dir;
	const char *libvirt_uri;
	int state_dirfd;
	time_t started;
};

/* Returns the route table (static) and its length in *ret_n. */
const struct api_route *routes_table(size_t *ret_n);

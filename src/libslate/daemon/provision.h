/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Provisioning a running guest (daemon/provision.c). */

#include <stddef.h>

#include "util/error.h"

struct daemon_ctx;
struct workspace;

/*
 * Hands the running guest its placeholders (environment, files) and the egress CA through
 * `slate-guest --provision` (an exec of slated's own). Called after every boot; call it again
 * when the workspace's secrets change while it runs. Returns 0, or < 0 with err (may be NULL)
 * saying why.
 */
int daemon_provision(struct daemon_ctx *d, const struct workspace *w, struct slate_error *err);

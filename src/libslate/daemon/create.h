/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Creating a workspace with what goes with it (daemon/create.c). */

#include <stdbool.h>

#include "util/error.h"
#include "workspace/workspace.h"

struct daemon_ctx;
struct egress_policy;
struct json_object;

struct daemon_create_spec {
	struct workspace_create_args args;  /* checked by the caller (names, sizes, shares) */
	bool generate_ssh_key;              /* a key pair from the SSH agent, made with it */
	const struct egress_policy *egress; /* its egress.json; NULL: none (allow-all) */
};

/*
 * Creates the workspace under its lock, with its key pair and egress policy: a workspace asked
 * for with them never exists without them (a failure after the create deletes it again).
 * Returns 0 with *ret (may be NULL) the new workspace and *ret_ssh_key (may be NULL) the key's
 * JSON, or < 0 with err saying why: -EEXIST the name is taken, -ENOENT the image is not
 * installed, -ENOSPC the filesystem is full.
 */
int daemon_create(struct daemon_ctx *d, const struct daemon_create_spec *spec,
                  struct workspace **ret, struct json_object **ret_ssh_key,
                  struct slate_error *err);

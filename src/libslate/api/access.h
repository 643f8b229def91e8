/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Who may see what, shared by the handlers (api/access.c): storage that must be open, and
 * workspaces only their owner (or root) may see. */

#include <stdbool.h>

#include "api/server.h"

struct daemon_ctx;
struct workspace;

/* Return 0 when workspace (image) storage is open; otherwise fill reply with a 503 that says why
 * and return -ENODEV. */
int api_need_workspaces(const struct daemon_ctx *d, struct api_reply *reply);
int api_need_images(const struct daemon_ctx *d, struct api_reply *reply);
/* Whether caller c may see workspace w: its owner, or root. */
bool api_may_see(const struct api_caller *c, const struct workspace *w);
/* Loads a workspace the caller may see into *ret (ret may be NULL: only check); another user's
 * is "not found", like a missing one. On failure fills reply (400, 404, ...) and returns < 0. */
int api_load_visible(struct daemon_ctx *d, const struct api_request *req, const char *name,
                     struct workspace **ret, struct api_reply *reply);

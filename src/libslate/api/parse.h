/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Request bodies parsed and checked the same way by several handlers (api/parse.c): a create
 * request (POST /workspaces, and the create part of POST /run), and its egress settings. */

#include "api/server.h"
#include "daemon/create.h"

struct egress_policy;
struct json_object;

/* A create request's body, parsed and checked as POST /workspaces does (the caller's shares,
 * the image, sizes, egress settings), into what daemon_create takes; api_create_done frees it.
 * On failure fills reply and returns < 0. */
#define API_MAX_SHARES 8 /* VM_MAX_SHARES: one virtiofs device each */
struct api_create {
	struct daemon_create_spec spec;
	struct workspace_share shares[API_MAX_SHARES];
	char *image;
	struct egress_policy *egress;
};
/* The image a request that names none gets: the only one installed; else replies 400 (none, or
 * several: name one) and fails. *ret is the caller's to free. */
int api_default_image(struct daemon_ctx *d, char **ret, struct api_reply *reply);
int api_create_parse(struct api_request *req, struct json_object *body, struct api_create *c,
                     struct api_reply *reply);
void api_create_done(struct api_create *c);
/* `create`'s egress settings, {"default": "allow-all"|"deny-all", "rules": [{"action", "host"}]}:
 * checked as `slate egress` checks them (egress_policy_apply) into a new policy, else a 400 in
 * reply and -EINVAL. */
int api_egress_from_json(struct json_object *o, struct egress_policy **ret,
                         struct api_reply *reply);

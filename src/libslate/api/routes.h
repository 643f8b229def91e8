/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The daemon's routes: what each /v1 path does. slated's main wires them to the server. */

#include <stddef.h>
#include <time.h>

#include "api/server.h"
#include "daemon/create.h"
#include "daemon/daemon.h"
#include "vm/lifecycle.h"

/* Returns the route table (static) and its length in *ret_n. */
const struct api_route *routes_table(size_t *ret_n);

/* Return 0 when workspace (image) storage is open; otherwise fill reply with a 503 that says why
 * and return -ENODEV. */
int api_need_workspaces(const struct daemon_ctx *d, struct api_reply *reply);
int api_need_images(const struct daemon_ctx *d, struct api_reply *reply);
/* Loads a workspace the caller may see into *ret (ret may be NULL: only check); another user's
 * is "not found", like a missing one. On failure fills reply (400, 404, ...) and returns < 0. */
struct workspace;
int api_load_visible(struct daemon_ctx *d, const struct api_request *req, const char *name,
                     struct workspace **ret, struct api_reply *reply);

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
int api_create_parse(struct api_request *req, struct json_object *body, struct api_create *c,
                     struct api_reply *reply);
void api_create_done(struct api_create *c);

/* Handlers in api/workspaces.c and api/images.c. */
int handle_workspace_list(struct api_request *req, struct api_reply *reply);
int handle_workspace_create(struct api_request *req, struct api_reply *reply);
int handle_workspace_get(struct api_request *req, struct api_reply *reply);
int handle_workspace_delete(struct api_request *req, struct api_reply *reply);
int handle_workspace_reset(struct api_request *req, struct api_reply *reply);
int handle_workspace_wipe(struct api_request *req, struct api_reply *reply);
int handle_workspace_wipe_home(struct api_request *req, struct api_reply *reply);
int handle_checkpoint_list(struct api_request *req, struct api_reply *reply);
int handle_checkpoint_revert(struct api_request *req, struct api_reply *reply);
int handle_image_list(struct api_request *req, struct api_reply *reply);
int handle_image_import(struct api_request *req, struct api_reply *reply);
/* Handlers in api/catalog.c. */
int handle_catalog_get(struct api_request *req, struct api_reply *reply);
int handle_catalog_update(struct api_request *req, struct api_reply *reply);
int handle_image_pull(struct api_request *req, struct api_reply *reply);
int handle_image_verify(struct api_request *req, struct api_reply *reply);
/* In api/vm.c: start/stop streams, the console upgrade, and the daemon's side of the VMs. */
int handle_workspace_start(struct api_request *req, struct api_reply *reply);
int handle_workspace_stop(struct api_request *req, struct api_reply *reply);
int handle_workspace_console(struct api_request *req, struct api_reply *reply);
/* Adds the VM's view to a workspace's JSON: "state" suspended or paused where that is so, and
 * "accelerator" (kvm or tcg: the running domain's, else what a start would use). */
int vm_workspace_json(struct daemon_ctx *d, const char *name, int active, struct json_object *o);
/* In api/sshkey.c: the workspace's keys in the sign-only SSH agent (doc/ssh-agent.md; the agent
 * and its channel service are daemon/agent.h's). */
int handle_sshkey_get(struct api_request *req, struct api_reply *reply);
int handle_sshkey_generate(struct api_request *req, struct api_reply *reply);
int handle_sshkey_import(struct api_request *req, struct api_reply *reply);
/* In api/secrets.c: secret set/ls/rm (doc/secrets.md). */
int handle_secret_list(struct api_request *req, struct api_reply *reply);
int handle_secret_set(struct api_request *req, struct api_reply *reply);
int handle_secret_delete(struct api_request *req, struct api_reply *reply);
/* In api/egress.c: egress policy (the proxy service is daemon/egress.h's). */
int handle_egress_get(struct api_request *req, struct api_reply *reply);
int handle_egress_set(struct api_request *req, struct api_reply *reply);
/* `create`'s egress settings, {"default": "allow-all"|"deny-all", "rules": [{"action", "host"}]}:
 * checked as `slate egress` checks them (egress_policy_apply) into a new policy, else a 400 in
 * reply and -EINVAL. */
struct egress_policy;
int api_egress_from_json(struct json_object *o, struct egress_policy **ret,
                         struct api_reply *reply);
/* In api/images.c: an installed image as JSON (GET /v1/images, pull, import); its digest as
 * the API shows it (api_digest_text): "sha256-1m:<hex>" (image/verify.h) or, for an image
 * installed with a plain SHA-256, "sha256:<hex>". out holds API_DIGEST_TEXT_MAX bytes. */
struct image_info;
#define API_DIGEST_TEXT_MAX 96
struct json_object *api_image_json(const struct image_info *i, bool with_installed);
const char *api_digest_text(const char *stored, char out[API_DIGEST_TEXT_MAX]);
/* In api/trace.c: the audit trail (workspace/audit.h). */
int handle_trace(struct api_request *req, struct api_reply *reply);

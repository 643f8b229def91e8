/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The daemon's routes: what each /v1 path does. slated's main wires them to the server. */

#include <stddef.h>
#include <time.h>

#include "api/server.h"
#include "daemon/daemon.h"
#include "vm/lifecycle.h"

/* Returns the route table (static) and its length in *ret_n. */
const struct api_route *routes_table(size_t *ret_n);

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
int handle_image_snapshot(struct api_request *req, struct api_reply *reply);
int handle_image_verify(struct api_request *req, struct api_reply *reply);
/* In api/vm.c: start/stop streams and the console upgrade. */
int handle_workspace_start(struct api_request *req, struct api_reply *reply);
int handle_workspace_stop(struct api_request *req, struct api_reply *reply);
int handle_workspace_probe(struct api_request *req, struct api_reply *reply);
int handle_system_residue(struct api_request *req, struct api_reply *reply);
int handle_workspace_console(struct api_request *req, struct api_reply *reply);
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
/* In api/trace.c: the audit trail (workspace/audit.h). */
int handle_trace(struct api_request *req, struct api_reply *reply);
/* In api/browser.c: the workspace's browser VM (daemon/browser.h). */
int handle_browser_get(struct api_request *req, struct api_reply *reply);
int handle_browser_start(struct api_request *req, struct api_reply *reply);
int handle_browser_stop(struct api_request *req, struct api_reply *reply);
int handle_browser_screenshot(struct api_request *req, struct api_reply *reply);
int handle_browser_view(struct api_request *req, struct api_reply *reply);
int handle_browser_view_stop(struct api_request *req, struct api_reply *reply);

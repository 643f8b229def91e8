/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The daemon's routes: what each /v1 path does. slated's main wires them to the server. */

#include <stddef.h>
#include <time.h>

#include "api/server.h"

struct storage;
struct workspace_store;

struct daemon_ctx {
	const char *state_dir;
	const char *runtime_dir;
	const char *libvirt_uri;
	int state_dirfd;
	time_t started;
	/* NULL when the storage could not be opened; storage_error then says why. */
	struct storage *storage;
	struct workspace_store *workspaces;
	const char *storage_error;
};

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

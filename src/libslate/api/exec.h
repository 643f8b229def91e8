/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* /v1/workspaces/:name/exec and /v1/run (api/exec.c); the sessions are daemon/exec.h's. */

#include "api/server.h"

int handle_workspace_exec(struct api_request *req, struct api_reply *reply);
int handle_run(struct api_request *req, struct api_reply *reply);

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The API side of the sign-only SSH agent: ssh-key routes and the agent channel service. */
#include <errno.h>

#include "api/protocol.h"
#include "api/routes.h"

int handle_sshkey_get(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

int handle_sshkey_generate(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

int handle_sshkey_import(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

int agent_service_start(struct daemon_ctx *d)
{
	(void)d;
	return 0;
}

void agent_service_stop(struct daemon_ctx *d)
{
	(void)d;
}

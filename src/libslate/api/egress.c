/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Egress policy routes and the egress proxy's channel service. */
#include <errno.h>

#include "api/protocol.h"
#include "api/routes.h"

int handle_egress_get(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

int handle_egress_set(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

int proxy_service_start(struct daemon_ctx *d)
{
	(void)d;
	return 0;
}

void proxy_service_stop(struct daemon_ctx *d)
{
	(void)d;
}

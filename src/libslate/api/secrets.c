/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Secret routes: set, list, remove (values never leave slated). */
#include <errno.h>

#include "api/protocol.h"
#include "api/routes.h"

int handle_secret_list(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

int handle_secret_set(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

int handle_secret_delete(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

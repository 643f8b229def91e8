/* SPDX-License-Identifier: GPL-2.0-or-later */
/* GET /workspaces/:name/trace: the audit trail. */
#include <errno.h>

#include "api/protocol.h"
#include "api/routes.h"

int handle_trace(struct api_request *req, struct api_reply *reply)
{
	(void)req;
	return api_reply_error(reply, 501, API_ERR_FAILED, "not implemented yet");
}

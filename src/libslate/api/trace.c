/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * GET /workspaces/:name/trace[?leaks=1][&max=N]: the workspace's audit trail (workspace/audit.h),
 * oldest first: egress requests, leaks blocked, SSH signatures, SigV4 re-signing. leaks=1 keeps
 * only the leaks; max keeps the newest N (default 1000, 0 for all).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/access.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "util/error.h"
#include "util/json.h"
#include "workspace/audit.h"

#define TRACE_DEFAULT_MAX 1000u
#define TRACE_LIMIT 100000u

static bool arg_true(const char *v)
{
	return v && (streq(v, "1") || streq(v, "true") || streq(v, "yes"));
}

int handle_trace(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0], *max_arg = api_request_arg(req, "max");
	static const char *const leaks_only[] = {"leak", NULL};
	_cleanup_json_ struct json_object *events = NULL, *o = NULL;
	unsigned long max = TRACE_DEFAULT_MAX;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return 0;
	if (max_arg) {
		char *end;
		errno = 0;
		max = strtoul(max_arg, &end, 10);
		if (errno || !*max_arg || *end || max > TRACE_LIMIT)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "max must be a number from 0 (all) to %u",
			                       TRACE_LIMIT);
	}
	r = audit_read(d->workspaces, name,
	               arg_true(api_request_arg(req, "leaks")) ? leaks_only : NULL, max, &events);
	if (r < 0)
		return api_reply_error(reply, 500, API_ERR_FAILED,
		                       "cannot read the audit trail of %s: %s", name,
		                       slate_strerror(r));
	o = json_object_new_object();
	if (!o || json_add_string(o, "workspace", name) < 0 ||
	    json_add(o, "events", TAKE_PTR(events)) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

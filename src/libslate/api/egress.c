/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Egress policy routes (GET/POST /workspaces/:name/egress). The proxy service itself is the
 * daemon's (daemon/egress.h).
 */
#include <errno.h>
#include <string.h>

#include "api/access.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "daemon/egress.h"
#include "proxy/policy.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "util/macro.h"

static int reply_policy(struct api_reply *reply, const char *name, const struct egress_policy *p)
{
	_cleanup_json_ struct json_object *o = NULL;
	int r = egress_policy_to_json(p, &o);

	if (r < 0 || json_add_string(o, "workspace", name) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

int handle_egress_get(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return 0;
	r = daemon_egress_load(d, name, &p);
	if (r < 0)
		return api_reply_error(reply, 500, API_ERR_FAILED,
		                       "cannot read the egress policy of %s: %s", name,
		                       slate_strerror(r));
	return reply_policy(reply, name, p);
}

int handle_egress_set(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0], *action = NULL, *host = NULL;
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return 0;
	if (!req->body || json_get_string(req->body, "action", &action) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "the body needs \"action\": allow-all, deny-all, allow or "
		                       "deny");
	r = json_get_string(req->body, "host", &host);
	if (r < 0 && r != -ENOENT)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "\"host\" must be a string");
	if ((streq(action, "allow") || streq(action, "deny")) && !host)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "%s needs a host", action);
	if ((streq(action, "allow-all") || streq(action, "deny-all")) && host)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "%s takes no host", action);

	r = daemon_egress_update(d, name, action, host, &p);
	if (r == -EINVAL)
		return api_reply_error(
		        reply, 400, API_ERR_BAD_REQUEST, "%s",
		        !streq(action, "allow") && !streq(action, "deny") &&
		                        !streq(action, "allow-all") && !streq(action, "deny-all")
		                ? "unknown action: allow-all, deny-all, allow HOST or deny HOST"
		                : "invalid host: a host name, an IP address or a network "
		                  "(10.0.0.0/8)");
	if (r == -E2BIG)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "the egress policy of %s has %u rules already", name,
		                       EGRESS_MAX_RULES);
	if (r < 0)
		return api_reply_error(reply, 500, API_ERR_FAILED,
		                       "cannot update the egress policy of %s: %s", name,
		                       slate_strerror(r));
	log_ws(LOG_INFO, name, "egress policy of %s: %s%s%s", name, action, host ? " " : "",
	       host ? host : "");
	return reply_policy(reply, name, p);
}

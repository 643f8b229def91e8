/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Egress policy routes (GET/POST /workspaces/:name/egress) and the parsing of a create
 * request's egress settings. The proxy service itself is the daemon's (daemon/egress.h).
 */
#include <errno.h>
#include <string.h>

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

int api_egress_from_json(struct json_object *o, struct egress_policy **ret, struct api_reply *reply)
{
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	struct json_object *rules = NULL;
	const char *def = "allow-all";
	int r;

	if (!json_object_is_type(o, json_type_object) ||
	    (json_object_object_get_ex(o, "default", NULL) &&
	     json_get_string(o, "default", &def) < 0) ||
	    (json_object_object_get_ex(o, "rules", NULL) && json_get_array(o, "rules", &rules) < 0))
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "egress: {\"default\": \"allow-all\"|\"deny-all\", "
		                       "\"rules\": [{\"action\": \"allow\"|\"deny\", \"host\"}]}"),
		       -EINVAL;
	if (!streq(def, "allow-all") && !streq(def, "deny-all"))
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "egress: the default is allow-all or deny-all, not '%s'",
		                       def),
		       -EINVAL;
	r = egress_policy_new(&p);
	if (r >= 0)
		r = egress_policy_apply(p, def, NULL);
	if (r < 0)
		return r;
	for (size_t i = 0; rules && i < json_object_array_length(rules); i++) {
		struct json_object *x = json_object_array_get_idx(rules, i);
		const char *action = NULL, *host = NULL;

		if (json_get_string(x, "action", &action) < 0 ||
		    json_get_string(x, "host", &host) < 0 ||
		    (!streq(action, "allow") && !streq(action, "deny")))
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "egress rule %zu: {\"action\": \"allow\"|\"deny\", "
			                       "\"host\": HOST}",
			                       i + 1),
			       -EINVAL;
		/* The same checks as `slate egress NAME allow|deny HOST`. */
		r = egress_policy_apply(p, action, host);
		if (r == -EINVAL)
			return api_reply_error(
			               reply, 400, API_ERR_BAD_REQUEST,
			               "--%s %s: invalid host: a host name, an IP address or "
			               "a network (10.0.0.0/8)",
			               action, host),
			       -EINVAL;
		if (r == -E2BIG)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "egress: at most %u rules", EGRESS_MAX_RULES),
			       -EINVAL;
		if (r < 0)
			return r;
	}
	*ret = TAKE_PTR(p);
	return 0;
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

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The API side of the sign-only SSH agent (agent/agent.h, doc/ssh-agent.md):
 *   GET  /v1/workspaces/:name/ssh-key         the workspace's keys (public side only)
 *   POST /v1/workspaces/:name/ssh-key         generate its managed ed25519 key
 *   POST /v1/workspaces/:name/ssh-key/import  import an OpenSSH private key
 * The agent and its "ssh-agent" service on the guest channels are the daemon's (daemon/agent.h).
 */
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/keys.h"
#include "agent/openssh.h"
#include "api/access.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "daemon/agent.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"

/* The agent and the master key, or a 503 that says why not. */
static int need_agent(struct daemon_ctx *d, struct api_reply *reply)
{
	if (!d->install)
		return api_reply_error(reply, 503, API_ERR_UNAVAILABLE,
		                       "the host master key is unavailable (see slated's log): "
		                       "host-held SSH keys cannot be stored"),
		       -ENODEV;
	if (!d->agent)
		return api_reply_error(reply, 503, API_ERR_UNAVAILABLE,
		                       "the SSH agent service is not running (see slated's log)"),
		       -ENODEV;
	return 0;
}

static int reply_key(struct api_reply *reply, const char *name, struct json_object *key)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	const char *line = NULL;

	if (!o || !key)
		return json_object_put(key), -ENOMEM;
	(void)json_get_string(key, "public_key", &line);
	if (json_add_string(o, "name", name) < 0 || json_add_string(o, "public_key", line) < 0 ||
	    json_add(o, "key", key) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 201, TAKE_PTR(o));
}

int handle_sshkey_get(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	_cleanup_json_ struct json_object *o = json_object_new_object();

	if (!o)
		return -ENOMEM;
	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	if (json_add_string(o, "name", name) < 0 ||
	    json_add(o, "keys", daemon_agent_keys(d, name)) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

int handle_sshkey_generate(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	struct json_object *key = NULL;
	struct slate_error err = {0};
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0 ||
	    need_agent(d, reply) < 0)
		return -EINVAL;
	r = daemon_agent_generate(d, name, &key, &err);
	if (r == -EEXIST)
		return api_reply_error(
		        reply, 409, API_ERR_CONFLICT,
		        "workspace '%s' has a generated SSH key already ('slate ssh-key "
		        "show %s'); 'slate wipe-home' discards it",
		        name, name);
	if (r == -E2BIG)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "workspace '%s' holds %u SSH keys, the most it may", name,
		                       AGENT_MAX_KEYS);
	if (r < 0)
		return api_reply_error(reply, 500, API_ERR_FAILED, "%s", slate_error_text(&err));
	log_ws(LOG_INFO, name, "generated an SSH key for workspace %s (uid %u)", name,
	       (unsigned)req->caller.uid);
	return reply_key(reply, name, key);
}

/* Overwrites a string member of the request body in place (json-c's own copy). */
static void wipe_member(struct json_object *body, const char *key)
{
	struct json_object *v;

	if (body && json_object_object_get_ex(body, key, &v) &&
	    json_object_is_type(v, json_type_string))
		sodium_memzero((char *)json_object_get_string(v),
		               (size_t)json_object_get_string_len(v));
}

static int import_key(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0], *key = NULL, *passphrase = NULL;
	struct json_object *info = NULL;
	struct slate_error err = {0};
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0 ||
	    need_agent(d, reply) < 0)
		return -EINVAL;
	if (!req->body || json_get_string(req->body, "key", &key) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "an import needs \"key\": the private key file's text");
	r = json_get_string(req->body, "passphrase", &passphrase);
	if (r < 0 && r != -ENOENT)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "\"passphrase\" must be a string");
	if (strlen(key) > OPENSSH_KEY_MAX)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "a private key file is at most %u KiB",
		                       OPENSSH_KEY_MAX / 1024);
	if (passphrase && strlen(passphrase) > OPENSSH_PASSPHRASE_MAX)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "a passphrase is at most %u bytes", OPENSSH_PASSPHRASE_MAX);
	r = daemon_agent_import(d, name, key, strlen(key), passphrase, &info, &err);
	switch (r) {
	case 0:
		break;
	case -ENOKEY:
		return api_reply_error(reply, 400, AGENT_API_ERR_PASSPHRASE_REQUIRED,
		                       "the key is protected by a passphrase");
	case -EKEYREJECTED:
		return api_reply_error(reply, 400, AGENT_API_ERR_PASSPHRASE_INCORRECT,
		                       "the passphrase does not open the key");
	case -EEXIST:
		return api_reply_error(reply, 409, API_ERR_CONFLICT,
		                       "workspace '%s' has this key already", name);
	case -E2BIG:
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "workspace '%s' holds %u SSH keys, the most it may", name,
		                       AGENT_MAX_KEYS);
	case -EINVAL:
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "not a private key OpenSSH can read%s%s",
		                       err.msg[0] ? ": " : "", err.msg);
	case -ENOENT:
		return api_reply_error(
		        reply, 503, API_ERR_UNAVAILABLE,
		        "OpenSSH's ssh-keygen, ssh-agent and ssh-add are needed on the "
		        "host (apt-get install openssh-client)");
	default:
		return api_reply_error(reply, r == -EIO ? 400 : 500,
		                       r == -EIO ? API_ERR_BAD_REQUEST : API_ERR_FAILED,
		                       "importing the key into %s: %s", name,
		                       slate_error_text(&err));
	}
	log_ws(LOG_INFO, name, "imported an SSH key into workspace %s (uid %u)", name,
	       (unsigned)req->caller.uid);
	return reply_key(reply, name, info);
}

int handle_sshkey_import(struct api_request *req, struct api_reply *reply)
{
	int r = import_key(req, reply);

	/* The key and its passphrase do not outlive the request in our copy of the body. */
	wipe_member(req->body, "key");
	wipe_member(req->body, "passphrase");
	return r;
}

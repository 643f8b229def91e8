/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Secret routes: set, list, remove. A value arrives once, in the body of POST /secrets over the
 * local socket; it goes into a secure buffer and the vault, and the reply carries only its
 * placeholders. No reply, error or log line ever holds a value.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "api/access.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "channel/channels.h"
#include "daemon/provision.h"
#include "secrets/install.h"
#include "secrets/secrets.h"
#include "secrets/vault.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "workspace/workspace.h"

/* Without a usable master key nothing here works: say why, once more, from the key itself. */
static int need_install(struct daemon_ctx *d, struct api_reply *reply)
{
	struct install *probe = NULL;
	struct slate_error err = {0};
	int r;

	if (d->install)
		return 0;
	r = install_open(d->state_dirfd, NULL, &probe, &err);
	install_free(probe);
	if (r >= 0)
		(void)api_reply_error(reply, 503, API_ERR_UNAVAILABLE,
		                      "secrets are unavailable: the host master key could not be "
		                      "loaded when slated started (it can be now: restart slated)");
	else
		(void)api_reply_error(
		        reply, 503, API_ERR_UNAVAILABLE,
		        "secrets are unavailable: the host master key (%s/install/"
		        "master.key or the systemd credential slate-master-key) cannot "
		        "be used: %s; fix it (32 bytes, mode 0600, owned by slated's "
		        "user) and restart slated",
		        d->state_dir, slate_error_text(&err));
	return -ENOKEY;
}

/* Maps a vault error (err says what) onto a reply. Returns r. */
static int reply_vault_error(struct api_reply *reply, int r, const char *what, const char *err)
{
	unsigned status = 500;
	const char *code = API_ERR_FAILED;

	if (r == -ENOENT) {
		status = 404;
		code = API_ERR_NOT_FOUND;
	} else if (r == -EINVAL || r == -E2BIG) {
		status = 400;
		code = API_ERR_BAD_REQUEST;
	} else if (r == -ENOSPC || r == -EDQUOT) {
		status = 507;
		code = API_ERR_NO_SPACE;
	} else if (r == -EWOULDBLOCK) {
		status = 409;
		code = API_ERR_BUSY;
	}
	(void)api_reply_error(reply, status, code, "%s: %s", what,
	                      err && *err ? err : slate_strerror(r));
	return r;
}

/*
 * The scope a request names: a workspace the caller may see (returned in *ret_ws, its owner in
 * *ret_owner), or with global the caller's own global vault (*ret_ws NULL).
 */
static int scope_of(struct daemon_ctx *d, struct api_request *req, const char *workspace,
                    bool global, const char **ret_ws, uid_t *ret_owner, struct api_reply *reply)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;

	if (global == !!workspace)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "name a workspace or the global vault (not both)"),
		       -EINVAL;
	if (global) {
		*ret_ws = NULL;
		*ret_owner = req->caller.uid;
		return 0;
	}
	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, workspace, &w, reply) < 0)
		return -ENOENT;
	*ret_ws = workspace;
	*ret_owner = w->owner;
	return 0;
}

static bool arg_true(const char *v)
{
	return v && (streq(v, "1") || streq(v, "true") || streq(v, "yes"));
}

int handle_secret_list(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_(secret_set_freep) struct secret_set *set = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	const char *workspace = api_request_arg(req, "workspace"), *ws = NULL;
	struct json_object *arr;
	uid_t owner;
	struct slate_error err = {0};
	int r;

	if (need_install(d, reply) < 0 ||
	    scope_of(d, req, workspace, !workspace, &ws, &owner, reply) < 0)
		return -EINVAL;
	/* A workspace's list is what its egress uses: global secrets merged with its own. */
	r = vault_load_set(d->install, d->workspaces, d->state_dirfd, owner, ws, true, &set, &err);
	if (r < 0)
		return reply_vault_error(reply, r, "reading the secrets", slate_error_text(&err));
	o = json_object_new_object();
	arr = json_object_new_array();
	if (!o || !arr || json_add(o, "secrets", arr) < 0) {
		if (!o)
			json_object_put(arr);
		return -ENOMEM;
	}
	if (ws && json_add_string(o, "workspace", ws) < 0)
		return -ENOMEM;
	if (!ws && json_add_int64(o, "uid", owner) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < set->n; i++) {
		struct json_object *s = NULL;
		r = secret_to_json(&set->v[i], true, &s);
		if (r < 0)
			return r;
		if (json_object_array_add(arr, s) < 0) {
			json_object_put(s);
			return -ENOMEM;
		}
	}
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

/* Overwrites the value's bytes inside the parsed request body: the body is freed without that. */
static void wipe_json_string(struct json_object *s)
{
	if (s && json_object_is_type(s, json_type_string))
		sodium_memzero((void *)json_object_get_string(s),
		               (size_t)json_object_get_string_len(s));
}

/*
 * A running guest sees a changed secret at once: its workspace (or, for a global secret, each
 * of owner's running workspaces) is provisioned again. Returns the names provisioned as a JSON
 * array; a guest that cannot be reached is logged, not an error (its next start provisions it).
 */
static struct json_object *reprovision(struct daemon_ctx *d, uid_t owner, const char *ws)
{
	struct json_object *done = json_object_new_array();
	struct workspace **list = NULL;
	size_t n = 0;

	if (!done || !d->channels || !d->workspaces)
		return done;
	if (ws) {
		struct workspace *w = NULL;
		if (workspace_load(d->workspaces, ws, &w) >= 0) {
			list = calloc(1, sizeof(*list));
			if (list) {
				list[0] = w;
				n = 1;
			} else {
				workspace_free(w);
			}
		}
	} else if (workspace_list(d->workspaces, &list, &n) < 0) {
		return done;
	}
	for (size_t i = 0; i < n; i++) {
		struct workspace *w = list[i];
		struct channel_info ci;
		struct slate_error err = {0};
		if (w->owner != owner || channels_info(d->channels, w->name, &ci) < 0 || !ci.ready)
			continue;
		if (daemon_provision(d, w, &err) < 0)
			log_ws(LOG_WARNING, w->name, "provisioning %s after a secret change: %s",
			       w->name, slate_error_text(&err));
		else
			(void)json_object_array_add(done, json_object_new_string(w->name));
	}
	workspace_list_free(list, n);
	return done;
}

/*
 * Reads the optional array name of the request body (strings, at most SECRET_HOSTS_MAX) into
 * out (borrowed from the body) and its length into *ret_n (0 when absent). Returns 0, or replies
 * 400 and returns -EINVAL.
 */
static int string_array(struct json_object *body, const char *name, const char *key,
                        const char **out, size_t *ret_n, struct api_reply *reply)
{
	struct json_object *arr = NULL;
	size_t n;

	*ret_n = 0;
	if (!json_object_object_get_ex(body, name, NULL))
		return 0;
	if (json_get_array(body, name, &arr) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "%s must be an array",
		                       name),
		       -EINVAL;
	n = json_object_array_length(arr);
	if (n > SECRET_HOSTS_MAX)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "secret %s: at most %d %s",
		                       key, SECRET_HOSTS_MAX, name),
		       -EINVAL;
	for (size_t i = 0; i < n; i++) {
		struct json_object *v = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(v, json_type_string))
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "%s must be strings", name),
			       -EINVAL;
		out[i] = json_object_get_string(v);
	}
	*ret_n = n;
	return 0;
}

int handle_secret_set(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_(secret_freep) struct secret *sec = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *value = NULL, *warnings = NULL;
	const char *workspace = NULL, *key = NULL, *kind_s = "generic", *env = NULL, *file = NULL,
	           *ws = NULL, *hosts[SECRET_HOSTS_MAX], *query = NULL, *regions[SECRET_HOSTS_MAX],
	           *services[SECRET_HOSTS_MAX];
	struct secret_spec spec = {0};
	enum secret_kind kind;
	bool global = false, replaced = false, body = false, plain_http = false;
	size_t n_hosts = 0, n_regions = 0, n_services = 0;
	uid_t owner;
	struct slate_error err = {0};
	int r;

	if (req->body)
		(void)json_object_object_get_ex(req->body, "value", &value);
	if (need_install(d, reply) < 0) {
		r = -ENOKEY;
		goto out;
	}
	r = -EINVAL;
	if (!req->body) {
		(void)api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                      "a secret needs a JSON body");
		goto out;
	}
	(void)json_get_string(req->body, "workspace", &workspace);
	(void)json_get_bool(req->body, "global", &global);
	if (json_get_string(req->body, "key", &key) < 0) {
		(void)api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                      "a secret needs a key (name)");
		goto out;
	}
	if (json_object_object_get_ex(req->body, "kind", NULL) &&
	    json_get_string(req->body, "kind", &kind_s) < 0) {
		(void)api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "kind must be a string");
		goto out;
	}
	if (secret_kind_from_string(kind_s, &kind) < 0) {
		(void)api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                      "unknown kind '%s' (anthropic, openai, github, gitlab, aws, "
		                      "generic)",
		                      kind_s);
		goto out;
	}
	if ((json_object_object_get_ex(req->body, "env", NULL) &&
	     json_get_string(req->body, "env", &env) < 0) ||
	    (json_object_object_get_ex(req->body, "file", NULL) &&
	     json_get_string(req->body, "file", &file) < 0)) {
		(void)api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "env and file are strings");
		goto out;
	}
	/* Where else than header fields it is substituted (proxy/subst.h). */
	if ((json_object_object_get_ex(req->body, "body", NULL) &&
	     json_get_bool(req->body, "body", &body) < 0) ||
	    (json_object_object_get_ex(req->body, "query", NULL) &&
	     json_get_string(req->body, "query", &query) < 0) ||
	    (json_object_object_get_ex(req->body, "allow_plain_http", NULL) &&
	     json_get_bool(req->body, "allow_plain_http", &plain_http) < 0)) {
		(void)api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                      "body and allow_plain_http are booleans and query a string");
		goto out;
	}
	if (string_array(req->body, "hosts", key, hosts, &n_hosts, reply) < 0 ||
	    string_array(req->body, "regions", key, regions, &n_regions, reply) < 0 ||
	    string_array(req->body, "services", key, services, &n_services, reply) < 0)
		goto out;
	if (!value || !json_object_is_type(value, json_type_string) ||
	    json_object_get_string_len(value) == 0) {
		(void)api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                      "secret %s: the value is missing or empty", key);
		goto out;
	}
	if (scope_of(d, req, workspace, global, &ws, &owner, reply) < 0)
		goto out;

	spec = (struct secret_spec){.key = key,
	                            .kind = kind,
	                            .hosts = hosts,
	                            .n_hosts = n_hosts,
	                            .regions = regions,
	                            .n_regions = n_regions,
	                            .services = services,
	                            .n_services = n_services,
	                            .env = env,
	                            .file = file,
	                            .value = json_object_get_string(value),
	                            .value_len = (size_t)json_object_get_string_len(value),
	                            .global = !ws,
	                            .body = body,
	                            .query = query,
	                            .plain_http = plain_http};
	r = secret_new(&spec, install_salt(d->install), &sec, &err);
	if (r < 0) {
		(void)reply_vault_error(reply, r, "storing the secret", slate_error_text(&err));
		goto out;
	}
	o = NULL;
	r = secret_to_json(sec, true, &o);
	if (r < 0)
		goto out;
	/* A binding that also hands the value to names other people own: stored, but said (the
	 * client prints each message; doc/secrets.md "Broad bindings"). */
	r = secret_broad_warnings(sec, &warnings);
	if (r < 0 || json_add(o, "warnings", warnings) < 0) {
		if (r >= 0)
			json_object_put(warnings);
		r = -ENOMEM;
		goto out;
	}
	/* The vault takes sec over, also when it fails. */
	r = vault_put(d->install, d->workspaces, d->state_dirfd, owner, ws, TAKE_PTR(sec),
	              &replaced, &err);
	if (r < 0) {
		(void)reply_vault_error(reply, r, "storing the secret", slate_error_text(&err));
		goto out;
	}
	log_info("secret %s (%s) %s %s for uid %u", key, kind_s, replaced ? "replaced" : "stored",
	         ws ? ws : "in the global vault", (unsigned)req->caller.uid);
	for (size_t i = 0; i < json_object_array_length(warnings); i++) {
		const char *m = NULL;
		(void)json_get_string(json_object_array_get_idx(warnings, i), "message", &m);
		log_warning("%s (uid %u)", m ? m : "broad binding", (unsigned)req->caller.uid);
	}
	if ((ws && json_add_string(o, "workspace", ws) < 0) ||
	    json_add_bool(o, "replaced", replaced) < 0 ||
	    json_add(o, "reprovisioned", reprovision(d, owner, ws)) < 0) {
		r = -ENOMEM;
		goto out;
	}
	r = api_reply_json(reply, replaced ? 200 : 201, TAKE_PTR(o));
out:
	wipe_json_string(value);
	return r;
}

int handle_secret_delete(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_json_ struct json_object *o = NULL;
	const char *workspace = api_request_arg(req, "workspace"), *key = req->params[0],
	           *ws = NULL;
	bool global = arg_true(api_request_arg(req, "global"));
	uid_t owner;
	struct slate_error err = {0};
	int r;

	if (need_install(d, reply) < 0 ||
	    scope_of(d, req, workspace, global, &ws, &owner, reply) < 0)
		return -EINVAL;
	if (secret_key_check(key) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "invalid secret name '%s'",
		                       key);
	r = vault_remove(d->install, d->workspaces, d->state_dirfd, owner, ws, key, &err);
	if (r == -ENOENT)
		return api_reply_error(reply, 404, API_ERR_NOT_FOUND, "%s has no secret named %s",
		                       ws ? ws : "the global vault", key);
	if (r < 0)
		return reply_vault_error(reply, r, "removing the secret", slate_error_text(&err));
	log_info("secret %s removed %s for uid %u", key, ws ? ws : "from the global vault",
	         (unsigned)req->caller.uid);
	o = json_object_new_object();
	if (!o || json_add_string(o, "key", key) < 0 ||
	    (ws && json_add_string(o, "workspace", ws) < 0) ||
	    json_add_bool(o, "global", !ws) < 0 || json_add_bool(o, "removed", true) < 0 ||
	    json_add(o, "reprovisioned", reprovision(d, owner, ws)) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

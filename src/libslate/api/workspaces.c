/* SPDX-License-Identifier: GPL-2.0-or-later */
/* /v1/workspaces: create, list, describe, reset, wipe-home, delete, checkpoints. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "api/access.h"
#include "api/parse.h"
#include "api/protocol.h"
#include "api/render.h"
#include "api/routes.h"
#include "daemon/create.h"
#include "daemon/verbs.h"
#include "daemon/view.h"
#include "image/store.h"
#include "proxy/policy.h"
#include "secrets/vault.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "vm/domain.h"
#include "workspace/workspace.h"

/* Whether the caller may see the existing workspace name (its owner, or root). */
static bool name_is_callers(struct daemon_ctx *d, const struct api_request *req, const char *name)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;

	return workspace_load(d->workspaces, name, &w) >= 0 && api_may_see(&req->caller, w);
}

static const char *ws_state(const struct daemon_ctx *d, const struct workspace *w, int active)
{
	/* Quarantined whatever its domain does (the leak detector paused it). */
	if (workspace_quarantined(w))
		return "compromised";
	if (active > 0)
		return "running";
	if (active < 0)
		return "unknown";
	return "stopped";
}

static struct json_object *usage_json(const struct storage_usage *u)
{
	struct json_object *o = json_object_new_object();

	if (o && (json_add_int64(o, "logical", (int64_t)u->logical) < 0 ||
	          json_add_int64(o, "physical", (int64_t)u->physical) < 0 ||
	          json_add_int64(o, "shared", (int64_t)u->shared) < 0)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

#define ASK_LIBVIRT (-2)

/* active: whether its domain runs (1), does not (0), or ASK_LIBVIRT. */
static struct json_object *ws_json(struct daemon_ctx *d, const struct workspace *w, bool detail,
                                   int active)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *shares = json_object_new_array();
	struct workspace_usage u;
	char domain[128];

	if (!o || !shares) {
		json_object_put(shares);
		return NULL;
	}
	/* A connection to libvirt costs milliseconds: not for a workspace made a moment ago. */
	if (active == ASK_LIBVIRT)
		active = vm_domain_is_active(d->libvirt_uri, w->name);
	(void)vm_domain_name(w->name, domain, sizeof(domain));
	if (json_add_string(o, "name", w->name) < 0 ||
	    json_add_string(o, "state", ws_state(d, w, active)) < 0 ||
	    json_add_int64(o, "owner", w->owner) < 0 || json_add_string(o, "uuid", w->uuid) < 0 ||
	    json_add_string(o, "image", w->image_id) < 0 ||
	    json_add_int64(o, "base_version", w->base_version) < 0 ||
	    json_add_int64(o, "memory_mib", (int64_t)w->memory_mib) < 0 ||
	    json_add_int64(o, "cpus", w->cpus) < 0 ||
	    json_add_int64(o, "home_size", (int64_t)w->home_size) < 0 ||
	    json_add_string(o, "mac", w->mac) < 0 || json_add_string(o, "domain", domain) < 0 ||
	    json_add_int64(o, "created", w->created) < 0 ||
	    json_add_int64(o, "last_used", w->last_used) < 0 ||
	    json_add_bool(o, "disk_present", w->disk_present) < 0 ||
	    json_add_bool(o, "home_present", w->home_present) < 0 ||
	    json_add_bool(o, "compromised", workspace_quarantined(w)) < 0 ||
	    json_add_bool(o, "ephemeral", w->ephemeral) < 0)
		return json_object_put(shares), NULL;
	(void)daemon_vm_view_json(d, w->name, active, o); /* suspended/paused, accelerator */
	/* A quarantined workspace says so, whatever its paused domain does. */
	if (workspace_quarantined(w))
		(void)json_add_string(o, "state", "compromised");
	/* Wiped after the leak: the next start makes fresh disks and ends the quarantine. */
	if (w->compromised && !workspace_quarantined(w))
		(void)json_add_bool(o, "wiped_after_leak", true);
	if (w->compromised) {
		(void)json_add_int64(o, "compromised_at", w->compromised_at);
		(void)json_add_string(o, "compromised_host",
		                      w->compromised_host ? w->compromised_host : "");
	}
	for (size_t i = 0; i < w->n_shares; i++) {
		struct json_object *s = json_object_new_object();
		char guest[320];
		workspace_share_guest_dir(w, i, guest, sizeof(guest));
		if (!s || json_add_string(s, "host", w->shares[i].host_dir) < 0 ||
		    json_add_string(s, "guest", guest) < 0 ||
		    json_add_bool(s, "readonly", w->shares[i].readonly) < 0 ||
		    json_object_array_add(shares, s) < 0) {
			json_object_put(s);
			json_object_put(shares);
			return NULL;
		}
	}
	if (json_add(o, "shares", shares) < 0)
		return NULL;

	if (workspace_usage(d->workspaces, w->name, &u) >= 0) {
		struct json_object *uo = json_object_new_object();
		if (!uo || json_add(uo, "disk", usage_json(&u.disk)) < 0 ||
		    json_add(uo, "home", usage_json(&u.home)) < 0 ||
		    json_add(uo, "checkpoints", usage_json(&u.checkpoints)) < 0 ||
		    json_add(o, "usage", uo) < 0)
			return NULL;
	}
	if (detail) {
		struct checkpoint_info *cps = NULL;
		size_t n = 0;
		_cleanup_(image_info_freep) struct image_info *img = NULL;

		(void)json_add_string(o, "storage",
		                      storage_kind_name(storage_get_kind(d->storage)));
		if (image_store_get(d->storage, w->image_id, &img) >= 0) {
			(void)json_add_int64(o, "image_version", img->version);
			(void)json_add_bool(o, "base_drift", img->version != w->base_version);
		}
		if (workspace_checkpoint_list(d->workspaces, w->name, &cps, &n) >= 0) {
			struct json_object *arr = json_object_new_array();
			for (size_t i = 0; arr && i < n; i++) {
				struct json_object *c = json_object_new_object();
				(void)json_add_string(c, "id", cps[i].id);
				(void)json_add_int64(c, "created", cps[i].created);
				(void)json_add_int64(c, "held", (int64_t)cps[i].held);
				if (cps[i].note)
					(void)json_add_string(c, "note", cps[i].note);
				(void)json_object_array_add(arr, c);
			}
			checkpoint_info_list_free(cps, n);
			if (json_add(o, "checkpoints", arr) < 0)
				return NULL;
		}
		/* Secrets bound: names, kinds and hosts, never values (secrets/vault.h). */
		{
			struct json_object *sec = NULL;
			struct slate_error why = {0};
			if (vault_describe_json(d->install, d->workspaces, d->state_dirfd, w->owner,
			                        w->name, &sec, &why) < 0) {
				(void)json_add_string(o, "secrets_error", slate_error_text(&why));
				sec = json_object_new_array();
			}
			(void)json_add(o, "secrets", sec);
		}
		/* Host-held SSH keys: public lines and fingerprints (agent/keys.h). */
		(void)json_add(o, "ssh_keys",
		               agent_keys_describe(storage_workspaces_fd(d->storage), w->name));
	}
	return TAKE_PTR(o);
}

int handle_workspace_list(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_json_ struct json_object *out = NULL;
	struct json_object *arr;
	struct workspace **list = NULL;
	size_t n = 0;
	int r;

	if (api_need_workspaces(d, reply) < 0)
		return -ENODEV;
	r = workspace_list(d->workspaces, &list, &n);
	if (r < 0)
		return api_reply_errno(reply, r, "listing workspaces", "");
	out = json_object_new_object();
	arr = json_object_new_array();
	if (!out || !arr || json_add(out, "workspaces", arr) < 0) {
		workspace_list_free(list, n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (!api_may_see(&req->caller, list[i]))
			continue;
		(void)json_object_array_add(arr, ws_json(d, list[i], false, ASK_LIBVIRT));
	}
	workspace_list_free(list, n);
	return api_reply_json(reply, 200, TAKE_PTR(out));
}

int handle_workspace_get(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_(workspace_freep) struct workspace *w = NULL;

	if (api_need_workspaces(d, reply) < 0 ||
	    api_load_visible(d, req, req->params[0], &w, reply) < 0)
		return -EINVAL;
	return api_reply_json(reply, 200, ws_json(d, w, true, ASK_LIBVIRT));
}

int handle_workspace_create(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_(api_create_done) struct api_create c = {0};
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_json_ struct json_object *key = NULL;
	struct slate_error err = {0};
	struct json_object *out_json;
	unsigned status;
	int r;

	if (api_need_workspaces(d, reply) < 0)
		return -ENODEV;
	r = api_create_parse(req, req->body, &c, reply);
	if (r < 0)
		return r;
	r = daemon_create(d, &c.spec, &w, &key, &err);
	if (r == -EEXIST && !name_is_callers(d, req, c.spec.args.name))
		/* Names are one namespace on the host; whose a taken name is stays unsaid. */
		return api_reply_error(
		        reply, 409, API_ERR_CONFLICT,
		        "creating workspace: the name '%s' is not available (workspace "
		        "names are shared by all users of this host): choose another",
		        c.spec.args.name);
	if (r < 0) {
		const char *code = api_error_code(r, &status);
		return api_reply_error(reply, status, code, "%s", err.msg), r;
	}
	out_json = ws_json(d, w, true, 0);
	if (out_json && key)
		(void)json_add(out_json, "ssh_key", TAKE_PTR(key));
	return api_reply_json(reply, 201, out_json);
}

/* The destructive verbs: the workspace must be the caller's and must not run. */
static int run_verb(struct api_request *req, struct api_reply *reply, enum daemon_verb v)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0], *what = daemon_verb_name(v);
	_cleanup_json_ struct json_object *o = NULL;
	struct slate_error err = {0};
	unsigned status;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	r = daemon_verb(d, name, v, &err);
	if (r < 0) {
		const char *code = api_error_code(r, &status);
		return api_reply_error(reply, status, code, "%s", err.msg), r;
	}
	log_ws(LOG_INFO, name, "%s: workspace %s (uid %u)", what, name, (unsigned)req->caller.uid);
	o = json_object_new_object();
	if (!o || json_add_string(o, "name", name) < 0 || json_add_string(o, "done", what) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

int handle_workspace_delete(struct api_request *req, struct api_reply *reply)
{
	return run_verb(req, reply, DAEMON_DELETE);
}

int handle_workspace_reset(struct api_request *req, struct api_reply *reply)
{
	return run_verb(req, reply, DAEMON_RESET);
}

int handle_workspace_wipe(struct api_request *req, struct api_reply *reply)
{
	return run_verb(req, reply, DAEMON_WIPE);
}

int handle_workspace_wipe_home(struct api_request *req, struct api_reply *reply)
{
	return run_verb(req, reply, DAEMON_WIPE_HOME);
}

int handle_checkpoint_list(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *arr = json_object_new_array();
	struct checkpoint_info *cps = NULL;
	size_t n = 0;
	int r;

	if (!o || !arr || json_add(o, "checkpoints", arr) < 0)
		return -ENOMEM;
	if (api_need_workspaces(d, reply) < 0 ||
	    api_load_visible(d, req, req->params[0], &w, reply) < 0)
		return -EINVAL;
	r = workspace_checkpoint_list(d->workspaces, w->name, &cps, &n);
	if (r < 0)
		return api_reply_errno(reply, r, "listing checkpoints", w->name);
	for (size_t i = 0; i < n; i++) {
		struct json_object *c = json_object_new_object();
		(void)json_add_string(c, "id", cps[i].id);
		(void)json_add_int64(c, "created", cps[i].created);
		(void)json_add_int64(c, "held", (int64_t)cps[i].held);
		if (cps[i].note)
			(void)json_add_string(c, "note", cps[i].note);
		(void)json_object_array_add(arr, c);
	}
	checkpoint_info_list_free(cps, n);
	(void)json_add_string(o, "name", w->name);
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

int handle_checkpoint_revert(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_json_ struct json_object *o = NULL;
	const char *name = req->params[0], *id = req->params[1];
	struct slate_error err = {0};
	bool system_only = false;
	unsigned status;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	if (req->body)
		(void)json_get_bool(req->body, "system_only", &system_only);
	r = daemon_revert(d, name, id, system_only, &err);
	if (r < 0) {
		const char *code = api_error_code(r, &status);
		return api_reply_error(reply, status, code, "%s", err.msg), r;
	}
	o = json_object_new_object();
	if (!o || json_add_string(o, "name", name) < 0 ||
	    json_add_string(o, "checkpoint", id) < 0 ||
	    json_add_bool(o, "system_only", system_only) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Request bodies that several handlers parse alike (api/parse.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/parse.h"
#include "api/protocol.h"
#include "api/render.h"
#include "daemon/daemon.h"
#include "image/store.h"
#include "proxy/policy.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "util/macro.h"
#include "workspace/workspace.h"

static bool guest_path_ok(const char *p)
{
	if (!p || p[0] != '/' || strlen(p) > 255)
		return false;
	if (strstr(p, "/../") || strstr(p, "/./") || strstr(p, "//"))
		return false;
	if (strlen(p) >= 3 && streq(p + strlen(p) - 3, "/.."))
		return false;
	for (const char *c = p; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == ',' || *c == '\'' || *c == '"' || *c == '\\')
			return false;
	return true;
}

/*
 * A share names a host directory that the caller may use: it must exist, be a directory, and
 * (for anyone but root) belong to the caller. Otherwise a user could hand another user's (or
 * root's) files to a VM they control.
 */
static int parse_shares(const struct api_request *req, struct json_object *arr,
                        struct workspace_share *out, size_t *ret_n, struct api_reply *reply)
{
	size_t n = json_object_array_length(arr);

	if (n > API_MAX_SHARES)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "at most %d shares",
		                       API_MAX_SHARES),
		       -EINVAL;
	for (size_t i = 0; i < n; i++) {
		struct json_object *s = json_object_array_get_idx(arr, i);
		const char *host = NULL, *guest = NULL;
		char real[PATH_MAX];
		bool ro = false;
		struct stat st;

		if (!json_object_is_type(s, json_type_object) ||
		    json_get_string(s, "host", &host) < 0)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "each share needs a \"host\" directory"),
			       -EINVAL;
		(void)json_get_string(s, "guest", &guest);
		(void)json_get_bool(s, "readonly", &ro);
		if (host[0] != '/' || !realpath(host, real) || stat(real, &st) < 0 ||
		    !S_ISDIR(st.st_mode))
			return api_reply_error(
			               reply, 400, API_ERR_BAD_REQUEST,
			               "share %s: not an existing directory (absolute path)", host),
			       -EINVAL;
		if (req->caller.uid != 0 && st.st_uid != req->caller.uid)
			return api_reply_error(reply, 403, API_ERR_PERMISSION,
			                       "share %s: only directories you own can be shared",
			                       host),
			       -EPERM;
		/* slated-helper serves a directory root owns read-only only (doc/helper.md): say so
		 * now rather than at every start. */
		if (st.st_uid == 0 && !ro)
			return api_reply_error(
			               reply, 400, API_ERR_BAD_REQUEST,
			               "share %s: a directory root owns can be shared "
			               "read-only only (%s:ro); to share it read-write, give "
			               "it to a user (chown)",
			               host, host),
			       -EINVAL;
		out[i].host_dir = strdup(real);
		out[i].uid = st.st_uid;
		if (guest) {
			if (!guest_path_ok(guest))
				return api_reply_error(
				               reply, 400, API_ERR_BAD_REQUEST,
				               "share %s: guest path '%s' must be absolute and "
				               "plain",
				               host, guest),
				       -EINVAL;
			out[i].guest_dir = strdup(guest);
		}
		/* Without a guest directory: ~/<basename> of the workspace user, made unique in
		 * the guest when basenames repeat (api/vm.c, mount_shares). */
		out[i].readonly = ro;
		*ret_n = i + 1;
		if (!out[i].host_dir || (guest && !out[i].guest_dir))
			return -ENOMEM;
	}
	return 0;
}

int api_default_image(struct daemon_ctx *d, char **ret, struct api_reply *reply)
{
	struct image_info **imgs = NULL;
	size_t n = 0;
	int r;

	r = image_store_list(d->storage, &imgs, &n);
	if (r < 0)
		return api_reply_errno(reply, r, "listing images", "");
	if (n == 1) {
		*ret = strdup(imgs[0]->id);
		image_info_list_free(imgs, n);
		return *ret ? 0 : -ENOMEM;
	}
	image_info_list_free(imgs, n);
	if (n == 0)
		return api_reply_error(
		               reply, 400, API_ERR_BAD_REQUEST,
		               "no image installed: 'slate image import' or 'slate image pull' "
		               "one first"),
		       -ENOENT;
	return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
	                       "%zu images are installed: name one with --image", n),
	       -EINVAL;
}

void api_create_done(struct api_create *c)
{
	for (size_t i = 0; i < c->spec.args.n_shares; i++) {
		free(c->shares[i].host_dir);
		free(c->shares[i].guest_dir);
	}
	c->spec.args.n_shares = 0;
	free(c->image);
	c->image = NULL;
	egress_policy_free(c->egress);
	c->egress = NULL;
}

int api_create_parse(struct api_request *req, struct json_object *body, struct api_create *c,
                     struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	struct workspace_create_args *a = &c->spec.args;
	struct json_object *arr, *eg;
	const char *name = NULL, *img = NULL;
	int64_t v;
	int r;

	*c = (struct api_create){0};
	a->owner = req->caller.uid;
	if (!body || json_get_string(body, "name", &name) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "a workspace needs a name");
	if (workspace_name_check(name) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "invalid name '%s': %s",
		                       name, WORKSPACE_NAME_RULE);
	a->name = name;
	if (json_get_string(body, "image", &img) >= 0) {
		if (image_id_check(img) < 0)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "invalid image id '%s'", img);
		c->image = strdup(img);
		if (!c->image)
			return -ENOMEM;
	} else if (api_default_image(d, &c->image, reply) < 0) {
		return -EINVAL;
	}
	a->image_id = c->image;
	if (json_get_int64(body, "memory_mib", &v) >= 0) {
		if (v < 128 || v > 1024 * 1024)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "memory must be 128 MiB to 1 TiB");
		a->memory_mib = (uint64_t)v;
	}
	if (json_get_int64(body, "cpus", &v) >= 0) {
		if (v < 1 || v > 256)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "cpus must be 1 to 256");
		a->cpus = (unsigned)v;
	}
	if (json_get_int64(body, "home_size", &v) >= 0) {
		if (v < (64 << 20) || v > (INT64_C(16) << 40))
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "home size must be 64 MiB to 16 TiB");
		a->home_size = (uint64_t)v;
	}
	(void)json_get_bool(body, "ephemeral", &a->ephemeral);
	a->shares = c->shares;
	if (json_get_array(body, "shares", &arr) >= 0) {
		r = parse_shares(req, arr, c->shares, &a->n_shares, reply);
		if (r < 0)
			return r;
	}
	(void)json_get_bool(body, "generate_ssh_key", &c->spec.generate_ssh_key);
	/* create --egress/--allow/--deny: checked before anything exists. */
	if (json_object_object_get_ex(body, "egress", &eg)) {
		r = api_egress_from_json(eg, &c->egress, reply);
		if (r < 0)
			return r;
		c->spec.egress = c->egress;
	}
	if (c->spec.generate_ssh_key && (!d->agent || !d->install))
		return api_reply_error(
		        reply, 503, API_ERR_UNAVAILABLE,
		        "--generate-ssh-key: the SSH agent or the host master key is "
		        "unavailable (see slated's log)");
	return 0;
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

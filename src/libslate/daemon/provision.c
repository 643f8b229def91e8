/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Provisioning: after every boot slated hands slate-guest (`slate-guest --provision`, as root,
 * through an exec session) what the guest should see: the placeholders of the workspace's
 * secrets in the environment of every session and in their files, and the egress CA in its
 * trust store. Only placeholders and a public certificate cross; real values never do. The
 * request format is in src/slate-guest/provision.c and doc/guest-channel.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "daemon/exec.h"
#include "daemon/provision.h"
#include "proxy/ca.h"
#include "secrets/install.h"
#include "secrets/provision.h"
#include "secrets/secrets.h"
#include "secrets/vault.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "workspace/workspace.h"

#define PROVISION_REQUEST_MAX (4u << 20)
/* update-ca-certificates alone takes tens of seconds on Ubuntu under TCG. */
#define PROVISION_TIMEOUT_MS 300000u

/*
 * What the guest gets: *ret_view ({"env": {...}, "files": [...]}) from the workspace's secrets and
 * *ret_ca, the egress CA certificate (PEM). Either may stay NULL.
 */
static int provision_collect(struct daemon_ctx *d, const struct workspace *w, const char *home,
                             struct json_object **ret_view, char **ret_ca, struct slate_error *err)
{
	_cleanup_(secret_set_freep) struct secret_set *set = NULL;
	_cleanup_(egress_ca_freep) struct egress_ca *ca = NULL;
	int r;

	*ret_view = NULL;
	*ret_ca = NULL;
	if (!d->install)
		return 0; /* no master key: no secrets to show, nothing to intercept with */
	r = vault_load_set(d->install, d->workspaces, d->state_dirfd, w->owner, w->name, true, &set,
	                   err);
	if (r < 0)
		return r;
	r = provision_render(set, home, ret_view);
	if (r < 0)
		return slate_error_errno(err, r, "rendering the placeholders");
	r = egress_ca_open(install_dirfd(d->install), &ca);
	if (r < 0)
		return slate_error_errno(err, r, "the egress CA");
	*ret_ca = strdup(egress_ca_pem(ca));
	return *ret_ca ? 0 : slate_error_errno(err, -ENOMEM, "the egress CA");
}

/* No newline may end a line early or smuggle another. */
static bool one_line(const char *s)
{
	return !strpbrk(s, "\n\r");
}

/* Appends view ({"env": {NAME: VALUE}, "files": [{path, mode, content}]}) to b. */
static int render_view(struct buf *b, struct json_object *view, const char *user)
{
	struct json_object *env = NULL, *files = NULL;
	int r;

	if (!view)
		return 0;
	if (json_object_object_get_ex(view, "env", &env) &&
	    json_object_is_type(env, json_type_object)) {
		json_object_object_foreach (env, k, v) {
			const char *val = json_object_get_string(v);
			if (!val || !*k || strchr(k, '=') || !one_line(k) || !one_line(val))
				return -EINVAL;
			r = buf_putf(b, "env %s=%s\n", k, val);
			if (r < 0)
				return r;
		}
	}
	if (json_object_object_get_ex(view, "files", &files) &&
	    json_object_is_type(files, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(files); i++) {
			struct json_object *f = json_object_array_get_idx(files, i);
			const char *path, *content;
			int64_t mode = 0600;
			if (json_get_string(f, "path", &path) < 0 ||
			    json_get_string(f, "content", &content) < 0 ||
			    (path[0] != '/' && strncmp(path, "~/", 2) != 0) || !one_line(path))
				return -EINVAL;
			(void)json_get_int64(f, "mode", &mode);
			r = buf_putf(b, "file %o %s %zu %s\n", (unsigned)(mode & 07777), user,
			             strlen(content), path);
			if (r >= 0)
				r = buf_put(b, content, strlen(content));
			if (r >= 0)
				r = buf_put_u8(b, '\n');
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int daemon_provision(struct daemon_ctx *d, const struct workspace *w, struct slate_error *err)
{
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	_cleanup_json_ struct json_object *view = NULL;
	_cleanup_free_ char *ca = NULL, *text = NULL;
	_cleanup_buf_ struct buf *b = buf_new(PROVISION_REQUEST_MAX);
	char out[2048];
	int status = -1, r;

	if (!req || !b)
		return slate_error_errno(err, -ENOMEM, "preparing the provisioning request");
	/* "~": slate-guest puts the files in its workspace user's home, whatever the image calls
	 * it (/home/slate on the test image, /home/ubuntu on Ubuntu). */
	r = provision_collect(d, w, "~", &view, &ca, err);
	if (r < 0)
		return r;
	r = buf_putf(b, "SLATE-PROVISION 1\n");
	if (r >= 0)
		r = render_view(b, view, "-");
	if (r >= 0 && ca)
		r = buf_putf(b, "ca %zu\n%s\n", strlen(ca), ca);
	if (r >= 0)
		r = buf_putf(b, "end\n");
	if (r < 0)
		return slate_error_errno(err, r, "preparing the provisioning request");
	text = buf_dup_string(b);
	if (!text)
		return slate_error_errno(err, -ENOMEM, "preparing the provisioning request");
	req->args[req->n_args++] = (struct ex_str){"slate-guest", 11};
	req->args[req->n_args++] = (struct ex_str){"--provision", 11};
	req->user = (struct ex_str){"root", 4};
	r = exec_collect(d, w->name, req, text, PROVISION_TIMEOUT_MS, out, sizeof(out), &status,
	                 err);
	if (r < 0)
		return r;
	if (status != 0)
		return slate_error_set(err, -EIO, "slate-guest --provision exited %d: %.1024s",
		                       status, out);
	log_ws(LOG_DEBUG, w->name, "%s: %.200s", w->name, out);
	return 0;
}

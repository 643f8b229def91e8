/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Who may see what (api/access.h). */
#include <errno.h>

#include "api/access.h"
#include "api/protocol.h"
#include "api/render.h"
#include "daemon/daemon.h"
#include "util/error.h"
#include "workspace/workspace.h"

int api_need_workspaces(const struct daemon_ctx *d, struct api_reply *reply)
{
	if (d->workspaces)
		return 0;
	(void)api_reply_error(reply, 503, API_ERR_UNAVAILABLE,
	                      "workspace storage is unavailable: %s",
	                      d->storage_error ? d->storage_error : "not opened");
	return -ENODEV;
}

int api_need_images(const struct daemon_ctx *d, struct api_reply *reply)
{
	if (d->storage)
		return 0;
	(void)api_reply_error(reply, 503, API_ERR_UNAVAILABLE, "image storage unavailable: %s",
	                      d->storage_error ? d->storage_error : "not opened");
	return -ENODEV;
}

bool api_may_see(const struct api_caller *c, const struct workspace *w)
{
	return c->uid == 0 || c->uid == w->owner;
}

int api_load_visible(struct daemon_ctx *d, const struct api_request *req, const char *name,
                     struct workspace **ret, struct api_reply *reply)
{
	struct workspace *w = NULL;
	int r;

	if (workspace_name_check(name) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "invalid name '%s': %s",
		                       name, WORKSPACE_NAME_RULE),
		       -EINVAL;
	r = workspace_load(d->workspaces, name, &w);
	if (r == -ENOENT || (r >= 0 && !api_may_see(&req->caller, w))) {
		workspace_free(w);
		return api_reply_error(reply, 404, API_ERR_NOT_FOUND, "no workspace named '%s'",
		                       name),
		       -ENOENT;
	}
	if (r < 0)
		return api_reply_errno(reply, r, "loading workspace", name);
	if (ret)
		*ret = w;
	else
		workspace_free(w);
	return 0;
}

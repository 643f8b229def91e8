/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Creating a workspace with what goes with it (daemon/create.h). */
#include <errno.h>

#include "agent/agent.h"
#include "daemon/create.h"
#include "daemon/daemon.h"
#include "daemon/egress.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "workspace/workspace.h"

int daemon_create(struct daemon_ctx *d, const struct daemon_create_spec *spec,
                  struct workspace **ret, struct json_object **ret_ssh_key, struct slate_error *err)
{
	const struct workspace_create_args *a = &spec->args;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_json_ struct json_object *key = NULL;
	_cleanup_close_ int lock_fd = -1;
	int r;

	if (spec->generate_ssh_key && !d->agent)
		return slate_error_set(err, -ENOTCONN,
		                       "--generate-ssh-key: the SSH agent is unavailable (see "
		                       "slated's log)");
	r = workspace_lock(d->workspaces, a->name, &lock_fd);
	if (r < 0)
		return slate_error_errno(err, r, "locking workspace: %s", a->name);
	r = workspace_create(d->workspaces, a, &w);
	if (r == -EEXIST)
		return slate_error_set(err, r, "creating workspace: %s exists already", a->name);
	if (r == -ENOENT)
		return slate_error_set(err, r, "image '%s' is not installed ('slate image ls')",
		                       a->image_id);
	if (r == -ENOSPC || r == -EDQUOT)
		return slate_error_set(err, r,
		                       "creating workspace: %s: the filesystem holding workspaces "
		                       "is full; nothing was left half-made",
		                       a->name);
	if (r < 0)
		return slate_error_errno(err, r, "creating workspace: %s", a->name);
	if (spec->generate_ssh_key) {
		r = agent_generate(d->agent, a->name, NULL, NULL, &key);
		if (r < 0) {
			(void)workspace_delete(d->workspaces, a->name);
			return slate_error_errno(err, r, "generating the SSH key of: %s", a->name);
		}
	}
	if (spec->egress) {
		r = daemon_egress_save(d, a->name, spec->egress);
		if (r < 0) {
			if (spec->generate_ssh_key)
				agent_forget(d->agent, a->name);
			(void)workspace_delete(d->workspaces, a->name);
			return slate_error_errno(err, r, "writing the egress policy of: %s",
			                         a->name);
		}
	}
	log_ws(LOG_INFO, a->name, "created workspace %s from image %s for uid %u", a->name,
	       a->image_id, (unsigned)a->owner);
	if (ret)
		*ret = TAKE_PTR(w);
	if (ret_ssh_key)
		*ret_ssh_key = TAKE_PTR(key);
	return 0;
}

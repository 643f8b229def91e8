/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The destructive verbs on a stopped workspace (daemon/verbs.h). */
#include <errno.h>

#include "agent/agent.h"
#include "daemon/daemon.h"
#include "daemon/shares.h"
#include "daemon/verbs.h"
#include "util/error.h"
#include "util/log.h"
#include "vm/domain.h"
#include "workspace/workspace.h"

const char *daemon_verb_name(enum daemon_verb v)
{
	switch (v) {
	case DAEMON_RESET:
		return "reset";
	case DAEMON_WIPE_HOME:
		return "wipe-home";
	case DAEMON_WIPE:
		return "wipe";
	case DAEMON_DELETE:
		return "delete";
	}
	return "?";
}

/* A verb's failure as the API has always worded it. */
static int verb_error(struct slate_error *err, int r, const char *what, const char *name)
{
	switch (r) {
	case -EEXIST:
		return slate_error_set(err, r, "%s: %s exists already", what, name);
	case -ENOSPC:
	case -EDQUOT:
		return slate_error_set(err, r,
		                       "%s: %s: the filesystem holding workspaces is full; nothing "
		                       "was left half-made",
		                       what, name);
	default:
		return slate_error_errno(err, r, "%s: %s", what, name);
	}
}

/* Under the caller's lock: refuses a workspace whose domain runs, or when libvirt cannot say. */
static int must_be_stopped(struct daemon_ctx *d, const char *name, const char *what,
                           const char *hint, struct slate_error *err)
{
	int r = vm_domain_is_active(d->libvirt_uri, name);

	if (r > 0)
		return slate_error_set(err, -EBUSY,
		                       "%s: workspace '%s' is running: stop it first%s", what, name,
		                       hint);
	if (r < 0)
		return slate_error_set(err, SLATE_ERR_LIBVIRT,
		                       "%s: cannot ask libvirt (%s) whether '%s' runs: %s", what,
		                       d->libvirt_uri, name, slate_strerror(r));
	return 0;
}

int daemon_verb(struct daemon_ctx *d, const char *name, enum daemon_verb v, struct slate_error *err)
{
	static int (*const fns[])(struct workspace_store *, const char *) = {
	        [DAEMON_RESET] = workspace_reset,
	        [DAEMON_WIPE_HOME] = workspace_wipe_home,
	        [DAEMON_WIPE] = workspace_wipe,
	        [DAEMON_DELETE] = workspace_delete,
	};
	const char *what = daemon_verb_name(v);
	_cleanup_close_ int lock_fd = -1;
	int r;

	if ((unsigned)v >= sizeof(fns) / sizeof(fns[0]))
		return slate_error_set(err, -EINVAL, "unknown verb");
	r = workspace_lock(d->workspaces, name, &lock_fd);
	if (r < 0)
		return verb_error(err, r, what, name);
	r = must_be_stopped(d, name, what, " (slate stop)", err);
	if (r < 0)
		return r;
	r = fns[v](d->workspaces, name);
	/* wipe-home, wipe and delete took ssh/: the agent drops its copies of the keys too. */
	if (v != DAEMON_RESET)
		agent_forget(d->agent, name);
	if (r < 0)
		return verb_error(err, r, what, name);
	if (v == DAEMON_DELETE)
		daemon_runtime_dir_remove(d, name);
	return 0;
}

int daemon_revert(struct daemon_ctx *d, const char *name, const char *id, bool system_only,
                  struct slate_error *err)
{
	_cleanup_close_ int lock_fd = -1;
	int r;

	r = workspace_lock(d->workspaces, name, &lock_fd);
	if (r < 0)
		return verb_error(err, r, "revert", name);
	r = must_be_stopped(d, name, "revert", "", err);
	if (r < 0)
		return r;
	r = workspace_checkpoint_revert(d->workspaces, name, id, system_only);
	if (r == -ENOENT)
		return slate_error_set(err, r, "workspace '%s' has no checkpoint '%s'", name, id);
	if (r < 0)
		return verb_error(err, r, "revert", name);
	return 0;
}

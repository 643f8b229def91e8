/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A workspace's egress policy on disk (daemon/egress.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>

#include "daemon/daemon.h"
#include "daemon/egress.h"
#include "proxy/policy.h"
#include "util/fs.h"
#include "util/macro.h"
#include "workspace/workspace.h"

/* Serialises read-modify-write of egress.json files (slated is their only writer). */
static pthread_mutex_t policy_lock = PTHREAD_MUTEX_INITIALIZER;

int daemon_ws_dirfd(struct daemon_ctx *d, const char *name, int *ret)
{
	_cleanup_free_ char *path = NULL;
	int r = workspace_name_check(name);

	if (r < 0)
		return r;
	path = workspace_dir_path(d->workspaces, name);
	if (!path)
		return -ENOMEM;
	return fs_open_dir_at(AT_FDCWD, path, ret);
}

int daemon_egress_save(struct daemon_ctx *d, const char *name, const struct egress_policy *p)
{
	_cleanup_close_ int dfd = -1;
	int r = daemon_ws_dirfd(d, name, &dfd);

	if (r < 0)
		return r;
	pthread_mutex_lock(&policy_lock);
	r = egress_policy_save_at(dfd, p);
	pthread_mutex_unlock(&policy_lock);
	return r;
}

int daemon_egress_update(struct daemon_ctx *d, const char *name, const char *action,
                         const char *host, struct egress_policy **ret)
{
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	_cleanup_close_ int dfd = -1;
	int r = daemon_ws_dirfd(d, name, &dfd);

	if (r < 0)
		return r;
	pthread_mutex_lock(&policy_lock);
	r = egress_policy_load_at(dfd, &p);
	if (r >= 0)
		r = egress_policy_apply(p, action, host);
	if (r >= 0)
		r = egress_policy_save_at(dfd, p);
	pthread_mutex_unlock(&policy_lock);
	if (r >= 0)
		*ret = TAKE_PTR(p);
	return r;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The SSH agent the daemon holds and its "ssh-agent" service on the guest channels
 * (daemon/agent.h). */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "agent/agent.h"
#include "channel/channels.h"
#include "daemon/agent.h"
#include "daemon/daemon.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "util/macro.h"
#include "workspace/audit.h"
#include "workspace/workspace.h"

/* Guards d->agent between the channel threads and daemon_agent_stop(). */
static pthread_mutex_t service_lock = PTHREAD_MUTEX_INITIALIZER;

static void audit_signature(const char *workspace, struct json_object *ev, void *userdata)
{
	struct daemon_ctx *d = userdata;
	int r;

	if (!d->workspaces)
		return;
	r = audit_append(d->workspaces, workspace, "ssh-sign", ev);
	if (r < 0)
		log_ws(LOG_WARNING, workspace,
		       "cannot record an SSH signature in %s's audit trail: %s", workspace,
		       slate_strerror(r));
}

/* One guest connection to $SSH_AUTH_SOCK, on a thread of its own. */
static void agent_stream(int fd, const char *workspace, void *userdata)
{
	struct daemon_ctx *d = userdata;
	struct agent_conn *c = NULL;
	int r;

	pthread_mutex_lock(&service_lock);
	if (d->agent)
		r = agent_conn_begin(d->agent, fd, workspace, &c);
	else {
		(void)close(fd);
		r = -ESHUTDOWN;
	}
	pthread_mutex_unlock(&service_lock);
	if (r >= 0)
		agent_conn_run(c);
}

int daemon_agent_start(struct daemon_ctx *d)
{
	struct agent_config cfg = {
	        .workspaces_dirfd = d->storage ? storage_workspaces_fd(d->storage) : -1,
	        .install = d->install,
	        .runtime_dir = d->runtime_dir,
	        .audit = audit_signature,
	        .userdata = d,
	};
	struct agent *a = NULL;
	int r;

	r = agent_new(&cfg, &a);
	if (r < 0)
		return log_error_errno(r, "cannot start the SSH agent: %s", slate_strerror(r));
	pthread_mutex_lock(&service_lock);
	d->agent = a;
	pthread_mutex_unlock(&service_lock);
	if (d->channels) {
		r = channels_register(d->channels, "ssh-agent", agent_stream, d);
		if (r < 0)
			log_error_errno(r, "cannot offer the SSH agent to guests: %s",
			                slate_strerror(r));
	}
	return 0;
}

void daemon_agent_stop(struct daemon_ctx *d)
{
	struct agent *a;

	pthread_mutex_lock(&service_lock);
	a = d->agent;
	d->agent = NULL;
	pthread_mutex_unlock(&service_lock);
	agent_free(a);
}

struct json_object *daemon_agent_keys(struct daemon_ctx *d, const char *name)
{
	return agent_keys_describe(storage_workspaces_fd(d->storage), name);
}

int daemon_agent_generate(struct daemon_ctx *d, const char *name, struct json_object **ret,
                          struct slate_error *err)
{
	_cleanup_close_ int lock_fd = -1;
	int r = workspace_lock(d->workspaces, name, &lock_fd);

	if (r < 0)
		return slate_error_errno(err, r, "locking %s", name);
	r = agent_generate(d->agent, name, NULL, NULL, ret);
	if (r < 0)
		return slate_error_errno(err, r, "generating an SSH key for %s", name);
	return 0;
}

int daemon_agent_import(struct daemon_ctx *d, const char *name, const char *key, size_t len,
                        const char *passphrase, struct json_object **ret, struct slate_error *err)
{
	_cleanup_close_ int lock_fd = -1;
	int r = workspace_lock(d->workspaces, name, &lock_fd);

	if (r < 0)
		return slate_error_errno(err, r, "locking %s", name);
	return agent_import(d->agent, name, key, len, passphrase, ret, err);
}

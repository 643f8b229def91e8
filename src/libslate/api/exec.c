/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * /v1/workspaces/:name/exec and /v1/run: API connections upgraded to "slate-exec" and handed to
 * an exec session (daemon/exec.h); a run creates, starts and with rm deletes around it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api/exec.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "daemon/exec.h"
#include "daemon/start.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "vm/domain.h"
#include "workspace/workspace.h"

#define EXEC_PROTOCOL "slate-exec"

/* ---- /v1/workspaces/:name/exec ---- */

struct exec_job {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
	uid_t uid;
	/* run only */
	bool run, rm;
	struct json_object *create; /* the create body */
};

static void exec_job_free(void *p)
{
	struct exec_job *j = p;

	if (j) {
		json_object_put(j->create);
		free(j);
	}
}

static void exec_job_freep(struct exec_job **j)
{
	exec_job_free(*j);
}

static void exec_bridge(int fd, const char *extra, size_t extra_len, void *arg)
{
	struct exec_job *j = arg;
	_cleanup_(exec_first_done) struct exec_first first = {0};

	if (exec_first_read(fd, extra, extra_len, &first) < 0)
		return;
	(void)exec_session(j->d, j->name, fd, &first, NULL);
}

int handle_workspace_exec(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	struct exec_job *j;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	r = vm_domain_is_active(d->libvirt_uri, name);
	if (r == 0)
		return api_reply_error(reply, 409, API_ERR_CONFLICT,
		                       "exec %s: it is not running ('slate start %s' first)", name,
		                       name);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	j->uid = req->caller.uid;
	memcpy(j->name, name, strnlen(name, WORKSPACE_NAME_MAX));
	return api_reply_upgrade(reply, EXEC_PROTOCOL, exec_bridge, j, exec_job_free);
}

/* ---- /v1/run: create if needed, start, exec, and with rm delete whatever happens ---- */

/*
 * A run's start reports progress as PROGRESS records, and while it waits (on libvirt, the guest)
 * a ticker repeats the last one every API_STREAM_KEEPALIVE_S with "(still waiting, N s)", as API
 * streams do: the client sees the start is alive. The fd is written from both threads: lock.
 */
struct run_progress {
	int fd;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	char last[CH_MAX_TEXT + 1];
	struct timespec last_at, sent_at;
};

static double ts_diff(const struct timespec *a, const struct timespec *b)
{
	return (double)(a->tv_sec - b->tv_sec) + (double)(a->tv_nsec - b->tv_nsec) / 1e9;
}

static void run_progress_fn(const char *step, const char *detail, void *userdata)
{
	struct run_progress *p = userdata;

	pthread_mutex_lock(&p->lock);
	(void)snprintf(p->last, sizeof(p->last), "%s%s%s", step, detail && *detail ? ": " : "",
	               detail ? detail : "");
	(void)clock_gettime(CLOCK_MONOTONIC, &p->last_at);
	p->sent_at = p->last_at;
	exec_send_progress(p->fd, p->last);
	pthread_mutex_unlock(&p->lock);
}

static void *run_ticker(void *arg)
{
	struct run_progress *p = arg;
	struct timespec now, deadline;
	char text[CH_MAX_TEXT + 1];

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		(void)clock_gettime(CLOCK_MONOTONIC, &now);
		if (p->last[0] && ts_diff(&now, &p->sent_at) >= API_STREAM_KEEPALIVE_S) {
			(void)snprintf(text, sizeof(text), "%.*s (still waiting, %d s)",
			               CH_MAX_TEXT - 32, p->last, (int)ts_diff(&now, &p->last_at));
			exec_send_progress(p->fd, text);
			p->sent_at = now;
		}
		deadline = p->sent_at;
		deadline.tv_sec += API_STREAM_KEEPALIVE_S;
		if (ts_diff(&deadline, &now) <= 0)
			deadline = (struct timespec){now.tv_sec + 1, now.tv_nsec};
		(void)pthread_cond_timedwait(&p->cond, &p->lock, &deadline);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Starts the run's ticker; returns whether it runs (a run without one still works). */
static bool run_ticker_start(struct run_progress *p, pthread_t *tid)
{
	pthread_condattr_t ca;
	bool ok;

	(void)pthread_condattr_init(&ca);
	(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	(void)pthread_cond_init(&p->cond, &ca);
	(void)pthread_condattr_destroy(&ca);
	(void)clock_gettime(CLOCK_MONOTONIC, &p->sent_at);
	p->last_at = p->sent_at;
	ok = pthread_create(tid, NULL, run_ticker, p) == 0;
	if (!ok)
		log_warning("run: no keep-alive ticker for the start: %s", strerror(errno));
	return ok;
}

static void run_ticker_stop(struct run_progress *p, pthread_t tid)
{
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	(void)pthread_join(tid, NULL);
}

/* Whether the client is still connected (it sends nothing while it waits for the start). */
static bool client_gone(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void run_remove(struct daemon_ctx *d, const char *name)
{
	char err[1024] = "";
	int r;

	r = daemon_destroy_and_delete(d, name, err, sizeof(err));
	if (r < 0)
		log_ws(LOG_ERR, name, "run --rm: cannot delete workspace %s: %s", name,
		       err[0] ? err : slate_strerror(r));
	else
		log_ws(LOG_INFO, name, "run --rm: deleted workspace %s", name);
}

/*
 * With rm, the workspace goes before the client hears the end (the command's EXIT, or why it
 * failed): when `slate run --rm` returns, nothing is left.
 */
static void run_bridge(int fd, const char *extra, size_t extra_len, void *arg)
{
	struct exec_job *j = arg;
	struct daemon_ctx *d = j->d;
	_cleanup_(exec_first_done) struct exec_first first = {0};
	struct run_progress rp = {.fd = fd, .lock = PTHREAD_MUTEX_INITIALIZER};
	bool ticking = false;
	pthread_t ticker;
	struct exec_held_end end = {0};
	bool created = false;
	struct slate_error serr = {0};
	char err[SLATE_ERROR_MSG_MAX] = "";
	int r;

	if (exec_first_read(fd, extra, extra_len, &first) < 0)
		return;
	if (j->create) {
		struct api_request creq = {.method = "POST",
		                           .path = "/workspaces",
		                           .caller = {.uid = j->uid},
		                           .body = j->create,
		                           .userdata = d};
		struct api_reply crep = {0};
		const char *msg = NULL, *ecode = NULL;

		exec_send_progress(fd, "creating workspace");
		r = handle_workspace_create(&creq, &crep);
		if (crep.status != 201) {
			if (crep.json)
				(void)api_error_parse(crep.json, &ecode, &msg);
			exec_send_error(fd, "%s", msg ? msg : slate_strerror(r < 0 ? r : -EIO));
			json_object_put(crep.json);
			return;
		}
		json_object_put(crep.json);
		created = true;
		(void)run_progress_fn("created", j->name, &rp);
	}
	/* From here on, with rm, the workspace goes whatever happens. */
	ticking = run_ticker_start(&rp, &ticker);
	r = daemon_start(d, j->name, NULL, run_progress_fn, &rp, NULL, NULL, &serr);
	if (ticking)
		run_ticker_stop(&rp, ticker);
	if (r < 0) {
		(void)snprintf(err, sizeof(err), "%s", slate_error_text(&serr));
		goto out;
	}
	if (client_gone(fd)) {
		log_ws(LOG_INFO, j->name, "run in %s: the client went away during the start",
		       j->name);
		goto out;
	}
	(void)exec_session(d, j->name, fd, &first, j->rm && created ? &end : NULL);
out:
	if (j->rm && created) {
		exec_send_progress(fd, "deleting the workspace");
		run_remove(d, j->name);
	}
	if (err[0])
		exec_send_error(fd, "%s", err);
	else if (end.len)
		(void)fs_write_all(fd, end.buf, end.len);
}

int handle_run(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_(exec_job_freep) struct exec_job *j = NULL;
	struct json_object *create = NULL;
	const char *name = NULL;
	bool rm = false;
	int r;

	if (api_need_workspaces(d, reply) < 0)
		return -ENODEV;
	if (req->body) {
		(void)json_get_bool(req->body, "rm", &rm);
		(void)json_get_object(req->body, "create", &create);
	}
	if (create && !json_object_is_type(create, json_type_object))
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "create must be an object");
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	j->uid = req->caller.uid;
	j->run = true;
	j->rm = rm;
	j->create = create ? json_object_get(create) : json_object_new_object();
	if (!j->create)
		return -ENOMEM;
	if (json_get_string(j->create, "name", &name) >= 0) {
		if (workspace_name_check(name) < 0)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "invalid name '%s': %s", name, WORKSPACE_NAME_RULE);
		memcpy(j->name, name, strnlen(name, WORKSPACE_NAME_MAX));
		r = api_load_visible(d, req, name, NULL, reply);
		if (r == 0) {
			/* It exists: reuse it, never delete it. */
			if (rm)
				return api_reply_error(
				        reply, 409, API_ERR_CONFLICT,
				        "run --rm makes a new workspace, and '%s' exists already "
				        "(without --rm, run uses it)",
				        name);
			/* An egress policy asked for would silently not apply: say so instead. */
			if (json_object_object_get_ex(j->create, "egress", NULL))
				return api_reply_error(
				        reply, 409, API_ERR_CONFLICT,
				        "run --egress/--allow/--deny set a new workspace's policy, "
				        "and "
				        "'%s' exists already (change it with 'slate egress %s')",
				        name, name);
			json_object_put(TAKE_PTR(j->create));
		} else if (r != -ENOENT) {
			return r;
		} else {
			/* api_load_visible filled a 404: start over with a fresh reply. */
			json_object_put(reply->json);
			reply->json = NULL;
			reply->status = 0;
		}
	} else {
		uint8_t rnd[4];
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return -EIO;
		(void)snprintf(j->name, sizeof(j->name), "run-%02x%02x%02x%02x", rnd[0], rnd[1],
		               rnd[2], rnd[3]);
		if (json_add_string(j->create, "name", j->name) < 0)
			return -ENOMEM;
	}
	if (j->create && rm && json_add_bool(j->create, "ephemeral", true) < 0)
		return -ENOMEM;
	return api_reply_upgrade(reply, EXEC_PROTOCOL, run_bridge, TAKE_PTR(j), exec_job_free);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* `slate run`: create if needed, start, exec, and with rm delete whatever happens
 * (daemon/run.h). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "channel/proto.h"
#include "daemon/create.h"
#include "daemon/daemon.h"
#include "daemon/exec.h"
#include "daemon/run.h"
#include "daemon/start.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

/*
 * A run's start reports progress as PROGRESS records, and while it waits (on libvirt, the guest)
 * a ticker repeats the last one every keepalive_s seconds with "(still waiting, N s)", as API
 * streams do: the client sees the start is alive. The fd is written from both threads: lock.
 */
struct run_progress {
	int fd;
	unsigned keepalive_s;
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
		if (p->last[0] && ts_diff(&now, &p->sent_at) >= p->keepalive_s) {
			(void)snprintf(text, sizeof(text), "%.*s (still waiting, %d s)",
			               CH_MAX_TEXT - 32, p->last, (int)ts_diff(&now, &p->last_at));
			exec_send_progress(p->fd, text);
			p->sent_at = now;
		}
		deadline = p->sent_at;
		deadline.tv_sec += p->keepalive_s;
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
	struct slate_error err = {0};
	int r;

	r = daemon_destroy_and_delete(d, name, &err);
	if (r < 0)
		log_ws(LOG_ERR, name, "run --rm: cannot delete workspace %s: %s", name,
		       err.msg[0] ? err.msg : slate_strerror(r));
	else
		log_ws(LOG_INFO, name, "run --rm: deleted workspace %s", name);
}

void daemon_run(struct daemon_ctx *d, const struct daemon_run_spec *spec, int fd,
                const struct exec_first *first)
{
	struct run_progress rp = {.fd = fd,
	                          .keepalive_s = spec->keepalive_s ? spec->keepalive_s : 4,
	                          .lock = PTHREAD_MUTEX_INITIALIZER};
	bool ticking = false, created = false;
	pthread_t ticker;
	struct exec_held_end end = {0};
	struct slate_error serr = {0};
	char err[SLATE_ERROR_MSG_MAX] = "";
	const char *name = spec->name;
	int r;

	if (spec->create) {
		exec_send_progress(fd, "creating workspace");
		r = daemon_create(d, spec->create, NULL, NULL, &serr);
		if (r == -EEXIST) {
			/* The run found no workspace of this name that the caller may see. */
			exec_send_error(
			        fd,
			        "creating workspace: the name '%s' is not available (workspace "
			        "names are shared by all users of this host): choose another",
			        name);
			return;
		}
		if (r < 0) {
			exec_send_error(fd, "%s", slate_error_text(&serr));
			return;
		}
		created = true;
		run_progress_fn("created", name, &rp);
	}
	/* From here on, with rm, the workspace goes whatever happens. */
	ticking = run_ticker_start(&rp, &ticker);
	r = daemon_start(d, name, NULL, run_progress_fn, &rp, NULL, NULL, &serr);
	if (ticking)
		run_ticker_stop(&rp, ticker);
	if (r < 0) {
		/* The client is told below; slated's log keeps it for whoever runs slated. */
		log_ws(LOG_WARNING, name, "%s", slate_error_text(&serr));
		(void)snprintf(err, sizeof(err), "%s", slate_error_text(&serr));
		goto out;
	}
	if (client_gone(fd)) {
		log_ws(LOG_INFO, name, "run in %s: the client went away during the start", name);
		goto out;
	}
	(void)exec_session(d, name, fd, first, spec->rm && created ? &end : NULL);
out:
	if (spec->rm && created) {
		exec_send_progress(fd, "deleting the workspace");
		run_remove(d, name);
	}
	if (err[0])
		exec_send_error(fd, "%s", err);
	else if (end.len)
		(void)fs_write_all(fd, end.buf, end.len);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The guest channels of all workspaces (channels.h). Threading: the loop thread owns every
 * connection, multiplexer and stream. Other threads reach it by posting closures
 * (loop_call_sync for attach/detach/info, loop_post plus a wait on c->cond for opens). c->lock
 * guards what those threads read directly: the workspace list (changed only by the loop thread,
 * with the lock held), each workspace's ready flag, the open requests' answers and the service
 * table.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "channel/channels.h"
#include "channel/loop.h"
#include "channel/mux.h"
#include "channel/proto.h"
#include "util/error.h"
#include "util/log.h"
#include "util/macro.h"

#define CHANNELS_RECONNECT_MS 1000
#define CHANNELS_TICK_MS 1000
#define CHANNELS_MAX_SERVICES 16
#define CHANNELS_NAME_MAX 256

struct ws {
	struct channels *c;
	char name[CHANNELS_NAME_MAX];
	/* Who the channel speaks for: the workspace whose services its streams reach (a browser
	 * VM's is its workspace's), and what kind of guest it is (CHANNEL_ROLE_*). */
	char owner[CHANNELS_NAME_MAX];
	unsigned role;
	char *path;    /* the serial socket; NULL: vsock only */
	bool attached; /* by channels_attach() */
	struct mux *mux;
	int fd;
	bool connected, vsock;
	struct loop_io *io;
	struct loop_timer *retry;
	bool ready; /* under c->lock */
	int last_connect_error;
	struct ws *next;
};

struct service {
	char name[CH_MAX_SERVICE + 1];
	unsigned roles; /* the CHANNEL_ROLE_* of the guests that may open it */
	channel_service_fn fn;
	void *userdata;
};

struct channels {
	struct loop *loop;
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct ws *list;
	struct service services[CHANNELS_MAX_SERVICES];
	size_t n_services;
	struct loop_timer *tick;
	int vsock_fd;
	struct loop_io *vsock_io;
	channel_cid_lookup_fn lookup;
	void *lookup_userdata;
	unsigned lookups; /* lookup threads running, under lock */
};

static const struct mux_ops ws_mux_ops;

static void deadline_after(struct timespec *ts, unsigned ms)
{
	(void)clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static bool name_valid(const char *s)
{
	size_t n = s ? strnlen(s, CHANNELS_NAME_MAX) : 0;
	return n > 0 && n < CHANNELS_NAME_MAX;
}

/* The list is changed only by the loop thread, with the lock held: the loop thread reads it
 * without the lock, other threads with it. */
static struct ws *ws_find(struct channels *c, const char *name)
{
	for (struct ws *w = c->list; w; w = w->next)
		if (streq(w->name, name))
			return w;
	return NULL;
}

static void ws_set_ready(struct ws *w, bool ready)
{
	pthread_mutex_lock(&w->c->lock);
	w->ready = ready;
	pthread_cond_broadcast(&w->c->cond);
	pthread_mutex_unlock(&w->c->lock);
}

/* ---- one workspace's connection (loop thread) ---- */

static void ws_connect(struct ws *w);

static void on_retry(struct loop *l, void *userdata)
{
	struct ws *w = userdata;

	w->retry = NULL;
	ws_connect(w);
}

static void ws_schedule_retry(struct ws *w)
{
	if (!w->retry && w->path && w->attached)
		(void)loop_timer_add(w->c->loop, CHANNELS_RECONNECT_MS, on_retry, w, &w->retry);
}

/* Closes the connection; reconnects a second later when there is a serial socket. */
static void ws_drop(struct ws *w, bool retry, const char *why)
{
	if (!w->connected)
		return;
	log_ws(LOG_INFO, w->name, "guest channel of %s: connection closed: %s", w->name, why);
	loop_io_remove(w->io);
	w->io = NULL;
	w->fd = safe_close(w->fd);
	w->connected = w->vsock = false;
	mux_reset(w->mux);
	ws_set_ready(w, false);
	if (retry)
		ws_schedule_retry(w);
}

/* After anything happened: write what the mux queued, then poll for what it wants next. */
static void ws_after(struct ws *w)
{
	uint32_t events = 0;
	const uint8_t *p;
	size_t n;

	if (!w->connected)
		return;
	while ((n = mux_output(w->mux, &p)) > 0) {
		ssize_t k = send(w->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			ws_drop(w, true, slate_strerror(-errno));
			return;
		}
		mux_output_consume(w->mux, (size_t)k);
	}
	if (mux_want_input(w->mux))
		events |= POLLIN;
	if (mux_output(w->mux, &p) > 0)
		events |= POLLOUT;
	(void)loop_io_update(w->io, events ? events : POLLHUP);
}

static void on_conn_io(struct loop *l, int fd, uint32_t revents, void *userdata)
{
	struct ws *w = userdata;

	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		uint8_t *p;
		size_t room;
		ssize_t n;

		mux_input_buffer(w->mux, &p, &room);
		do
			n = recv(fd, p, room, MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n == 0) {
			ws_drop(w, true, "closed by the other end");
			return;
		}
		if (n < 0 && errno != EAGAIN) {
			ws_drop(w, true, slate_strerror(-errno));
			return;
		}
		if (n > 0) {
			int r = mux_input_commit(w->mux, (size_t)n);
			if (r < 0) {
				ws_drop(w, true, slate_strerror(r));
				return;
			}
		}
	}
	ws_after(w);
}

static int ws_adopt_fd(struct ws *w, int fd, bool vsock)
{
	int r = loop_io_add(w->c->loop, fd, POLLIN, on_conn_io, w, &w->io);

	if (r < 0)
		return r;
	w->fd = fd;
	w->connected = true;
	w->vsock = vsock;
	mux_start(w->mux);
	log_ws(LOG_DEBUG, w->name, "guest channel of %s: connected (%s)", w->name,
	       vsock ? "vsock" : w->path);
	ws_after(w);
	return 0;
}

static void ws_connect(struct ws *w)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, r;

	if (w->connected || !w->path || !w->attached)
		return;
	(void)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", w->path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		r = -errno;
	} else if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
	} else {
		r = ws_adopt_fd(w, fd, false);
		if (r == 0) {
			w->last_connect_error = 0;
			return;
		}
	}
	(void)safe_close(fd);
	if (r != w->last_connect_error)
		log_ws(LOG_DEBUG, w->name, "guest channel of %s: cannot connect to %s: %s", w->name,
		       w->path, slate_strerror(r));
	w->last_connect_error = r;
	ws_schedule_retry(w);
}

static struct ws *ws_new(struct channels *c, const char *name)
{
	struct ws *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->c = c;
	w->fd = -1;
	(void)snprintf(w->name, sizeof(w->name), "%s", name);
	(void)snprintf(w->owner, sizeof(w->owner), "%s", name);
	w->role = CHANNEL_ROLE_WORKSPACE;
	if (mux_new(name, &ws_mux_ops, w, &w->mux) < 0) {
		free(w);
		return NULL;
	}
	pthread_mutex_lock(&c->lock);
	w->next = c->list;
	c->list = w;
	pthread_mutex_unlock(&c->lock);
	return w;
}

static void ws_destroy(struct ws *w)
{
	struct channels *c = w->c;

	if (w->retry)
		loop_timer_cancel(c->loop, w->retry);
	w->retry = NULL;
	ws_drop(w, false, "detached");
	mux_free(w->mux);
	pthread_mutex_lock(&c->lock);
	for (struct ws **p = &c->list; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	free(w->path);
	free(w);
}

/* ---- the mux's callbacks (loop thread) ---- */

static void on_stream_io(struct loop *l, int fd, uint32_t revents, void *userdata)
{
	struct mux_stream *s = userdata;
	struct ws *w = mux_get_userdata(mux_stream_mux(s));

	if (mux_stream_event(s, revents) < 0)
		ws_drop(w, true, "output buffer overflow");
	else
		ws_after(w);
}

static void ops_watch(void *userdata, struct mux_stream *s, int fd, uint32_t events)
{
	struct ws *w = userdata;
	struct loop_io *io = mux_stream_get_data(s);

	if (fd < 0) {
		loop_io_remove(io);
		mux_stream_set_data(s, NULL);
	} else if (!io) {
		if (loop_io_add(w->c->loop, fd, events, on_stream_io, s, &io) == 0)
			mux_stream_set_data(s, io);
		else
			log_ws(LOG_WARNING, w->name, "guest channel of %s: cannot watch a stream",
			       w->name);
	} else {
		(void)loop_io_update(io, events);
	}
}

struct service_call {
	channel_service_fn fn;
	void *userdata;
	int fd;
	char workspace[CHANNELS_NAME_MAX];
};

static void *service_thread(void *p)
{
	struct service_call *sc = p;

	sc->fn(sc->fd, sc->workspace, sc->userdata);
	free(sc);
	return NULL;
}

static int ops_accept(void *userdata, const char *service, int *ret_fd)
{
	struct ws *w = userdata;
	struct channels *c = w->c;
	struct service_call *sc;
	pthread_attr_t attr;
	pthread_t t;
	int sv[2], r;

	sc = calloc(1, sizeof(*sc));
	if (!sc)
		return -ENOMEM;
	/* A service the guest's role may not open is as unknown to it as one never registered:
	 * a browser VM cannot reach the SSH agent by asking (doc/guest-channel.md). */
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_services; i++)
		if (streq(c->services[i].name, service) && (c->services[i].roles & w->role)) {
			sc->fn = c->services[i].fn;
			sc->userdata = c->services[i].userdata;
		}
	pthread_mutex_unlock(&c->lock);
	if (!sc->fn) {
		free(sc);
		return -ENOENT;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		free(sc);
		return -errno;
	}
	(void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
	sc->fd = sv[0];
	(void)snprintf(sc->workspace, sizeof(sc->workspace), "%s", w->owner);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* A stream's thread may live as long as the stream (a thousand idle proxy tunnels are a
	 * thousand threads): 512 KiB of stack, ample for the proxy and the agent (libvirt calls
	 * from the proxy's leak hook included), not the default 8 MiB of address space each. */
	pthread_attr_setstacksize(&attr, 512u * 1024u);
	r = -pthread_create(&t, &attr, service_thread, sc);
	pthread_attr_destroy(&attr);
	if (r < 0) {
		(void)safe_close(sv[0]);
		(void)safe_close(sv[1]);
		free(sc);
		return r;
	}
	*ret_fd = sv[1];
	return 0;
}

struct open_req {
	char workspace[CHANNELS_NAME_MAX];
	char service[CH_MAX_SERVICE + 1];
	struct channels *c;
	int fd; /* our end, the loop's */
	int r;
	char text[CH_MAX_TEXT + 1];
	bool done, abandoned;
};

static void open_complete(struct open_req *req, int r, const char *text)
{
	struct channels *c = req->c;

	pthread_mutex_lock(&c->lock);
	if (req->abandoned) {
		/* The caller timed out and went; its end is closed already. */
		pthread_mutex_unlock(&c->lock);
		free(req);
		return;
	}
	req->r = r;
	(void)snprintf(req->text, sizeof(req->text), "%s", text ? text : "");
	req->done = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static void ops_opened(void *userdata, void *cookie, int r, const char *text)
{
	open_complete(cookie, r, text);
}

static void ops_state(void *userdata)
{
	struct ws *w = userdata;

	ws_set_ready(w, mux_ready(w->mux));
}

static const struct mux_ops ws_mux_ops = {
        .watch = ops_watch,
        .accept = ops_accept,
        .opened = ops_opened,
        .state = ops_state,
};

/* ---- closures posted by the API (loop thread) ---- */

static void on_tick(struct loop *l, void *userdata)
{
	struct channels *c = userdata;
	uint64_t now = loop_now_ms();

	for (struct ws *w = c->list; w; w = w->next)
		if (w->connected) {
			mux_tick(w->mux, now);
			ws_after(w);
		}
	c->tick = NULL;
	(void)loop_timer_add(l, CHANNELS_TICK_MS, on_tick, c, &c->tick);
}

struct attach_call {
	struct channels *c;
	const char *workspace, *owner, *path;
	unsigned role;
	int r;
};

static void do_attach(void *p)
{
	struct attach_call *a = p;
	struct ws *w = ws_find(a->c, a->workspace);
	bool same;

	if (!w) {
		w = ws_new(a->c, a->workspace);
		if (!w) {
			a->r = -ENOMEM;
			return;
		}
	}
	if (!w->attached && !w->connected) {
		/* A new channel, or one that no longer runs: it takes the caller's role. */
		pthread_mutex_lock(&a->c->lock);
		(void)snprintf(w->owner, sizeof(w->owner), "%s", a->owner);
		w->role = a->role;
		pthread_mutex_unlock(&a->c->lock);
	} else if (w->role != a->role || !streq(w->owner, a->owner)) {
		a->r = -EEXIST;
		return;
	}
	same = (!w->path && !a->path) || (w->path && a->path && streq(w->path, a->path));
	w->attached = true;
	if (same && (w->connected || w->retry))
		return;
	if (!same) {
		char *path = a->path ? strdup(a->path) : NULL;
		if (a->path && !path) {
			a->r = -ENOMEM;
			return;
		}
		free(w->path);
		w->path = path;
		if (w->connected && !w->vsock)
			ws_drop(w, false, "switching to another socket");
	}
	if (w->retry)
		loop_timer_cancel(a->c->loop, w->retry);
	w->retry = NULL;
	ws_connect(w);
}

struct name_call {
	struct channels *c;
	const char *workspace;
	struct channel_info *info;
	int r;
};

static void do_detach(void *p)
{
	struct name_call *d = p;
	struct ws *w = ws_find(d->c, d->workspace);

	if (w)
		ws_destroy(w);
}

static void do_info(void *p)
{
	struct name_call *d = p;
	struct ws *w = ws_find(d->c, d->workspace);
	struct mux_info mi;

	if (!w) {
		d->r = -ENOENT;
		return;
	}
	mux_get_info(w->mux, &mi);
	*d->info = (struct channel_info){
	        .attached = w->attached,
	        .connected = w->connected,
	        .ready = mi.ready,
	        .streams = mi.streams,
	        .sessions = mi.sessions,
	        .errors = mi.errors,
	        .bytes_in = mi.bytes_in,
	        .bytes_out = mi.bytes_out,
	};
	(void)snprintf(d->info->last_error, sizeof(d->info->last_error), "%s", mi.last_error);
	(void)snprintf(d->info->last_event, sizeof(d->info->last_event), "%s", mi.last_event);
	d->r = 0;
}

struct probe_call {
	struct channels *c;
	const char *workspace;
	uint64_t unanswered_ms;
	int r;
};

static void do_probe(void *p)
{
	struct probe_call *d = p;
	struct ws *w = ws_find(d->c, d->workspace);

	if (!w || !w->connected) {
		d->r = w ? -ENOTCONN : -ENOENT;
		return;
	}
	d->r = mux_probe(w->mux, loop_now_ms(), &d->unanswered_ms);
	ws_after(w);
}

static void do_open(void *p)
{
	struct open_req *req = p;
	struct ws *w = ws_find(req->c, req->workspace);
	int r;

	if (!w) {
		(void)safe_close(req->fd);
		open_complete(req, -ENOENT, "the workspace has no guest channel");
		return;
	}
	r = mux_open(w->mux, req->service, req->fd, req);
	if (r < 0) {
		(void)safe_close(req->fd);
		open_complete(req, r,
		              r == -ENOTCONN ? "the guest channel has no session"
		              : r == -EMFILE ? "too many streams"
		                             : slate_strerror(r));
		return;
	}
	ws_after(w);
}

struct adopt_call {
	struct channels *c;
	int fd;
	char workspace[CHANNELS_NAME_MAX];
};

static void do_adopt(void *p)
{
	struct adopt_call *a = p;
	struct ws *w = ws_find(a->c, a->workspace);

	if (!w)
		w = ws_new(a->c, a->workspace);
	if (!w) {
		(void)safe_close(a->fd);
		free(a);
		return;
	}
	if (w->retry)
		loop_timer_cancel(a->c->loop, w->retry);
	w->retry = NULL;
	ws_drop(w, false, "replaced by a new vsock connection");
	if (ws_adopt_fd(w, a->fd, true) < 0)
		(void)safe_close(a->fd);
	free(a);
}

struct lookup_call {
	struct channels *c;
	int fd;
	unsigned cid;
};

static void *lookup_thread(void *p)
{
	struct lookup_call *lc = p;
	struct channels *c = lc->c;
	struct adopt_call *a = calloc(1, sizeof(*a));
	int r = a ? c->lookup(lc->cid, a->workspace, sizeof(a->workspace), c->lookup_userdata)
	          : -ENOMEM;

	if (r == 0 && name_valid(a->workspace)) {
		a->c = c;
		a->fd = lc->fd;
		if (loop_post(c->loop, do_adopt, a) < 0) {
			(void)safe_close(lc->fd);
			free(a);
		}
	} else {
		log_info(
		        "guest channel: vsock connection from CID %u refused: no running workspace "
		        "has it",
		        lc->cid);
		(void)safe_close(lc->fd);
		free(a);
	}
	free(lc);
	pthread_mutex_lock(&c->lock);
	c->lookups--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static void on_vsock_accept(struct loop *l, int fd, uint32_t revents, void *userdata)
{
	struct channels *c = userdata;

	for (;;) {
		struct sockaddr_vm sa;
		socklen_t len = sizeof(sa);
		struct lookup_call *lc;
		pthread_attr_t attr;
		pthread_t t;
		int cfd = accept4(fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (cfd < 0)
			return;
		lc = calloc(1, sizeof(*lc));
		if (!lc) {
			(void)safe_close(cfd);
			continue;
		}
		*lc = (struct lookup_call){.c = c, .fd = cfd, .cid = sa.svm_cid};
		pthread_mutex_lock(&c->lock);
		c->lookups++;
		pthread_mutex_unlock(&c->lock);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, lookup_thread, lc) != 0) {
			(void)safe_close(cfd);
			free(lc);
			pthread_mutex_lock(&c->lock);
			c->lookups--;
			pthread_mutex_unlock(&c->lock);
		}
		pthread_attr_destroy(&attr);
	}
}

struct listen_call {
	struct channels *c;
	int fd;
	int r;
};

static void do_listen(void *p)
{
	struct listen_call *lc = p;

	if (lc->c->vsock_io) {
		lc->r = -EALREADY;
		return;
	}
	lc->r = loop_io_add(lc->c->loop, lc->fd, POLLIN, on_vsock_accept, lc->c, &lc->c->vsock_io);
	if (lc->r == 0)
		lc->c->vsock_fd = lc->fd;
}

static void do_shutdown(void *p)
{
	struct channels *c = p;

	while (c->list)
		ws_destroy(c->list);
	if (c->vsock_io)
		loop_io_remove(c->vsock_io);
	c->vsock_io = NULL;
	c->vsock_fd = safe_close(c->vsock_fd);
	if (c->tick)
		loop_timer_cancel(c->loop, c->tick);
	c->tick = NULL;
	loop_quit(c->loop);
}

static void *loop_thread(void *p)
{
	struct channels *c = p;
	int r = loop_run(c->loop);

	if (r < 0)
		log_error_errno(r, "guest channel event loop failed: %s", slate_strerror(r));
	return NULL;
}

/* ---- the interface ---- */

int channels_new(struct channels **ret)
{
	struct channels *c = calloc(1, sizeof(*c));
	pthread_condattr_t ca;
	int r;

	if (!c)
		return -ENOMEM;
	c->vsock_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	r = loop_new(&c->loop);
	if (r < 0)
		goto fail;
	r = loop_timer_add(c->loop, CHANNELS_TICK_MS, on_tick, c, &c->tick);
	if (r < 0)
		goto fail;
	r = -pthread_create(&c->thread, NULL, loop_thread, c);
	if (r < 0)
		goto fail;
	c->thread_started = true;
	*ret = c;
	return 0;
fail:
	channels_free(c);
	return r;
}

void channels_free(struct channels *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	while (c->lookups > 0)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	if (c->thread_started) {
		if (loop_call_sync(c->loop, do_shutdown, c) < 0)
			abort(); /* cannot stop the thread that would use c */
		pthread_join(c->thread, NULL);
	}
	loop_free(c->loop);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int channels_attach(struct channels *c, const char *workspace, const char *socket_path)
{
	return channels_attach_as(c, workspace, workspace, CHANNEL_ROLE_WORKSPACE, socket_path);
}

int channels_attach_as(struct channels *c, const char *key, const char *owner, unsigned role,
                       const char *socket_path)
{
	struct attach_call a = {
	        .c = c, .workspace = key, .owner = owner, .role = role, .path = socket_path};
	int r;

	if (!name_valid(key) || !name_valid(owner) ||
	    (role != CHANNEL_ROLE_WORKSPACE && role != CHANNEL_ROLE_BROWSER))
		return -EINVAL;
	if (socket_path &&
	    (!*socket_path || strlen(socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)))
		return -EINVAL;
	r = loop_call_sync(c->loop, do_attach, &a);
	return r < 0 ? r : a.r;
}

void channels_detach(struct channels *c, const char *workspace)
{
	struct name_call d = {.c = c, .workspace = workspace};

	if (name_valid(workspace))
		(void)loop_call_sync(c->loop, do_detach, &d);
}

int channels_wait_ready(struct channels *c, const char *workspace, unsigned timeout_ms)
{
	struct timespec deadline;
	int r = 0;

	if (!name_valid(workspace))
		return -ENOENT;
	deadline_after(&deadline, timeout_ms);
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct ws *w = ws_find(c, workspace);
		if (!w) {
			r = -ENOENT;
			break;
		}
		if (w->ready) {
			r = 0;
			break;
		}
		if (r == ETIMEDOUT) {
			r = -ETIMEDOUT;
			break;
		}
		r = pthread_cond_timedwait(&c->cond, &c->lock, &deadline);
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

int channels_open(struct channels *c, const char *workspace, const char *service,
                  unsigned timeout_ms, int *ret_fd, struct slate_error *err)
{
	struct timespec deadline;
	struct open_req *req;
	int sv[2], r = 0;

	if (!name_valid(workspace) || !service || !ch_service_valid(service)) {
		return slate_error_set(err, -EINVAL, "invalid workspace or service name");
	}
	req = calloc(1, sizeof(*req));
	if (!req)
		return slate_error_errno(err, -ENOMEM, "cannot open a stream to %s", service);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		r = -errno;
		free(req);
		return slate_error_errno(err, r, "cannot open a stream to %s", service);
	}
	(void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
	req->c = c;
	req->fd = sv[1];
	(void)snprintf(req->workspace, sizeof(req->workspace), "%s", workspace);
	(void)snprintf(req->service, sizeof(req->service), "%s", service);
	deadline_after(&deadline, timeout_ms);
	if (loop_post(c->loop, do_open, req) < 0) {
		(void)safe_close(sv[0]);
		(void)safe_close(sv[1]);
		free(req);
		return slate_error_errno(err, -ENOMEM, "cannot open a stream to %s", service);
	}
	pthread_mutex_lock(&c->lock);
	while (!req->done) {
		if (r == ETIMEDOUT) {
			/* The loop frees req when its answer comes; our end goes now, so a late
			 * OPEN_OK is answered with CLOSE. */
			req->abandoned = true;
			pthread_mutex_unlock(&c->lock);
			(void)safe_close(sv[0]);
			return slate_error_set(err, -ETIMEDOUT, "the guest did not answer in time");
		}
		r = pthread_cond_timedwait(&c->cond, &c->lock, &deadline);
	}
	pthread_mutex_unlock(&c->lock);
	r = req->r;
	if (r < 0) {
		(void)slate_error_set(err, r, "%s", req->text);
		(void)safe_close(sv[0]);
	} else {
		*ret_fd = sv[0];
	}
	free(req);
	return r;
}

int channels_register(struct channels *c, const char *service, channel_service_fn fn,
                      void *userdata)
{
	return channels_register_for(c, service, CHANNEL_ROLE_WORKSPACE, fn, userdata);
}

int channels_register_for(struct channels *c, const char *service, unsigned roles,
                          channel_service_fn fn, void *userdata)
{
	int r = 0;

	if (!service || !ch_service_valid(service) || !fn || !roles ||
	    (roles & ~(CHANNEL_ROLE_WORKSPACE | CHANNEL_ROLE_BROWSER)))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_services; i++)
		if (streq(c->services[i].name, service))
			r = -EEXIST;
	if (r == 0 && c->n_services >= CHANNELS_MAX_SERVICES)
		r = -ENOSPC;
	if (r == 0) {
		struct service *s = &c->services[c->n_services++];
		(void)snprintf(s->name, sizeof(s->name), "%s", service);
		s->roles = roles;
		s->fn = fn;
		s->userdata = userdata;
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

int channels_info(struct channels *c, const char *workspace, struct channel_info *ret)
{
	struct channel_info info = {0};
	struct name_call d = {.c = c, .workspace = workspace, .info = &info, .r = -ENOENT};
	int r;

	if (!name_valid(workspace))
		return -ENOENT;
	r = loop_call_sync(c->loop, do_info, &d);
	if (r < 0)
		return r;
	if (d.r == 0)
		*ret = info;
	return d.r;
}

int channels_probe(struct channels *c, const char *workspace, uint64_t *ret_unanswered_ms)
{
	struct probe_call d = {.c = c, .workspace = workspace, .r = -ENOENT};
	int r;

	if (!name_valid(workspace))
		return -ENOENT;
	r = loop_call_sync(c->loop, do_probe, &d);
	if (r < 0)
		return r;
	if (d.r == 0)
		*ret_unanswered_ms = d.unanswered_ms;
	return d.r;
}

int channels_listen_vsock(struct channels *c, channel_cid_lookup_fn lookup, void *userdata)
{
	struct sockaddr_vm sa = {
	        .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = CH_VSOCK_PORT};
	struct listen_call lc = {.c = c};
	_cleanup_close_ int fd = -1;
	int r;

	if (!lookup)
		return -EINVAL;
	fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0)
		return -errno;
	pthread_mutex_lock(&c->lock);
	c->lookup = lookup;
	c->lookup_userdata = userdata;
	pthread_mutex_unlock(&c->lock);
	lc.fd = fd;
	r = loop_call_sync(c->loop, do_listen, &lc);
	if (r < 0)
		return r;
	if (lc.r < 0)
		return lc.r;
	TAKE_FD(fd);
	return 0;
}

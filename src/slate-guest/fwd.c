/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Local connections relayed over streams, in both directions, by one code path (struct fwd):
 *
 * - guest-opened: each connection accepted on 127.0.0.1:3128 opens an "http-proxy" stream, each
 *   one on 127.0.0.1:9222 a "cdp" stream (the workspace's end of the browser VM's DevTools), each
 *   one on the SSH agent socket an "ssh-agent" stream. An OPEN_FAIL closes the local connection.
 * - host-opened: a "cdp" stream (in the browser VM) connects to Chromium's DevTools on
 *   127.0.0.1:9223; OPEN_OK once connected, OPEN_FAIL with the reason when that fails.
 *
 * Either way bytes flow both ways with half-close (EOF) and flow control.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "guest.h"

#define FWD_WINDOW CH_INITIAL_WINDOW
#define LISTEN_RETRY_MS 5000
#define READS_PER_WAKEUP 4
/* A connect() to a loopback port answers at once, unless its listener's backlog is full. */
#define CONNECT_TIMEOUT_MS 10000

int devtools_port = DEVTOOLS_PORT;

struct fwd {
	struct stream *s;
	int fd;          /* -1 once the local side failed or closed */
	struct gbuf out; /* from the host, not yet written to the local socket */
	bool shut;       /* the host's EOF was passed on (shutdown(SHUT_WR)) */
	bool connecting; /* host-opened: connect() in progress, the OPEN not answered yet */
	int64_t connect_deadline;
	struct fwd *next_connecting;
};

struct listener {
	const char *service;
	int port;         /* TCP on 127.0.0.1, or */
	const char *path; /* a unix socket */
	int fd;
	int64_t retry_at;
	bool logged;
};

static struct listener listeners[3];
static unsigned n_listeners;
static struct fwd *connecting; /* host-opened fwds whose connect() is in progress */

/* ---- listening ---- */

static int listen_tcp(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int one = 1, fd;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
		int e = errno;
		(void)close(fd);
		return -e;
	}
	return fd;
}

static int listen_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[sizeof(sa.sun_path)];
	struct stat st;
	char *slash;
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return -errno;
	}
	/* A socket left by an earlier run is replaced; anything else is not touched. */
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		(void)unlink(path);
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0666) < 0 ||
	    listen(fd, 128) < 0) {
		int e = errno;
		(void)close(fd);
		return -e;
	}
	return fd;
}

static void listener_open(struct listener *l, int64_t now)
{
	int fd = l->path ? listen_unix(l->path) : listen_tcp(l->port);

	if (fd >= 0) {
		if (l->logged)
			guest_log("%s: listening now", l->service);
		l->fd = fd;
		l->logged = false;
		return;
	}
	if (!l->logged) {
		if (l->path)
			guest_log("%s: cannot listen on %s: %s; retrying", l->service, l->path,
			          strerror(-fd));
		else
			guest_log("%s: cannot listen on 127.0.0.1:%d: %s; retrying", l->service,
			          l->port, strerror(-fd));
		l->logged = true;
	}
	l->retry_at = now + LISTEN_RETRY_MS;
}

int fwd_init(int proxy_port, int cdp_port, const char *agent_socket)
{
	int64_t now = now_ms();

	if (proxy_port > 0)
		listeners[n_listeners++] =
		        (struct listener){.service = "http-proxy", .port = proxy_port, .fd = -1};
	if (cdp_port > 0)
		listeners[n_listeners++] =
		        (struct listener){.service = "cdp", .port = cdp_port, .fd = -1};
	if (agent_socket)
		listeners[n_listeners++] =
		        (struct listener){.service = "ssh-agent", .path = agent_socket, .fd = -1};
	for (unsigned i = 0; i < n_listeners; i++)
		listener_open(&listeners[i], now);
	return 0;
}

static void connect_done(struct fwd *f, int err);

void fwd_timers(int64_t now, int64_t *next)
{
	for (struct fwd *f = connecting, *n; f; f = n) {
		n = f->next_connecting;
		if (now >= f->connect_deadline)
			connect_done(f, ETIMEDOUT);
		else
			deadline_min(next, f->connect_deadline);
	}
	for (unsigned i = 0; i < n_listeners; i++) {
		struct listener *l = &listeners[i];
		if (l->fd >= 0)
			continue;
		if (now >= l->retry_at)
			listener_open(l, now);
		if (l->fd < 0)
			deadline_min(next, l->retry_at);
	}
}

static struct fwd *fwd_new(void)
{
	struct fwd *f = calloc(1, sizeof(*f));

	if (!f || gbuf_init(&f->out, FWD_WINDOW) < 0) {
		free(f);
		return NULL;
	}
	f->fd = -1;
	return f;
}

static void accept_event(void *ctx, short revents)
{
	struct listener *l = ctx;

	for (int i = 0; i < 16 && chan_session() && guest_stream_count() < CH_MAX_STREAMS; i++) {
		struct fwd *f;
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				guest_log("%s: accept: %s", l->service, strerror(errno));
			return;
		}
		f = fwd_new();
		if (f)
			f->s = stream_open(l->service, FWD_WINDOW);
		if (!f || !f->s) {
			if (f)
				gbuf_free(&f->out);
			free(f);
			(void)close(fd);
			return;
		}
		f->fd = fd;
		f->s->fwd = f;
	}
}

/* Connections wait in the backlog while there is no session (or no stream id) for them. */
void fwd_poll_listeners(void)
{
	if (!chan_session() || guest_stream_count() >= CH_MAX_STREAMS)
		return;
	for (unsigned i = 0; i < n_listeners; i++)
		poll_add(listeners[i].fd, POLLIN, accept_event, &listeners[i]);
}

/* ---- host-opened: connecting ---- */

static void connecting_remove(struct fwd *f)
{
	for (struct fwd **p = &connecting; *p; p = &(*p)->next_connecting) {
		if (*p == f) {
			*p = f->next_connecting;
			break;
		}
	}
	f->connecting = false;
}

int fwd_connect(struct stream *s)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)devtools_port)};
	struct fwd *f = fwd_new();
	int fd;

	if (!f)
		return -ENOMEM;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = errno;
		gbuf_free(&f->out);
		free(f);
		return -e;
	}
	f->s = s;
	f->fd = fd;
	s->fwd = f;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return 0;
	if (errno == EINPROGRESS) {
		f->connecting = true;
		f->connect_deadline = now_ms() + CONNECT_TIMEOUT_MS;
		f->next_connecting = connecting;
		connecting = f;
		s->accepting = true;
		return 1;
	}
	int e = errno;
	fwd_abort(s);
	return -e;
}

/* The connect() finished (err 0) or failed: the host's OPEN gets its answer. */
static void connect_done(struct fwd *f, int err)
{
	char why[128];

	connecting_remove(f);
	if (err == 0) {
		stream_accepted(f->s, 0, NULL);
		return;
	}
	snprintf(why, sizeof(why), "cannot connect to 127.0.0.1:%d: %s", devtools_port,
	         strerror(err));
	/* Frees the stream, and f with it (fwd_abort). */
	stream_accepted(f->s, err, why);
}

static void connect_event(void *ctx, short revents)
{
	struct stream *s = ctx;
	struct fwd *f = s->fwd;
	socklen_t len = sizeof(int);
	int err = 0;

	(void)revents;
	if (s->dead || !f || !f->connecting)
		return;
	if (getsockopt(f->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	connect_done(f, err);
}

/* ---- relaying ---- */

static void fwd_free(struct fwd *f)
{
	if (f->connecting)
		connecting_remove(f);
	if (f->fd >= 0)
		(void)close(f->fd);
	gbuf_free(&f->out);
	f->s->fwd = NULL;
	free(f);
}

/* The local side failed: the stream closes (once the host answered the OPEN). */
static void local_gone(struct fwd *f)
{
	if (f->fd >= 0)
		(void)close(f->fd);
	f->fd = -1;
	f->out.off = f->out.len = 0;
}

static void fwd_grant(struct fwd *f)
{
	size_t used = f->out.len + f->s->recv_win;

	if (f->fd >= 0 && used < FWD_WINDOW)
		stream_grant(f->s, FWD_WINDOW - used);
}

static void fwd_flush(struct fwd *f)
{
	if (f->fd >= 0 && gbuf_write(&f->out, f->fd) < 0) {
		local_gone(f);
		return;
	}
	if (f->fd >= 0 && f->s->got_eof && f->out.len == 0 && !f->shut) {
		(void)shutdown(f->fd, SHUT_WR);
		f->shut = true;
	}
	fwd_grant(f);
}

static bool can_read_local(const struct fwd *f)
{
	const struct stream *s = f->s;

	return f->fd >= 0 && !s->opening && !f->connecting && !s->sent_eof && !s->sent_close &&
	       s->send_win > 0 && outq_bytes < OUTQ_HIGH;
}

static void fwd_read(struct fwd *f)
{
	for (int i = 0; i < READS_PER_WAKEUP && can_read_local(f); i++) {
		size_t max = stream_read_room(f->s, 0);
		ssize_t n = stream_read_data(f->s, f->fd, 0, max);
		if (n > 0) {
			if ((size_t)n < max)
				break;
			continue;
		}
		if (n == -EAGAIN || n == -EWOULDBLOCK || n == -EINTR)
			break;
		if (n == 0) {
			(void)chan_send(CH_EOF, f->s->id, NULL, 0, NULL, 0);
			f->s->sent_eof = true;
		} else {
			local_gone(f);
		}
		break;
	}
}

static void fwd_event(void *ctx, short revents)
{
	struct stream *s = ctx;
	struct fwd *f = s->fwd;

	if (s->dead || !f || f->fd < 0)
		return;
	if (f->out.len && (revents & (POLLOUT | POLLHUP | POLLERR)))
		fwd_flush(f);
	if (can_read_local(f) && (revents & (POLLIN | POLLHUP | POLLERR)))
		fwd_read(f);
}

void fwd_poll(struct stream *s)
{
	struct fwd *f = s->fwd;
	short ev = 0;

	if (f->fd < 0)
		return;
	if (f->connecting) {
		poll_add(f->fd, POLLOUT, connect_event, s);
		return;
	}
	if (can_read_local(f))
		ev |= POLLIN;
	if (f->out.len)
		ev |= POLLOUT;
	if (ev)
		poll_add(f->fd, ev, fwd_event, s);
}

void fwd_data(struct stream *s, const uint8_t *p, size_t n)
{
	struct fwd *f = s->fwd;

	if (f->fd < 0)
		return;
	if (n > f->out.cap - f->out.len) {
		/* The window accounting keeps this from happening. */
		local_gone(f);
		return;
	}
	gbuf_append(&f->out, p, n);
	fwd_flush(f);
}

void fwd_eof(struct stream *s)
{
	fwd_flush(s->fwd);
}

void fwd_open_ok(struct stream *s)
{
	fwd_grant(s->fwd);
}

void fwd_abort(struct stream *s)
{
	if (s->fwd)
		fwd_free(s->fwd);
}

void fwd_advance(struct stream *s)
{
	struct fwd *f = s->fwd;

	if (s->opening || f->connecting)
		return;
	/* Done both ways, or the local side is gone: CLOSE, then wait for the host's. */
	if (f->fd < 0 || (s->sent_eof && s->got_eof && f->shut)) {
		stream_close(s);
		fwd_free(f);
	}
}

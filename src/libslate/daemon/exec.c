/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Exec sessions (daemon/exec.h): a client connection bridged to an "exec" stream of the
 * workspace's guest channel. Both ends speak the exec records of doc/guest-channel.md; slated
 * decodes every record from either side, lets through only what that side may send, and
 * re-encodes the client's REQUEST after checking it. slated's own commands in the guest (the
 * terminal proof that ends a start, mounting shares, provisioning) go through exec_collect.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "channel/channels.h"
#include "channel/proto.h"
#include "daemon/daemon.h"
#include "daemon/exec.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"
#include "vm/domain.h"
#include "workspace/workspace.h"

#define RELAY_CAP (EX_HEADER_LEN + EX_MAX_RECORD)
#define OPEN_TIMEOUT_MS 15000
#define REQUEST_TIMEOUT_MS 30000

/* A domain paused this long is paused for good, not for a checkpoint's clone. */
#define PAUSE_GRACE_MS 2000

/* After this much silence from the guest a session asks the channel whether it still answers
 * (a PING), and asks again this often. */
#define PROBE_IDLE_MS 5000

/* A guest whose channel has not answered a PING for this long has stopped answering; tests
 * shorten it with the variable. */
#define UNRESPONSIVE_MS 30000
#define ENV_TEST_UNRESPONSIVE "SLATE_EXEC_TEST_UNRESPONSIVE_MS"

/* Sends one record to fd (blocking). */
static int send_record(int fd, uint8_t type, const void *p, size_t len)
{
	uint8_t h[EX_HEADER_LEN];

	int r;

	ex_record_header(h, type, (uint32_t)len);
	r = fs_write_all(fd, h, sizeof(h));
	if (r == 0 && len)
		r = fs_write_all(fd, p, len);
	return r;
}

void exec_send_error(int fd, const char *fmt, ...)
{
	char msg[CH_MAX_TEXT + 1];
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* Only printable bytes are valid text: control characters become spaces. */
	n = strlen(msg);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)msg[i] < 0x20 || msg[i] == 0x7f)
			msg[i] = ' ';
	(void)send_record(fd, EX_ERROR, msg, n ? n : 1);
}

void exec_send_progress(int fd, const char *text)
{
	size_t n = strnlen(text, CH_MAX_TEXT);

	if (n && ch_text_valid((const uint8_t *)text, n))
		(void)send_record(fd, EX_PROGRESS, text, n);
}

/*
 * Reads the client's first record, which must be a REQUEST, from extra and then fd, within
 * REQUEST_TIMEOUT_MS; checks it and re-encodes it into ret->req (malloc'd). What the client sent
 * after it (stdin records already, maybe a partial one) goes to ret->rest, to be decoded and
 * checked like every later record. Returns 0, or a negative error after telling the client why.
 */
void exec_first_done(struct exec_first *f)
{
	free(f->req);
	free(f->rest);
}

int exec_first_read(int fd, const char *extra, size_t extra_len, struct exec_first *ret)
{
	_cleanup_free_ uint8_t *buf = malloc(EX_HEADER_LEN + EX_MAX_REQUEST);
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	_cleanup_free_ uint8_t *out = NULL;
	size_t len = 0, cap = EX_HEADER_LEN + EX_MAX_REQUEST;
	int64_t deadline = time_mono_ms() + REQUEST_TIMEOUT_MS;
	struct ex_record r;
	long n;
	int k;

	if (!buf || !req)
		return -ENOMEM;
	if (extra_len > cap)
		extra_len = cap;
	memcpy(buf, extra, extra_len);
	len = extra_len;
	while ((k = ex_record_decode(buf, len, &r)) == 0) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - time_mono_ms();
		ssize_t got;

		if (len == cap || left <= 0 || poll(&p, 1, (int)left) <= 0) {
			exec_send_error(fd, "no complete exec request within %d s",
			                REQUEST_TIMEOUT_MS / 1000);
			return -ETIMEDOUT;
		}
		got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -ECONNRESET;
		len += (size_t)got;
	}
	if (k < 0 || r.type != EX_REQUEST || ex_request_parse(r.payload, r.len, req) < 0) {
		exec_send_error(fd, "malformed exec request");
		return -EPROTO;
	}
	out = malloc(cap);
	if (!out)
		return -ENOMEM;
	n = ex_request_encode(req, out, cap);
	if (n < 0) {
		exec_send_error(fd, "exec request too large");
		return (int)n;
	}
	ret->rest_len = len - (size_t)k;
	ret->rest = malloc(ret->rest_len ? ret->rest_len : 1);
	if (!ret->rest)
		return -ENOMEM;
	memcpy(ret->rest, buf + k, ret->rest_len);
	ret->req = TAKE_PTR(out);
	ret->req_len = (size_t)n;
	return 0;
}

/* ---- the relay between the client and the guest's exec stream ---- */

struct side {
	int fd;
	uint8_t in[RELAY_CAP]; /* received, not yet a whole record */
	size_t in_len;
	uint8_t out[2 * RELAY_CAP]; /* whole records to send */
	size_t out_len;
	bool eof; /* read end of file (or an error) */
};

/* ---- watching the workspace while its sessions run ---- */

/*
 * Every running session is on this list so that a domain event of its workspace wakes it (the
 * event thread must not block: it only writes the eventfd); the session then asks libvirt
 * itself. What the guest's channel cannot say -- the domain is paused, so nothing answers and
 * nothing closes -- comes this way; a guest that stops answering is found by probing.
 */
struct exec_watch {
	char name[WORKSPACE_NAME_MAX + 1];
	int efd;
	char event[64]; /* the last event's description ("stopped (destroyed)") */
	struct exec_watch *next;
};

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct exec_watch *watch_list;

void exec_sessions_kick(const char *workspace, const char *description)
{
	pthread_mutex_lock(&watch_lock);
	for (struct exec_watch *w = watch_list; w; w = w->next)
		if (streq(w->name, workspace)) {
			(void)snprintf(w->event, sizeof(w->event), "%s",
			               description ? description : "");
			(void)eventfd_write(w->efd, 1);
		}
	pthread_mutex_unlock(&watch_lock);
}

static int watch_add(struct exec_watch *w, const char *name)
{
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0)
		return -errno;
	(void)snprintf(w->name, sizeof(w->name), "%s", name);
	pthread_mutex_lock(&watch_lock);
	w->next = watch_list;
	watch_list = w;
	pthread_mutex_unlock(&watch_lock);
	return 0;
}

static void watch_remove(struct exec_watch *w)
{
	if (w->efd < 0)
		return;
	pthread_mutex_lock(&watch_lock);
	for (struct exec_watch **p = &watch_list; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	pthread_mutex_unlock(&watch_lock);
	w->efd = safe_close(w->efd);
}

static void watch_event(struct exec_watch *w, char *buf, size_t len)
{
	pthread_mutex_lock(&watch_lock);
	(void)snprintf(buf, len, "%s", w->event);
	pthread_mutex_unlock(&watch_lock);
}

/* What a session knows of its workspace besides the guest's bytes. */
struct watch {
	struct daemon_ctx *d;
	const char *name;
	struct exec_watch ew;
	int64_t last_guest;   /* when the guest last sent something */
	int64_t next_probe;   /* when to PING again while it is silent */
	int64_t paused_since; /* 0: not seen paused */
	unsigned unresponsive_ms;
	bool check;   /* an event came: ask libvirt */
	bool started; /* the command runs (or slated asked the guest to run it) */
};

static void watch_done(struct watch *w)
{
	watch_remove(&w->ew);
}

/* The domain's state and, when paused, whether for a while only (a save, a snapshot or a
 * migration in progress). -ENOENT when there is no domain. */
static int domain_state(const char *uri, const char *name, int *ret_state, bool *ret_transient,
                        const char **ret_how)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	int st, reason, r;

	r = vm_connect(uri, &conn);
	if (r < 0)
		return r;
	r = vm_domain_lookup(conn, name, &dom);
	if (r < 0)
		return r;
	if (virDomainGetState(dom, &st, &reason, 0) < 0)
		return -EIO;
	*ret_state = st;
	*ret_how = st == VIR_DOMAIN_SHUTDOWN ? "shutting down" : NULL;
	if (st == VIR_DOMAIN_SHUTOFF)
		switch (reason) {
		case VIR_DOMAIN_SHUTOFF_SHUTDOWN:
			*ret_how = "the guest powered off";
			break;
		case VIR_DOMAIN_SHUTOFF_DESTROYED:
			*ret_how = "destroyed";
			break;
		case VIR_DOMAIN_SHUTOFF_CRASHED:
			*ret_how = "the guest crashed";
			break;
		case VIR_DOMAIN_SHUTOFF_SAVED:
			*ret_how = "memory saved: suspended";
			break;
		case VIR_DOMAIN_SHUTOFF_FAILED:
			*ret_how = "QEMU failed";
			break;
		default:
			break;
		}
	*ret_transient =
	        st == VIR_DOMAIN_PAUSED &&
	        (reason == VIR_DOMAIN_PAUSED_SAVE || reason == VIR_DOMAIN_PAUSED_SNAPSHOT ||
	         reason == VIR_DOMAIN_PAUSED_MIGRATION || reason == VIR_DOMAIN_PAUSED_STARTING_UP);
	return 0;
}

static bool workspace_compromised(struct daemon_ctx *d, const char *name)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;

	return d->workspaces && workspace_load(d->workspaces, name, &w) >= 0 && w->compromised;
}

/*
 * Asks libvirt how the workspace's domain is. Returns 1 and fills why and text when the session
 * must end, 0 when it goes on (running, paused only for a moment so far, or libvirt cannot
 * say). final: no waiting to see -- the guest's channel closed or has not answered for long, or
 * the session is about to open -- so a pause counts at once and a shutdown as a stop.
 */
static int watch_assess(struct watch *w, int64_t now, bool final, uint8_t *why, char *text,
                        size_t len)
{
	char ev[64];
	int st = VIR_DOMAIN_NOSTATE, r;
	bool transient = false;
	const char *how = NULL;

	r = domain_state(w->d->libvirt_uri, w->name, &st, &transient, &how);
	/* The guest is gone and the domain on its way down: a moment more says how it ended. */
	for (int i = 0; final && r == 0 && st == VIR_DOMAIN_SHUTDOWN && i < 20; i++) {
		(void)usleep(100 * 1000);
		r = domain_state(w->d->libvirt_uri, w->name, &st, &transient, &how);
	}
	if (r == -ENOENT)
		st = VIR_DOMAIN_SHUTOFF;
	else if (r < 0)
		return 0;
	if (st == VIR_DOMAIN_PAUSED) {
		if (workspace_compromised(w->d, w->name)) {
			*why = EX_END_COMPROMISED;
			(void)snprintf(
			        text, len,
			        "workspace %s is quarantined: it sent a secret's placeholder "
			        "to a host the secret is not bound to and was paused; see "
			        "'slate trace %s --leaks'",
			        w->name, w->name);
			return 1;
		}
		if (transient)
			return w->paused_since = 0, 0;
		if (!w->paused_since)
			w->paused_since = now;
		if (!final && now - w->paused_since < PAUSE_GRACE_MS)
			return 0;
		*why = EX_END_PAUSED;
		(void)snprintf(text, len, "workspace %s is paused%s", w->name,
		               w->started ? ": leaving the command, which gets SIGHUP if the "
		                            "workspace resumes"
		                          : "");
		return 1;
	}
	w->paused_since = 0;
	if (st == VIR_DOMAIN_RUNNING || st == VIR_DOMAIN_BLOCKED)
		return 0;
	/* Shutting down: the command may still end by itself before the domain stops, unless
	 * the guest is gone already (final). */
	if (st == VIR_DOMAIN_SHUTDOWN && !final)
		return 0;
	/* How: libvirt's reason, else the last event's ("stopped (destroyed)" gives "destroyed");
	 * a domain already undefined has no reason left to ask for. */
	watch_event(&w->ew, ev, sizeof(ev));
	*why = EX_END_STOPPED;
	if (how)
		(void)snprintf(text, len, "workspace %s stopped while the command ran (%s)",
		               w->name, how);
	else
		(void)snprintf(text, len, "workspace %s stopped while the command ran%s%s", w->name,
		               strncmp(ev, "stopped (", 9) == 0 ? " (" : "",
		               strncmp(ev, "stopped (", 9) == 0 ? ev + 9 : "");
	return 1;
}

/* Called after every wake-up: whether the session must end (1, why and text filled). */
static int watch_step(struct watch *w, uint8_t *why, char *text, size_t len)
{
	int64_t now = time_mono_ms();
	uint64_t unanswered = 0;

	if (w->check || w->paused_since) {
		w->check = false;
		if (watch_assess(w, now, false, why, text, len))
			return 1;
	}
	if (now - w->last_guest < PROBE_IDLE_MS || now < w->next_probe)
		return 0;
	w->next_probe = now + PROBE_IDLE_MS;
	if (!w->d->channels || channels_probe(w->d->channels, w->name, &unanswered) < 0 ||
	    unanswered < w->unresponsive_ms)
		return 0;
	/* Paused with no event seen (events unavailable) reads the same: libvirt tells. */
	if (watch_assess(w, now, true, why, text, len))
		return 1;
	*why = EX_END_UNRESPONSIVE;
	(void)snprintf(text, len,
	               "the guest of workspace %s has not answered for %llu s (its VM runs, but "
	               "slate-guest or its kernel is stuck); 'slate console %s' may tell why",
	               w->name, (unsigned long long)(unanswered / 1000), w->name);
	return 1;
}

/* How long poll may sleep before watch_step has something to do (ms). */
static int watch_timeout(const struct watch *w)
{
	int64_t now = time_mono_ms(), at;

	if (w->paused_since)
		return 250;
	at = w->last_guest + PROBE_IDLE_MS;
	if (w->next_probe > at)
		at = w->next_probe;
	return at <= now ? 0 : (int)(at - now);
}

struct relay {
	struct side client, guest;
	struct exec_held_end *hold; /* NULL: forward the last record like the others */
	bool exited;                /* EXIT or ERROR went to the client (or to hold) */
	uint64_t bytes_out;
};

static bool client_may_send(uint8_t t)
{
	return t == EX_STDIN || t == EX_STDIN_EOF || t == EX_RESIZE || t == EX_SIGNAL;
}

static bool guest_may_send(uint8_t t)
{
	return t == EX_STARTED || t == EX_STDOUT || t == EX_STDERR || t == EX_EXIT || t == EX_ERROR;
}

/* Moves whole records from from->in to to->out while they fit; -EPROTO for a record that from
 * may not send. */
static int move_records(struct relay *rl, struct side *from, struct side *to, bool from_guest)
{
	size_t off = 0;
	struct ex_record r;
	int n;

	while ((n = ex_record_decode(from->in + off, from->in_len - off, &r)) > 0) {
		if (from_guest ? !guest_may_send(r.type) : !client_may_send(r.type))
			return -EPROTO;
		if (from_guest && rl->hold && (r.type == EX_EXIT || r.type == EX_ERROR) &&
		    (size_t)n <= sizeof(rl->hold->buf)) {
			memcpy(rl->hold->buf, from->in + off, (size_t)n);
			rl->hold->len = (size_t)n;
			off += (size_t)n;
			rl->exited = true;
			break;
		}
		if (sizeof(to->out) - to->out_len < (size_t)n)
			break;
		memcpy(to->out + to->out_len, from->in + off, (size_t)n);
		to->out_len += (size_t)n;
		off += (size_t)n;
		if (from_guest && r.type == EX_STDOUT)
			rl->bytes_out += r.len;
		if (from_guest && (r.type == EX_EXIT || r.type == EX_ERROR)) {
			rl->exited = true;
			break;
		}
	}
	if (n < 0)
		return n;
	memmove(from->in, from->in + off, from->in_len - off);
	from->in_len -= off;
	return 0;
}

static int flush_side(struct side *s)
{
	while (s->out_len) {
		ssize_t k = write(s->fd, s->out, s->out_len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			return 0;
		if (k <= 0)
			return -errno;
		memmove(s->out, s->out + k, s->out_len - (size_t)k);
		s->out_len -= (size_t)k;
	}
	return 0;
}

/* Encodes slated's ENDED record (why, then text) into rec. Returns its length. */
static size_t ended_record(uint8_t rec[EX_HEADER_LEN + 1 + CH_MAX_TEXT], uint8_t why,
                           const char *msg)
{
	size_t n = strnlen(msg, CH_MAX_TEXT);

	ex_record_header(rec, EX_ENDED, (uint32_t)(1 + n));
	rec[EX_HEADER_LEN] = why;
	memcpy(rec + EX_HEADER_LEN + 1, msg, n);
	return EX_HEADER_LEN + 1 + n;
}

/* Sends an ENDED record to the client, or keeps it in hold (run --rm deletes first). */
static void send_ended(int client_fd, struct exec_held_end *hold, uint8_t why, const char *msg)
{
	uint8_t rec[EX_HEADER_LEN + 1 + CH_MAX_TEXT];
	size_t n = ended_record(rec, why, msg);

	if (hold) {
		memcpy(hold->buf, rec, n);
		hold->len = n;
		return;
	}
	(void)fs_write_all(client_fd, rec, n);
}

/* Ends the session with an ENDED record, as end_error does with ERROR. */
static void end_ended(struct relay *rl, int client_fd, uint8_t why, const char *msg)
{
	if (!rl->hold) {
		(void)fs_set_nonblock(client_fd, false);
		(void)flush_side(&rl->client);
	}
	send_ended(client_fd, rl->hold, why, msg);
}

/* Ends the session with an ERROR record: to the client now, or into hold for later. */
static void end_error(struct relay *rl, int client_fd, const char *msg)
{
	size_t n = strnlen(msg, CH_MAX_TEXT);

	if (rl->hold) {
		ex_record_header(rl->hold->buf, EX_ERROR, (uint32_t)n);
		memcpy(rl->hold->buf + EX_HEADER_LEN, msg, n);
		rl->hold->len = EX_HEADER_LEN + n;
		return;
	}
	(void)fs_set_nonblock(client_fd, false);
	(void)flush_side(&rl->client);
	exec_send_error(client_fd, "%s", msg);
}

static int fill_side(struct side *s)
{
	ssize_t k;

	if (s->in_len == sizeof(s->in))
		return 0; /* no room: a hang-up is seen once there is */
	k = read(s->fd, s->in + s->in_len, sizeof(s->in) - s->in_len);

	if (k < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (k <= 0) {
		s->eof = true;
		return 0;
	}
	s->in_len += (size_t)k;
	return 1;
}

/*
 * Bridges client and guest until the guest's EXIT (or ERROR) has reached the client, or either
 * side goes away. Returns 0 when the session ended normally, -ECONNRESET when the client left,
 * -EPIPE when the guest side ended first (the client was told), -EPROTO for a bad record.
 */
static int relay_run(const char *name, int client_fd, int guest_fd, const struct exec_first *first,
                     struct exec_held_end *hold, struct watch *w)
{
	char text[CH_MAX_TEXT + 1];
	uint8_t why;
	_cleanup_free_ struct relay *rl = calloc(1, sizeof(*rl));
	const uint8_t *pending;
	size_t pending_len;
	int r = 0;

	if (!rl)
		return -ENOMEM;
	rl->client.fd = client_fd;
	rl->guest.fd = guest_fd;
	rl->hold = hold;
	if (first->req_len > sizeof(rl->guest.out))
		return -EMSGSIZE;
	/* The checked REQUEST goes first; what followed it is read like any later record. */
	memcpy(rl->guest.out, first->req, first->req_len);
	rl->guest.out_len = first->req_len;
	(void)fs_set_nonblock(client_fd, true);
	(void)fs_set_nonblock(guest_fd, true);
	pending = first->rest;
	pending_len = first->rest_len;
	for (;;) {
		size_t before;

		/* Move and flush until nothing moves: a flush makes room for a record that the
		 * last move had to leave, and poll would not say so. */
		do {
			before = rl->client.in_len + rl->client.out_len + rl->guest.in_len +
			         rl->guest.out_len + pending_len;
			/* What came with the REQUEST is read first, as if from the socket. */
			if (pending_len) {
				size_t c = sizeof(rl->client.in) - rl->client.in_len;
				if (c > pending_len)
					c = pending_len;
				memcpy(rl->client.in + rl->client.in_len, pending, c);
				rl->client.in_len += c;
				pending += c;
				pending_len -= c;
			}
			r = move_records(rl, &rl->client, &rl->guest, false);
			if (r < 0) {
				log_ws(LOG_WARNING, name, "exec in %s: bad record from the client",
				       name);
				exec_send_error(client_fd, "bad record from the client");
				return r;
			}
			r = move_records(rl, &rl->guest, &rl->client, true);
			if (r < 0) {
				log_ws(LOG_WARNING, name,
				       "exec in %s: the guest sent a record it may not send; "
				       "session closed",
				       name);
				end_error(rl, client_fd, "the guest broke the exec protocol");
				return r;
			}
			if (flush_side(&rl->guest) < 0)
				rl->guest.eof = true;
			if (flush_side(&rl->client) < 0 || rl->client.eof)
				return -ECONNRESET;
		} while (rl->client.in_len + rl->client.out_len + rl->guest.in_len +
		                 rl->guest.out_len + pending_len !=
		         before);

		if (rl->exited && rl->client.out_len == 0)
			return 0;
		/* A complete record would have moved once the client drained: what is left of
		 * the guest's output can never be whole. */
		if (rl->guest.eof && !rl->exited && rl->client.out_len == 0) {
			/* The channel closes when the domain stops: say so, as for a pause. */
			if (watch_assess(w, time_mono_ms(), true, &why, text, sizeof(text))) {
				end_ended(rl, client_fd, why, text);
				return -EHOSTDOWN;
			}
			end_error(rl, client_fd,
			          "the guest channel closed before the command ended (the VM "
			          "stopped, or slate-guest restarted)");
			return -EPIPE;
		}

		struct pollfd p[3] = {
		        {.fd = client_fd,
		         .events = (short)((rl->client.eof ? 0 : POLLIN) |
		                           (rl->client.out_len ? POLLOUT : 0))},
		        /* Nothing more to read or write there: a hang-up must not wake us. */
		        {.fd = (rl->guest.eof || rl->exited) && !rl->guest.out_len ? -1 : guest_fd,
		         .events = (short)((rl->guest.eof || rl->exited ? 0 : POLLIN) |
		                           (rl->guest.out_len ? POLLOUT : 0))},
		        {.fd = rl->exited ? -1 : w->ew.efd, .events = POLLIN},
		};
		/* Read a side only while its records have somewhere to go. */
		if (rl->client.in_len == sizeof(rl->client.in) || pending_len)
			p[0].events &= (short)~POLLIN;
		if (rl->guest.in_len == sizeof(rl->guest.in))
			p[1].events &= (short)~POLLIN;
		if (poll(p, 3, rl->exited ? -1 : watch_timeout(w)) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR) && !rl->client.eof)
			(void)fill_side(&rl->client);
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR) && !rl->guest.eof && !rl->exited &&
		    fill_side(&rl->guest) > 0)
			w->last_guest = time_mono_ms();
		if (p[2].revents & POLLIN) {
			eventfd_t v;
			(void)eventfd_read(w->ew.efd, &v);
			w->check = true;
		}
		/* The workspace paused, stopped or its guest silent for good: the session ends
		 * (what the guest sent before went to the client at the top of the loop). */
		if (!rl->exited && watch_step(w, &why, text, sizeof(text))) {
			log_ws(LOG_NOTICE, name, "exec in %s: %s", name, text);
			end_ended(rl, client_fd, why, text);
			return -EHOSTDOWN;
		}
	}
}

/* ---- opening a session ---- */

int exec_open(struct daemon_ctx *d, const char *name, int *ret_fd, struct slate_error *err)
{
	if (!d->channels)
		return slate_error_set(err, -ENOTCONN, "the guest channel is not available");
	return channels_open(d->channels, name, "exec", OPEN_TIMEOUT_MS, ret_fd, err);
}

int exec_collect(struct daemon_ctx *d, const char *name, const struct ex_request *req,
                 const char *input, unsigned timeout_ms, char *out, size_t out_len, int *ret_status,
                 struct slate_error *err)
{
	_cleanup_free_ uint8_t *buf = malloc(RELAY_CAP + 4096);
	_cleanup_close_ int fd = -1;
	int64_t deadline = time_mono_ms() + timeout_ms;
	size_t len = 0, got = 0;
	long n;
	int r;

	if (!buf)
		return slate_error_errno(err, -ENOMEM, "exec");
	r = exec_open(d, name, &fd, err);
	if (r < 0)
		return r;
	n = ex_request_encode(req, buf, RELAY_CAP);
	if (n < 0)
		return slate_error_errno(err, (int)n, "cannot encode the request");
	if (fs_write_all(fd, buf, (size_t)n) < 0 ||
	    (input && send_record(fd, EX_STDIN, input, strlen(input)) < 0) ||
	    (!req->tty && send_record(fd, EX_STDIN_EOF, NULL, 0) < 0))
		return slate_error_set(err, -EIO, "cannot send the request: %s", strerror(errno));
	out[0] = '\0';
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - time_mono_ms();
		struct ex_record rec;
		ssize_t k;
		int m;

		while ((m = ex_record_decode(buf, len, &rec)) > 0) {
			if (rec.type == EX_STDOUT || rec.type == EX_STDERR) {
				size_t c =
				        rec.len < out_len - 1 - got ? rec.len : out_len - 1 - got;
				memcpy(out + got, rec.payload, c);
				got += c;
				out[got] = '\0';
			} else if (rec.type == EX_EXIT) {
				uint32_t v = ch_get_u32(rec.payload + 1);
				*ret_status = rec.payload[0] == 0 ? (int)(v & 0xff)
				                                  : 128 + (int)(v & 0x7f);
				return 0;
			} else if (rec.type == EX_ERROR) {
				return slate_error_set(err, -EIO, "%.*s", (int)rec.len,
				                       (const char *)rec.payload);
			} else if (rec.type != EX_STARTED) {
				return slate_error_set(err, -EPROTO, "unexpected record %u",
				                       rec.type);
			}
			memmove(buf, buf + m, len - (size_t)m);
			len -= (size_t)m;
		}
		if (m < 0)
			return slate_error_set(err, -EPROTO, "malformed record from the guest");
		if (left <= 0 || poll(&p, 1, (int)left) == 0)
			return slate_error_set(err, -ETIMEDOUT,
			                       "no answer within %u s (output so far: %s)",
			                       timeout_ms / 1000, out);
		k = read(fd, buf + len, RELAY_CAP + 4096 - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return slate_error_set(err, -ECONNRESET, "the guest closed the session");
		len += (size_t)k;
	}
}

/* ---- a dialog: slated itself talks to a guest program over its stdin and stdout ---- */

struct exec_dialog {
	int fd;
	uint8_t in[RELAY_CAP + 4096]; /* records received, not yet taken apart */
	size_t in_len;
	char *line; /* stdout bytes not yet returned as lines */
	size_t line_len, line_cap;
	int status; /* the program's exit status once EXIT came, else -1 */
};

void exec_dialog_free(struct exec_dialog *g)
{
	if (!g)
		return;
	safe_close(g->fd);
	free(g->line);
	free(g);
}

int exec_dialog_open(struct daemon_ctx *d, const char *name, const struct ex_request *req,
                     struct exec_dialog **ret, struct slate_error *err)
{
	_cleanup_free_ uint8_t *buf = malloc(EX_MAX_REQUEST + EX_HEADER_LEN);
	struct exec_dialog *g = calloc(1, sizeof(*g));
	long n;
	int r;

	if (!buf || !g) {
		free(g);
		return slate_error_errno(err, -ENOMEM, "exec");
	}
	g->status = -1;
	r = exec_open(d, name, &g->fd, err);
	if (r < 0) {
		g->fd = -1;
		exec_dialog_free(g);
		return r;
	}
	n = ex_request_encode(req, buf, EX_MAX_REQUEST + EX_HEADER_LEN);
	if (n < 0 || fs_write_all(g->fd, buf, (size_t)n) < 0) {
		exec_dialog_free(g);
		return slate_error_set(err, n < 0 ? (int)n : -EIO, "cannot send the request");
	}
	*ret = g;
	return 0;
}

int exec_dialog_send(struct exec_dialog *g, const void *p, size_t len)
{
	const uint8_t *b = p;

	while (len > 0) {
		size_t k = len < EX_MAX_RECORD ? len : EX_MAX_RECORD;
		if (send_record(g->fd, EX_STDIN, b, k) < 0)
			return -EIO;
		b += k;
		len -= k;
	}
	return 0;
}

/* Takes the records in g->in apart: stdout to g->line, the end to g->status. */
static int dialog_records(struct exec_dialog *g, struct slate_error *err)
{
	struct ex_record rec;
	int m;

	while ((m = ex_record_decode(g->in, g->in_len, &rec)) > 0) {
		if (rec.type == EX_STDOUT) {
			if (g->line_len + rec.len > EXEC_DIALOG_BUFFER)
				return slate_error_set(err, -EMSGSIZE,
				                       "the guest program wrote a line too long");
			if (g->line_len + rec.len > g->line_cap) {
				size_t cap = g->line_len + rec.len + 4096;
				char *nl = realloc(g->line, cap);
				if (!nl)
					return slate_error_errno(err, -ENOMEM, "exec");
				g->line = nl;
				g->line_cap = cap;
			}
			memcpy(g->line + g->line_len, rec.payload, rec.len);
			g->line_len += rec.len;
		} else if (rec.type == EX_STDERR) {
			log_debug("guest program: %.*s", (int)(rec.len > 512 ? 512 : rec.len),
			          (const char *)rec.payload);
		} else if (rec.type == EX_EXIT) {
			uint32_t v = ch_get_u32(rec.payload + 1);
			g->status = rec.payload[0] == 0 ? (int)(v & 0xff) : 128 + (int)(v & 0x7f);
		} else if (rec.type == EX_ERROR) {
			return slate_error_set(err, -EIO, "%.*s", (int)rec.len,
			                       (const char *)rec.payload);
		} else if (rec.type != EX_STARTED) {
			return slate_error_set(err, -EPROTO, "unexpected record %u", rec.type);
		}
		memmove(g->in, g->in + m, g->in_len - (size_t)m);
		g->in_len -= (size_t)m;
	}
	if (m < 0)
		return slate_error_set(err, -EPROTO, "malformed record from the guest");
	return 0;
}

int exec_dialog_line(struct exec_dialog *g, int64_t deadline_ms, char *out, size_t out_len,
                     struct slate_error *err)
{
	for (;;) {
		char *nl = g->line_len ? memchr(g->line, '\n', g->line_len) : NULL;
		struct pollfd p = {.fd = g->fd, .events = POLLIN};
		int64_t left;
		ssize_t k;
		int r;

		if (nl) {
			size_t n = (size_t)(nl - g->line);
			if (n >= out_len)
				return slate_error_set(err, -EMSGSIZE,
				                       "the guest program wrote a line too long");
			memcpy(out, g->line, n);
			out[n] = '\0';
			memmove(g->line, nl + 1, g->line_len - n - 1);
			g->line_len -= n + 1;
			return 0;
		}
		if (g->status >= 0)
			return slate_error_set(err, -EPIPE, "the guest program exited %d",
			                       g->status);
		left = deadline_ms - time_mono_ms();
		if (left <= 0 || poll(&p, 1, (int)left) == 0)
			return slate_error_set(err, -ETIMEDOUT, "the guest program did not answer");
		k = read(g->fd, g->in + g->in_len, sizeof(g->in) - g->in_len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return slate_error_set(err, -ECONNRESET, "the guest closed the session");
		g->in_len += (size_t)k;
		r = dialog_records(g, err);
		if (r < 0)
			return r;
	}
}

int exec_terminal_proof(struct daemon_ctx *d, const char *name, unsigned timeout_ms,
                        struct slate_error *err)
{
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	int64_t deadline = time_mono_ms() + timeout_ms;
	uint8_t rnd[6];
	char token[16], input[128], want[64], out[8192];
	int status = -1, r;

	if (!req)
		return slate_error_errno(err, -ENOMEM, "terminal proof");
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return slate_error_errno(err, -EIO, "terminal proof: getrandom");
	(void)snprintf(token, sizeof(token), "%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
	               rnd[3], rnd[4], rnd[5]);
	/* The terminal echoes the input line; only a shell that ran it prints "proof-42-<t>". */
	(void)snprintf(input, sizeof(input), "echo proof-$((6*7))-%s; exit\n", token);
	(void)snprintf(want, sizeof(want), "proof-42-%s", token);
	req->login = true;
	req->tty = true;
	req->rows = 24;
	req->cols = 80;
	req->timeout_s = (timeout_ms / 1000) + 1;

	r = channels_wait_ready(d->channels, name, timeout_ms);
	if (r < 0)
		return slate_error_set(err, r, "the guest agent did not connect within %u s%s",
		                       timeout_ms / 1000, r == -ENOENT ? " (no channel)" : "");
	for (;;) {
		int64_t left = deadline - time_mono_ms();
		/* Only before the first try: a retry leaves at least half a second. */
		if (left <= 0)
			return slate_error_set(err, -ETIMEDOUT,
			                       "the guest agent connected, but no time was left "
			                       "within %u s",
			                       timeout_ms / 1000);
		r = exec_collect(d, name, req, input, (unsigned)left, out, sizeof(out), &status,
		                 err);
		if (r >= 0 && strstr(out, want))
			return 0;
		if (r >= 0)
			r = slate_error_set(err, -EIO,
			                    "the shell exited %d without the expected output",
			                    status);
		/* The agent may be restarting (a HELLO mid-boot): try again shortly. */
		if (deadline - time_mono_ms() < 1000)
			return r;
		(void)usleep(500 * 1000);
	}
}

int exec_session(struct daemon_ctx *d, const char *name, int fd, const struct exec_first *first,
                 struct exec_held_end *hold)
{
	_cleanup_close_ int gfd = -1;
	struct slate_error err = {0};
	int64_t t0 = time_mono_ms();
	_cleanup_(watch_done) struct watch w = {
	        .d = d, .name = name, .ew.efd = -1, .unresponsive_ms = UNRESPONSIVE_MS};
	const char *e = getenv(ENV_TEST_UNRESPONSIVE);
	char text[CH_MAX_TEXT + 1];
	uint8_t why;
	int r;

	if (e && atoi(e) > 0)
		w.unresponsive_ms = (unsigned)atoi(e);
	/* Watched from here on, so that no event between the look below and the relay is lost. */
	r = watch_add(&w.ew, name);
	if (r < 0) {
		exec_send_error(fd, "cannot watch %s: %s", name, slate_strerror(r));
		return r;
	}
	/* Paused or quarantined already: no guest would answer the open. */
	if (watch_assess(&w, time_mono_ms(), true, &why, text, sizeof(text)) &&
	    why != EX_END_STOPPED) {
		send_ended(fd, hold, why, text);
		return -EHOSTDOWN;
	}
	w.started = true;
	r = exec_open(d, name, &gfd, &err);
	if (r < 0) {
		/* Paused (or stopped) while the open waited: say that rather than a timeout. */
		if (watch_assess(&w, time_mono_ms(), true, &why, text, sizeof(text)))
			send_ended(fd, hold, why, text);
		else
			exec_send_error(fd, "cannot reach the guest of %s: %s", name,
			                slate_error_text(&err));
		return r;
	}
	w.last_guest = w.next_probe = time_mono_ms();
	r = relay_run(name, fd, gfd, first, hold, &w);
	log_ws(LOG_DEBUG, name, "exec session in %s ended after %.3f s: %s", name,
	       (double)(time_mono_ms() - t0) / 1000, r == 0 ? "done" : slate_strerror(r));
	return r;
}

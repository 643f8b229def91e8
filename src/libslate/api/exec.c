/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Exec sessions: /v1/workspaces/:name/exec and /v1/run, API connections upgraded to "slate-exec"
 * and bridged to an "exec" stream of the workspace's guest channel. Both ends speak the exec
 * records of doc/guest-channel.md; slated decodes every record from either side, lets through
 * only what that side may send, and re-encodes the client's REQUEST after checking it. The
 * terminal proof that ends `slate start` is an exec session of slated's own.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/exec.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "channel/channels.h"
#include "channel/proto.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "vm/domain.h"
#include "workspace/workspace.h"

#define EXEC_PROTOCOL "slate-exec"
#define RELAY_CAP (EX_HEADER_LEN + EX_MAX_RECORD)
#define OPEN_TIMEOUT_MS 15000
#define REQUEST_TIMEOUT_MS 30000

static int64_t now_ms(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

_printf_(2, 3) static void send_error(int fd, const char *fmt, ...)
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

static void send_progress(int fd, const char *text)
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
struct first {
	uint8_t *req, *rest;
	size_t req_len, rest_len;
};

static void first_done(struct first *f)
{
	free(f->req);
	free(f->rest);
}

static int read_request(int fd, const char *extra, size_t extra_len, struct first *ret)
{
	_cleanup_free_ uint8_t *buf = malloc(EX_HEADER_LEN + EX_MAX_REQUEST);
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	_cleanup_free_ uint8_t *out = NULL;
	size_t len = 0, cap = EX_HEADER_LEN + EX_MAX_REQUEST;
	int64_t deadline = now_ms() + REQUEST_TIMEOUT_MS;
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
		int64_t left = deadline - now_ms();
		ssize_t got;

		if (len == cap || left <= 0 || poll(&p, 1, (int)left) <= 0) {
			send_error(fd, "no complete exec request within %d s",
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
		send_error(fd, "malformed exec request");
		return -EPROTO;
	}
	out = malloc(cap);
	if (!out)
		return -ENOMEM;
	n = ex_request_encode(req, out, cap);
	if (n < 0) {
		send_error(fd, "exec request too large");
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

/* The session's last record (EXIT or ERROR), kept back by slated when it still has work to do
 * before the client may go (run --rm deletes the workspace first). */
struct held_end {
	uint8_t buf[EX_HEADER_LEN + CH_MAX_TEXT];
	size_t len;
};

struct relay {
	struct side client, guest;
	struct held_end *hold; /* NULL: forward the last record like the others */
	bool exited;           /* EXIT or ERROR went to the client (or to hold) */
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
	send_error(client_fd, "%s", msg);
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
static int relay_run(const char *name, int client_fd, int guest_fd, const struct first *first,
                     struct held_end *hold)
{
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
				send_error(client_fd, "bad record from the client");
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
			end_error(rl, client_fd,
			          "the guest channel closed before the command ended (the VM "
			          "stopped, or slate-guest restarted)");
			return -EPIPE;
		}

		struct pollfd p[2] = {
		        {.fd = client_fd,
		         .events = (short)((rl->client.eof ? 0 : POLLIN) |
		                           (rl->client.out_len ? POLLOUT : 0))},
		        /* Nothing more to read or write there: a hang-up must not wake us. */
		        {.fd = (rl->guest.eof || rl->exited) && !rl->guest.out_len ? -1 : guest_fd,
		         .events = (short)((rl->guest.eof || rl->exited ? 0 : POLLIN) |
		                           (rl->guest.out_len ? POLLOUT : 0))},
		};
		/* Read a side only while its records have somewhere to go. */
		if (rl->client.in_len == sizeof(rl->client.in) || pending_len)
			p[0].events &= (short)~POLLIN;
		if (rl->guest.in_len == sizeof(rl->guest.in))
			p[1].events &= (short)~POLLIN;
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR) && !rl->client.eof)
			(void)fill_side(&rl->client);
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR) && !rl->guest.eof && !rl->exited)
			(void)fill_side(&rl->guest);
	}
}

/* ---- opening a session ---- */

int exec_open(struct daemon_ctx *d, const char *name, int *ret_fd, char *err, size_t errlen)
{
	if (!d->channels) {
		(void)snprintf(err, errlen, "the guest channel is not available");
		return -ENOTCONN;
	}
	return channels_open(d->channels, name, "exec", OPEN_TIMEOUT_MS, ret_fd, err, errlen);
}

int exec_collect(struct daemon_ctx *d, const char *name, const struct ex_request *req,
                 const char *input, unsigned timeout_ms, char *out, size_t out_len, int *ret_status,
                 char *err, size_t errlen)
{
	_cleanup_free_ uint8_t *buf = malloc(RELAY_CAP + 4096);
	_cleanup_close_ int fd = -1;
	int64_t deadline = now_ms() + timeout_ms;
	size_t len = 0, got = 0;
	long n;
	int r;

	if (!buf)
		return -ENOMEM;
	r = exec_open(d, name, &fd, err, errlen);
	if (r < 0)
		return r;
	n = ex_request_encode(req, buf, RELAY_CAP);
	if (n < 0)
		return (int)n;
	if (fs_write_all(fd, buf, (size_t)n) < 0 ||
	    (input && send_record(fd, EX_STDIN, input, strlen(input)) < 0) ||
	    (!req->tty && send_record(fd, EX_STDIN_EOF, NULL, 0) < 0)) {
		(void)snprintf(err, errlen, "cannot send the request: %s", strerror(errno));
		return -EIO;
	}
	out[0] = '\0';
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - now_ms();
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
				(void)snprintf(err, errlen, "%.*s", (int)rec.len,
				               (const char *)rec.payload);
				return -EIO;
			} else if (rec.type != EX_STARTED) {
				(void)snprintf(err, errlen, "unexpected record %u", rec.type);
				return -EPROTO;
			}
			memmove(buf, buf + m, len - (size_t)m);
			len -= (size_t)m;
		}
		if (m < 0) {
			(void)snprintf(err, errlen, "malformed record from the guest");
			return -EPROTO;
		}
		if (left <= 0 || poll(&p, 1, (int)left) == 0) {
			(void)snprintf(err, errlen, "no answer within %u s (output so far: %s)",
			               timeout_ms / 1000, out);
			return -ETIMEDOUT;
		}
		k = read(fd, buf + len, RELAY_CAP + 4096 - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			(void)snprintf(err, errlen, "the guest closed the session");
			return -ECONNRESET;
		}
		len += (size_t)k;
	}
}

int exec_terminal_proof(struct daemon_ctx *d, const char *name, unsigned timeout_ms, char *err,
                        size_t errlen)
{
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	int64_t deadline = now_ms() + timeout_ms;
	uint8_t rnd[6];
	char token[16], input[128], want[64], out[8192];
	int status = -1, r;

	if (!req)
		return -ENOMEM;
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return -EIO;
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
	if (r < 0) {
		(void)snprintf(err, errlen, "the guest agent did not connect within %u s%s",
		               timeout_ms / 1000, r == -ENOENT ? " (no channel)" : "");
		return r;
	}
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		r = exec_collect(d, name, req, input, (unsigned)left, out, sizeof(out), &status,
		                 err, errlen);
		if (r >= 0 && strstr(out, want))
			return 0;
		if (r >= 0)
			(void)snprintf(err, errlen,
			               "the shell exited %d without the expected output", status);
		/* The agent may be restarting (a HELLO mid-boot): try again shortly. */
		if (deadline - now_ms() < 1000)
			return r < 0 ? r : -EIO;
		(void)usleep(500 * 1000);
	}
}

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

/* Runs one session on an upgraded connection. Returns relay_run's result. */
static int exec_bridge_session(struct daemon_ctx *d, const char *name, int fd,
                               const struct first *first, struct held_end *hold)
{
	_cleanup_close_ int gfd = -1;
	char err[512] = "";
	int64_t t0 = now_ms();
	int r;

	r = exec_open(d, name, &gfd, err, sizeof(err));
	if (r < 0) {
		send_error(fd, "cannot reach the guest of %s: %s", name, err);
		return r;
	}
	r = relay_run(name, fd, gfd, first, hold);
	log_ws(LOG_DEBUG, name, "exec session in %s ended after %.3f s: %s", name,
	       (double)(now_ms() - t0) / 1000, r == 0 ? "done" : slate_strerror(r));
	return r;
}

static void exec_bridge(int fd, const char *extra, size_t extra_len, void *arg)
{
	struct exec_job *j = arg;
	_cleanup_(first_done) struct first first = {0};

	if (read_request(fd, extra, extra_len, &first) < 0)
		return;
	(void)exec_bridge_session(j->d, j->name, fd, &first, NULL);
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

struct run_progress {
	int fd;
};

static void run_progress_fn(const char *step, const char *detail, void *userdata)
{
	struct run_progress *p = userdata;
	char text[CH_MAX_TEXT + 1];

	(void)snprintf(text, sizeof(text), "%s%s%s", step, detail && *detail ? ": " : "",
	               detail ? detail : "");
	send_progress(p->fd, text);
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

	r = api_vm_destroy_and_delete(d, name, err, sizeof(err));
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
	_cleanup_(first_done) struct first first = {0};
	struct run_progress rp = {.fd = fd};
	struct held_end end = {0};
	bool created = false;
	char code[64] = "", err[4096] = "";
	int r;

	if (read_request(fd, extra, extra_len, &first) < 0)
		return;
	if (j->create) {
		struct api_request creq = {.method = "POST",
		                           .path = "/workspaces",
		                           .caller = {.uid = j->uid},
		                           .body = j->create,
		                           .userdata = d};
		struct api_reply crep = {0};
		const char *msg = NULL, *ecode = NULL;

		send_progress(fd, "creating workspace");
		r = handle_workspace_create(&creq, &crep);
		if (crep.status != 201) {
			if (crep.json)
				(void)api_error_parse(crep.json, &ecode, &msg);
			send_error(fd, "%s", msg ? msg : slate_strerror(r < 0 ? r : -EIO));
			json_object_put(crep.json);
			return;
		}
		json_object_put(crep.json);
		created = true;
		(void)run_progress_fn("created", j->name, &rp);
	}
	/* From here on, with rm, the workspace goes whatever happens. */
	r = api_vm_start(d, j->name, 0, run_progress_fn, &rp, NULL, code, sizeof(code), err,
	                 sizeof(err));
	if (r < 0)
		goto out;
	err[0] = '\0';
	if (client_gone(fd)) {
		log_ws(LOG_INFO, j->name, "run in %s: the client went away during the start",
		       j->name);
		goto out;
	}
	(void)exec_bridge_session(d, j->name, fd, &first, j->rm && created ? &end : NULL);
out:
	if (j->rm && created) {
		send_progress(fd, "deleting the workspace");
		run_remove(d, j->name);
	}
	if (err[0])
		send_error(fd, "%s", err);
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

/* SPDX-License-Identifier: GPL-2.0-or-later */

/* The host side of one guest channel connection: frames in, streams out (mux.h). */

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "channel/mux.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

#define MUX_IN_CAP (MUX_READ_CHUNK + CH_MAX_FRAME)
/* Streams are read only while less than this waits for the connection; the connection is read
 * only while less than twice this waits (what we answer to input is bounded by the input). */
#define MUX_OUT_LOW (256u * 1024)
#define MUX_OUT_INITIAL (1024u * 1024)
#define MUX_OUT_MAX (16u * 1024 * 1024)
_Static_assert(MUX_BULK_WINDOW <= CH_MAX_WINDOW, "the bulk window is a legal window");
#define MUX_HASH 512
#define MUX_HELLO_PREFIX (CH_HEADER_LEN + CH_MAGIC_LEN)

enum mux_state {
	MUX_DOWN,    /* no connection */
	MUX_SCAN,    /* connected, skipping bytes until a HELLO */
	MUX_AWAIT,   /* in step, dropping frames until the guest's HELLO answers ours */
	MUX_SESSION, /* the guest answered: streams may open */
};

struct mux_stream {
	struct mux *mux;
	uint32_t id;
	int fd; /* our end; -1 once we sent CLOSE */
	bool hashed;
	bool opening;    /* ours, waiting for OPEN_OK or OPEN_FAIL */
	bool got_eof;    /* the guest sends no more DATA */
	bool sent_eof;   /* we send no more DATA */
	bool sent_close; /* CLOSE sent: the id is free once the guest's comes */
	bool read_done;  /* the user's side gave end of file (or an error) */
	bool shut_wr;    /* shutdown(SHUT_WR) done after the guest's EOF */
	bool user_hup;   /* the user closed its end: nothing more is written to it */
	bool draining;   /* the guest closed; the last bytes still go to the user */
	bool watched;
	uint32_t events;
	uint32_t send_window; /* what the guest lets us send */
	uint32_t recv_window; /* what the guest may still send */
	uint32_t unacked;     /* written to the user, not yet granted back */
	uint32_t recv_cap;    /* the window we grant in all: CH_INITIAL_WINDOW or MUX_BULK_WINDOW */
	uint8_t *rbuf;        /* recv_cap bytes, allocated when first needed */
	uint32_t roff, rlen;
	void *cookie;
	void *data;
	struct mux_stream *hnext, *prev, *next;
};

struct mux {
	char *workspace;
	const struct mux_ops *ops;
	void *userdata;
	enum mux_state state;
	uint8_t *in;
	size_t in_len;
	uint8_t *out;
	size_t out_off, out_len, out_cap;
	bool out_blocked;
	int broken; /* an output overflow: the connection must go */
	struct mux_stream *hash[MUX_HASH];
	struct mux_stream *all;
	unsigned n_host, n_guest;
	uint32_t next_id;
	uint64_t last_ping, last_pong, ping_seq;
	uint64_t unanswered_since; /* the oldest PING not answered yet; 0: none */
	bool pong_warned;
	struct mux_info info;
};

/* Text from the guest goes to logs and JSON: printable ASCII only, the rest becomes '?'. */
static void copy_text(char *dst, size_t cap, const uint8_t *p, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	for (size_t i = 0; i < n; i++)
		dst[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
	dst[n] = '\0';
}

static void notify(struct mux *m)
{
	if (m->ops->state)
		m->ops->state(m->userdata);
}

/* ---- output ---- */

static size_t out_pending(const struct mux *m)
{
	return m->out_len - m->out_off;
}

/* Room for n more bytes at the end of the output; *ret_p points there. */
static int out_reserve(struct mux *m, size_t n, uint8_t **ret_p)
{
	if (m->broken)
		return m->broken;
	if (m->out_cap - m->out_len < n && m->out_off > 0) {
		memmove(m->out, m->out + m->out_off, out_pending(m));
		m->out_len -= m->out_off;
		m->out_off = 0;
	}
	if (m->out_cap - m->out_len < n) {
		size_t cap = m->out_cap ? m->out_cap : MUX_OUT_INITIAL;
		while (cap - m->out_len < n)
			cap *= 2;
		if (cap > MUX_OUT_MAX) {
			m->broken = -ENOBUFS;
			return m->broken;
		}
		uint8_t *p = realloc(m->out, cap);
		if (!p) {
			m->broken = -ENOMEM;
			return m->broken;
		}
		m->out = p;
		m->out_cap = cap;
	}
	*ret_p = m->out + m->out_len;
	return 0;
}

static void set_interest(struct mux_stream *s);

static void out_check(struct mux *m)
{
	bool blocked = out_pending(m) >= MUX_OUT_LOW;

	if (blocked == m->out_blocked)
		return;
	m->out_blocked = blocked;
	for (struct mux_stream *s = m->all; s; s = s->next)
		set_interest(s);
}

static void queue_frame(struct mux *m, uint8_t type, uint32_t stream, const void *payload,
                        uint32_t len)
{
	uint8_t *p;

	if (out_reserve(m, CH_HEADER_LEN + (size_t)len, &p) < 0)
		return;
	m->out_len += ch_frame_encode(p, type, stream, payload, len);
	out_check(m);
}

static void queue_u32(struct mux *m, uint8_t type, uint32_t stream, uint32_t v)
{
	uint8_t b[4];

	ch_put_u32(b, v);
	queue_frame(m, type, stream, b, 4);
}

static void queue_fail(struct mux *m, uint32_t stream, uint32_t reason, const char *text)
{
	uint8_t b[4 + CH_MAX_TEXT];
	size_t n = strlen(text);

	ch_put_u32(b, reason);
	memcpy(b + 4, text, n);
	queue_frame(m, CH_OPEN_FAIL, stream, b, (uint32_t)(4 + n));
}

static void queue_hello(struct mux *m)
{
	uint8_t b[CH_HELLO_LEN];

	ch_hello_payload(b);
	queue_frame(m, CH_HELLO, 0, b, CH_HELLO_LEN);
}

/* ---- streams ---- */

static struct mux_stream *stream_find(const struct mux *m, uint32_t id)
{
	for (struct mux_stream *s = m->hash[id % MUX_HASH]; s; s = s->hnext)
		if (s->id == id)
			return s;
	return NULL;
}

static struct mux_stream *stream_new(struct mux *m, uint32_t id, int fd)
{
	struct mux_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->mux = m;
	s->id = id;
	s->fd = fd;
	s->hashed = true;
	s->hnext = m->hash[id % MUX_HASH];
	m->hash[id % MUX_HASH] = s;
	s->next = m->all;
	if (m->all)
		m->all->prev = s;
	m->all = s;
	if (ch_stream_is_host(id))
		m->n_host++;
	else
		m->n_guest++;
	return s;
}

static void stream_unhash(struct mux_stream *s)
{
	struct mux *m = s->mux;

	if (!s->hashed)
		return;
	for (struct mux_stream **p = &m->hash[s->id % MUX_HASH]; *p; p = &(*p)->hnext)
		if (*p == s) {
			*p = s->hnext;
			break;
		}
	s->hashed = false;
	if (ch_stream_is_host(s->id))
		m->n_host--;
	else
		m->n_guest--;
}

static void stream_close_fd(struct mux_stream *s)
{
	if (s->fd < 0)
		return;
	s->mux->ops->watch(s->mux->userdata, s, -1, 0);
	(void)safe_close(s->fd);
	s->fd = -1;
	s->watched = false;
	free(s->rbuf);
	s->rbuf = NULL;
	s->roff = s->rlen = 0;
}

static void stream_free(struct mux_stream *s)
{
	struct mux *m = s->mux;

	stream_unhash(s);
	stream_close_fd(s);
	if (s->prev)
		s->prev->next = s->next;
	else
		m->all = s->next;
	if (s->next)
		s->next->prev = s->prev;
	free(s);
}

static bool can_read(const struct mux_stream *s)
{
	return s->fd >= 0 && s->mux->state == MUX_SESSION && !s->draining && !s->opening &&
	       !s->read_done && !s->sent_eof && !s->sent_close && s->send_window > 0 &&
	       !s->mux->out_blocked;
}

static void set_interest(struct mux_stream *s)
{
	uint32_t ev = 0;

	if (s->fd < 0)
		return;
	if (can_read(s))
		ev |= POLLIN;
	if (s->rlen > 0 && !s->user_hup)
		ev |= POLLOUT;
	/* Nothing to do: still learn when the user closes (a hung-up fd is taken out instead,
	 * until there is something to do). */
	if (!ev && !s->user_hup)
		ev = POLLHUP;
	if (s->watched && ev == s->events)
		return;
	s->events = ev;
	s->watched = true;
	s->mux->ops->watch(s->mux->userdata, s, s->fd, ev);
}

static void send_close(struct mux_stream *s)
{
	queue_frame(s->mux, CH_CLOSE, s->id, NULL, 0);
	s->sent_close = true;
	stream_close_fd(s);
}

static void maybe_ack(struct mux_stream *s)
{
	/* A WINDOW goes out once half of what we granted has been written to the user. */
	if (s->unacked < s->recv_cap / 2 || s->got_eof || s->sent_close || s->draining || s->fd < 0)
		return;
	queue_u32(s->mux, CH_WINDOW, s->id, s->unacked);
	s->recv_window += s->unacked;
	s->unacked = 0;
}

/* The user's end broke or closed: nothing more goes to it. */
static void user_gone(struct mux_stream *s)
{
	int avail = 0;

	s->user_hup = true;
	s->roff = s->rlen = 0;
	/* What it wrote before closing still goes to the guest, if anything is left. */
	if (ioctl(s->fd, FIONREAD, &avail) < 0 || avail <= 0)
		s->read_done = true;
}

static void stream_flush(struct mux_stream *s)
{
	while (s->rlen > 0) {
		ssize_t n = send(s->fd, s->rbuf + s->roff, s->rlen, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				user_gone(s);
			break;
		}
		s->roff += (uint32_t)n;
		s->rlen -= (uint32_t)n;
		s->unacked += (uint32_t)n;
	}
	if (s->rlen == 0)
		s->roff = 0;
	maybe_ack(s);
}

/* DATA from the guest for the user: straight to the socket when nothing waits before it. */
static int stream_deliver(struct mux_stream *s, const uint8_t *p, uint32_t len)
{
	if (s->user_hup || s->fd < 0)
		return 0;
	if (s->rlen == 0) {
		for (;;) {
			ssize_t n = send(s->fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno != EAGAIN) {
				user_gone(s);
				return 0;
			}
			if (n > 0) {
				p += n;
				len -= (uint32_t)n;
				s->unacked += (uint32_t)n;
			}
			break;
		}
	}
	if (len > 0) {
		/* Bounded: what waits here plus what we may still get is at most what we granted. */
		if (s->rlen + len > s->recv_cap)
			return -ENOBUFS;
		if (!s->rbuf) {
			s->rbuf = malloc(s->recv_cap);
			if (!s->rbuf)
				return -ENOMEM;
		}
		if (s->roff + s->rlen + len > s->recv_cap) {
			memmove(s->rbuf, s->rbuf + s->roff, s->rlen);
			s->roff = 0;
		}
		memcpy(s->rbuf + s->roff + s->rlen, p, len);
		s->rlen += len;
	}
	maybe_ack(s);
	return 0;
}

/* Reads the user's bytes straight into a DATA frame in the output. */
static void stream_read(struct mux_stream *s)
{
	struct mux *m = s->mux;
	uint32_t want = s->send_window < CH_MAX_PAYLOAD ? s->send_window : CH_MAX_PAYLOAD;
	uint8_t *p;
	ssize_t n;

	if (out_reserve(m, CH_HEADER_LEN + (size_t)want, &p) < 0)
		return;
	do
		n = recv(s->fd, p + CH_HEADER_LEN, want, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		ch_frame_header(p, CH_DATA, s->id, (uint32_t)n);
		m->out_len += CH_HEADER_LEN + (size_t)n;
		s->send_window -= (uint32_t)n;
		m->info.bytes_out += (uint64_t)n;
		out_check(m);
	} else if (n == 0) {
		s->read_done = true;
		if (!s->user_hup) {
			queue_frame(m, CH_EOF, s->id, NULL, 0);
			s->sent_eof = true;
		}
	} else if (errno != EAGAIN) {
		s->read_done = true;
		s->user_hup = true;
		s->roff = s->rlen = 0;
	}
}

/* Moves a stream on after anything happened to it. May free it. */
static void stream_progress(struct mux_stream *s)
{
	if (s->fd < 0)
		return;
	if (s->draining) {
		if (s->rlen == 0 || s->user_hup)
			stream_free(s);
		else
			set_interest(s);
		return;
	}
	if (s->got_eof && s->rlen == 0 && !s->shut_wr && !s->user_hup) {
		(void)shutdown(s->fd, SHUT_WR);
		s->shut_wr = true;
	}
	if (!s->opening && !s->sent_close &&
	    ((s->user_hup && s->read_done) || (s->sent_eof && s->got_eof && s->rlen == 0))) {
		send_close(s);
		return;
	}
	set_interest(s);
}

/* Ends every stream that belongs to the session (not those draining). */
static void reset_streams(struct mux *m)
{
	struct mux_stream *s = m->all, *next;

	for (; s; s = next) {
		next = s->next;
		if (!s->hashed)
			continue;
		if (s->cookie) {
			void *cookie = s->cookie;
			s->cookie = NULL;
			m->ops->opened(m->userdata, cookie, -ECONNRESET, "the channel closed");
		}
		stream_free(s);
	}
}

/* ---- input ---- */

_printf_(3, 4) static int proto_error(struct mux *m, const uint8_t *hdr, const char *fmt, ...)
{
	char reason[160];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	m->info.errors++;
	(void)snprintf(m->info.last_error, sizeof(m->info.last_error),
	               "%s (frame: type %u flags %u reserved %u stream %u length %u)", reason,
	               hdr[0], hdr[1], (unsigned)ch_get_u16(hdr + 2), ch_get_u32(hdr + 4),
	               ch_get_u32(hdr + 8));
	log_ws(LOG_WARNING, m->workspace, "guest channel of %s: protocol error: %s; dropping it",
	       m->workspace, m->info.last_error);
	return -EPROTO;
}

static int handle_hello(struct mux *m, const struct ch_frame *f, const uint8_t *hdr)
{
	int r = ch_hello_check(f);

	if (r == -EPROTONOSUPPORT)
		return proto_error(m, hdr, "HELLO with version %u",
		                   ch_get_u32(f->payload + CH_MAGIC_LEN));
	if (r < 0)
		return proto_error(m, hdr, "HELLO without the magic");
	if (m->state == MUX_SESSION) {
		/* The guest started over: so do we, and wait for its answer to our HELLO. */
		log_ws(LOG_INFO, m->workspace,
		       "guest channel of %s: the guest restarted the session", m->workspace);
		reset_streams(m);
		queue_hello(m);
		m->state = MUX_AWAIT;
		notify(m);
		return 0;
	}
	m->state = MUX_SESSION;
	m->info.sessions++;
	m->last_ping = m->last_pong = (uint64_t)time_mono_ms();
	m->unanswered_since = 0;
	m->pong_warned = false;
	log_ws(LOG_DEBUG, m->workspace, "guest channel of %s: session %llu", m->workspace,
	       (unsigned long long)m->info.sessions);
	notify(m);
	return 0;
}

static int handle_open(struct mux *m, const struct ch_frame *f, const uint8_t *hdr)
{
	char service[CH_MAX_SERVICE + 1];
	struct mux_stream *s;
	uint32_t window;
	int fd = -1, r;

	if (ch_stream_is_host(f->stream))
		return proto_error(m, hdr, "OPEN with the host's parity");
	if (stream_find(m, f->stream))
		return proto_error(m, hdr, "OPEN for a stream id in use");
	if (ch_open_parse(f, &window, service) < 0)
		return proto_error(m, hdr, "malformed OPEN");
	if (m->n_guest >= CH_MAX_STREAMS) {
		queue_fail(m, f->stream, CH_FAIL_TOO_MANY, "too many streams");
		return 0;
	}
	r = m->ops->accept(m->userdata, service, &fd);
	if (r == -ENOENT) {
		queue_fail(m, f->stream, CH_FAIL_UNKNOWN_SERVICE, "unknown service");
		return 0;
	}
	if (r < 0) {
		queue_fail(m, f->stream, CH_FAIL_UNAVAILABLE, "unavailable");
		return 0;
	}
	s = stream_new(m, f->stream, fd);
	if (!s) {
		(void)safe_close(fd);
		queue_fail(m, f->stream, CH_FAIL_UNAVAILABLE, "out of memory");
		return 0;
	}
	s->send_window = window;
	s->recv_window = s->recv_cap = CH_INITIAL_WINDOW;
	queue_u32(m, CH_OPEN_OK, s->id, CH_INITIAL_WINDOW);
	stream_progress(s);
	return 0;
}

static int handle_stream_frame(struct mux *m, const struct ch_frame *f, const uint8_t *hdr)
{
	struct mux_stream *s = stream_find(m, f->stream);
	char text[CH_MAX_TEXT + 1];
	uint32_t v;
	int r;

	if (!s) {
		/* Frames in flight for a stream that just closed are dropped; answers to an OPEN
		 * we never sent are not in flight from anywhere. */
		if (f->type == CH_OPEN_OK || f->type == CH_OPEN_FAIL)
			return proto_error(m, hdr, "answer to an OPEN we did not send");
		return 0;
	}
	if (s->opening && f->type != CH_OPEN_OK && f->type != CH_OPEN_FAIL)
		return proto_error(m, hdr, "frame for a stream before its OPEN_OK");
	switch (f->type) {
	case CH_OPEN_OK:
		if (!s->opening)
			return proto_error(m, hdr, "OPEN_OK for an open stream");
		v = ch_get_u32(f->payload);
		if (v > CH_MAX_WINDOW)
			return proto_error(m, hdr, "OPEN_OK window %u over the maximum", v);
		s->opening = false;
		s->send_window = v;
		if (s->cookie) {
			void *cookie = s->cookie;
			s->cookie = NULL;
			m->ops->opened(m->userdata, cookie, 0, NULL);
		}
		break;
	case CH_OPEN_FAIL:
		if (!s->opening)
			return proto_error(m, hdr, "OPEN_FAIL for an open stream");
		copy_text(text, sizeof(text), f->payload + 4, f->len - 4);
		if (s->cookie) {
			void *cookie = s->cookie;
			s->cookie = NULL;
			m->ops->opened(m->userdata, cookie, -ECONNREFUSED, text);
		}
		stream_free(s);
		return 0;
	case CH_DATA:
		if (s->got_eof)
			return proto_error(m, hdr, "DATA after EOF");
		if (f->len > s->recv_window)
			return proto_error(m, hdr, "DATA beyond the window (%u bytes left)",
			                   s->recv_window);
		s->recv_window -= f->len;
		m->info.bytes_in += f->len;
		if (s->sent_close)
			return 0;
		r = stream_deliver(s, f->payload, f->len);
		if (r < 0)
			return proto_error(m, hdr, "DATA over the buffer (%s)", slate_strerror(r));
		break;
	case CH_WINDOW:
		v = ch_get_u32(f->payload);
		if (v == 0)
			return proto_error(m, hdr, "WINDOW of 0");
		if ((uint64_t)s->send_window + v > CH_MAX_WINDOW)
			return proto_error(m, hdr, "WINDOW makes the window exceed %u bytes",
			                   CH_MAX_WINDOW);
		s->send_window += v;
		break;
	case CH_EOF:
		if (s->got_eof)
			return proto_error(m, hdr, "EOF after EOF");
		s->got_eof = true;
		break;
	case CH_CLOSE:
		if (!s->sent_close)
			queue_frame(m, CH_CLOSE, s->id, NULL, 0);
		s->sent_close = true;
		s->got_eof = true;
		stream_unhash(s);
		if (s->fd >= 0 && s->rlen > 0 && !s->user_hup) {
			s->draining = true;
			set_interest(s);
		} else {
			stream_free(s);
		}
		return 0;
	default:
		return proto_error(m, hdr, "unexpected frame");
	}
	stream_progress(s);
	return 0;
}

static int handle_frame(struct mux *m, const struct ch_frame *f, const uint8_t *hdr)
{
	if (m->state == MUX_AWAIT && f->type != CH_HELLO)
		return 0; /* from before the guest saw our HELLO */
	switch (f->type) {
	case CH_HELLO:
		return handle_hello(m, f, hdr);
	case CH_PING:
		queue_frame(m, CH_PONG, 0, f->payload, f->len);
		return 0;
	case CH_PONG:
		m->last_pong = (uint64_t)time_mono_ms();
		m->unanswered_since = 0;
		m->pong_warned = false;
		return 0;
	case CH_EVENT:
		copy_text(m->info.last_event, sizeof(m->info.last_event), f->payload, f->len);
		log_ws(LOG_INFO, m->workspace, "guest channel of %s: event: %s", m->workspace,
		       m->info.last_event);
		notify(m);
		return 0;
	case CH_OPEN:
		return handle_open(m, f, hdr);
	default:
		return handle_stream_frame(m, f, hdr);
	}
}

static int process(struct mux *m)
{
	size_t off = 0;
	int r = 0;

	while (off < m->in_len && m->state != MUX_DOWN) {
		struct ch_frame f;
		const uint8_t *hdr;
		int n;

		if (m->state == MUX_SCAN) {
			long h = ch_find_hello(m->in + off, m->in_len - off);
			if (h < 0) {
				/* Keep what could still be the start of a HELLO. */
				if (m->in_len - off >= MUX_HELLO_PREFIX)
					off = m->in_len - (MUX_HELLO_PREFIX - 1);
				break;
			}
			off += (size_t)h;
			m->state = MUX_AWAIT;
		}
		hdr = m->in + off;
		n = ch_frame_decode(hdr, m->in_len - off, &f);
		if (n == 0)
			break;
		if (n < 0) {
			r = proto_error(m, hdr, "%s",
			                n == -EMSGSIZE ? "payload over the maximum"
			                               : "malformed frame");
			break;
		}
		r = handle_frame(m, &f, hdr);
		if (r < 0)
			break;
		off += (size_t)n;
	}
	if (m->state == MUX_DOWN)
		off = m->in_len;
	memmove(m->in, m->in + off, m->in_len - off);
	m->in_len -= off;
	if (r == 0 && m->broken)
		r = m->broken;
	return r;
}

/* ---- the interface ---- */

int mux_new(const char *workspace, const struct mux_ops *ops, void *userdata, struct mux **ret)
{
	struct mux *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->workspace = strdup(workspace);
	m->in = malloc(MUX_IN_CAP);
	if (!m->workspace || !m->in) {
		mux_free(m);
		return -ENOMEM;
	}
	m->ops = ops;
	m->userdata = userdata;
	*ret = m;
	return 0;
}

void mux_free(struct mux *m)
{
	if (!m)
		return;
	mux_reset(m);
	while (m->all)
		stream_free(m->all);
	free(m->in);
	free(m->out);
	free(m->workspace);
	free(m);
}

void mux_reset(struct mux *m)
{
	bool was_ready = m->state == MUX_SESSION;

	reset_streams(m);
	m->state = MUX_DOWN;
	m->in_len = 0;
	m->out_off = m->out_len = 0;
	m->out_blocked = false;
	m->broken = 0;
	if (was_ready)
		notify(m);
}

void mux_start(struct mux *m)
{
	mux_reset(m);
	m->state = MUX_SCAN;
	queue_hello(m);
}

void mux_input_buffer(struct mux *m, uint8_t **ret_p, size_t *ret_len)
{
	*ret_p = m->in + m->in_len;
	*ret_len = MUX_IN_CAP - m->in_len;
}

int mux_input_commit(struct mux *m, size_t n)
{
	if (n > MUX_IN_CAP - m->in_len)
		return -EINVAL;
	m->in_len += n;
	return process(m);
}

int mux_feed(struct mux *m, const uint8_t *p, size_t n)
{
	while (n > 0) {
		size_t room = MUX_IN_CAP - m->in_len, k = n < room ? n : room;
		int r;

		memcpy(m->in + m->in_len, p, k);
		r = mux_input_commit(m, k);
		if (r < 0)
			return r;
		p += k;
		n -= k;
	}
	return 0;
}

bool mux_want_input(const struct mux *m)
{
	return m->state != MUX_DOWN && out_pending(m) < 2 * MUX_OUT_LOW;
}

size_t mux_output(const struct mux *m, const uint8_t **ret_p)
{
	*ret_p = m->out + m->out_off;
	return out_pending(m);
}

void mux_output_consume(struct mux *m, size_t n)
{
	if (n > out_pending(m))
		n = out_pending(m);
	m->out_off += n;
	if (m->out_off == m->out_len)
		m->out_off = m->out_len = 0;
	out_check(m);
}

int mux_stream_event(struct mux_stream *s, uint32_t revents)
{
	struct mux *m = s->mux;

	if (s->fd < 0)
		return 0;
	if ((revents & (POLLHUP | POLLERR)) && !s->user_hup)
		user_gone(s);
	if ((revents & POLLOUT) && s->rlen > 0)
		stream_flush(s);
	if ((revents & (POLLIN | POLLHUP | POLLERR)) && can_read(s))
		stream_read(s);
	stream_progress(s);
	return m->broken;
}

struct mux *mux_stream_mux(struct mux_stream *s)
{
	return s->mux;
}

void *mux_stream_get_data(struct mux_stream *s)
{
	return s->data;
}

void mux_stream_set_data(struct mux_stream *s, void *data)
{
	s->data = data;
}

int mux_open(struct mux *m, const char *service, int fd, void *cookie)
{
	uint8_t b[4 + CH_MAX_SERVICE];
	struct mux_stream *s;
	uint32_t id;
	int n;

	if (m->state != MUX_SESSION)
		return -ENOTCONN;
	n = ch_open_payload(b, MUX_BULK_WINDOW, service);
	if (n < 0)
		return -EINVAL;
	if (m->n_host >= CH_MAX_STREAMS)
		return -EMFILE;
	do {
		m->next_id += 2;
		if (m->next_id == 0)
			m->next_id = 2;
		id = m->next_id;
	} while (stream_find(m, id));
	queue_frame(m, CH_OPEN, id, b, (uint32_t)n);
	if (m->broken)
		return -ENOBUFS;
	s = stream_new(m, id, fd);
	if (!s)
		return -ENOMEM; /* the guest's answer finds no stream: the connection drops */
	s->opening = true;
	s->cookie = cookie;
	s->recv_window = s->recv_cap = MUX_BULK_WINDOW;
	stream_progress(s);
	return 0;
}

static void send_ping(struct mux *m, uint64_t now)
{
	uint8_t b[8];

	m->ping_seq++;
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(m->ping_seq >> (56 - 8 * i));
	queue_frame(m, CH_PING, 0, b, 8);
	m->last_ping = now;
	if (!m->unanswered_since)
		m->unanswered_since = now;
}

int mux_probe(struct mux *m, uint64_t now, uint64_t *ret_unanswered_ms)
{
	if (m->state != MUX_SESSION)
		return -ENOTCONN;
	if (!m->unanswered_since)
		send_ping(m, now);
	*ret_unanswered_ms = now - m->unanswered_since;
	return 0;
}

void mux_tick(struct mux *m, uint64_t now)
{
	if (m->state != MUX_SESSION)
		return;
	if (now - m->last_ping >= MUX_PING_MS)
		send_ping(m, now);
	if (now - m->last_pong >= MUX_PONG_MS && !m->pong_warned) {
		m->pong_warned = true;
		(void)snprintf(m->info.last_error, sizeof(m->info.last_error), "no PONG for %u s",
		               MUX_PONG_MS / 1000);
		log_ws(LOG_WARNING, m->workspace,
		       "guest channel of %s: the guest has not answered for %u s", m->workspace,
		       MUX_PONG_MS / 1000);
	}
}

bool mux_ready(const struct mux *m)
{
	return m->state == MUX_SESSION;
}

void mux_get_info(const struct mux *m, struct mux_info *ret)
{
	*ret = m->info;
	ret->ready = m->state == MUX_SESSION;
	ret->streams = m->n_host + m->n_guest;
}

void *mux_get_userdata(const struct mux *m)
{
	return m->userdata;
}

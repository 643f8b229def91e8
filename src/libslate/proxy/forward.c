/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Request bodies upstream (scanned, held back, substituted or re-signed) and responses back. */

#include <errno.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "proxy/internal.h"
#include "util/error.h"

static int flush_pending(struct conn *c, struct buf *pend, size_t n, bool chunked, uint64_t *sent)
{
	char line[32];
	bool corked;
	int r, m;

	if (n == 0)
		return 0;
	if (chunked) {
		m = snprintf(line, sizeof(line), "%zx\r\n", n);
		if ((r = proxy_io_write(&c->up, line, (size_t)m)) < 0)
			return r;
		*sent += (uint64_t)m;
	}
	/* Sixteen records or so: in full segments, not one each. */
	corked = n > READ_CHUNK && proxy_cork_fd(c->up.fd, true);
	r = proxy_io_write(&c->up, buf_ptr(pend), n);
	if (corked)
		(void)proxy_cork_fd(c->up.fd, false);
	if (r < 0)
		return r;
	*sent += n;
	(void)buf_consume(pend, n);
	if (chunked) {
		if ((r = proxy_io_write(&c->up, "\r\n", 2)) < 0)
			return r;
		*sent += 2;
	}
	return 0;
}

/* The held body with the --body secrets' values in it (proxy_body_substitute), into *sbody, and head
 * with its new length. Returns FWD_OK or FWD_UPSTREAM (e filled). */
static int forward_substituted(struct conn *c, const struct http_head *h, const char *host,
                               struct buf *head, const struct buf *pend, struct buf **sbody,
                               struct up_error *e, struct outcome *o)
{
	int r = proxy_body_substitute(c, h, host, head, pend, sbody, o);

	if (r == -EFBIG)
		return proxy_up_fail(e, 413,
		                     "the request body with the secrets' real values in it is "
		                     "over %u KiB",
		                     BUF_SECURE_MAX / 1024),
		       FWD_UPSTREAM;
	if (r == -EPROTO) {
		proxy_plain_refusal(c, host, e->msg, sizeof(e->msg));
		e->status = 403;
		return FWD_UPSTREAM;
	}
	if (r < 0)
		return proxy_up_fail(e, 502, "cannot substitute in the request body: %s",
		                     slate_strerror(r)),
		       FWD_UPSTREAM;
	return FWD_OK;
}

/* Sends head upstream once the whole body is known, reusing a kept connection. Returns FWD_OK or
 * FWD_UPSTREAM (e filled). */
static int send_head(struct conn *c, const char *host, uint16_t port, const struct buf *head,
                     struct up_error *e, uint64_t *sent)
{
	if (proxy_up_ensure(c, host, port, e) < 0)
		return FWD_UPSTREAM;
	if (proxy_io_write(&c->up, buf_ptr(head), buf_len(head)) < 0) {
		/* A kept connection the server dropped just now: one more try. */
		if (proxy_up_connect(c, host, port, e) < 0 ||
		    (c->in_tunnel && proxy_up_tls(c, host, e) < 0) ||
		    proxy_io_write(&c->up, buf_ptr(head), buf_len(head)) < 0)
			return proxy_up_fail(e, 502, "cannot send the request to %s", host),
			       FWD_UPSTREAM;
	}
	*sent += buf_len(head);
	return FWD_OK;
}

/*
 * Reads the request body from the client, scans it, and sends head and body upstream. Bodies up
 * to PROXY_BODY_BUFFER are scanned whole before anything goes upstream; longer ones stream, and
 * the last (longest placeholder - 1) scanned bytes are held back, so no byte of a placeholder
 * is ever forwarded before the scan has seen all of it. A re-signed aws-chunked body goes
 * through rs's sigv4_stream; one that needs its hash (rs->need_body_hash) is hashed and
 * re-signed before the head goes, and refused (FWD_RESIGN) past PROXY_BODY_BUFFER. A body
 * for --body secrets (proxy_body_subst_wanted) is held whole, up to PROXY_BODY_BUFFER (past that it
 * streams as it is), and goes substituted with a Content-Length (proxy_body_substitute).
 */
int proxy_forward_request(struct conn *c, const struct http_head *h, struct buf *head,
                          const char *host, uint16_t port, struct leak_info *leak,
                          struct up_error *e, uint64_t *sent, struct resign *rs, struct outcome *o)
{
	_cleanup_buf_secure_ struct buf *sbody = NULL;
	bool body_subst = proxy_body_subst_wanted(c, h, host, rs);
	struct sigv4_stream *stream = rs->res ? rs->res->stream : NULL;
	_cleanup_buf_ struct buf *pend = NULL;
	struct hits hs = {.c = c, .host = host, .leak = -1};
	struct http_chunked ck = {0};
	uint64_t remaining = h->content_length;
	bool chunked = h->framing == HTTP_BODY_CHUNKED, done = h->framing == HTTP_BODY_NONE,
	     head_sent = false;
	size_t hold = scan_max_len(c->scan) > 0 ? scan_max_len(c->scan) - 1 : 0;
	uint32_t st = SCAN_START;
	int r;

	leak->pat = -1;
	if (!done) {
		/* An aws-chunked body: the stream holds a chunk until its last byte, then hands it
		 * over whole (sigv4_stream_feed). */
		pend = buf_new(stream ? PEND_MAX + SIGV4_MAX_CHUNK + SIGV4_MAX_CHUNK_LINE
		                      : PEND_MAX);
		if (!pend)
			return FWD_CLIENT_GONE;
		if (h->expect_continue && buf_len(c->cl.in) == 0)
			(void)proxy_io_write(&c->cl, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	}
	while (!done) {
		const uint8_t *p, *data = NULL;
		size_t len, used = 0, dlen = 0;

		if (buf_len(c->cl.in) == 0) {
			ssize_t n = proxy_io_fill(&c->cl, PROXY_UPSTREAM_TIMEOUT_MS);
			if (n <= 0)
				return FWD_CLIENT_GONE;
		}
		p = buf_ptr(c->cl.in);
		len = buf_len(c->cl.in);
		if (!chunked) {
			dlen = (uint64_t)len < remaining ? len : (size_t)remaining;
			data = p;
			used = dlen;
			remaining -= dlen;
			done = remaining == 0;
		} else {
			r = http_chunked_feed(&ck, p, len, &used, &data, &dlen);
			if (r < 0)
				return FWD_BAD_BODY;
			done = r == 1;
		}
		if (dlen > 0) {
			hs.base = 0;
			(void)scan_feed(c->scan, &st, data, dlen, proxy_hit_fn, &hs);
			if (hs.leak >= 0) {
				leak->pat = hs.leak;
				leak->where = "body";
				return FWD_LEAK;
			}
			if (stream) {
				r = sigv4_stream_feed(stream, data, dlen, pend);
				if (r < 0)
					return rs->err = r, FWD_RESIGN;
			} else if (buf_put(pend, data, dlen) < 0)
				return FWD_CLIENT_GONE;
		}
		(void)buf_consume(c->cl.in, used);
		if (body_subst && buf_len(pend) > PROXY_BODY_BUFFER)
			body_subst = false; /* too long to hold whole: goes as it is */
		if (buf_len(pend) >= PROXY_BODY_BUFFER && !body_subst) {
			if (!head_sent) {
				if (rs->need_body_hash)
					return rs->err = -EFBIG, FWD_RESIGN;
				if (proxy_up_ensure(c, host, port, e) < 0)
					return FWD_UPSTREAM;
				if (proxy_io_write(&c->up, buf_ptr(head), buf_len(head)) < 0)
					return proxy_up_fail(e, 502,
					                     "the server closed the connection"),
					       FWD_UPSTREAM;
				*sent += buf_len(head);
				head_sent = true;
			}
			if (flush_pending(c, pend, buf_len(pend) - hold, chunked, sent) < 0)
				return proxy_up_fail(e, 502, "the server closed the connection"),
				       FWD_UPSTREAM;
		}
	}
	if (stream && (r = sigv4_stream_finish(stream)) < 0)
		return rs->err = r, FWD_RESIGN;
	if (!head_sent && rs->need_body_hash &&
	    (r = proxy_resign_body(c, h, rs, pend, head, host, leak)) < 0)
		return rs->err = r, FWD_RESIGN;
	if (body_subst && !head_sent) {
		if ((r = forward_substituted(c, h, host, head, pend, &sbody, e, o)) < 0)
			return r;
		chunked = chunked && !sbody; /* substituted: goes with a Content-Length */
	}
	if (!head_sent && (r = send_head(c, host, port, head, e, sent)) < 0)
		return r;
	if (sbody && flush_pending(c, sbody, buf_len(sbody), false, sent) < 0)
		return proxy_up_fail(e, 502, "the server closed the connection"), FWD_UPSTREAM;
	if (!sbody && pend &&
	    (flush_pending(c, pend, buf_len(pend), chunked, sent) < 0 ||
	     (chunked && proxy_io_write(&c->up, "0\r\n\r\n", 5) < 0)))
		return proxy_up_fail(e, 502, "the server closed the connection"), FWD_UPSTREAM;
	if (chunked)
		*sent += 5;
	return FWD_OK;
}

int proxy_write_response_head(struct conn *c, const struct http_head *r, bool close_after,
                              uint64_t *received)
{
	_cleanup_buf_ struct buf *out = buf_new(HTTP_MAX_HEAD + 256);
	int e;

	if (!out)
		return -ENOMEM;
	if ((e = buf_putf(out, "HTTP/1.1 %u %s\r\n", r->status, r->reason)) < 0)
		return e;
	for (size_t i = 0; i < r->n_fields; i++) {
		const char *n = r->fields[i].name;
		if (r->status != 101 &&
		    (strcasecmp(n, "connection") == 0 || strcasecmp(n, "keep-alive") == 0 ||
		     strcasecmp(n, "proxy-connection") == 0))
			continue;
		if ((e = buf_putf(out, "%s: %s\r\n", n, r->fields[i].value)) < 0)
			return e;
	}
	if (close_after && r->status >= 200 && r->status != 101 &&
	    (e = buf_putf(out, "Connection: close\r\n")) < 0)
		return e;
	if ((e = buf_put(out, "\r\n", 2)) < 0)
		return e;
	*received += r->head_len;
	return proxy_io_write(&c->cl, buf_ptr(out), buf_len(out));
}

static int relay_body_(struct conn *c, const struct http_head *r, uint64_t *received)
{
	_cleanup_free_ uint8_t *b = NULL;
	struct http_chunked ck = {0};
	uint64_t remaining = r->content_length;
	bool done = r->framing == HTTP_BODY_NONE || (r->framing == HTTP_BODY_LENGTH && !remaining);
	int e;

	while (!done) {
		const uint8_t *p;
		size_t len, used;

		if (buf_len(c->up.in) > 0) {
			p = buf_ptr(c->up.in);
			len = buf_len(c->up.in);
		} else {
			ssize_t n;
			size_t want = RELAY_CHUNK;
			if (!b && !(b = malloc(RELAY_CHUNK)))
				return -ENOMEM;
			if (r->framing == HTTP_BODY_LENGTH && remaining < want)
				want = (size_t)remaining;
			n = proxy_io_read(&c->up, b, want, IO_BLOCK);
			if (n < 0)
				return (int)n;
			if (n == 0) {
				if (r->framing == HTTP_BODY_UNTIL_CLOSE)
					return 0;
				return -EPIPE; /* truncated */
			}
			p = b;
			len = (size_t)n;
		}
		switch (r->framing) {
		case HTTP_BODY_LENGTH:
			used = (uint64_t)len < remaining ? len : (size_t)remaining;
			remaining -= used;
			done = remaining == 0;
			break;
		case HTTP_BODY_CHUNKED: {
			/* Framing only: the raw bytes go to the client as they came. */
			size_t off = 0;
			used = 0;
			while (off < len && !done) {
				const uint8_t *d;
				size_t dl, u;
				e = http_chunked_feed(&ck, p + off, len - off, &u, &d, &dl);
				if (e < 0)
					return e;
				off += u;
				done = e == 1;
			}
			used = off;
			break;
		}
		default:
			used = len;
			break;
		}
		if ((e = proxy_io_write(&c->cl, p, used)) < 0)
			return e;
		*received += used;
		if (p != b)
			(void)buf_consume(c->up.in, used);
	}
	return 0;
}

/* Relays a body framed as r says from upstream to the client. Returns 0 or < 0. */
int proxy_relay_body(struct conn *c, const struct http_head *r, uint64_t *received)
{
	int e;

	if (r->framing == HTTP_BODY_NONE)
		return 0;
	proxy_bulk_mode(c, true);
	e = relay_body_(c, r, received);
	proxy_bulk_mode(c, false);
	return e;
}

/*
 * Relays both directions until both sides are done (or idle_ms of silence), scanning what the
 * client sends when scan_client. Returns 0, or FWD_LEAK with leak filled.
 */
int proxy_relay_both(struct conn *c, const char *host, uint64_t *up_bytes, uint64_t *down_bytes,
                     struct leak_info *leak)
{
	_cleanup_free_ uint8_t *b = malloc(READ_CHUNK);
	struct hits hs = {.c = c, .host = host, .leak = -1};
	bool cl_open = true, up_open = true;
	uint32_t st = SCAN_START;

	leak->pat = -1;
	if (!b)
		return -ENOMEM;
	/* What was read ahead on either side first. */
	if (buf_len(c->cl.in) > 0) {
		(void)scan_feed(c->scan, &st, buf_ptr(c->cl.in), buf_len(c->cl.in), proxy_hit_fn,
		                &hs);
		if (hs.leak >= 0)
			goto leaked;
		if (proxy_io_write(&c->up, buf_ptr(c->cl.in), buf_len(c->cl.in)) < 0)
			return 0;
		*up_bytes += buf_len(c->cl.in);
		(void)buf_reset(c->cl.in);
	}
	if (buf_len(c->up.in) > 0) {
		if (proxy_io_write(&c->cl, buf_ptr(c->up.in), buf_len(c->up.in)) < 0)
			return 0;
		*down_bytes += buf_len(c->up.in);
		(void)buf_reset(c->up.in);
	}
	while (cl_open || up_open) {
		struct pollfd pfd[2] = {{.fd = cl_open ? c->cl.fd : -1, .events = POLLIN},
		                        {.fd = up_open ? c->up.fd : -1, .events = POLLIN}};
		bool pend_cl = cl_open && c->cl.ssl && SSL_has_pending(c->cl.ssl),
		     pend_up = up_open && c->up.ssl && SSL_has_pending(c->up.ssl);
		int r;

		do
			r = poll(pfd, 2, pend_cl || pend_up ? 0 : IDLE_AFTER_MS);
		while (r < 0 && errno == EINTR);
		if (r == 0 && !pend_cl && !pend_up) {
			proxy_go_idle(c);
			do
				r = poll(pfd, 2, PROXY_TUNNEL_IDLE_MS);
			while (r < 0 && errno == EINTR);
		}
		if (r < 0 || (r == 0 && !pend_cl && !pend_up))
			return 0;
		if (pend_cl || (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = proxy_io_read(&c->cl, b, READ_CHUNK, 0);
			if (n <= 0) {
				cl_open = false;
				if (c->up.ssl)
					(void)SSL_shutdown(c->up.ssl);
				else
					(void)shutdown(c->up.fd, SHUT_WR);
			} else {
				(void)scan_feed(c->scan, &st, b, (size_t)n, proxy_hit_fn, &hs);
				if (hs.leak >= 0)
					goto leaked;
				if (proxy_io_write(&c->up, b, (size_t)n) < 0)
					return 0;
				*up_bytes += (uint64_t)n;
			}
		}
		if (pend_up || (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = proxy_io_read(&c->up, b, READ_CHUNK, 0);
			if (n <= 0) {
				up_open = false;
				if (c->cl.ssl)
					(void)SSL_shutdown(c->cl.ssl);
				else
					(void)shutdown(c->cl.fd, SHUT_WR);
			} else {
				if (proxy_io_write(&c->cl, b, (size_t)n) < 0)
					return 0;
				*down_bytes += (uint64_t)n;
			}
		}
	}
	return 0;
leaked:
	leak->pat = hs.leak;
	leak->where = "tunnel";
	return FWD_LEAK;
}

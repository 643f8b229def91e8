/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Client connection I/O (either side, TLS or not), answers to the client, reading request
 * heads, and giving back memory while idle. */

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proxy/internal.h"
#include "util/error.h"
#include "util/time.h"

static const char *status_text(unsigned s)
{
	switch (s) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 417:
		return "Expectation Failed";
	case 421:
		return "Misdirected Request";
	case 431:
		return "Request Header Fields Too Large";
	case 451:
		return "Unavailable For Legal Reasons";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Error";
	}
}

int proxy_io_wait(struct io *io, short events, int timeout_ms)
{
	struct pollfd pfd = {.fd = io->fd, .events = events};
	int r;

	/* Read ahead (both sides): whole records may wait in OpenSSL's buffer, not yet decrypted,
	 * where SSL_pending() does not count them and poll() does not see them. */
	if ((events & POLLIN) && io->ssl && SSL_has_pending(io->ssl))
		return 1;
	do
		r = poll(&pfd, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r == 0 ? -ETIMEDOUT : 1;
}

ssize_t proxy_io_read(struct io *io, void *p, size_t n, int timeout_ms)
{
	ssize_t k;
	int r = timeout_ms == IO_BLOCK ? 1 : proxy_io_wait(io, POLLIN, timeout_ms);

	if (r < 0)
		return r;
	if (io->ssl) {
		size_t got = 0;
		for (;;) {
			ERR_clear_error();
			if (SSL_read_ex(io->ssl, p, n, &got) == 1)
				return (ssize_t)got;
			switch (SSL_get_error(io->ssl, 0)) {
			case SSL_ERROR_ZERO_RETURN:
				return 0;
			case SSL_ERROR_WANT_READ:
			case SSL_ERROR_WANT_WRITE:
				continue;
			default:
				ERR_clear_error();
				return -ECONNRESET;
			}
		}
	}
	do
		k = read(io->fd, p, n);
	while (k < 0 && errno == EINTR);
	return k < 0 ? -errno : k;
}

int proxy_io_write(struct io *io, const void *p, size_t n)
{
	const uint8_t *q = p;

	while (n > 0) {
		if (io->ssl) {
			size_t done = 0;
			ERR_clear_error();
			if (SSL_write_ex(io->ssl, q, n, &done) != 1) {
				int e = SSL_get_error(io->ssl, 0);
				if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
					continue;
				ERR_clear_error();
				return -EPIPE;
			}
			q += done;
			n -= done;
		} else {
			ssize_t k = send(io->fd, q, n, MSG_NOSIGNAL);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				return k < 0 ? -errno : -EPIPE;
			q += k;
			n -= (size_t)k;
		}
	}
	return 0;
}

/* Reads more into io->in. Returns the count, 0 at EOF, or < 0. */
ssize_t proxy_io_fill(struct io *io, int timeout_ms)
{
	uint8_t tmp[READ_CHUNK];
	size_t room = buf_max(io->in) - buf_len(io->in);
	ssize_t n;

	if (room == 0)
		return SLATE_ERR_NO_BUFFER_SPACE;
	n = proxy_io_read(io, tmp, room < sizeof(tmp) ? room : sizeof(tmp), timeout_ms);
	if (n > 0 && buf_put(io->in, tmp, (size_t)n) < 0)
		return -ENOMEM;
	sodium_memzero(tmp, n > 0 ? (size_t)n : 0);
	return n;
}

/* TCP_CORK: held, what is written goes out in full segments; released, at once. Returns
 * whether it is held now. */
bool proxy_cork_fd(int fd, bool on)
{
	return setsockopt(fd, IPPROTO_TCP, TCP_CORK, &(int){on}, sizeof(int)) == 0 && on;
}

void proxy_set_timeouts(int fd, int ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

_printf_(3, 4) void proxy_respond(struct conn *c, unsigned status, const char *fmt, ...)
{
	char body[1024], head[256];
	va_list ap;
	int n, m;

	va_start(ap, fmt);
	n = vsnprintf(body, sizeof(body) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n > sizeof(body) - 2)
		n = sizeof(body) - 2;
	body[n++] = '\n';
	m = snprintf(head, sizeof(head),
	             "HTTP/1.1 %u %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
	             "Content-Length: %d\r\nConnection: close\r\n\r\n",
	             status, status_text(status), n);
	(void)proxy_io_write(&c->cl, head, (size_t)m);
	(void)proxy_io_write(&c->cl, body, (size_t)n);
	c->answered_error = true;
}

/*
 * After answering an error the connection closes, often with the rest of the client's request
 * unread; closing then would reset the connection and could destroy the answer in flight. So,
 * as web servers do, stop writing and read (and drop) what still comes, for a moment.
 */
/* Not inlined: its buffer would sit in proxy_serve()'s frame, the stack of every idle tunnel. */
__attribute__((noinline)) void proxy_linger_close(struct conn *c)
{
	char b[4096];
	double end = time_mono_ms() + 1000;
	size_t total = 0;

	if (c->cl.ssl || shutdown(c->cl.fd, SHUT_WR) < 0)
		return;
	while (total < 1024 * 1024) {
		struct pollfd pfd = {.fd = c->cl.fd, .events = POLLIN};
		double left = end - time_mono_ms();
		ssize_t n;
		if (left <= 0 || poll(&pfd, 1, (int)left + 1) <= 0)
			return;
		n = recv(c->cl.fd, b, sizeof(b), MSG_DONTWAIT);
		if (n <= 0)
			return;
		total += (size_t)n;
	}
}

/* While a body streams, TLS buffers stay allocated (released again when idle, so that a
 * thousand idle tunnels stay small). */
void proxy_bulk_mode(struct conn *c, bool on)
{
	SSL *ssls[2] = {c->cl.ssl, c->up.ssl};

	for (size_t i = 0; i < ELEMENTSOF(ssls); i++) {
		if (!ssls[i])
			continue;
		if (on)
			SSL_clear_mode(ssls[i], SSL_MODE_RELEASE_BUFFERS);
		else
			SSL_set_mode(ssls[i], SSL_MODE_RELEASE_BUFFERS);
	}
}

/*
 * A connection that goes idle (a kept-alive connection or a tunnel waiting for its next request,
 * an opaque tunnel waiting for bytes) gives back what it no longer needs: its TLS buffers, and
 * the pages of its thread's stack below what is in use now (a TLS handshake touches some 40 KiB
 * of stack, which would otherwise stay resident for the life of the thread). A thousand idle
 * tunnels then cost little more than their TLS state.
 */
void proxy_go_idle(struct conn *c)
{
	pthread_attr_t a;
	void *lo;
	size_t size;

	if (c->cl.ssl)
		(void)SSL_free_buffers(c->cl.ssl);
	if (c->up.ssl)
		(void)SSL_free_buffers(c->up.ssl);
	/* Not on the main thread: its "stack" as glibc reports it spans the whole rlimit, and
	 * other mappings may lie in there. */
	if (gettid() == getpid() || pthread_getattr_np(pthread_self(), &a) != 0)
		return;
	if (pthread_attr_getstack(&a, &lo, &size) == 0) {
		/* Everything well below this frame is unused (the stack grows down): 1 KiB is
		 * ample for the madvise() call itself, which is all that runs below it. */
		uintptr_t end = ((uintptr_t)__builtin_frame_address(0) - 1024) & ~(uintptr_t)4095;
		if (end > (uintptr_t)lo && end - (uintptr_t)lo < size)
			(void)madvise(lo, end - (uintptr_t)lo, MADV_DONTNEED);
	}
	(void)pthread_attr_destroy(&a);
}

/*
 * Parses what there is of the request head, answering a refused one. A frame of its own: the
 * error's buffer is not on the stack while proxy_read_request() waits and the connection idles
 * (proxy_go_idle() gives back only the pages below), and it is not zeroed for every piece that comes.
 */
static __attribute__((noinline)) int parse_request(struct conn *c, struct http_reader *rd,
                                                   struct http_head **ret)
{
	struct slate_error err;
	unsigned status = 400;
	int r;

	err.code = 0;
	err.msg[0] = '\0';
	r = http_parse_request(rd, c->cl.in, ret, &status, &err);
	if (r == SLATE_ERR_INVALID_FORMAT)
		proxy_respond(c, status, "slate egress proxy: %s", slate_error_text(&err));
	return r;
}

/* Reads the next request head. Returns 1 with *ret, 0 when the client is done (EOF or idle), or
 * < 0 after answering the error. */
int proxy_read_request(struct conn *c, struct http_head **ret)
{
	struct http_reader rd = {0};
	bool started = buf_len(c->cl.in) > 0;
	double deadline = started ? time_mono_ms() + PROXY_HEAD_TIMEOUT_MS : 0;

	for (;;) {
		int timeout, r = parse_request(c, &rd, ret);
		ssize_t n;

		if (r == 1)
			return 1;
		if (r < 0)
			return r;
		if (started) {
			double left = deadline - time_mono_ms();
			if (left <= 0) {
				proxy_respond(c, 408,
				              "slate egress proxy: the request head took too long");
				return -ETIMEDOUT;
			}
			timeout = (int)left + 1;
		} else {
			/* Nothing for a moment: idle, until the next request comes (waiting here, not
			 * in proxy_io_fill(), whose read buffer would keep four more pages of stack). */
			if (proxy_io_wait(&c->cl, POLLIN, IDLE_AFTER_MS) == -ETIMEDOUT) {
				proxy_go_idle(c);
				if (proxy_io_wait(&c->cl, POLLIN, PROXY_IDLE_TIMEOUT_MS) < 0)
					return 0;
			}
			timeout = PROXY_IDLE_TIMEOUT_MS;
		}
		n = proxy_io_fill(&c->cl, timeout);
		if (n == -ETIMEDOUT && started) {
			proxy_respond(c, 408, "slate egress proxy: the request head took too long");
			return -ETIMEDOUT;
		}
		if (n <= 0)
			return 0;
		if (!started) {
			started = true;
			deadline = time_mono_ms() + PROXY_HEAD_TIMEOUT_MS;
		}
	}
}

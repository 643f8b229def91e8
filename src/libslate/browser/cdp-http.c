/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CDP client's I/O with deadlines and its HTTP/1.1 requests (cdp.h). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "browser/cdp.h"
#include "browser/internal.h"
#include "util/buf.h"
#include "util/time.h"

enum {
	HR_HEAD = 0,
	HR_LENGTH,
	HR_CHUNKED,
	HR_UNTIL_CLOSE,
	HR_DONE,
};

/* Waits until fd is ready for events; -ETIMEDOUT past the deadline. */
static int wait_fd(int fd, short events, int64_t deadline_ms, struct slate_error *err)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int64_t left = deadline_ms - time_mono_ms();
		int r;

		if (left <= 0)
			return slate_error_set(err, -ETIMEDOUT,
			                       "the browser did not answer in time");
		r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return slate_error_errno(err, -errno, "poll");
		if (r > 0)
			return 0;
	}
}

int cdp_io_write(int fd, const void *p, size_t n, int64_t deadline_ms, struct slate_error *err)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		int r;

		if (k > 0) {
			b += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EAGAIN)
			return slate_error_errno(err, -errno, "writing to the browser");
		r = wait_fd(fd, POLLOUT, deadline_ms, err);
		if (r < 0)
			return r;
	}
	return 0;
}

ssize_t cdp_io_read(int fd, void *p, size_t n, int64_t deadline_ms, struct slate_error *err)
{
	for (;;) {
		ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
		int r;

		if (k >= 0)
			return k;
		if (errno == EINTR)
			continue;
		if (errno == ECONNRESET)
			return 0; /* as good as an end of file: the reader decides what it means */
		if (errno != EAGAIN)
			return slate_error_errno(err, -errno, "reading from the browser");
		r = wait_fd(fd, POLLIN, deadline_ms, err);
		if (r < 0)
			return r;
	}
}

int cdp_http_reader_init(struct cdp_http_reader *r, const char *method, bool head_only)
{
	*r = (struct cdp_http_reader){.method = method, .head_only = head_only};
	r->in = buf_new(CDP_HTTP_MAX_HEAD);
	return r->in ? 0 : -ENOMEM;
}

void cdp_http_reader_done(struct cdp_http_reader *r)
{
	buf_free(r->in);
	http_head_free(r->head);
	free(r->body);
	*r = (struct cdp_http_reader){0};
}

unsigned cdp_http_reader_status(const struct cdp_http_reader *r)
{
	return r->head ? r->head->status : 0;
}

const struct http_head *cdp_http_reader_head(const struct cdp_http_reader *r)
{
	return r->head;
}

static int body_append(struct cdp_http_reader *r, const uint8_t *p, size_t n,
                       struct slate_error *err)
{
	if (n > CDP_HTTP_MAX_BODY - r->body_len)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE,
		                       "the browser's response body is over %u bytes",
		                       CDP_HTTP_MAX_BODY);
	if (r->body_len + n + 1 > r->body_cap) {
		size_t cap = r->body_cap ? r->body_cap : 4096;
		char *b;
		while (cap < r->body_len + n + 1)
			cap *= 2;
		b = realloc(r->body, cap);
		if (!b)
			return -ENOMEM;
		r->body = b;
		r->body_cap = cap;
	}
	memcpy(r->body + r->body_len, p, n);
	r->body_len += n;
	r->body[r->body_len] = '\0';
	return 0;
}

/* The head is complete: choose how the body is read. */
static int head_done(struct cdp_http_reader *r, struct slate_error *err)
{
	if (r->head_only) {
		r->state = HR_DONE;
		return 1;
	}
	switch (r->head->framing) {
	case HTTP_BODY_NONE:
		r->state = HR_DONE;
		return 1;
	case HTTP_BODY_LENGTH:
		if (r->head->content_length > CDP_HTTP_MAX_BODY)
			return slate_error_set(err, SLATE_ERR_TOO_LARGE,
			                       "the browser's response body is over %u bytes",
			                       CDP_HTTP_MAX_BODY);
		r->remaining = r->head->content_length;
		r->state = r->remaining ? HR_LENGTH : HR_DONE;
		return r->state == HR_DONE;
	case HTTP_BODY_CHUNKED:
		http_chunked_reset(&r->ck);
		r->state = HR_CHUNKED;
		return 0;
	case HTTP_BODY_UNTIL_CLOSE:
		r->state = HR_UNTIL_CLOSE;
		return 0;
	}
	return slate_error_set(err, SLATE_ERR_INTERNAL, "unknown body framing");
}

int cdp_http_reader_feed(struct cdp_http_reader *r, const uint8_t *p, size_t len,
                         size_t *ret_consumed, struct slate_error *err)
{
	size_t used = 0;
	int k;

	*ret_consumed = 0;
	if (r->state == HR_HEAD) {
		/* Only what fits: a head over CDP_HTTP_MAX_HEAD fails below. Bytes past the head
		 * in the buffer all came from this call's p, so they are given back. */
		size_t room = buf_max(r->in) - buf_len(r->in), take = len < room ? len : room;
		unsigned status;

		if (buf_put(r->in, p, take) < 0)
			return -ENOMEM;
		k = http_parse_response(&r->hr, r->in, r->method, &r->head, &status, err);
		if (k < 0)
			return slate_error_wrap(err, k, "the browser's response");
		if (k == 0) {
			if (buf_len(r->in) == buf_max(r->in))
				return slate_error_set(
				        err, SLATE_ERR_TOO_LARGE,
				        "the browser's response head is over %u bytes",
				        CDP_HTTP_MAX_HEAD);
			*ret_consumed = take;
			return 0;
		}
		used = take - buf_len(r->in);
		(void)buf_reset(r->in);
		k = head_done(r, err);
		if (k != 0) {
			*ret_consumed = used;
			return k;
		}
	}
	while (used < len && r->state != HR_DONE) {
		const uint8_t *d;
		size_t n = len - used, dl;

		switch (r->state) {
		case HR_LENGTH:
			if (n > r->remaining)
				n = (size_t)r->remaining;
			k = body_append(r, p + used, n, err);
			if (k < 0)
				return k;
			used += n;
			r->remaining -= n;
			if (r->remaining == 0)
				r->state = HR_DONE;
			break;
		case HR_UNTIL_CLOSE:
			k = body_append(r, p + used, n, err);
			if (k < 0)
				return k;
			used += n;
			break;
		case HR_CHUNKED:
			k = http_chunked_feed(&r->ck, p + used, n, &n, &d, &dl);
			if (k < 0)
				return slate_error_set(err, k,
				                       "a malformed chunked body from the browser");
			used += n;
			if (dl) {
				int b = body_append(r, d, dl, err);
				if (b < 0)
					return b;
			}
			if (k == 1)
				r->state = HR_DONE;
			break;
		default:
			return slate_error_set(err, SLATE_ERR_INTERNAL, "bad reader state");
		}
	}
	*ret_consumed = used;
	return r->state == HR_DONE;
}

int cdp_http_reader_eof(struct cdp_http_reader *r, struct slate_error *err)
{
	if (r->state == HR_DONE)
		return 1;
	if (r->state == HR_UNTIL_CLOSE) {
		r->state = HR_DONE;
		return 1;
	}
	return slate_error_set(err, SLATE_ERR_MESSAGE_INCOMPLETE,
	                       r->state == HR_HEAD
	                               ? "the browser closed the connection before a response"
	                               : "the browser closed the connection inside a response");
}

static bool path_ok(const char *path)
{
	if (path[0] != '/')
		return false;
	for (const char *q = path; *q; q++)
		if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
			return false;
	return true;
}

/* Builds the request line and the fields every request has, then extra (CRLF-terminated lines). */
static int request_write(int fd, const char *method, const char *path, const char *extra,
                         int64_t deadline_ms, struct slate_error *err)
{
	_cleanup_buf_ struct buf *b = NULL;

	if (!path_ok(path))
		return slate_error_set(err, -EINVAL, "not a request path: %s", path);
	b = buf_new(CDP_HTTP_MAX_HEAD);
	if (!b)
		return -ENOMEM;
	if (buf_putf(b, "%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", method, path, CDP_HOST, extra) < 0)
		return slate_error_set(err, -E2BIG, "request path too long");
	return cdp_io_write(fd, buf_ptr(b), buf_len(b), deadline_ms, err);
}

/* Reads a response into r until it is complete; bytes past its end are refused unless the head
 * was all that was asked for (then they are left in *ret_rest, at most rest_max). */
static int response_read(int fd, struct cdp_http_reader *r, int64_t deadline_ms, uint8_t *rest,
                         size_t rest_max, size_t *ret_rest, struct slate_error *err)
{
	uint8_t b[16384];

	for (;;) {
		ssize_t n = cdp_io_read(fd, b, sizeof(b), deadline_ms, err);
		size_t used;
		int k;

		if (n < 0)
			return (int)n;
		if (n == 0)
			return cdp_http_reader_eof(r, err);
		k = cdp_http_reader_feed(r, b, (size_t)n, &used, err);
		if (k < 0)
			return k;
		if (k == 0)
			continue;
		if (ret_rest) {
			size_t left = (size_t)n - used;
			if (left > rest_max)
				return slate_error_set(err, SLATE_ERR_TOO_LARGE,
				                       "too many bytes after the response head");
			memcpy(rest, b + used, left);
			*ret_rest = left;
		}
		return 1;
	}
}

int cdp_http_request(int fd, const char *method, const char *path, int64_t deadline_ms,
                     unsigned *ret_status, char **ret_body, size_t *ret_len,
                     struct slate_error *err)
{
	struct cdp_http_reader r;
	const char *extra = "Connection: close\r\n";
	int k;

	if (strcmp(method, "GET") != 0)
		extra = "Connection: close\r\nContent-Length: 0\r\n";
	k = request_write(fd, method, path, extra, deadline_ms, err);
	if (k < 0)
		return k;
	k = cdp_http_reader_init(&r, method, false);
	if (k < 0)
		return k;
	k = response_read(fd, &r, deadline_ms, NULL, 0, NULL, err);
	if (k < 0) {
		cdp_http_reader_done(&r);
		return slate_error_wrap(err, k, "%s %s", method, path);
	}
	*ret_status = cdp_http_reader_status(&r);
	if (ret_len)
		*ret_len = r.body_len;
	*ret_body = r.body ? r.body : strdup("");
	r.body = NULL;
	cdp_http_reader_done(&r);
	return *ret_body ? 0 : -ENOMEM;
}

int cdp_http_upgrade(int fd, const char *path, const char *key, int64_t deadline_ms,
                     struct cdp_http_reader *r, uint8_t *rest, size_t rest_max, size_t *ret_rest,
                     struct slate_error *err)
{
	char extra[256];
	int k;

	(void)snprintf(extra, sizeof(extra),
	               "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
	               "Sec-WebSocket-Key: %s\r\n",
	               key);
	k = request_write(fd, "GET", path, extra, deadline_ms, err);
	if (k < 0)
		return k;
	k = cdp_http_reader_init(r, "GET", true);
	if (k < 0)
		return k;
	return response_read(fd, r, deadline_ms, rest, rest_max, ret_rest, err);
}

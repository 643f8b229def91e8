/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The CDP client (browser/cdp.h): the WebSocket frame codec and reader, the HTTP response reader,
 * and requests, upgrades and CDP calls over socketpairs against a fake browser written here,
 * reached through a dial callback as slated reaches the browser VM. tests/unit/cdp-chromium.test
 * runs the same client against a real Chromium.
 */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "browser/cdp.h"
#include "util/error.h"
#include "util/json.h"
#include "util/time.h"

/* ---- frames ---- */

static void test_frame_codec(_unused_ void **state)
{
	static const uint64_t lens[] = {0, 1, 125, 126, 127, 65535, 65536, 1ull << 40};
	static const uint8_t mask[4] = {1, 2, 3, 4};
	uint8_t h[CDP_WS_MAX_HEAD];

	for (size_t i = 0; i < ELEMENTSOF(lens); i++)
		for (int m = 0; m < 2; m++) {
			struct cdp_ws_frame f;
			size_t n = cdp_ws_frame_encode(h, CDP_WS_BINARY, i % 2, m ? mask : NULL,
			                               lens[i]);
			assert_int_equal(n, (lens[i] < 126 ? 2 : lens[i] < 65536 ? 4 : 10) + 4 * m);
			/* Every shorter prefix is incomplete, never an error. */
			for (size_t k = 0; k < n; k++)
				assert_int_equal(cdp_ws_frame_decode(h, k, &f, NULL), 0);
			assert_int_equal(cdp_ws_frame_decode(h, n, &f, NULL), 1);
			assert_int_equal(f.len, lens[i]);
			assert_int_equal(f.head_len, n);
			assert_int_equal(f.opcode, CDP_WS_BINARY);
			assert_int_equal(f.fin, i % 2);
			assert_int_equal(f.masked, m);
			if (m)
				assert_memory_equal(f.mask, mask, 4);
		}
}

static void test_frame_refused(_unused_ void **state)
{
	static const struct {
		const char *what;
		uint8_t b[10];
		size_t n;
	} bad[] = {
	        {"RSV1", {0xc1, 0x00}, 2},
	        {"RSV3", {0x91, 0x00}, 1},
	        {"opcode 3", {0x83, 0x00}, 1},
	        {"opcode 0xb", {0x8b, 0x00}, 2},
	        {"fragmented ping", {0x09, 0x00}, 2},
	        {"control over 125", {0x89, 126, 0, 126}, 4},
	        {"16-bit length under 126", {0x82, 126, 0, 125}, 4},
	        {"64-bit length under 65536", {0x82, 127, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 10},
	        {"64-bit length top bit", {0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}, 10},
	};
	struct cdp_ws_frame f;

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		struct slate_error err = {0};
		int r = cdp_ws_frame_decode(bad[i].b, bad[i].n, &f, &err);
		if (r != SLATE_ERR_INVALID_FORMAT)
			fail_msg("%s: %d", bad[i].what, r);
		assert_true(err.msg[0]);
	}
}

static void test_mask(_unused_ void **state)
{
	static const uint8_t mask[4] = {0xde, 0xad, 0xbe, 0xef};
	uint8_t a[11] = "hello world", b[11];

	memcpy(b, a, sizeof(b));
	cdp_ws_mask(b, 11, mask, 0);
	assert_int_equal(b[0], 'h' ^ 0xde);
	assert_int_equal(b[5], ' ' ^ 0xad);
	/* Unmasking in two pieces at an offset. */
	cdp_ws_mask(b, 3, mask, 0);
	cdp_ws_mask(b + 3, 8, mask, 3);
	assert_memory_equal(a, b, 11);
}

static void test_accept(_unused_ void **state)
{
	char a[29];

	/* RFC 6455 section 1.3. */
	assert_int_equal(cdp_ws_accept_for("dGhlIHNhbXBsZSBub25jZQ==", a), 0);
	assert_string_equal(a, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

/* Appends an unmasked frame to s (at most 4096 bytes in all). */
static size_t put_frame(uint8_t *s, size_t at, uint8_t opcode, bool fin, const void *p, size_t n)
{
	at += cdp_ws_frame_encode(s + at, opcode, fin, NULL, n);
	memcpy(s + at, p, n);
	return at + n;
}

struct events {
	struct cdp_ws_event ev[16];
	size_t n;
	int r;
};

/* Feeds p in pieces of step bytes (0: all at once), collecting events until an error. */
static void feed_all(const uint8_t *p, size_t len, size_t step, uint64_t max, struct events *out)
{
	struct cdp_ws_reader r;
	size_t off = 0;

	cdp_ws_reader_init(&r, max);
	*out = (struct events){0};
	while (off < len) {
		size_t piece = step && step < len - off ? step : len - off, used = 0;
		int k = 0;
		while (piece > 0) {
			k = cdp_ws_reader_feed(&r, p + off, piece, &used, &out->ev[out->n], NULL);
			assert_true(used <= piece);
			off += used;
			piece -= used;
			if (k < 0) {
				out->r = k;
				cdp_ws_reader_done(&r);
				return;
			}
			if (k == 1) {
				assert_true(out->n < ELEMENTSOF(out->ev) - 1);
				out->n++;
			} else
				assert_int_equal(piece, 0);
		}
	}
	cdp_ws_reader_done(&r);
}

static void events_done(struct events *e)
{
	for (size_t i = 0; i < e->n; i++)
		cdp_ws_event_done(&e->ev[i]);
}

static void test_reader_fragments(_unused_ void **state)
{
	static const uint8_t close_payload[] = {0x03, 0xe8, 'b', 'y', 'e'};
	uint8_t s[4096];
	size_t n = 0;

	n = put_frame(s, n, CDP_WS_TEXT, false, "Hel", 3);
	n = put_frame(s, n, CDP_WS_PING, true, "p1", 2);
	n = put_frame(s, n, CDP_WS_CONTINUATION, false, "", 0);
	n = put_frame(s, n, CDP_WS_CONTINUATION, false, "lo, ", 4);
	n = put_frame(s, n, CDP_WS_PONG, true, "", 0);
	n = put_frame(s, n, CDP_WS_CONTINUATION, true, "world", 5);
	n = put_frame(s, n, CDP_WS_BINARY, true, "", 0);
	n = put_frame(s, n, CDP_WS_CLOSE, true, close_payload, sizeof(close_payload));
	n = put_frame(s, n, CDP_WS_CLOSE, true, "", 0);

	for (size_t step = 0; step < 8; step++) {
		struct events e;
		feed_all(s, n, step, 1024, &e);
		assert_int_equal(e.r, 0);
		assert_int_equal(e.n, 6);
		assert_int_equal(e.ev[0].opcode, CDP_WS_PING);
		assert_int_equal(e.ev[0].len, 2);
		assert_memory_equal(e.ev[0].control, "p1", 2);
		assert_int_equal(e.ev[1].opcode, CDP_WS_PONG);
		assert_int_equal(e.ev[2].opcode, CDP_WS_TEXT);
		assert_string_equal(e.ev[2].data, "Hello, world");
		assert_int_equal(e.ev[2].len, 12);
		assert_int_equal(e.ev[3].opcode, CDP_WS_BINARY);
		assert_int_equal(e.ev[3].len, 0);
		assert_non_null(e.ev[3].data);
		assert_int_equal(e.ev[4].opcode, CDP_WS_CLOSE);
		assert_int_equal(e.ev[4].close_code, 1000);
		assert_int_equal(e.ev[5].close_code, 1005);
		events_done(&e);
	}
}

static void test_reader_refused(_unused_ void **state)
{
	static const uint8_t masked[] = {0x81, 0x81, 1, 2, 3, 4, 'x' ^ 1};
	static const uint8_t close1[] = {0x88, 0x01, 0x03};
	static const uint8_t close1005[] = {0x88, 0x02, 0x03, 0xed};
	static const uint8_t big16[] = {0x81, 126, 0x01, 0x00}; /* 256 bytes announced */
	uint8_t s[4096];
	struct events e;
	size_t n;

	n = put_frame(s, 0, CDP_WS_CONTINUATION, true, "x", 1);
	feed_all(s, n, 0, 1024, &e);
	assert_int_equal(e.r, SLATE_ERR_INVALID_FORMAT);

	n = put_frame(s, 0, CDP_WS_TEXT, false, "x", 1);
	n = put_frame(s, n, CDP_WS_TEXT, true, "y", 1);
	feed_all(s, n, 0, 1024, &e);
	assert_int_equal(e.r, SLATE_ERR_INVALID_FORMAT);

	feed_all(masked, sizeof(masked), 0, 1024, &e);
	assert_int_equal(e.r, SLATE_ERR_INVALID_FORMAT);
	feed_all(close1, sizeof(close1), 0, 1024, &e);
	assert_int_equal(e.r, SLATE_ERR_INVALID_FORMAT);
	feed_all(close1005, sizeof(close1005), 0, 1024, &e);
	assert_int_equal(e.r, SLATE_ERR_INVALID_FORMAT);

	/* Over the limit at the frame's head, before any payload. */
	feed_all(big16, sizeof(big16), 0, 255, &e);
	assert_int_equal(e.r, SLATE_ERR_TOO_LARGE);
	feed_all(big16, sizeof(big16), 0, 256, &e);
	assert_int_equal(e.r, 0);
	/* ... and across fragments. */
	n = put_frame(s, 0, CDP_WS_TEXT, false, "abcdef", 6);
	n = put_frame(s, n, CDP_WS_CONTINUATION, true, "ghij", 4);
	feed_all(s, n, 0, 9, &e);
	assert_int_equal(e.r, SLATE_ERR_TOO_LARGE);
	feed_all(s, n, 0, 10, &e);
	assert_int_equal(e.r, 0);
	assert_int_equal(e.n, 1);
	events_done(&e);
}

/* ---- HTTP responses ---- */

struct http_result {
	int r;
	unsigned status;
	char *body;
	size_t body_len, consumed;
};

static struct http_result http_feed(const char *method, bool head_only, const void *p, size_t len,
                                    size_t step, bool eof)
{
	struct http_result res = {0};
	struct cdp_http_reader r;
	size_t off = 0;

	assert_int_equal(cdp_http_reader_init(&r, method, head_only), 0);
	while (off < len) {
		size_t piece = step && step < len - off ? step : len - off, used;
		res.r = cdp_http_reader_feed(&r, (const uint8_t *)p + off, piece, &used, NULL);
		off += used;
		if (res.r != 0)
			break;
		assert_int_equal(used, piece);
	}
	if (res.r == 0 && eof)
		res.r = cdp_http_reader_eof(&r, NULL);
	res.consumed = off;
	if (res.r == 1) {
		res.status = cdp_http_reader_status(&r);
		res.body = r.body ? strdup(r.body) : NULL;
		res.body_len = r.body_len;
	}
	cdp_http_reader_done(&r);
	return res;
}

static void test_http_reader(_unused_ void **state)
{
	static const char cl[] = "HTTP/1.1 200 OK\r\nContent-Length:5\r\nContent-Type:application/"
	                         "json; charset=UTF-8\r\n\r\n[1,2]";
	static const char chunked[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	                              "3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n";
	static const char close_[] = "HTTP/1.0 404 Not Found\r\n\r\nno such page";
	static const char upgrade[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
	                              "Connection: Upgrade\r\n\r\n\x81\x02hi";

	for (size_t step = 0; step < 4; step++) {
		struct http_result r = http_feed("GET", false, cl, strlen(cl), step, false);
		assert_int_equal(r.r, 1);
		assert_int_equal(r.status, 200);
		assert_string_equal(r.body, "[1,2]");
		free(r.body);

		r = http_feed("GET", false, chunked, strlen(chunked), step, false);
		assert_int_equal(r.r, 1);
		assert_string_equal(r.body, "abcde");
		free(r.body);

		r = http_feed("GET", false, close_, strlen(close_), step, false);
		assert_int_equal(r.r, 0);
		r = http_feed("GET", false, close_, strlen(close_), step, true);
		assert_int_equal(r.r, 1);
		assert_int_equal(r.status, 404);
		assert_string_equal(r.body, "no such page");
		free(r.body);

		/* The head only: the frame after it is not consumed. */
		r = http_feed("GET", true, upgrade, strlen(upgrade), step, false);
		assert_int_equal(r.r, 1);
		assert_int_equal(r.status, 101);
		assert_int_equal(r.consumed, strlen(upgrade) - 4);
	}
	/* A body cut short, a head cut short. */
	assert_int_equal(http_feed("GET", false, cl, strlen(cl) - 1, 0, true).r,
	                 SLATE_ERR_MESSAGE_INCOMPLETE);
	assert_int_equal(http_feed("GET", false, cl, 20, 0, true).r, SLATE_ERR_MESSAGE_INCOMPLETE);
	/* HEAD: no body whatever Content-Length says. */
	assert_int_equal(http_feed("HEAD", false, cl, strlen(cl) - 5, 0, false).r, 1);
}

static void test_http_refused(_unused_ void **state)
{
	static const char bare_lf[] = "HTTP/1.1 200 OK\nContent-Length: 0\n\n";
	static const char both[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"
	                           "Transfer-Encoding: chunked\r\n\r\n";
	static const char too_long[] = "HTTP/1.1 200 OK\r\nContent-Length: 1048577\r\n\r\n";
	static const char bad_chunk[] =
	        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
	_cleanup_free_ char *big_head = malloc(CDP_HTTP_MAX_HEAD + 100);
	_cleanup_free_ char *big_body = malloc(CDP_HTTP_MAX_BODY + 100);
	int n;

	assert_int_equal(http_feed("GET", false, bare_lf, strlen(bare_lf), 0, false).r,
	                 SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(http_feed("GET", false, both, strlen(both), 0, false).r,
	                 SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(http_feed("GET", false, bad_chunk, strlen(bad_chunk), 0, false).r,
	                 SLATE_ERR_INVALID_FORMAT);
	/* Refused at the head, before any of the body. */
	assert_int_equal(http_feed("GET", false, too_long, strlen(too_long), 0, false).r,
	                 SLATE_ERR_TOO_LARGE);

	/* A head of CDP_HTTP_MAX_HEAD bytes or more, whole or in pieces. */
	n = snprintf(big_head, 64, "HTTP/1.1 200 OK\r\nX: ");
	memset(big_head + n, 'a', CDP_HTTP_MAX_HEAD);
	memcpy(big_head + n + CDP_HTTP_MAX_HEAD, "\r\n\r\n", 4);
	assert_int_equal(
	        http_feed("GET", false, big_head, (size_t)n + CDP_HTTP_MAX_HEAD + 4, 0, false).r,
	        SLATE_ERR_TOO_LARGE);
	assert_int_equal(
	        http_feed("GET", false, big_head, (size_t)n + CDP_HTTP_MAX_HEAD + 4, 1000, false).r,
	        SLATE_ERR_TOO_LARGE);

	/* A body until close over CDP_HTTP_MAX_BODY. */
	n = snprintf(big_body, 64, "HTTP/1.1 200 OK\r\n\r\n");
	memset(big_body + n, 'b', CDP_HTTP_MAX_BODY + 1);
	assert_int_equal(
	        http_feed("GET", false, big_body, (size_t)n + CDP_HTTP_MAX_BODY + 1, 65536, true).r,
	        SLATE_ERR_TOO_LARGE);
	{
		struct http_result r = http_feed("GET", false, big_body,
		                                 (size_t)n + CDP_HTTP_MAX_BODY, 65536, true);
		assert_int_equal(r.r, 1);
		assert_int_equal(r.body_len, CDP_HTTP_MAX_BODY);
		free(r.body);
	}
}

/* ---- a fake browser behind a dial callback ---- */

#define PEER_T_MS 5000

static struct fake {
	/* What it does. */
	bool no_page;    /* /json/list has no page target */
	bool bad_accept; /* a wrong Sec-WebSocket-Accept */
	bool call_error; /* every CDP call answered with an error */
	bool not_png;    /* a screenshot that is not a PNG */
	bool silent;     /* answers nothing */
	size_t png_len;  /* the screenshot's size */
	/* What it saw. */
	int failed_line; /* a peer check that failed */
	bool saw_put, saw_pong;
	char methods[512];
	uint8_t *png;
	pthread_t threads[8];
	size_t n_threads;
} F;

#define PEER_CHECK(x)                                                                              \
	do {                                                                                       \
		if (!(x)) {                                                                        \
			if (!F.failed_line)                                                        \
				F.failed_line = __LINE__;                                          \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

static bool peer_read(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n > 0) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t k;
		if (poll(&pf, 1, PEER_T_MS) <= 0)
			return false;
		k = read(fd, b, n);
		if (k <= 0)
			return false;
		b += k;
		n -= (size_t)k;
	}
	return true;
}

static bool peer_write(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
		if (k <= 0)
			return false;
		b += k;
		n -= (size_t)k;
	}
	return true;
}

/* Reads a request head, byte by byte, into h (NUL-terminated). */
static bool peer_head(int fd, char *h, size_t max)
{
	size_t n = 0;

	while (n + 1 < max) {
		if (!peer_read(fd, h + n, 1))
			return false;
		n++;
		h[n] = '\0';
		if (n >= 4 && memcmp(h + n - 4, "\r\n\r\n", 4) == 0)
			return true;
	}
	return false;
}

static bool peer_http(int fd, unsigned status, const char *body)
{
	char h[256];
	int n = snprintf(h, sizeof(h), "HTTP/1.1 %u X\r\nContent-Length:%zu\r\n\r\n", status,
	                 strlen(body));

	/* The head and the body in two writes, the body split too. */
	return peer_write(fd, h, (size_t)n) && peer_write(fd, body, strlen(body) / 2) &&
	       peer_write(fd, body + strlen(body) / 2, strlen(body) - strlen(body) / 2);
}

static bool peer_frame(int fd, uint8_t opcode, bool fin, const void *p, size_t n)
{
	uint8_t h[CDP_WS_MAX_HEAD];
	size_t hl = cdp_ws_frame_encode(h, opcode, fin, NULL, n);

	return peer_write(fd, h, hl) && peer_write(fd, p, n);
}

static bool peer_text(int fd, const char *s)
{
	return peer_frame(fd, CDP_WS_TEXT, true, s, strlen(s));
}

/* Reads a client frame (it must be masked), unmasked into *ret (caller frees). */
static bool peer_read_frame(int fd, struct cdp_ws_frame *f, char **ret)
{
	uint8_t h[CDP_WS_MAX_HEAD];
	size_t n = 0;
	char *p;

	for (;;) {
		int k;
		if (!peer_read(fd, h + n, 1))
			return false;
		n++;
		k = cdp_ws_frame_decode(h, n, f, NULL);
		if (k < 0)
			return false;
		if (k == 1)
			break;
	}
	if (!f->masked || f->len > 1u << 20)
		return false;
	p = malloc(f->len + 1);
	if (!p || !peer_read(fd, p, f->len)) {
		free(p);
		return false;
	}
	cdp_ws_mask((uint8_t *)p, f->len, f->mask, 0);
	p[f->len] = '\0';
	*ret = p;
	return true;
}

static void peer_ws(int fd, const char *head)
{
	const char *k = strstr(head, "\r\nSec-WebSocket-Key: ");
	char key[64] = "", accept[29], reply[256];
	int n;

	PEER_CHECK(k && sscanf(k, "\r\nSec-WebSocket-Key: %63[^\r]", key) == 1);
	PEER_CHECK(strlen(key) == 24);
	PEER_CHECK(strstr(head, "\r\nSec-WebSocket-Version: 13\r\n"));
	PEER_CHECK(strstr(head, "\r\nUpgrade: websocket\r\n"));
	PEER_CHECK(cdp_ws_accept_for(key, accept) == 0);
	if (F.bad_accept)
		accept[0] ^= 1;
	n = snprintf(reply, sizeof(reply),
	             "HTTP/1.1 101 WebSocket Protocol Handshake\r\nUpgrade: WebSocket\r\n"
	             "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
	             accept);
	PEER_CHECK(peer_write(fd, reply, (size_t)n));
	if (F.bad_accept)
		goto out; /* the client hangs up */
	/* An event right behind the 101, in the same bytes as far as the client can tell. */
	PEER_CHECK(peer_text(fd, "{\"method\":\"Hello.event\",\"params\":{}}"));
	for (;;) {
		_cleanup_free_ char *msg = NULL, *out = NULL;
		_cleanup_json_ struct json_object *req = NULL, *o = NULL;
		const char *method;
		struct cdp_ws_frame f;
		int64_t id;

		if (!peer_read_frame(fd, &f, &msg))
			goto out;
		if (f.opcode == CDP_WS_CLOSE)
			goto out;
		if (f.opcode == CDP_WS_PONG) {
			F.saw_pong = streq(msg, "are you there");
			continue;
		}
		PEER_CHECK(f.opcode == CDP_WS_TEXT && f.fin);
		PEER_CHECK(json_parse_object(msg, f.len, 1u << 20, &req) == 0);
		PEER_CHECK(json_get_int64(req, "id", &id) == 0 &&
		           json_get_string(req, "method", &method) == 0);
		(void)strncat(F.methods, method, sizeof(F.methods) - strlen(F.methods) - 2);
		(void)strcat(F.methods, " ");
		/* An event, a reply to another id, a ping, then the reply. */
		PEER_CHECK(peer_text(fd, "{\"method\":\"X.y\"}"));
		out = NULL;
		(void)asprintf(&out, "{\"id\":%lld,\"result\":{}}", (long long)id + 100);
		PEER_CHECK(out && peer_frame(fd, CDP_WS_TEXT, true, out, strlen(out)));
		PEER_CHECK(peer_frame(fd, CDP_WS_PING, true, "are you there", 13));
		free(TAKE_PTR(out));
		if (F.call_error)
			(void)asprintf(
			        &out,
			        "{\"id\":%lld,\"error\":{\"code\":-32000,\"message\":\"boom\"}}",
			        (long long)id);
		else if (streq(method, "Page.captureScreenshot")) {
			size_t b64 = sodium_base64_ENCODED_LEN(F.png_len,
			                                       sodium_base64_VARIANT_ORIGINAL);
			_cleanup_free_ char *data = malloc(b64);
			PEER_CHECK(data);
			if (F.not_png)
				F.png[0] = 'x';
			sodium_bin2base64(data, b64, F.png, F.png_len,
			                  sodium_base64_VARIANT_ORIGINAL);
			(void)asprintf(&out, "{\"id\":%lld,\"result\":{\"data\":\"%s\"}}",
			               (long long)id, data);
		} else if (streq(method, "Page.navigate")) {
			/* The load event before the reply. */
			static const char load[] =
			        "{\"method\":\"Page.loadEventFired\",\"params\":{\"timestamp\":1}}";
			PEER_CHECK(peer_text(fd, load));
			(void)asprintf(&out, "{\"id\":%lld,\"result\":{\"frameId\":\"F\"}}",
			               (long long)id);
		} else if (streq(method, "Runtime.evaluate"))
			(void)asprintf(&out,
			               "{\"id\":%lld,\"result\":{\"result\":{\"type\":\"string\","
			               "\"value\":\"A \\\"title\\\"\"}}}",
			               (long long)id);
		else
			(void)asprintf(&out, "{\"id\":%lld,\"result\":{}}", (long long)id);
		PEER_CHECK(out);
		/* The reply in three fragments: 7-, 16- and (when it is that big) 64-bit lengths. */
		{
			size_t len = strlen(out), a = len < 100 ? len / 3 : 100,
			       b = len < 1100 ? (len - a) / 2 : 1000;
			PEER_CHECK(peer_frame(fd, CDP_WS_TEXT, false, out, a));
			PEER_CHECK(peer_frame(fd, CDP_WS_CONTINUATION, false, out + a, b));
			PEER_CHECK(peer_frame(fd, CDP_WS_CONTINUATION, true, out + a + b,
			                      len - a - b));
		}
	}
out:;
}

static void *peer_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char head[4096];

	if (F.silent) {
		char c;
		(void)peer_read(fd, &c, 1);
		(void)peer_read(fd, head, sizeof(head)); /* until the client gives up */
		goto out;
	}
	if (!peer_head(fd, head, sizeof(head)))
		goto out; /* the client sent no request: not the peer's failure */
	PEER_CHECK(strstr(head, "\r\nHost: 127.0.0.1:9222\r\n"));
	if (strncmp(head, "GET /json/version HTTP/1.1\r\n", 28) == 0) {
		PEER_CHECK(strstr(head, "\r\nConnection: close\r\n"));
		PEER_CHECK(peer_http(fd, 200, "{\"Browser\":\"HeadlessChrome/1.0\"}"));
	} else if (strncmp(head, "GET /json/list HTTP/1.1\r\n", 25) == 0) {
		PEER_CHECK(peer_http(
		        fd, 200,
		        F.no_page ? "[{\"type\":\"service_worker\",\"webSocketDebuggerUrl\":"
		                    "\"ws://127.0.0.1:9222/devtools/page/SW\"}]"
		                  : "[{\"type\":\"iframe\"},{\"type\":\"page\","
		                    "\"webSocketDebuggerUrl\":"
		                    "\"ws://127.0.0.1:9222/devtools/page/P1\"}]"));
	} else if (strncmp(head, "PUT /json/new?about:blank HTTP/1.1\r\n", 36) == 0) {
		F.saw_put = true;
		PEER_CHECK(strstr(head, "\r\nContent-Length: 0\r\n"));
		PEER_CHECK(peer_http(fd, 200,
		                     "{\"type\":\"page\",\"webSocketDebuggerUrl\":"
		                     "\"ws://127.0.0.1:9222/devtools/page/NEW\"}"));
	} else if (strncmp(head, "GET /devtools/page/", 19) == 0) {
		PEER_CHECK(strncmp(head + 19, F.no_page ? "NEW " : "P1 ", F.no_page ? 4 : 3) == 0);
		peer_ws(fd, head);
	} else
		PEER_CHECK(peer_http(fd, 404, "no"));
out:
	close(fd);
	return NULL;
}

static int fake_dial(void *ud, int *ret_fd, struct slate_error *err)
{
	int sv[2];

	(void)ud;
	if (F.n_threads == ELEMENTSOF(F.threads))
		return slate_error_set(err, -EMFILE, "too many dials");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	if (pthread_create(&F.threads[F.n_threads], NULL, peer_main, (void *)(intptr_t)sv[1]) !=
	    0) {
		close(sv[0]);
		close(sv[1]);
		return -EAGAIN;
	}
	F.n_threads++;
	*ret_fd = sv[0];
	return 0;
}

static int setup(void **state)
{
	(void)state;
	F = (struct fake){.png_len = 200000};
	F.png = malloc(F.png_len);
	if (!F.png)
		return -1;
	randombytes_buf(F.png, F.png_len);
	memcpy(F.png, "\x89PNG\r\n\x1a\n", 8);
	return 0;
}

/* Joins the peers and checks they saw nothing wrong. */
static int teardown(void **state)
{
	(void)state;
	for (size_t i = 0; i < F.n_threads; i++)
		pthread_join(F.threads[i], NULL);
	free(F.png);
	if (F.failed_line)
		fprintf(stderr, "the fake browser's check at line %d failed\n", F.failed_line);
	return F.failed_line ? -1 : 0;
}

static void test_version(void **state)
{
	_cleanup_json_ struct json_object *v = NULL;
	struct slate_error err = {0};
	const char *b;

	(void)state;
	assert_int_equal(cdp_version(fake_dial, NULL, &v, 5000, &err), 0);
	assert_int_equal(json_get_string(v, "Browser", &b), 0);
	assert_string_equal(b, "HeadlessChrome/1.0");
}

static void test_screenshot(void **state)
{
	_cleanup_free_ uint8_t *png = NULL;
	struct slate_error err = {0};
	size_t len = 0;

	(void)state;
	if (cdp_screenshot(fake_dial, NULL, &png, &len, 5000, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(len, F.png_len);
	assert_memory_equal(png, F.png, len);
	assert_false(F.saw_put);
	/* The ping came between the fragments of a call's replies. */
	for (size_t i = 0; i < F.n_threads; i++)
		pthread_join(F.threads[i], NULL);
	F.n_threads = 0;
	assert_true(F.saw_pong);
	assert_string_equal(F.methods, "Page.captureScreenshot ");
}

static void test_screenshot_new_page(void **state)
{
	_cleanup_free_ uint8_t *png = NULL;
	struct slate_error err = {0};
	size_t len = 0;

	(void)state;
	F.no_page = true;
	F.png_len = 100;
	if (cdp_screenshot(fake_dial, NULL, &png, &len, 5000, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(len, 100);
	assert_true(F.saw_put);
}

static void test_screenshot_not_png(void **state)
{
	_cleanup_free_ uint8_t *png = NULL;
	struct slate_error err = {0};
	size_t len = 0;

	(void)state;
	F.not_png = true;
	assert_int_equal(cdp_screenshot(fake_dial, NULL, &png, &len, 5000, &err), -EPROTO);
	assert_non_null(strstr(err.msg, "not a PNG"));
	assert_null(png);
}

static void test_call_error(void **state)
{
	_cleanup_free_ uint8_t *png = NULL;
	struct slate_error err = {0};
	size_t len = 0;

	(void)state;
	F.call_error = true;
	assert_int_equal(cdp_screenshot(fake_dial, NULL, &png, &len, 5000, &err), -EREMOTEIO);
	assert_non_null(strstr(err.msg, "Page.captureScreenshot: the browser says: boom (-32000)"));
}

static void test_bad_accept(void **state)
{
	_cleanup_free_ uint8_t *png = NULL;
	struct slate_error err = {0};
	size_t len = 0;

	(void)state;
	F.bad_accept = true;
	assert_int_equal(cdp_screenshot(fake_dial, NULL, &png, &len, 5000, &err), -EPROTO);
	assert_non_null(strstr(err.msg, "Sec-WebSocket-Accept"));
}

static void test_navigate(void **state)
{
	_cleanup_free_ char *title = NULL;
	struct slate_error err = {0};

	(void)state;
	if (cdp_navigate(fake_dial, NULL, "http://x/\"", &title, 5000, &err) < 0)
		fail_msg("%s", err.msg);
	assert_string_equal(title, "A \"title\"");
	for (size_t i = 0; i < F.n_threads; i++)
		pthread_join(F.threads[i], NULL);
	F.n_threads = 0;
	assert_string_equal(F.methods, "Page.enable Page.navigate Runtime.evaluate ");
}

static void test_timeout(void **state)
{
	_cleanup_json_ struct json_object *v = NULL;
	struct slate_error err = {0};
	int64_t t0 = time_mono_ms(), dt;

	(void)state;
	F.silent = true;
	assert_int_equal(cdp_version(fake_dial, NULL, &v, 300, &err), -ETIMEDOUT);
	dt = time_mono_ms() - t0;
	assert_true(dt >= 290 && dt < 3000);
	assert_non_null(strstr(err.msg, "did not answer in time"));
}

/* cdp_call on a connection of its own: params refused before anything is sent. */
static void test_call_params(void **state)
{
	_cleanup_(cdp_conn_freep) struct cdp_conn *c = NULL;
	_cleanup_json_ struct json_object *r = NULL;
	struct slate_error err = {0};
	int fd;

	(void)state;
	assert_int_equal(fake_dial(NULL, &fd, NULL), 0);
	assert_int_equal(cdp_conn_open(fd, "/devtools/page/P1", 5000, &c, &err), 0);
	assert_int_equal(cdp_call(c, "A.b", "[1]", &r, 5000, &err), -EINVAL);
	assert_int_equal(cdp_call(c, "A.b", "{\"x\":", &r, 5000, &err), -EINVAL);
	assert_int_equal(cdp_call(c, "A.b", "{\"x\":1}", &r, 5000, &err), 0);
	assert_true(json_object_is_type(r, json_type_object));
	assert_int_equal(cdp_wait_event(c, NULL, 100, &err), -EINVAL);
	/* A bad path is refused before it is sent. */
	assert_int_equal(fake_dial(NULL, &fd, NULL), 0);
	{
		unsigned st;
		_cleanup_free_ char *body = NULL;
		assert_int_equal(cdp_http_request(fd, "GET", "/a b", time_mono_ms() + 100, &st,
		                                  &body, NULL, &err),
		                 -EINVAL);
		assert_int_equal(cdp_http_request(fd, "GET", "/a\r\nX: y", time_mono_ms() + 100,
		                                  &st, &body, NULL, &err),
		                 -EINVAL);
		close(fd);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_frame_codec),
	        cmocka_unit_test(test_frame_refused),
	        cmocka_unit_test(test_mask),
	        cmocka_unit_test(test_accept),
	        cmocka_unit_test(test_reader_fragments),
	        cmocka_unit_test(test_reader_refused),
	        cmocka_unit_test(test_http_reader),
	        cmocka_unit_test(test_http_refused),
	        cmocka_unit_test_setup_teardown(test_version, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_screenshot, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_screenshot_new_page, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_screenshot_not_png, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_call_error, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_bad_accept, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_navigate, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_call_params, setup, teardown),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The egress proxy's strict HTTP/1.1 parser (proxy/http.c): heads, framing, chunked bodies. */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/http.h"
#include "util/buf.h"
#include "util/error.h"

#define S(x) x, sizeof(x) - 1

/* The refused cases name only the status they want. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static const struct req_case {
	const char *name;
	const char *data;
	size_t len;
	unsigned status; /* 0: parses */
	enum http_framing framing;
	uint64_t content_length;
	bool keep_alive;
	const char *reason; /* refused: a word the reason must hold (the check that caught it) */
} req_cases[] = {
        {"simple GET", S("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"), 0, HTTP_BODY_NONE,
         0, true},
        {"origin form", S("GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n"), 0,
         HTTP_BODY_NONE, 0, true},
        {"CONNECT", S("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n"), 0, HTTP_BODY_NONE,
         0, true},
        {"content length", S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"), 0,
         HTTP_BODY_LENGTH, 5, true},
        {"content length 0", S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"), 0,
         HTTP_BODY_NONE, 0, true},
        {"same content length twice",
         S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"), 0,
         HTTP_BODY_LENGTH, 5, true},
        {"chunked", S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"), 0,
         HTTP_BODY_CHUNKED, 0, true},
        {"chunked, any case, OWS",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  ChUnKeD \r\n\r\n"), 0,
         HTTP_BODY_CHUNKED, 0, true},
        {"connection close", S("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"), 0,
         HTTP_BODY_NONE, 0, false},
        {"HTTP/1.0", S("GET / HTTP/1.0\r\n\r\n"), 0, HTTP_BODY_NONE, 0, false},
        {"HTTP/1.0 keep-alive", S("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 0,
         HTTP_BODY_NONE, 0, true},
        {"leading empty line", S("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 0, HTTP_BODY_NONE, 0,
         true},
        {"obs-text in a value", S("GET / HTTP/1.1\r\nHost: a\r\nX: \xe9t\xe9\r\n\r\n"), 0,
         HTTP_BODY_NONE, 0, true},
        {"empty value", S("GET / HTTP/1.1\r\nHost: a\r\nX:\r\n\r\n"), 0, HTTP_BODY_NONE, 0, true},

        /* Smuggling and its kin. */
        {"CL and TE",
         S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: "
           "chunked\r\n\r\n"),
         400},
        {"TE then CL",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
           "Content-Length: 5\r\n\r\n"),
         400},
        {"chunked not last",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, x\r\n\r\n"), 400},
        {"chunked not last, two fields",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
           "gzip\r\n\r\n"),
         400},
        {"chunked trailing comma",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked,\r\n\r\n"), 400},
        {"chunked leading comma",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,chunked\r\n\r\n"), 400},
        {"chunked twice",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, "
           "chunked\r\n\r\n"),
         400},
        {"chunked with parameter",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n"), 400},
        {"identity", S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n"), 400},
        {"gzip then chunked",
         S("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, "
           "chunked\r\n\r\n"),
         501},
        {"TE in HTTP/1.0", S("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400},
        {"differing CL",
         S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: "
           "6\r\n\r\n"),
         400},
        {"CL list differing", S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n"), 400},
        {"CL plus sign", S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n"), 400},
        {"CL negative", S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"), 400},
        {"CL hex", S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n"), 400},
        {"CL empty", S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n"), 400},
        {"CL huge", S("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n"),
         400},
        {"obs-fold", S("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n"), 400,
         .reason = "obs-fold"},
        {"obs-fold tab", S("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n\tb\r\n\r\n"), 400},
        {"bare CR in value", S("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n"), 400,
         .reason = "bare CR"},
        {"bare CR at line end", S("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\r\n\r\n"), 400},
        {"bare LF", S("GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n"), 400, .reason = "bare LF"},
        {"bare LF ending", S("GET / HTTP/1.1\nHost: a\n\n"), 400},
        {"NUL in value", S("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"), 400, .reason = "NUL"},
        {"NUL in target", S("GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
        {"control in value", S("GET / HTTP/1.1\r\nHost: a\r\nX: a\x01\r\n\r\n"), 400},
        {"DEL in value", S("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n"), 400},
        {"space before colon", S("GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n"), 400,
         .reason = "whitespace between"},
        {"no colon", S("GET / HTTP/1.1\r\nHost: a\r\nX\r\n\r\n"), 400},
        {"empty name", S("GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n"), 400},
        {"bad name char", S("GET / HTTP/1.1\r\nHost: a\r\nX(y): x\r\n\r\n"), 400},
        {"no host", S("GET / HTTP/1.1\r\n\r\n"), 400},
        {"two hosts", S("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400},
        {"double space", S("GET  / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
        {"tab separator", S("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
        {"no version", S("GET /\r\nHost: a\r\n\r\n"), 400},
        {"space in target", S("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
        {"lowercase version", S("GET / http/1.1\r\nHost: a\r\n\r\n"), 400},
        {"HTTP/2.0", S("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505},
        {"HTTP/1.2", S("GET / HTTP/1.2\r\nHost: a\r\n\r\n"), 505},
        {"bad method", S("G@T / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
        {"expect other", S("PUT / HTTP/1.1\r\nHost: a\r\nExpect: nothing\r\n\r\n"), 417},
        {"too many empty lines", S("\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 400},
};

/* Why a head was refused: the status to answer with and the reason. */
struct refusal {
	unsigned status;
	struct slate_error e;
};

static int parse_all(const char *data, size_t len, size_t step, struct http_head **ret,
                     struct refusal *err)
{
	struct buf *b = buf_new(HTTP_MAX_HEAD * 2);
	struct http_reader rd = {0};
	size_t off = 0;
	int r = 0;

	assert_non_null(b);
	while (off < len) {
		size_t n = step && step < len - off ? step : len - off;
		assert_int_equal(buf_put(b, data + off, n), 0);
		off += n;
		r = http_parse_request(&rd, b, ret, &err->status, &err->e);
		if (r != 0)
			break;
	}
	if (r == 1)
		/* The head was consumed; the body (if any) is left. */
		assert_int_equal(buf_len(b), off - (*ret)->head_len);
	buf_free(b);
	return r;
}

static void test_requests(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(req_cases) / sizeof(req_cases[0]); i++) {
		const struct req_case *c = &req_cases[i];
		/* Whole, and one byte at a time: the same verdict. */
		for (size_t step = 0; step <= 1; step++) {
			struct http_head *h = NULL;
			struct refusal err = {0};
			int r = parse_all(c->data, c->len, step, &h, &err);
			if (c->status) {
				if (r != SLATE_ERR_INVALID_FORMAT || err.status != c->status)
					fail_msg("%s (step %zu): r=%d status=%u, want %u", c->name,
					         step, r, err.status, c->status);
				if (c->reason && !strstr(slate_error_text(&err.e), c->reason))
					fail_msg("%s: refused for '%s', not by the %s check",
					         c->name, slate_error_text(&err.e), c->reason);
				assert_null(h);
			} else {
				if (r != 1)
					fail_msg("%s (step %zu): r=%d status=%u (%s)", c->name,
					         step, r, err.status, slate_error_text(&err.e));
				assert_int_equal(h->framing, c->framing);
				assert_int_equal(h->content_length, c->content_length);
				assert_int_equal(h->keep_alive, c->keep_alive);
				http_head_free(h);
			}
		}
	}
}

static void test_fields(void **state)
{
	struct http_head *h = NULL;
	struct refusal err;
	size_t n;
	(void)state;

	assert_int_equal(
	        parse_all(S("GET /p HTTP/1.1\r\nHost:  a.test  \r\nX-A: 1\r\nx-a:\t2 \r\n\r\n"), 0,
	                  &h, &err),
	        1);
	assert_string_equal(h->method, "GET");
	assert_string_equal(h->target, "/p");
	assert_string_equal(h->host, "a.test");
	assert_int_equal(h->n_fields, 3);
	assert_string_equal(http_head_get(h, "X-A", &n), "1");
	assert_int_equal(n, 2);
	assert_string_equal(h->fields[2].value, "2");
	http_head_free(h);

	assert_int_equal(parse_all(S("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, "
	                             "Upgrade\r\nUpgrade: websocket\r\n\r\n"),
	                           0, &h, &err),
	                 1);
	assert_true(h->upgrade);
	assert_true(http_list_has(http_head_get(h, "upgrade", NULL), "WebSocket"));
	http_head_free(h);

	assert_int_equal(parse_all(S("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\n"
	                             "Content-Length: 1\r\n\r\n"),
	                           0, &h, &err),
	                 1);
	assert_true(h->expect_continue);
	http_head_free(h);
}

static void test_limits(void **state)
{
	size_t big = HTTP_MAX_HEAD + 100;
	char *p = malloc(big);
	struct http_head *h = NULL;
	struct refusal err = {0};
	int n;
	(void)state;

	assert_non_null(p);
	/* A request line of exactly the maximum parses; one byte more is 414. */
	for (int extra = 0; extra <= 1; extra++) {
		size_t line = HTTP_MAX_REQUEST_LINE + (size_t)extra;
		memcpy(p, "GET /", 5);
		memset(p + 5, 'a', line - 5 - 9);
		memcpy(p + line - 9, " HTTP/1.1", 9);
		n = snprintf(p + line, big - line, "\r\nHost: a\r\n\r\n");
		err.status = 0;
		h = NULL;
		assert_int_equal(parse_all(p, line + (size_t)n, 0, &h, &err),
		                 extra ? SLATE_ERR_INVALID_FORMAT : 1);
		if (extra)
			assert_int_equal(err.status, 414);
		http_head_free(h);
	}
	/* An endless request line is refused before it ends. */
	memset(p, 'a', HTTP_MAX_REQUEST_LINE + 10);
	assert_int_equal(parse_all(p, HTTP_MAX_REQUEST_LINE + 10, 1000, &h, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(err.status, 414);
	/* Heads over the maximum: 431, also while they are still arriving. */
	n = snprintf(p, big, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
	memset(p + n, 'b', big - (size_t)n);
	assert_int_equal(parse_all(p, big, 4096, &h, &err), SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(err.status, 431);
	/* Too many fields: 431. */
	{
		size_t o = (size_t)snprintf(p, big, "GET / HTTP/1.1\r\nHost: a\r\n");
		for (unsigned i = 0; i < HTTP_MAX_FIELDS + 1; i++)
			o += (size_t)snprintf(p + o, big - o, "X%u: y\r\n", i);
		o += (size_t)snprintf(p + o, big - o, "\r\n");
		assert_int_equal(parse_all(p, o, 0, &h, &err), SLATE_ERR_INVALID_FORMAT);
		assert_int_equal(err.status, 431);
	}
	free(p);
}

static const struct resp_case {
	const char *name;
	const char *data;
	size_t len;
	const char *method;
	int r;
	enum http_framing framing;
	uint64_t cl;
	unsigned status;
} resp_cases[] = {
        {"200 CL", S("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"), "GET", 1, HTTP_BODY_LENGTH, 3,
         200},
        {"200 chunked", S("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"), "GET", 1,
         HTTP_BODY_CHUNKED, 0, 200},
        {"200 until close", S("HTTP/1.0 200 OK\r\n\r\n"), "GET", 1, HTTP_BODY_UNTIL_CLOSE, 0, 200},
        {"gzip coded: until close", S("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"), "GET",
         1, HTTP_BODY_UNTIL_CLOSE, 0, 200},
        {"204", S("HTTP/1.1 204 No Content\r\n\r\n"), "GET", 1, HTTP_BODY_NONE, 0, 204},
        {"304 with CL", S("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"), "GET", 1,
         HTTP_BODY_NONE, 0, 304},
        {"HEAD", S("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"), "HEAD", 1, HTTP_BODY_NONE, 0,
         200},
        {"100", S("HTTP/1.1 100 Continue\r\n\r\n"), "PUT", 1, HTTP_BODY_NONE, 0, 100},
        {"no reason", S("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n"), "GET", 1, HTTP_BODY_LENGTH, 0,
         200},
        {"CL and TE",
         S("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), "GET",
         SLATE_ERR_INVALID_FORMAT, 0, 0, 502},
        {"bad status", S("HTTP/1.1 20 OK\r\n\r\n"), "GET", SLATE_ERR_INVALID_FORMAT, 0, 0, 502},
        {"HTTP/2", S("HTTP/2 200 OK\r\n\r\n"), "GET", SLATE_ERR_INVALID_FORMAT, 0, 0, 502},
        {"bare LF", S("HTTP/1.1 200 OK\nContent-Length: 0\n\n"), "GET", SLATE_ERR_INVALID_FORMAT, 0,
         0, 502},
};

static void test_responses(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(resp_cases) / sizeof(resp_cases[0]); i++) {
		const struct resp_case *c = &resp_cases[i];
		struct buf *b = buf_from(c->data, c->len);
		struct buf *w = buf_new(HTTP_MAX_HEAD);
		struct http_reader rd = {0};
		struct refusal err = {0};
		struct http_head *h = NULL;
		int r;

		assert_non_null(b);
		assert_non_null(w);
		assert_int_equal(buf_put(w, buf_ptr(b), buf_len(b)), 0);
		r = http_parse_response(&rd, w, c->method, &h, &err.status, &err.e);
		if (r != c->r)
			fail_msg("%s: r=%d, want %d (%s)", c->name, r, c->r,
			         slate_error_text(&err.e));
		if (r == 1) {
			assert_int_equal(h->status, c->status);
			assert_int_equal(h->framing, c->framing);
			assert_int_equal(h->content_length, c->cl);
		} else
			assert_int_equal(err.status, c->status);
		http_head_free(h);
		buf_free(b);
		buf_free(w);
	}
}

/* Decodes all of p in pieces of step bytes (0: at once). Returns the verdict. */
static int dechunk(const char *p, size_t len, size_t step, char *out, size_t *out_len,
                   size_t *ret_used)
{
	struct http_chunked c = {0};
	size_t off = 0, o = 0;
	int r = 0;

	while (off < len && r == 0) {
		size_t piece = step && step < len - off ? step : len - off;
		while (piece > 0 && r == 0) {
			const uint8_t *d;
			size_t dl, used;
			r = http_chunked_feed(&c, (const uint8_t *)p + off, piece, &used, &d, &dl);
			if (r < 0)
				return r;
			if (dl > 0)
				memcpy(out + o, d, dl);
			o += dl;
			off += used;
			piece -= used;
		}
	}
	*out_len = o;
	*ret_used = off;
	return r;
}

static const struct chunk_case {
	const char *name;
	const char *data;
	size_t len;
	int r;
	const char *body;
} chunk_cases[] = {
        {"two chunks", S("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"), 1, "hello world"},
        {"hex digits", S("A\r\n0123456789\r\n0\r\n\r\n"), 1, "0123456789"},
        {"extension", S("5;name=\"v\"\r\nhello\r\n0;x\r\n\r\n"), 1, "hello"},
        {"trailers", S("5\r\nhello\r\n0\r\nX-T: 1\r\nY: 2\r\n\r\n"), 1, "hello"},
        {"leading zeros", S("0005\r\nhello\r\n0\r\n\r\n"), 1, "hello"},
        {"incomplete", S("5\r\nhel"), 0, "hel"},
        {"bad digit", S("5x\r\nhello\r\n0\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"no size", S("\r\nhello\r\n0\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"negative", S("-5\r\nhello\r\n0\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"bare LF after size", S("5\nhello\r\n0\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"data too long", S("3\r\nhello\r\n0\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"missing CRLF after data", S("5\r\nhello0\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"huge size", S("1000000000000000\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"trailer obs-fold", S("0\r\nX: 1\r\n 2\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"trailer NUL", S("0\r\nX: \0\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
        {"ext with CR", S("5;a\rb\r\nhello\r\n0\r\n\r\n"), SLATE_ERR_INVALID_FORMAT, NULL},
};

static void test_chunked(void **state)
{
	char out[256];
	(void)state;

	for (size_t i = 0; i < sizeof(chunk_cases) / sizeof(chunk_cases[0]); i++) {
		const struct chunk_case *c = &chunk_cases[i];
		for (size_t step = 0; step <= 3; step++) {
			size_t n = 0, used = 0;
			int r = dechunk(c->data, c->len, step, out, &n, &used);
			if (r != c->r)
				fail_msg("%s (step %zu): r=%d, want %d", c->name, step, r, c->r);
			if (c->body) {
				assert_int_equal(n, strlen(c->body));
				assert_memory_equal(out, c->body, n);
			}
			if (r == 1)
				assert_int_equal(used, c->len);
		}
	}
	/* What follows the body is left for the next message. */
	{
		size_t n, used;
		assert_int_equal(dechunk(S("1\r\na\r\n0\r\n\r\nGET /"), 0, out, &n, &used), 1);
		assert_int_equal(used, 11);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_requests), cmocka_unit_test(test_fields),
	        cmocka_unit_test(test_limits),   cmocka_unit_test(test_responses),
	        cmocka_unit_test(test_chunked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

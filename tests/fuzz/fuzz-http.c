/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the egress proxy's HTTP/1.1 parser (proxy/http.c): request and response
 * heads and chunked bodies from hostile bytes. The first byte chooses what the rest is and how it
 * arrives. Besides not crashing, the target checks what the proxy relies on:
 *   - a head parsed whole and the same head fed in pieces (the split sizes come from the input)
 *     give the same verdict, the same status and the same head length: the incremental scan
 *     never decides differently from a full one;
 *   - a parsed head's field names are tokens and no name or value holds CR, LF or NUL, so
 *     nothing the proxy forwards can split a line;
 *   - a chunked body decoded whole and in pieces yields the same data and the same verdict.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/http.h"
#include "util/buf.h"
#include "util/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct verdict {
	int r;
	unsigned status;
	size_t head_len, n_fields;
	int framing;
	uint64_t content_length;
};

static void check_head(const struct http_head *h)
{
	for (size_t i = 0; i < h->n_fields; i++) {
		const char *n = h->fields[i].name, *v = h->fields[i].value;
		if (!*n)
			abort();
		for (; *n; n++)
			if (!http_is_tchar((unsigned char)*n))
				abort();
		if (strpbrk(v, "\r\n"))
			abort();
	}
	if (!h->response && (strpbrk(h->target, "\r\n ") || strpbrk(h->method, "\r\n ")))
		abort();
}

/* Feeds p in pieces whose sizes come from sizes (cycled); with n_sizes 0, all at once. */
static struct verdict parse(bool response, const uint8_t *p, size_t len, const uint8_t *sizes,
                            size_t n_sizes)
{
	struct verdict v = {0};
	struct http_reader rd = {0};
	unsigned status = 0;
	struct http_head *h = NULL;
	struct buf *b = buf_new(HTTP_MAX_HEAD * 2);
	size_t off = 0, k = 0;

	if (!b)
		abort();
	for (;;) {
		size_t piece = len - off;
		if (n_sizes) {
			size_t want = (size_t)sizes[k++ % n_sizes] + 1;
			if (want < piece)
				piece = want;
		}
		if (buf_put(b, p + off, piece) < 0)
			break;
		off += piece;
		v.r = response ? http_parse_response(&rd, b, "GET", &h, &status, NULL)
		               : http_parse_request(&rd, b, &h, &status, NULL);
		if (v.r != 0 || off == len)
			break;
	}
	if (v.r == 1) {
		check_head(h);
		v.head_len = h->head_len;
		v.n_fields = h->n_fields;
		v.framing = (int)h->framing;
		v.content_length = h->content_length;
	} else if (v.r < 0)
		v.status = status;
	http_head_free(h);
	buf_free(b);
	return v;
}

static void heads(bool response, const uint8_t *data, size_t size)
{
	/* The first byte: how many split sizes follow. */
	size_t n_sizes = size ? data[0] % 16 : 0;
	struct verdict whole, pieces;

	if (size < 1 + n_sizes)
		return;
	whole = parse(response, data + 1 + n_sizes, size - 1 - n_sizes, NULL, 0);
	pieces = parse(response, data + 1 + n_sizes, size - 1 - n_sizes, data + 1, n_sizes);
	if (whole.r != pieces.r || whole.status != pieces.status ||
	    whole.head_len != pieces.head_len || whole.n_fields != pieces.n_fields ||
	    whole.framing != pieces.framing || whole.content_length != pieces.content_length)
		abort();
}

/* Decodes p as a chunked body in pieces of the given sizes; the data goes to out. */
static int dechunk(const uint8_t *p, size_t len, const uint8_t *sizes, size_t n_sizes,
                   struct buf *out, size_t *ret_used)
{
	struct http_chunked c = {0};
	size_t off = 0, k = 0;
	int r = 0;

	while (off < len && r == 0) {
		size_t piece = len - off, used = 0;
		if (n_sizes) {
			size_t want = (size_t)sizes[k++ % n_sizes] + 1;
			if (want < piece)
				piece = want;
		}
		/* Like the proxy: call again until the piece is used up. */
		while (piece > 0 && r == 0) {
			const uint8_t *d;
			size_t dl;
			r = http_chunked_feed(&c, p + off, piece, &used, &d, &dl);
			if (r < 0)
				break;
			if (used > piece || (dl && (d < p + off || d + dl > p + off + used)))
				abort();
			if (dl && buf_put(out, d, dl) < 0)
				abort();
			off += used;
			piece -= used;
		}
	}
	*ret_used = off;
	return r;
}

static void chunked(const uint8_t *data, size_t size)
{
	size_t n_sizes = size ? data[0] % 16 : 0, u1 = 0, u2 = 0;
	struct buf *a = buf_new(1u << 20), *b = buf_new(1u << 20);
	int r1, r2;

	if (!a || !b)
		abort();
	if (size >= 1 + n_sizes) {
		const uint8_t *p = data + 1 + n_sizes;
		size_t len = size - 1 - n_sizes;
		r1 = dechunk(p, len, NULL, 0, a, &u1);
		r2 = dechunk(p, len, data + 1, n_sizes, b, &u2);
		if (r1 != r2 || buf_len(a) != buf_len(b) ||
		    memcmp(buf_ptr(a), buf_ptr(b), buf_len(a)) != 0)
			abort();
		if (r1 == 1 && u1 != u2)
			abort();
	}
	buf_free(a);
	buf_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		heads(false, data + 1, size - 1);
		break;
	case 1:
		heads(true, data + 1, size - 1);
		break;
	default:
		chunked(data + 1, size - 1);
		break;
	}
	return 0;
}

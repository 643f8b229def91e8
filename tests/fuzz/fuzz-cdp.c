/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the CDP client's readers (browser/cdp.h): WebSocket frames from a hostile
 * browser VM (cdp_ws_reader_feed) and HTTP/1.1 responses (cdp_http_reader_feed, on the egress
 * proxy's head parser). The first byte chooses the reader and its settings, the second how many
 * split sizes follow; the rest is the stream. Besides not crashing, the target checks:
 *   - the stream fed whole and fed in pieces (the split sizes come from the input) gives the
 *     same events, the same verdict and, for HTTP, the same status, body and bytes consumed:
 *     where a read ends never changes what the client decides;
 *   - a reader never consumes more than it was given, and a message is never over its limit;
 *   - control frames' payloads are at most 125 bytes, messages are NUL-terminated.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "browser/cdp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a run saw, folded so that two runs compare by value. */
struct trace {
	int r;
	size_t n_events, consumed;
	uint64_t hash;
	unsigned status;
	size_t body_len;
};

static uint64_t fold(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* The length of the next piece: from the split sizes (cycled), or all that is left. */
static size_t piece_len(size_t left, const uint8_t *sizes, size_t n_sizes, size_t *k)
{
	size_t want;

	if (!n_sizes)
		return left;
	want = (size_t)sizes[(*k)++ % n_sizes] + 1;
	return want < left ? want : left;
}

static struct trace ws_run(const uint8_t *p, size_t len, uint64_t max, const uint8_t *sizes,
                           size_t n_sizes)
{
	struct trace t = {.hash = 14695981039346656037ull};
	struct cdp_ws_reader r;
	size_t off = 0, k = 0;

	cdp_ws_reader_init(&r, max);
	while (off < len && t.r >= 0) {
		size_t piece = piece_len(len - off, sizes, n_sizes, &k);
		while (piece > 0) {
			struct cdp_ws_event ev = {0};
			size_t used = 0;
			int x = cdp_ws_reader_feed(&r, p + off, piece, &used, &ev, NULL);
			if (used > piece)
				abort();
			off += used;
			piece -= used;
			if (x < 0) {
				t.r = x;
				break;
			}
			if (x == 0) {
				if (piece != 0)
					abort();
				break;
			}
			t.n_events++;
			if (ev.opcode == CDP_WS_TEXT || ev.opcode == CDP_WS_BINARY) {
				if (!ev.data || ev.data[ev.len] != '\0' || ev.len > max)
					abort();
				t.hash = fold(t.hash, ev.data, ev.len);
			} else {
				if (ev.len > CDP_WS_MAX_CONTROL || ev.data)
					abort();
				t.hash = fold(t.hash, ev.control, ev.len);
				t.hash = fold(t.hash, &ev.close_code, sizeof(ev.close_code));
			}
			t.hash = fold(t.hash, &ev.opcode, 1);
			t.hash = fold(t.hash, &ev.len, sizeof(ev.len));
			cdp_ws_event_done(&ev);
		}
	}
	t.consumed = off;
	cdp_ws_reader_done(&r);
	return t;
}

static struct trace http_run(const uint8_t *p, size_t len, const char *method, bool head_only,
                             const uint8_t *sizes, size_t n_sizes)
{
	struct trace t = {.hash = 14695981039346656037ull};
	struct cdp_http_reader r;
	size_t off = 0, k = 0;

	if (cdp_http_reader_init(&r, method, head_only) < 0)
		abort();
	while (off < len && t.r == 0) {
		size_t piece = piece_len(len - off, sizes, n_sizes, &k), used = 0;
		t.r = cdp_http_reader_feed(&r, p + off, piece, &used, NULL);
		if (used > piece || (t.r == 0 && used != piece))
			abort();
		off += used;
	}
	if (t.r == 0)
		t.r = cdp_http_reader_eof(&r, NULL);
	t.consumed = off;
	if (t.r == 1) {
		t.status = cdp_http_reader_status(&r);
		t.body_len = r.body_len;
		if (r.body_len > CDP_HTTP_MAX_BODY || (r.body && r.body[r.body_len] != '\0'))
			abort();
		if (r.body)
			t.hash = fold(t.hash, r.body, r.body_len);
	}
	cdp_http_reader_done(&r);
	return t;
}

static void same(const struct trace *a, const struct trace *b)
{
	if (a->r != b->r || a->n_events != b->n_events || a->hash != b->hash ||
	    a->status != b->status || a->body_len != b->body_len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *sizes, *p;
	size_t n_sizes, len;
	uint8_t mode;

	if (size < 2)
		return 0;
	mode = data[0];
	n_sizes = data[1] % 16;
	if (size < 2 + n_sizes)
		return 0;
	sizes = data + 2;
	p = data + 2 + n_sizes;
	len = size - 2 - n_sizes;
	if ((mode & 1) == 0) {
		/* WebSocket: a message limit from 1 byte to 64 KiB. */
		uint64_t max = 1ull << ((mode >> 1) % 17);
		struct trace whole = ws_run(p, len, max, NULL, 0);
		struct trace pieces = ws_run(p, len, max, sizes, n_sizes);
		same(&whole, &pieces);
		/* Whole, the input is used up unless an error stopped it. */
		if (whole.r == 0 && whole.consumed != len)
			abort();
	} else {
		const char *method = mode & 2 ? "HEAD" : "GET";
		bool head_only = (mode & 4) != 0;
		struct trace whole = http_run(p, len, method, head_only, NULL, 0);
		struct trace pieces = http_run(p, len, method, head_only, sizes, n_sizes);
		same(&whole, &pieces);
		if (whole.r == 1 && whole.consumed != pieces.consumed)
			abort();
	}
	return 0;
}

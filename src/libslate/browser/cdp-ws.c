/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CDP client's WebSocket (RFC 6455), client side: frames, messages, the connection (cdp.h). */
#include <errno.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "browser/cdp.h"
#include "browser/internal.h"
#include "util/time.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

static bool is_control(uint8_t opcode)
{
	return (opcode & 0x8) != 0;
}

size_t cdp_ws_frame_encode(uint8_t out[CDP_WS_MAX_HEAD], uint8_t opcode, bool fin,
                           const uint8_t *mask, uint64_t len)
{
	size_t n = 2;

	out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
	out[1] = mask ? 0x80 : 0;
	if (len < 126)
		out[1] |= (uint8_t)len;
	else if (len <= 0xffff) {
		out[1] |= 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
		n = 4;
	} else {
		out[1] |= 127;
		for (int i = 0; i < 8; i++)
			out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
		n = 10;
	}
	if (mask) {
		memcpy(out + n, mask, 4);
		n += 4;
	}
	return n;
}

int cdp_ws_frame_decode(const uint8_t *p, size_t len, struct cdp_ws_frame *ret,
                        struct slate_error *err)
{
	struct cdp_ws_frame f = {0};
	size_t need = 2;
	uint8_t len7;

	if (len < 1)
		return 0;
	if (p[0] & 0x70)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "a WebSocket frame with reserved bits set");
	f.fin = (p[0] & 0x80) != 0;
	f.opcode = p[0] & 0x0f;
	switch (f.opcode) {
	case CDP_WS_CONTINUATION:
	case CDP_WS_TEXT:
	case CDP_WS_BINARY:
		break;
	case CDP_WS_CLOSE:
	case CDP_WS_PING:
	case CDP_WS_PONG:
		if (!f.fin)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "a fragmented WebSocket control frame");
		break;
	default:
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "a WebSocket frame with unknown opcode %u", f.opcode);
	}
	if (len < 2)
		return 0;
	f.masked = (p[1] & 0x80) != 0;
	len7 = p[1] & 0x7f;
	if (is_control(f.opcode) && len7 > CDP_WS_MAX_CONTROL)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "a WebSocket control frame over 125 bytes");
	need += len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
	need += f.masked ? 4 : 0;
	if (len < need)
		return 0;
	if (len7 == 126) {
		f.len = (uint64_t)p[2] << 8 | p[3];
		if (f.len < 126)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "a WebSocket length not in its shortest form");
	} else if (len7 == 127) {
		for (int i = 0; i < 8; i++)
			f.len = f.len << 8 | p[2 + i];
		if (f.len >> 63)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "a WebSocket length with its top bit set");
		if (f.len <= 0xffff)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "a WebSocket length not in its shortest form");
	} else
		f.len = len7;
	if (f.masked)
		memcpy(f.mask, p + need - 4, 4);
	f.head_len = need;
	*ret = f;
	return 1;
}

void cdp_ws_mask(uint8_t *p, size_t n, const uint8_t mask[4], uint64_t offset)
{
	for (size_t i = 0; i < n; i++)
		p[i] ^= mask[(offset + i) & 3];
}

void cdp_ws_event_done(struct cdp_ws_event *ev)
{
	free(ev->data);
	ev->data = NULL;
}

void cdp_ws_reader_init(struct cdp_ws_reader *r, uint64_t max_message)
{
	*r = (struct cdp_ws_reader){.max_message = max_message};
}

void cdp_ws_reader_done(struct cdp_ws_reader *r)
{
	free(r->message);
	*r = (struct cdp_ws_reader){0};
}

/* A frame's head is complete: is it allowed here? */
static int frame_start(struct cdp_ws_reader *r, struct slate_error *err)
{
	const struct cdp_ws_frame *f = &r->frame;

	if (f->masked)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "a masked WebSocket frame from the server");
	if (is_control(f->opcode)) {
		r->control_len = 0;
		return 0;
	}
	if (f->opcode == CDP_WS_CONTINUATION) {
		if (!r->in_message)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "a WebSocket continuation frame outside a message");
	} else {
		if (r->in_message)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "a new WebSocket message inside a fragmented one");
		r->in_message = true;
		r->message_opcode = f->opcode;
		r->message_len = 0;
	}
	if (f->len > r->max_message - r->message_len)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE,
		                       "a WebSocket message over %llu bytes",
		                       (unsigned long long)r->max_message);
	return 0;
}

static int message_append(struct cdp_ws_reader *r, const uint8_t *p, size_t n)
{
	if (r->message_len + n + 1 > r->message_cap) {
		size_t cap = r->message_cap ? r->message_cap : 4096;
		char *m;
		while (cap < r->message_len + n + 1)
			cap *= 2;
		m = realloc(r->message, cap);
		if (!m)
			return -ENOMEM;
		r->message = m;
		r->message_cap = cap;
	}
	memcpy(r->message + r->message_len, p, n);
	r->message_len += n;
	return 0;
}

static bool close_code_ok(uint16_t c)
{
	/* RFC 6455 7.4.1 and IANA's registry: 1004-1006 and 1015 are never sent. */
	return (c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1014) || (c >= 3000 && c <= 4999);
}

/* The frame's payload is all there: 1 and *ev when it ended a message or was a control frame. */
static int frame_end(struct cdp_ws_reader *r, struct cdp_ws_event *ev, struct slate_error *err)
{
	const struct cdp_ws_frame *f = &r->frame;

	r->in_frame = false;
	r->head_len = 0;
	if (is_control(f->opcode)) {
		*ev = (struct cdp_ws_event){.opcode = f->opcode, .len = r->control_len};
		memcpy(ev->control, r->control, r->control_len);
		if (f->opcode == CDP_WS_CLOSE) {
			if (r->control_len == 1)
				return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
				                       "a WebSocket close frame of one byte");
			ev->close_code = 1005;
			if (r->control_len >= 2) {
				ev->close_code = (uint16_t)(r->control[0] << 8 | r->control[1]);
				if (!close_code_ok(ev->close_code))
					return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
					                       "a WebSocket close code %u",
					                       ev->close_code);
			}
		}
		return 1;
	}
	if (!f->fin)
		return 0;
	if (!r->message) {
		r->message = malloc(1);
		if (!r->message)
			return -ENOMEM;
	}
	r->message[r->message_len] = '\0';
	*ev = (struct cdp_ws_event){.opcode = r->message_opcode, .len = r->message_len};
	ev->data = TAKE_PTR(r->message);
	r->message_len = r->message_cap = 0;
	r->in_message = false;
	return 1;
}

int cdp_ws_reader_feed(struct cdp_ws_reader *r, const uint8_t *p, size_t len, size_t *ret_consumed,
                       struct cdp_ws_event *ev, struct slate_error *err)
{
	size_t i = 0;
	int k;

	*ret_consumed = 0;
	while (i < len || (r->in_frame && r->frame_left == 0)) {
		if (!r->in_frame) {
			/* One byte at a time into the head: it is at most 14 bytes. */
			r->head[r->head_len++] = p[i++];
			k = cdp_ws_frame_decode(r->head, r->head_len, &r->frame, err);
			if (k < 0)
				return k;
			if (k == 0)
				continue;
			k = frame_start(r, err);
			if (k < 0)
				return k;
			r->in_frame = true;
			r->frame_left = r->frame.len;
		}
		if (r->frame_left > 0 && i < len) {
			size_t n = len - i;
			if (n > r->frame_left)
				n = (size_t)r->frame_left;
			if (is_control(r->frame.opcode)) {
				memcpy(r->control + r->control_len, p + i, n);
				r->control_len += n;
			} else {
				k = message_append(r, p + i, n);
				if (k < 0)
					return k;
			}
			i += n;
			r->frame_left -= n;
		}
		if (r->frame_left == 0) {
			k = frame_end(r, ev, err);
			if (k != 0) {
				*ret_consumed = i;
				return k;
			}
		}
	}
	*ret_consumed = i;
	return 0;
}

int cdp_ws_accept_for(const char *key, char ret[29])
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned md_len = 0;
	size_t kl = strlen(key);
	_cleanup_free_ char *s = malloc(kl + sizeof(WS_GUID));

	if (!s)
		return -ENOMEM;
	memcpy(s, key, kl);
	memcpy(s + kl, WS_GUID, sizeof(WS_GUID));
	if (EVP_Digest(s, kl + sizeof(WS_GUID) - 1, md, &md_len, EVP_sha1(), NULL) != 1 ||
	    md_len != 20)
		return SLATE_ERR_CRYPTO;
	if (EVP_EncodeBlock((unsigned char *)ret, md, 20) != 28)
		return SLATE_ERR_CRYPTO;
	return 0;
}

struct cdp_ws {
	int fd;
	bool close_sent;
	struct cdp_ws_reader rd;
	size_t rpos, rlen;
	uint8_t rbuf[65536];
};

int cdp_ws_fd(const struct cdp_ws *ws)
{
	return ws->fd;
}

static void ws_close_fd(struct cdp_ws *ws)
{
	ws->fd = safe_close(ws->fd);
}

void cdp_ws_free(struct cdp_ws *ws)
{
	if (!ws)
		return;
	if (ws->fd >= 0 && !ws->close_sent) {
		uint8_t code[2] = {1000 >> 8, 1000 & 0xff};
		(void)cdp_ws_send(ws, CDP_WS_CLOSE, code, 2, time_mono_ms(), NULL);
	}
	ws_close_fd(ws);
	cdp_ws_reader_done(&ws->rd);
	free(ws);
}

/* Checks the server's answer to the upgrade. */
static int upgrade_check(const struct cdp_http_reader *r, const char *key, struct slate_error *err)
{
	const struct http_head *h = cdp_http_reader_head(r);
	const char *v;
	char want[29];
	size_t n;
	int k;

	if (h->status != 101)
		return slate_error_set(err, -EPROTO,
		                       "the browser refused the WebSocket upgrade: HTTP %u",
		                       h->status);
	v = http_head_get(h, "upgrade", &n);
	if (n != 1 || strcasecmp(v, "websocket") != 0)
		return slate_error_set(err, -EPROTO,
		                       "the upgrade's answer has no Upgrade: websocket");
	v = http_head_get(h, "connection", &n);
	if (n != 1 || !http_list_has(v, "upgrade"))
		return slate_error_set(err, -EPROTO,
		                       "the upgrade's answer has no Connection: upgrade");
	if (http_head_get(h, "sec-websocket-extensions", &n) || n ||
	    http_head_get(h, "sec-websocket-protocol", &n) || n)
		return slate_error_set(err, -EPROTO,
		                       "the upgrade's answer names an extension or a subprotocol "
		                       "that was not asked for");
	k = cdp_ws_accept_for(key, want);
	if (k < 0)
		return slate_error_set(err, k, "computing Sec-WebSocket-Accept");
	v = http_head_get(h, "sec-websocket-accept", &n);
	if (n != 1 || strcmp(v, want) != 0)
		return slate_error_set(err, -EPROTO,
		                       "a wrong Sec-WebSocket-Accept from the browser");
	return 0;
}

int cdp_ws_connect(int fd, const char *path, int64_t deadline_ms, struct cdp_ws **ret,
                   struct slate_error *err)
{
	_cleanup_(cdp_ws_freep) struct cdp_ws *ws = calloc(1, sizeof(*ws));
	struct cdp_http_reader r = {0};
	uint8_t nonce[16];
	char key[25];
	int k;

	if (!ws) {
		safe_close(fd);
		return -ENOMEM;
	}
	ws->fd = fd;
	ws->close_sent = true; /* nothing to close until the upgrade is through */
	cdp_ws_reader_init(&ws->rd, CDP_WS_MAX_MESSAGE);
	randombytes_buf(nonce, sizeof(nonce));
	if (EVP_EncodeBlock((unsigned char *)key, nonce, sizeof(nonce)) != 24)
		return slate_error_set(err, SLATE_ERR_CRYPTO, "encoding Sec-WebSocket-Key");
	k = cdp_http_upgrade(fd, path, key, deadline_ms, &r, ws->rbuf, sizeof(ws->rbuf), &ws->rlen,
	                     err);
	if (k >= 0)
		k = upgrade_check(&r, key, err);
	cdp_http_reader_done(&r);
	if (k < 0)
		return slate_error_wrap(err, k, "WebSocket %s", path);
	ws->close_sent = false;
	*ret = TAKE_PTR(ws);
	return 0;
}

int cdp_ws_send(struct cdp_ws *ws, uint8_t opcode, const void *p, size_t n, int64_t deadline_ms,
                struct slate_error *err)
{
	_cleanup_free_ uint8_t *frame = NULL;
	uint8_t mask[4];
	size_t hl;

	if (n > SIZE_MAX - CDP_WS_MAX_HEAD)
		return -E2BIG;
	frame = malloc(CDP_WS_MAX_HEAD + n);
	if (!frame)
		return -ENOMEM;
	randombytes_buf(mask, sizeof(mask));
	hl = cdp_ws_frame_encode(frame, opcode, true, mask, n);
	if (n)
		memcpy(frame + hl, p, n);
	cdp_ws_mask(frame + hl, n, mask, 0);
	if (opcode == CDP_WS_CLOSE)
		ws->close_sent = true;
	return cdp_io_write(ws->fd, frame, hl + n, deadline_ms, err);
}

int cdp_ws_recv(struct cdp_ws *ws, char **ret, size_t *ret_len, uint8_t *ret_opcode,
                int64_t deadline_ms, struct slate_error *err)
{
	if (ws->fd < 0)
		return slate_error_set(err, -ENOTCONN, "the WebSocket is closed");
	for (;;) {
		struct cdp_ws_event ev = {0};
		size_t used = 0;
		ssize_t n;
		int k;

		if (ws->rpos < ws->rlen) {
			k = cdp_ws_reader_feed(&ws->rd, ws->rbuf + ws->rpos, ws->rlen - ws->rpos,
			                       &used, &ev, err);
			ws->rpos += used;
			if (k < 0) {
				/* 1002: protocol error; 1009: message too big. */
				uint16_t c = k == SLATE_ERR_TOO_LARGE ? 1009 : 1002;
				uint8_t code[2] = {(uint8_t)(c >> 8), (uint8_t)c};
				if (!ws->close_sent)
					(void)cdp_ws_send(ws, CDP_WS_CLOSE, code, 2, time_mono_ms(),
					                  NULL);
				ws_close_fd(ws);
				return k;
			}
			if (k == 0)
				continue;
			switch (ev.opcode) {
			case CDP_WS_PING:
				k = cdp_ws_send(ws, CDP_WS_PONG, ev.control, ev.len, deadline_ms,
				                err);
				if (k < 0)
					return k;
				continue;
			case CDP_WS_PONG:
				continue;
			case CDP_WS_CLOSE:
				if (!ws->close_sent)
					(void)cdp_ws_send(ws, CDP_WS_CLOSE, ev.control,
					                  ev.len >= 2 ? 2 : 0, deadline_ms, NULL);
				ws_close_fd(ws);
				return slate_error_set(err, -ECONNRESET,
				                       "the browser closed the WebSocket (code %u)",
				                       ev.close_code);
			default:
				*ret = TAKE_PTR(ev.data);
				if (ret_len)
					*ret_len = ev.len;
				if (ret_opcode)
					*ret_opcode = ev.opcode;
				return 0;
			}
		}
		n = cdp_io_read(ws->fd, ws->rbuf, sizeof(ws->rbuf), deadline_ms, err);
		if (n < 0)
			return (int)n;
		if (n == 0) {
			ws_close_fd(ws);
			return slate_error_set(err, -ECONNRESET,
			                       "the browser closed the connection without a close "
			                       "frame");
		}
		ws->rpos = 0;
		ws->rlen = (size_t)n;
	}
}

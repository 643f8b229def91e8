/* SPDX-License-Identifier: GPL-2.0-or-later */

/* The guest channel's frames and exec records (doc/guest-channel.md). libc only. */

#include <errno.h>
#include <signal.h>
#include <string.h>

#include "proto.h"

uint32_t ch_get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void ch_put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

uint16_t ch_get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

void ch_put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

bool ch_text_valid(const uint8_t *p, size_t len)
{
	if (len > CH_MAX_TEXT)
		return false;
	for (size_t i = 0; i < len; i++)
		if (p[i] < 0x20 || p[i] == 0x7f)
			return false;
	return true;
}

bool ch_service_valid(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= '0' && s[n] <= '9') || s[n] == '-'))
			return false;
	return n >= 1 && n <= CH_MAX_SERVICE;
}

/* Which stream id and payload length each type allows. */
static int frame_check(const struct ch_frame *f)
{
	bool chan = f->stream == 0;

	switch (f->type) {
	case CH_HELLO:
		return chan && f->len == CH_HELLO_LEN ? 0 : -EPROTO;
	case CH_PING:
	case CH_PONG:
		return chan && f->len == 8 ? 0 : -EPROTO;
	case CH_EVENT:
		return chan && f->len >= 1 && ch_text_valid(f->payload, f->len) ? 0 : -EPROTO;
	case CH_OPEN:
		return !chan && f->len > 4 && f->len <= 4 + CH_MAX_SERVICE ? 0 : -EPROTO;
	case CH_OPEN_OK:
	case CH_WINDOW:
		return !chan && f->len == 4 ? 0 : -EPROTO;
	case CH_OPEN_FAIL:
		return !chan && f->len > 4 && ch_text_valid(f->payload + 4, f->len - 4) ? 0
		                                                                        : -EPROTO;
	case CH_DATA:
		return !chan && f->len >= 1 ? 0 : -EPROTO;
	case CH_EOF:
	case CH_CLOSE:
		return !chan && f->len == 0 ? 0 : -EPROTO;
	default:
		return -EPROTO;
	}
}

int ch_frame_decode(const uint8_t *buf, size_t len, struct ch_frame *f)
{
	if (len < CH_HEADER_LEN)
		return 0;
	f->type = buf[0];
	f->flags = buf[1];
	f->stream = ch_get_u32(buf + 4);
	f->len = ch_get_u32(buf + 8);
	if (f->len > CH_MAX_PAYLOAD)
		return -EMSGSIZE;
	if (f->flags != 0 || buf[2] != 0 || buf[3] != 0)
		return -EPROTO;
	if (len - CH_HEADER_LEN < f->len)
		return 0;
	f->payload = buf + CH_HEADER_LEN;
	int r = frame_check(f);
	if (r < 0)
		return r;
	return (int)(CH_HEADER_LEN + f->len);
}

void ch_frame_header(uint8_t out[CH_HEADER_LEN], uint8_t type, uint32_t stream, uint32_t len)
{
	out[0] = type;
	out[1] = out[2] = out[3] = 0;
	ch_put_u32(out + 4, stream);
	ch_put_u32(out + 8, len);
}

size_t ch_frame_encode(uint8_t *out, uint8_t type, uint32_t stream, const void *payload,
                       uint32_t len)
{
	ch_frame_header(out, type, stream, len);
	if (len)
		memcpy(out + CH_HEADER_LEN, payload, len);
	return CH_HEADER_LEN + (size_t)len;
}

void ch_hello_payload(uint8_t out[CH_HELLO_LEN])
{
	memcpy(out, CH_MAGIC, CH_MAGIC_LEN);
	ch_put_u32(out + CH_MAGIC_LEN, CH_VERSION);
	ch_put_u32(out + CH_MAGIC_LEN + 4, 0);
}

int ch_hello_check(const struct ch_frame *f)
{
	if (f->type != CH_HELLO || f->len != CH_HELLO_LEN ||
	    memcmp(f->payload, CH_MAGIC, CH_MAGIC_LEN) != 0)
		return -EPROTO;
	if (ch_get_u32(f->payload + CH_MAGIC_LEN) != CH_VERSION)
		return -EPROTONOSUPPORT;
	return 0;
}

long ch_find_hello(const uint8_t *buf, size_t len)
{
	uint8_t want[CH_HEADER_LEN + CH_MAGIC_LEN];

	ch_frame_header(want, CH_HELLO, 0, CH_HELLO_LEN);
	memcpy(want + CH_HEADER_LEN, CH_MAGIC, CH_MAGIC_LEN);
	if (len < sizeof(want))
		return -1;
	for (size_t i = 0; i + sizeof(want) <= len; i++)
		if (buf[i] == CH_HELLO && memcmp(buf + i, want, sizeof(want)) == 0)
			return (long)i;
	return -1;
}

int ch_open_payload(uint8_t *out, uint32_t window, const char *service)
{
	if (!ch_service_valid(service))
		return -EINVAL;
	size_t n = strlen(service);
	ch_put_u32(out, window);
	memcpy(out + 4, service, n);
	return (int)(4 + n);
}

int ch_open_parse(const struct ch_frame *f, uint32_t *window, char service[CH_MAX_SERVICE + 1])
{
	if (f->type != CH_OPEN || f->len <= 4 || f->len > 4 + CH_MAX_SERVICE)
		return -EPROTO;
	size_t n = f->len - 4;
	memcpy(service, f->payload + 4, n);
	service[n] = '\0';
	if (!ch_service_valid(service))
		return -EPROTO;
	*window = ch_get_u32(f->payload);
	if (*window > CH_MAX_WINDOW)
		return -EPROTO;
	return 0;
}

/* ---- exec records ---- */

int ex_record_decode(const uint8_t *buf, size_t len, struct ex_record *r)
{
	if (len < EX_HEADER_LEN)
		return 0;
	r->type = buf[0];
	r->len = ch_get_u32(buf + 1);
	if (r->len > (r->type == EX_REQUEST ? EX_MAX_REQUEST : EX_MAX_RECORD))
		return -EMSGSIZE;
	switch (r->type) {
	case EX_REQUEST:
	case EX_STDIN:
	case EX_STDOUT:
	case EX_STDERR:
		break;
	case EX_STDIN_EOF:
		if (r->len != 0)
			return -EPROTO;
		break;
	case EX_RESIZE:
	case EX_SIGNAL:
	case EX_STARTED:
		if (r->len != 4)
			return -EPROTO;
		break;
	case EX_EXIT:
		if (r->len != 5)
			return -EPROTO;
		break;
	case EX_ERROR:
	case EX_PROGRESS:
		if (r->len == 0 || r->len > CH_MAX_TEXT)
			return -EPROTO;
		break;
	case EX_ENDED:
		if (r->len < 2 || r->len > 1 + CH_MAX_TEXT)
			return -EPROTO;
		break;
	default:
		return -EPROTO;
	}
	if (len - EX_HEADER_LEN < r->len)
		return 0;
	r->payload = buf + EX_HEADER_LEN;
	if ((r->type == EX_ERROR || r->type == EX_PROGRESS) && !ch_text_valid(r->payload, r->len))
		return -EPROTO;
	if (r->type == EX_SIGNAL && !ex_signal_allowed(ch_get_u32(r->payload)))
		return -EPROTO;
	if (r->type == EX_EXIT && r->payload[0] > 1)
		return -EPROTO;
	if (r->type == EX_ENDED &&
	    (r->payload[0] < EX_END_PAUSED || r->payload[0] > EX_END_UNRESPONSIVE ||
	     !ch_text_valid(r->payload + 1, r->len - 1)))
		return -EPROTO;
	return (int)(EX_HEADER_LEN + r->len);
}

void ex_record_header(uint8_t out[EX_HEADER_LEN], uint8_t type, uint32_t len)
{
	out[0] = type;
	ch_put_u32(out + 1, len);
}

bool ex_signal_allowed(uint32_t sig)
{
	switch (sig) {
	case SIGHUP:
	case SIGINT:
	case SIGQUIT:
	case SIGKILL:
	case SIGUSR1:
	case SIGUSR2:
	case SIGTERM:
	case SIGCONT:
	case SIGSTOP:
	case SIGTSTP:
	case SIGWINCH:
		return true;
	default:
		return false;
	}
}

static bool str_ok(const uint8_t *p, uint32_t len)
{
	return memchr(p, '\0', len) == NULL;
}

int ex_request_parse(const uint8_t *p, size_t len, struct ex_request *req)
{
	bool have_cwd = false, have_user = false, have_timeout = false;
	size_t off = 0;

	memset(req, 0, sizeof(*req));
	while (off < len) {
		if (len - off < 5)
			return -EPROTO;
		uint8_t tag = p[off];
		uint32_t n = ch_get_u32(p + off + 1);
		off += 5;
		if (n > EX_MAX_FIELD || n > len - off)
			return -EPROTO;
		const uint8_t *v = p + off;
		off += n;
		struct ex_str s = {(const char *)v, n};

		switch (tag) {
		case EXF_ARG:
			if (req->n_args >= EX_MAX_ARGS || !str_ok(v, n))
				return -EPROTO;
			req->args[req->n_args++] = s;
			break;
		case EXF_ENV: {
			const uint8_t *eq = memchr(v, '=', n);
			if (req->n_env >= EX_MAX_ENV || !str_ok(v, n) || !eq || eq == v)
				return -EPROTO;
			req->env[req->n_env++] = s;
			break;
		}
		case EXF_CWD:
			if (have_cwd || n == 0 || v[0] != '/' || !str_ok(v, n) || n > 4096)
				return -EPROTO;
			have_cwd = true;
			req->cwd = s;
			break;
		case EXF_USER:
			if (have_user || n == 0 || n > 32 || !str_ok(v, n))
				return -EPROTO;
			have_user = true;
			req->user = s;
			break;
		case EXF_TTY:
			if (req->tty || n != 4)
				return -EPROTO;
			req->tty = true;
			req->rows = ch_get_u16(v);
			req->cols = ch_get_u16(v + 2);
			break;
		case EXF_LOGIN:
			if (req->login || n != 0)
				return -EPROTO;
			req->login = true;
			break;
		case EXF_TIMEOUT:
			if (have_timeout || n != 4)
				return -EPROTO;
			have_timeout = true;
			req->timeout_s = ch_get_u32(v);
			break;
		default:
			return -EPROTO;
		}
	}
	if (req->n_args == 0 && !req->login)
		return -EPROTO;
	return 0;
}

static int put_field(uint8_t *buf, size_t cap, size_t *off, uint8_t tag, const void *v, uint32_t n)
{
	if (cap - *off < 5 || cap - *off - 5 < n)
		return -EMSGSIZE;
	buf[*off] = tag;
	ch_put_u32(buf + *off + 1, n);
	if (n)
		memcpy(buf + *off + 5, v, n);
	*off += 5 + (size_t)n;
	return 0;
}

long ex_request_encode(const struct ex_request *req, uint8_t *buf, size_t cap)
{
	size_t off = EX_HEADER_LEN;
	uint8_t four[4];
	int r = 0;

	if (cap < EX_HEADER_LEN)
		return -EMSGSIZE;
	for (uint32_t i = 0; i < req->n_args && r == 0; i++)
		r = put_field(buf, cap, &off, EXF_ARG, req->args[i].p, req->args[i].len);
	for (uint32_t i = 0; i < req->n_env && r == 0; i++)
		r = put_field(buf, cap, &off, EXF_ENV, req->env[i].p, req->env[i].len);
	if (r == 0 && req->cwd.len)
		r = put_field(buf, cap, &off, EXF_CWD, req->cwd.p, req->cwd.len);
	if (r == 0 && req->user.len)
		r = put_field(buf, cap, &off, EXF_USER, req->user.p, req->user.len);
	if (r == 0 && req->tty) {
		ch_put_u16(four, req->rows);
		ch_put_u16(four + 2, req->cols);
		r = put_field(buf, cap, &off, EXF_TTY, four, 4);
	}
	if (r == 0 && req->login)
		r = put_field(buf, cap, &off, EXF_LOGIN, NULL, 0);
	if (r == 0 && req->timeout_s) {
		ch_put_u32(four, req->timeout_s);
		r = put_field(buf, cap, &off, EXF_TIMEOUT, four, 4);
	}
	if (r < 0)
		return r;
	if (off - EX_HEADER_LEN > EX_MAX_REQUEST)
		return -EMSGSIZE;
	ex_record_header(buf, EX_REQUEST, (uint32_t)(off - EX_HEADER_LEN));
	return (long)off;
}

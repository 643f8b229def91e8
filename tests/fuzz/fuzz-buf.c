/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for util/buf: the input is a program. The first two bytes pick the
 * buffer's maximum; then each byte is an operation, followed by its operands. Every result is
 * checked against a plain byte array that models what the buffer must hold, so the target
 * finds wrong answers, not only crashes.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/buf.h"
#include "util/error.h"

#define MODEL_MAX 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The fuzz input, consumed from the front; reads past its end give zeros. */
struct input {
	const uint8_t *p;
	size_t left;
};

static uint8_t in_u8(struct input *in)
{
	if (in->left == 0)
		return 0;
	in->left--;
	return *in->p++;
}

static size_t in_bytes(struct input *in, size_t want, const uint8_t **ret)
{
	size_t n = want < in->left ? want : in->left;
	*ret = in->p;
	in->p += n;
	in->left -= n;
	return n;
}

/* What the buffer must hold: the unread bytes, in order. */
struct model {
	uint8_t d[MODEL_MAX];
	size_t len;
	size_t max;
};

static void check(const struct buf *b, const struct model *m)
{
	if (buf_len(b) != m->len || buf_max(b) != m->max)
		abort();
	if (m->len > 0 && memcmp(buf_ptr(b), m->d, m->len) != 0)
		abort();
}

/* Applies an append of n bytes to the model; returns the result buf must have given. */
static int model_put(struct model *m, const void *p, size_t n)
{
	if (n > m->max - m->len)
		return SLATE_ERR_NO_BUFFER_SPACE;
	memcpy(m->d + m->len, p, n);
	m->len += n;
	return 0;
}

static int model_get(struct model *m, void *out, size_t n)
{
	if (n > m->len)
		return SLATE_ERR_MESSAGE_INCOMPLETE;
	if (out)
		memcpy(out, m->d, n);
	memmove(m->d, m->d + n, m->len - n);
	m->len -= n;
	return 0;
}

static void expect(int got, int want)
{
	if (got != want)
		abort();
}

/* The model's view of a u32-prefixed string at the front; -1 when it is not all there. */
static int64_t model_string_len(const struct model *m)
{
	uint32_t n;

	if (m->len < 4)
		return -1;
	n = (uint32_t)m->d[0] << 24 | (uint32_t)m->d[1] << 16 | (uint32_t)m->d[2] << 8 | m->d[3];
	if (n > m->len - 4)
		return -1;
	return n;
}

static void run(struct buf *b, struct model *m, struct input *in)
{
	while (in->left > 0) {
		uint8_t op = in_u8(in), tmp[256], got[256];
		const uint8_t *p;
		size_t n;
		int64_t sl;
		int r;

		switch (op % 20) {
		case 0: /* put */
			n = in_bytes(in, in_u8(in), &p);
			r = buf_put(b, p, n);
			expect(r, model_put(m, p, n));
			break;
		case 1: { /* put_u8 */
			uint8_t v = in_u8(in);
			expect(buf_put_u8(b, v), model_put(m, &v, 1));
			break;
		}
		case 2: { /* put_u32 */
			uint8_t w[4];
			for (int i = 0; i < 4; i++)
				w[i] = in_u8(in);
			r = buf_put_u32(b, (uint32_t)w[0] << 24 | (uint32_t)w[1] << 16 |
			                           (uint32_t)w[2] << 8 | w[3]);
			expect(r, model_put(m, w, 4));
			break;
		}
		case 3: { /* put_u64 */
			uint8_t w[8];
			uint64_t v = 0;
			for (int i = 0; i < 8; i++) {
				w[i] = in_u8(in);
				v = v << 8 | w[i];
			}
			expect(buf_put_u64(b, v), model_put(m, w, 8));
			break;
		}
		case 4:   /* put_string */
		case 5: { /* put_cstring */
			uint8_t w[4 + 255];
			n = in_bytes(in, in_u8(in), &p);
			if (op % 20 == 5) {
				memcpy(tmp, p, n);
				tmp[n] = '\0';
				n = strlen((char *)tmp);
				r = buf_put_cstring(b, (char *)tmp);
			} else {
				r = buf_put_string(b, p, n);
			}
			w[0] = w[1] = 0;
			w[2] = (uint8_t)(n >> 8);
			w[3] = (uint8_t)n;
			memcpy(w + 4, op % 20 == 5 ? tmp : p, n);
			expect(r, model_put(m, w, 4 + n));
			break;
		}
		case 6: { /* putf */
			uint32_t v = in_u8(in) * 65537u;
			char s[32];
			int k = snprintf(s, sizeof(s), "<%u>", v);
			expect(buf_putf(b, "<%u>", v), model_put(m, s, (size_t)k));
			break;
		}
		case 7: { /* reserve, and fill what was reserved */
			uint8_t *dst = NULL, fill = in_u8(in);
			n = in_u8(in);
			r = buf_reserve(b, n, &dst);
			memset(tmp, fill, n);
			if (r == 0)
				memset(dst, fill, n);
			expect(r, model_put(m, tmp, n));
			break;
		}
		case 8: /* get */
			n = in_u8(in);
			r = buf_get(b, got, n);
			expect(r, model_get(m, tmp, n));
			if (r == 0 && n > 0 && memcmp(got, tmp, n) != 0)
				abort();
			break;
		case 9: { /* get_u8 / get_u32 / get_u64 / peek_u32 */
			uint8_t which = in_u8(in) % 4, v8 = 0;
			uint32_t v32 = 0, pk = 0;
			uint64_t v64 = 0, want = 0;
			size_t width = which == 0 ? 1 : which == 2 ? 8 : 4;

			for (size_t i = 0; i < width && i < m->len; i++)
				want = want << 8 | m->d[i];
			if (which == 0)
				r = buf_get_u8(b, &v8), v64 = v8;
			else if (which == 1)
				r = buf_get_u32(b, &v32), v64 = v32;
			else if (which == 2)
				r = buf_get_u64(b, &v64);
			else
				r = buf_peek_u32(b, &pk), v64 = pk;
			expect(r, width > m->len ? SLATE_ERR_MESSAGE_INCOMPLETE : 0);
			if (r == 0) {
				if (v64 != want)
					abort();
				if (which != 3)
					(void)model_get(m, NULL, width);
			}
			break;
		}
		case 10: /* get_string_direct */
			sl = model_string_len(m);
			r = buf_get_string_direct(b, &p, &n);
			expect(r, sl < 0 ? SLATE_ERR_MESSAGE_INCOMPLETE : 0);
			if (r == 0) {
				if (n != (size_t)sl || (n > 0 && memcmp(p, m->d + 4, n) != 0))
					abort();
				(void)model_get(m, NULL, 4 + n);
			}
			break;
		case 11: { /* get_cstring */
			char *s = NULL;
			sl = model_string_len(m);
			r = buf_get_cstring(b, &s, &n);
			if (sl < 0)
				expect(r, SLATE_ERR_MESSAGE_INCOMPLETE);
			else if (memchr(m->d + 4, 0, (size_t)sl))
				expect(r, SLATE_ERR_INVALID_FORMAT);
			else
				expect(r, 0);
			if (r == 0) {
				if (n != (size_t)sl || strlen(s) != n ||
				    memcmp(s, m->d + 4, n) != 0)
					abort();
				(void)model_get(m, NULL, 4 + n);
			}
			free(s);
			break;
		}
		case 12: { /* get_stringb */
			struct buf *s = NULL;
			sl = model_string_len(m);
			r = buf_get_stringb(b, &s);
			expect(r, sl < 0 ? SLATE_ERR_MESSAGE_INCOMPLETE : 0);
			if (r == 0) {
				if (buf_len(s) != (size_t)sl || buf_max(s) != (size_t)sl ||
				    (sl > 0 && memcmp(buf_ptr(s), m->d + 4, (size_t)sl) != 0))
					abort();
				if (sl > 0 && buf_put_u8(s, 0) != SLATE_ERR_NO_BUFFER_SPACE)
					abort();
				(void)model_get(m, NULL, 4 + (size_t)sl);
			}
			buf_free_secure(s);
			break;
		}
		case 13: /* consume */
			n = in_u8(in);
			expect(buf_consume(b, n), model_get(m, NULL, n));
			break;
		case 14: { /* dup_string */
			char *s = buf_dup_string(b);
			if (!s || (m->len > 0 && memcmp(s, m->d, m->len) != 0) || s[m->len] != '\0')
				abort();
			free(s);
			break;
		}
		case 15: /* reset */
			expect(buf_reset(b), 0);
			m->len = 0;
			break;
		case 16: { /* a read-only view of the unread bytes, read to the end as strings */
			struct buf *v = buf_from(buf_ptr(b), buf_len(b));
			if (!v || buf_mutable_ptr(v) || buf_put_u8(v, 0) != -EROFS)
				abort();
			while (buf_get_string_direct(v, NULL, NULL) == 0)
				;
			buf_free(v);
			break;
		}
		case 17: { /* a string whose prefix claims more than is there */
			uint32_t claim = (uint32_t)(m->len + in_u8(in) + 1);
			uint8_t w[4] = {claim >> 24, claim >> 16, claim >> 8, claim};
			expect(buf_put_u32(b, claim), model_put(m, w, 4));
			break;
		}
		case 18: /* mutable pointer writes land in the unread bytes */
			if (m->len > 0) {
				uint8_t v = in_u8(in);
				uint8_t *mp = buf_mutable_ptr(b);
				if (!mp)
					abort();
				mp[0] = v;
				m->d[0] = v;
			}
			break;
		case 19: /* sizes that must not wrap */
			expect(buf_put(b, "", SIZE_MAX), SLATE_ERR_NO_BUFFER_SPACE);
			expect(buf_reserve(b, SIZE_MAX - in_u8(in), NULL),
			       SLATE_ERR_NO_BUFFER_SPACE);
			expect(buf_consume(b, SIZE_MAX), SLATE_ERR_MESSAGE_INCOMPLETE);
			expect(buf_put_string(b, "", (size_t)UINT32_MAX + 1),
			       SLATE_ERR_STRING_TOO_LARGE);
			break;
		}
		check(b, m);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct model m;
	struct input in = {data, size};
	struct buf *b;
	size_t max;

	max = ((size_t)in_u8(&in) << 8 | in_u8(&in)) % (MODEL_MAX + 1);
	b = buf_new(max);
	if (!b)
		return 0;
	m.len = 0;
	m.max = max;
	run(b, &m, &in);
	check(b, &m);
	if (max % 2)
		buf_free_secure(b);
	else
		buf_free(b);
	return 0;
}

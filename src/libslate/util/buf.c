/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "util/buf.h"
#include "util/error.h"

/*
 * Unread bytes are d[off..size); d[0..alloc) is the allocation. A read-only view (buf_from)
 * has cd pointing at the caller's bytes and d == NULL.
 */
struct buf {
	uint8_t *d;
	const uint8_t *cd;
	size_t off;
	size_t size;
	size_t alloc;
	size_t max;
	bool readonly;
	bool guarded; /* d is sodium_malloc()ed at its maximum and never moves */
};

#define BUF_ALLOC_MIN 64u
#define BUF_ALLOC_ROUND 256u

struct buf *buf_new(size_t max)
{
	struct buf *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	/* Always hold an allocation so buf_ptr()/buf_mutable_ptr() never do arithmetic on NULL. */
	b->alloc = max < BUF_ALLOC_MIN ? (max > 0 ? max : 1) : BUF_ALLOC_MIN;
	b->d = malloc(b->alloc);
	if (!b->d) {
		free(b);
		return NULL;
	}
	b->cd = b->d;
	b->max = max;
	return b;
}

struct buf *buf_new_secure(size_t max)
{
	struct buf *b;

	if (max == 0 || max > BUF_SECURE_MAX || sodium_init() < 0)
		return NULL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	/* Guard pages around it, locked (no swap), MADV_DONTDUMP (no core dump). */
	b->d = sodium_malloc(max);
	if (!b->d) {
		free(b);
		return NULL;
	}
	b->cd = b->d;
	b->alloc = max;
	b->max = max;
	b->guarded = true;
	return b;
}

struct buf *buf_from(const void *p, size_t len)
{
	struct buf *b;

	if (!p && len > 0)
		return NULL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->cd = p ? p : (const uint8_t *)"";
	b->size = len;
	b->alloc = len;
	b->max = len;
	b->readonly = true;
	return b;
}

void buf_free(struct buf *b)
{
	if (!b)
		return;
	if (b->guarded)
		sodium_free(b->d); /* wipes */
	else
		free(b->d);
	free(b);
}

void buf_free_secure(struct buf *b)
{
	if (!b)
		return;
	/* The whole allocation, not just the unread part: consumed bytes were secrets too. A view
	 * does not own its bytes, so there is nothing of ours to wipe. */
	if (b->guarded) {
		sodium_free(b->d); /* wipes */
	} else {
		if (b->d)
			sodium_memzero(b->d, b->alloc);
		free(b->d);
	}
	sodium_memzero(b, sizeof(*b));
	free(b);
}

size_t buf_len(const struct buf *b)
{
	return b->size - b->off;
}

size_t buf_max(const struct buf *b)
{
	return b->max;
}

const uint8_t *buf_ptr(const struct buf *b)
{
	return b->cd + b->off;
}

uint8_t *buf_mutable_ptr(struct buf *b)
{
	if (b->readonly)
		return NULL;
	return b->d + b->off;
}

int buf_reset(struct buf *b)
{
	if (b->readonly)
		return -EROFS;
	b->off = 0;
	b->size = 0;
	return 0;
}

/*
 * Guarantees room for n more bytes after the unread ones, ignoring max (the callers check it).
 * Growing never uses realloc(): the old block is wiped before it is freed, so that
 * buf_free_secure() really does reach every byte the buffer ever held.
 */
static int buf_make_room(struct buf *b, size_t n)
{
	size_t len = b->size - b->off, need, newalloc;
	uint8_t *nd;

	if (b->alloc - b->size >= n)
		return 0;
	if (n > SIZE_MAX - len)
		return SLATE_ERR_NO_BUFFER_SPACE;
	need = len + n;

	/* Moving the unread bytes to the front may be enough. */
	if (b->alloc >= need) {
		memmove(b->d, b->d + b->off, len);
		b->off = 0;
		b->size = len;
		b->cd = b->d;
		return 0;
	}

	if (b->guarded)
		return SLATE_ERR_NO_BUFFER_SPACE; /* cannot happen: it holds its maximum */
	newalloc = need;
	if (b->alloc <= SIZE_MAX / 2 && b->alloc * 2 > newalloc)
		newalloc = b->alloc * 2;
	if (newalloc % BUF_ALLOC_ROUND != 0 &&
	    newalloc <= SIZE_MAX - (BUF_ALLOC_ROUND - newalloc % BUF_ALLOC_ROUND))
		newalloc += BUF_ALLOC_ROUND - newalloc % BUF_ALLOC_ROUND;
	/* Never allocate far past what max allows, but always what is needed. */
	if (newalloc > b->max)
		newalloc = b->max > need ? b->max : need;

	nd = malloc(newalloc);
	if (!nd)
		return -ENOMEM;
	if (len > 0)
		memcpy(nd, b->d + b->off, len);
	sodium_memzero(b->d, b->alloc);
	free(b->d);
	b->d = nd;
	b->cd = nd;
	b->alloc = newalloc;
	b->off = 0;
	b->size = len;
	return 0;
}

/* Checks that n more bytes stay within max. */
static int buf_check_room(const struct buf *b, size_t n)
{
	if (b->readonly)
		return -EROFS;
	if (n > b->max || buf_len(b) > b->max - n)
		return SLATE_ERR_NO_BUFFER_SPACE;
	return 0;
}

int buf_reserve(struct buf *b, size_t n, uint8_t **ret_p)
{
	uint8_t *p;
	int r;

	r = buf_check_room(b, n);
	if (r < 0)
		return r;
	r = buf_make_room(b, n);
	if (r < 0)
		return r;
	p = b->d + b->size;
	/* Compaction and wiping leave old bytes behind; never hand them out. */
	if (n > 0)
		memset(p, 0, n);
	b->size += n;
	if (ret_p)
		*ret_p = p;
	return 0;
}

int buf_put(struct buf *b, const void *p, size_t n)
{
	uint8_t *dst;
	int r;

	if (!p && n > 0)
		return -EINVAL;
	r = buf_reserve(b, n, &dst);
	if (r < 0)
		return r;
	if (n > 0)
		memcpy(dst, p, n);
	return 0;
}

int buf_put_u8(struct buf *b, uint8_t v)
{
	return buf_put(b, &v, 1);
}

int buf_put_u32(struct buf *b, uint32_t v)
{
	uint8_t w[4] = {v >> 24, v >> 16, v >> 8, v};
	return buf_put(b, w, sizeof(w));
}

int buf_put_u64(struct buf *b, uint64_t v)
{
	uint8_t w[8] = {v >> 56, v >> 48, v >> 40, v >> 32, v >> 24, v >> 16, v >> 8, v};
	return buf_put(b, w, sizeof(w));
}

int buf_put_string(struct buf *b, const void *p, size_t n)
{
	uint8_t *dst;
	int r;

	if (n > UINT32_MAX || n > SIZE_MAX - 4)
		return SLATE_ERR_STRING_TOO_LARGE;
	if (!p && n > 0)
		return -EINVAL;
	/* One reservation for prefix and body, so a failure writes neither. */
	r = buf_reserve(b, 4 + n, &dst);
	if (r < 0)
		return r;
	dst[0] = (uint8_t)(n >> 24);
	dst[1] = (uint8_t)(n >> 16);
	dst[2] = (uint8_t)(n >> 8);
	dst[3] = (uint8_t)n;
	if (n > 0)
		memcpy(dst + 4, p, n);
	return 0;
}

int buf_put_cstring(struct buf *b, const char *s)
{
	if (!s)
		return -EINVAL;
	return buf_put_string(b, s, strlen(s));
}

int buf_putfv(struct buf *b, const char *fmt, va_list ap)
{
	va_list aq;
	int len, r;

	va_copy(aq, ap);
	len = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (len < 0)
		return -EINVAL;

	r = buf_check_room(b, (size_t)len);
	if (r < 0)
		return r;
	/* One byte more for vsnprintf's NUL, which is not part of the contents. */
	r = buf_make_room(b, (size_t)len + 1);
	if (r < 0)
		return r;
	if (vsnprintf((char *)b->d + b->size, (size_t)len + 1, fmt, ap) != len)
		return -EINVAL;
	b->size += (size_t)len;
	return 0;
}

int buf_putf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = buf_putfv(b, fmt, ap);
	va_end(ap);
	return r;
}

int buf_consume(struct buf *b, size_t n)
{
	if (n > buf_len(b))
		return SLATE_ERR_MESSAGE_INCOMPLETE;
	b->off += n;
	return 0;
}

int buf_get(struct buf *b, void *out, size_t n)
{
	if (n > buf_len(b))
		return SLATE_ERR_MESSAGE_INCOMPLETE;
	if (n > 0) {
		if (!out)
			return -EINVAL;
		memcpy(out, buf_ptr(b), n);
	}
	b->off += n;
	return 0;
}

int buf_get_u8(struct buf *b, uint8_t *ret)
{
	uint8_t v;
	int r;

	r = buf_get(b, &v, 1);
	if (r < 0)
		return r;
	if (ret)
		*ret = v;
	return 0;
}

static uint32_t peek_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

int buf_peek_u32(const struct buf *b, uint32_t *ret)
{
	if (buf_len(b) < 4)
		return SLATE_ERR_MESSAGE_INCOMPLETE;
	if (ret)
		*ret = peek_be32(buf_ptr(b));
	return 0;
}

int buf_get_u32(struct buf *b, uint32_t *ret)
{
	uint32_t v;
	int r;

	r = buf_peek_u32(b, &v);
	if (r < 0)
		return r;
	b->off += 4;
	if (ret)
		*ret = v;
	return 0;
}

int buf_get_u64(struct buf *b, uint64_t *ret)
{
	const uint8_t *p;
	uint64_t v;

	if (buf_len(b) < 8)
		return SLATE_ERR_MESSAGE_INCOMPLETE;
	p = buf_ptr(b);
	v = (uint64_t)peek_be32(p) << 32 | peek_be32(p + 4);
	b->off += 8;
	if (ret)
		*ret = v;
	return 0;
}

/* Finds the string at the front without consuming anything. */
static int buf_peek_string(const struct buf *b, const uint8_t **ret_p, size_t *ret_len)
{
	uint32_t n;
	int r;

	r = buf_peek_u32(b, &n);
	if (r < 0)
		return r;
	if (n > buf_len(b) - 4)
		return SLATE_ERR_MESSAGE_INCOMPLETE;
	*ret_p = buf_ptr(b) + 4;
	*ret_len = n;
	return 0;
}

int buf_get_string_direct(struct buf *b, const uint8_t **ret_p, size_t *ret_len)
{
	const uint8_t *p;
	size_t n;
	int r;

	r = buf_peek_string(b, &p, &n);
	if (r < 0)
		return r;
	b->off += 4 + n;
	if (ret_p)
		*ret_p = p;
	if (ret_len)
		*ret_len = n;
	return 0;
}

int buf_get_cstring(struct buf *b, char **ret, size_t *ret_len)
{
	const uint8_t *p;
	char *s;
	size_t n;
	int r;

	r = buf_peek_string(b, &p, &n);
	if (r < 0)
		return r;
	/* An interior NUL would make C code see a different string than the peer sent. */
	if (n > 0 && memchr(p, 0, n))
		return SLATE_ERR_INVALID_FORMAT;
	if (n == SIZE_MAX)
		return SLATE_ERR_STRING_TOO_LARGE;
	s = malloc(n + 1);
	if (!s)
		return -ENOMEM;
	if (n > 0)
		memcpy(s, p, n);
	s[n] = '\0';
	b->off += 4 + n;
	if (ret)
		*ret = s;
	else
		free(s);
	if (ret_len)
		*ret_len = n;
	return 0;
}

int buf_get_stringb(struct buf *b, struct buf **ret)
{
	const uint8_t *p;
	struct buf *s;
	size_t n;
	int r;

	r = buf_peek_string(b, &p, &n);
	if (r < 0)
		return r;
	s = buf_new(n);
	if (!s)
		return -ENOMEM;
	r = buf_put(s, p, n);
	if (r < 0) {
		buf_free_secure(s);
		return r;
	}
	b->off += 4 + n;
	if (ret)
		*ret = s;
	else
		buf_free_secure(s);
	return 0;
}

char *buf_dup_string(const struct buf *b)
{
	size_t n = buf_len(b);
	char *s;

	if (n == SIZE_MAX)
		return NULL;
	s = malloc(n + 1);
	if (!s)
		return NULL;
	if (n > 0)
		memcpy(s, buf_ptr(b), n);
	s[n] = '\0';
	return s;
}

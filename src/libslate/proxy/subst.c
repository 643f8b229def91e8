/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Substitution in form and JSON bodies and in one query parameter (see subst.h). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "proxy/subst.h"
#include "util/hex.h"
#include "util/macro.h"

static const char hexdigits[] = "0123456789ABCDEF";

static bool is_alnum(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Whether a placeholder may be matched: not empty, and none of the bytes that are structure in
 * a form, a JSON string or a query (a match could then straddle an escape or a delimiter). */
static bool matchable(const char *ph)
{
	if (!ph || !*ph)
		return false;
	for (const char *c = ph; *c; c++)
		if ((uint8_t)*c <= 0x20 || *c == 0x7f || strchr("%&=+\"\\#?;", *c))
			return false;
	return true;
}

/* The item whose placeholder is at p (n bytes left), the longest if several, or -1. */
static long match_at(const uint8_t *p, size_t n, const struct subst_item *items, size_t n_items,
                     const bool *ok)
{
	long best = -1;
	size_t best_len = 0;

	for (size_t i = 0; i < n_items; i++) {
		size_t len;
		if (!ok[i] || (uint8_t)items[i].placeholder[0] != p[0])
			continue;
		len = strlen(items[i].placeholder);
		if (len <= n && len > best_len && memcmp(p, items[i].placeholder, len) == 0) {
			best = (long)i;
			best_len = len;
		}
	}
	return best;
}

static int put_form(struct buf *out, const uint8_t *p, size_t n)
{
	int r = 0;

	for (size_t i = 0; i < n && r >= 0; i++) {
		uint8_t c = p[i];
		if (is_alnum(c) || c == '*' || c == '-' || c == '.' || c == '_')
			r = buf_put_u8(out, c);
		else if (c == ' ')
			r = buf_put_u8(out, '+');
		else
			r = buf_put(out, (char[]){'%', hexdigits[c >> 4], hexdigits[c & 15]}, 3);
	}
	return r;
}

static int put_json(struct buf *out, const uint8_t *p, size_t n)
{
	int r = 0;

	for (size_t i = 0; i < n && r >= 0; i++) {
		uint8_t c = p[i];
		if (c == '"' || c == '\\')
			r = buf_put(out, (char[]){'\\', (char)c}, 2);
		else if (c < 0x20)
			r = buf_put(
			        out,
			        (char[]){'\\', 'u', '0', '0', hexdigits[c >> 4], hexdigits[c & 15]},
			        6);
		else
			r = buf_put_u8(out, c);
	}
	return r;
}

static int put_query(struct buf *out, const uint8_t *p, size_t n)
{
	int r = 0;

	for (size_t i = 0; i < n && r >= 0; i++) {
		uint8_t c = p[i];
		if (is_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~')
			r = buf_put_u8(out, c);
		else
			r = buf_put(out, (char[]){'%', hexdigits[c >> 4], hexdigits[c & 15]}, 3);
	}
	return r;
}

/* A media type's essence (before ';', without surrounding white space) equals want. */
static bool media_is(const char *v, size_t n, const char *want)
{
	return n == strlen(want) && strncasecmp(v, want, n) == 0;
}

enum subst_body_type subst_body_type(const char *content_type, const char *content_encoding)
{
	const char *v = content_type, *end, *slash;
	size_t n;

	if (content_encoding) {
		const char *e = content_encoding;
		size_t en;
		while (*e == ' ' || *e == '\t')
			e++;
		en = strlen(e);
		while (en > 0 && (e[en - 1] == ' ' || e[en - 1] == '\t'))
			en--;
		if (en > 0 && !media_is(e, en, "identity"))
			return SUBST_BODY_NONE;
	}
	if (!v)
		return SUBST_BODY_NONE;
	while (*v == ' ' || *v == '\t')
		v++;
	end = strchr(v, ';');
	n = end ? (size_t)(end - v) : strlen(v);
	while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	if (media_is(v, n, "application/x-www-form-urlencoded"))
		return SUBST_BODY_FORM;
	if (media_is(v, n, "application/json"))
		return SUBST_BODY_JSON;
	/* application/<subtype>+json (RFC 6839), e.g. application/vnd.api+json */
	slash = memchr(v, '/', n);
	if (slash && (size_t)(slash - v) == strlen("application") &&
	    strncasecmp(v, "application", 11) == 0 && n >= 17 &&
	    strncasecmp(v + n - 5, "+json", 5) == 0 && (size_t)(slash - v) + 1 < n - 5)
		return SUBST_BODY_JSON;
	return SUBST_BODY_NONE;
}

int subst_body(enum subst_body_type type, const uint8_t *p, size_t n,
               const struct subst_item *items, size_t n_items, struct buf *out, unsigned *counts)
{
	bool ok[SUBST_ITEMS_MAX];
	bool in_string = false;
	size_t i = 0, lit = 0; /* copy p[lit..i) verbatim before anything else */
	int r, done = 0;

	if (type != SUBST_BODY_FORM && type != SUBST_BODY_JSON)
		return -EINVAL;
	if (n_items > SUBST_ITEMS_MAX)
		return -E2BIG;
	for (size_t k = 0; k < n_items; k++)
		ok[k] = matchable(items[k].placeholder) &&
		        (items[k].real || items[k].real_len == 0);

	while (i < n) {
		uint8_t c = p[i];
		long m;

		if (type == SUBST_BODY_FORM) {
			if (hex_pct_escape((const char *)p + i, n - i) >= 0) {
				i += 3; /* an escape: no placeholder starts inside it */
				continue;
			}
		} else {
			if (!in_string) {
				in_string = c == '"';
				i++;
				continue;
			}
			if (c == '"') {
				in_string = false;
				i++;
				continue;
			}
			if (c == '\\') {
				/* \X, or \uXXXX: skipped whole (a short one at the end: to the end) */
				size_t len = i + 1 < n && p[i + 1] == 'u' ? 6 : 2;
				i = i + len < n ? i + len : n;
				continue;
			}
		}
		m = match_at(p + i, n - i, items, n_items, ok);
		if (m < 0) {
			i++;
			continue;
		}
		if ((r = buf_put(out, p + lit, i - lit)) < 0)
			return r;
		r = type == SUBST_BODY_FORM ? put_form(out, items[m].real, items[m].real_len)
		                            : put_json(out, items[m].real, items[m].real_len);
		if (r < 0)
			return r;
		i += strlen(items[m].placeholder);
		lit = i;
		if (counts)
			counts[m]++;
		done++;
	}
	if ((r = buf_put(out, p + lit, n - lit)) < 0)
		return r;
	return done;
}

/* Whether the n bytes at p, percent-decoded ("%XX" valid: one byte; anything else as it is),
 * are exactly want. */
static bool pct_equal(const char *p, size_t n, const char *want)
{
	size_t w = 0, wn = strlen(want);

	for (size_t i = 0; i < n; i++, w++) {
		uint8_t c = (uint8_t)p[i];
		int e = hex_pct_escape(p + i, n - i);
		if (e >= 0) {
			c = (uint8_t)e;
			i += 2;
		}
		if (w >= wn || (uint8_t)want[w] != c)
			return false;
	}
	return w == wn;
}

int subst_query(const char *target, size_t n, const struct subst_item *items, size_t n_items,
                struct buf *out, unsigned *counts)
{
	const char *q = memchr(target, '?', n), *end = target + n, *hash;
	int r, done = 0;

	if (!q)
		return (r = buf_put(out, target, n)) < 0 ? r : 0;
	/* A fragment never reaches a proxy; should one be there, nothing after it is touched. */
	hash = memchr(q, '#', (size_t)(end - q));
	if (hash)
		end = hash;
	if ((r = buf_put(out, target, (size_t)(q + 1 - target))) < 0)
		return r;
	for (const char *s = q + 1; s <= end;) {
		const char *amp = memchr(s, '&', (size_t)(end - s)), *pe = amp ? amp : end;
		const char *eq = memchr(s, '=', (size_t)(pe - s));
		long m = -1;

		for (size_t k = 0; eq && m < 0 && k < n_items; k++)
			if (items[k].param && matchable(items[k].placeholder) &&
			    (items[k].real || items[k].real_len == 0) &&
			    pct_equal(s, (size_t)(eq - s), items[k].param) &&
			    pct_equal(eq + 1, (size_t)(pe - eq - 1), items[k].placeholder))
				m = (long)k;
		if (m >= 0) {
			if ((r = buf_put(out, s, (size_t)(eq + 1 - s))) < 0 ||
			    (r = put_query(out, items[m].real, items[m].real_len)) < 0)
				return r;
			if (counts)
				counts[m]++;
			done++;
		} else if ((r = buf_put(out, s, (size_t)(pe - s))) < 0)
			return r;
		if (!amp)
			break;
		if ((r = buf_put_u8(out, '&')) < 0)
			return r;
		s = amp + 1;
	}
	if ((r = buf_put(out, end, (size_t)(target + n - end))) < 0)
		return r;
	return done;
}

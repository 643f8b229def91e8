/* SPDX-License-Identifier: GPL-2.0-or-later */
/* What goes upstream: secrets' bindings, the leak scan of every part of a request, and the
 * substitution of placeholders in the head, the query and bodies (proxy/subst.h). */

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy/internal.h"
#include "util/error.h"
#include "util/hex.h"

bool proxy_bound_to(const struct conn *c, size_t secret, const char *host)
{
	for (char **h = c->bound[secret]; h && *h; h++)
		if (host_matches(host, *h))
			return true;
	return false;
}

int proxy_hit_fn(size_t pattern, size_t end, void *userdata)
{
	struct hits *h = userdata;
	const struct pat *pt = &h->c->pats[pattern];
	size_t len = pt->len;

	if (!proxy_bound_to(h->c, pt->secret, h->host)) {
		h->leak = (long)pattern;
		return 1;
	}
	/* An encoded placeholder towards its own host goes as it is: only the placeholder as it
	 * stands is substituted. */
	if (h->collect && pt->enc == TRIPWIRE_RAW) {
		if (h->n == h->cap) {
			size_t ncap = h->cap ? h->cap * 2 : 8;
			struct hit *nv = realloc(h->v, ncap * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			h->v = nv;
			h->cap = ncap;
		}
		h->v[h->n++] =
		        (struct hit){.start = h->base + end - len, .len = len, .pat = pattern};
	}
	return 0;
}

/* Scans p for placeholders (one complete piece: state starts fresh). Returns the leaking
 * pattern or -1; with collect, h->v gets the bound ones. */
long proxy_scan_piece(struct hits *h, const void *p, size_t n)
{
	uint32_t st = SCAN_START;

	h->n = 0;
	h->base = 0;
	(void)scan_feed(h->c->scan, &st, p, n, proxy_hit_fn, h);
	return h->leak;
}

/*
 * Whether secret i's real value may not go into the request being built: only an intercepted
 * tunnel reaches its server over TLS with the certificate verified for the host (proxy_up_tls), so
 * elsewhere (a plain http:// request) only a secret set with --allow-plain-http is put in.
 * Remembers the secret for the refusal (proxy_plain_refusal).
 */
bool proxy_plain_refused(struct conn *c, size_t i)
{
	if (c->in_tunnel || c->secrets->v[i].plain_http)
		return false;
	if (c->plain_secret < 0)
		c->plain_secret = (long)i;
	return true;
}

/* The 403 text for a request proxy_plain_refused: names the secret and what to do. */
void proxy_plain_refusal(const struct conn *c, const char *host, char *out, size_t len)
{
	(void)snprintf(out, len,
	               "the secret %s is bound to %s, but this request goes over plain HTTP, "
	               "where anyone on the path could read it: slate puts its real value only "
	               "into HTTPS requests (CONNECT, the server's certificate verified). Nothing "
	               "was forwarded. Use https://, or set the secret with --allow-plain-http",
	               c->plain_secret >= 0 ? c->secrets->v[c->plain_secret].key : "?", host);
}

static void note_substituted(struct outcome *o, const char *key, unsigned where)
{
	for (size_t i = 0; i < o->n_substituted; i++)
		if (streq(o->substituted[i], key)) {
			o->substituted_in[i] |= where;
			return;
		}
	if (o->n_substituted < MAX_SUBSTITUTED) {
		o->substituted_in[o->n_substituted] = where;
		o->substituted[o->n_substituted++] = key;
	}
}

bool proxy_header_safe(const struct buf *real)
{
	const uint8_t *p = buf_ptr(real);
	for (size_t i = 0; i < buf_len(real); i++)
		if (p[i] != '\t' && (p[i] < 0x20 || p[i] == 0x7f))
			return false;
	return true;
}

/*
 * Appends the n bytes at p to out with the collected (bound) hits replaced by real values,
 * leftmost first, overlapping ones skipped. AWS values are left to SigV4 re-signing.
 * Returns 0, -EINVAL when a real value cannot go in a header, or a buf error.
 */
static int put_substituted(struct conn *c, struct buf *out, const uint8_t *p, size_t n,
                           struct hits *h, bool for_header, struct outcome *o)
{
	size_t pos = 0;
	int r;

	/* Hits arrive ordered by their end; order them by start (insertion sort: few). */
	for (size_t i = 1; i < h->n; i++)
		for (size_t j = i; j > 0 && (h->v[j].start < h->v[j - 1].start ||
		                             (h->v[j].start == h->v[j - 1].start &&
		                              h->v[j].len > h->v[j - 1].len));
		     j--) {
			struct hit t = h->v[j];
			h->v[j] = h->v[j - 1];
			h->v[j - 1] = t;
		}
	for (size_t i = 0; i < h->n; i++) {
		const struct hit *x = &h->v[i];
		const struct pat *pt = &c->pats[x->pat];
		const struct secret *s = &c->secrets->v[pt->secret];
		const struct buf *real = s->values[pt->value].real;
		if (x->start < pos || s->kind == SECRET_KIND_AWS || !real)
			continue;
		/* Left in place; proxy_build_head refuses the request once all of it is scanned (a
		 * leak found later still counts). */
		if (proxy_plain_refused(c, pt->secret))
			continue;
		if (for_header && !proxy_header_safe(real))
			return -EINVAL;
		if ((r = buf_put(out, p + pos, x->start - pos)) < 0 ||
		    (r = buf_put(out, buf_ptr(real), buf_len(real))) < 0)
			return r;
		pos = x->start + x->len;
		note_substituted(o, s->key, SUBST_IN_HEADER);
	}
	return buf_put(out, p + pos, n - pos);
}

/* Whether secret i is substituted at where (SUBST_IN_BODY or SUBST_IN_QUERY) in a request to
 * host: configured for it, bound to host, and not an aws one (those are re-signed). */
bool proxy_subst_applies(const struct conn *c, size_t i, const char *host, unsigned where)
{
	const struct secret *s = &c->secrets->v[i];

	return s->kind != SECRET_KIND_AWS && (where == SUBST_IN_BODY ? s->body : !!s->query) &&
	       proxy_bound_to(c, i, host);
}

static size_t subst_collect(const struct conn *c, const char *host, unsigned where,
                            struct subst_list *l)
{
	l->n = 0;
	for (size_t i = 0; c->secrets && i < c->secrets->n; i++) {
		const struct secret *s = &c->secrets->v[i];
		if (!proxy_subst_applies(c, i, host, where))
			continue;
		for (size_t j = 0; j < s->n_values && l->n < SUBST_ITEMS_MAX; j++) {
			const struct secret_value *v = &s->values[j];
			if (!v->placeholder || !v->real)
				continue;
			l->owner[l->n] = i;
			l->counts[l->n] = 0;
			l->v[l->n++] = (struct subst_item){v->placeholder, buf_ptr(v->real),
			                                   buf_len(v->real), s->query};
		}
	}
	return l->n;
}

static void subst_note(const struct conn *c, const struct subst_list *l, unsigned where,
                       struct outcome *o)
{
	for (size_t k = 0; k < l->n; k++)
		if (l->counts[k] > 0)
			note_substituted(o, c->secrets->v[l->owner[k]].key, where);
}

/* The request line, its target's query parameters substituted for the secrets configured for
 * it (--query): nothing else of the target ever is. */
static int put_request_line(struct conn *c, struct buf *out, const char *method, const char *target,
                            const char *host, struct outcome *o)
{
	_cleanup_free_ struct subst_list *l = NULL;
	int r;

	/* Most targets have no query: no list to gather (or allocate) for them. */
	if (!strchr(target, '?'))
		return buf_putf(out, "%s %s HTTP/1.1\r\n", method, target);
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	if (subst_collect(c, host, SUBST_IN_QUERY, l) == 0)
		return buf_putf(out, "%s %s HTTP/1.1\r\n", method, target);
	if ((r = buf_putf(out, "%s ", method)) < 0 ||
	    (r = subst_query(target, strlen(target), l->v, l->n, out, l->counts)) < 0 ||
	    (r = buf_putf(out, " HTTP/1.1\r\n")) < 0)
		return r;
	/* Refused by proxy_build_head at the end (the head is never sent). */
	for (size_t k = 0; k < l->n; k++)
		if (l->counts[k] > 0)
			(void)proxy_plain_refused(c, l->owner[k]);
	if (c->plain_secret < 0)
		subst_note(c, l, SUBST_IN_QUERY, o);
	return 0;
}

/* Fields that concern this hop only and never go upstream. */
bool proxy_hop_by_hop(const struct http_head *h, const char *name, bool keep_upgrade)
{
	static const char *const names[] = {"connection",
	                                    "proxy-connection",
	                                    "keep-alive",
	                                    "proxy-authorization",
	                                    "proxy-authenticate",
	                                    "te",
	                                    "trailer",
	                                    "transfer-encoding",
	                                    "content-length",
	                                    "expect",
	                                    "upgrade"};

	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		if (strcasecmp(name, names[i]) == 0)
			return !(keep_upgrade && streq(names[i], "upgrade"));
	/* And whatever Connection names. */
	for (size_t i = 0; i < h->n_fields; i++)
		if (strcasecmp(h->fields[i].name, "connection") == 0 &&
		    http_list_has(h->fields[i].value, name))
			return true;
	return false;
}

/* One field value as it goes upstream, into val (a secure buffer). Returns 0 (leak->pat set on a
 * leak), -EINVAL (a real value unfit for a header), -ENOMEM. */
static int field_value(struct conn *c, struct hits *hs, const struct http_field *f, struct buf *val,
                       struct leak_info *leak, struct outcome *o)
{
	const char *v = f->value;
	size_t vn = strlen(v);

	if (proxy_scan_piece(hs, f->name, strlen(f->name)) >= 0 ||
	    proxy_scan_piece(hs, v, vn) >= 0) {
		leak->pat = hs->leak;
		leak->where = "header";
		return 0;
	}
	/* Authorization: Basic base64(user ":" password) (RFC 7617): decoded, scanned,
	 * substituted and encoded again. */
	if (strcasecmp(f->name, "authorization") == 0 && strncasecmp(v, "basic ", 6) == 0) {
		const char *b64 = v + 6;
		_cleanup_buf_secure_ struct buf *bin = NULL, *plain = NULL, *enc = NULL;
		size_t bn, cn = 0, el;
		uint8_t *bp, *ep;
		int r;

		while (*b64 == ' ')
			b64++;
		bn = strlen(b64);
		bin = buf_new(bn + 1);
		if (!bin || buf_reserve(bin, bn + 1, &bp) < 0)
			return -ENOMEM;
		if (sodium_base642bin(bp, bn + 1, b64, bn, NULL, &cn, NULL,
		                      sodium_base64_VARIANT_ORIGINAL) == 0) {
			if (proxy_scan_piece(hs, bp, cn) >= 0) {
				leak->pat = hs->leak;
				leak->where = "header";
				return 0;
			}
			if (hs->n > 0) {
				plain = buf_new(HTTP_MAX_HEAD);
				if (!plain)
					return -ENOMEM;
				r = put_substituted(c, plain, bp, cn, hs, false, o);
				if (r < 0)
					return r;
				el = sodium_base64_ENCODED_LEN(buf_len(plain),
				                               sodium_base64_VARIANT_ORIGINAL);
				enc = buf_new(el);
				if (!enc || buf_reserve(enc, el, &ep) < 0)
					return -ENOMEM;
				(void)sodium_bin2base64((char *)ep, el, buf_ptr(plain),
				                        buf_len(plain),
				                        sodium_base64_VARIANT_ORIGINAL);
				if (buf_put(val, "Basic ", 6) < 0 ||
				    buf_put(val, ep, strlen((const char *)ep)) < 0)
					return -ENOMEM;
				return 0;
			}
		}
		/* Not valid base64, or nothing to replace: as sent. */
		(void)proxy_scan_piece(hs, v, vn);
	}
	return put_substituted(c, val, (const uint8_t *)v, vn, hs, true, o);
}

/* Replaces a field's value with the re-signed one. */
static int resign_value(struct buf *val, const void *p, size_t n)
{
	(void)buf_reset(val);
	return buf_put(val, p, n);
}

/* Whether the AWS secret a re-signed request was signed for (its access key id's placeholder
 * in the target or a field) may not go over plain HTTP: the re-signed request carries its
 * real access key id and session token. */
static bool aws_plain_refused(struct conn *c, const struct http_head *h, const char *host)
{
	for (size_t i = 0; c->secrets && i < c->secrets->n; i++) {
		const struct secret *s = &c->secrets->v[i];
		const char *ph = s->n_values > 0 ? s->values[0].placeholder : NULL;
		bool named = false;

		if (s->kind != SECRET_KIND_AWS || !ph || !*ph || !proxy_bound_to(c, i, host))
			continue;
		named = strstr(h->target, ph) != NULL;
		for (size_t j = 0; j < h->n_fields && !named; j++)
			named = strstr(h->fields[j].value, ph) != NULL;
		if (named)
			return proxy_plain_refused(c, i);
	}
	return false;
}

/*
 * Builds the head that goes upstream: the request line (never substituted) and the fields, with
 * placeholders of secrets bound to host replaced. Scans the target (as sent and percent-decoded)
 * and every forwarded field. A leak fills leak->pat (>= 0) and returns 0 with out unusable.
 * With rs (a re-signed AWS request), its Authorization, X-Amz-Security-Token and presigned
 * target go instead of the guest's (scanned all the same).
 * Returns 0, -EINVAL (a real value unfit for a header), -ENOMEM.
 */
int proxy_build_head(struct conn *c, const struct http_head *h, const char *origin,
                     const char *host, bool upgrade, struct buf *out, struct leak_info *leak,
                     struct outcome *o, const struct sigv4_resigned *rs)
{
	struct hits hs = {.c = c, .host = host, .leak = -1};
	char decoded[HTTP_MAX_REQUEST_LINE + 1];
	size_t dn = 0;
	int r = 0;

	leak->pat = -1;
	/* The method too: a placeholder is all token characters, so "PH / HTTP/1.1" parses. */
	leak->where = "method";
	if (proxy_scan_piece(&hs, h->method, strlen(h->method)) >= 0) {
		leak->pat = hs.leak;
		goto done;
	}
	leak->where = "url";
	if (proxy_scan_piece(&hs, h->target, strlen(h->target)) >= 0) {
		leak->pat = hs.leak;
		goto done;
	}
	dn = (size_t)hex_pct_decode(h->target, strlen(h->target), decoded, sizeof(decoded) - 1,
	                            PCT_TRUNCATE);
	if (proxy_scan_piece(&hs, decoded, dn) >= 0) {
		leak->pat = hs.leak;
		goto done;
	}
	if (rs && !c->in_tunnel)
		(void)aws_plain_refused(c, h, host);

	if ((r = put_request_line(c, out, h->method, rs && rs->target ? rs->target : origin, host,
	                          o)) < 0)
		goto done;
	hs.collect = true;
	for (size_t i = 0; i < h->n_fields; i++) {
		const struct http_field *f = &h->fields[i];
		_cleanup_buf_secure_ struct buf *val = NULL;
		if (proxy_hop_by_hop(h, f->name, upgrade)) {
			/* Not forwarded, but scanned all the same: every field is. */
			if (proxy_scan_piece(&hs, f->name, strlen(f->name)) >= 0 ||
			    proxy_scan_piece(&hs, f->value, strlen(f->value)) >= 0) {
				leak->pat = hs.leak;
				leak->where = "header";
				goto done;
			}
			continue;
		}
		val = buf_new(HTTP_MAX_HEAD);
		if (!val) {
			r = -ENOMEM;
			goto done;
		}
		r = field_value(c, &hs, f, val, leak, o);
		if (r < 0 || leak->pat >= 0)
			goto done;
		if (rs && rs->kind == SIGV4_AUTH_HEADER &&
		    strcasecmp(f->name, "authorization") == 0)
			r = resign_value(val, rs->authorization, strlen(rs->authorization));
		else if (rs && rs->kind == SIGV4_AUTH_HEADER && rs->security_token &&
		         strcasecmp(f->name, "x-amz-security-token") == 0)
			r = proxy_header_safe(rs->security_token)
			            ? resign_value(val, buf_ptr(rs->security_token),
			                           buf_len(rs->security_token))
			            : -EINVAL;
		if (r < 0)
			goto done;
		if ((r = buf_putf(out, "%s: ", f->name)) < 0 ||
		    (r = buf_put(out, buf_ptr(val), buf_len(val))) < 0 ||
		    (r = buf_put(out, "\r\n", 2)) < 0)
			goto done;
	}
	if (rs && rs->kind == SIGV4_AUTH_HEADER && rs->security_token && rs->security_token_add) {
		const struct buf *t = rs->security_token;
		if (!proxy_header_safe(t)) {
			r = -EINVAL;
			goto done;
		}
		if ((r = buf_putf(out, "X-Amz-Security-Token: ")) < 0 ||
		    (r = buf_put(out, buf_ptr(t), buf_len(t))) < 0 ||
		    (r = buf_put(out, "\r\n", 2)) < 0)
			goto done;
	}
	switch (h->framing) {
	case HTTP_BODY_LENGTH:
		r = buf_putf(out, "Content-Length: %llu\r\n",
		             (unsigned long long)h->content_length);
		break;
	case HTTP_BODY_CHUNKED:
		r = buf_putf(out, "Transfer-Encoding: chunked\r\n");
		break;
	default:
		break;
	}
	if (r >= 0 && upgrade)
		r = buf_putf(out, "Connection: Upgrade\r\n");
	if (r >= 0)
		r = buf_put(out, "\r\n", 2);
	/* A real value that may not go over plain HTTP: refused now that every part is scanned. */
	if (r >= 0 && c->plain_secret >= 0)
		r = -EPROTO;
done:
	free(hs.v);
	return r;
}

/* Whether h's body is one to substitute in (--body secrets bound to host; a form or JSON body
 * without a Content-Encoding, up to PROXY_BODY_BUFFER; not an AWS request being re-signed). */
bool proxy_body_subst_wanted(const struct conn *c, const struct http_head *h, const char *host,
                             const struct resign *rs)
{
	if (h->framing == HTTP_BODY_NONE || rs->res || rs->need_body_hash ||
	    (h->framing == HTTP_BODY_LENGTH && h->content_length > PROXY_BODY_BUFFER) ||
	    subst_body_type(http_head_get(h, "content-type", NULL),
	                    http_head_get(h, "content-encoding", NULL)) == SUBST_BODY_NONE)
		return false;
	for (size_t i = 0; c->secrets && i < c->secrets->n; i++)
		if (proxy_subst_applies(c, i, host, SUBST_IN_BODY))
			return true;
	return false;
}

/*
 * The whole body (scanned) with the placeholders of --body secrets bound to host replaced, into
 * *ret (a secure buffer), and head's framing field replaced by the new Content-Length (a chunked
 * body goes re-framed). Nothing to replace: *ret stays NULL. Returns 0, -EFBIG (the result is
 * over BUF_SECURE_MAX) or another negative error.
 */
int proxy_body_substitute(struct conn *c, const struct http_head *h, const char *host,
                          struct buf *head, const struct buf *body, struct buf **ret,
                          struct outcome *o)
{
	_cleanup_free_ struct subst_list *l = calloc(1, sizeof(*l));
	_cleanup_buf_secure_ struct buf *out = NULL, *nh = NULL;
	const uint8_t *hp = buf_ptr(head), *f = NULL;
	size_t hn = buf_len(head), fl = 0;
	int r;

	if (!l)
		return -ENOMEM;
	if (subst_collect(c, host, SUBST_IN_BODY, l) == 0)
		return 0;
	out = buf_new_secure(BUF_SECURE_MAX);
	if (!out)
		return -ENOMEM;
	r = subst_body(subst_body_type(http_head_get(h, "content-type", NULL), NULL), buf_ptr(body),
	               buf_len(body), l->v, l->n, out, l->counts);
	if (r == SLATE_ERR_NO_BUFFER_SPACE)
		return -EFBIG;
	if (r <= 0)
		return r;
	for (size_t k = 0; k < l->n; k++)
		if (l->counts[k] > 0 && proxy_plain_refused(c, l->owner[k]))
			return -EPROTO;
	/* proxy_build_head's framing field is the only one (the client's are hop-by-hop) and no field
	 * value holds CR or LF: find it and put the new length in its place. */
	for (size_t i = 0; i + 2 < hn && !f; i++)
		if (hp[i] == '\r' && hp[i + 1] == '\n' &&
		    ((hn - i - 2 >= 16 && memcmp(hp + i + 2, "Content-Length: ", 16) == 0) ||
		     (hn - i - 2 >= 28 &&
		      memcmp(hp + i + 2, "Transfer-Encoding: chunked\r\n", 28) == 0))) {
			const uint8_t *e = memmem(hp + i + 2, hn - i - 2, "\r\n", 2);
			f = hp + i + 2;
			fl = e ? (size_t)(e + 2 - f) : 0;
		}
	nh = buf_new_secure(buf_max(head));
	if (!f || fl == 0 || !nh)
		return f ? -ENOMEM : SLATE_ERR_INTERNAL;
	if ((r = buf_put(nh, hp, (size_t)(f - hp))) < 0 ||
	    (r = buf_putf(nh, "Content-Length: %zu\r\n", buf_len(out))) < 0 ||
	    (r = buf_put(nh, f + fl, hn - (size_t)(f + fl - hp))) < 0 ||
	    (r = buf_reset(head)) < 0 || (r = buf_put(head, buf_ptr(nh), buf_len(nh))) < 0)
		return r;
	subst_note(c, l, SUBST_IN_BODY, o);
	*ret = TAKE_PTR(out);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* AWS Signature Version 4, reading a request: the Authorization field and the presigning
 * parameters parsed, the request checked, its canonical form (URI, query and header
 * canonicalisation). See sigv4.h and doc/sigv4.md. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/sigv4-internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/hex.h"

/* Appends byte c as AWS encodes it: unreserved characters (and '/' when keep_slash) as they
 * are, everything else as %XX with upper-case hex. */
static int put_encoded_byte(struct buf *out, uint8_t c, bool keep_slash)
{
	static const char digits[] = "0123456789ABCDEF";
	char esc[3] = {'%', digits[c >> 4], digits[c & 15]};

	if (is_unreserved(c) || (keep_slash && c == '/'))
		return buf_put_u8(out, c);
	return buf_put(out, esc, 3);
}

/* Appends s AWS-encoded, every byte taken literally ('%' becomes %25). */
int sigv4_put_encoded(struct buf *out, struct span s, bool keep_slash)
{
	size_t run = 0;
	int r;

	for (size_t i = 0; i < s.n; i++) {
		uint8_t c = (uint8_t)s.p[i];
		if (is_unreserved(c) || (keep_slash && c == '/')) {
			run++;
			continue;
		}
		if (run > 0) {
			r = buf_put(out, s.p + i - run, run);
			if (r < 0)
				return r;
			run = 0;
		}
		r = put_encoded_byte(out, c, keep_slash);
		if (r < 0)
			return r;
	}
	return run > 0 ? buf_put(out, s.p + s.n - run, run) : 0;
}

/* Appends s percent-decoded and then AWS-encoded: its canonical form. A '%' not followed by
 * two hex digits is an error. Runs that need no change are copied whole. */
static int put_reencoded(struct buf *out, struct span s, bool keep_slash)
{
	size_t run = 0;
	int r;

	for (size_t i = 0; i < s.n; i++) {
		uint8_t c = (uint8_t)s.p[i];
		if (c != '%' && (is_unreserved(c) || (keep_slash && c == '/'))) {
			run++;
			continue;
		}
		if (run > 0 && (r = buf_put(out, s.p + i - run, run)) < 0)
			return r;
		run = 0;
		if (c == '%') {
			int e = hex_pct_escape(s.p + i, s.n - i);
			if (e < 0)
				return SLATE_ERR_INVALID_FORMAT;
			c = (uint8_t)e;
			i += 2;
		}
		r = put_encoded_byte(out, c, keep_slash);
		if (r < 0)
			return r;
	}
	return run > 0 ? buf_put(out, s.p + s.n - run, run) : 0;
}

/* Percent-decodes s into dst (at most max bytes, NUL-terminated). Returns the length or a
 * negative error. */
int sigv4_decode_to(struct span s, char *dst, size_t max)
{
	return (int)hex_pct_decode(s.p, s.n, dst, max, PCT_STRICT);
}

/* "<key id>/<YYYYMMDD>/<region>/<service>/aws4_request" into a. */
static int parse_credential(struct span v, struct sigv4_auth *a)
{
	struct span key, date, region, service, term, rest;

	rest = span_split(v, '/', &key);
	rest = span_split(rest, '/', &date);
	rest = span_split(rest, '/', &region);
	rest = span_split(rest, '/', &service);
	(void)span_split(rest, '/', &term);
	if (!is_key_id(key) || date.n != 8 || !is_date(date.p) || !is_scope_part(region) ||
	    !is_scope_part(service) || !span_eq(term, "aws4_request") ||
	    term.p + term.n != v.p + v.n)
		return SLATE_ERR_INVALID_FORMAT;
	span_copy(a->key_id, key);
	span_copy(a->date, date);
	span_copy(a->region, region);
	span_copy(a->service, service);
	return 0;
}

/* "a;b;c": lower-case tchar names, strictly ascending, at most SIGV4_MAX_SIGNED_HEADERS. */
static int parse_signed_headers(struct span v, struct sigv4_auth *a)
{
	struct span name, prev = {NULL, 0}, rest = v;
	size_t n = 0;

	if (v.n == 0 || v.n >= sizeof(a->signed_headers))
		return v.n == 0 ? SLATE_ERR_INVALID_FORMAT : SLATE_ERR_TOO_LARGE;
	do {
		rest = span_split(rest, ';', &name);
		if (name.n == 0)
			return SLATE_ERR_INVALID_FORMAT;
		for (size_t i = 0; i < name.n; i++)
			if (!is_tchar(name.p[i]) || (name.p[i] >= 'A' && name.p[i] <= 'Z'))
				return SLATE_ERR_INVALID_FORMAT;
		if (prev.p) {
			size_t m = prev.n < name.n ? prev.n : name.n;
			int c = memcmp(prev.p, name.p, m);
			if (c > 0 || (c == 0 && prev.n >= name.n))
				return SLATE_ERR_INVALID_FORMAT; /* unsorted or repeated */
		}
		if (++n > SIGV4_MAX_SIGNED_HEADERS)
			return SLATE_ERR_TOO_LARGE;
		prev = name;
	} while (rest.p);
	span_copy(a->signed_headers, v);
	a->n_signed_headers = n;
	return 0;
}

/* Another AWS scheme we recognise but cannot re-sign? */
bool sigv4_is_other_aws_scheme(struct span v)
{
	return span_starts(v, "AWS4-") || span_starts(v, "AWS ");
}

int sigv4_parse_authorization(const char *v, size_t len, struct sigv4_auth *ret)
{
	struct sigv4_auth a = {.kind = SIGV4_AUTH_HEADER};
	struct span s = span_of(v, len), part, rest;
	bool have_cred = false, have_sh = false, have_sig = false;
	int r;

	if (!v)
		return SLATE_ERR_INVALID_FORMAT;
	if (len > SIGV4_MAX_AUTHORIZATION)
		return SLATE_ERR_TOO_LARGE;
	if (!span_starts(s, SIGV4_ALGORITHM " "))
		return sigv4_is_other_aws_scheme(s) ? SIGV4_ERR_UNSUPPORTED
		                                    : SLATE_ERR_INVALID_FORMAT;
	rest = span_of(v + strlen(SIGV4_ALGORITHM), len - strlen(SIGV4_ALGORITHM));
	do {
		struct span name, value;
		rest = span_split(rest, ',', &part);
		part = span_trim(part);
		value = span_split(part, '=', &name);
		if (!value.p)
			return SLATE_ERR_INVALID_FORMAT;
		if (span_eq(name, "Credential") && !have_cred) {
			r = parse_credential(value, &a);
			have_cred = true;
		} else if (span_eq(name, "SignedHeaders") && !have_sh) {
			r = parse_signed_headers(value, &a);
			have_sh = true;
		} else if (span_eq(name, "Signature") && !have_sig) {
			r = is_sig_hex(value) ? 0 : SLATE_ERR_INVALID_FORMAT;
			if (r == 0)
				span_copy(a.signature, value);
			have_sig = true;
		} else
			r = SLATE_ERR_INVALID_FORMAT; /* unknown or repeated */
		if (r < 0)
			return r;
	} while (rest.p);
	if (!have_cred || !have_sh || !have_sig)
		return SLATE_ERR_INVALID_FORMAT;
	*ret = a;
	return 0;
}

static const char *const qparam_names[] = {
        [QP_ALGORITHM] = "X-Amz-Algorithm",
        [QP_CREDENTIAL] = "X-Amz-Credential",
        [QP_DATE] = "X-Amz-Date",
        [QP_EXPIRES] = "X-Amz-Expires",
        [QP_SIGNED_HEADERS] = "X-Amz-SignedHeaders",
        [QP_SIGNATURE] = "X-Amz-Signature",
        [QP_TOKEN] = "X-Amz-Security-Token",
        [QP_SIGV2_KEY] = "AWSAccessKeyId",
};

/* Which presigning parameter the raw key k is. Returns the kind, or SLATE_ERR_INVALID_FORMAT
 * for one spelt in another case (two servers could read that differently) or badly encoded. */
int sigv4_qparam_classify(struct span k)
{
	char name[32];
	int n;

	if (k.n >= 3 * sizeof(name)) /* no name of ours encodes that long */
		return QP_OTHER;
	n = sigv4_decode_to(k, name, sizeof(name) - 1);
	if (n == SLATE_ERR_TOO_LARGE)
		return QP_OTHER;
	if (n < 0)
		return n;
	for (size_t i = 1; i < ELEMENTSOF(qparam_names); i++) {
		if (!span_eq_ci(span_of(name, (size_t)n), qparam_names[i]))
			continue;
		if (!span_eq(span_of(name, (size_t)n), qparam_names[i]))
			return SLATE_ERR_INVALID_FORMAT;
		return (int)i;
	}
	return QP_OTHER;
}

/* Splits a raw query at '&' (empty parameters skipped) and each parameter at its first '='. */
static int query_split(struct span q, struct qparam *params, size_t max, size_t *ret_n)
{
	struct span rest = q, part;
	size_t n = 0;

	if (q.n == 0) {
		*ret_n = 0;
		return 0;
	}
	do {
		rest = span_split(rest, '&', &part);
		if (part.n == 0)
			continue;
		if (n >= max)
			return SLATE_ERR_TOO_LARGE;
		params[n].whole = part;
		params[n].value = span_split(part, '=', &params[n].key);
		if (!params[n].value.p)
			params[n].value = span_of(part.p + part.n, 0);
		n++;
	} while (rest.p);
	*ret_n = n;
	return 0;
}

/* query_split into a new array sized for q (at most SIGV4_MAX_QUERY_PARAMS). Free *ret. */
int sigv4_query_parse(struct span q, struct qparam **ret, size_t *ret_n)
{
	size_t max = 1;
	int r;

	for (size_t i = 0; i < q.n && max < SIGV4_MAX_QUERY_PARAMS; i++)
		max += q.p[i] == '&';
	*ret = calloc(max, sizeof(**ret));
	if (!*ret)
		return -ENOMEM;
	r = query_split(q, *ret, max, ret_n);
	if (r < 0) {
		free(*ret);
		*ret = NULL;
	}
	return r;
}

int sigv4_parse_query(const char *q, size_t len, struct sigv4_auth *ret)
{
	struct qparam *params;
	struct sigv4_auth a = {.kind = SIGV4_AUTH_QUERY};
	int seen[ELEMENTSOF(qparam_names)] = {0};
	struct span found[ELEMENTSOF(qparam_names)] = {{0}};
	char val[SIGV4_MAX_AUTHORIZATION];
	size_t n;
	int r, k;

	if (!q && len > 0)
		return SLATE_ERR_INVALID_FORMAT;
	if (len > SIGV4_MAX_TARGET)
		return SLATE_ERR_TOO_LARGE;
	if (len == 0)
		return SIGV4_AUTH_NONE;
	r = sigv4_query_parse(span_of(q, len), &params, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; r >= 0 && i < n; i++) {
		k = sigv4_qparam_classify(params[i].key);
		if (k < 0)
			r = k;
		else if (k != QP_OTHER && seen[k]++)
			r = SLATE_ERR_INVALID_FORMAT; /* repeated: which one would the server take? */
		else
			found[k] = params[i].value;
	}
	free(params);
	if (r < 0)
		return r;
	if (!seen[QP_ALGORITHM]) {
		if (seen[QP_SIGV2_KEY])
			return SIGV4_ERR_UNSUPPORTED;
		/* Presigning parameters without an algorithm: what would a server make of them? */
		for (size_t i = QP_CREDENTIAL; i <= QP_TOKEN; i++)
			if (seen[i])
				return SLATE_ERR_INVALID_FORMAT;
		return SIGV4_AUTH_NONE;
	}
	r = sigv4_decode_to(found[QP_ALGORITHM], val, sizeof(val) - 1);
	if (r < 0)
		return r;
	if (!streq(val, SIGV4_ALGORITHM))
		return sigv4_is_other_aws_scheme(span_of(val, (size_t)r))
		               ? SIGV4_ERR_UNSUPPORTED
		               : SLATE_ERR_INVALID_FORMAT;
	if (!seen[QP_CREDENTIAL] || !seen[QP_DATE] || !seen[QP_EXPIRES] ||
	    !seen[QP_SIGNED_HEADERS] || !seen[QP_SIGNATURE])
		return SLATE_ERR_INVALID_FORMAT;

	r = sigv4_decode_to(found[QP_CREDENTIAL], val, sizeof(val) - 1);
	if (r >= 0)
		r = parse_credential(span_of(val, (size_t)r), &a);
	if (r < 0)
		return r;
	r = sigv4_decode_to(found[QP_DATE], val, sizeof(val) - 1);
	if (r < 0)
		return r;
	if (!is_timestamp(span_of(val, (size_t)r)) || memcmp(val, a.date, 8) != 0)
		return SLATE_ERR_INVALID_FORMAT;
	span_copy(a.timestamp, span_of(val, (size_t)r));
	r = sigv4_decode_to(found[QP_EXPIRES], val, sizeof(val) - 1);
	if (r < 0)
		return r;
	if (r == 0 || r > 6 || val[0] == '0')
		return SLATE_ERR_INVALID_FORMAT;
	a.expires = 0;
	for (int i = 0; i < r; i++) {
		if (!is_digit(val[i]))
			return SLATE_ERR_INVALID_FORMAT;
		a.expires = a.expires * 10 + (val[i] - '0');
	}
	if (a.expires > SIGV4_MAX_EXPIRES)
		return SLATE_ERR_INVALID_FORMAT;
	r = sigv4_decode_to(found[QP_SIGNED_HEADERS], val, sizeof(val) - 1);
	if (r >= 0)
		r = parse_signed_headers(span_of(val, (size_t)r), &a);
	if (r < 0)
		return r;
	r = sigv4_decode_to(found[QP_SIGNATURE], val, sizeof(val) - 1);
	if (r < 0)
		return r;
	if (!is_sig_hex(span_of(val, (size_t)r)))
		return SLATE_ERR_INVALID_FORMAT;
	span_copy(a.signature, span_of(val, (size_t)r));
	a.has_security_token = seen[QP_TOKEN] > 0;
	*ret = a;
	return SIGV4_AUTH_QUERY;
}

bool sigv4_header_is(const struct sigv4_header *h, const char *name)
{
	size_t i;

	for (i = 0; h->name[i] && name[i]; i++)
		if (ascii_lower(h->name[i]) != ascii_lower(name[i]))
			return false;
	return h->name[i] == 0 && name[i] == 0;
}

/* The only header called name: NULL when none, *ret_count says how many there are. */
const char *sigv4_header_get(const struct sigv4_request *req, const char *name, size_t *ret_count)
{
	const char *v = NULL;
	size_t count = 0;

	for (size_t i = 0; i < req->n_headers; i++)
		if (sigv4_header_is(&req->headers[i], name)) {
			if (!v)
				v = req->headers[i].value;
			count++;
		}
	if (ret_count)
		*ret_count = count;
	return v;
}

/* Bounds and characters of what the proxy hands us. */
int sigv4_request_check(const struct sigv4_request *req)
{
	size_t n;

	if (!req || !req->method || !req->target || (!req->headers && req->n_headers > 0))
		return SLATE_ERR_INVALID_FORMAT;
	if (req->n_headers > SIGV4_MAX_HEADERS)
		return SLATE_ERR_TOO_LARGE;
	n = strnlen(req->method, 33);
	if (n == 0 || n > 32)
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < n; i++)
		if (!is_tchar(req->method[i]))
			return SLATE_ERR_INVALID_FORMAT;
	n = strnlen(req->target, SIGV4_MAX_TARGET + 1);
	if (n > SIGV4_MAX_TARGET)
		return SLATE_ERR_TOO_LARGE;
	if (n == 0 || req->target[0] != '/' || memchr(req->target, '#', n) ||
	    memchr(req->target, '\r', n) || memchr(req->target, '\n', n))
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct sigv4_header *h = &req->headers[i];
		if (!h->name || !h->value)
			return SLATE_ERR_INVALID_FORMAT;
		n = strnlen(h->name, 257);
		if (n == 0 || n > 256)
			return SLATE_ERR_INVALID_FORMAT;
		for (size_t j = 0; j < n; j++)
			if (!is_tchar(h->name[j]))
				return SLATE_ERR_INVALID_FORMAT;
		n = strnlen(h->value, SIGV4_MAX_HEADER_VALUE + 1);
		if (n > SIGV4_MAX_HEADER_VALUE)
			return SLATE_ERR_TOO_LARGE;
		if (memchr(h->value, '\r', n) || memchr(h->value, '\n', n))
			return SLATE_ERR_INVALID_FORMAT;
	}
	if (req->body_sha256 &&
	    (strnlen(req->body_sha256, 65) != 64 || !hex_is(req->body_sha256, 64, HEX_LOWER)))
		return SLATE_ERR_INVALID_FORMAT;
	return 0;
}

void sigv4_target_split(const char *target, struct span *path, struct span *query)
{
	struct span t = span_of(target, strlen(target));
	*query = span_split(t, '?', path);
}

bool sigv4_service_is_s3(const char *service)
{
	return streq(service, "s3") || streq(service, "s3-object-lambda") ||
	       streq(service, "s3-outposts") || streq(service, "s3express");
}

/* S3: the path as is, each byte in its canonical encoding (not encoded twice). Others: dot
 * segments and empty segments removed (botocore's remove_dot_segments), then every byte of the
 * path as sent encoded, so an escape on the wire is encoded a second time. */
static int canon_path(struct buf *out, struct span path, bool s3)
{
	struct span *segs, seg, rest;
	size_t k = 0;
	int r = 0;

	if (s3)
		return path.n == 0 ? buf_put_u8(out, '/') : put_reencoded(out, path, true);

	segs = malloc((path.n / 2 + 2) * sizeof(*segs));
	if (!segs)
		return -ENOMEM;
	rest = path;
	do {
		rest = span_split(rest, '/', &seg);
		if (seg.n == 0 || span_eq(seg, "."))
			continue;
		if (span_eq(seg, "..")) {
			if (k > 0)
				k--;
			continue;
		}
		segs[k++] = seg;
	} while (rest.p);
	r = buf_put_u8(out, '/');
	for (size_t i = 0; r >= 0 && i < k; i++) {
		if (i > 0)
			r = buf_put_u8(out, '/');
		if (r >= 0)
			r = sigv4_put_encoded(out, segs[i], false);
	}
	if (r >= 0 && k > 0 && path.n > 0 && path.p[path.n - 1] == '/')
		r = buf_put_u8(out, '/');
	free(segs);
	return r;
}

struct qsort_item {
	uint32_t off, klen, vlen;
};

static int qitem_cmp(const void *a, const void *b, void *base)
{
	const struct qsort_item *x = a, *y = b;
	const uint8_t *p = base;
	size_t m = x->klen < y->klen ? x->klen : y->klen;
	int c = memcmp(p + x->off, p + y->off, m);

	if (c != 0 || x->klen != y->klen)
		return c != 0 ? c : (x->klen < y->klen ? -1 : 1);
	m = x->vlen < y->vlen ? x->vlen : y->vlen;
	c = memcmp(p + x->off + x->klen, p + y->off + y->klen, m);
	if (c != 0 || x->vlen == y->vlen)
		return c;
	return x->vlen < y->vlen ? -1 : 1;
}

/* Parameters decoded and AWS-encoded, sorted by name then value, "k=v" joined by '&'. */
static int canon_query(struct buf *out, struct span query, bool presigned)
{
	_cleanup_free_ struct qparam *params = NULL;
	_cleanup_free_ struct qsort_item *items = NULL;
	_cleanup_buf_ struct buf *scratch = NULL;
	size_t n, m = 0;
	int r;

	if (query.n == 0)
		return 0;
	r = sigv4_query_parse(query, &params, &n);
	if (r < 0)
		return r;
	items = calloc(n + 1, sizeof(*items));
	scratch = buf_new(3 * SIGV4_MAX_TARGET);
	if (!items || !scratch || buf_reserve(scratch, query.n + 64, &(uint8_t *){NULL}) < 0)
		return -ENOMEM;
	(void)buf_reset(scratch);
	for (size_t i = 0; i < n; i++) {
		size_t off = buf_len(scratch), klen;
		if (presigned && sigv4_qparam_classify(params[i].key) == QP_SIGNATURE)
			continue;
		r = put_reencoded(scratch, params[i].key, false);
		if (r < 0)
			return r;
		klen = buf_len(scratch) - off;
		r = put_reencoded(scratch, params[i].value, false);
		if (r < 0)
			return r;
		items[m++] = (struct qsort_item){(uint32_t)off, (uint32_t)klen,
		                                 (uint32_t)(buf_len(scratch) - off - klen)};
	}
	qsort_r(items, m, sizeof(*items), qitem_cmp, (void *)buf_ptr(scratch));
	for (size_t i = 0; i < m; i++) {
		const uint8_t *p = buf_ptr(scratch) + items[i].off;
		if ((i > 0 && (r = buf_put_u8(out, '&')) < 0) ||
		    (r = buf_put(out, p, items[i].klen)) < 0 || (r = buf_put_u8(out, '=')) < 0 ||
		    (r = buf_put(out, p + items[i].klen, items[i].vlen)) < 0)
			return r;
	}
	return 0;
}

/* A header value trimmed, runs of spaces and tabs collapsed into one space. */
static int put_header_value(struct buf *out, const char *v)
{
	struct span s = span_trim(span_of(v, strlen(v)));
	size_t run = 0;
	int r;

	for (size_t i = 0; i < s.n; i++) {
		if (!is_ows(s.p[i])) {
			run++;
			continue;
		}
		if (run > 0 && (r = buf_put(out, s.p + i - run, run)) < 0)
			return r;
		run = 0;
		if (!is_ows(s.p[i - 1]) && (r = buf_put_u8(out, ' ')) < 0)
			return r;
	}
	return run > 0 ? buf_put(out, s.p + s.n - run, run) : 0;
}

static int split_signed(const char *sh, struct span *names, size_t max, size_t *ret_n)
{
	struct span rest = span_of(sh, strlen(sh)), name;
	size_t n = 0;

	do {
		rest = span_split(rest, ';', &name);
		if (name.n == 0)
			return SLATE_ERR_INVALID_FORMAT;
		if (n >= max)
			return SLATE_ERR_TOO_LARGE;
		names[n++] = name;
	} while (rest.p);
	*ret_n = n;
	return 0;
}

static bool header_is_span(const struct sigv4_header *h, struct span name)
{
	size_t i;

	for (i = 0; i < name.n && h->name[i]; i++)
		if (ascii_lower(h->name[i]) != name.p[i])
			return false;
	return i == name.n && h->name[i] == 0;
}

/* Appends the canonical headers. token, when set, is the value x-amz-security-token has as
 * forwarded (the real session token), whether or not the request carries the field. */
static int canon_headers(struct buf *out, const struct sigv4_request *req,
                         const char *signed_headers, const struct span *token)
{
	struct span names[SIGV4_MAX_SIGNED_HEADERS];
	size_t n;
	int r;

	r = split_signed(signed_headers, names, ELEMENTSOF(names), &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		bool found = false;
		if ((r = buf_put(out, names[i].p, names[i].n)) < 0 ||
		    (r = buf_put_u8(out, ':')) < 0)
			return r;
		if (token && span_eq(names[i], "x-amz-security-token")) {
			if ((r = buf_put(out, token->p, token->n)) < 0 ||
			    (r = buf_put_u8(out, '\n')) < 0)
				return r;
			continue;
		}
		for (size_t j = 0; j < req->n_headers; j++) {
			if (!header_is_span(&req->headers[j], names[i]))
				continue;
			if (found && (r = buf_put_u8(out, ',')) < 0)
				return r;
			if ((r = put_header_value(out, req->headers[j].value)) < 0)
				return r;
			found = true;
		}
		if (!found)
			return SLATE_ERR_INVALID_FORMAT; /* signed but not sent */
		if ((r = buf_put_u8(out, '\n')) < 0)
			return r;
	}
	return 0;
}

/* The canonical request of a request already checked (sigv4_request_check). */
int sigv4_canonical_request_token(const struct sigv4_request *req, const struct sigv4_canon *c,
                                  const struct span *token, struct buf *out)
{
	struct span path, query;
	int r;

	sigv4_target_split(req->target, &path, &query);
	if ((r = buf_put(out, req->method, strlen(req->method))) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 || (r = canon_path(out, path, c->s3)) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 || (r = canon_query(out, query, c->presigned)) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 ||
	    (r = canon_headers(out, req, c->signed_headers, token)) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 ||
	    (r = buf_put(out, c->signed_headers, strlen(c->signed_headers))) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 ||
	    (r = buf_put(out, c->payload_hash, strlen(c->payload_hash))) < 0)
		return r;
	return 0;
}

int sigv4_canonical_request(const struct sigv4_request *req, const struct sigv4_canon *c,
                            struct buf *out)
{
	int r;

	if (!c || !c->signed_headers || !c->payload_hash)
		return SLATE_ERR_INVALID_FORMAT;
	r = sigv4_request_check(req);
	if (r < 0)
		return r;
	return sigv4_canonical_request_token(req, c, NULL, out);
}

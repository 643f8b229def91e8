/* SPDX-License-Identifier: GPL-2.0-or-later */
/* AWS SigV4 re-signing of requests as the proxy forwards them (proxy/sigv4.h, doc/sigv4.md). */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "proxy/internal.h"
#include "util/error.h"

void proxy_resign_done(struct resign *rs)
{
	sigv4_resigned_free(rs->res);
}

/* Hosts compared as proxy_bound_to compares them (host_matches on the stored, normalised binding),
 * so that the re-signer and the leak scanner agree on where an AWS secret is bound. */
static bool resign_host_bound(const char *bound, const char *host)
{
	return bound && host_matches(host, bound);
}

/*
 * Whether h may carry an AWS signature (sigv4_detect decides): an Authorization "AWS..." field
 * or presigning parameters in the query. Other requests never reach the re-signer, whose limits
 * (SIGV4_MAX_*) are narrower than HTTP's. What slips past this (a presigning parameter name
 * percent-encoded) goes as it is: to a bound host its placeholder is no leak and is refused by
 * the server; to any other host the scanner refuses it as a leak.
 */
static bool resign_candidate(const struct http_head *h, const char *origin)
{
	const char *q = strchr(origin, '?');

	for (size_t i = 0; i < h->n_fields; i++)
		if (strcasecmp(h->fields[i].name, "authorization") == 0 &&
		    strncasecmp(h->fields[i].value, "AWS", 3) == 0)
			return true;
	return q && (strcasestr(q, "x-amz-") || strcasestr(q, "awsaccesskeyid"));
}

static int resign_call(struct resign *rs)
{
	sigv4_resigned_free(TAKE_PTR(rs->res));
	return sigv4_resign(&rs->req, sigv4_lookup_secret_set, &rs->lookup, &rs->res);
}

/*
 * Re-signs h when it carries an AWS signature with the placeholder key id of a secret bound to
 * host. Returns 0 (rs->res set when re-signed; rs->need_body_hash when the body must be hashed
 * first, in proxy_forward_request), or a negative error to refuse the request with (proxy_resign_refuse):
 * nothing signed with a placeholder that cannot be re-signed is forwarded. A key id that is no
 * placeholder bound here is left alone (the guest's own key; an unbound placeholder is the leak
 * scanner's).
 */
int proxy_resign_start(struct conn *c, const struct http_head *h, const char *origin,
                       const char *host, bool upgrade, struct outcome *o, struct resign *rs)
{
	size_t n = 0;
	int r;

	if (!c->secrets || !resign_candidate(h, origin))
		return 0;
	for (size_t i = 0; i < h->n_fields && n < HTTP_MAX_FIELDS; i++)
		if (!proxy_hop_by_hop(h, h->fields[i].name, upgrade))
			rs->fields[n++] =
			        (struct sigv4_header){h->fields[i].name, h->fields[i].value};
	if (h->framing == HTTP_BODY_LENGTH) {
		(void)snprintf(rs->length, sizeof(rs->length), "%llu",
		               (unsigned long long)h->content_length);
		rs->fields[n++] = (struct sigv4_header){"Content-Length", rs->length};
	} else if (h->framing == HTTP_BODY_CHUNKED)
		rs->fields[n++] = (struct sigv4_header){"Transfer-Encoding", "chunked"};
	rs->req = (struct sigv4_request){
	        .method = h->method, .target = origin, .headers = rs->fields, .n_headers = n};
	rs->lookup = (struct sigv4_secret_lookup){c->secrets, host, resign_host_bound};
	rs->origin = origin;
	rs->upgrade = upgrade;
	rs->o = o;
	r = resign_call(rs);
	if (r == SIGV4_ERR_NEED_BODY_HASH &&
	    (h->framing == HTTP_BODY_NONE ||
	     (h->framing == HTTP_BODY_LENGTH && h->content_length == 0))) {
		rs->req.body_sha256 = SIGV4_EMPTY_SHA256;
		r = resign_call(rs);
	}
	if (r == SIGV4_ERR_NEED_BODY_HASH) {
		if (h->framing == HTTP_BODY_LENGTH && h->content_length > PROXY_BODY_BUFFER)
			return -EFBIG;
		rs->need_body_hash = true;
		return 0;
	}
	if (r == SIGV4_AUTH_NONE || r == SIGV4_ERR_UNKNOWN_KEY)
		return 0;
	return r < 0 ? r : 0;
}

/* Fills o with the refusal of a request that could not be re-signed (error r). */
void proxy_resign_refuse(int r, struct outcome *o)
{
	if (r == -EFBIG) {
		o->status = 413;
		(void)snprintf(
		        o->refused, sizeof(o->refused),
		        "an AWS request signed without x-amz-content-sha256 must be re-signed "
		        "over its body's hash, and slate hashes bodies up to %u KiB only",
		        PROXY_BODY_BUFFER / 1024);
		return;
	}
	switch (r) {
	case SLATE_ERR_INVALID_FORMAT:
	case SLATE_ERR_TOO_LARGE:
	case SLATE_ERR_SIZE_MISMATCH:
	case SLATE_ERR_MESSAGE_INCOMPLETE:
		o->status = 400; /* malformed: a signature, an aws-chunked body */
		break;
	default:
		o->status = 403;
	}
	(void)snprintf(o->refused, sizeof(o->refused), "cannot re-sign this AWS request: %s",
	               sigv4_strerror(r));
}

/* The body of a request signed without x-amz-content-sha256, all of it in body: re-signs over
 * its hash and builds the head again. Returns 0 or a negative error. */
int proxy_resign_body(struct conn *c, const struct http_head *h, struct resign *rs,
                      const struct buf *body, struct buf *head, const char *host,
                      struct leak_info *leak)
{
	int r;

	r = sigv4_sha256_hex(body ? (const void *)buf_ptr(body) : "", body ? buf_len(body) : 0,
	                     rs->body_sha256);
	if (r < 0)
		return r;
	rs->req.body_sha256 = rs->body_sha256;
	r = resign_call(rs);
	if (r < 0)
		return r;
	rs->need_body_hash = false;
	if (!rs->res)
		return SLATE_ERR_INTERNAL; /* cannot be: it asked for the hash */
	(void)buf_reset(head);
	r = proxy_build_head(c, h, rs->origin, host, rs->upgrade, head, leak, rs->o, rs->res);
	if (r >= 0 && leak->pat >= 0)
		r = -EIO; /* scanned clean before: cannot be */
	return r;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One request that is not CONNECT: where it goes, its head, its body, its response. */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "proxy/internal.h"
#include "util/error.h"
#include "util/time.h"

/*
 * Splits an absolute-form target "scheme://authority/path?query" into host, port and the
 * origin-form path. Returns the host's kind, or -EINVAL (userinfo, fragment, bad authority).
 */
static int parse_absolute(const char *target, const char *scheme, uint16_t default_port, char *host,
                          uint16_t *port, const char **ret_path)
{
	size_t sl = strlen(scheme), alen;
	const char *auth, *end;

	if (strncasecmp(target, scheme, sl) != 0 || strncmp(target + sl, "://", 3) != 0)
		return -EINVAL;
	auth = target + sl + 3;
	end = auth + strcspn(auth, "/?#");
	if (*end == '#' || strchr(target, '#'))
		return -EINVAL;
	alen = (size_t)(end - auth);
	if (memchr(auth, '@', alen))
		return -EINVAL; /* userinfo: "http://bound.example@evil.test/" */
	*ret_path = end;
	return host_split_authority(auth, alen, default_port, host, HOST_BUF, port);
}

/*
 * Where h goes: the tunnel's target, or its absolute-form authority (allowed by the policy),
 * into host and port, and its origin-form target into origin; the Host field must name the
 * host actually connected to. Returns 0, 1 to refuse it with o (status and refused filled), or
 * -1 when it was answered already.
 */
static int request_route(struct conn *c, const struct http_head *h, char host[HOST_BUF],
                         uint16_t *port, char *origin, size_t origin_len, struct outcome *o)
{
	char hhost[HOST_BUF];
	const char *path = h->target;
	uint16_t hport, default_port = c->in_tunnel ? 443 : 80;

	if (c->in_tunnel) {
		(void)snprintf(host, HOST_BUF, "%s", c->t_host);
		*port = c->t_port;
		if (h->target[0] != '/' && !streq(h->target, "*")) {
			char ahost[HOST_BUF];
			uint16_t aport;
			if (parse_absolute(h->target, "https", 443, ahost, &aport, &path) < 0) {
				proxy_respond(c, 400,
				              "slate egress proxy: malformed request target");
				return -1;
			}
			if (!streq(ahost, host) || aport != *port) {
				o->status = 421;
				(void)snprintf(o->refused, sizeof(o->refused),
				               "request target %s does not match the tunnel to %s",
				               ahost, host);
				return 1;
			}
		}
	} else {
		if (parse_absolute(h->target, "http", 80, host, port, &path) < 0) {
			o->status = 400;
			(void)snprintf(o->refused, sizeof(o->refused),
			               "not a proxy request: send absolute-form http:// targets or "
			               "CONNECT");
			return 1;
		}
		if (!egress_policy_allows_host(c->policy, host, NULL)) {
			o->status = 403;
			(void)snprintf(o->refused, sizeof(o->refused),
			               "%s is not allowed by the egress policy of %s", host, c->ws);
			return 1;
		}
	}
	if (!*path)
		path = streq(h->method, "OPTIONS") ? "*" : "/";
	(void)snprintf(origin, origin_len, "%s", path);

	if (!h->host ||
	    host_split_authority(h->host, strlen(h->host), default_port, hhost, sizeof(hhost),
	                         &hport) < 0 ||
	    !streq(hhost, host) || hport != *port) {
		o->status = 421;
		(void)snprintf(o->refused, sizeof(o->refused), "Host does not match %s %s:%u",
		               c->in_tunnel ? "the CONNECT target" : "the request target", host,
		               (unsigned)*port);
		return 1;
	}
	return 0;
}

/* Fills o with the refusal of a head that proxy_build_head refused (r < 0; rr: proxy_resign_start's
 * result). Returns 1 to refuse it with o, 0 to close without an answer. */
static int head_refusal(struct conn *c, int r, int rr, const char *host, struct outcome *o)
{
	if (rr < 0) {
		proxy_resign_refuse(rr, o);
		return 1;
	}
	switch (r) {
	case -EPROTO:
		o->status = 403;
		o->n_substituted = 0; /* nothing was sent: the audit event says so */
		proxy_plain_refusal(c, host, o->refused, sizeof(o->refused));
		return 1;
	case -EINVAL:
		o->status = 502;
		(void)snprintf(o->refused, sizeof(o->refused),
		               "a secret's value cannot be sent in a header field");
		return 1;
	default:
		return 0;
	}
}

/* Fills o with the refusal of a request that proxy_forward_request did not send whole (r, an enum
 * fwd_result other than FWD_OK and FWD_LEAK), and closes the upstream connection: what went
 * before must never be completed. Returns 1 to refuse it with o, 0 to close without an answer. */
static int forward_refusal(struct conn *c, int r, const struct resign *rs, const struct up_error *e,
                           struct outcome *o)
{
	proxy_up_close(c);
	switch (r) {
	case FWD_RESIGN:
		proxy_resign_refuse(rs->err, o);
		return 1;
	case FWD_BAD_BODY:
		o->status = 400;
		(void)snprintf(o->refused, sizeof(o->refused), "malformed chunked body");
		return 1;
	case FWD_UPSTREAM:
		if (c->plain_secret >= 0)
			o->n_substituted = 0; /* refused for plain HTTP: nothing was sent */
		o->status = e->status ? e->status : 502;
		(void)snprintf(o->refused, sizeof(o->refused), "%s", e->msg);
		return 1;
	default:
		return 0;
	}
}

/* Reads the next response head from upstream into *ret. Returns 0, or < 0 with o filled for
 * the refusal (the upstream connection closed). */
static int read_response(struct conn *c, const struct http_head *h, struct http_head **ret,
                         struct outcome *o)
{
	struct http_reader rd = {0};
	struct slate_error err = {0};
	int r;

	for (;;) {
		ssize_t n;
		r = http_parse_response(&rd, c->up.in, h->method, ret, NULL, &err);
		if (r != 0)
			break;
		n = proxy_io_fill(&c->up, PROXY_UPSTREAM_TIMEOUT_MS);
		if (n <= 0) {
			r = n == -ETIMEDOUT ? -ETIMEDOUT : -EPIPE;
			break;
		}
	}
	if (r >= 0)
		return 0;
	proxy_up_close(c);
	o->status = r == -ETIMEDOUT ? 504 : 502;
	(void)snprintf(o->refused, sizeof(o->refused), "%s",
	               r == SLATE_ERR_INVALID_FORMAT ? slate_error_text(&err)
	               : r == -ETIMEDOUT             ? "the server did not answer in time"
	                                             : "the server closed the connection");
	return r;
}

/*
 * The response to h: interim ones, then the final one (or a 101 and both directions relayed,
 * scanned). Returns 1 to read another request on this connection, 0 to close, or -1 to refuse
 * it with o.
 */
static int relay_response(struct conn *c, const struct http_head *h, const char *host,
                          uint16_t port, const char *origin, bool upgrade, struct outcome *o,
                          double t0)
{
	bool keep = h->keep_alive;

	for (;;) {
		_cleanup_(http_head_freep) struct http_head *resp = NULL;

		if (read_response(c, h, &resp, o) < 0)
			return -1;
		o->status = resp->status;
		if (resp->status == 101) {
			struct leak_info leak = {.pat = -1};
			uint64_t up = 0, down = 0;
			int r;
			if (!upgrade ||
			    proxy_write_response_head(c, resp, false, &o->received) < 0) {
				proxy_up_close(c);
				return 0;
			}
			r = proxy_relay_both(c, host, &up, &down, &leak);
			o->sent += up;
			o->received += down;
			proxy_up_close(c);
			if (r == FWD_LEAK) {
				proxy_report_leak(c, leak.pat, leak.where, host, port, NULL, NULL,
				                  false);
				return 0;
			}
			proxy_audit_request(c, h->method, origin, host, port, o, t0);
			return 0;
		}
		if (resp->status < 200) {
			if (proxy_write_response_head(c, resp, false, &o->received) < 0)
				return proxy_up_close(c), 0;
			continue;
		}
		keep = keep && resp->keep_alive;
		if (proxy_write_response_head(c, resp, !keep, &o->received) < 0 ||
		    proxy_relay_body(c, resp, &o->received) < 0) {
			proxy_up_close(c);
			proxy_audit_request(c, h->method, origin, host, port, o, t0);
			return 0;
		}
		if (!resp->keep_alive)
			proxy_up_close(c);
		break;
	}
	proxy_audit_request(c, h->method, origin, host, port, o, t0);
	return keep ? 1 : 0;
}

int proxy_handle_request(struct conn *c, struct http_head *h)
{
	_cleanup_buf_secure_ struct buf *head = NULL;
	char host[HOST_BUF] = "", origin[HTTP_MAX_REQUEST_LINE + 2] = "";
	uint16_t port = 0;
	struct outcome o = {0};
	struct leak_info leak = {.pat = -1};
	struct up_error e = {0};
	_cleanup_(proxy_resign_done) struct resign rs = {0};
	bool upgrade;
	double t0 = time_mono_s();
	int r, rr;

	c->plain_secret = -1;
	r = request_route(c, h, host, &port, origin, sizeof(origin), &o);
	if (r < 0)
		return 0;
	if (r > 0)
		goto refuse;

	upgrade = h->upgrade && http_list_has(http_head_get(h, "upgrade", NULL), "websocket");
	head = buf_new(HTTP_MAX_HEAD + 1024);
	if (!head)
		return 0;
	/* An AWS request signed with a placeholder bound here: re-signed (doc/sigv4.md). A leak
	 * in it is still reported first. */
	rr = proxy_resign_start(c, h, origin, host, upgrade, &o, &rs);
	o.sigv4 = rs.res;
	r = proxy_build_head(c, h, origin, host, upgrade, head, &leak, &o, rr < 0 ? NULL : rs.res);
	if (leak.pat >= 0) {
		proxy_report_leak(c, leak.pat, leak.where, host, port, h->method, origin, true);
		return 0;
	}
	if (rr < 0 || r < 0) {
		if (head_refusal(c, r, rr, host, &o))
			goto refuse;
		return 0;
	}

	r = proxy_forward_request(c, h, head, host, port, &leak, &e, &o.sent, &rs, &o);
	buf_free_secure(TAKE_PTR(head));
	o.sigv4 = rs.res;
	if (r == FWD_LEAK) {
		proxy_up_close(c); /* what went before the leak must never be completed */
		proxy_report_leak(c, leak.pat, leak.where, host, port, h->method, origin, true);
		return 0;
	}
	if (r != FWD_OK) {
		if (forward_refusal(c, r, &rs, &e, &o))
			goto refuse;
		return 0;
	}
	r = relay_response(c, h, host, port, origin, upgrade, &o, t0);
	if (r >= 0)
		return r;

refuse:
	proxy_respond(c, o.status, "slate egress proxy: %s", o.refused);
	proxy_audit_request(c, h->method, origin[0] ? origin : h->target, host[0] ? host : "-",
	                    port, &o, t0);
	return 0;
}

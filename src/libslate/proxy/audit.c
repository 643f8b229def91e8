/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Audit events of requests and tunnels, and leak reports. */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proxy/internal.h"
#include "util/json.h"
#include "util/time.h"

void proxy_redact_path(const char *target, char *out, size_t len)
{
	const char *q = strchr(target, '?');
	size_t o = 0;

	if (len == 0)
		return;
#define PUT(ch)                                                                                    \
	do {                                                                                       \
		if (o + 1 < len)                                                                   \
			out[o++] = (ch);                                                           \
	} while (0)
	for (const char *p = target; *p && (!q || p <= q); p++)
		PUT(*p);
	if (q) {
		bool in_value = false;
		for (const char *p = q + 1; *p; p++) {
			if (*p == '&') {
				in_value = false;
				PUT('&');
			} else if (*p == '=' && !in_value) {
				in_value = true;
				PUT('=');
				PUT('*');
			} else if (!in_value)
				PUT(*p);
		}
	}
#undef PUT
	out[o] = '\0';
}

/* {"KEY": ["header", "body", "query"]}: where each substituted secret went (names only). */
static struct json_object *substituted_in_json(const struct outcome *o)
{
	static const char *const places[] = {"header", "body", "query"};
	struct json_object *in = json_object_new_object();

	for (size_t i = 0; in && i < o->n_substituted; i++) {
		struct json_object *w = json_object_new_array();
		for (unsigned b = 0; w && b < ELEMENTSOF(places); b++)
			if (o->substituted_in[i] & (1u << b))
				(void)json_object_array_add(w, json_object_new_string(places[b]));
		(void)json_add(in, o->substituted[i], w);
	}
	return in;
}

void proxy_audit_request(struct conn *c, const char *method, const char *target, const char *host,
                         uint16_t port, const struct outcome *o, double t0)
{
	_cleanup_json_ struct json_object *ev = json_object_new_object();
	struct json_object *subs = json_object_new_array();
	char path[2048], latency[32];
	double lat = (time_mono_s() - t0) * 1000.0;

	(void)snprintf(latency, sizeof(latency), "%.3f", lat);
	if (!c->p->hooks.audit || !ev || !subs) {
		json_object_put(subs);
		return;
	}
	if (target)
		proxy_redact_path(target, path, sizeof(path));
	for (size_t i = 0; i < o->n_substituted; i++)
		(void)json_object_array_add(subs, json_object_new_string(o->substituted[i]));
	if ((method && json_add_string(ev, "method", method) < 0) ||
	    json_add_string(ev, "host", host) < 0 || json_add_int64(ev, "port", port) < 0 ||
	    (target && json_add_string(ev, "path", path) < 0) ||
	    json_add_int64(ev, "status", o->status) < 0 ||
	    json_add_int64(ev, "bytes_sent", (int64_t)o->sent) < 0 ||
	    json_add_int64(ev, "bytes_received", (int64_t)o->received) < 0 ||
	    json_add(ev, "latency_ms", json_object_new_double_s(lat, latency)) < 0 ||
	    json_add_bool(ev, "tls", c->in_tunnel) < 0 || json_add(ev, "substituted", subs) < 0 ||
	    (o->n_substituted > 0 && json_add(ev, "substituted_in", substituted_in_json(o)) < 0))
		return;
	if (c->u_addr[0])
		(void)json_add_string(ev, "address", c->u_addr);
	if (o->refused[0])
		(void)json_add_string(ev, "refused", o->refused);
	if (o->sigv4) {
		/* Never the real key id: its masked form only. */
		struct json_object *sv = json_object_new_object();
		if (!sv || json_add_string(sv, "service", o->sigv4->service) < 0 ||
		    json_add_string(sv, "region", o->sigv4->region) < 0 ||
		    json_add_string(sv, "key_id", o->sigv4->key_id_masked) < 0 ||
		    json_add_string(sv, "payload", o->sigv4->payload) < 0 ||
		    json_add_string(sv, "auth",
		                    o->sigv4->kind == SIGV4_AUTH_QUERY ? "presigned" : "header") <
		            0)
			json_object_put(sv);
		else
			(void)json_add(ev, "sigv4", sv);
	}
	c->p->hooks.audit(c->p->hooks.userdata, c->ws, "egress", ev);
}

/* Reports a leak (hook, audit) and answers 451 when the client speaks HTTP. */
void proxy_report_leak(struct conn *c, long pat, const char *where, const char *host, uint16_t port,
                       const char *method, const char *target, bool answer)
{
	const struct pat *pt = &c->pats[pat];
	const struct secret *s = &c->secrets->v[pt->secret];
	const char *enc = tripwire_enc_name(pt->enc);
	char path[2048] = "", hosts[1024] = "";
	size_t n_bound = 0, o = 0;

	c->leaked = true;
	if (target)
		proxy_redact_path(target, path, sizeof(path));
	for (char **h = c->bound[pt->secret]; h && *h; h++, n_bound++) {
		int k;
		if (o >= sizeof(hosts) - 1)
			continue;
		k = snprintf(hosts + o, sizeof(hosts) - o, "%s%s", n_bound ? ", " : "", *h);
		o = k < 0 ? o : o + (size_t)k;
	}
	struct proxy_leak l = {
	        .workspace = c->ws,
	        .host = host,
	        .port = port,
	        .secret = s->key,
	        .value_name = s->values[pt->value].name,
	        .where = where,
	        .encoding = enc,
	        .method = method,
	        .path = target ? path : NULL,
	        .bound_hosts = (const char *const *)c->bound[pt->secret],
	        .n_bound_hosts = n_bound,
	};
	if (c->p->hooks.leak)
		c->p->hooks.leak(c->p->hooks.userdata, &l);
	if (c->p->hooks.audit) {
		_cleanup_json_ struct json_object *ev = json_object_new_object();
		struct json_object *bh = json_object_new_array();
		for (char **h = c->bound[pt->secret]; bh && h && *h; h++)
			(void)json_object_array_add(bh, json_object_new_string(*h));
		if (ev && bh && json_add_string(ev, "host", host) >= 0 &&
		    json_add_int64(ev, "port", port) >= 0 &&
		    json_add_string(ev, "secret", s->key) >= 0 &&
		    json_add_string(ev, "where", where) >= 0 &&
		    (!enc || json_add_string(ev, "encoding", enc) >= 0) &&
		    json_add(ev, "bound_hosts", bh) >= 0 &&
		    (!method || json_add_string(ev, "method", method) >= 0) &&
		    (!target || json_add_string(ev, "path", path) >= 0) &&
		    json_add_int64(ev, "status", answer ? 451 : 0) >= 0 &&
		    json_add_bool(ev, "tls", c->in_tunnel) >= 0)
			c->p->hooks.audit(c->p->hooks.userdata, c->ws, "leak", ev);
		else if (!ev || !bh)
			json_object_put(bh);
	}
	if (answer)
		proxy_respond(
		        c, 451,
		        "slate blocked this request: it carried the placeholder of the secret %s "
		        "(%s%sin the %s) towards %s, but that secret is only sent to %s. Nothing "
		        "was "
		        "forwarded. The workspace %s is now marked compromised and is paused; it "
		        "cannot start again until its disk and home are wiped (slate wipe %s).",
		        s->key, enc ? enc : "", enc ? ", " : "", where, host,
		        hosts[0] ? hosts : "no host", c->ws, c->ws);
	if (c->p->hooks.contain)
		c->p->hooks.contain(c->p->hooks.userdata, &l);
}

void proxy_audit_tunnel(struct conn *c, const char *kind, unsigned status, uint64_t up,
                        uint64_t down, double t0, const char *refused)
{
	struct outcome o = {.status = status, .sent = up, .received = down};
	char target[HOST_BUF + 8];

	host_format_authority(c->t_host, c->t_port, target, sizeof(target));
	if (refused)
		(void)snprintf(o.refused, sizeof(o.refused), "%s", refused);
	(void)kind;
	proxy_audit_request(c, "CONNECT", NULL, c->t_host, c->t_port, &o, t0);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* CONNECT: the target scanned and checked, then an intercepted TLS tunnel (both handshakes on
 * a thread of their own) or an opaque one, scanned as it passes. */

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy/ca.h"
#include "proxy/internal.h"
#include "util/time.h"

int proxy_sni_cb(SSL *ssl, int *alert, void *arg)
{
	struct conn *c = SSL_get_app_data(ssl);
	const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	char norm[HOST_BUF];

	(void)arg;
	if (!c || !sni)
		return SSL_TLSEXT_ERR_NOACK; /* no SNI: the CONNECT target counts */
	if (host_normalize(sni, norm, sizeof(norm)) < 0 || !streq(norm, c->t_host)) {
		c->sni_mismatch = true;
		(void)snprintf(c->sni, sizeof(c->sni), "%s",
		               host_normalize(sni, norm, sizeof(norm)) < 0 ? "(invalid)" : norm);
		*alert = SSL_AD_UNRECOGNIZED_NAME;
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	}
	return SSL_TLSEXT_ERR_OK;
}

int proxy_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                  const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char h11[] = "\x08http/1.1";

	(void)ssl;
	(void)arg;
	if (SSL_select_next_proto((unsigned char **)out, outlen, h11, sizeof(h11) - 1, in, inlen) ==
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_OK;
	return SSL_TLSEXT_ERR_NOACK; /* h2 only: no ALPN, the client falls back to HTTP/1.1 */
}

#define HANDSHAKE_STACK (256u * 1024u)

struct handshakes {
	struct conn *c;
	SSL *ssl;
	struct up_error *e;
	int r;
};

static void *handshakes_thread(void *arg)
{
	struct handshakes *h = arg;

	ERR_clear_error();
	if (SSL_accept(h->ssl) != 1) {
		ERR_clear_error();
		h->r = -1;
		return NULL;
	}
	proxy_set_timeouts(h->c->cl.fd, PROXY_UPSTREAM_TIMEOUT_MS);
	h->c->in_tunnel = true;
	h->r = proxy_up_tls(h->c, h->c->t_host, h->e) < 0 ? -2 : 0;
	return NULL;
}

/*
 * Both TLS handshakes of an intercepted tunnel: with the client on ssl, then with the server.
 * Returns 0, -1 (the client's handshake failed) or -2 (the server's; e filled).
 *
 * They run on a thread of their own while this one waits: what they leave behind goes when it
 * ends, not at the end of the tunnel — the some 40 KiB of stack they touch, and above all the
 * allocator's per-thread cache (glibc's tcache) of the many small blocks they allocate and
 * free, which would otherwise stay reserved to this thread for the tunnel's life: 12 KiB per
 * idle intercepted tunnel (doc/performance.md). It costs a thread start (tens of µs) per
 * tunnel, against milliseconds of handshakes.
 */
static int handshakes(struct conn *c, SSL *ssl, struct up_error *e)
{
	struct handshakes h = {.c = c, .ssl = ssl, .e = e};
	pthread_attr_t a;
	pthread_t t;

	if (pthread_attr_init(&a) == 0) {
		(void)pthread_attr_setstacksize(&a, HANDSHAKE_STACK);
		if (pthread_create(&t, &a, handshakes_thread, &h) == 0) {
			(void)pthread_join(t, NULL);
			(void)pthread_attr_destroy(&a);
			return h.r;
		}
		(void)pthread_attr_destroy(&a);
	}
	(void)handshakes_thread(&h);
	return h.r;
}

/*
 * Scans a CONNECT request, its target and every field, for placeholders not bound to host
 * (the target's host, or the target as sent when it is none). Returns whether one leaks
 * (leak filled).
 */
static bool connect_leaks(struct conn *c, const struct http_head *h, const char *host,
                          struct leak_info *leak)
{
	struct hits hs = {.c = c, .host = host, .leak = -1};

	leak->where = "CONNECT target";
	if (proxy_scan_piece(&hs, h->target, strlen(h->target)) < 0) {
		leak->where = "header";
		for (size_t i = 0; i < h->n_fields && hs.leak < 0; i++)
			if (proxy_scan_piece(&hs, h->fields[i].name, strlen(h->fields[i].name)) < 0)
				(void)proxy_scan_piece(&hs, h->fields[i].value,
				                       strlen(h->fields[i].value));
	}
	leak->pat = hs.leak;
	return leak->pat >= 0;
}

/*
 * The CONNECT target, scanned and checked, connected to, and the tunnel announced. Returns 0,
 * or -1 when the connection is done (answered, reported, audited).
 */
static int connect_open(struct conn *c, const struct http_head *h, double t0)
{
	struct up_error e = {0};
	struct leak_info leak;
	char why[1024];
	bool parsed;

	parsed = host_split_authority(h->target, strlen(h->target), 0, c->t_host, sizeof(c->t_host),
	                              &c->t_port) >= 0;
	/* Scanned before anything is resolved or connected: "CONNECT PH.attacker.example:443"
	 * would hand the placeholder to the attacker's DNS server even if the guest never sent a
	 * byte through the tunnel. A target that is no host:port binds nothing. */
	if (!parsed) {
		(void)snprintf(c->t_host, sizeof(c->t_host), "%s", h->target);
		c->t_port = 0;
	}
	if (connect_leaks(c, h, parsed ? c->t_host : "", &leak)) {
		proxy_report_leak(c, leak.pat, leak.where, c->t_host, c->t_port, h->method, NULL,
		                  true);
		return -1;
	}
	if (!parsed) {
		proxy_respond(c, 400, "slate egress proxy: CONNECT needs host:port");
		return -1;
	}
	if (h->framing != HTTP_BODY_NONE) {
		proxy_respond(c, 400, "slate egress proxy: CONNECT with a body");
		return -1;
	}
	if (!egress_policy_allows_host(c->policy, c->t_host, NULL)) {
		(void)snprintf(why, sizeof(why), "%s is not allowed by the egress policy of %s",
		               c->t_host, c->ws);
		proxy_respond(c, 403, "slate egress proxy: %s", why);
		proxy_audit_tunnel(c, NULL, 403, 0, 0, t0, why);
		return -1;
	}
	if (proxy_up_connect(c, c->t_host, c->t_port, &e) < 0) {
		proxy_respond(c, e.status, "slate egress proxy: %s", e.msg);
		proxy_audit_tunnel(c, NULL, e.status, 0, 0, t0, e.msg);
		return -1;
	}
	if (proxy_io_write(&c->cl, "HTTP/1.1 200 Connection established\r\n\r\n", 39) < 0)
		return -1;
	return 0;
}

/*
 * Who speaks first, and is it TLS? A TLS handshake sent along with the CONNECT, before the
 * answer, would otherwise pass as opaque bytes, uninspected: refused. Returns 1 (the client
 * starts a TLS handshake), 0 (anything else, or the server first), or -1 when the connection is
 * done.
 */
static int connect_first_is_tls(struct conn *c, double t0)
{
	struct pollfd pfd[2] = {{.fd = c->cl.fd, .events = POLLIN},
	                        {.fd = c->up.fd, .events = POLLIN}};
	uint8_t first;
	int r;

	if (buf_len(c->cl.in) > 0 && buf_ptr(c->cl.in)[0] == 0x16) {
		proxy_audit_tunnel(c, NULL, 400, 0, 0, t0,
		                   "a TLS handshake sent before the tunnel was established");
		return -1;
	}
	if (buf_len(c->cl.in) > 0)
		return 0;
	do
		r = poll(pfd, 2, PROXY_TUNNEL_IDLE_MS);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return -1;
	if (!(pfd[0].revents & POLLIN))
		return 0;
	if (recv(c->cl.fd, &first, 1, MSG_PEEK) <= 0)
		return -1;
	return first == 0x16; /* a TLS handshake record */
}

/* An intercepted tunnel: TLS with the client (a leaf of the egress CA for the target) and with
 * the server, then each request inside served like a plain one. */
static void intercept(struct conn *c, double t0)
{
	_cleanup_(SSL_freep) SSL *ssl = SSL_new(c->p->server_ctx);
	struct up_error e = {0};
	char why[1024];
	int r;

	if (!ssl || SSL_set_fd(ssl, c->cl.fd) != 1 ||
	    egress_ca_use_leaf(c->p->ca, c->t_host, ssl) < 0)
		return;
	SSL_set_app_data(ssl, c);
	proxy_set_timeouts(c->cl.fd, PROXY_HEAD_TIMEOUT_MS);
	r = handshakes(c, ssl, &e);
	if (r == -1) {
		if (c->sni_mismatch) {
			(void)snprintf(why, sizeof(why),
			               "TLS server name %s does not match the CONNECT target %s",
			               c->sni, c->t_host);
			proxy_audit_tunnel(c, NULL, 421, 0, 0, t0, why);
		}
		return;
	}
	c->cl.ssl = TAKE_PTR(ssl);
	if (r < 0) {
		proxy_respond(c, e.status, "slate egress proxy: %s", e.msg);
		proxy_audit_tunnel(c, NULL, e.status, 0, 0, t0, e.msg);
		return;
	}
	proxy_serve_http(c);
	(void)SSL_shutdown(c->cl.ssl);
}

/* CONNECT host:port. Consumes the connection. */
void proxy_handle_connect(struct conn *c, struct http_head *h)
{
	struct leak_info leak;
	uint64_t up = 0, down = 0;
	double t0 = time_mono_s();
	int r;

	if (connect_open(c, h, t0) < 0)
		return;
	r = connect_first_is_tls(c, t0);
	if (r < 0)
		return;
	if (r > 0) {
		intercept(c, t0);
		return;
	}
	/* Opaque: SSH or anything else that is not TLS, scanned as it passes. */
	r = proxy_relay_both(c, c->t_host, &up, &down, &leak);
	if (r == FWD_LEAK) {
		proxy_up_close(c);
		proxy_report_leak(c, leak.pat, "tunnel", c->t_host, c->t_port, NULL, NULL, false);
		return;
	}
	proxy_audit_tunnel(c, "opaque", 200, up, down, t0, NULL);
}

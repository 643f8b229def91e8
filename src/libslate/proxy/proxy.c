/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The egress proxy: one client connection per thread (see proxy.h and doc/egress-proxy.md).
 * This file: the proxy's life, each connection's start and end, its request loop; the rest is
 * split by concern (internal.h lists the files). */

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy/ca.h"
#include "proxy/internal.h"
#include "util/error.h"

void proxy_serve_http(struct conn *c)
{
	for (;;) {
		_cleanup_(http_head_freep) struct http_head *h = NULL;
		int r = proxy_read_request(c, &h);

		if (r <= 0 || c->p->stopping)
			return;
		if (streq(h->method, "CONNECT")) {
			if (c->in_tunnel) {
				proxy_respond(c, 405,
				              "slate egress proxy: CONNECT inside a tunnel");
				return;
			}
			proxy_handle_connect(c, h);
			return;
		}
		if (proxy_handle_request(c, h) <= 0 || c->leaked)
			return;
	}
}

/* Splits one "HOST:PORT:ADDR:PORT" in place into f (HOST or ADDR may be an IPv6 literal in
 * brackets, as curl's --connect-to has it). Returns 0 or -EINVAL. */
static int split_connect_to(char *e, char *f[4])
{
	for (size_t k = 0; k < 4; k++) {
		char *end = *e == '[' ? strchr(e, ']') : e + strcspn(e, ":");
		if (!end || end == e)
			return -EINVAL;
		if (*end == ']')
			end++;
		f[k] = e;
		if (k == 3)
			return *end ? -EINVAL : 0;
		if (*end != ':')
			return -EINVAL;
		*end = '\0';
		e = end + 1;
	}
	return -EINVAL;
}

static int parse_connect_to(struct proxy *p, const char *spec)
{
	_cleanup_free_ char *copy = strdup(spec);
	char *save = NULL;

	if (!copy)
		return -ENOMEM;
	for (char *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		struct connect_to ct = {0}, *n;
		char *f[4];
		unsigned long a, b;
		if (split_connect_to(e, f) < 0)
			return -EINVAL;
		a = strtoul(f[1], NULL, 10);
		b = strtoul(f[3], NULL, 10);
		if (a == 0 || a > 65535 || b == 0 || b > 65535 ||
		    host_normalize(f[0], ct.host, sizeof(ct.host)) < 0 ||
		    host_normalize(f[2], ct.addr, sizeof(ct.addr)) < 0 || !host_is_ip(ct.addr))
			return -EINVAL;
		ct.port = (uint16_t)a;
		ct.addr_port = (uint16_t)b;
		n = realloc(p->overrides, (p->n_overrides + 1) * sizeof(*n));
		if (!n)
			return -ENOMEM;
		p->overrides = n;
		p->overrides[p->n_overrides++] = ct;
	}
	return 0;
}

int proxy_new(const struct proxy_config *cfg, const struct proxy_hooks *hooks, struct proxy **ret)
{
	struct proxy *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	if (hooks)
		p->hooks = *hooks;
	if (cfg->connect_to && (r = parse_connect_to(p, cfg->connect_to)) < 0)
		goto fail;
	if ((r = tripwire_cache_new(&p->tripwires)) < 0)
		goto fail;
	r = egress_ca_open(cfg->ca_dirfd, &p->ca);
	if (r < 0)
		goto fail;
	r = SLATE_ERR_CRYPTO;
	p->server_ctx = SSL_CTX_new(TLS_server_method());
	p->client_ctx = SSL_CTX_new(TLS_client_method());
	if (!p->server_ctx || !p->client_ctx)
		goto fail;
	/* The guest side: HTTP/1.1 only, no session resumption (each tunnel is checked afresh),
	 * buffers released while idle (a thousand idle tunnels stay small). */
	SSL_CTX_set_min_proto_version(p->server_ctx, TLS1_2_VERSION);
	SSL_CTX_set_tlsext_servername_callback(p->server_ctx, proxy_sni_cb);
	SSL_CTX_set_alpn_select_cb(p->server_ctx, proxy_alpn_cb, NULL);
	SSL_CTX_set_session_cache_mode(p->server_ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_options(p->server_ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
	(void)SSL_CTX_set_num_tickets(p->server_ctx, 0);
	SSL_CTX_set_mode(p->server_ctx, SSL_MODE_RELEASE_BUFFERS);
	/* Uploads: several records per read() instead of two reads per record. */
	SSL_CTX_set_read_ahead(p->server_ctx, 1);
	SSL_CTX_set_default_read_buffer_len(p->server_ctx, RELAY_CHUNK);
	/* AES-128-GCM first on the guest side: as strong as the link needs (the guest is on this
	 * host) and a quarter cheaper than AES-256 on every byte the proxy re-encrypts. */
	SSL_CTX_set_options(p->server_ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
	if (SSL_CTX_set_ciphersuites(p->server_ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
	                                            "TLS_CHACHA20_POLY1305_SHA256") != 1)
		goto fail;
	/* The server side: the system trust store, host names checked (per connection). */
	SSL_CTX_set_min_proto_version(p->client_ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(p->client_ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_options(p->client_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_mode(p->client_ctx, SSL_MODE_RELEASE_BUFFERS);
	/* Downloads: several records per read() instead of two reads per record. */
	SSL_CTX_set_read_ahead(p->client_ctx, 1);
	SSL_CTX_set_default_read_buffer_len(p->client_ctx, RELAY_CHUNK);
	/* AES-128-GCM first in the ClientHello too (any client may say what it prefers; the
	 * server decides, and many take the client's order): every byte of a download is
	 * decrypted here. TLS 1.2 suites stay OpenSSL's default list. */
	if (SSL_CTX_set_ciphersuites(p->client_ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
	                                            "TLS_CHACHA20_POLY1305_SHA256") != 1 ||
	    SSL_CTX_set_default_verify_paths(p->client_ctx) != 1 ||
	    SSL_CTX_set_alpn_protos(p->client_ctx, (const unsigned char *)"\x08http/1.1", 9) != 0)
		goto fail;
	if (cfg->extra_ca_file &&
	    SSL_CTX_load_verify_locations(p->client_ctx, cfg->extra_ca_file, NULL) != 1) {
		r = -ENOENT;
		goto fail;
	}
	ERR_clear_error();
	*ret = p;
	return 0;
fail:
	ERR_clear_error();
	proxy_free(p);
	return r;
}

void proxy_shutdown(struct proxy *p)
{
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	for (struct conn *c = p->live; c; c = c->next) {
		(void)shutdown(c->cl.fd, SHUT_RDWR);
		if (c->up.fd >= 0)
			(void)shutdown(c->up.fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&p->lock);
}

void proxy_free(struct proxy *p)
{
	if (!p)
		return;
	proxy_shutdown(p);
	pthread_mutex_lock(&p->lock);
	while (p->n_live > 0)
		pthread_cond_wait(&p->cond, &p->lock);
	pthread_mutex_unlock(&p->lock);
	SSL_CTX_free(p->server_ctx);
	SSL_CTX_free(p->client_ctx);
	egress_ca_free(p->ca);
	tripwire_cache_free(p->tripwires);
	free(p->overrides);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

const char *proxy_ca_pem(const struct proxy *p)
{
	return egress_ca_pem(p->ca);
}

/* Takes the tripwire of the set's placeholders (built once per set: p->tripwires) and copies
 * each secret's normalised hosts. */
static int conn_secrets(struct conn *c)
{
	_cleanup_free_ const char **phs = NULL;
	_cleanup_free_ struct pat *owner = NULL; /* per placeholder: its secret and value */
	size_t n = 0, k = 0;
	const struct secret_set *set = c->secrets;
	int r;

	if (!set || set->n == 0)
		return 0;
	for (size_t i = 0; i < set->n; i++)
		n += set->v[i].n_values;
	c->bound = calloc(set->n, sizeof(*c->bound));
	phs = calloc(n ? n : 1, sizeof(*phs));
	owner = calloc(n ? n : 1, sizeof(*owner));
	if (!c->bound || !phs || !owner)
		return -ENOMEM;
	for (size_t i = 0; i < set->n; i++) {
		const struct secret *s = &set->v[i];
		size_t m = 0;
		c->bound[i] = calloc(s->n_hosts + 1, sizeof(char *));
		if (!c->bound[i])
			return -ENOMEM;
		/* Stored as the one normaliser wrote them (secret_new; the vault refuses any
		 * other form): used as they are. */
		for (size_t j = 0; j < s->n_hosts; j++) {
			if (!s->hosts[j])
				continue;
			if (!(c->bound[i][m++] = strdup(s->hosts[j])))
				return -ENOMEM;
		}
		for (size_t j = 0; j < s->n_values; j++) {
			const char *ph = s->values[j].placeholder;
			if (!ph || !*ph)
				continue;
			owner[k] = (struct pat){.secret = i, .value = j};
			phs[k++] = ph;
		}
	}
	r = tripwire_cache_get(c->p->tripwires, phs, k, &c->tw);
	if (r < 0)
		return r;
	c->scan = tripwire_scan(c->tw);
	c->n_pats = tripwire_n_pats(c->tw);
	c->pats = calloc(c->n_pats ? c->n_pats : 1, sizeof(*c->pats));
	if (!c->pats)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_pats; i++) {
		const struct tripwire_pat *tp = tripwire_pat(c->tw, i);
		c->pats[i] = owner[tp->placeholder];
		c->pats[i].len = tp->len;
		c->pats[i].enc = tp->enc;
	}
	return 0;
}

static void conn_free(struct conn *c)
{
	if (c->bound) {
		for (size_t i = 0; i < c->secrets->n; i++) {
			for (char **h = c->bound[i]; h && *h; h++)
				free(*h);
			free(c->bound[i]);
		}
		free(c->bound);
	}
	free(c->pats);
	tripwire_unref(c->tw);
	if (c->secrets && c->p->hooks.release)
		c->p->hooks.release(c->p->hooks.userdata, c->secrets);
	egress_policy_free(c->policy);
	SSL_free(c->cl.ssl);
	proxy_up_close(c);
	buf_free_secure(c->cl.in);
	buf_free_secure(c->up.in);
}

void proxy_serve(struct proxy *p, int fd, const char *workspace)
{
	struct conn c = {.p = p, .ws = workspace, .cl = {.fd = fd}, .up = {.fd = -1}};
	char why[512] = "";
	bool refused;
	int r;

	c.cl.in = buf_new(CLIENT_IN_MAX);
	c.up.in = buf_new(UP_IN_MAX);
	pthread_mutex_lock(&p->lock);
	refused = p->stopping || p->n_live >= PROXY_MAX_CONNECTIONS;
	if (!refused) {
		c.next = p->live;
		if (p->live)
			p->live->prev = &c;
		p->live = &c;
		p->n_live++;
	}
	pthread_mutex_unlock(&p->lock);
	if (refused || !c.cl.in || !c.up.in) {
		proxy_respond(&c, 503, "slate egress proxy: too many connections");
		buf_free(c.cl.in);
		buf_free(c.up.in);
		return;
	}
	proxy_set_timeouts(fd, PROXY_UPSTREAM_TIMEOUT_MS);
	/* A TCP client (tests, the benchmark; slated's streams are socketpairs): heads and bodies
	 * go in separate writes, which Nagle and delayed ACKs would hold back 40 ms. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));

	r = p->hooks.load ? p->hooks.load(p->hooks.userdata, workspace, &c.secrets, &c.policy, why,
	                                  sizeof(why))
	                  : 0;
	if (r >= 0 && !c.policy)
		r = egress_policy_new(&c.policy);
	if (r >= 0)
		r = conn_secrets(&c);
	if (r < 0)
		proxy_respond(&c, 403, "slate egress proxy: %s",
		              why[0] ? why : "this workspace cannot use the network now");
	else
		proxy_serve_http(&c);
	if (c.answered_error && !p->stopping)
		proxy_linger_close(&c);

	conn_free(&c);
	pthread_mutex_lock(&p->lock);
	if (c.prev)
		c.prev->next = c.next;
	else
		p->live = c.next;
	if (c.next)
		c.next->prev = c.prev;
	p->n_live--;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

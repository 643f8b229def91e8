/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The egress proxy: one client connection per thread (see proxy.h and doc/egress-proxy.md). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proxy/ca.h"
#include "proxy/http.h"
#include "proxy/proxy.h"
#include "proxy/scan.h"
#include "proxy/sigv4.h"
#include "proxy/subst.h"
#include "proxy/tripwire.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/hex.h"
#include "util/host.h"
#include "util/json.h"
#include "util/log.h"

#define RELAY_CHUNK (64u * 1024u)
#define READ_CHUNK (16u * 1024u)
#define CLIENT_IN_MAX (HTTP_MAX_HEAD + READ_CHUNK)
#define UP_IN_MAX (HTTP_MAX_HEAD + READ_CHUNK)
#define PEND_MAX (PROXY_BODY_BUFFER + 2 * CLIENT_IN_MAX)
#define MAX_SUBSTITUTED 32

struct connect_to {
	char host[HOST_BUF];
	uint16_t port;
	char addr[HOST_BUF];
	uint16_t addr_port;
};

struct conn;

struct proxy {
	struct proxy_hooks hooks;
	struct egress_ca *ca;
	SSL_CTX *server_ctx;
	SSL_CTX *client_ctx;
	struct connect_to *overrides;
	size_t n_overrides;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct conn *live;
	unsigned n_live;
	bool stopping;
	struct tripwire_cache *tripwires;
};

struct io {
	int fd;
	SSL *ssl;
	struct buf *in; /* read ahead, not yet used */
};

/* One pattern of the tripwire: the secret and value whose placeholder it is, and in what form. */
struct pat {
	size_t secret;
	size_t value;
	size_t len;
	enum tripwire_enc enc;
};

struct conn {
	struct proxy *p;
	const char *ws;
	struct secret_set *secrets;
	struct egress_policy *policy;
	struct tripwire *tw;     /* the placeholders' patterns (shared, from p->tripwires) */
	const struct scan *scan; /* its automaton */
	struct pat *pats;
	size_t n_pats;
	char ***bound; /* per secret: its hosts, normalised, NULL-terminated */
	struct io cl, up;
	/* Inside an intercepted CONNECT: the tunnel's target. */
	bool in_tunnel;
	char t_host[HOST_BUF];
	uint16_t t_port;
	/* What the upstream connection goes to. */
	char u_host[HOST_BUF];
	uint16_t u_port;
	bool u_tls;
	char u_addr[INET6_ADDRSTRLEN + 8];
	/* The TLS handshake with the client: what its SNI said when it disagreed. */
	bool sni_mismatch;
	char sni[HOST_BUF];
	bool leaked;
	/* The secret whose real value a plain-HTTP request would have carried (plain_refused),
	 * or -1. */
	long plain_secret;
	bool answered_error; /* closing after an error answer: linger (see linger_close) */
	struct conn *next, *prev;
};

/* What a request produced, for its audit event. */
struct outcome {
	unsigned status;
	uint64_t sent, received;
	const char *substituted[MAX_SUBSTITUTED];
	unsigned substituted_in[MAX_SUBSTITUTED]; /* SUBST_IN_* of each */
	size_t n_substituted;
	char refused[1024];
	const struct sigv4_resigned *sigv4; /* an AWS request re-signed (doc/sigv4.md) */
};

DEFINE_TRIVIAL_CLEANUP_FUNC(SSL *, SSL_free);

static double now_ms(void)
{
	struct timespec ts;
	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static const char *status_text(unsigned s)
{
	switch (s) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 417:
		return "Expectation Failed";
	case 421:
		return "Misdirected Request";
	case 431:
		return "Request Header Fields Too Large";
	case 451:
		return "Unavailable For Legal Reasons";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Error";
	}
}

/* ---- I/O on either side, TLS or not ---- */

static int io_wait(struct io *io, short events, int timeout_ms)
{
	struct pollfd pfd = {.fd = io->fd, .events = events};
	int r;

	/* Read ahead (both sides): whole records may wait in OpenSSL's buffer, not yet decrypted,
	 * where SSL_pending() does not count them and poll() does not see them. */
	if ((events & POLLIN) && io->ssl && SSL_has_pending(io->ssl))
		return 1;
	do
		r = poll(&pfd, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r == 0 ? -ETIMEDOUT : 1;
}

/* Reads up to n bytes, waiting at most timeout_ms for the first (IO_BLOCK: no poll(), the
 * socket's own SO_RCVTIMEO bounds the wait; for bulk transfers, one syscall less per read).
 * Returns the count, 0 at EOF, or < 0. */
#define IO_BLOCK (-1)
static ssize_t io_read(struct io *io, void *p, size_t n, int timeout_ms)
{
	ssize_t k;
	int r = timeout_ms == IO_BLOCK ? 1 : io_wait(io, POLLIN, timeout_ms);

	if (r < 0)
		return r;
	if (io->ssl) {
		size_t got = 0;
		for (;;) {
			ERR_clear_error();
			if (SSL_read_ex(io->ssl, p, n, &got) == 1)
				return (ssize_t)got;
			switch (SSL_get_error(io->ssl, 0)) {
			case SSL_ERROR_ZERO_RETURN:
				return 0;
			case SSL_ERROR_WANT_READ:
			case SSL_ERROR_WANT_WRITE:
				continue;
			default:
				ERR_clear_error();
				return -ECONNRESET;
			}
		}
	}
	do
		k = read(io->fd, p, n);
	while (k < 0 && errno == EINTR);
	return k < 0 ? -errno : k;
}

static int io_write(struct io *io, const void *p, size_t n)
{
	const uint8_t *q = p;

	while (n > 0) {
		if (io->ssl) {
			size_t done = 0;
			ERR_clear_error();
			if (SSL_write_ex(io->ssl, q, n, &done) != 1) {
				int e = SSL_get_error(io->ssl, 0);
				if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
					continue;
				ERR_clear_error();
				return -EPIPE;
			}
			q += done;
			n -= done;
		} else {
			ssize_t k = send(io->fd, q, n, MSG_NOSIGNAL);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				return k < 0 ? -errno : -EPIPE;
			q += k;
			n -= (size_t)k;
		}
	}
	return 0;
}

/* Reads more into io->in. Returns the count, 0 at EOF, or < 0. */
static ssize_t io_fill(struct io *io, int timeout_ms)
{
	uint8_t tmp[READ_CHUNK];
	size_t room = buf_max(io->in) - buf_len(io->in);
	ssize_t n;

	if (room == 0)
		return SLATE_ERR_NO_BUFFER_SPACE;
	n = io_read(io, tmp, room < sizeof(tmp) ? room : sizeof(tmp), timeout_ms);
	if (n > 0 && buf_put(io->in, tmp, (size_t)n) < 0)
		return -ENOMEM;
	sodium_memzero(tmp, n > 0 ? (size_t)n : 0);
	return n;
}

/* TCP_CORK: held, what is written goes out in full segments; released, at once. Returns
 * whether it is held now. */
static bool cork_fd(int fd, bool on)
{
	return setsockopt(fd, IPPROTO_TCP, TCP_CORK, &(int){on}, sizeof(int)) == 0 && on;
}

static void set_timeouts(int fd, int ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static void up_close(struct conn *c)
{
	int fd;

	if (c->up.ssl) {
		SSL_free(c->up.ssl);
		c->up.ssl = NULL;
	}
	pthread_mutex_lock(&c->p->lock);
	fd = c->up.fd;
	c->up.fd = -1;
	pthread_mutex_unlock(&c->p->lock);
	(void)safe_close(fd);
	if (c->up.in)
		(void)buf_reset(c->up.in);
	c->u_host[0] = '\0';
	c->u_port = 0;
}

/* ---- answers to the client ---- */

_printf_(3, 4) static void respond(struct conn *c, unsigned status, const char *fmt, ...)
{
	char body[1024], head[256];
	va_list ap;
	int n, m;

	va_start(ap, fmt);
	n = vsnprintf(body, sizeof(body) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n > sizeof(body) - 2)
		n = sizeof(body) - 2;
	body[n++] = '\n';
	m = snprintf(head, sizeof(head),
	             "HTTP/1.1 %u %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
	             "Content-Length: %d\r\nConnection: close\r\n\r\n",
	             status, status_text(status), n);
	(void)io_write(&c->cl, head, (size_t)m);
	(void)io_write(&c->cl, body, (size_t)n);
	c->answered_error = true;
}

/*
 * After answering an error the connection closes, often with the rest of the client's request
 * unread; closing then would reset the connection and could destroy the answer in flight. So,
 * as web servers do, stop writing and read (and drop) what still comes, for a moment.
 */
/* Not inlined: its buffer would sit in proxy_serve()'s frame, the stack of every idle tunnel. */
__attribute__((noinline)) static void linger_close(struct conn *c)
{
	char b[4096];
	double end = now_ms() + 1000;
	size_t total = 0;

	if (c->cl.ssl || shutdown(c->cl.fd, SHUT_WR) < 0)
		return;
	while (total < 1024 * 1024) {
		struct pollfd pfd = {.fd = c->cl.fd, .events = POLLIN};
		double left = end - now_ms();
		ssize_t n;
		if (left <= 0 || poll(&pfd, 1, (int)left + 1) <= 0)
			return;
		n = recv(c->cl.fd, b, sizeof(b), MSG_DONTWAIT);
		if (n <= 0)
			return;
		total += (size_t)n;
	}
}

/* ---- audit ---- */

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

static void audit_request(struct conn *c, const char *method, const char *target, const char *host,
                          uint16_t port, const struct outcome *o, double t0)
{
	_cleanup_json_ struct json_object *ev = json_object_new_object();
	struct json_object *subs = json_object_new_array();
	char path[2048], latency[32];
	double lat = now_ms() - t0;

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

/* ---- secrets: binding, scanning, substitution ---- */

static bool bound_to(const struct conn *c, size_t secret, const char *host)
{
	for (char **h = c->bound[secret]; h && *h; h++)
		if (host_matches(host, *h))
			return true;
	return false;
}

struct hit {
	size_t start, len, pat;
};

struct hits {
	const struct conn *c;
	const char *host;
	long leak; /* the first placeholder not bound to host, or -1 */
	struct hit *v;
	size_t n, cap;
	bool collect;
	size_t base; /* offset of the fed chunk in what hits' start refers to */
};

static int hit_fn(size_t pattern, size_t end, void *userdata)
{
	struct hits *h = userdata;
	const struct pat *pt = &h->c->pats[pattern];
	size_t len = pt->len;

	if (!bound_to(h->c, pt->secret, h->host)) {
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
static long scan_piece(struct hits *h, const void *p, size_t n)
{
	uint32_t st = SCAN_START;

	h->n = 0;
	h->base = 0;
	(void)scan_feed(h->c->scan, &st, p, n, hit_fn, h);
	return h->leak;
}

/*
 * Whether secret i's real value may not go into the request being built: only an intercepted
 * tunnel reaches its server over TLS with the certificate verified for the host (up_tls), so
 * elsewhere (a plain http:// request) only a secret set with --allow-plain-http is put in.
 * Remembers the secret for the refusal (plain_refusal).
 */
static bool plain_refused(struct conn *c, size_t i)
{
	if (c->in_tunnel || c->secrets->v[i].plain_http)
		return false;
	if (c->plain_secret < 0)
		c->plain_secret = (long)i;
	return true;
}

/* The 403 text for a request plain_refused: names the secret and what to do. */
static void plain_refusal(const struct conn *c, const char *host, char *out, size_t len)
{
	(void)snprintf(out, len,
	               "the secret %s is bound to %s, but this request goes over plain HTTP, "
	               "where anyone on the path could read it: slate puts its real value only "
	               "into HTTPS requests (CONNECT, the server's certificate verified). Nothing "
	               "was forwarded. Use https://, or set the secret with --allow-plain-http",
	               c->plain_secret >= 0 ? c->secrets->v[c->plain_secret].key : "?", host);
}

/* Where a secret was substituted, for the audit event's "substituted_in". */
enum { SUBST_IN_HEADER = 1, SUBST_IN_BODY = 2, SUBST_IN_QUERY = 4 };

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

static bool header_safe(const struct buf *real)
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
		/* Left in place; build_head refuses the request once all of it is scanned (a
		 * leak found later still counts). */
		if (plain_refused(c, pt->secret))
			continue;
		if (for_header && !header_safe(real))
			return -EINVAL;
		if ((r = buf_put(out, p + pos, x->start - pos)) < 0 ||
		    (r = buf_put(out, buf_ptr(real), buf_len(real))) < 0)
			return r;
		pos = x->start + x->len;
		note_substituted(o, s->key, SUBST_IN_HEADER);
	}
	return buf_put(out, p + pos, n - pos);
}

/*
 * Body and query substitution (proxy/subst.h): the values of the secrets bound to host that are
 * configured for it (where SUBST_IN_BODY: --body; SUBST_IN_QUERY: --query), never aws ones.
 * Fills items (and owner: each item's secret) and returns how many, or -ENOMEM.
 */
struct subst_list {
	struct subst_item v[SUBST_ITEMS_MAX];
	size_t owner[SUBST_ITEMS_MAX];
	unsigned counts[SUBST_ITEMS_MAX];
	size_t n;
};

/* Whether secret i is substituted at where (SUBST_IN_BODY or SUBST_IN_QUERY) in a request to
 * host: configured for it, bound to host, and not an aws one (those are re-signed). */
static bool subst_applies(const struct conn *c, size_t i, const char *host, unsigned where)
{
	const struct secret *s = &c->secrets->v[i];

	return s->kind != SECRET_KIND_AWS && (where == SUBST_IN_BODY ? s->body : !!s->query) &&
	       bound_to(c, i, host);
}

static size_t subst_collect(const struct conn *c, const char *host, unsigned where,
                            struct subst_list *l)
{
	l->n = 0;
	for (size_t i = 0; c->secrets && i < c->secrets->n; i++) {
		const struct secret *s = &c->secrets->v[i];
		if (!subst_applies(c, i, host, where))
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
	/* Refused by build_head at the end (the head is never sent). */
	for (size_t k = 0; k < l->n; k++)
		if (l->counts[k] > 0)
			(void)plain_refused(c, l->owner[k]);
	if (c->plain_secret < 0)
		subst_note(c, l, SUBST_IN_QUERY, o);
	return 0;
}

/* Fields that concern this hop only and never go upstream. */
static bool hop_by_hop(const struct http_head *h, const char *name, bool keep_upgrade)
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

struct leak_info {
	long pat;
	const char *where;
};

/* One field value as it goes upstream, into val (a secure buffer). Returns 0 (leak->pat set on a
 * leak), -EINVAL (a real value unfit for a header), -ENOMEM. */
static int field_value(struct conn *c, struct hits *hs, const struct http_field *f, struct buf *val,
                       struct leak_info *leak, struct outcome *o)
{
	const char *v = f->value;
	size_t vn = strlen(v);

	if (scan_piece(hs, f->name, strlen(f->name)) >= 0 || scan_piece(hs, v, vn) >= 0) {
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
			if (scan_piece(hs, bp, cn) >= 0) {
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
		(void)scan_piece(hs, v, vn);
	}
	return put_substituted(c, val, (const uint8_t *)v, vn, hs, true, o);
}

/* ---- AWS SigV4 re-signing (proxy/sigv4.h, doc/sigv4.md) ---- */

/*
 * One request's re-signing. The re-signer sees the request as build_head sends it: the
 * forwarded fields in their order, then the framing field build_head adds.
 */
struct resign {
	struct sigv4_header fields[HTTP_MAX_FIELDS + 1];
	struct sigv4_request req;
	struct sigv4_secret_lookup lookup;
	struct sigv4_resigned *res; /* set once re-signed */
	char length[24];
	char body_sha256[SIGV4_SIG_HEX + 1];
	bool need_body_hash; /* header-signed without x-amz-content-sha256: hash the body first */
	int err;             /* why forward_request refused it (FWD_RESIGN) */
	/* What build_head needs again once the body is hashed. */
	const char *origin;
	bool upgrade;
	struct outcome *o;
};

static void resign_done(struct resign *rs)
{
	sigv4_resigned_free(rs->res);
}

/* Hosts compared as bound_to compares them (host_matches on the stored, normalised binding),
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
 * first, in forward_request), or a negative error to refuse the request with (resign_refuse):
 * nothing signed with a placeholder that cannot be re-signed is forwarded. A key id that is no
 * placeholder bound here is left alone (the guest's own key; an unbound placeholder is the leak
 * scanner's).
 */
static int resign_start(struct conn *c, const struct http_head *h, const char *origin,
                        const char *host, bool upgrade, struct outcome *o, struct resign *rs)
{
	size_t n = 0;
	int r;

	if (!c->secrets || !resign_candidate(h, origin))
		return 0;
	for (size_t i = 0; i < h->n_fields && n < HTTP_MAX_FIELDS; i++)
		if (!hop_by_hop(h, h->fields[i].name, upgrade))
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
static void resign_refuse(int r, struct outcome *o)
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

		if (s->kind != SECRET_KIND_AWS || !ph || !*ph || !bound_to(c, i, host))
			continue;
		named = strstr(h->target, ph) != NULL;
		for (size_t j = 0; j < h->n_fields && !named; j++)
			named = strstr(h->fields[j].value, ph) != NULL;
		if (named)
			return plain_refused(c, i);
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
static int build_head(struct conn *c, const struct http_head *h, const char *origin,
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
	if (scan_piece(&hs, h->method, strlen(h->method)) >= 0) {
		leak->pat = hs.leak;
		goto done;
	}
	leak->where = "url";
	if (scan_piece(&hs, h->target, strlen(h->target)) >= 0) {
		leak->pat = hs.leak;
		goto done;
	}
	dn = (size_t)pct_decode(h->target, strlen(h->target), decoded, sizeof(decoded) - 1,
	                        PCT_TRUNCATE);
	if (scan_piece(&hs, decoded, dn) >= 0) {
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
		if (hop_by_hop(h, f->name, upgrade)) {
			/* Not forwarded, but scanned all the same: every field is. */
			if (scan_piece(&hs, f->name, strlen(f->name)) >= 0 ||
			    scan_piece(&hs, f->value, strlen(f->value)) >= 0) {
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
			r = header_safe(rs->security_token)
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
		if (!header_safe(t)) {
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

/* ---- leaks ---- */

/* Reports a leak (hook, audit) and answers 451 when the client speaks HTTP. */
static void report_leak(struct conn *c, long pat, const char *where, const char *host,
                        uint16_t port, const char *method, const char *target, bool answer)
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
		respond(c, 451,
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

/* ---- upstream ---- */

struct up_error {
	unsigned status;
	char msg[512];
};

_printf_(3, 4) static int up_fail(struct up_error *e, unsigned status, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	va_start(ap, fmt);
	(void)vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -EIO;
}

static int connect_one(const struct addrinfo *ai, int *ret_fd)
{
	_cleanup_close_ int fd =
	        socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct pollfd pfd;
	socklen_t sl = sizeof(int);
	int err = 0, r, one = 1;

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS)
		return -errno;
	pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
	do
		r = poll(&pfd, 1, PROXY_CONNECT_TIMEOUT_MS);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	if (r < 0)
		return -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0)
		return -errno;
	if (err)
		return -err;
	if (fs_set_nonblock(fd, false) < 0)
		return -errno;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	set_timeouts(fd, PROXY_UPSTREAM_TIMEOUT_MS);
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static void addr_text(const struct sockaddr *sa, char *out, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
		(void)inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		port = ntohs(s4->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
		(void)inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		port = ntohs(s6->sin6_port);
	}
	host_format_authority(a, port, out, len);
}

/*
 * Resolves host:port (or its test override), drops addresses the policy refuses, connects to
 * the first that answers. Returns 0 with c->up connected, or < 0 with e filled.
 */
static int up_connect(struct conn *c, const char *host, uint16_t port, struct up_error *e)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC};
	struct addrinfo *res = NULL;
	const char *name = host;
	char portstr[8], refused[256] = "";
	uint16_t cport = port;
	int r, last = -ECONNREFUSED, fd = -1;

	up_close(c);
	for (size_t i = 0; i < c->p->n_overrides; i++)
		if (streq(c->p->overrides[i].host, host) && c->p->overrides[i].port == port) {
			name = c->p->overrides[i].addr;
			cport = c->p->overrides[i].addr_port;
			hints.ai_flags = AI_NUMERICHOST;
			break;
		}
	if (host_is_ip(name))
		hints.ai_flags = AI_NUMERICHOST;
	(void)snprintf(portstr, sizeof(portstr), "%u", (unsigned)cport);
	r = getaddrinfo(name, portstr, &hints, &res);
	if (r != 0)
		return up_fail(e, 502, "cannot resolve %s: %s", host, gai_strerror(r));
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		enum addr_class cls;
		char at[INET6_ADDRSTRLEN + 8];
		if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
			continue;
		addr_text(ai->ai_addr, at, sizeof(at));
		if (!egress_policy_allows_addr(c->policy, ai->ai_addr, &cls)) {
			if (!refused[0])
				(void)snprintf(refused, sizeof(refused), "%s (%s)", at,
				               addr_class_name(cls));
			continue;
		}
		r = connect_one(ai, &fd);
		if (r >= 0) {
			(void)snprintf(c->u_addr, sizeof(c->u_addr), "%s", at);
			break;
		}
		last = r;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		if (refused[0] && last == -ECONNREFUSED)
			return up_fail(e, 403,
			               "%s resolves to %s, which workspaces may not reach unless "
			               "the address is allowed explicitly ('slate egress %s allow "
			               "ADDRESS')",
			               host, refused, c->ws);
		return up_fail(e, last == -ETIMEDOUT ? 504 : 502, "cannot connect to %s:%u: %s",
		               host, (unsigned)port, slate_strerror(last));
	}
	pthread_mutex_lock(&c->p->lock);
	c->up.fd = fd;
	pthread_mutex_unlock(&c->p->lock);
	if (c->p->stopping)
		(void)shutdown(fd, SHUT_RDWR);
	(void)snprintf(c->u_host, sizeof(c->u_host), "%s", host);
	c->u_port = port;
	c->u_tls = false;
	return 0;
}

/* TLS to the server on the connected c->up: the system trust store (plus the test CA), the
 * host name checked, ALPN http/1.1. */
static int up_tls(struct conn *c, const char *host, struct up_error *e)
{
	_cleanup_(SSL_freep) SSL *ssl = SSL_new(c->p->client_ctx);
	long vr;

	if (!ssl || SSL_set_fd(ssl, c->up.fd) != 1)
		return up_fail(e, 502, "TLS setup failed");
	if (host_is_ip(host)) {
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1)
			return up_fail(e, 502, "TLS setup failed");
	} else if (SSL_set_tlsext_host_name(ssl, host) != 1 || SSL_set1_host(ssl, host) != 1)
		return up_fail(e, 502, "TLS setup failed");
	ERR_clear_error();
	if (SSL_connect(ssl) != 1) {
		vr = SSL_get_verify_result(ssl);
		ERR_clear_error();
		if (vr != X509_V_OK)
			return up_fail(e, 502, "the certificate of %s cannot be trusted: %s", host,
			               X509_verify_cert_error_string(vr));
		return up_fail(e, 502, "TLS handshake with %s failed", host);
	}
	c->up.ssl = TAKE_PTR(ssl);
	c->u_tls = true;
	return 0;
}

/* Whether the kept upstream connection is still good for another request. */
static bool up_usable(struct conn *c)
{
	struct pollfd pfd = {.fd = c->up.fd, .events = POLLIN};
	bool ok;

	if (c->up.fd < 0)
		return false;
	if (buf_len(c->up.in) > 0)
		return false; /* bytes nobody asked for */
	if (poll(&pfd, 1, 0) <= 0)
		return true;
	/* Readable: EOF or junk, or (TLS 1.3) session tickets, which a non-blocking peek eats. */
	if (!c->up.ssl)
		return false;
	(void)fcntl(c->up.fd, F_SETFL, fcntl(c->up.fd, F_GETFL) | O_NONBLOCK);
	{
		char b;
		size_t n;
		ERR_clear_error();
		ok = SSL_peek_ex(c->up.ssl, &b, 1, &n) != 1 &&
		     SSL_get_error(c->up.ssl, 0) == SSL_ERROR_WANT_READ;
		ERR_clear_error();
	}
	(void)fcntl(c->up.fd, F_SETFL, fcntl(c->up.fd, F_GETFL) & ~O_NONBLOCK);
	return ok;
}

/* Makes sure c->up goes to host:port (TLS inside a tunnel), reusing a kept connection. */
static int up_ensure(struct conn *c, const char *host, uint16_t port, struct up_error *e)
{
	int r;

	if (c->up.fd >= 0 && streq(c->u_host, host) && c->u_port == port &&
	    c->u_tls == c->in_tunnel && up_usable(c))
		return 0;
	r = up_connect(c, host, port, e);
	if (r < 0)
		return r;
	if (c->in_tunnel) {
		r = up_tls(c, host, e);
		if (r < 0) {
			up_close(c);
			return r;
		}
	}
	return 0;
}

/* ---- bodies ---- */

static int flush_pending(struct conn *c, struct buf *pend, size_t n, bool chunked, uint64_t *sent)
{
	char line[32];
	bool corked;
	int r, m;

	if (n == 0)
		return 0;
	if (chunked) {
		m = snprintf(line, sizeof(line), "%zx\r\n", n);
		if ((r = io_write(&c->up, line, (size_t)m)) < 0)
			return r;
		*sent += (uint64_t)m;
	}
	/* Sixteen records or so: in full segments, not one each. */
	corked = n > READ_CHUNK && cork_fd(c->up.fd, true);
	r = io_write(&c->up, buf_ptr(pend), n);
	if (corked)
		(void)cork_fd(c->up.fd, false);
	if (r < 0)
		return r;
	*sent += n;
	(void)buf_consume(pend, n);
	if (chunked) {
		if ((r = io_write(&c->up, "\r\n", 2)) < 0)
			return r;
		*sent += 2;
	}
	return 0;
}

enum fwd_result {
	FWD_OK = 0,
	FWD_CLIENT_GONE = -1, /* the client closed or stalled mid-body */
	FWD_BAD_BODY = -2,    /* malformed chunked framing */
	FWD_UPSTREAM = -3,    /* up_ensure failed (e filled) or a write failed */
	FWD_LEAK = -4,        /* leak filled */
	FWD_RESIGN = -5,      /* AWS re-signing refused it (rs->err) */
};

/* The body of a request signed without x-amz-content-sha256, all of it in body: re-signs over
 * its hash and builds the head again. Returns 0 or a negative error. */
static int resign_body(struct conn *c, const struct http_head *h, struct resign *rs,
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
	r = build_head(c, h, rs->origin, host, rs->upgrade, head, leak, rs->o, rs->res);
	if (r >= 0 && leak->pat >= 0)
		r = -EIO; /* scanned clean before: cannot be */
	return r;
}

/* Whether h's body is one to substitute in (--body secrets bound to host; a form or JSON body
 * without a Content-Encoding, up to PROXY_BODY_BUFFER; not an AWS request being re-signed). */
static bool body_subst_wanted(const struct conn *c, const struct http_head *h, const char *host,
                              const struct resign *rs)
{
	if (h->framing == HTTP_BODY_NONE || rs->res || rs->need_body_hash ||
	    (h->framing == HTTP_BODY_LENGTH && h->content_length > PROXY_BODY_BUFFER) ||
	    subst_body_type(http_head_get(h, "content-type", NULL),
	                    http_head_get(h, "content-encoding", NULL)) == SUBST_BODY_NONE)
		return false;
	for (size_t i = 0; c->secrets && i < c->secrets->n; i++)
		if (subst_applies(c, i, host, SUBST_IN_BODY))
			return true;
	return false;
}

/*
 * The whole body (scanned) with the placeholders of --body secrets bound to host replaced, into
 * *ret (a secure buffer), and head's framing field replaced by the new Content-Length (a chunked
 * body goes re-framed). Nothing to replace: *ret stays NULL. Returns 0, -EFBIG (the result is
 * over BUF_SECURE_MAX) or another negative error.
 */
static int body_substitute(struct conn *c, const struct http_head *h, const char *host,
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
		if (l->counts[k] > 0 && plain_refused(c, l->owner[k]))
			return -EPROTO;
	/* build_head's framing field is the only one (the client's are hop-by-hop) and no field
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

/*
 * Reads the request body from the client, scans it, and sends head and body upstream. Bodies up
 * to PROXY_BODY_BUFFER are scanned whole before anything goes upstream; longer ones stream, and
 * the last (longest placeholder - 1) scanned bytes are held back, so no byte of a placeholder
 * is ever forwarded before the scan has seen all of it. A re-signed aws-chunked body goes
 * through rs's sigv4_stream; one that needs its hash (rs->need_body_hash) is hashed and
 * re-signed before the head goes, and refused (FWD_RESIGN) past PROXY_BODY_BUFFER. A body
 * for --body secrets (body_subst_wanted) is held whole, up to PROXY_BODY_BUFFER (past that it
 * streams as it is), and goes substituted with a Content-Length (body_substitute).
 */
static int forward_request(struct conn *c, const struct http_head *h, struct buf *head,
                           const char *host, uint16_t port, struct leak_info *leak,
                           struct up_error *e, uint64_t *sent, struct resign *rs, struct outcome *o)
{
	_cleanup_buf_secure_ struct buf *sbody = NULL;
	bool body_subst = body_subst_wanted(c, h, host, rs);
	struct sigv4_stream *stream = rs->res ? rs->res->stream : NULL;
	_cleanup_buf_ struct buf *pend = NULL;
	struct hits hs = {.c = c, .host = host, .leak = -1};
	struct http_chunked ck = {0};
	uint64_t remaining = h->content_length;
	bool chunked = h->framing == HTTP_BODY_CHUNKED, done = h->framing == HTTP_BODY_NONE,
	     head_sent = false;
	size_t hold = scan_max_len(c->scan) > 0 ? scan_max_len(c->scan) - 1 : 0;
	uint32_t st = SCAN_START;
	int r;

	leak->pat = -1;
	if (!done) {
		/* An aws-chunked body: the stream holds a chunk until its last byte, then hands it
		 * over whole (sigv4_stream_feed). */
		pend = buf_new(stream ? PEND_MAX + SIGV4_MAX_CHUNK + SIGV4_MAX_CHUNK_LINE
		                      : PEND_MAX);
		if (!pend)
			return FWD_CLIENT_GONE;
		if (h->expect_continue && buf_len(c->cl.in) == 0)
			(void)io_write(&c->cl, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	}
	while (!done) {
		const uint8_t *p, *data = NULL;
		size_t len, used = 0, dlen = 0;

		if (buf_len(c->cl.in) == 0) {
			ssize_t n = io_fill(&c->cl, PROXY_UPSTREAM_TIMEOUT_MS);
			if (n <= 0)
				return FWD_CLIENT_GONE;
		}
		p = buf_ptr(c->cl.in);
		len = buf_len(c->cl.in);
		if (!chunked) {
			dlen = (uint64_t)len < remaining ? len : (size_t)remaining;
			data = p;
			used = dlen;
			remaining -= dlen;
			done = remaining == 0;
		} else {
			r = http_chunked_feed(&ck, p, len, &used, &data, &dlen);
			if (r < 0)
				return FWD_BAD_BODY;
			done = r == 1;
		}
		if (dlen > 0) {
			hs.base = 0;
			(void)scan_feed(c->scan, &st, data, dlen, hit_fn, &hs);
			if (hs.leak >= 0) {
				leak->pat = hs.leak;
				leak->where = "body";
				return FWD_LEAK;
			}
			if (stream) {
				r = sigv4_stream_feed(stream, data, dlen, pend);
				if (r < 0)
					return rs->err = r, FWD_RESIGN;
			} else if (buf_put(pend, data, dlen) < 0)
				return FWD_CLIENT_GONE;
		}
		(void)buf_consume(c->cl.in, used);
		if (body_subst && buf_len(pend) > PROXY_BODY_BUFFER)
			body_subst = false; /* too long to hold whole: goes as it is */
		if (buf_len(pend) >= PROXY_BODY_BUFFER && !body_subst) {
			if (!head_sent) {
				if (rs->need_body_hash)
					return rs->err = -EFBIG, FWD_RESIGN;
				if (up_ensure(c, host, port, e) < 0)
					return FWD_UPSTREAM;
				if (io_write(&c->up, buf_ptr(head), buf_len(head)) < 0)
					return up_fail(e, 502, "the server closed the connection"),
					       FWD_UPSTREAM;
				*sent += buf_len(head);
				head_sent = true;
			}
			if (flush_pending(c, pend, buf_len(pend) - hold, chunked, sent) < 0)
				return up_fail(e, 502, "the server closed the connection"),
				       FWD_UPSTREAM;
		}
	}
	if (stream && (r = sigv4_stream_finish(stream)) < 0)
		return rs->err = r, FWD_RESIGN;
	if (!head_sent && rs->need_body_hash &&
	    (r = resign_body(c, h, rs, pend, head, host, leak)) < 0)
		return rs->err = r, FWD_RESIGN;
	if (body_subst && !head_sent) {
		r = body_substitute(c, h, host, head, pend, &sbody, o);
		if (r == -EFBIG)
			return up_fail(e, 413,
			               "the request body with the secrets' real values in it is "
			               "over %u KiB",
			               BUF_SECURE_MAX / 1024),
			       FWD_UPSTREAM;
		if (r == -EPROTO) {
			plain_refusal(c, host, e->msg, sizeof(e->msg));
			e->status = 403;
			return FWD_UPSTREAM;
		}
		if (r < 0)
			return up_fail(e, 502, "cannot substitute in the request body: %s",
			               slate_strerror(r)),
			       FWD_UPSTREAM;
		chunked = chunked && !sbody; /* substituted: goes with a Content-Length */
	}
	if (!head_sent) {
		if (up_ensure(c, host, port, e) < 0)
			return FWD_UPSTREAM;
		if (io_write(&c->up, buf_ptr(head), buf_len(head)) < 0) {
			/* A kept connection the server dropped just now: one more try. */
			if (up_connect(c, host, port, e) < 0 ||
			    (c->in_tunnel && up_tls(c, host, e) < 0) ||
			    io_write(&c->up, buf_ptr(head), buf_len(head)) < 0)
				return up_fail(e, 502, "cannot send the request to %s", host),
				       FWD_UPSTREAM;
		}
		*sent += buf_len(head);
	}
	if (sbody && flush_pending(c, sbody, buf_len(sbody), false, sent) < 0)
		return up_fail(e, 502, "the server closed the connection"), FWD_UPSTREAM;
	if (!sbody && pend &&
	    (flush_pending(c, pend, buf_len(pend), chunked, sent) < 0 ||
	     (chunked && io_write(&c->up, "0\r\n\r\n", 5) < 0)))
		return up_fail(e, 502, "the server closed the connection"), FWD_UPSTREAM;
	if (chunked)
		*sent += 5;
	return FWD_OK;
}

/* ---- responses ---- */

static int write_response_head(struct conn *c, const struct http_head *r, bool close_after,
                               uint64_t *received)
{
	_cleanup_buf_ struct buf *out = buf_new(HTTP_MAX_HEAD + 256);
	int e;

	if (!out)
		return -ENOMEM;
	if ((e = buf_putf(out, "HTTP/1.1 %u %s\r\n", r->status, r->reason)) < 0)
		return e;
	for (size_t i = 0; i < r->n_fields; i++) {
		const char *n = r->fields[i].name;
		if (r->status != 101 &&
		    (strcasecmp(n, "connection") == 0 || strcasecmp(n, "keep-alive") == 0 ||
		     strcasecmp(n, "proxy-connection") == 0))
			continue;
		if ((e = buf_putf(out, "%s: %s\r\n", n, r->fields[i].value)) < 0)
			return e;
	}
	if (close_after && r->status >= 200 && r->status != 101 &&
	    (e = buf_putf(out, "Connection: close\r\n")) < 0)
		return e;
	if ((e = buf_put(out, "\r\n", 2)) < 0)
		return e;
	*received += r->head_len;
	return io_write(&c->cl, buf_ptr(out), buf_len(out));
}

/* While a body streams, TLS buffers stay allocated (released again when idle, so that a
 * thousand idle tunnels stay small). */
static void bulk_mode(struct conn *c, bool on)
{
	SSL *ssls[2] = {c->cl.ssl, c->up.ssl};

	for (size_t i = 0; i < ELEMENTSOF(ssls); i++) {
		if (!ssls[i])
			continue;
		if (on)
			SSL_clear_mode(ssls[i], SSL_MODE_RELEASE_BUFFERS);
		else
			SSL_set_mode(ssls[i], SSL_MODE_RELEASE_BUFFERS);
	}
}

/*
 * A connection that goes idle (a kept-alive connection or a tunnel waiting for its next request,
 * an opaque tunnel waiting for bytes) gives back what it no longer needs: its TLS buffers, and
 * the pages of its thread's stack below what is in use now (a TLS handshake touches some 40 KiB
 * of stack, which would otherwise stay resident for the life of the thread). A thousand idle
 * tunnels then cost little more than their TLS state.
 */
#define IDLE_AFTER_MS 100
static void go_idle(struct conn *c)
{
	pthread_attr_t a;
	void *lo;
	size_t size;

	if (c->cl.ssl)
		(void)SSL_free_buffers(c->cl.ssl);
	if (c->up.ssl)
		(void)SSL_free_buffers(c->up.ssl);
	/* Not on the main thread: its "stack" as glibc reports it spans the whole rlimit, and
	 * other mappings may lie in there. */
	if (gettid() == getpid() || pthread_getattr_np(pthread_self(), &a) != 0)
		return;
	if (pthread_attr_getstack(&a, &lo, &size) == 0) {
		/* Everything well below this frame is unused (the stack grows down): 1 KiB is
		 * ample for the madvise() call itself, which is all that runs below it. */
		uintptr_t end = ((uintptr_t)__builtin_frame_address(0) - 1024) & ~(uintptr_t)4095;
		if (end > (uintptr_t)lo && end - (uintptr_t)lo < size)
			(void)madvise(lo, end - (uintptr_t)lo, MADV_DONTNEED);
	}
	(void)pthread_attr_destroy(&a);
}

static int relay_body_(struct conn *c, const struct http_head *r, uint64_t *received);

/* Relays a body framed as r says from upstream to the client. Returns 0 or < 0. */
static int relay_body(struct conn *c, const struct http_head *r, uint64_t *received)
{
	int e;

	if (r->framing == HTTP_BODY_NONE)
		return 0;
	bulk_mode(c, true);
	e = relay_body_(c, r, received);
	bulk_mode(c, false);
	return e;
}

static int relay_body_(struct conn *c, const struct http_head *r, uint64_t *received)
{
	_cleanup_free_ uint8_t *b = NULL;
	struct http_chunked ck = {0};
	uint64_t remaining = r->content_length;
	bool done = r->framing == HTTP_BODY_NONE || (r->framing == HTTP_BODY_LENGTH && !remaining);
	int e;

	while (!done) {
		const uint8_t *p;
		size_t len, used;

		if (buf_len(c->up.in) > 0) {
			p = buf_ptr(c->up.in);
			len = buf_len(c->up.in);
		} else {
			ssize_t n;
			size_t want = RELAY_CHUNK;
			if (!b && !(b = malloc(RELAY_CHUNK)))
				return -ENOMEM;
			if (r->framing == HTTP_BODY_LENGTH && remaining < want)
				want = (size_t)remaining;
			n = io_read(&c->up, b, want, IO_BLOCK);
			if (n < 0)
				return (int)n;
			if (n == 0) {
				if (r->framing == HTTP_BODY_UNTIL_CLOSE)
					return 0;
				return -EPIPE; /* truncated */
			}
			p = b;
			len = (size_t)n;
		}
		switch (r->framing) {
		case HTTP_BODY_LENGTH:
			used = (uint64_t)len < remaining ? len : (size_t)remaining;
			remaining -= used;
			done = remaining == 0;
			break;
		case HTTP_BODY_CHUNKED: {
			/* Framing only: the raw bytes go to the client as they came. */
			size_t off = 0;
			used = 0;
			while (off < len && !done) {
				const uint8_t *d;
				size_t dl, u;
				e = http_chunked_feed(&ck, p + off, len - off, &u, &d, &dl);
				if (e < 0)
					return e;
				off += u;
				done = e == 1;
			}
			used = off;
			break;
		}
		default:
			used = len;
			break;
		}
		if ((e = io_write(&c->cl, p, used)) < 0)
			return e;
		*received += used;
		if (p != b)
			(void)buf_consume(c->up.in, used);
	}
	return 0;
}

/*
 * Relays both directions until both sides are done (or idle_ms of silence), scanning what the
 * client sends when scan_client. Returns 0, or FWD_LEAK with leak filled.
 */
static int relay_both(struct conn *c, const char *host, uint64_t *up_bytes, uint64_t *down_bytes,
                      struct leak_info *leak)
{
	_cleanup_free_ uint8_t *b = malloc(READ_CHUNK);
	struct hits hs = {.c = c, .host = host, .leak = -1};
	bool cl_open = true, up_open = true;
	uint32_t st = SCAN_START;

	leak->pat = -1;
	if (!b)
		return -ENOMEM;
	/* What was read ahead on either side first. */
	if (buf_len(c->cl.in) > 0) {
		(void)scan_feed(c->scan, &st, buf_ptr(c->cl.in), buf_len(c->cl.in), hit_fn, &hs);
		if (hs.leak >= 0)
			goto leaked;
		if (io_write(&c->up, buf_ptr(c->cl.in), buf_len(c->cl.in)) < 0)
			return 0;
		*up_bytes += buf_len(c->cl.in);
		(void)buf_reset(c->cl.in);
	}
	if (buf_len(c->up.in) > 0) {
		if (io_write(&c->cl, buf_ptr(c->up.in), buf_len(c->up.in)) < 0)
			return 0;
		*down_bytes += buf_len(c->up.in);
		(void)buf_reset(c->up.in);
	}
	while (cl_open || up_open) {
		struct pollfd pfd[2] = {{.fd = cl_open ? c->cl.fd : -1, .events = POLLIN},
		                        {.fd = up_open ? c->up.fd : -1, .events = POLLIN}};
		bool pend_cl = cl_open && c->cl.ssl && SSL_has_pending(c->cl.ssl),
		     pend_up = up_open && c->up.ssl && SSL_has_pending(c->up.ssl);
		int r;

		do
			r = poll(pfd, 2, pend_cl || pend_up ? 0 : IDLE_AFTER_MS);
		while (r < 0 && errno == EINTR);
		if (r == 0 && !pend_cl && !pend_up) {
			go_idle(c);
			do
				r = poll(pfd, 2, PROXY_TUNNEL_IDLE_MS);
			while (r < 0 && errno == EINTR);
		}
		if (r < 0 || (r == 0 && !pend_cl && !pend_up))
			return 0;
		if (pend_cl || (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = io_read(&c->cl, b, READ_CHUNK, 0);
			if (n <= 0) {
				cl_open = false;
				if (c->up.ssl)
					(void)SSL_shutdown(c->up.ssl);
				else
					(void)shutdown(c->up.fd, SHUT_WR);
			} else {
				(void)scan_feed(c->scan, &st, b, (size_t)n, hit_fn, &hs);
				if (hs.leak >= 0)
					goto leaked;
				if (io_write(&c->up, b, (size_t)n) < 0)
					return 0;
				*up_bytes += (uint64_t)n;
			}
		}
		if (pend_up || (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = io_read(&c->up, b, READ_CHUNK, 0);
			if (n <= 0) {
				up_open = false;
				if (c->cl.ssl)
					(void)SSL_shutdown(c->cl.ssl);
				else
					(void)shutdown(c->cl.fd, SHUT_WR);
			} else {
				if (io_write(&c->cl, b, (size_t)n) < 0)
					return 0;
				*down_bytes += (uint64_t)n;
			}
		}
	}
	return 0;
leaked:
	leak->pat = hs.leak;
	leak->where = "tunnel";
	return FWD_LEAK;
}

/* ---- requests ---- */

/* Reads the next request head. Returns 1 with *ret, 0 when the client is done (EOF or idle), or
 * < 0 after answering the error. */
static int read_request(struct conn *c, struct http_head **ret)
{
	struct http_reader rd = {0};
	struct http_error err = {0};
	bool started = buf_len(c->cl.in) > 0;
	double deadline = started ? now_ms() + PROXY_HEAD_TIMEOUT_MS : 0;

	for (;;) {
		int timeout, r = http_parse_request(&rd, c->cl.in, ret, &err);
		ssize_t n;

		if (r == 1)
			return 1;
		if (r < 0) {
			if (r == SLATE_ERR_INVALID_FORMAT) {
				respond(c, err.status, "slate egress proxy: %s", err.reason);
				return r;
			}
			return r;
		}
		if (started) {
			double left = deadline - now_ms();
			if (left <= 0) {
				respond(c, 408,
				        "slate egress proxy: the request head took too long");
				return -ETIMEDOUT;
			}
			timeout = (int)left + 1;
		} else {
			/* Nothing for a moment: idle, until the next request comes (waiting here, not
			 * in io_fill(), whose read buffer would keep four more pages of stack). */
			if (io_wait(&c->cl, POLLIN, IDLE_AFTER_MS) == -ETIMEDOUT) {
				go_idle(c);
				if (io_wait(&c->cl, POLLIN, PROXY_IDLE_TIMEOUT_MS) < 0)
					return 0;
			}
			timeout = PROXY_IDLE_TIMEOUT_MS;
		}
		n = io_fill(&c->cl, timeout);
		if (n == -ETIMEDOUT && started) {
			respond(c, 408, "slate egress proxy: the request head took too long");
			return -ETIMEDOUT;
		}
		if (n <= 0)
			return 0;
		if (!started) {
			started = true;
			deadline = now_ms() + PROXY_HEAD_TIMEOUT_MS;
		}
	}
}

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

/* Serves one request that is not CONNECT. Returns 1 to read another on this connection. */
static int handle_request(struct conn *c, struct http_head *h)
{
	_cleanup_buf_secure_ struct buf *head = NULL;
	char host[HOST_BUF] = "", hhost[HOST_BUF], origin[HTTP_MAX_REQUEST_LINE + 2] = "";
	const char *path = h->target;
	uint16_t port = 0, hport, default_port = c->in_tunnel ? 443 : 80;
	struct outcome o = {0};
	struct leak_info leak = {.pat = -1};
	struct up_error e = {0};
	_cleanup_(resign_done) struct resign rs = {0};
	bool upgrade, keep;
	double t0 = now_ms();
	int r, rr;

	c->plain_secret = -1;
	/* Where it goes: the tunnel's target, or the absolute-form authority. */
	if (c->in_tunnel) {
		(void)snprintf(host, sizeof(host), "%s", c->t_host);
		port = c->t_port;
		if (h->target[0] != '/' && !streq(h->target, "*")) {
			char ahost[HOST_BUF];
			uint16_t aport;
			if (parse_absolute(h->target, "https", 443, ahost, &aport, &path) < 0) {
				respond(c, 400, "slate egress proxy: malformed request target");
				return 0;
			}
			if (!streq(ahost, host) || aport != port) {
				o.status = 421;
				(void)snprintf(o.refused, sizeof(o.refused),
				               "request target %s does not match the tunnel to %s",
				               ahost, host);
				goto refuse;
			}
		}
	} else {
		if (parse_absolute(h->target, "http", 80, host, &port, &path) < 0) {
			o.status = 400;
			(void)snprintf(o.refused, sizeof(o.refused),
			               "not a proxy request: send absolute-form http:// targets or "
			               "CONNECT");
			goto refuse;
		}
		if (!egress_policy_allows_host(c->policy, host, NULL)) {
			o.status = 403;
			(void)snprintf(o.refused, sizeof(o.refused),
			               "%s is not allowed by the egress policy of %s", host, c->ws);
			goto refuse;
		}
	}
	if (!*path)
		path = streq(h->method, "OPTIONS") ? "*" : "/";
	(void)snprintf(origin, sizeof(origin), "%s", path);

	/* The Host field must name the host actually connected to. */
	if (!h->host ||
	    host_split_authority(h->host, strlen(h->host), default_port, hhost, sizeof(hhost),
	                         &hport) < 0 ||
	    !streq(hhost, host) || hport != port) {
		o.status = 421;
		(void)snprintf(o.refused, sizeof(o.refused), "Host does not match %s %s:%u",
		               c->in_tunnel ? "the CONNECT target" : "the request target", host,
		               (unsigned)port);
		goto refuse;
	}

	upgrade = h->upgrade && http_list_has(http_head_get(h, "upgrade", NULL), "websocket");
	head = buf_new(HTTP_MAX_HEAD + 1024);
	if (!head)
		return 0;
	/* An AWS request signed with a placeholder bound here: re-signed (doc/sigv4.md). A leak
	 * in it is still reported first. */
	rr = resign_start(c, h, origin, host, upgrade, &o, &rs);
	o.sigv4 = rs.res;
	r = build_head(c, h, origin, host, upgrade, head, &leak, &o, rr < 0 ? NULL : rs.res);
	if (leak.pat >= 0) {
		report_leak(c, leak.pat, leak.where, host, port, h->method, origin, true);
		return 0;
	}
	if (rr < 0) {
		resign_refuse(rr, &o);
		goto refuse;
	}
	if (r == -EPROTO) {
		o.status = 403;
		o.n_substituted = 0; /* nothing was sent: the audit event says so */
		plain_refusal(c, host, o.refused, sizeof(o.refused));
		goto refuse;
	}
	if (r == -EINVAL) {
		o.status = 502;
		(void)snprintf(o.refused, sizeof(o.refused),
		               "a secret's value cannot be sent in a header field");
		goto refuse;
	}
	if (r < 0)
		return 0;

	r = forward_request(c, h, head, host, port, &leak, &e, &o.sent, &rs, &o);
	buf_free_secure(TAKE_PTR(head));
	o.sigv4 = rs.res;
	switch (r) {
	case FWD_OK:
		break;
	case FWD_RESIGN:
		up_close(c); /* a body cut short upstream: never completed */
		resign_refuse(rs.err, &o);
		goto refuse;
	case FWD_LEAK:
		up_close(c); /* what went before the leak must never be completed */
		report_leak(c, leak.pat, leak.where, host, port, h->method, origin, true);
		return 0;
	case FWD_BAD_BODY:
		up_close(c);
		o.status = 400;
		(void)snprintf(o.refused, sizeof(o.refused), "malformed chunked body");
		goto refuse;
	case FWD_UPSTREAM:
		up_close(c);
		if (c->plain_secret >= 0)
			o.n_substituted = 0; /* refused for plain HTTP: nothing was sent */
		o.status = e.status ? e.status : 502;
		(void)snprintf(o.refused, sizeof(o.refused), "%s", e.msg);
		goto refuse;
	default:
		up_close(c);
		return 0;
	}

	/* The response: interim ones, then the final one. */
	keep = h->keep_alive;
	for (;;) {
		_cleanup_(http_head_freep) struct http_head *resp = NULL;
		struct http_reader rd = {0};
		struct http_error err = {0};
		for (;;) {
			ssize_t n;
			r = http_parse_response(&rd, c->up.in, h->method, &resp, &err);
			if (r != 0)
				break;
			n = io_fill(&c->up, PROXY_UPSTREAM_TIMEOUT_MS);
			if (n <= 0) {
				r = n == -ETIMEDOUT ? -ETIMEDOUT : -EPIPE;
				break;
			}
		}
		if (r < 0) {
			up_close(c);
			o.status = r == -ETIMEDOUT ? 504 : 502;
			(void)snprintf(o.refused, sizeof(o.refused), "%s",
			               r == SLATE_ERR_INVALID_FORMAT ? err.reason
			               : r == -ETIMEDOUT ? "the server did not answer in time"
			                                 : "the server closed the connection");
			goto refuse;
		}
		o.status = resp->status;
		if (resp->status == 101) {
			uint64_t up = 0, down = 0;
			if (!upgrade || write_response_head(c, resp, false, &o.received) < 0) {
				up_close(c);
				return 0;
			}
			r = relay_both(c, host, &up, &down, &leak);
			o.sent += up;
			o.received += down;
			up_close(c);
			if (r == FWD_LEAK) {
				report_leak(c, leak.pat, leak.where, host, port, NULL, NULL, false);
				return 0;
			}
			audit_request(c, h->method, origin, host, port, &o, t0);
			return 0;
		}
		if (resp->status < 200) {
			if (write_response_head(c, resp, false, &o.received) < 0)
				return up_close(c), 0;
			continue;
		}
		keep = keep && resp->keep_alive;
		if (write_response_head(c, resp, !keep, &o.received) < 0 ||
		    relay_body(c, resp, &o.received) < 0) {
			up_close(c);
			audit_request(c, h->method, origin, host, port, &o, t0);
			return 0;
		}
		if (!resp->keep_alive)
			up_close(c);
		break;
	}
	audit_request(c, h->method, origin, host, port, &o, t0);
	return keep ? 1 : 0;

refuse:
	respond(c, o.status, "slate egress proxy: %s", o.refused);
	audit_request(c, h->method, origin[0] ? origin : h->target, host[0] ? host : "-", port, &o,
	              t0);
	return 0;
}

static void serve_http(struct conn *c);

static int sni_cb(SSL *ssl, int *alert, void *arg)
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

static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
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

static void audit_tunnel(struct conn *c, const char *kind, unsigned status, uint64_t up,
                         uint64_t down, double t0, const char *refused)
{
	struct outcome o = {.status = status, .sent = up, .received = down};
	char target[HOST_BUF + 8];

	host_format_authority(c->t_host, c->t_port, target, sizeof(target));
	if (refused)
		(void)snprintf(o.refused, sizeof(o.refused), "%s", refused);
	(void)kind;
	audit_request(c, "CONNECT", NULL, c->t_host, c->t_port, &o, t0);
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
	set_timeouts(h->c->cl.fd, PROXY_UPSTREAM_TIMEOUT_MS);
	h->c->in_tunnel = true;
	h->r = up_tls(h->c, h->c->t_host, h->e) < 0 ? -2 : 0;
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
	if (scan_piece(&hs, h->target, strlen(h->target)) < 0) {
		leak->where = "header";
		for (size_t i = 0; i < h->n_fields && hs.leak < 0; i++)
			if (scan_piece(&hs, h->fields[i].name, strlen(h->fields[i].name)) < 0)
				(void)scan_piece(&hs, h->fields[i].value,
				                 strlen(h->fields[i].value));
	}
	leak->pat = hs.leak;
	return leak->pat >= 0;
}

/* CONNECT host:port. Consumes the connection. */
static void handle_connect(struct conn *c, struct http_head *h)
{
	struct up_error e = {0};
	struct leak_info leak;
	uint64_t up = 0, down = 0;
	double t0 = now_ms();
	char why[1024];
	bool tls = false, parsed;
	int r;

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
		report_leak(c, leak.pat, leak.where, c->t_host, c->t_port, h->method, NULL, true);
		return;
	}
	if (!parsed) {
		respond(c, 400, "slate egress proxy: CONNECT needs host:port");
		return;
	}
	if (h->framing != HTTP_BODY_NONE) {
		respond(c, 400, "slate egress proxy: CONNECT with a body");
		return;
	}
	if (!egress_policy_allows_host(c->policy, c->t_host, NULL)) {
		(void)snprintf(why, sizeof(why), "%s is not allowed by the egress policy of %s",
		               c->t_host, c->ws);
		respond(c, 403, "slate egress proxy: %s", why);
		audit_tunnel(c, NULL, 403, 0, 0, t0, why);
		return;
	}
	r = up_connect(c, c->t_host, c->t_port, &e);
	if (r < 0) {
		respond(c, e.status, "slate egress proxy: %s", e.msg);
		audit_tunnel(c, NULL, e.status, 0, 0, t0, e.msg);
		return;
	}
	if (io_write(&c->cl, "HTTP/1.1 200 Connection established\r\n\r\n", 39) < 0)
		return;

	/* Who speaks first, and is it TLS? A TLS handshake sent along with the CONNECT, before
	 * the answer, would otherwise pass as opaque bytes, uninspected: refused. */
	if (buf_len(c->cl.in) > 0 && buf_ptr(c->cl.in)[0] == 0x16) {
		audit_tunnel(c, NULL, 400, 0, 0, t0,
		             "a TLS handshake sent before the tunnel was established");
		return;
	}
	if (buf_len(c->cl.in) == 0) {
		struct pollfd pfd[2] = {{.fd = c->cl.fd, .events = POLLIN},
		                        {.fd = c->up.fd, .events = POLLIN}};
		do
			r = poll(pfd, 2, PROXY_TUNNEL_IDLE_MS);
		while (r < 0 && errno == EINTR);
		if (r <= 0)
			return;
		if (pfd[0].revents & POLLIN) {
			uint8_t first;
			ssize_t n = recv(c->cl.fd, &first, 1, MSG_PEEK);
			if (n <= 0)
				return;
			tls = first == 0x16; /* a TLS handshake record */
		}
	}
	if (tls) {
		_cleanup_(SSL_freep) SSL *ssl = SSL_new(c->p->server_ctx);
		if (!ssl || SSL_set_fd(ssl, c->cl.fd) != 1 ||
		    egress_ca_use_leaf(c->p->ca, c->t_host, ssl) < 0)
			return;
		SSL_set_app_data(ssl, c);
		set_timeouts(c->cl.fd, PROXY_HEAD_TIMEOUT_MS);
		r = handshakes(c, ssl, &e);
		if (r == -1) {
			if (c->sni_mismatch) {
				(void)snprintf(
				        why, sizeof(why),
				        "TLS server name %s does not match the CONNECT target %s",
				        c->sni, c->t_host);
				audit_tunnel(c, NULL, 421, 0, 0, t0, why);
			}
			return;
		}
		c->cl.ssl = TAKE_PTR(ssl);
		if (r < 0) {
			respond(c, e.status, "slate egress proxy: %s", e.msg);
			audit_tunnel(c, NULL, e.status, 0, 0, t0, e.msg);
			return;
		}
		serve_http(c);
		(void)SSL_shutdown(c->cl.ssl);
		return;
	}
	/* Opaque: SSH or anything else that is not TLS, scanned as it passes. */
	r = relay_both(c, c->t_host, &up, &down, &leak);
	if (r == FWD_LEAK) {
		up_close(c);
		report_leak(c, leak.pat, "tunnel", c->t_host, c->t_port, NULL, NULL, false);
		return;
	}
	audit_tunnel(c, "opaque", 200, up, down, t0, NULL);
}

static void serve_http(struct conn *c)
{
	for (;;) {
		_cleanup_(http_head_freep) struct http_head *h = NULL;
		int r = read_request(c, &h);

		if (r <= 0 || c->p->stopping)
			return;
		if (streq(h->method, "CONNECT")) {
			if (c->in_tunnel) {
				respond(c, 405, "slate egress proxy: CONNECT inside a tunnel");
				return;
			}
			handle_connect(c, h);
			return;
		}
		if (handle_request(c, h) <= 0 || c->leaked)
			return;
	}
}

/* ---- the proxy ---- */

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
	SSL_CTX_set_tlsext_servername_callback(p->server_ctx, sni_cb);
	SSL_CTX_set_alpn_select_cb(p->server_ctx, alpn_cb, NULL);
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
	up_close(c);
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
		respond(&c, 503, "slate egress proxy: too many connections");
		buf_free(c.cl.in);
		buf_free(c.up.in);
		return;
	}
	set_timeouts(fd, PROXY_UPSTREAM_TIMEOUT_MS);
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
		respond(&c, 403, "slate egress proxy: %s",
		        why[0] ? why : "this workspace cannot use the network now");
	else
		serve_http(&c);
	if (c.answered_error && !p->stopping)
		linger_close(&c);

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

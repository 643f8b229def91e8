/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The egress proxy's insides, shared by its files (proxy.h is the interface; doc/egress-proxy.md,
 * "Source files"): the connection and what a request produces, and one section per file below.
 * Nothing here is used outside src/libslate/proxy/.
 */

#include <netinet/in.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proxy/http.h"
#include "proxy/proxy.h"
#include "proxy/scan.h"
#include "proxy/sigv4.h"
#include "proxy/subst.h"
#include "proxy/tripwire.h"
#include "util/buf.h"
#include "util/host.h"
#include "util/macro.h"

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
	/* The secret whose real value a plain-HTTP request would have carried (proxy_plain_refused),
	 * or -1. */
	long plain_secret;
	bool answered_error; /* closing after an error answer: linger (see proxy_linger_close) */
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

/* proxy_io_read()'s timeout for "no poll()" */
#define IO_BLOCK (-1)

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

struct leak_info {
	long pat;
	const char *where;
};

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

/*
 * One request's re-signing. The re-signer sees the request as proxy_build_head sends it: the
 * forwarded fields in their order, then the framing field proxy_build_head adds.
 */
struct resign {
	struct sigv4_header fields[HTTP_MAX_FIELDS + 1];
	struct sigv4_request req;
	struct sigv4_secret_lookup lookup;
	struct sigv4_resigned *res; /* set once re-signed */
	char length[24];
	char body_sha256[SIGV4_SIG_HEX + 1];
	bool need_body_hash; /* header-signed without x-amz-content-sha256: hash the body first */
	int err;             /* why proxy_forward_request refused it (FWD_RESIGN) */
	/* What proxy_build_head needs again once the body is hashed. */
	const char *origin;
	bool upgrade;
	struct outcome *o;
};

struct up_error {
	unsigned status;
	char msg[512];
};

enum fwd_result {
	FWD_OK = 0,
	FWD_CLIENT_GONE = -1, /* the client closed or stalled mid-body */
	FWD_BAD_BODY = -2,    /* malformed chunked framing */
	FWD_UPSTREAM = -3,    /* proxy_up_ensure failed (e filled) or a write failed */
	FWD_LEAK = -4,        /* leak filled */
	FWD_RESIGN = -5,      /* AWS re-signing refused it (rs->err) */
};

/* Where a secret was substituted, for the audit event's "substituted_in". */
enum { SUBST_IN_HEADER = 1, SUBST_IN_BODY = 2, SUBST_IN_QUERY = 4 };

#define IDLE_AFTER_MS 100

/* io.c: I/O on either side, TLS or not; answers to the client; request heads; idling. */
/* Waits for events on io (POLLIN: also true while OpenSSL holds unread records). Returns 1,
 * -ETIMEDOUT or -errno. */
int proxy_io_wait(struct io *io, short events, int timeout_ms);
/* Reads up to n bytes, waiting at most timeout_ms for the first (IO_BLOCK: no poll(), the
 * socket's own SO_RCVTIMEO bounds the wait; for bulk transfers, one syscall less per read).
 * Returns the count, 0 at EOF, or < 0. */
ssize_t proxy_io_read(struct io *io, void *p, size_t n, int timeout_ms);
/* Writes all n bytes. Returns 0 or < 0. */
int proxy_io_write(struct io *io, const void *p, size_t n);
/* Reads more into io->in. Returns the count, 0 at EOF, or < 0. */
ssize_t proxy_io_fill(struct io *io, int timeout_ms);
bool proxy_cork_fd(int fd, bool on);
void proxy_set_timeouts(int fd, int ms);
/* Answers the client with status and a text body, and closes after it. */
_printf_(3, 4) void proxy_respond(struct conn *c, unsigned status, const char *fmt, ...);
void proxy_linger_close(struct conn *c);
void proxy_bulk_mode(struct conn *c, bool on);
void proxy_go_idle(struct conn *c);
/* Reads the next request head. Returns 1 with *ret, 0 when the client is done (EOF or idle), or
 * < 0 after answering the error. */
int proxy_read_request(struct conn *c, struct http_head **ret);

/* audit.c: the audit events of requests and tunnels; leak reports (hook, audit, 451). t0: when
 * the request came, in time_mono_s() seconds (util/time.h); the latency is logged in ms. */
void proxy_audit_request(struct conn *c, const char *method, const char *target, const char *host,
                         uint16_t port, const struct outcome *o, double t0);
void proxy_audit_tunnel(struct conn *c, const char *kind, unsigned status, uint64_t up,
                        uint64_t down, double t0, const char *refused);
void proxy_report_leak(struct conn *c, long pat, const char *where, const char *host, uint16_t port,
                       const char *method, const char *target, bool answer);

/* rewrite.c: bindings, the leak scan, substitution in the head, the query and bodies. */
bool proxy_bound_to(const struct conn *c, size_t secret, const char *host);
/* scan_feed()'s callback on a struct hits. */
int proxy_hit_fn(size_t pattern, size_t end, void *userdata);
/* Scans one complete piece. Returns the leaking pattern or -1; with h->collect, h->v gets the
 * bound ones. */
long proxy_scan_piece(struct hits *h, const void *p, size_t n);
/* Whether secret i's real value may not go into this request (plain HTTP); remembered. */
bool proxy_plain_refused(struct conn *c, size_t i);
void proxy_plain_refusal(const struct conn *c, const char *host, char *out, size_t len);
bool proxy_header_safe(const struct buf *real);
/* Whether secret i is substituted at where (SUBST_IN_BODY, SUBST_IN_QUERY) towards host. */
bool proxy_subst_applies(const struct conn *c, size_t i, const char *host, unsigned where);
/* Whether name concerns this hop only and never goes upstream. */
bool proxy_hop_by_hop(const struct http_head *h, const char *name, bool keep_upgrade);
/* The head that goes upstream, scanned and substituted. Returns 0 (leak->pat >= 0 on a leak),
 * -EINVAL (a real value unfit for a header), -EPROTO (plain HTTP refused), -ENOMEM. */
int proxy_build_head(struct conn *c, const struct http_head *h, const char *origin,
                     const char *host, bool upgrade, struct buf *out, struct leak_info *leak,
                     struct outcome *o, const struct sigv4_resigned *rs);
bool proxy_body_subst_wanted(const struct conn *c, const struct http_head *h, const char *host,
                             const struct resign *rs);
/* The body with --body placeholders replaced, and head's framing field with it. Returns 0
 * (*ret NULL: nothing replaced), -EFBIG, -EPROTO or another negative error. */
int proxy_body_substitute(struct conn *c, const struct http_head *h, const char *host,
                          struct buf *head, const struct buf *body, struct buf **ret,
                          struct outcome *o);

/* resign.c: AWS SigV4 re-signing as requests go through. */
void proxy_resign_done(struct resign *rs);
/* Returns 0 (rs->res when re-signed, rs->need_body_hash when the body must be hashed first)
 * or the error to refuse the request with (proxy_resign_refuse). */
int proxy_resign_start(struct conn *c, const struct http_head *h, const char *origin,
                       const char *host, bool upgrade, struct outcome *o, struct resign *rs);
void proxy_resign_refuse(int r, struct outcome *o);
/* Re-signs over the hash of body (all of it) and builds head again. Returns 0 or < 0. */
int proxy_resign_body(struct conn *c, const struct http_head *h, struct resign *rs,
                      const struct buf *body, struct buf *head, const char *host,
                      struct leak_info *leak);

/* upstream.c: resolving, connecting (the policy on addresses), TLS to the server. Each returns
 * 0, or < 0 with e filled. */
void proxy_up_close(struct conn *c);
_printf_(3, 4) int proxy_up_fail(struct up_error *e, unsigned status, const char *fmt, ...);
int proxy_up_connect(struct conn *c, const char *host, uint16_t port, struct up_error *e);
int proxy_up_tls(struct conn *c, const char *host, struct up_error *e);
int proxy_up_ensure(struct conn *c, const char *host, uint16_t port, struct up_error *e);

/* forward.c: bodies upstream and responses back. proxy_forward_request and proxy_relay_both return an
 * enum fwd_result; the others 0 or < 0. */
int proxy_forward_request(struct conn *c, const struct http_head *h, struct buf *head,
                          const char *host, uint16_t port, struct leak_info *leak,
                          struct up_error *e, uint64_t *sent, struct resign *rs, struct outcome *o);
int proxy_write_response_head(struct conn *c, const struct http_head *r, bool close_after,
                              uint64_t *received);
int proxy_relay_body(struct conn *c, const struct http_head *r, uint64_t *received);
int proxy_relay_both(struct conn *c, const char *host, uint64_t *up_bytes, uint64_t *down_bytes,
                     struct leak_info *leak);

/* request.c: one request that is not CONNECT. Returns 1 to read another on this connection. */
int proxy_handle_request(struct conn *c, struct http_head *h);

/* tunnel.c: CONNECT, and the TLS callbacks of the interception (proxy_new sets them). */
void proxy_handle_connect(struct conn *c, struct http_head *h);
int proxy_sni_cb(SSL *ssl, int *alert, void *arg);
int proxy_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                  const unsigned char *in, unsigned int inlen, void *arg);

/* proxy.c: the request loop of a connection (also inside an intercepted tunnel). */
void proxy_serve_http(struct conn *c);

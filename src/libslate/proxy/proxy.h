/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The egress proxy (doc/egress-proxy.md): a guest's only way out. An HTTP/1.1 forward proxy for
 * absolute-form requests and CONNECT; a CONNECT whose client speaks TLS first is intercepted
 * with a leaf certificate from the egress CA (proxy/ca.h) and each request inside is handled like
 * a plain one; any other CONNECT is an opaque tunnel whose outgoing bytes are scanned.
 *
 * For every request: strict framing (proxy/http.h), the host that counts is the one connected to
 * (CONNECT target, SNI and Host must agree), the egress policy (proxy/policy.h) decides the host
 * and, after DNS resolution, the address; placeholders of secrets bound to the host are replaced
 * by real values in header fields (Authorization: Basic decoded and re-encoded), never in the
 * request line or the body; a placeholder anywhere in a request (or a tunnel) to a host its
 * secret is not bound to stops it: nothing is forwarded, the leak hook runs (slated marks the
 * workspace compromised and pauses it), and the guest gets 451.
 *
 * Concurrency: proxy_serve() serves one client connection on the calling thread with blocking
 * I/O and poll() timeouts; one thread per connection keeps every connection independent (a slow
 * or hostile client holds only its own thread). Everything shared (the CA's leaf cache, the list
 * of live connections) is locked.
 */

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/policy.h"
#include "secrets/secrets.h"
#include "util/macro.h"

#define PROXY_MAX_CONNECTIONS 4096u
#define PROXY_BODY_BUFFER (256u * 1024u) /* request bodies up to this are scanned whole first */
#define PROXY_HEAD_TIMEOUT_MS 30000      /* from a request's first byte to its last head byte */
#define PROXY_IDLE_TIMEOUT_MS 120000     /* between requests on a kept-alive connection */
#define PROXY_UPSTREAM_TIMEOUT_MS 300000 /* silence from a server (or a body's sender) */
#define PROXY_CONNECT_TIMEOUT_MS 10000
#define PROXY_TUNNEL_IDLE_MS 3600000

/* What the leak hook is told. Strings are valid during the call only. */
struct proxy_leak {
	const char *workspace;
	const char *host; /* where the request was headed (normalised) */
	uint16_t port;
	const char *secret;     /* the secret's key name */
	const char *value_name; /* which of its values ("value", "access-key-id"...) */
	const char *where;      /* "url", "header", "body" or "tunnel" */
	const char *encoding;   /* NULL, or how it was encoded: "base64-encoded"... (tripwire.h) */
	const char *method;     /* NULL in a tunnel */
	const char *path;       /* query values redacted; NULL in a tunnel */
	const char *const *bound_hosts;
	size_t n_bound_hosts;
};

struct proxy_hooks {
	/*
	 * Loads what a connection of workspace needs: its secrets (*ret_secrets may be left NULL:
	 * none) and its policy (NULL: allow-all). Returning < 0 refuses the connection, with
	 * ret_why (may stay empty) saying why (e.g. the workspace is compromised).
	 */
	int (*load)(void *userdata, const char *workspace, struct secret_set **ret_secrets,
	            struct egress_policy **ret_policy, char *ret_why, size_t why_len);
	/* Frees what load returned in *ret_secrets. */
	void (*release)(void *userdata, struct secret_set *secrets);
	/* A placeholder went towards a host it is not bound to. Runs before the guest is answered
	 * (the state change is persisted before it is reported): mark the workspace compromised. */
	void (*leak)(void *userdata, const struct proxy_leak *leak);
	/* Then, once the guest has been sent its 451 (so that it has a chance to read why):
	 * contain it (slated pauses the domain). May be NULL. */
	void (*contain)(void *userdata, const struct proxy_leak *leak);
	/* One audit event: type "egress" or "leak"; ev is borrowed. */
	void (*audit)(void *userdata, const char *workspace, const char *type,
	              struct json_object *ev);
	void *userdata;
};

struct proxy_config {
	int ca_dirfd; /* where egress-ca.key and egress-ca.crt live: the install directory */
	/* For tests only: a PEM file of CA certificates upstream servers may also chain to (the
	 * system trust store is always used). NULL: none. */
	const char *extra_ca_file;
	/* For tests only: "HOST:PORT:ADDR:PORT[,...]": connect to ADDR:PORT when HOST:PORT is
	 * asked for (curl's --connect-to). The address is still subject to the egress policy, so a
	 * test that points a name at 127.0.0.1 must also allow 127.0.0.1. NULL: none. */
	const char *connect_to;
};

struct proxy;

/* Loads or creates the egress CA and sets up TLS. Returns 0, -EINVAL (bad connect_to),
 * SLATE_ERR_CRYPTO, SLATE_ERR_KEY_PERMISSIONS, -errno. */
int proxy_new(const struct proxy_config *cfg, const struct proxy_hooks *hooks, struct proxy **ret);
/* Shuts down every connection being served and refuses new ones; returns at once. */
void proxy_shutdown(struct proxy *p);
/* proxy_shutdown, then waits until every proxy_serve() has returned, and frees. */
void proxy_free(struct proxy *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct proxy *, proxy_free);

/* The egress CA certificate (PEM) guests must trust. */
const char *proxy_ca_pem(const struct proxy *p);

/* Serves the client connection fd (a connected stream socket; left open) for workspace until it
 * ends. Blocks; call it on a thread of its own per connection. */
void proxy_serve(struct proxy *p, int fd, const char *workspace);

/* Writes path with every query value replaced by "*" ("/a?key=*&flag") into out. */
void proxy_redact_path(const char *target, char *out, size_t len);

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The upstream side: resolution, the egress policy on addresses, connecting, TLS to the
 * server with its certificate verified. */

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
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy/internal.h"
#include "util/error.h"
#include "util/fs.h"

void proxy_up_close(struct conn *c)
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

_printf_(3, 4) int proxy_up_fail(struct up_error *e, unsigned status, const char *fmt, ...)
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
	proxy_set_timeouts(fd, PROXY_UPSTREAM_TIMEOUT_MS);
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
int proxy_up_connect(struct conn *c, const char *host, uint16_t port, struct up_error *e)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC};
	struct addrinfo *res = NULL;
	const char *name = host;
	char portstr[8], refused[256] = "";
	uint16_t cport = port;
	int r, last = -ECONNREFUSED, fd = -1;

	proxy_up_close(c);
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
		return proxy_up_fail(e, 502, "cannot resolve %s: %s", host, gai_strerror(r));
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		enum addr_class cls;
		char at[INET6_ADDRSTRLEN + 8];
		if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
			continue;
		addr_text(ai->ai_addr, at, sizeof(at));
		if (!egress_policy_allows_addr(c->policy, ai->ai_addr, &cls)) {
			if (!refused[0])
				(void)snprintf(refused, sizeof(refused), "%s (%s)", at,
				               host_addr_class_name(cls));
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
			return proxy_up_fail(
			        e, 403,
			        "%s resolves to %s, which workspaces may not reach unless "
			        "the address is allowed explicitly ('slate egress %s allow "
			        "ADDRESS')",
			        host, refused, c->ws);
		return proxy_up_fail(e, last == -ETIMEDOUT ? 504 : 502,
		                     "cannot connect to %s:%u: %s", host, (unsigned)port,
		                     slate_strerror(last));
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
int proxy_up_tls(struct conn *c, const char *host, struct up_error *e)
{
	_cleanup_(SSL_freep) SSL *ssl = SSL_new(c->p->client_ctx);
	long vr;

	if (!ssl || SSL_set_fd(ssl, c->up.fd) != 1)
		return proxy_up_fail(e, 502, "TLS setup failed");
	if (host_is_ip(host)) {
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1)
			return proxy_up_fail(e, 502, "TLS setup failed");
	} else if (SSL_set_tlsext_host_name(ssl, host) != 1 || SSL_set1_host(ssl, host) != 1)
		return proxy_up_fail(e, 502, "TLS setup failed");
	ERR_clear_error();
	if (SSL_connect(ssl) != 1) {
		vr = SSL_get_verify_result(ssl);
		ERR_clear_error();
		if (vr != X509_V_OK)
			return proxy_up_fail(e, 502, "the certificate of %s cannot be trusted: %s",
			                     host, X509_verify_cert_error_string(vr));
		return proxy_up_fail(e, 502, "TLS handshake with %s failed", host);
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
int proxy_up_ensure(struct conn *c, const char *host, uint16_t port, struct up_error *e)
{
	int r;

	if (c->up.fd >= 0 && streq(c->u_host, host) && c->u_port == port &&
	    c->u_tls == c->in_tunnel && up_usable(c))
		return 0;
	r = proxy_up_connect(c, host, port, e);
	if (r < 0)
		return r;
	if (c->in_tunnel) {
		r = proxy_up_tls(c, host, e);
		if (r < 0) {
			proxy_up_close(c);
			return r;
		}
	}
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The egress proxy's parts: the multi-pattern scan (proxy/scan.c) against a naive search, the
 * egress policy (proxy/policy.c), the egress CA (proxy/ca.c) checked with OpenSSL's own chain
 * and host name verification, query redaction, and the proxy core end to end over a socketpair
 * to a small HTTP server on 127.0.0.1 (substitution for a bound host, 451 and the leak hook for
 * another). tests/integration/proxy.sh does the rest with curl and TLS peers.
 */

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "host-cases.h"
#include "proxy/ca.h"
#include "proxy/policy.h"
#include "proxy/proxy.h"
#include "proxy/scan.h"
#include "secrets/install.h"
#include "secrets/secrets.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

/* ---- scan ---- */

struct found {
	size_t pattern, end; /* end: offset in the whole stream */
};
struct collect {
	struct found v[4096];
	size_t n, base;
};

static int collect_fn(size_t pattern, size_t end, void *userdata)
{
	struct collect *c = userdata;
	if (c->n < 4096)
		c->v[c->n++] = (struct found){pattern, c->base + end};
	return 0;
}

static int cmp_found(const void *a, const void *b)
{
	const struct found *x = a, *y = b;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return x->pattern < y->pattern ? -1 : x->pattern > y->pattern;
}

/* Scans 200 random texts (drawn from alphabet, with whole patterns sprinkled in) in random
 * pieces and compares every match with a naive search. */
static void check_scan(const char *const *pats, size_t n_pats, const char *alphabet,
                       struct scan **ret)
{
	size_t *lens = calloc(n_pats, sizeof(*lens)), max = 0;
	struct scan *s = NULL;
	struct collect *got = calloc(1, sizeof(*got)), *want = calloc(1, sizeof(*want));
	size_t n_alpha = strlen(alphabet);
	static char text[4000];

	assert_non_null(lens);
	for (size_t i = 0; i < n_pats; i++) {
		lens[i] = strlen(pats[i]);
		if (lens[i] > max)
			max = lens[i];
	}
	assert_int_equal(scan_new(pats, lens, n_pats, &s), 0);
	assert_int_equal(scan_max_len(s), max);
	srand(1);
	for (int round = 0; round < 200; round++) {
		size_t n = (size_t)(rand() % (int)sizeof(text));
		uint32_t st = SCAN_START;
		for (size_t i = 0; i < n; i++)
			text[i] = alphabet[rand() % (int)n_alpha];
		/* Sprinkle whole patterns in (those that fit). */
		for (int k = 0; k < 5 && n > 30; k++) {
			size_t p = (size_t)(rand() % (int)n_pats);
			size_t at = (size_t)rand() % (n - 25);
			if (lens[p] <= n - at)
				memcpy(text + at, pats[p], lens[p]);
		}
		/* Naive: every occurrence of every pattern. */
		want->n = 0;
		for (size_t p = 0; p < n_pats; p++)
			for (size_t i = 0; lens[p] && i + lens[p] <= n; i++)
				if (memcmp(text + i, pats[p], lens[p]) == 0)
					want->v[want->n++] = (struct found){p, i + lens[p]};
		/* The automaton, fed in random pieces: a pattern split across pieces is found. */
		got->n = 0;
		for (size_t off = 0; off < n;) {
			size_t piece = 1 + (size_t)(rand() % 50);
			if (piece > n - off)
				piece = n - off;
			got->base = off;
			assert_int_equal(
			        scan_feed(s, &st, (uint8_t *)text + off, piece, collect_fn, got),
			        0);
			off += piece;
		}
		qsort(want->v, want->n, sizeof(want->v[0]), cmp_found);
		qsort(got->v, got->n, sizeof(got->v[0]), cmp_found);
		assert_int_equal(got->n, want->n);
		assert_memory_equal(got->v, want->v, got->n * sizeof(got->v[0]));
	}
	free(lens);
	free(got);
	free(want);
	*ret = s;
}

static void test_scan(void **state)
{
	static const char *const pats[] = {
	        "sk-ant-api03-slateAAA",  "slate", "ate",       "ghp_slate1", "ghp_slate12", "aaaa",
	        "sk-ant-api03-slateAAAB", "",      "ghp_slate1"};
	static const char alphabet[] = "sk-antpi03slateAABgh_12 ";
	/* With a one-byte pattern the two-byte skip is off. */
	static const char *const short_pats[] = {"a", "sla", "te", "slate", "s"};
	static const char *const long_pats[] = {"sk-ant-api03-slateAAA",
	                                        "ghp_slate12",
	                                        "slateslate",
	                                        "aaaaaaaa",
	                                        "ateslate",
	                                        "sk-ant-api03-slateAAAB",
	                                        "ghp_slate1aa",
	                                        "tttttttttttttttttttttttttttttttt"};
	/* A pattern so long that the dense table would pass its cap: the trie is walked. */
	char *huge = malloc(70001);
	const char *huge_pats[] = {"slate", "ate", huge, "ghp_slate1"};
	struct collect *got = calloc(1, sizeof(*got));
	struct scan *s = NULL;
	(void)state;

	check_scan(short_pats, sizeof(short_pats) / sizeof(short_pats[0]), alphabet, &s);
	scan_free(s);
	assert_non_null(huge);
	for (size_t i = 0; i < 70000; i++)
		huge[i] =
		        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[i % 64];
	huge[70000] = '\0';
	check_scan(huge_pats, sizeof(huge_pats) / sizeof(huge_pats[0]), alphabet, &s);
	scan_free(s);
	free(huge);
	check_scan(pats, sizeof(pats) / sizeof(pats[0]), alphabet, &s);
	assert_int_equal(scan_stride(s), 0); /* "slate" is too short to sample for */
	scan_free(s);
	/* Every pattern 8 bytes or more: the text is sampled, and walked only around samples whose
	 * 3 bytes are in some pattern; in text of the patterns' own bytes (samples hit often,
	 * walks restart everywhere), and in text of other bytes (long skips, patterns found only
	 * where they were put, at piece boundaries too). */
	check_scan(long_pats, sizeof(long_pats) / sizeof(long_pats[0]), alphabet, &s);
	assert_int_equal(scan_stride(s), 8 - 2);
	scan_free(s);
	check_scan(long_pats, sizeof(long_pats) / sizeof(long_pats[0]), "xyzXYZ", &s);
	scan_free(s);
	/* No patterns: nothing matches, nothing crashes. */
	assert_int_equal(scan_new(NULL, NULL, 0, &s), 0);
	{
		uint32_t st = 0;
		assert_int_equal(scan_feed(s, &st, (const uint8_t *)"abc", 3, collect_fn, got), 0);
		assert_int_equal(scan_feed(NULL, &st, (const uint8_t *)"abc", 3, collect_fn, got),
		                 0);
	}
	scan_free(s);
	free(got);
}

/* ---- policy ---- */

static bool allows(const struct egress_policy *p, const char *host)
{
	return egress_policy_allows_host(p, host, NULL);
}

static bool allows_addr(const struct egress_policy *p, const char *a)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	if (inet_pton(AF_INET, a, &s4->sin_addr) == 1)
		s4->sin_family = AF_INET;
	else {
		assert_int_equal(inet_pton(AF_INET6, a, &s6->sin6_addr), 1);
		s6->sin6_family = AF_INET6;
	}
	return egress_policy_allows_addr(p, (struct sockaddr *)&ss, NULL);
}

/* The shared table of hostile spellings (host-cases.h) as egress rules: a rule is accepted
 * exactly when the normaliser accepts its host, and stored in the same normal form; the
 * request host the proxy compares is the same form, so the rule decides it. */
static void test_policy_hosts(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(host_cases) / sizeof(host_cases[0]); i++) {
		const struct host_case *c = &host_cases[i];
		_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
		int r;

		assert_int_equal(egress_policy_new(&p), 0);
		assert_int_equal(egress_policy_apply(p, "deny-all", NULL), 0);
		r = egress_policy_apply(p, "allow", c->in);
		if (!c->out) {
			if (r != -EINVAL)
				fail_msg("rule host '%s' accepted as '%s'", c->in,
				         p->n_rules ? p->rules[0].host : "");
			continue;
		}
		if (r != 0)
			fail_msg("rule host '%s' refused", c->in);
		assert_int_equal(p->n_rules, 1);
		assert_string_equal(p->rules[0].host, c->out);
		if (c->kind == HOST_NAME)
			assert_true(allows(p, c->out));
	}
}

static void test_policy(void **state)
{
	struct egress_policy *p = NULL, *q = NULL;
	struct json_object *o = NULL;
	char dir[] = "/tmp/test-proxy.XXXXXX";
	int dfd;
	(void)state;

	assert_int_equal(egress_policy_new(&p), 0);
	/* The default: every host, public addresses only. */
	assert_true(allows(p, "github.com"));
	assert_true(allows(p, "10.0.0.1"));
	assert_true(allows_addr(p, "140.82.112.3"));
	assert_false(allows_addr(p, "127.0.0.1"));
	assert_false(allows_addr(p, "169.254.169.254"));
	assert_false(allows_addr(p, "::ffff:192.168.1.1"));
	assert_false(allows_addr(p, "fd00:ec2::254"));

	/* Deny-all with an allow list. */
	assert_int_equal(egress_policy_apply(p, "deny-all", NULL), 0);
	assert_false(allows(p, "github.com"));
	assert_int_equal(egress_policy_apply(p, "allow", "GitHub.com."), 0);
	assert_true(allows(p, "github.com"));
	assert_true(allows(p, "api.github.com"));
	assert_false(allows(p, "evilgithub.com"));
	assert_false(allows(p, "github.com.evil.test"));
	/* The most specific rule wins. */
	assert_int_equal(egress_policy_apply(p, "deny", "gist.github.com"), 0);
	assert_false(allows(p, "gist.github.com"));
	assert_false(allows(p, "x.gist.github.com"));
	assert_true(allows(p, "api.github.com"));
	/* Turning a rule around replaces it. */
	assert_int_equal(egress_policy_apply(p, "allow", "gist.github.com"), 0);
	assert_true(allows(p, "gist.github.com"));
	assert_int_equal(p->n_rules, 2);
	/* Allowing a name never opens a private address; allowing the address does. */
	assert_false(allows_addr(p, "127.0.0.1"));
	assert_int_equal(egress_policy_apply(p, "allow", "127.0.0.1"), 0);
	assert_true(allows_addr(p, "127.0.0.1"));
	assert_true(allows_addr(p, "::ffff:127.0.0.1"));
	assert_false(allows_addr(p, "127.0.0.2"));
	assert_true(allows(p, "127.0.0.1"));
	assert_false(allows(p, "127.0.0.2"));
	assert_int_equal(egress_policy_apply(p, "allow", "10.0.0.0/8"), 0);
	assert_true(allows_addr(p, "10.2.3.4"));
	/* A deny address rule refuses even public addresses, whatever the name. */
	assert_int_equal(egress_policy_apply(p, "deny", "140.82.112.0/24"), 0);
	assert_false(allows_addr(p, "140.82.112.3"));
	/* ... and the IPv6 addresses that carry them (mapped, NAT64, 6to4, Teredo), as literal
	 * hosts and as resolved addresses; as addresses even where an IPv6 rule allows the
	 * prefix (a DNS64 network: the more specific address rule decides the host, but a deny
	 * address rule refuses whatever led there). */
	{
		static const char *const carried[] = {
		        "::ffff:140.82.112.3", "64:ff9b::8c52:7003",
		        "64:ff9b:1:8c52:70:300::", "2002:8c52:7003::1",
		        "2001:0:4136:e378:8000:63bf:73ad:8ffc"};
		assert_int_equal(egress_policy_apply(p, "allow", "::/0"), 0);
		for (size_t i = 0; i < ELEMENTSOF(carried); i++) {
			if (allows_addr(p, carried[i]))
				fail_msg("deny 140.82.112.0/24 let address %s through", carried[i]);
			if (allows(p, carried[i]))
				fail_msg("deny 140.82.112.0/24 let host %s through", carried[i]);
		}
		assert_true(allows(p, "64:ff9b::808:808"));
		assert_int_equal(egress_policy_apply(p, "allow", "64:ff9b::/96"), 0);
		assert_int_equal(egress_policy_apply(p, "allow", "2002::/16"), 0);
		assert_int_equal(egress_policy_apply(p, "allow", "2001::/32"), 0);
		assert_true(allows_addr(p, "64:ff9b::808:808"));
		for (size_t i = 0; i < ELEMENTSOF(carried); i++)
			if (allows_addr(p, carried[i]))
				fail_msg("deny 140.82.112.0/24 let address %s through", carried[i]);
	}
	/* Bad input. */
	assert_int_equal(egress_policy_apply(p, "allow", "a..b"), -EINVAL);
	assert_int_equal(egress_policy_apply(p, "allow", NULL), -EINVAL);
	assert_int_equal(egress_policy_apply(p, "allow", "10.1.0.0/8"), -EINVAL);
	assert_int_equal(egress_policy_apply(p, "permit", "x.test"), -EINVAL);
	assert_int_equal(egress_policy_apply(p, "allow-all", "x.test"), -EINVAL);

	/* Saved atomically, read back the same. */
	assert_non_null(mkdtemp(dir));
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	assert_int_equal(egress_policy_load_at(dfd, &q), 0); /* missing: allow-all */
	assert_int_equal(q->def, EGRESS_ALLOW_ALL);
	assert_int_equal(q->n_rules, 0);
	egress_policy_free(q);
	assert_int_equal(egress_policy_save_at(dfd, p), 0);
	assert_int_equal(egress_policy_load_at(dfd, &q), 0);
	assert_int_equal(q->def, EGRESS_DENY_ALL);
	assert_int_equal(q->n_rules, p->n_rules);
	for (size_t i = 0; i < q->n_rules; i++) {
		assert_string_equal(q->rules[i].host, p->rules[i].host);
		assert_int_equal(q->rules[i].allow, p->rules[i].allow);
	}
	assert_int_equal(egress_policy_to_json(q, &o), 0);
	json_object_put(o);
	egress_policy_free(q);
	assert_int_equal(unlinkat(dfd, EGRESS_FILE, 0), 0);
	(void)close(dfd);
	assert_int_equal(rmdir(dir), 0);

	/* allow-all drops the rules. */
	assert_int_equal(egress_policy_apply(p, "allow-all", NULL), 0);
	assert_int_equal(p->n_rules, 0);
	egress_policy_free(p);

	/* Files that are not policies. */
	{
		static const char *const bad[] = {
		        "{\"default\":\"maybe\"}",
		        "{\"rules\":[]}",
		        "{\"default\":\"allow-all\",\"rules\":[{\"action\":\"allow\",\"host\":\"a "
		        "b\"}]}",
		        "{\"default\":\"allow-all\",\"rules\":[{\"action\":\"drop\",\"host\":\"a\"}"
		        "]}",
		        "{\"default\":\"allow-all\",\"rules\":{}}",
		        "[]",
		};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			assert_true(egress_policy_parse(bad[i], strlen(bad[i]), &p) < 0);
	}
}

static void test_redact(void **state)
{
	char out[256];
	(void)state;

	proxy_redact_path("/a/b", out, sizeof(out));
	assert_string_equal(out, "/a/b");
	proxy_redact_path("/a?key=secret&flag&x=1=2", out, sizeof(out));
	assert_string_equal(out, "/a?key=*&flag&x=*");
	proxy_redact_path("/?=v", out, sizeof(out));
	assert_string_equal(out, "/?=*");
	proxy_redact_path("/a?key=secret", out, 5);
	assert_string_equal(out, "/a?k");
}

/* ---- the CA ---- */

static void test_ca(void **state)
{
	char dir[] = "/tmp/test-proxy-ca.XXXXXX";
	struct egress_ca *ca = NULL, *again = NULL;
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	SSL *ssl = SSL_new(ctx);
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *vctx = X509_STORE_CTX_new();
	BIO *bio;
	X509 *root, *leaf;
	struct stat st;
	int dfd;
	(void)state;

	assert_non_null(mkdtemp(dir));
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	assert_int_equal(egress_ca_open(dfd, &ca), 0);
	assert_int_equal(fstatat(dfd, EGRESS_CA_KEY, &st, 0), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* Created once: opened again, the same certificate. */
	assert_int_equal(egress_ca_open(dfd, &again), 0);
	assert_string_equal(egress_ca_pem(ca), egress_ca_pem(again));
	egress_ca_free(again);

	/* A leaf for a name verifies up to the CA, for that name only, as a server. */
	bio = BIO_new_mem_buf(egress_ca_pem(ca), -1);
	root = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	BIO_free(bio);
	assert_non_null(root);
	assert_int_equal(X509_STORE_add_cert(store, root), 1);
	assert_int_equal(egress_ca_use_leaf(ca, "api.github.com", ssl), 0);
	leaf = SSL_get_certificate(ssl);
	assert_non_null(leaf);
	assert_int_equal(X509_STORE_CTX_init(vctx, store, leaf, NULL), 1);
	X509_STORE_CTX_set_purpose(vctx, X509_PURPOSE_SSL_SERVER);
	X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(vctx), "api.github.com", 0);
	assert_int_equal(X509_verify_cert(vctx), 1);
	assert_int_equal(X509_check_host(leaf, "api.github.com", 0, 0, NULL), 1);
	assert_int_equal(X509_check_host(leaf, "github.com", 0, 0, NULL), 0);
	assert_int_equal(X509_check_host(leaf, "x.api.github.com", 0, 0, NULL), 0);
	{
		/* P-256, and short-lived. */
		EVP_PKEY *k = X509_get0_pubkey(leaf);
		char group[32];
		size_t gl;
		int days, secs;
		assert_int_equal(
		        EVP_PKEY_get_utf8_string_param(k, "group", group, sizeof(group), &gl), 1);
		assert_string_equal(group, "prime256v1");
		assert_int_equal(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(leaf),
		                                X509_get0_notAfter(leaf)),
		                 1);
		assert_true(days * 86400 + secs <= EGRESS_LEAF_LIFETIME_S + 3600);
	}
	/* An IP address gets an IP subjectAltName. */
	assert_int_equal(egress_ca_use_leaf(ca, "127.0.0.1", ssl), 0);
	assert_int_equal(X509_check_ip_asc(SSL_get_certificate(ssl), "127.0.0.1", 0), 1);
	/* Cached: the same certificate again. */
	{
		X509 *first;
		assert_int_equal(egress_ca_use_leaf(ca, "a.test", ssl), 0);
		first = SSL_get_certificate(ssl);
		X509_up_ref(first);
		assert_int_equal(egress_ca_use_leaf(ca, "a.test", ssl), 0);
		assert_int_equal(X509_cmp(first, SSL_get_certificate(ssl)), 0);
		X509_free(first);
	}
	egress_ca_free(ca);

	/* A key that group or others may read is refused, never used. */
	assert_int_equal(fchmodat(dfd, EGRESS_CA_KEY, 0640, 0), 0);
	assert_int_equal(egress_ca_open(dfd, &ca), SLATE_ERR_KEY_PERMISSIONS);

	X509_free(root);
	X509_STORE_CTX_free(vctx);
	X509_STORE_free(store);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	(void)unlinkat(dfd, EGRESS_CA_KEY, 0);
	(void)unlinkat(dfd, EGRESS_CA_CERT, 0);
	(void)close(dfd);
	assert_int_equal(rmdir(dir), 0);
}

/* ---- the proxy core, end to end over a socketpair ---- */

static const unsigned char salt[INSTALL_SALT_LEN] = {1, 2, 3};
static const char real_value[] = "real-value-that-must-stay-on-the-host";

struct echo {
	int lfd;
	unsigned requests;
};

/* Answers each request with its own head as the body (one request per connection). */
static void *echo_thread(void *arg)
{
	struct echo *e = arg;

	for (;;) {
		char req[16384], resp[17000];
		size_t n = 0;
		int fd = accept(e->lfd, NULL, NULL), m;
		if (fd < 0)
			return NULL;
		while (n < sizeof(req) - 1) {
			ssize_t k = read(fd, req + n, sizeof(req) - 1 - n);
			if (k <= 0)
				break;
			n += (size_t)k;
			req[n] = '\0';
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		e->requests++;
		m = snprintf(
		        resp, sizeof(resp),
		        "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", n,
		        req);
		(void)fs_write_all(fd, resp, (size_t)m);
		(void)close(fd);
	}
}

static struct secret_set *test_secrets(void)
{
	const char *hosts[] = {"bound.test"};
	struct secret_spec spec = {.key = "API_KEY",
	                           .kind = SECRET_KIND_GENERIC,
	                           .hosts = hosts,
	                           .n_hosts = 1,
	                           .value = real_value,
	                           .value_len = sizeof(real_value) - 1};
	struct secret_set *set = secret_set_new();
	struct secret *s = NULL;
	struct slate_error err = {0};

	assert_non_null(set);
	assert_int_equal(secret_new(&spec, salt, &s, &err), 0);
	assert_int_equal(secret_set_put(set, s, NULL), 0);
	return set;
}

struct hooks_state {
	struct secret_set *set;
	unsigned leaks;
	char leak_host[256], leak_secret[64];
};

static int t_load(void *u, const char *ws, struct secret_set **ret_s, struct egress_policy **ret_p,
                  char *why, size_t why_len)
{
	struct hooks_state *h = u;
	struct egress_policy *p = NULL;
	(void)ws;
	(void)why;
	(void)why_len;
	assert_int_equal(egress_policy_new(&p), 0);
	assert_int_equal(egress_policy_apply(p, "allow", "127.0.0.1"), 0);
	*ret_s = h->set;
	*ret_p = p;
	return 0;
}

static void t_release(void *u, struct secret_set *s)
{
	(void)u;
	(void)s;
}

static void t_leak(void *u, const struct proxy_leak *l)
{
	struct hooks_state *h = u;
	h->leaks++;
	(void)snprintf(h->leak_host, sizeof(h->leak_host), "%s", l->host);
	(void)snprintf(h->leak_secret, sizeof(h->leak_secret), "%s", l->secret);
}

struct serve_arg {
	struct proxy *p;
	int fd;
};

static void *serve_thread(void *arg)
{
	struct serve_arg *a = arg;
	proxy_serve(a->p, a->fd, "ws");
	(void)close(a->fd);
	return NULL;
}

/* Sends req through the proxy on a fresh connection and returns the answer (malloc'd), once
 * the head and the body a Content-Length announces are in; without one, at the end of the
 * stream, or with head_only once the head is in (a CONNECT would otherwise open a tunnel). */
static char *exchange(struct proxy *p, const char *req, bool head_only)
{
	int sv[2];
	pthread_t t;
	struct serve_arg a;
	char *out = calloc(1, 65536);
	size_t n = 0;

	assert_non_null(out);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	a = (struct serve_arg){p, sv[1]};
	assert_int_equal(pthread_create(&t, NULL, serve_thread, &a), 0);
	assert_int_equal(fs_write_all(sv[0], req, strlen(req)), 0);
	for (;;) {
		char *end = strstr(out, "\r\n\r\n"), *cl = strcasestr(out, "content-length:");
		ssize_t k;

		if (end &&
		    (cl && cl < end ? n >= (size_t)(end + 4 - out) + strtoul(cl + 15, NULL, 10)
		                    : head_only))
			break;
		k = read(sv[0], out + n, 65535 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	(void)close(sv[0]);
	pthread_join(t, NULL);
	return out;
}

static char *through(struct proxy *p, const char *req)
{
	return exchange(p, req, false);
}

static char *through_head(struct proxy *p, const char *req)
{
	return exchange(p, req, true);
}

static void test_core(void **state)
{
	struct hooks_state hs = {.set = test_secrets()};
	struct proxy_hooks hooks = {
	        .load = t_load, .release = t_release, .leak = t_leak, .userdata = &hs};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	char dir[] = "/tmp/test-proxy-core.XXXXXX", spec[512], req[1024], lph[128];
	struct echo e = {0};
	struct proxy_config cfg = {0};
	struct proxy *p = NULL;
	const char *ph = hs.set->v[0].values[0].placeholder;
	pthread_t t;
	char *out;
	int dfd;
	(void)state;

	e.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(e.lfd >= 0);
	assert_int_equal(bind(e.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(e.lfd, 16), 0);
	assert_int_equal(getsockname(e.lfd, (struct sockaddr *)&sa, &sl), 0);
	assert_int_equal(pthread_create(&t, NULL, echo_thread, &e), 0);

	assert_non_null(mkdtemp(dir));
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	/* PH.evil.test:443 leads to the echo server too: a CONNECT to it must never get there. */
	(void)snprintf(lph, sizeof(lph), "%s", ph);
	for (char *q = lph; *q; q++)
		*q = (char)tolower((unsigned char)*q);
	(void)snprintf(spec, sizeof(spec),
	               "bound.test:80:127.0.0.1:%u,evil.test:80:127.0.0.1:%u,"
	               "%s.evil.test:443:127.0.0.1:%u",
	               ntohs(sa.sin_port), ntohs(sa.sin_port), lph, ntohs(sa.sin_port));
	cfg.ca_dirfd = dfd;
	cfg.connect_to = spec;
	assert_int_equal(proxy_new(&cfg, &hooks, &p), 0);
	assert_non_null(strstr(proxy_ca_pem(p), "BEGIN CERTIFICATE"));

	/* Bound, but plain http:// and no --allow-plain-http: 403 naming the secret, no leak,
	 * nothing upstream (the real value goes over verified TLS only). */
	(void)snprintf(req, sizeof(req),
	               "GET http://bound.test/x?k=%s HTTP/1.1\r\nHost: bound.test\r\n"
	               "X-Api-Key: %s\r\nConnection: close\r\n\r\n",
	               ph, ph);
	out = through(p, req);
	assert_non_null(strstr(out, "HTTP/1.1 403"));
	assert_non_null(strstr(out, "API_KEY"));
	assert_non_null(strstr(out, "--allow-plain-http"));
	assert_null(strstr(out, real_value));
	free(out);
	assert_int_equal(e.requests, 0);
	assert_int_equal(hs.leaks, 0);

	/* Bound, with --allow-plain-http: the header carries the real value upstream; the URL
	 * keeps the placeholder. */
	hs.set->v[0].plain_http = true;
	out = through(p, req);
	assert_non_null(strstr(out, "HTTP/1.1 200"));
	assert_non_null(strstr(out, real_value));
	assert_non_null(strstr(out, "GET /x?k="));
	assert_non_null(strstr(out, ph)); /* in the URL */
	{
		char want[256];
		(void)snprintf(want, sizeof(want), "X-Api-Key: %s\r\n", real_value);
		assert_non_null(strstr(out, want));
	}
	free(out);
	assert_int_equal(e.requests, 1);
	assert_int_equal(hs.leaks, 0);

	/* Unbound: 451, the hook, nothing upstream. */
	(void)snprintf(req, sizeof(req),
	               "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\nX-Api-Key: %s\r\n\r\n",
	               ph);
	out = through(p, req);
	assert_non_null(strstr(out, "HTTP/1.1 451"));
	assert_null(strstr(out, real_value));
	free(out);
	assert_int_equal(hs.leaks, 1);
	assert_string_equal(hs.leak_host, "evil.test");
	assert_string_equal(hs.leak_secret, "API_KEY");
	assert_int_equal(e.requests, 1);

	/* The method is scanned: a placeholder is all token characters. */
	(void)snprintf(req, sizeof(req), "%s http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
	               ph);
	out = through(p, req);
	assert_non_null(strstr(out, "HTTP/1.1 451"));
	assert_non_null(strstr(out, "method"));
	free(out);
	assert_int_equal(hs.leaks, 2);
	assert_int_equal(e.requests, 1);

	/* So is the CONNECT target, before anything is resolved or connected. */
	(void)snprintf(req, sizeof(req),
	               "CONNECT %s.evil.test:443 HTTP/1.1\r\nHost: %s.evil.test:443\r\n\r\n", ph,
	               ph);
	out = through_head(p, req);
	assert_non_null(strstr(out, "HTTP/1.1 451"));
	assert_non_null(strstr(out, "CONNECT target"));
	free(out);
	assert_int_equal(hs.leaks, 3);
	strcat(lph, ".evil.test");
	assert_string_equal(hs.leak_host, lph);
	assert_int_equal(e.requests, 1);

	/* Smuggling: refused before anything goes upstream. */
	out = through(p, "POST http://bound.test/ HTTP/1.1\r\nHost: bound.test\r\n"
	                 "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
	assert_non_null(strstr(out, "HTTP/1.1 400"));
	free(out);
	assert_int_equal(e.requests, 1);

	proxy_free(p);
	(void)shutdown(e.lfd, SHUT_RDWR);
	(void)close(e.lfd);
	pthread_join(t, NULL);
	secret_set_free(hs.set);
	(void)unlinkat(dfd, EGRESS_CA_KEY, 0);
	(void)unlinkat(dfd, EGRESS_CA_CERT, 0);
	(void)close(dfd);
	(void)rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_scan),         cmocka_unit_test(test_policy),
	        cmocka_unit_test(test_policy_hosts), cmocka_unit_test(test_redact),
	        cmocka_unit_test(test_ca),           cmocka_unit_test(test_core),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

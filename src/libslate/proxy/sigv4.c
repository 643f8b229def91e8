/* SPDX-License-Identifier: GPL-2.0-or-later */
/* AWS Signature Version 4, signing: keys and HMACs, the string to sign, signing, detection,
 * re-signing, credentials from a secret set. The canonical request is in sigv4-canon.c, the
 * aws-chunked stream in sigv4-stream.c. */

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/sigv4-internal.h"
#include "secrets/secrets.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/hex.h"

/*
 * Derived signing keys are cached: one depends only on the secret, the day, the region and the
 * service, and deriving it costs four HMACs, most of a re-signature. The cache lives in
 * sodium_malloc()ed memory (guard pages, left out of core dumps), is indexed by a SHA-256 of a
 * per-process random salt and what the key is derived from, and entries are overwritten in
 * least-recently-used order.
 */
#define KEY_CACHE_SIZE 64

struct key_cache_entry {
	uint8_t id[32];
	uint8_t key[32];
	uint64_t used; /* 0: empty */
};

static pthread_mutex_t key_cache_lock = PTHREAD_MUTEX_INITIALIZER;

static struct key_cache_entry *key_cache;

static uint8_t key_cache_salt[32];

static uint64_t key_cache_clock;

static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;

EVP_MD *sigv4_sha256_md;

static EVP_MAC_CTX *hmac_template; /* HMAC with SHA-256 set; duplicated per use */

static void crypto_init(void)
{
	EVP_MAC *mac;
	OSSL_PARAM params[2];

	sigv4_sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
	mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (!mac)
		return;
	hmac_template = EVP_MAC_CTX_new(mac);
	EVP_MAC_free(mac);
	if (!hmac_template)
		return;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
	params[1] = OSSL_PARAM_construct_end();
	if (EVP_MAC_CTX_set_params(hmac_template, params) != 1) {
		EVP_MAC_CTX_free(hmac_template);
		hmac_template = NULL;
	}
	/* The signing key cache (below); without it every key is derived afresh. */
	if (sodium_init() >= 0) {
		key_cache = sodium_malloc(KEY_CACHE_SIZE * sizeof(*key_cache));
		if (key_cache) {
			sodium_memzero(key_cache, KEY_CACHE_SIZE * sizeof(*key_cache));
			randombytes_buf(key_cache_salt, sizeof(key_cache_salt));
		}
	}
}

void sigv4_crypto_done(struct crypto *c)
{
	EVP_MAC_CTX_free(c->mac);
	EVP_MD_CTX_free(c->md);
	c->mac = NULL;
	c->md = NULL;
}

int sigv4_crypto_begin(struct crypto *c)
{
	*c = (struct crypto){0};
	if (pthread_once(&crypto_once, crypto_init) != 0 || !sigv4_sha256_md || !hmac_template)
		return SLATE_ERR_CRYPTO;
	c->mac = EVP_MAC_CTX_dup(hmac_template);
	c->md = EVP_MD_CTX_new();
	if (!c->mac || !c->md) {
		sigv4_crypto_done(c);
		return -ENOMEM;
	}
	return 0;
}

int sigv4_hmac(struct crypto *c, const void *key, size_t key_len, const void *msg, size_t len,
               uint8_t out[32])
{
	size_t out_len = 0;

	if (EVP_MAC_init(c->mac, key, key_len, NULL) != 1 ||
	    EVP_MAC_update(c->mac, msg, len) != 1 ||
	    EVP_MAC_final(c->mac, out, &out_len, 32) != 1 || out_len != 32)
		return SLATE_ERR_CRYPTO;
	return 0;
}

static int sha256(struct crypto *c, const void *p, size_t n, uint8_t out[32])
{
	unsigned out_len = 0;

	if (EVP_DigestInit_ex2(c->md, sigv4_sha256_md, NULL) != 1 ||
	    EVP_DigestUpdate(c->md, p, n) != 1 || EVP_DigestFinal_ex(c->md, out, &out_len) != 1 ||
	    out_len != 32)
		return SLATE_ERR_CRYPTO;
	return 0;
}

static int signing_key(struct crypto *c, const void *secret, size_t secret_len, const char *date,
                       const char *region, const char *service, uint8_t key[32])
{
	uint8_t k[SIGV4_MAX_SECRET + 4];
	uint8_t a[32], b[32];
	int r;

	if (secret_len == 0 || secret_len > SIGV4_MAX_SECRET)
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(k, "AWS4", 4);
	memcpy(k + 4, secret, secret_len);
	r = sigv4_hmac(c, k, secret_len + 4, date, strlen(date), a);
	if (r >= 0)
		r = sigv4_hmac(c, a, 32, region, strlen(region), b);
	if (r >= 0)
		r = sigv4_hmac(c, b, 32, service, strlen(service), a);
	if (r >= 0)
		r = sigv4_hmac(c, a, 32, "aws4_request", strlen("aws4_request"), key);
	sodium_memzero(k, sizeof(k));
	sodium_memzero(a, sizeof(a));
	sodium_memzero(b, sizeof(b));
	return r;
}

/* signing_key() through the cache. */
static int signing_key_cached(struct crypto *c, const void *secret, size_t secret_len,
                              const char *date, const char *region, const char *service,
                              uint8_t key[32])
{
	struct key_cache_entry *e, *victim;
	uint64_t len = secret_len;
	uint8_t id[32];
	unsigned id_len = 0;
	int r;

	if (!key_cache)
		return signing_key(c, secret, secret_len, date, region, service, key);
	if (EVP_DigestInit_ex2(c->md, sigv4_sha256_md, NULL) != 1 ||
	    EVP_DigestUpdate(c->md, key_cache_salt, sizeof(key_cache_salt)) != 1 ||
	    EVP_DigestUpdate(c->md, &len, sizeof(len)) != 1 ||
	    EVP_DigestUpdate(c->md, secret, secret_len) != 1 ||
	    EVP_DigestUpdate(c->md, date, strlen(date) + 1) != 1 ||
	    EVP_DigestUpdate(c->md, region, strlen(region) + 1) != 1 ||
	    EVP_DigestUpdate(c->md, service, strlen(service) + 1) != 1 ||
	    EVP_DigestFinal_ex(c->md, id, &id_len) != 1 || id_len != 32)
		return SLATE_ERR_CRYPTO;
	(void)pthread_mutex_lock(&key_cache_lock);
	for (size_t i = 0; i < KEY_CACHE_SIZE; i++) {
		e = &key_cache[i];
		if (e->used && e->id[0] == id[0] && sodium_memcmp(e->id, id, 32) == 0) {
			memcpy(key, e->key, 32);
			e->used = ++key_cache_clock;
			(void)pthread_mutex_unlock(&key_cache_lock);
			return 0;
		}
	}
	(void)pthread_mutex_unlock(&key_cache_lock);
	r = signing_key(c, secret, secret_len, date, region, service, key);
	if (r < 0)
		return r;
	(void)pthread_mutex_lock(&key_cache_lock);
	victim = &key_cache[0];
	for (size_t i = 1; i < KEY_CACHE_SIZE; i++)
		if (key_cache[i].used < victim->used)
			victim = &key_cache[i];
	memcpy(victim->id, id, 32);
	memcpy(victim->key, key, 32);
	victim->used = ++key_cache_clock;
	(void)pthread_mutex_unlock(&key_cache_lock);
	return 0;
}

int sigv4_signing_key(const void *secret, size_t secret_len, const char *date, const char *region,
                      const char *service, uint8_t key[32])
{
	struct crypto c;
	int r;

	r = sigv4_crypto_begin(&c);
	if (r < 0)
		return r;
	r = signing_key(&c, secret, secret_len, date, region, service, key);
	sigv4_crypto_done(&c);
	return r;
}

int sigv4_sign_hex(const uint8_t key[32], const void *msg, size_t len, char hex[SIGV4_SIG_HEX + 1])
{
	struct crypto c;
	uint8_t mac[32];
	int r;

	r = sigv4_crypto_begin(&c);
	if (r < 0)
		return r;
	r = sigv4_hmac(&c, key, 32, msg, len, mac);
	sigv4_crypto_done(&c);
	if (r < 0)
		return r;
	hex_encode(mac, 32, hex);
	return 0;
}

int sigv4_sha256_hex(const void *p, size_t len, char hex[SIGV4_SIG_HEX + 1])
{
	struct crypto c;
	uint8_t md[32];
	int r;

	r = sigv4_crypto_begin(&c);
	if (r < 0)
		return r;
	r = sha256(&c, p, len, md);
	sigv4_crypto_done(&c);
	if (r < 0)
		return r;
	hex_encode(md, 32, hex);
	return 0;
}

static int string_to_sign(struct crypto *c, const char *timestamp, const char *scope,
                          const void *creq, size_t creq_len, struct buf *out)
{
	uint8_t md[32];
	char hex[65];
	int r;

	r = sha256(c, creq, creq_len, md);
	if (r < 0)
		return r;
	hex_encode(md, 32, hex);
	if ((r = buf_put(out, SIGV4_ALGORITHM "\n", strlen(SIGV4_ALGORITHM) + 1)) < 0 ||
	    (r = buf_put(out, timestamp, strlen(timestamp))) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 || (r = buf_put(out, scope, strlen(scope))) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0)
		return r;
	return buf_put(out, hex, 64);
}

int sigv4_string_to_sign(const char *timestamp, const char *scope, const void *creq,
                         size_t creq_len, struct buf *out)
{
	struct crypto c;
	int r;

	r = sigv4_crypto_begin(&c);
	if (r < 0)
		return r;
	r = string_to_sign(&c, timestamp, scope, creq, creq_len, out);
	sigv4_crypto_done(&c);
	return r;
}

/* Canonical request -> string to sign -> signature, with key. scratch is emptied first. */
static int compute_signature(struct crypto *c, struct buf *scratch, const struct sigv4_request *req,
                             const struct sigv4_canon *canon, const struct span *token,
                             const char *timestamp, const char *scope, const uint8_t key[32],
                             char sig[65])
{
	uint8_t mac[32];
	size_t creq_len;
	int r;

	(void)buf_reset(scratch);
	r = sigv4_canonical_request_token(req, canon, token, scratch);
	if (r < 0)
		return r;
	creq_len = buf_len(scratch);
	r = string_to_sign(c, timestamp, scope, buf_ptr(scratch), creq_len, scratch);
	if (r < 0)
		return r;
	r = sigv4_hmac(c, key, 32, buf_ptr(scratch) + creq_len, buf_len(scratch) - creq_len, mac);
	if (r < 0)
		return r;
	hex_encode(mac, 32, sig);
	return 0;
}

/* "AWS4-HMAC-SHA256 Credential=<id>/<scope>, SignedHeaders=<sh>, Signature=<sig>". */
static int authorization_value(const char *key_id, const char *scope, const char *sh,
                               const char *sig, char **ret)
{
	const char *parts[] = {SIGV4_ALGORITHM " Credential=",
	                       key_id,
	                       "/",
	                       scope,
	                       ", SignedHeaders=",
	                       sh,
	                       ", Signature=",
	                       sig};
	size_t len = 0;
	char *s, *p;

	for (size_t i = 0; i < ELEMENTSOF(parts); i++)
		len += strlen(parts[i]);
	s = p = malloc(len + 1);
	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < ELEMENTSOF(parts); i++) {
		size_t n = strlen(parts[i]);
		memcpy(p, parts[i], n);
		p += n;
	}
	*p = 0;
	*ret = s;
	return 0;
}

/* Every header name but Authorization, lower case, sorted, unique, ';'-joined. */
static int all_signed_headers(const struct sigv4_request *req, char **ret)
{
	_cleanup_free_ char **names = calloc(req->n_headers + 1, sizeof(char *));
	_cleanup_buf_ struct buf *b = buf_new(SIGV4_MAX_AUTHORIZATION);
	size_t n = 0;
	int r = 0;

	if (!names || !b)
		return -ENOMEM;
	for (size_t i = 0; i < req->n_headers; i++)
		if (!sigv4_header_is(&req->headers[i], "authorization"))
			names[n++] = (char *)req->headers[i].name;
	for (size_t i = 0; i < n; i++) { /* insertion sort, case-insensitively */
		for (size_t j = i; j > 0 && strcasecmp(names[j - 1], names[j]) > 0; j--) {
			char *t = names[j];
			names[j] = names[j - 1];
			names[j - 1] = t;
		}
	}
	for (size_t i = 0; r >= 0 && i < n; i++) {
		if (i > 0 && strcasecmp(names[i - 1], names[i]) == 0)
			continue;
		if (buf_len(b) > 0)
			r = buf_put_u8(b, ';');
		for (const char *p = names[i]; r >= 0 && *p; p++)
			r = buf_put_u8(b, (uint8_t)ascii_lower(*p));
	}
	if (r < 0)
		return r;
	*ret = buf_dup_string(b);
	return *ret ? 0 : -ENOMEM;
}

int sigv4_sign_header(const struct sigv4_request *req, const struct sigv4_sign_input *in,
                      char **ret)
{
	_cleanup_free_ char *all = NULL;
	_cleanup_buf_ struct buf *scratch = NULL;
	struct crypto c;
	uint8_t key[32];
	char scope[SCOPE_MAX], sig[65];
	struct sigv4_canon canon;
	int r;

	if (!in || !in->key_id || !in->timestamp || !in->region || !in->service ||
	    !in->payload_hash || !is_timestamp(span_of(in->timestamp, strlen(in->timestamp))))
		return SLATE_ERR_INVALID_FORMAT;
	r = sigv4_request_check(req);
	if (r < 0)
		return r;
	if (!in->signed_headers) {
		r = all_signed_headers(req, &all);
		if (r < 0)
			return r;
	}
	canon = (struct sigv4_canon){.s3 = sigv4_service_is_s3(in->service),
	                             .signed_headers = in->signed_headers ?: all,
	                             .payload_hash = in->payload_hash};
	if (snprintf(scope, sizeof(scope), "%.8s/%s/%s/aws4_request", in->timestamp, in->region,
	             in->service) >= (int)sizeof(scope))
		return SLATE_ERR_TOO_LARGE;
	scratch = buf_new(CANON_MAX);
	if (!scratch)
		return -ENOMEM;
	r = sigv4_crypto_begin(&c);
	if (r < 0)
		return r;
	char date[9];
	memcpy(date, in->timestamp, 8);
	date[8] = 0;
	r = signing_key(&c, in->secret, in->secret_len, date, in->region, in->service, key);
	if (r >= 0)
		r = compute_signature(&c, scratch, req, &canon, NULL, in->timestamp, scope, key,
		                      sig);
	sigv4_crypto_done(&c);
	sodium_memzero(key, sizeof(key));
	if (r < 0)
		return r;
	return authorization_value(in->key_id, scope, canon.signed_headers, sig, ret);
}

static int detect(const struct sigv4_request *req, struct sigv4_auth *ret)
{
	const char *authz;
	struct span path, query;
	size_t count;
	int kind = SIGV4_AUTH_NONE, r;

	r = sigv4_request_check(req);
	if (r < 0)
		return r;
	authz = sigv4_header_get(req, "authorization", &count);
	if (count > 1)
		return SLATE_ERR_INVALID_FORMAT;
	if (authz) {
		struct span s = span_of(authz, strlen(authz));
		if (span_starts(s, SIGV4_ALGORITHM " ") || sigv4_is_other_aws_scheme(s)) {
			r = sigv4_parse_authorization(authz, s.n, ret);
			if (r < 0)
				return r;
			kind = SIGV4_AUTH_HEADER;
		}
	}
	sigv4_target_split(req->target, &path, &query);
	struct sigv4_auth qa;
	r = sigv4_parse_query(query.p, query.n, &qa);
	if (r < 0)
		return r;
	if (r == SIGV4_AUTH_QUERY) {
		if (kind != SIGV4_AUTH_NONE)
			return SLATE_ERR_INVALID_FORMAT; /* signed twice */
		*ret = qa;
		kind = SIGV4_AUTH_QUERY;
	}
	return kind;
}

int sigv4_detect(const struct sigv4_request *req)
{
	struct sigv4_auth a;
	return detect(req, &a);
}

bool sigv4_request_needs_body_hash(const struct sigv4_request *req)
{
	struct sigv4_auth a;

	if (detect(req, &a) != SIGV4_AUTH_HEADER)
		return false;
	return sigv4_header_get(req, "x-amz-content-sha256", NULL) == NULL;
}

void sigv4_resigned_free(struct sigv4_resigned *r)
{
	if (!r)
		return;
	if (r->authorization) {
		sodium_memzero(r->authorization, strlen(r->authorization));
		free(r->authorization);
	}
	if (r->target) {
		sodium_memzero(r->target, strlen(r->target));
		free(r->target);
	}
	sigv4_stream_free(r->stream);
	sodium_memzero(r, sizeof(*r));
	free(r);
}

/* What x-amz-content-sha256 (or the presigned default) says the payload is. */
enum payload {
	PAYLOAD_HASH,     /* 64 hex digits */
	PAYLOAD_UNSIGNED, /* UNSIGNED-PAYLOAD */
	PAYLOAD_STREAMING_UNSIGNED_TRAILER,
	PAYLOAD_STREAMING,
	PAYLOAD_STREAMING_TRAILER,
};

static int payload_classify(const char *v)
{
	struct span s = span_of(v, strlen(v));

	if (s.n == 64 && hex_is(s.p, 64, HEX_LOWER))
		return PAYLOAD_HASH;
	if (streq(v, SIGV4_UNSIGNED_PAYLOAD))
		return PAYLOAD_UNSIGNED;
	if (streq(v, SIGV4_STREAMING_UNSIGNED_TRAILER))
		return PAYLOAD_STREAMING_UNSIGNED_TRAILER;
	if (streq(v, SIGV4_STREAMING_PAYLOAD))
		return PAYLOAD_STREAMING;
	if (streq(v, SIGV4_STREAMING_PAYLOAD_TRAILER))
		return PAYLOAD_STREAMING_TRAILER;
	if (span_starts(s, "STREAMING-"))
		return SIGV4_ERR_UNSUPPORTED; /* STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD (SigV4a)... */
	return SLATE_ERR_INVALID_FORMAT;
}

static const char *payload_name(int p)
{
	switch (p) {
	case PAYLOAD_HASH:
		return "sha256";
	case PAYLOAD_UNSIGNED:
		return SIGV4_UNSIGNED_PAYLOAD;
	case PAYLOAD_STREAMING_UNSIGNED_TRAILER:
		return SIGV4_STREAMING_UNSIGNED_TRAILER;
	case PAYLOAD_STREAMING:
		return SIGV4_STREAMING_PAYLOAD;
	default:
		return SIGV4_STREAMING_PAYLOAD_TRAILER;
	}
}

/* A real value from the lookup as a span: 1..max bytes of printable ASCII without spaces (key
 * ids, secrets and tokens all are). It stays where it is (a secure buffer): never copied. */
static int real_value(const struct buf *b, size_t max, struct span *ret)
{
	size_t n = b ? buf_len(b) : 0;

	if (n == 0 || n > max)
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < n; i++)
		if (buf_ptr(b)[i] <= ' ' || buf_ptr(b)[i] >= 0x7f)
			return SLATE_ERR_INVALID_FORMAT;
	*ret = span_of((const char *)buf_ptr(b), n);
	return 0;
}

static void secure_string_free(char **s)
{
	if (*s) {
		sodium_memzero(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

/* Does the guest's value equal the placeholder (constant time in the bytes compared)? */
static bool placeholder_eq(const char *v, size_t n, const char *placeholder)
{
	return placeholder && strlen(placeholder) == n && sodium_memcmp(v, placeholder, n) == 0;
}

static int span_cmp(struct span a, struct span b)
{
	size_t m = a.n < b.n ? a.n : b.n;
	int c = memcmp(a.p, b.p, m);

	if (c != 0 || a.n == b.n)
		return c;
	return a.n < b.n ? -1 : 1;
}

/* Whether the signed headers list sh names name. */
static bool signed_has(const char *sh, const char *name)
{
	struct span rest = span_of(sh, strlen(sh)), cur;

	do {
		rest = span_split(rest, ';', &cur);
		if (span_eq(cur, name))
			return true;
	} while (rest.p);
	return false;
}

/* sh with name added in its sorted place (unless it is there). */
static int signed_headers_with(const char *sh, const char *name, char *out, size_t max)
{
	struct span rest = span_of(sh, strlen(sh)), cur, add = span_of(name, strlen(name));
	_cleanup_buf_ struct buf *b = buf_new(max - 1);
	bool done = signed_has(sh, name);
	int r = 0;

	if (!b)
		return -ENOMEM;
	do {
		rest = span_split(rest, ';', &cur);
		if (!done && span_cmp(add, cur) < 0) {
			if ((r = buf_put(b, add.p, add.n)) >= 0)
				r = buf_put_u8(b, ';');
			done = true;
		}
		if (r >= 0)
			r = buf_put(b, cur.p, cur.n);
		if (r >= 0 && rest.p)
			r = buf_put_u8(b, ';');
	} while (r >= 0 && rest.p);
	if (r >= 0 && !done && (r = buf_put_u8(b, ';')) >= 0)
		r = buf_put(b, add.p, add.n);
	if (r < 0)
		return r == SLATE_ERR_NO_BUFFER_SPACE ? SLATE_ERR_TOO_LARGE : r;
	memcpy(out, buf_ptr(b), buf_len(b));
	out[buf_len(b)] = 0;
	return 0;
}

/* The presigned query rebuilt: X-Amz-Credential and X-Amz-Security-Token set to the real
 * values, X-Amz-Signature's value 64 zeros whose offset goes to *ret_sig_off; the rest as sent. */
static int presigned_target(struct span path, struct span query, const char *credential,
                            const struct span *token, char **ret, size_t *ret_sig_off)
{
	_cleanup_free_ struct qparam *params = NULL;
	_cleanup_buf_secure_ struct buf *b = buf_new(3 * SIGV4_MAX_TARGET + TOKEN_MAX * 3);
	bool token_done = false;
	size_t n, sig_off = 0;
	int r;

	if (!b || buf_reserve(b,
	                      path.n + 3 * query.n + 3 * strlen(credential) +
	                              (token ? 3 * token->n : 0) + 64,
	                      &(uint8_t *){NULL}) < 0)
		return -ENOMEM;
	(void)buf_reset(b);
	r = sigv4_query_parse(query, &params, &n);
	if (r < 0)
		return r;
	if ((r = buf_put(b, path.p, path.n)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		int k = sigv4_qparam_classify(params[i].key);
		if (k < 0)
			return k;
		if ((r = buf_put_u8(b, i == 0 ? '?' : '&')) < 0)
			return r;
		if (k == QP_CREDENTIAL || k == QP_TOKEN || k == QP_SIGNATURE) {
			if ((r = buf_put(b, params[i].key.p, params[i].key.n)) < 0 ||
			    (r = buf_put_u8(b, '=')) < 0)
				return r;
		}
		switch (k) {
		case QP_CREDENTIAL:
			r = sigv4_put_encoded(b, span_of(credential, strlen(credential)), false);
			break;
		case QP_TOKEN:
			r = token ? sigv4_put_encoded(b, *token, false) : SIGV4_ERR_TOKEN_MISMATCH;
			token_done = true;
			break;
		case QP_SIGNATURE:
			sig_off = buf_len(b);
			r = buf_put(b, SIGV4_EMPTY_SHA256,
			            SIGV4_SIG_HEX); /* overwritten once signed */
			break;
		default:
			r = buf_put(b, params[i].whole.p, params[i].whole.n);
		}
		if (r < 0)
			return r;
	}
	if (token && !token_done &&
	    ((r = buf_put(b, "&X-Amz-Security-Token=", strlen("&X-Amz-Security-Token="))) < 0 ||
	     (r = sigv4_put_encoded(b, *token, false)) < 0))
		return r;
	*ret = buf_dup_string(b);
	if (!*ret)
		return -ENOMEM;
	*ret_sig_off = sig_off;
	return 0;
}

static void mask_key_id(const char *id, char out[16])
{
	size_t n = strlen(id);

	if (n < 12)
		snprintf(out, 16, "****");
	else
		snprintf(out, 16, "%.4s...%s", id, id + n - 4);
}

/* Everything sigv4_resign works with, freed in one place. */
/* One re-signing, step by step (sigv4_resign): what each step finds, for the next. */
struct resign_ctx {
	struct sigv4_auth auth;
	struct sigv4_credentials cred;
	struct crypto c;
	struct buf *scratch;
	char key_id[SIGV4_MAX_KEY_ID + 1]; /* real (not a secret; wiped anyway) */
	struct span secret;                /* real, in the lookup's secure buffer */
	struct span token;                 /* real session token, likewise; p NULL: none */
	char *new_target;                  /* presigned: holds the real token */
	uint8_t key[32];
	int kind; /* SIGV4_AUTH_HEADER or SIGV4_AUTH_QUERY */
	struct span path, query;
	const char *timestamp;   /* the one the guest signed at */
	int payload;             /* enum payload */
	const char *payloads[2]; /* the payload lines the guest may have signed */
	size_t n_payloads;
	char scope[SCOPE_MAX];
	bool s3, token_add;
	struct sigv4_canon canon;
	char signed_headers[SIGV4_MAX_AUTHORIZATION + 64];
	char sig[65];
	size_t sig_off; /* presigned: where the signature goes in new_target */
};

static void resign_ctx_done(struct resign_ctx *x)
{
	sigv4_crypto_done(&x->c);
	buf_free(x->scratch);
	secure_string_free(&x->new_target);
	sodium_memzero(x->key_id, sizeof(x->key_id));
	sodium_memzero(x->key, sizeof(x->key));
}

/* The request as the guest signed it: its kind, timestamp and payload line. Returns the kind,
 * 0 (not signed), or a negative error. */
static int resign_read(const struct sigv4_request *req, struct resign_ctx *x)
{
	const char *v;
	size_t count;

	x->kind = detect(req, &x->auth);
	if (x->kind <= 0)
		return x->kind;
	sigv4_target_split(req->target, &x->path, &x->query);
	(void)sigv4_header_get(req, "host", &count);
	if (count != 1)
		return SLATE_ERR_INVALID_FORMAT;

	/* The timestamp the guest signed at; it stays (it is signed, and so is its date). */
	if (x->kind == SIGV4_AUTH_HEADER) {
		x->timestamp = sigv4_header_get(req, "x-amz-date", &count);
		if (count > 1)
			return SLATE_ERR_INVALID_FORMAT;
		if (!x->timestamp)
			return SIGV4_ERR_UNSUPPORTED; /* a Date-only signature: no client sends that */

		if (!is_timestamp(span_of(x->timestamp, strlen(x->timestamp))) ||
		    memcmp(x->timestamp, x->auth.date, 8) != 0)
			return SLATE_ERR_INVALID_FORMAT;
		if (signed_has(x->auth.signed_headers, "authorization"))
			return SLATE_ERR_INVALID_FORMAT;
	} else {
		x->timestamp = x->auth.timestamp;
		/* The token goes in the query; one in a header as well would be forwarded as is. */
		(void)sigv4_header_get(req, "x-amz-security-token", &count);
		if (count > 0)
			return SLATE_ERR_INVALID_FORMAT;
	}

	/* What the payload line of the canonical request says. */
	x->payload = PAYLOAD_UNSIGNED;
	v = sigv4_header_get(req, "x-amz-content-sha256", &count);
	if (count > 1)
		return SLATE_ERR_INVALID_FORMAT;
	if (v) {
		x->payload = payload_classify(v);
		if (x->payload < 0)
			return x->payload;
		if (x->kind == SIGV4_AUTH_QUERY &&
		    (x->payload == PAYLOAD_STREAMING || x->payload == PAYLOAD_STREAMING_TRAILER))
			return SIGV4_ERR_UNSUPPORTED;
		x->payloads[x->n_payloads++] = v;
	} else if (x->kind == SIGV4_AUTH_HEADER) {
		if (!req->body_sha256)
			return SIGV4_ERR_NEED_BODY_HASH;
		x->payload = PAYLOAD_HASH;
		x->payloads[x->n_payloads++] = req->body_sha256;
	} else {
		/* Presigned: botocore says UNSIGNED-PAYLOAD for every service, other SDKs the hash
		 * of the empty body outside S3. The guest's signature tells which. */
		x->payloads[x->n_payloads++] = SIGV4_UNSIGNED_PAYLOAD;
		x->payloads[x->n_payloads++] = SIGV4_EMPTY_SHA256;
	}
	return x->kind;
}

/* The real credentials of the guest's (placeholder) key id, and the scope. Returns 0 or < 0. */
static int resign_credentials(struct resign_ctx *x, sigv4_lookup_fn lookup, void *userdata)
{
	struct span id;
	int r;

	r = lookup(userdata, x->auth.key_id, &x->cred);
	if (r == -ENOENT)
		return SIGV4_ERR_UNKNOWN_KEY;
	if (r < 0)
		return r;
	if ((r = real_value(x->cred.access_key_id, SIGV4_MAX_KEY_ID, &id)) < 0 ||
	    (r = real_value(x->cred.secret_access_key, SIGV4_MAX_SECRET, &x->secret)) < 0 ||
	    (x->cred.session_token &&
	     (r = real_value(x->cred.session_token, TOKEN_MAX, &x->token)) < 0))
		return r;
	if (!is_key_id(id))
		return SLATE_ERR_INVALID_FORMAT;
	span_copy(x->key_id, id);
	snprintf(x->scope, sizeof(x->scope), "%s/%s/%s/aws4_request", x->auth.date, x->auth.region,
	         x->auth.service);
	x->s3 = sigv4_service_is_s3(x->auth.service);
	return 0;
}

/* The session token: the guest's placeholder becomes the real token (and is signed); any other
 * value is refused. Returns 0 or < 0. */
static int resign_check_token(const struct sigv4_request *req, struct resign_ctx *x)
{
	const char *v;
	size_t count;
	int r = 0;

	if (x->kind == SIGV4_AUTH_HEADER) {
		v = sigv4_header_get(req, "x-amz-security-token", &count);
		if (count > 1)
			return SLATE_ERR_INVALID_FORMAT;
		if (v && (!x->token.p ||
		          !placeholder_eq(v, strlen(v), x->cred.placeholder_session_token)))
			return SIGV4_ERR_TOKEN_MISMATCH;
		x->token_add = !v && x->token.p;
	} else if (x->auth.has_security_token) {
		_cleanup_free_ struct qparam *params = NULL;
		_cleanup_free_ char *tok = malloc(TOKEN_MAX + 1);
		size_t n = 0;
		if (!tok)
			return -ENOMEM;
		r = sigv4_query_parse(x->query, &params, &n);
		for (size_t i = 0; r >= 0 && i < n; i++) {
			if (sigv4_qparam_classify(params[i].key) != QP_TOKEN)
				continue;
			r = sigv4_decode_to(params[i].value, tok, TOKEN_MAX);
			if (r >= 0 &&
			    (!x->token.p ||
			     !placeholder_eq(tok, (size_t)r, x->cred.placeholder_session_token)))
				r = SIGV4_ERR_TOKEN_MISMATCH;
		}
	}
	return r < 0 ? r : 0;
}

/*
 * The guest's signature, checked with its placeholder secret over the request as it will be
 * forwarded. Clients differ in two places (S3's path rules or the others', and the payload line
 * of presigned requests); the variant the guest's signature verifies under is the one to sign
 * (left in x->canon). Returns 0 or < 0.
 */
static int resign_check_guest(const struct sigv4_request *req, struct resign_ctx *x)
{
	const char *ph = x->cred.placeholder_secret_access_key;
	bool match = false;
	int r;

	x->canon = (struct sigv4_canon){.s3 = x->s3,
	                                .presigned = x->kind == SIGV4_AUTH_QUERY,
	                                .signed_headers = x->auth.signed_headers,
	                                .payload_hash = x->payloads[0]};
	if (!ph)
		return 0;
	r = signing_key_cached(&x->c, ph, strlen(ph), x->auth.date, x->auth.region, x->auth.service,
	                       x->key);
	if (r < 0)
		return r;
	for (int variant = 0; !match && variant < 2; variant++)
		for (size_t p = 0; !match && p < x->n_payloads; p++) {
			x->canon.s3 = variant == 0 ? x->s3 : !x->s3;
			x->canon.payload_hash = x->payloads[p];
			r = compute_signature(&x->c, x->scratch, req, &x->canon, NULL, x->timestamp,
			                      x->scope, x->key, x->sig);
			if (r < 0)
				return r;
			match = sodium_memcmp(x->sig, x->auth.signature, SIGV4_SIG_HEX) == 0;
		}
	return match ? 0 : SIGV4_ERR_GUEST_SIGNATURE;
}

/* The request as forwarded, signed with the real key into x->sig: its signed headers with the
 * token's field, or its presigned target (x->new_target) with the real credential and token.
 * Returns 0 or < 0. */
static int resign_sign(const struct sigv4_request *req, struct resign_ctx *x)
{
	struct sigv4_request fwd = *req;
	int r;

	r = signing_key_cached(&x->c, x->secret.p, x->secret.n, x->auth.date, x->auth.region,
	                       x->auth.service, x->key);
	if (r < 0)
		return r;
	if (x->kind == SIGV4_AUTH_HEADER) {
		/* The token's field (replaced or added) is canonicalised from x->token. */
		r = signed_headers_with(x->auth.signed_headers, "host", x->signed_headers,
		                        sizeof(x->signed_headers));
		if (r >= 0 && x->token.p) {
			char tmp[sizeof(x->signed_headers)];
			memcpy(tmp, x->signed_headers, sizeof(tmp));
			r = signed_headers_with(tmp, "x-amz-security-token", x->signed_headers,
			                        sizeof(x->signed_headers));
		}
		if (r < 0)
			return r;
		x->canon.signed_headers = x->signed_headers;
	} else {
		char credential[SIGV4_MAX_KEY_ID + SCOPE_MAX + 2];
		int n = snprintf(credential, sizeof(credential), "%s/%s", x->key_id, x->scope);
		if (n < 0 || (size_t)n >= sizeof(credential))
			return SLATE_ERR_TOO_LARGE;
		r = presigned_target(x->path, x->query, credential, x->token.p ? &x->token : NULL,
		                     &x->new_target, &x->sig_off);
		sodium_memzero(credential, sizeof(credential));
		if (r < 0)
			return r;
		if (strlen(x->new_target) > SIGV4_MAX_TARGET)
			return SLATE_ERR_TOO_LARGE;
		fwd.target = x->new_target;
	}
	return compute_signature(&x->c, x->scratch, &fwd, &x->canon,
	                         x->kind == SIGV4_AUTH_HEADER && x->token.p ? &x->token : NULL,
	                         x->timestamp, x->scope, x->key, x->sig);
}

/* x-amz-decoded-content-length: -1 when absent. Returns 0 or SLATE_ERR_INVALID_FORMAT. */
static int decoded_length(const struct sigv4_request *req, int64_t *ret)
{
	size_t count, n;
	const char *v = sigv4_header_get(req, "x-amz-decoded-content-length", &count);
	int64_t decoded = 0;

	*ret = -1;
	if (count > 1)
		return SLATE_ERR_INVALID_FORMAT;
	if (!v)
		return 0;
	n = strlen(v);
	if (n == 0 || n > 18)
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < n; i++) {
		if (!is_digit(v[i]))
			return SLATE_ERR_INVALID_FORMAT;
		decoded = decoded * 10 + (v[i] - '0');
	}
	*ret = decoded;
	return 0;
}

/* What the proxy forwards: the new Authorization (and token) or target, and for an aws-chunked
 * body the stream that re-signs it. Returns 0 or < 0. */
static int resign_result(const struct sigv4_request *req, struct resign_ctx *x,
                         struct sigv4_resigned *res)
{
	int r;

	res->kind = x->kind;
	snprintf(res->service, sizeof(res->service), "%s", x->auth.service);
	snprintf(res->region, sizeof(res->region), "%s", x->auth.region);
	mask_key_id(x->key_id, res->key_id_masked);
	res->payload = payload_name(x->payload);
	if (x->kind == SIGV4_AUTH_HEADER) {
		r = authorization_value(x->key_id, x->scope, x->canon.signed_headers, x->sig,
		                        &res->authorization);
		if (r < 0)
			return r;
		if (x->token.p) {
			res->security_token = x->cred.session_token;
			res->security_token_add = x->token_add;
		}
	} else {
		memcpy(x->new_target + x->sig_off, x->sig, SIGV4_SIG_HEX);
		res->target = TAKE_PTR(x->new_target);
	}
	if (x->payload == PAYLOAD_STREAMING || x->payload == PAYLOAD_STREAMING_TRAILER) {
		int64_t decoded;
		if ((r = decoded_length(req, &decoded)) < 0)
			return r;
		r = sigv4_stream_new(x->key, x->timestamp, x->scope, x->sig,
		                     x->payload == PAYLOAD_STREAMING_TRAILER, decoded,
		                     &res->stream);
		if (r < 0)
			return r;
	}
	return 0;
}

int sigv4_resign(const struct sigv4_request *req, sigv4_lookup_fn lookup, void *userdata,
                 struct sigv4_resigned **ret)
{
	struct resign_ctx x = {0};
	_cleanup_(sigv4_resigned_freep) struct sigv4_resigned *res = NULL;
	int r;

	*ret = NULL;
	r = resign_read(req, &x);
	if (r <= 0)
		return r;
	if ((r = resign_credentials(&x, lookup, userdata)) < 0 ||
	    (r = resign_check_token(req, &x)) < 0)
		goto out;
	x.scratch = buf_new(CANON_MAX);
	if (!x.scratch || buf_reserve(x.scratch, 4096, &(uint8_t *){NULL}) < 0) {
		r = -ENOMEM;
		goto out;
	}
	(void)buf_reset(x.scratch); /* keeps the 4 KiB: no reallocation for a usual request */
	if ((r = sigv4_crypto_begin(&x.c)) < 0 || (r = resign_check_guest(req, &x)) < 0 ||
	    (r = resign_sign(req, &x)) < 0)
		goto out;
	res = calloc(1, sizeof(*res));
	if (!res) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = resign_result(req, &x, res)) < 0)
		goto out;
	*ret = TAKE_PTR(res);
	r = x.kind;
out:
	resign_ctx_done(&x);
	return r;
}

static const struct secret_value *secret_value_get(const struct secret *s, const char *name)
{
	for (size_t i = 0; i < s->n_values; i++)
		if (s->values[i].name && streq(s->values[i].name, name))
			return &s->values[i];
	return NULL;
}

int sigv4_lookup_secret_set(void *userdata, const char *key_id, struct sigv4_credentials *ret)
{
	const struct sigv4_secret_lookup *l = userdata;

	if (!l || !l->set || !l->host || !l->host_bound || !key_id)
		return -EINVAL;
	for (size_t i = 0; i < l->set->n; i++) {
		const struct secret *s = &l->set->v[i];
		const struct secret_value *id, *secret, *token;
		bool bound = false;

		if (s->kind != SECRET_KIND_AWS)
			continue;
		id = secret_value_get(s, "access-key-id");
		if (!id || !id->placeholder || !streq(id->placeholder, key_id))
			continue;
		for (size_t j = 0; !bound && j < s->n_hosts; j++)
			bound = l->host_bound(s->hosts[j], l->host);
		if (!bound)
			continue;
		secret = secret_value_get(s, "secret-access-key");
		token = secret_value_get(s, "session-token");
		if (!secret || !secret->real || !id->real)
			return -EINVAL;
		*ret = (struct sigv4_credentials){
		        .access_key_id = id->real,
		        .secret_access_key = secret->real,
		        .session_token = token ? token->real : NULL,
		        .placeholder_secret_access_key = secret->placeholder,
		        .placeholder_session_token = token ? token->placeholder : NULL,
		};
		return 0;
	}
	return -ENOENT;
}

const char *sigv4_strerror(int r)
{
	switch (r) {
	case SIGV4_ERR_UNSUPPORTED:
		return "AWS request signed in a way slate cannot re-sign (SigV4a, SigV2 or another "
		       "algorithm)";
	case SIGV4_ERR_UNKNOWN_KEY:
		return "AWS access key id is not a placeholder bound to this host";
	case SIGV4_ERR_NEED_BODY_HASH:
		return "AWS request needs its body hashed before re-signing";
	case SIGV4_ERR_TOKEN_MISMATCH:
		return "AWS session token is not the placeholder of the bound credentials";
	case SIGV4_ERR_GUEST_SIGNATURE:
		return "AWS signature does not match the request as forwarded";
	default:
		return slate_strerror(r);
	}
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* AWS Signature Version 4: parsing, canonical requests, re-signing, aws-chunked streams. */

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/sigv4.h"
#include "secrets/secrets.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/hex.h"

#define CANON_MAX (256u * 1024u) /* a canonical request; far above what the limits allow */
#define SCOPE_MAX (8 + 1 + SIGV4_MAX_SCOPE_PART + 1 + SIGV4_MAX_SCOPE_PART + 1 + 12 + 1)
#define TOKEN_MAX (16u * 1024u) /* a session token (secrets.h: SECRET_VALUE_MAX) */
#define TRAILER_LINES_MAX 16u
#define EMPTY_SHA256_LEN 64u

/* ---- small helpers ---- */

struct span {
	const char *p;
	size_t n;
};

static inline struct span span_of(const char *p, size_t n)
{
	return (struct span){p, n};
}

static inline bool span_eq(struct span s, const char *lit)
{
	size_t n = strlen(lit);
	return s.n == n && memcmp(s.p, lit, n) == 0;
}

static inline char ascii_lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static bool span_eq_ci(struct span s, const char *lit)
{
	size_t n = strlen(lit);

	if (s.n != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (ascii_lower(s.p[i]) != ascii_lower(lit[i]))
			return false;
	return true;
}

static bool span_starts(struct span s, const char *lit)
{
	size_t n = strlen(lit);
	return s.n >= n && memcmp(s.p, lit, n) == 0;
}

static inline bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static inline bool is_alnum(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static inline bool is_unreserved(uint8_t c)
{
	return is_alnum((char)c) || c == '-' || c == '_' || c == '.' || c == '~';
}

/* RFC 9110 tchar. */
static bool is_tchar(char c)
{
	return is_alnum(c) || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static void hex_encode(const uint8_t *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = 0;
}

static bool is_sig_hex(struct span s)
{
	return s.n == SIGV4_SIG_HEX && hex_is(s.p, s.n, HEX_LOWER);
}

/* YYYYMMDD with a plausible month and day. */
static bool is_date(const char *p)
{
	for (int i = 0; i < 8; i++)
		if (!is_digit(p[i]))
			return false;
	int month = (p[4] - '0') * 10 + (p[5] - '0');
	int day = (p[6] - '0') * 10 + (p[7] - '0');
	return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

/* YYYYMMDDTHHMMSSZ. */
static bool is_timestamp(struct span s)
{
	if (s.n != 16 || !is_date(s.p) || s.p[8] != 'T' || s.p[15] != 'Z')
		return false;
	for (int i = 9; i < 15; i++)
		if (!is_digit(s.p[i]))
			return false;
	int h = (s.p[9] - '0') * 10 + (s.p[10] - '0');
	int m = (s.p[11] - '0') * 10 + (s.p[12] - '0');
	int sec = (s.p[13] - '0') * 10 + (s.p[14] - '0');
	return h < 24 && m < 60 && sec < 61;
}

static bool is_scope_part(struct span s)
{
	if (s.n == 0 || s.n > SIGV4_MAX_SCOPE_PART)
		return false;
	for (size_t i = 0; i < s.n; i++)
		if (!is_alnum(s.p[i]) && s.p[i] != '-' && s.p[i] != '_' && s.p[i] != '.')
			return false;
	return true;
}

static bool is_key_id(struct span s)
{
	if (s.n == 0 || s.n > SIGV4_MAX_KEY_ID)
		return false;
	for (size_t i = 0; i < s.n; i++)
		if (!is_alnum(s.p[i]))
			return false;
	return true;
}

static void span_copy(char *dst, struct span s)
{
	memcpy(dst, s.p, s.n);
	dst[s.n] = 0;
}

static inline bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static struct span span_trim(struct span s)
{
	while (s.n > 0 && is_ows(s.p[0])) {
		s.p++;
		s.n--;
	}
	while (s.n > 0 && is_ows(s.p[s.n - 1]))
		s.n--;
	return s;
}

/* Splits s at the first sep: *head before it, returns what follows (n == 0 and p == NULL when
 * there is no sep, *head then being all of s). */
static struct span span_split(struct span s, char sep, struct span *head)
{
	const char *q = s.n ? memchr(s.p, sep, s.n) : NULL;

	if (!q) {
		*head = s;
		return span_of(NULL, 0);
	}
	*head = span_of(s.p, (size_t)(q - s.p));
	return span_of(q + 1, s.n - (size_t)(q - s.p) - 1);
}

/* ---- crypto: OpenSSL EVP, fetched once ---- */

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
static EVP_MD *sha256_md;
static EVP_MAC_CTX *hmac_template; /* HMAC with SHA-256 set; duplicated per use */

static void crypto_init(void)
{
	EVP_MAC *mac;
	OSSL_PARAM params[2];

	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
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

struct crypto {
	EVP_MAC_CTX *mac;
	EVP_MD_CTX *md;
};

static void crypto_done(struct crypto *c)
{
	EVP_MAC_CTX_free(c->mac);
	EVP_MD_CTX_free(c->md);
	c->mac = NULL;
	c->md = NULL;
}

static int crypto_begin(struct crypto *c)
{
	*c = (struct crypto){0};
	if (pthread_once(&crypto_once, crypto_init) != 0 || !sha256_md || !hmac_template)
		return SLATE_ERR_CRYPTO;
	c->mac = EVP_MAC_CTX_dup(hmac_template);
	c->md = EVP_MD_CTX_new();
	if (!c->mac || !c->md) {
		crypto_done(c);
		return -ENOMEM;
	}
	return 0;
}

static int hmac(struct crypto *c, const void *key, size_t key_len, const void *msg, size_t len,
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

	if (EVP_DigestInit_ex2(c->md, sha256_md, NULL) != 1 || EVP_DigestUpdate(c->md, p, n) != 1 ||
	    EVP_DigestFinal_ex(c->md, out, &out_len) != 1 || out_len != 32)
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
	r = hmac(c, k, secret_len + 4, date, strlen(date), a);
	if (r >= 0)
		r = hmac(c, a, 32, region, strlen(region), b);
	if (r >= 0)
		r = hmac(c, b, 32, service, strlen(service), a);
	if (r >= 0)
		r = hmac(c, a, 32, "aws4_request", strlen("aws4_request"), key);
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
	if (EVP_DigestInit_ex2(c->md, sha256_md, NULL) != 1 ||
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

	r = crypto_begin(&c);
	if (r < 0)
		return r;
	r = signing_key(&c, secret, secret_len, date, region, service, key);
	crypto_done(&c);
	return r;
}

int sigv4_sign_hex(const uint8_t key[32], const void *msg, size_t len, char hex[SIGV4_SIG_HEX + 1])
{
	struct crypto c;
	uint8_t mac[32];
	int r;

	r = crypto_begin(&c);
	if (r < 0)
		return r;
	r = hmac(&c, key, 32, msg, len, mac);
	crypto_done(&c);
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

	r = crypto_begin(&c);
	if (r < 0)
		return r;
	r = sha256(&c, p, len, md);
	crypto_done(&c);
	if (r < 0)
		return r;
	hex_encode(md, 32, hex);
	return 0;
}

/* ---- encoding ---- */

/* Appends byte c as AWS encodes it: unreserved characters (and '/' when keep_slash) as they
 * are, everything else as %XX with upper-case hex. */
static int put_encoded_byte(struct buf *out, uint8_t c, bool keep_slash)
{
	static const char digits[] = "0123456789ABCDEF";
	char esc[3] = {'%', digits[c >> 4], digits[c & 15]};

	if (is_unreserved(c) || (keep_slash && c == '/'))
		return buf_put_u8(out, c);
	return buf_put(out, esc, 3);
}

/* Appends s AWS-encoded, every byte taken literally ('%' becomes %25). */
static int put_encoded(struct buf *out, struct span s, bool keep_slash)
{
	size_t run = 0;
	int r;

	for (size_t i = 0; i < s.n; i++) {
		uint8_t c = (uint8_t)s.p[i];
		if (is_unreserved(c) || (keep_slash && c == '/')) {
			run++;
			continue;
		}
		if (run > 0) {
			r = buf_put(out, s.p + i - run, run);
			if (r < 0)
				return r;
			run = 0;
		}
		r = put_encoded_byte(out, c, keep_slash);
		if (r < 0)
			return r;
	}
	return run > 0 ? buf_put(out, s.p + s.n - run, run) : 0;
}

/* Appends s percent-decoded and then AWS-encoded: its canonical form. A '%' not followed by
 * two hex digits is an error. Runs that need no change are copied whole. */
static int put_reencoded(struct buf *out, struct span s, bool keep_slash)
{
	size_t run = 0;
	int r;

	for (size_t i = 0; i < s.n; i++) {
		uint8_t c = (uint8_t)s.p[i];
		if (c != '%' && (is_unreserved(c) || (keep_slash && c == '/'))) {
			run++;
			continue;
		}
		if (run > 0 && (r = buf_put(out, s.p + i - run, run)) < 0)
			return r;
		run = 0;
		if (c == '%') {
			int e = pct_escape(s.p + i, s.n - i);
			if (e < 0)
				return SLATE_ERR_INVALID_FORMAT;
			c = (uint8_t)e;
			i += 2;
		}
		r = put_encoded_byte(out, c, keep_slash);
		if (r < 0)
			return r;
	}
	return run > 0 ? buf_put(out, s.p + s.n - run, run) : 0;
}

/* Percent-decodes s into dst (at most max bytes, NUL-terminated). Returns the length or a
 * negative error. */
static int decode_to(struct span s, char *dst, size_t max)
{
	return (int)pct_decode(s.p, s.n, dst, max, PCT_STRICT);
}

/* ---- parsing ---- */

/* "<key id>/<YYYYMMDD>/<region>/<service>/aws4_request" into a. */
static int parse_credential(struct span v, struct sigv4_auth *a)
{
	struct span key, date, region, service, term, rest;

	rest = span_split(v, '/', &key);
	rest = span_split(rest, '/', &date);
	rest = span_split(rest, '/', &region);
	rest = span_split(rest, '/', &service);
	(void)span_split(rest, '/', &term);
	if (!is_key_id(key) || date.n != 8 || !is_date(date.p) || !is_scope_part(region) ||
	    !is_scope_part(service) || !span_eq(term, "aws4_request") ||
	    term.p + term.n != v.p + v.n)
		return SLATE_ERR_INVALID_FORMAT;
	span_copy(a->key_id, key);
	span_copy(a->date, date);
	span_copy(a->region, region);
	span_copy(a->service, service);
	return 0;
}

/* "a;b;c": lower-case tchar names, strictly ascending, at most SIGV4_MAX_SIGNED_HEADERS. */
static int parse_signed_headers(struct span v, struct sigv4_auth *a)
{
	struct span name, prev = {NULL, 0}, rest = v;
	size_t n = 0;

	if (v.n == 0 || v.n >= sizeof(a->signed_headers))
		return v.n == 0 ? SLATE_ERR_INVALID_FORMAT : SLATE_ERR_TOO_LARGE;
	do {
		rest = span_split(rest, ';', &name);
		if (name.n == 0)
			return SLATE_ERR_INVALID_FORMAT;
		for (size_t i = 0; i < name.n; i++)
			if (!is_tchar(name.p[i]) || (name.p[i] >= 'A' && name.p[i] <= 'Z'))
				return SLATE_ERR_INVALID_FORMAT;
		if (prev.p) {
			size_t m = prev.n < name.n ? prev.n : name.n;
			int c = memcmp(prev.p, name.p, m);
			if (c > 0 || (c == 0 && prev.n >= name.n))
				return SLATE_ERR_INVALID_FORMAT; /* unsorted or repeated */
		}
		if (++n > SIGV4_MAX_SIGNED_HEADERS)
			return SLATE_ERR_TOO_LARGE;
		prev = name;
	} while (rest.p);
	span_copy(a->signed_headers, v);
	a->n_signed_headers = n;
	return 0;
}

/* Another AWS scheme we recognise but cannot re-sign? */
static bool is_other_aws_scheme(struct span v)
{
	return span_starts(v, "AWS4-") || span_starts(v, "AWS ");
}

int sigv4_parse_authorization(const char *v, size_t len, struct sigv4_auth *ret)
{
	struct sigv4_auth a = {.kind = SIGV4_AUTH_HEADER};
	struct span s = span_of(v, len), part, rest;
	bool have_cred = false, have_sh = false, have_sig = false;
	int r;

	if (!v)
		return SLATE_ERR_INVALID_FORMAT;
	if (len > SIGV4_MAX_AUTHORIZATION)
		return SLATE_ERR_TOO_LARGE;
	if (!span_starts(s, SIGV4_ALGORITHM " "))
		return is_other_aws_scheme(s) ? SIGV4_ERR_UNSUPPORTED : SLATE_ERR_INVALID_FORMAT;
	rest = span_of(v + strlen(SIGV4_ALGORITHM), len - strlen(SIGV4_ALGORITHM));
	do {
		struct span name, value;
		rest = span_split(rest, ',', &part);
		part = span_trim(part);
		value = span_split(part, '=', &name);
		if (!value.p)
			return SLATE_ERR_INVALID_FORMAT;
		if (span_eq(name, "Credential") && !have_cred) {
			r = parse_credential(value, &a);
			have_cred = true;
		} else if (span_eq(name, "SignedHeaders") && !have_sh) {
			r = parse_signed_headers(value, &a);
			have_sh = true;
		} else if (span_eq(name, "Signature") && !have_sig) {
			r = is_sig_hex(value) ? 0 : SLATE_ERR_INVALID_FORMAT;
			if (r == 0)
				span_copy(a.signature, value);
			have_sig = true;
		} else
			r = SLATE_ERR_INVALID_FORMAT; /* unknown or repeated */
		if (r < 0)
			return r;
	} while (rest.p);
	if (!have_cred || !have_sh || !have_sig)
		return SLATE_ERR_INVALID_FORMAT;
	*ret = a;
	return 0;
}

enum qparam_kind {
	QP_OTHER,
	QP_ALGORITHM,
	QP_CREDENTIAL,
	QP_DATE,
	QP_EXPIRES,
	QP_SIGNED_HEADERS,
	QP_SIGNATURE,
	QP_TOKEN,
	QP_SIGV2_KEY, /* AWSAccessKeyId (SigV2 presigned) */
};

static const char *const qparam_names[] = {
        [QP_ALGORITHM] = "X-Amz-Algorithm",
        [QP_CREDENTIAL] = "X-Amz-Credential",
        [QP_DATE] = "X-Amz-Date",
        [QP_EXPIRES] = "X-Amz-Expires",
        [QP_SIGNED_HEADERS] = "X-Amz-SignedHeaders",
        [QP_SIGNATURE] = "X-Amz-Signature",
        [QP_TOKEN] = "X-Amz-Security-Token",
        [QP_SIGV2_KEY] = "AWSAccessKeyId",
};

/* Which presigning parameter the raw key k is. Returns the kind, or SLATE_ERR_INVALID_FORMAT
 * for one spelt in another case (two servers could read that differently) or badly encoded. */
static int qparam_classify(struct span k)
{
	char name[32];
	int n;

	if (k.n >= 3 * sizeof(name)) /* no name of ours encodes that long */
		return QP_OTHER;
	n = decode_to(k, name, sizeof(name) - 1);
	if (n == SLATE_ERR_TOO_LARGE)
		return QP_OTHER;
	if (n < 0)
		return n;
	for (size_t i = 1; i < ELEMENTSOF(qparam_names); i++) {
		if (!span_eq_ci(span_of(name, (size_t)n), qparam_names[i]))
			continue;
		if (!span_eq(span_of(name, (size_t)n), qparam_names[i]))
			return SLATE_ERR_INVALID_FORMAT;
		return (int)i;
	}
	return QP_OTHER;
}

/* One parameter of a raw query. */
struct qparam {
	struct span key, value; /* raw */
	struct span whole;
	int kind;
};

/* Splits a raw query at '&' (empty parameters skipped) and each parameter at its first '='. */
static int query_split(struct span q, struct qparam *params, size_t max, size_t *ret_n)
{
	struct span rest = q, part;
	size_t n = 0;

	if (q.n == 0) {
		*ret_n = 0;
		return 0;
	}
	do {
		rest = span_split(rest, '&', &part);
		if (part.n == 0)
			continue;
		if (n >= max)
			return SLATE_ERR_TOO_LARGE;
		params[n].whole = part;
		params[n].value = span_split(part, '=', &params[n].key);
		if (!params[n].value.p)
			params[n].value = span_of(part.p + part.n, 0);
		n++;
	} while (rest.p);
	*ret_n = n;
	return 0;
}

/* query_split into a new array sized for q (at most SIGV4_MAX_QUERY_PARAMS). Free *ret. */
static int query_parse(struct span q, struct qparam **ret, size_t *ret_n)
{
	size_t max = 1;
	int r;

	for (size_t i = 0; i < q.n && max < SIGV4_MAX_QUERY_PARAMS; i++)
		max += q.p[i] == '&';
	*ret = calloc(max, sizeof(**ret));
	if (!*ret)
		return -ENOMEM;
	r = query_split(q, *ret, max, ret_n);
	if (r < 0) {
		free(*ret);
		*ret = NULL;
	}
	return r;
}

int sigv4_parse_query(const char *q, size_t len, struct sigv4_auth *ret)
{
	struct qparam *params;
	struct sigv4_auth a = {.kind = SIGV4_AUTH_QUERY};
	int seen[ELEMENTSOF(qparam_names)] = {0};
	struct span found[ELEMENTSOF(qparam_names)] = {{0}};
	char val[SIGV4_MAX_AUTHORIZATION];
	size_t n;
	int r, k;

	if (!q && len > 0)
		return SLATE_ERR_INVALID_FORMAT;
	if (len > SIGV4_MAX_TARGET)
		return SLATE_ERR_TOO_LARGE;
	if (len == 0)
		return SIGV4_AUTH_NONE;
	r = query_parse(span_of(q, len), &params, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; r >= 0 && i < n; i++) {
		k = qparam_classify(params[i].key);
		if (k < 0)
			r = k;
		else if (k != QP_OTHER && seen[k]++)
			r = SLATE_ERR_INVALID_FORMAT; /* repeated: which one would the server take? */
		else
			found[k] = params[i].value;
	}
	free(params);
	if (r < 0)
		return r;
	if (!seen[QP_ALGORITHM]) {
		if (seen[QP_SIGV2_KEY])
			return SIGV4_ERR_UNSUPPORTED;
		/* Presigning parameters without an algorithm: what would a server make of them? */
		for (size_t i = QP_CREDENTIAL; i <= QP_TOKEN; i++)
			if (seen[i])
				return SLATE_ERR_INVALID_FORMAT;
		return SIGV4_AUTH_NONE;
	}
	r = decode_to(found[QP_ALGORITHM], val, sizeof(val) - 1);
	if (r < 0)
		return r;
	if (!streq(val, SIGV4_ALGORITHM))
		return is_other_aws_scheme(span_of(val, (size_t)r)) ? SIGV4_ERR_UNSUPPORTED
		                                                    : SLATE_ERR_INVALID_FORMAT;
	if (!seen[QP_CREDENTIAL] || !seen[QP_DATE] || !seen[QP_EXPIRES] ||
	    !seen[QP_SIGNED_HEADERS] || !seen[QP_SIGNATURE])
		return SLATE_ERR_INVALID_FORMAT;

	r = decode_to(found[QP_CREDENTIAL], val, sizeof(val) - 1);
	if (r >= 0)
		r = parse_credential(span_of(val, (size_t)r), &a);
	if (r < 0)
		return r;
	r = decode_to(found[QP_DATE], val, sizeof(val) - 1);
	if (r < 0)
		return r;
	if (!is_timestamp(span_of(val, (size_t)r)) || memcmp(val, a.date, 8) != 0)
		return SLATE_ERR_INVALID_FORMAT;
	span_copy(a.timestamp, span_of(val, (size_t)r));
	r = decode_to(found[QP_EXPIRES], val, sizeof(val) - 1);
	if (r < 0)
		return r;
	if (r == 0 || r > 6 || val[0] == '0')
		return SLATE_ERR_INVALID_FORMAT;
	a.expires = 0;
	for (int i = 0; i < r; i++) {
		if (!is_digit(val[i]))
			return SLATE_ERR_INVALID_FORMAT;
		a.expires = a.expires * 10 + (val[i] - '0');
	}
	if (a.expires > SIGV4_MAX_EXPIRES)
		return SLATE_ERR_INVALID_FORMAT;
	r = decode_to(found[QP_SIGNED_HEADERS], val, sizeof(val) - 1);
	if (r >= 0)
		r = parse_signed_headers(span_of(val, (size_t)r), &a);
	if (r < 0)
		return r;
	r = decode_to(found[QP_SIGNATURE], val, sizeof(val) - 1);
	if (r < 0)
		return r;
	if (!is_sig_hex(span_of(val, (size_t)r)))
		return SLATE_ERR_INVALID_FORMAT;
	span_copy(a.signature, span_of(val, (size_t)r));
	a.has_security_token = seen[QP_TOKEN] > 0;
	*ret = a;
	return SIGV4_AUTH_QUERY;
}

/* ---- the request ---- */

static bool header_is(const struct sigv4_header *h, const char *name)
{
	size_t i;

	for (i = 0; h->name[i] && name[i]; i++)
		if (ascii_lower(h->name[i]) != ascii_lower(name[i]))
			return false;
	return h->name[i] == 0 && name[i] == 0;
}

/* The only header called name: NULL when none, *ret_count says how many there are. */
static const char *header_get(const struct sigv4_request *req, const char *name, size_t *ret_count)
{
	const char *v = NULL;
	size_t count = 0;

	for (size_t i = 0; i < req->n_headers; i++)
		if (header_is(&req->headers[i], name)) {
			if (!v)
				v = req->headers[i].value;
			count++;
		}
	if (ret_count)
		*ret_count = count;
	return v;
}

/* Bounds and characters of what the proxy hands us. */
static int request_check(const struct sigv4_request *req)
{
	size_t n;

	if (!req || !req->method || !req->target || (!req->headers && req->n_headers > 0))
		return SLATE_ERR_INVALID_FORMAT;
	if (req->n_headers > SIGV4_MAX_HEADERS)
		return SLATE_ERR_TOO_LARGE;
	n = strnlen(req->method, 33);
	if (n == 0 || n > 32)
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < n; i++)
		if (!is_tchar(req->method[i]))
			return SLATE_ERR_INVALID_FORMAT;
	n = strnlen(req->target, SIGV4_MAX_TARGET + 1);
	if (n > SIGV4_MAX_TARGET)
		return SLATE_ERR_TOO_LARGE;
	if (n == 0 || req->target[0] != '/' || memchr(req->target, '#', n) ||
	    memchr(req->target, '\r', n) || memchr(req->target, '\n', n))
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct sigv4_header *h = &req->headers[i];
		if (!h->name || !h->value)
			return SLATE_ERR_INVALID_FORMAT;
		n = strnlen(h->name, 257);
		if (n == 0 || n > 256)
			return SLATE_ERR_INVALID_FORMAT;
		for (size_t j = 0; j < n; j++)
			if (!is_tchar(h->name[j]))
				return SLATE_ERR_INVALID_FORMAT;
		n = strnlen(h->value, SIGV4_MAX_HEADER_VALUE + 1);
		if (n > SIGV4_MAX_HEADER_VALUE)
			return SLATE_ERR_TOO_LARGE;
		if (memchr(h->value, '\r', n) || memchr(h->value, '\n', n))
			return SLATE_ERR_INVALID_FORMAT;
	}
	if (req->body_sha256 &&
	    (strnlen(req->body_sha256, 65) != 64 || !hex_is(req->body_sha256, 64, HEX_LOWER)))
		return SLATE_ERR_INVALID_FORMAT;
	return 0;
}

static void target_split(const char *target, struct span *path, struct span *query)
{
	struct span t = span_of(target, strlen(target));
	*query = span_split(t, '?', path);
}

/* ---- canonical request ---- */

bool sigv4_service_is_s3(const char *service)
{
	return streq(service, "s3") || streq(service, "s3-object-lambda") ||
	       streq(service, "s3-outposts") || streq(service, "s3express");
}

/* S3: the path as is, each byte in its canonical encoding (not encoded twice). Others: dot
 * segments and empty segments removed (botocore's remove_dot_segments), then every byte of the
 * path as sent encoded, so an escape on the wire is encoded a second time. */
static int canon_path(struct buf *out, struct span path, bool s3)
{
	struct span *segs, seg, rest;
	size_t k = 0;
	int r = 0;

	if (s3)
		return path.n == 0 ? buf_put_u8(out, '/') : put_reencoded(out, path, true);

	segs = malloc((path.n / 2 + 2) * sizeof(*segs));
	if (!segs)
		return -ENOMEM;
	rest = path;
	do {
		rest = span_split(rest, '/', &seg);
		if (seg.n == 0 || span_eq(seg, "."))
			continue;
		if (span_eq(seg, "..")) {
			if (k > 0)
				k--;
			continue;
		}
		segs[k++] = seg;
	} while (rest.p);
	r = buf_put_u8(out, '/');
	for (size_t i = 0; r >= 0 && i < k; i++) {
		if (i > 0)
			r = buf_put_u8(out, '/');
		if (r >= 0)
			r = put_encoded(out, segs[i], false);
	}
	if (r >= 0 && k > 0 && path.n > 0 && path.p[path.n - 1] == '/')
		r = buf_put_u8(out, '/');
	free(segs);
	return r;
}

struct qsort_item {
	uint32_t off, klen, vlen;
};

static int qitem_cmp(const void *a, const void *b, void *base)
{
	const struct qsort_item *x = a, *y = b;
	const uint8_t *p = base;
	size_t m = x->klen < y->klen ? x->klen : y->klen;
	int c = memcmp(p + x->off, p + y->off, m);

	if (c != 0 || x->klen != y->klen)
		return c != 0 ? c : (x->klen < y->klen ? -1 : 1);
	m = x->vlen < y->vlen ? x->vlen : y->vlen;
	c = memcmp(p + x->off + x->klen, p + y->off + y->klen, m);
	if (c != 0 || x->vlen == y->vlen)
		return c;
	return x->vlen < y->vlen ? -1 : 1;
}

/* Parameters decoded and AWS-encoded, sorted by name then value, "k=v" joined by '&'. */
static int canon_query(struct buf *out, struct span query, bool presigned)
{
	_cleanup_free_ struct qparam *params = NULL;
	_cleanup_free_ struct qsort_item *items = NULL;
	_cleanup_buf_ struct buf *scratch = NULL;
	size_t n, m = 0;
	int r;

	if (query.n == 0)
		return 0;
	r = query_parse(query, &params, &n);
	if (r < 0)
		return r;
	items = calloc(n + 1, sizeof(*items));
	scratch = buf_new(3 * SIGV4_MAX_TARGET);
	if (!items || !scratch || buf_reserve(scratch, query.n + 64, &(uint8_t *){NULL}) < 0)
		return -ENOMEM;
	(void)buf_reset(scratch);
	for (size_t i = 0; i < n; i++) {
		size_t off = buf_len(scratch), klen;
		if (presigned && qparam_classify(params[i].key) == QP_SIGNATURE)
			continue;
		r = put_reencoded(scratch, params[i].key, false);
		if (r < 0)
			return r;
		klen = buf_len(scratch) - off;
		r = put_reencoded(scratch, params[i].value, false);
		if (r < 0)
			return r;
		items[m++] = (struct qsort_item){(uint32_t)off, (uint32_t)klen,
		                                 (uint32_t)(buf_len(scratch) - off - klen)};
	}
	qsort_r(items, m, sizeof(*items), qitem_cmp, (void *)buf_ptr(scratch));
	for (size_t i = 0; i < m; i++) {
		const uint8_t *p = buf_ptr(scratch) + items[i].off;
		if ((i > 0 && (r = buf_put_u8(out, '&')) < 0) ||
		    (r = buf_put(out, p, items[i].klen)) < 0 || (r = buf_put_u8(out, '=')) < 0 ||
		    (r = buf_put(out, p + items[i].klen, items[i].vlen)) < 0)
			return r;
	}
	return 0;
}

/* A header value trimmed, runs of spaces and tabs collapsed into one space. */
static int put_header_value(struct buf *out, const char *v)
{
	struct span s = span_trim(span_of(v, strlen(v)));
	size_t run = 0;
	int r;

	for (size_t i = 0; i < s.n; i++) {
		if (!is_ows(s.p[i])) {
			run++;
			continue;
		}
		if (run > 0 && (r = buf_put(out, s.p + i - run, run)) < 0)
			return r;
		run = 0;
		if (!is_ows(s.p[i - 1]) && (r = buf_put_u8(out, ' ')) < 0)
			return r;
	}
	return run > 0 ? buf_put(out, s.p + s.n - run, run) : 0;
}

static int split_signed(const char *sh, struct span *names, size_t max, size_t *ret_n)
{
	struct span rest = span_of(sh, strlen(sh)), name;
	size_t n = 0;

	do {
		rest = span_split(rest, ';', &name);
		if (name.n == 0)
			return SLATE_ERR_INVALID_FORMAT;
		if (n >= max)
			return SLATE_ERR_TOO_LARGE;
		names[n++] = name;
	} while (rest.p);
	*ret_n = n;
	return 0;
}

static bool header_is_span(const struct sigv4_header *h, struct span name)
{
	size_t i;

	for (i = 0; i < name.n && h->name[i]; i++)
		if (ascii_lower(h->name[i]) != name.p[i])
			return false;
	return i == name.n && h->name[i] == 0;
}

/* Appends the canonical headers. token, when set, is the value x-amz-security-token has as
 * forwarded (the real session token), whether or not the request carries the field. */
static int canon_headers(struct buf *out, const struct sigv4_request *req,
                         const char *signed_headers, const struct span *token)
{
	struct span names[SIGV4_MAX_SIGNED_HEADERS];
	size_t n;
	int r;

	r = split_signed(signed_headers, names, ELEMENTSOF(names), &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		bool found = false;
		if ((r = buf_put(out, names[i].p, names[i].n)) < 0 ||
		    (r = buf_put_u8(out, ':')) < 0)
			return r;
		if (token && span_eq(names[i], "x-amz-security-token")) {
			if ((r = buf_put(out, token->p, token->n)) < 0 ||
			    (r = buf_put_u8(out, '\n')) < 0)
				return r;
			continue;
		}
		for (size_t j = 0; j < req->n_headers; j++) {
			if (!header_is_span(&req->headers[j], names[i]))
				continue;
			if (found && (r = buf_put_u8(out, ',')) < 0)
				return r;
			if ((r = put_header_value(out, req->headers[j].value)) < 0)
				return r;
			found = true;
		}
		if (!found)
			return SLATE_ERR_INVALID_FORMAT; /* signed but not sent */
		if ((r = buf_put_u8(out, '\n')) < 0)
			return r;
	}
	return 0;
}

/* The canonical request of a request already checked (request_check). */
static int canonical_request(const struct sigv4_request *req, const struct sigv4_canon *c,
                             const struct span *token, struct buf *out)
{
	struct span path, query;
	int r;

	target_split(req->target, &path, &query);
	if ((r = buf_put(out, req->method, strlen(req->method))) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 || (r = canon_path(out, path, c->s3)) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 || (r = canon_query(out, query, c->presigned)) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 ||
	    (r = canon_headers(out, req, c->signed_headers, token)) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 ||
	    (r = buf_put(out, c->signed_headers, strlen(c->signed_headers))) < 0 ||
	    (r = buf_put_u8(out, '\n')) < 0 ||
	    (r = buf_put(out, c->payload_hash, strlen(c->payload_hash))) < 0)
		return r;
	return 0;
}

int sigv4_canonical_request(const struct sigv4_request *req, const struct sigv4_canon *c,
                            struct buf *out)
{
	int r;

	if (!c || !c->signed_headers || !c->payload_hash)
		return SLATE_ERR_INVALID_FORMAT;
	r = request_check(req);
	if (r < 0)
		return r;
	return canonical_request(req, c, NULL, out);
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

	r = crypto_begin(&c);
	if (r < 0)
		return r;
	r = string_to_sign(&c, timestamp, scope, creq, creq_len, out);
	crypto_done(&c);
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
	r = canonical_request(req, canon, token, scratch);
	if (r < 0)
		return r;
	creq_len = buf_len(scratch);
	r = string_to_sign(c, timestamp, scope, buf_ptr(scratch), creq_len, scratch);
	if (r < 0)
		return r;
	r = hmac(c, key, 32, buf_ptr(scratch) + creq_len, buf_len(scratch) - creq_len, mac);
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
		if (!header_is(&req->headers[i], "authorization"))
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
	r = request_check(req);
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
	r = crypto_begin(&c);
	if (r < 0)
		return r;
	char date[9];
	memcpy(date, in->timestamp, 8);
	date[8] = 0;
	r = signing_key(&c, in->secret, in->secret_len, date, in->region, in->service, key);
	if (r >= 0)
		r = compute_signature(&c, scratch, req, &canon, NULL, in->timestamp, scope, key,
		                      sig);
	crypto_done(&c);
	sodium_memzero(key, sizeof(key));
	if (r < 0)
		return r;
	return authorization_value(in->key_id, scope, canon.signed_headers, sig, ret);
}

/* ---- detection ---- */

static int detect(const struct sigv4_request *req, struct sigv4_auth *ret)
{
	const char *authz;
	struct span path, query;
	size_t count;
	int kind = SIGV4_AUTH_NONE, r;

	r = request_check(req);
	if (r < 0)
		return r;
	authz = header_get(req, "authorization", &count);
	if (count > 1)
		return SLATE_ERR_INVALID_FORMAT;
	if (authz) {
		struct span s = span_of(authz, strlen(authz));
		if (span_starts(s, SIGV4_ALGORITHM " ") || is_other_aws_scheme(s)) {
			r = sigv4_parse_authorization(authz, s.n, ret);
			if (r < 0)
				return r;
			kind = SIGV4_AUTH_HEADER;
		}
	}
	target_split(req->target, &path, &query);
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
	return header_get(req, "x-amz-content-sha256", NULL) == NULL;
}

/* ---- re-signing ---- */

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
	r = query_parse(query, &params, &n);
	if (r < 0)
		return r;
	if ((r = buf_put(b, path.p, path.n)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		int k = qparam_classify(params[i].key);
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
			r = put_encoded(b, span_of(credential, strlen(credential)), false);
			break;
		case QP_TOKEN:
			r = token ? put_encoded(b, *token, false) : SIGV4_ERR_TOKEN_MISMATCH;
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
	     (r = put_encoded(b, *token, false)) < 0))
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
};

static void resign_ctx_done(struct resign_ctx *x)
{
	crypto_done(&x->c);
	buf_free(x->scratch);
	secure_string_free(&x->new_target);
	sodium_memzero(x->key_id, sizeof(x->key_id));
	sodium_memzero(x->key, sizeof(x->key));
}

int sigv4_resign(const struct sigv4_request *req, sigv4_lookup_fn lookup, void *userdata,
                 struct sigv4_resigned **ret)
{
	struct resign_ctx x = {0};
	_cleanup_(sigv4_resigned_freep) struct sigv4_resigned *res = NULL;
	struct sigv4_request fwd;
	struct sigv4_canon canon;
	struct span path, query;
	const char *timestamp, *v, *payloads[2];
	char scope[SCOPE_MAX], sig[65], credential[SIGV4_MAX_KEY_ID + SCOPE_MAX + 2];
	char signed_headers[SIGV4_MAX_AUTHORIZATION + 64];
	size_t count, n_payloads = 0, sig_off = 0;
	int kind, payload = PAYLOAD_UNSIGNED, r;
	bool s3, token_add = false;

	*ret = NULL;
	kind = detect(req, &x.auth);
	if (kind <= 0)
		return kind;
	target_split(req->target, &path, &query);
	(void)header_get(req, "host", &count);
	if (count != 1)
		return SLATE_ERR_INVALID_FORMAT;

	/* The timestamp the guest signed at; it stays (it is signed, and so is its date). */
	if (kind == SIGV4_AUTH_HEADER) {
		timestamp = header_get(req, "x-amz-date", &count);
		if (count > 1)
			return SLATE_ERR_INVALID_FORMAT;
		if (!timestamp)
			return SIGV4_ERR_UNSUPPORTED; /* a Date-only signature: no client sends that */

		if (!is_timestamp(span_of(timestamp, strlen(timestamp))) ||
		    memcmp(timestamp, x.auth.date, 8) != 0)
			return SLATE_ERR_INVALID_FORMAT;
		if (signed_has(x.auth.signed_headers, "authorization"))
			return SLATE_ERR_INVALID_FORMAT;
	} else {
		timestamp = x.auth.timestamp;
		/* The token goes in the query; one in a header as well would be forwarded as is. */
		(void)header_get(req, "x-amz-security-token", &count);
		if (count > 0)
			return SLATE_ERR_INVALID_FORMAT;
	}

	/* What the payload line of the canonical request says. */
	v = header_get(req, "x-amz-content-sha256", &count);
	if (count > 1)
		return SLATE_ERR_INVALID_FORMAT;
	if (v) {
		payload = payload_classify(v);
		if (payload < 0)
			return payload;
		if (kind == SIGV4_AUTH_QUERY &&
		    (payload == PAYLOAD_STREAMING || payload == PAYLOAD_STREAMING_TRAILER))
			return SIGV4_ERR_UNSUPPORTED;
		payloads[n_payloads++] = v;
	} else if (kind == SIGV4_AUTH_HEADER) {
		if (!req->body_sha256)
			return SIGV4_ERR_NEED_BODY_HASH;
		payload = PAYLOAD_HASH;
		payloads[n_payloads++] = req->body_sha256;
	} else {
		/* Presigned: botocore says UNSIGNED-PAYLOAD for every service, other SDKs the hash
		 * of the empty body outside S3. The guest's signature tells which. */
		payloads[n_payloads++] = SIGV4_UNSIGNED_PAYLOAD;
		payloads[n_payloads++] = SIGV4_EMPTY_SHA256;
	}

	r = lookup(userdata, x.auth.key_id, &x.cred);
	if (r == -ENOENT)
		return SIGV4_ERR_UNKNOWN_KEY;
	if (r < 0)
		return r;
	{
		struct span id;
		if ((r = real_value(x.cred.access_key_id, SIGV4_MAX_KEY_ID, &id)) < 0 ||
		    (r = real_value(x.cred.secret_access_key, SIGV4_MAX_SECRET, &x.secret)) < 0 ||
		    (x.cred.session_token &&
		     (r = real_value(x.cred.session_token, TOKEN_MAX, &x.token)) < 0))
			goto out;
		if (!is_key_id(id)) {
			r = SLATE_ERR_INVALID_FORMAT;
			goto out;
		}
		span_copy(x.key_id, id);
	}
	snprintf(scope, sizeof(scope), "%s/%s/%s/aws4_request", x.auth.date, x.auth.region,
	         x.auth.service);
	s3 = sigv4_service_is_s3(x.auth.service);

	/* The session token: the guest's placeholder becomes the real token (and is signed). */
	if (kind == SIGV4_AUTH_HEADER) {
		v = header_get(req, "x-amz-security-token", &count);
		if (count > 1) {
			r = SLATE_ERR_INVALID_FORMAT;
			goto out;
		}
		if (v && (!x.token.p ||
		          !placeholder_eq(v, strlen(v), x.cred.placeholder_session_token))) {
			r = SIGV4_ERR_TOKEN_MISMATCH;
			goto out;
		}
		token_add = !v && x.token.p;
	} else if (x.auth.has_security_token) {
		_cleanup_free_ struct qparam *params = NULL;
		_cleanup_free_ char *tok = malloc(TOKEN_MAX + 1);
		size_t n = 0;
		if (!tok) {
			r = -ENOMEM;
			goto out;
		}
		r = query_parse(query, &params, &n);
		for (size_t i = 0; r >= 0 && i < n; i++) {
			if (qparam_classify(params[i].key) != QP_TOKEN)
				continue;
			r = decode_to(params[i].value, tok, TOKEN_MAX);
			if (r >= 0 &&
			    (!x.token.p ||
			     !placeholder_eq(tok, (size_t)r, x.cred.placeholder_session_token)))
				r = SIGV4_ERR_TOKEN_MISMATCH;
		}
		if (r < 0)
			goto out;
	}

	x.scratch = buf_new(CANON_MAX);
	if (!x.scratch || buf_reserve(x.scratch, 4096, &(uint8_t *){NULL}) < 0) {
		r = -ENOMEM;
		goto out;
	}
	(void)buf_reset(x.scratch); /* keeps the 4 KiB: no reallocation for a usual request */
	r = crypto_begin(&x.c);
	if (r < 0)
		goto out;

	/* The guest's signature, checked with its placeholder secret over the request as it will
	 * be forwarded. Clients differ in two places (S3's path rules or the others', and the
	 * payload line of presigned requests); the variant the guest's signature verifies under is
	 * the one to sign. */
	canon = (struct sigv4_canon){.s3 = s3,
	                             .presigned = kind == SIGV4_AUTH_QUERY,
	                             .signed_headers = x.auth.signed_headers,
	                             .payload_hash = payloads[0]};
	if (x.cred.placeholder_secret_access_key) {
		const char *ph = x.cred.placeholder_secret_access_key;
		bool match = false;
		r = signing_key_cached(&x.c, ph, strlen(ph), x.auth.date, x.auth.region,
		                       x.auth.service, x.key);
		if (r < 0)
			goto out;
		for (int variant = 0; !match && variant < 2; variant++)
			for (size_t p = 0; !match && p < n_payloads; p++) {
				canon.s3 = variant == 0 ? s3 : !s3;
				canon.payload_hash = payloads[p];
				r = compute_signature(&x.c, x.scratch, req, &canon, NULL, timestamp,
				                      scope, x.key, sig);
				if (r < 0)
					goto out;
				match = sodium_memcmp(sig, x.auth.signature, SIGV4_SIG_HEX) == 0;
			}
		if (!match) {
			r = SIGV4_ERR_GUEST_SIGNATURE;
			goto out;
		}
	}

	/* The request as forwarded, with the real key. */
	r = signing_key_cached(&x.c, x.secret.p, x.secret.n, x.auth.date, x.auth.region,
	                       x.auth.service, x.key);
	if (r < 0)
		goto out;
	fwd = *req;
	if (kind == SIGV4_AUTH_HEADER) {
		/* The token's field (replaced or added) is canonicalised from x.token. */
		r = signed_headers_with(x.auth.signed_headers, "host", signed_headers,
		                        sizeof(signed_headers));
		if (r >= 0 && x.token.p) {
			char tmp[sizeof(signed_headers)];
			memcpy(tmp, signed_headers, sizeof(tmp));
			r = signed_headers_with(tmp, "x-amz-security-token", signed_headers,
			                        sizeof(signed_headers));
		}
		if (r < 0)
			goto out;
		canon.signed_headers = signed_headers;
	} else {
		int n = snprintf(credential, sizeof(credential), "%s/%s", x.key_id, scope);
		if (n < 0 || (size_t)n >= sizeof(credential)) {
			r = SLATE_ERR_TOO_LARGE;
			goto out;
		}
		r = presigned_target(path, query, credential, x.token.p ? &x.token : NULL,
		                     &x.new_target, &sig_off);
		sodium_memzero(credential, sizeof(credential));
		if (r < 0)
			goto out;
		if (strlen(x.new_target) > SIGV4_MAX_TARGET) {
			r = SLATE_ERR_TOO_LARGE;
			goto out;
		}
		fwd.target = x.new_target;
	}
	r = compute_signature(&x.c, x.scratch, &fwd, &canon,
	                      kind == SIGV4_AUTH_HEADER && x.token.p ? &x.token : NULL, timestamp,
	                      scope, x.key, sig);
	if (r < 0)
		goto out;

	res = calloc(1, sizeof(*res));
	if (!res) {
		r = -ENOMEM;
		goto out;
	}
	res->kind = kind;
	snprintf(res->service, sizeof(res->service), "%s", x.auth.service);
	snprintf(res->region, sizeof(res->region), "%s", x.auth.region);
	mask_key_id(x.key_id, res->key_id_masked);
	res->payload = payload_name(payload);
	if (kind == SIGV4_AUTH_HEADER) {
		r = authorization_value(x.key_id, scope, canon.signed_headers, sig,
		                        &res->authorization);
		if (r < 0)
			goto out;
		if (x.token.p) {
			res->security_token = x.cred.session_token;
			res->security_token_add = token_add;
		}
	} else {
		memcpy(x.new_target + sig_off, sig, SIGV4_SIG_HEX);
		res->target = TAKE_PTR(x.new_target);
	}
	if (payload == PAYLOAD_STREAMING || payload == PAYLOAD_STREAMING_TRAILER) {
		int64_t decoded = -1;
		v = header_get(req, "x-amz-decoded-content-length", &count);
		if (count > 1) {
			r = SLATE_ERR_INVALID_FORMAT;
			goto out;
		}
		if (v) {
			size_t n = strlen(v);
			if (n == 0 || n > 18) {
				r = SLATE_ERR_INVALID_FORMAT;
				goto out;
			}
			decoded = 0;
			for (size_t i = 0; i < n; i++) {
				if (!is_digit(v[i])) {
					r = SLATE_ERR_INVALID_FORMAT;
					goto out;
				}
				decoded = decoded * 10 + (v[i] - '0');
			}
		}
		r = sigv4_stream_new(x.key, timestamp, scope, sig,
		                     payload == PAYLOAD_STREAMING_TRAILER, decoded, &res->stream);
		if (r < 0)
			goto out;
	}
	*ret = TAKE_PTR(res);
	r = kind;
out:
	resign_ctx_done(&x);
	return r;
}

/* ---- aws-chunked ---- */

enum stream_state {
	ST_LINE,       /* a chunk header line */
	ST_DATA,       /* the chunk's data */
	ST_DATA_CRLF,  /* the CRLF after it */
	ST_FINAL_CRLF, /* after the last chunk's header (no trailer) */
	ST_TRAILER,    /* trailer lines, up to x-amz-trailer-signature */
	ST_END_CRLF,   /* after the trailer signature: an optional CRLF */
	ST_DONE,
};

struct sigv4_stream {
	uint8_t key[32];
	char timestamp[17];
	char scope[SCOPE_MAX];
	char prev[SIGV4_SIG_HEX + 1];
	bool trailer;
	int64_t decoded_length;
	uint64_t total;
	int state;
	int error;
	struct crypto c;
	EVP_MD_CTX *trailer_md;
	/* The line being read (chunk header or trailer line), CR and LF not included. */
	char line[SIGV4_MAX_CHUNK_LINE > 1024 ? SIGV4_MAX_CHUNK_LINE : 1024];
	size_t line_len;
	bool line_cr;
	/* The chunk being read: its size as sent, its data. */
	char size_text[9];
	size_t chunk_size;
	size_t data_len;
	uint8_t *data;
	size_t data_alloc;
	unsigned crlf_seen;
	size_t trailer_bytes;
	unsigned trailer_lines;
	bool trailer_blank;
};

int sigv4_stream_new(const uint8_t signing_key[32], const char *timestamp, const char *scope,
                     const char *seed_signature, bool trailer, int64_t decoded_length,
                     struct sigv4_stream **ret)
{
	struct sigv4_stream *s;
	int r;

	if (!timestamp || !is_timestamp(span_of(timestamp, strlen(timestamp))) || !scope ||
	    strlen(scope) >= SCOPE_MAX || !seed_signature ||
	    !is_sig_hex(span_of(seed_signature, strlen(seed_signature))))
		return SLATE_ERR_INVALID_FORMAT;
	/* Guarded memory for the derived key (and what goes with it): one allocation per upload. */
	if (sodium_init() < 0)
		return SLATE_ERR_CRYPTO;
	s = sodium_malloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	memset(s, 0, sizeof(*s));
	r = crypto_begin(&s->c);
	if (r < 0) {
		sodium_free(s);
		return r;
	}
	s->trailer_md = EVP_MD_CTX_new();
	if (!s->trailer_md) {
		sigv4_stream_free(s);
		return -ENOMEM;
	}
	memcpy(s->key, signing_key, 32);
	memcpy(s->timestamp, timestamp, 17);
	snprintf(s->scope, sizeof(s->scope), "%s", scope);
	memcpy(s->prev, seed_signature, SIGV4_SIG_HEX + 1);
	s->trailer = trailer;
	s->decoded_length = decoded_length;
	s->state = ST_LINE;
	*ret = s;
	return 0;
}

void sigv4_stream_free(struct sigv4_stream *s)
{
	if (!s)
		return;
	crypto_done(&s->c);
	EVP_MD_CTX_free(s->trailer_md);
	free(s->data);
	sodium_free(s); /* wipes */
}

bool sigv4_stream_done(const struct sigv4_stream *s)
{
	return s && s->error == 0 && (s->state == ST_DONE || s->state == ST_END_CRLF);
}

static int stream_fail(struct sigv4_stream *s, int r)
{
	s->error = r;
	return r;
}

/* HMAC of "<algorithm>\n<timestamp>\n<scope>\n<previous signature>\n<rest>" into s->prev. */
static int stream_sign(struct sigv4_stream *s, const char *algorithm, const char *rest)
{
	char sts[512];
	uint8_t mac[32];
	int n, r;

	n = snprintf(sts, sizeof(sts), "%s\n%s\n%s\n%s\n%s", algorithm, s->timestamp, s->scope,
	             s->prev, rest);
	if (n < 0 || (size_t)n >= sizeof(sts))
		return SLATE_ERR_INTERNAL;
	r = hmac(&s->c, s->key, 32, sts, (size_t)n, mac);
	if (r < 0)
		return r;
	hex_encode(mac, 32, s->prev);
	return 0;
}

/* The chunk signature of the data hashed into s->c.md. */
static int stream_sign_chunk(struct sigv4_stream *s)
{
	uint8_t md[32];
	char rest[64 + 1 + 64 + 1];
	unsigned len = 0;

	if (EVP_DigestFinal_ex(s->c.md, md, &len) != 1 || len != 32)
		return SLATE_ERR_CRYPTO;
	memcpy(rest, SIGV4_EMPTY_SHA256 "\n", 65);
	hex_encode(md, 32, rest + 65);
	return stream_sign(s, "AWS4-HMAC-SHA256-PAYLOAD", rest);
}

/* Appends n bytes at p (and m at q) to out in one piece, or fails leaving out as it was. */
static int emit(struct buf *out, const void *p, size_t n, const void *q, size_t m)
{
	uint8_t *dst;
	int r;

	r = buf_reserve(out, n + m, &dst);
	if (r < 0)
		return r;
	memcpy(dst, p, n);
	if (m)
		memcpy(dst + n, q, m);
	return 0;
}

/* Reads line bytes from p; returns how many it used, *done when the line (CRLF) is complete. */
static int stream_line(struct sigv4_stream *s, const uint8_t *p, size_t n, size_t max, size_t *used,
                       bool *done)
{
	size_t i;

	*done = false;
	for (i = 0; i < n; i++) {
		uint8_t c = p[i];
		if (s->line_cr) {
			if (c != '\n')
				return SLATE_ERR_INVALID_FORMAT;
			s->line_cr = false;
			*done = true;
			i++;
			break;
		}
		if (c == '\r') {
			s->line_cr = true;
			continue;
		}
		if (c == '\n' || c == 0)
			return SLATE_ERR_INVALID_FORMAT;
		if (s->line_len >= max)
			return SLATE_ERR_TOO_LARGE;
		s->line[s->line_len++] = (char)c;
	}
	*used = i;
	return 0;
}

/* "<hex size>;chunk-signature=<64 hex>": sets chunk_size and size_text. */
static int parse_chunk_line(struct sigv4_stream *s)
{
	struct span l = span_of(s->line, s->line_len), size, sig;
	uint64_t v = 0;

	sig = span_split(l, ';', &size);
	if (size.n == 0 || size.n > 8 || !span_starts(sig, "chunk-signature="))
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < size.n; i++) {
		int h = hex_digit((unsigned char)size.p[i], 0);
		if (h < 0)
			return SLATE_ERR_INVALID_FORMAT;
		v = v << 4 | (uint64_t)h;
	}
	sig.p += strlen("chunk-signature=");
	sig.n -= strlen("chunk-signature=");
	if (!is_sig_hex(sig))
		return SLATE_ERR_INVALID_FORMAT;
	if (v > SIGV4_MAX_CHUNK)
		return SLATE_ERR_TOO_LARGE;
	span_copy(s->size_text, size);
	s->chunk_size = (size_t)v;
	return 0;
}

/* "<size as sent>;chunk-signature=<s->prev>\r\n" then the data and CRLF (data may be NULL). */
static int emit_chunk(struct sigv4_stream *s, struct buf *out, bool with_data_crlf)
{
	char head[8 + 17 + SIGV4_SIG_HEX + 3];
	size_t need;
	uint8_t *dst;
	int n, r;

	n = snprintf(head, sizeof(head), "%s;chunk-signature=%s\r\n", s->size_text, s->prev);
	need = (size_t)n + s->data_len + (with_data_crlf ? 2 : 0);
	r = buf_reserve(out, need, &dst);
	if (r < 0)
		return r;
	memcpy(dst, head, (size_t)n);
	if (s->data_len)
		memcpy(dst + n, s->data, s->data_len);
	if (with_data_crlf)
		memcpy(dst + n + s->data_len, "\r\n", 2);
	return 0;
}

static int stream_trailer_line(struct sigv4_stream *s, struct buf *out)
{
	struct span l = span_of(s->line, s->line_len), name, value;
	char lower[65];
	int r;

	if (l.n == 0) {
		/* The empty data of the last chunk ends in CRLF; some clients send it before the
		 * trailer, some do not. One, before any trailer line. */
		if (s->trailer_blank || s->trailer_lines > 0)
			return SLATE_ERR_INVALID_FORMAT;
		s->trailer_blank = true;
		return emit(out, "\r\n", 2, NULL, 0);
	}
	value = span_split(l, ':', &name);
	if (!value.p || name.n == 0 || name.n > 64)
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < name.n; i++) {
		if (!is_tchar(name.p[i]))
			return SLATE_ERR_INVALID_FORMAT;
		lower[i] = ascii_lower(name.p[i]);
	}
	lower[name.n] = 0;
	value = span_trim(value);
	if (streq(lower, "x-amz-trailer-signature")) {
		uint8_t md[32];
		char rest[65];
		unsigned len = 0;
		if (!is_sig_hex(value) || s->trailer_lines == 0)
			return SLATE_ERR_INVALID_FORMAT;
		if (EVP_DigestFinal_ex(s->trailer_md, md, &len) != 1 || len != 32)
			return SLATE_ERR_CRYPTO;
		hex_encode(md, 32, rest);
		r = stream_sign(s, "AWS4-HMAC-SHA256-TRAILER", rest);
		if (r < 0)
			return r;
		r = emit(out, "x-amz-trailer-signature:", strlen("x-amz-trailer-signature:"),
		         s->prev, SIGV4_SIG_HEX);
		if (r >= 0)
			r = emit(out, "\r\n", 2, NULL, 0);
		if (r < 0)
			return r;
		s->state = ST_END_CRLF;
		s->crlf_seen = 0;
		return 0;
	}
	if (++s->trailer_lines > TRAILER_LINES_MAX)
		return SLATE_ERR_TOO_LARGE;
	s->trailer_bytes += l.n;
	if (s->trailer_bytes > SIGV4_MAX_TRAILER)
		return SLATE_ERR_TOO_LARGE;
	if (s->trailer_lines == 1 && EVP_DigestInit_ex2(s->trailer_md, sha256_md, NULL) != 1)
		return SLATE_ERR_CRYPTO;
	if (EVP_DigestUpdate(s->trailer_md, lower, name.n) != 1 ||
	    EVP_DigestUpdate(s->trailer_md, ":", 1) != 1 ||
	    EVP_DigestUpdate(s->trailer_md, value.p, value.n) != 1 ||
	    EVP_DigestUpdate(s->trailer_md, "\n", 1) != 1)
		return SLATE_ERR_CRYPTO;
	return emit(out, l.p, l.n, "\r\n", 2);
}

/* Expects the rest of a CRLF; returns bytes used, sets *done. */
static int expect_crlf(struct sigv4_stream *s, const uint8_t *p, size_t n, size_t *used, bool *done)
{
	size_t i = 0;

	*done = false;
	while (i < n && s->crlf_seen < 2) {
		if (p[i] != (s->crlf_seen == 0 ? '\r' : '\n'))
			return SLATE_ERR_INVALID_FORMAT;
		s->crlf_seen++;
		i++;
	}
	*used = i;
	*done = s->crlf_seen == 2;
	return 0;
}

int sigv4_stream_feed(struct sigv4_stream *s, const void *data, size_t n, struct buf *out)
{
	const uint8_t *p = data;
	size_t used;
	bool done;
	int r = 0;

	if (!s || !out || (!p && n > 0))
		return SLATE_ERR_INVALID_FORMAT;
	if (s->error)
		return s->error;
	while (n > 0) {
		used = 0;
		switch (s->state) {
		case ST_LINE:
			r = stream_line(s, p, n, SIGV4_MAX_CHUNK_LINE, &used, &done);
			if (r < 0 || !done)
				break;
			r = parse_chunk_line(s);
			s->line_len = 0;
			if (r < 0)
				break;
			if (s->decoded_length >= 0 &&
			    s->total + s->chunk_size > (uint64_t)s->decoded_length) {
				r = SLATE_ERR_SIZE_MISMATCH;
				break;
			}
			s->data_len = 0;
			if (EVP_DigestInit_ex2(s->c.md, sha256_md, NULL) != 1) {
				r = SLATE_ERR_CRYPTO;
				break;
			}
			if (s->chunk_size == 0) {
				/* The last chunk: signed over no data, sent at once. */
				r = stream_sign_chunk(s);
				if (r >= 0)
					r = emit_chunk(s, out, false);
				s->crlf_seen = 0;
				s->state = s->trailer ? ST_TRAILER : ST_FINAL_CRLF;
				break;
			}
			if (s->chunk_size > s->data_alloc) {
				uint8_t *d = realloc(s->data, s->chunk_size);
				if (!d) {
					r = -ENOMEM;
					break;
				}
				s->data = d;
				s->data_alloc = s->chunk_size;
			}
			s->state = ST_DATA;
			break;
		case ST_DATA:
			used = s->chunk_size - s->data_len;
			if (used > n)
				used = n;
			memcpy(s->data + s->data_len, p, used);
			if (EVP_DigestUpdate(s->c.md, p, used) != 1) {
				r = SLATE_ERR_CRYPTO;
				break;
			}
			s->data_len += used;
			if (s->data_len == s->chunk_size) {
				s->crlf_seen = 0;
				s->state = ST_DATA_CRLF;
			}
			break;
		case ST_DATA_CRLF:
			r = expect_crlf(s, p, n, &used, &done);
			if (r < 0 || !done)
				break;
			r = stream_sign_chunk(s);
			if (r >= 0)
				r = emit_chunk(s, out, true);
			s->total += s->chunk_size;
			s->data_len = 0;
			s->state = ST_LINE;
			break;
		case ST_FINAL_CRLF:
		case ST_END_CRLF:
			r = expect_crlf(s, p, n, &used, &done);
			if (r >= 0 && done) {
				r = emit(out, "\r\n", 2, NULL, 0);
				s->state = ST_DONE;
			}
			break;
		case ST_TRAILER:
			r = stream_line(s, p, n, sizeof(s->line), &used, &done);
			if (r < 0 || !done)
				break;
			r = stream_trailer_line(s, out);
			s->line_len = 0;
			break;
		default:
			r = SLATE_ERR_INVALID_FORMAT; /* bytes after the end */
		}
		if (r < 0)
			return stream_fail(s, r);
		p += used;
		n -= used;
	}
	return 0;
}

int sigv4_stream_finish(struct sigv4_stream *s)
{
	if (!s)
		return SLATE_ERR_INVALID_FORMAT;
	if (s->error)
		return s->error;
	if (s->state != ST_DONE && !(s->state == ST_END_CRLF && s->crlf_seen == 0))
		return stream_fail(s, SLATE_ERR_MESSAGE_INCOMPLETE);
	if (s->decoded_length >= 0 && s->total != (uint64_t)s->decoded_length)
		return stream_fail(s, SLATE_ERR_SIZE_MISMATCH);
	return 0;
}

/* ---- credentials from a secret set ---- */

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

/* ---- errors ---- */

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

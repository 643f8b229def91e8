/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The SigV4 signer's insides, shared by sigv4.c (signing), sigv4-canon.c (parsing and the
 * canonical request) and sigv4-stream.c (aws-chunked). sigv4.h is the interface. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "proxy/sigv4.h"
#include "util/buf.h"
#include "util/hex.h"
#include "util/macro.h"

#define CANON_MAX (256u * 1024u) /* a canonical request; far above what the limits allow */
#define SCOPE_MAX (8 + 1 + SIGV4_MAX_SCOPE_PART + 1 + SIGV4_MAX_SCOPE_PART + 1 + 12 + 1)
#define TOKEN_MAX (16u * 1024u) /* a session token (secrets.h: SECRET_VALUE_MAX) */
#define TRAILER_LINES_MAX 16u
#define EMPTY_SHA256_LEN 64u

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

static inline bool span_eq_ci(struct span s, const char *lit)
{
	size_t n = strlen(lit);

	if (s.n != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (ascii_lower(s.p[i]) != ascii_lower(lit[i]))
			return false;
	return true;
}

static inline bool span_starts(struct span s, const char *lit)
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
static inline bool is_tchar(char c)
{
	return is_alnum(c) || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static inline void hex_encode(const uint8_t *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = 0;
}

static inline bool is_sig_hex(struct span s)
{
	return s.n == SIGV4_SIG_HEX && hex_is(s.p, s.n, HEX_LOWER);
}

/* YYYYMMDD with a plausible month and day. */
static inline bool is_date(const char *p)
{
	for (int i = 0; i < 8; i++)
		if (!is_digit(p[i]))
			return false;
	int month = (p[4] - '0') * 10 + (p[5] - '0');
	int day = (p[6] - '0') * 10 + (p[7] - '0');
	return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

/* YYYYMMDDTHHMMSSZ. */
static inline bool is_timestamp(struct span s)
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

static inline bool is_scope_part(struct span s)
{
	if (s.n == 0 || s.n > SIGV4_MAX_SCOPE_PART)
		return false;
	for (size_t i = 0; i < s.n; i++)
		if (!is_alnum(s.p[i]) && s.p[i] != '-' && s.p[i] != '_' && s.p[i] != '.')
			return false;
	return true;
}

static inline bool is_key_id(struct span s)
{
	if (s.n == 0 || s.n > SIGV4_MAX_KEY_ID)
		return false;
	for (size_t i = 0; i < s.n; i++)
		if (!is_alnum(s.p[i]))
			return false;
	return true;
}

static inline void span_copy(char *dst, struct span s)
{
	memcpy(dst, s.p, s.n);
	dst[s.n] = 0;
}

static inline bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static inline struct span span_trim(struct span s)
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
static inline struct span span_split(struct span s, char sep, struct span *head)
{
	const char *q = s.n ? memchr(s.p, sep, s.n) : NULL;

	if (!q) {
		*head = s;
		return span_of(NULL, 0);
	}
	*head = span_of(s.p, (size_t)(q - s.p));
	return span_of(q + 1, s.n - (size_t)(q - s.p) - 1);
}

struct crypto {
	EVP_MAC_CTX *mac;
	EVP_MD_CTX *md;
};

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

/* One parameter of a raw query. */
struct qparam {
	struct span key, value; /* raw */
	struct span whole;
	int kind;
};

/* sigv4.c: SHA-256, fetched once (by sigv4_crypto_begin); one EVP context set per use. */
extern EVP_MD *sigv4_sha256_md;
int sigv4_crypto_begin(struct crypto *c);
void sigv4_crypto_done(struct crypto *c);
int sigv4_hmac(struct crypto *c, const void *key, size_t key_len, const void *msg, size_t len,
               uint8_t out[32]);

/* sigv4-canon.c */
int sigv4_put_encoded(struct buf *out, struct span s, bool keep_slash);
int sigv4_decode_to(struct span s, char *dst, size_t max);
bool sigv4_is_other_aws_scheme(struct span v);
int sigv4_qparam_classify(struct span k);
int sigv4_query_parse(struct span q, struct qparam **ret, size_t *ret_n);
bool sigv4_header_is(const struct sigv4_header *h, const char *name);
const char *sigv4_header_get(const struct sigv4_request *req, const char *name, size_t *ret_count);
int sigv4_request_check(const struct sigv4_request *req);
void sigv4_target_split(const char *target, struct span *path, struct span *query);
int sigv4_canonical_request_token(const struct sigv4_request *req, const struct sigv4_canon *c,
                                  const struct span *token, struct buf *out);

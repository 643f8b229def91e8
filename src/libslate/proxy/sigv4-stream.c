/* SPDX-License-Identifier: GPL-2.0-or-later */
/* AWS Signature Version 4: aws-chunked bodies re-signed chunk by chunk as they stream. */

#include <errno.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/sigv4-internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/hex.h"

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
	r = sigv4_crypto_begin(&s->c);
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
	sigv4_crypto_done(&s->c);
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
	r = sigv4_hmac(&s->c, s->key, 32, sts, (size_t)n, mac);
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
	if (s->trailer_lines == 1 && EVP_DigestInit_ex2(s->trailer_md, sigv4_sha256_md, NULL) != 1)
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
			if (EVP_DigestInit_ex2(s->c.md, sigv4_sha256_md, NULL) != 1) {
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

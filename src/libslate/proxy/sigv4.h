/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * AWS Signature Version 4 re-signing for the egress proxy (doc/sigv4.md). The guest signs with a
 * placeholder key (secrets/placeholder.h); slated rebuilds the canonical request from the request
 * as it will be forwarded and signs it again with the real key:
 *
 *   Authorization: AWS4-HMAC-SHA256 Credential=<id>/<date>/<region>/<service>/aws4_request,
 *                  SignedHeaders=<h1;h2...>, Signature=<64 hex>
 *   presigned:     ?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=...&X-Amz-Date=...
 *                  &X-Amz-Expires=...&X-Amz-SignedHeaders=...[&X-Amz-Security-Token=...]
 *                  &X-Amz-Signature=...
 *   aws-chunked:   x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]; every chunk
 *                  signature (and the trailer signature) recomputed as the body streams
 *                  (struct sigv4_stream).
 *
 * What cannot be re-signed -- SigV4a (AWS4-ECDSA-P256-SHA256), SigV2 ("AWS id:sig",
 * AWSAccessKeyId=), another algorithm -- is SIGV4_ERR_UNSUPPORTED: the proxy answers it with a
 * refusal and never forwards it (it carries the placeholder).
 *
 * Crypto is OpenSSL's (EVP_MAC HMAC, EVP_Digest SHA-256). The real values are used where the
 * lookup keeps them (secure buffers), never copied; derived signing keys live in sodium_malloc()
 * memory (a cache of recent ones, each stream's own) or on the stack, wiped after use; what is
 * handed out (the new Authorization, a presigned target holding the real token) is wiped when
 * freed. Every parser here is bounded by the SIGV4_MAX_* limits below and fuzzed
 * (tests/fuzz/fuzz-sigv4.c).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/macro.h"

#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SIGV4_STREAMING_PAYLOAD "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
#define SIGV4_STREAMING_PAYLOAD_TRAILER "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
#define SIGV4_STREAMING_UNSIGNED_TRAILER "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
#define SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Hard limits: anything larger is refused (SLATE_ERR_TOO_LARGE), never truncated. */
#define SIGV4_MAX_TARGET (16u * 1024u) /* request-target, path and query */
#define SIGV4_MAX_HEADERS 128u         /* header fields of one request */
#define SIGV4_MAX_HEADER_VALUE (16u * 1024u)
#define SIGV4_MAX_AUTHORIZATION 4096u /* the Authorization value */
#define SIGV4_MAX_SIGNED_HEADERS 64u  /* names in SignedHeaders */
#define SIGV4_MAX_QUERY_PARAMS 256u
#define SIGV4_MAX_KEY_ID 128u                 /* access key id */
#define SIGV4_MAX_SCOPE_PART 64u              /* region, service */
#define SIGV4_MAX_SECRET 256u                 /* secret access key */
#define SIGV4_MAX_CHUNK (16u * 1024u * 1024u) /* one aws-chunked chunk's data */
#define SIGV4_MAX_CHUNK_LINE 256u             /* "<hex size>;chunk-signature=<64 hex>" */
#define SIGV4_MAX_TRAILER (8u * 1024u)        /* all trailer lines of an aws-chunked body */
#define SIGV4_MAX_EXPIRES 604800L             /* X-Amz-Expires: 7 days, as AWS allows */
#define SIGV4_SIG_HEX 64u                     /* a signature: 64 lowercase hex digits */

/*
 * Errors of their own (outside slate_err's range; sigv4_strerror() knows them and falls back
 * to slate_strerror()). Malformed input is SLATE_ERR_INVALID_FORMAT, oversized SLATE_ERR_TOO_LARGE.
 */
enum sigv4_err {
	/* Signed in a way slate cannot re-sign (SigV4a, SigV2, another algorithm, no X-Amz-Date):
	 * refuse the request, never forward it. */
	SIGV4_ERR_UNSUPPORTED = -(SLATE_ERR_BASE + 512 + 1),
	/* The key id is no placeholder slate holds for this host (the guest's own key, or a
	 * placeholder of a secret not bound here). */
	SIGV4_ERR_UNKNOWN_KEY = -(SLATE_ERR_BASE + 512 + 2),
	/* Header-signed without x-amz-content-sha256: the caller must hash the body it will forward
	 * and call again with sigv4_request.body_sha256 set. */
	SIGV4_ERR_NEED_BODY_HASH = -(SLATE_ERR_BASE + 512 + 3),
	/* X-Amz-Security-Token is not the placeholder of the secret's session token (or the secret
	 * has none). */
	SIGV4_ERR_TOKEN_MISMATCH = -(SLATE_ERR_BASE + 512 + 4),
	/* The guest's own signature does not verify, with its placeholder secret, over the request
	 * as it will be forwarded: the request was changed after signing, or slate canonicalises it
	 * differently from the client. Re-signing it would sign something the guest did not. */
	SIGV4_ERR_GUEST_SIGNATURE = -(SLATE_ERR_BASE + 512 + 5),
};

/* Returns a static description of r (a sigv4_err, a slate_err or a negative errno). */
const char *sigv4_strerror(int r);

/* ---- the request as it will be forwarded ---- */

/* One header field, NUL-terminated, as the proxy will send it (struct http_field from
 * proxy/http.h has the same two members: name as received, value trimmed). Values containing
 * CR, LF or NUL are refused. */
struct sigv4_header {
	const char *name;
	const char *value;
};

/*
 * A request. method and target are the request line's, NUL-terminated; target is in
 * origin-form ("/path?query", percent-encoding as on the wire; an absolute-form target must be
 * reduced to origin-form first). headers are in the order they will be sent, all of them,
 * Authorization and Host included. body_sha256 is the lowercase hex SHA-256 of the body as
 * forwarded, or NULL: it is needed only when the request carries no x-amz-content-sha256
 * (then sigv4_resign says SIGV4_ERR_NEED_BODY_HASH; sigv4_request_needs_body_hash() tells in
 * advance). For aws-chunked bodies under HTTP chunked transfer coding, the proxy removes the
 * HTTP framing and feeds the aws-chunked bytes to the sigv4_stream.
 */
struct sigv4_request {
	const char *method;
	const char *target;
	const struct sigv4_header *headers;
	size_t n_headers;
	const char *body_sha256;
};

/* ---- parsing ---- */

enum sigv4_auth_kind {
	SIGV4_AUTH_NONE = 0,   /* no AWS signature: nothing to re-sign */
	SIGV4_AUTH_HEADER = 1, /* Authorization: AWS4-HMAC-SHA256 ... */
	SIGV4_AUTH_QUERY = 2,  /* presigned: X-Amz-Algorithm=AWS4-HMAC-SHA256 in the query */
};

/* A parsed signature. Strings are NUL-terminated copies. */
struct sigv4_auth {
	enum sigv4_auth_kind kind;
	char key_id[SIGV4_MAX_KEY_ID + 1]; /* [A-Za-z0-9] */
	char date[9];                      /* YYYYMMDD of the credential scope */
	char region[SIGV4_MAX_SCOPE_PART + 1];
	char service[SIGV4_MAX_SCOPE_PART + 1];
	char signed_headers
	        [SIGV4_MAX_AUTHORIZATION]; /* lower case, sorted, unique, ';'-separated */
	size_t n_signed_headers;
	char signature[SIGV4_SIG_HEX + 1]; /* lowercase hex */
	/* Presigned only (SIGV4_AUTH_QUERY): */
	char timestamp[17];      /* X-Amz-Date, YYYYMMDDTHHMMSSZ */
	long expires;            /* X-Amz-Expires, 1..SIGV4_MAX_EXPIRES */
	bool has_security_token; /* X-Amz-Security-Token present */
};

/*
 * Parses an Authorization value "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=...,
 * Signature=..." (len bytes at v; each part exactly once, in any order). Returns 0,
 * SIGV4_ERR_UNSUPPORTED for another AWS scheme (AWS4-ECDSA-P256-SHA256, "AWS id:sig", other
 * "AWS4-..."), SLATE_ERR_INVALID_FORMAT or SLATE_ERR_TOO_LARGE. *ret is untouched on failure.
 */
int sigv4_parse_authorization(const char *v, size_t len, struct sigv4_auth *ret);
/*
 * Parses the presigned parameters of a raw query (len bytes at q, without the '?'; names
 * matched case-insensitively, each at most once). Returns SIGV4_AUTH_NONE when there is no
 * X-Amz-Algorithm (and no SigV2 AWSAccessKeyId), SIGV4_AUTH_QUERY with *ret filled, or
 * SIGV4_ERR_UNSUPPORTED / SLATE_ERR_INVALID_FORMAT / SLATE_ERR_TOO_LARGE.
 */
int sigv4_parse_query(const char *q, size_t len, struct sigv4_auth *ret);
/*
 * Which kind of AWS signature req carries: SIGV4_AUTH_NONE, _HEADER or _QUERY, or a negative
 * error (SIGV4_ERR_UNSUPPORTED for SigV4a/SigV2/other; SLATE_ERR_INVALID_FORMAT for a malformed
 * one, or for both an Authorization header and a presigned query).
 */
int sigv4_detect(const struct sigv4_request *req);
/* Whether sigv4_resign() needs req->body_sha256 (header-signed, no x-amz-content-sha256). */
bool sigv4_request_needs_body_hash(const struct sigv4_request *req);

/* ---- re-signing ---- */

/*
 * The real credentials behind a placeholder key id, as a lookup hands them out. Pointers stay
 * valid for the sigv4_resign() call. The real values are secure buffers (util/buf.h).
 */
struct sigv4_credentials {
	const struct buf *access_key_id;     /* real */
	const struct buf *secret_access_key; /* real */
	const struct buf *session_token;     /* real, or NULL when the credentials have none */
	/* The placeholders the guest holds (not secret). placeholder_secret_access_key, when set,
	 * is used to check the guest's own signature over the request as forwarded (and to tell
	 * which of the canonical forms clients use it signed); NULL skips that check. */
	const char *placeholder_secret_access_key;
	const char *placeholder_session_token; /* NULL when the credentials have none */
};

/* Finds the credentials whose placeholder access key id is key_id. Returns 0 and fills *ret, or
 * -ENOENT when key_id is not a placeholder it holds (other negative errors are passed on). */
typedef int (*sigv4_lookup_fn)(void *userdata, const char *key_id, struct sigv4_credentials *ret);

/* A lookup over the secrets of a workspace (secrets/secrets.h): the AWS secrets bound to host.
 * Pass &(struct sigv4_secret_lookup){set, host, host_bound} as userdata. */
struct secret_set;
struct sigv4_secret_lookup {
	const struct secret_set *set;
	const char *host; /* normalised host the request goes to (util/host.h) */
	/* Whether a secret bound to bound may go to host: the proxy's host_matches() (resign.c's
	 * resign_host_bound), so that the re-signer and the leak scanner agree. */
	bool (*host_bound)(const char *bound, const char *host);
};
int sigv4_lookup_secret_set(void *userdata, const char *key_id, struct sigv4_credentials *ret);

struct sigv4_stream;

/*
 * What to change in the request. Free with sigv4_resigned_free (it wipes what it frees).
 *   SIGV4_AUTH_HEADER: set the Authorization header's value to authorization. When
 *     security_token is set, the X-Amz-Security-Token header must carry it: replace the value
 *     of the one there, or add the header when security_token_add. security_token is the
 *     lookup's own secure buffer (borrowed, not copied: valid as long as the credentials the
 *     lookup handed out, e.g. the connection's secret set).
 *   SIGV4_AUTH_QUERY: send target as the request-target (the query re-signed: real key id,
 *     real session token, new signature; every other parameter as it was).
 *   stream: for STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER] bodies, pass the (aws-chunked)
 *     body through it; NULL otherwise. Its length does not change, so Content-Length holds.
 * service, region and key_id_masked are for the audit trail (never the real key id in full).
 */
struct sigv4_resigned {
	enum sigv4_auth_kind kind;
	char *authorization;
	char *target;
	const struct buf *security_token; /* the real session token (borrowed) */
	bool security_token_add;
	struct sigv4_stream *stream;
	char service[SIGV4_MAX_SCOPE_PART + 1];
	char region[SIGV4_MAX_SCOPE_PART + 1];
	char key_id_masked[16]; /* "AKIA…" + last 4, e.g. "AKIA…MPLE" */
	const char *payload;    /* "UNSIGNED-PAYLOAD", "STREAMING-...", "sha256" (static) */
};
void sigv4_resigned_free(struct sigv4_resigned *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct sigv4_resigned *, sigv4_resigned_free);

/*
 * Re-signs req with the real credentials lookup finds for its placeholder key id. Returns
 * SIGV4_AUTH_NONE (and *ret = NULL) when req carries no AWS signature, SIGV4_AUTH_HEADER or
 * SIGV4_AUTH_QUERY with *ret set, or a negative error: SIGV4_ERR_UNSUPPORTED,
 * SIGV4_ERR_UNKNOWN_KEY, SIGV4_ERR_NEED_BODY_HASH, SIGV4_ERR_TOKEN_MISMATCH,
 * SIGV4_ERR_GUEST_SIGNATURE, SLATE_ERR_INVALID_FORMAT, SLATE_ERR_TOO_LARGE, -ENOMEM,
 * SLATE_ERR_CRYPTO. Nothing but NONE may be forwarded unchanged.
 */
int sigv4_resign(const struct sigv4_request *req, sigv4_lookup_fn lookup, void *userdata,
                 struct sigv4_resigned **ret);

/* ---- aws-chunked bodies ---- */

/*
 * A streaming transformer for STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER] bodies: feed the
 * aws-chunked bytes as they arrive, forward what it appends to out. A chunk is held until its
 * last byte arrived (its signature, in the chunk's header line, covers its data), so out must
 * be able to take SIGV4_MAX_CHUNK + SIGV4_MAX_CHUNK_LINE bytes more than it holds; drain it
 * after each call. Chunk header lines ("<hex>;chunk-signature=<64 hex>") and trailer lines are
 * parsed strictly and bounded; framing is kept byte for byte (only signatures change).
 * After an error every call returns that error.
 */
int sigv4_stream_new(const uint8_t signing_key[32], const char *timestamp, const char *scope,
                     const char *seed_signature, bool trailer, int64_t decoded_length,
                     struct sigv4_stream **ret);
/* Returns 0 or a negative error (SLATE_ERR_INVALID_FORMAT, SLATE_ERR_TOO_LARGE,
 * SLATE_ERR_SIZE_MISMATCH when the data exceeds x-amz-decoded-content-length,
 * SLATE_ERR_NO_BUFFER_SPACE when out is full). */
int sigv4_stream_feed(struct sigv4_stream *s, const void *p, size_t n, struct buf *out);
/* At the end of the body: returns 0 when it ended where aws-chunked says it ends (and held
 * x-amz-decoded-content-length bytes), else SLATE_ERR_MESSAGE_INCOMPLETE or the stream's error. */
int sigv4_stream_finish(struct sigv4_stream *s);
/* Whether the final chunk (and trailer) went through: later bytes are an error. */
bool sigv4_stream_done(const struct sigv4_stream *s);
void sigv4_stream_free(struct sigv4_stream *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct sigv4_stream *, sigv4_stream_free);

/* ---- the signing steps (for tests, the benchmark and clients) ---- */

struct sigv4_canon {
	bool s3;                    /* S3 path rules: no normalisation, no double encoding */
	bool presigned;             /* leave X-Amz-Signature out of the canonical query */
	const char *signed_headers; /* "host;x-amz-date": lower case, sorted, ';'-separated */
	const char *payload_hash;   /* the canonical request's last line */
};
/* Whether a service (the credential scope's) follows S3's rules: "s3", "s3-object-lambda",
 * "s3-outposts", "s3express". */
bool sigv4_service_is_s3(const char *service);
/* Appends the canonical request of req to out. Returns 0 or a negative error. */
int sigv4_canonical_request(const struct sigv4_request *req, const struct sigv4_canon *c,
                            struct buf *out);
/* Appends "AWS4-HMAC-SHA256\n<timestamp>\n<scope>\n<hex sha256 of creq>" to out. */
int sigv4_string_to_sign(const char *timestamp, const char *scope, const void *creq,
                         size_t creq_len, struct buf *out);
/* Derives the signing key for date (YYYYMMDD), region and service into key. Wipe it after use. */
int sigv4_signing_key(const void *secret, size_t secret_len, const char *date, const char *region,
                      const char *service, uint8_t key[32]);
/* HMAC-SHA256(key, msg) as 64 lowercase hex digits and a NUL into hex. */
int sigv4_sign_hex(const uint8_t key[32], const void *msg, size_t len, char hex[SIGV4_SIG_HEX + 1]);
/* SHA-256 of len bytes as 64 lowercase hex digits and a NUL into hex. */
int sigv4_sha256_hex(const void *p, size_t len, char hex[SIGV4_SIG_HEX + 1]);

/*
 * Signs req as a client does (header auth) and returns the Authorization value in *ret (caller
 * frees). req must carry X-Amz-Date (timestamp); signed_headers NULL signs every header but
 * Authorization. For tests, the benchmark and the test tools; the proxy only re-signs.
 */
struct sigv4_sign_input {
	const char *key_id;
	const void *secret;
	size_t secret_len;
	const char *timestamp; /* YYYYMMDDTHHMMSSZ */
	const char *region;
	const char *service;
	const char *signed_headers; /* NULL: all */
	const char *payload_hash;
};
int sigv4_sign_header(const struct sigv4_request *req, const struct sigv4_sign_input *in,
                      char **ret);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Strict HTTP/1.1 message heads and chunked bodies (RFC 9112), for the egress proxy. Requests
 * come from a hostile guest; anything two implementations could read differently is refused
 * rather than repaired (request smuggling: mitmproxy CVE-2021-39214, tinyproxy "chunked,"):
 *
 *   - lines end in CRLF only: a bare LF or a bare CR anywhere in a head is an error (400);
 *   - NUL and other control bytes (but HTAB) in a head: 400;
 *   - obs-fold (a field line starting with SP or HTAB): 400;
 *   - whitespace between a field name and its colon: 400;
 *   - request line over HTTP_MAX_REQUEST_LINE: 414; head over HTTP_MAX_HEAD or more than
 *     HTTP_MAX_FIELDS fields: 431;
 *   - Transfer-Encoding together with Content-Length: 400; a Transfer-Encoding list that is not
 *     exactly "chunked" (empty elements, parameters, chunked not last, chunked twice): 400; other
 *     codings before chunked: 501; Transfer-Encoding in HTTP/1.0: 400;
 *   - Content-Length that is not 1*DIGIT, or repeated with different values: 400;
 *   - no Host or more than one in a request: 400;
 *   - a version other than HTTP/1.0 and HTTP/1.1: 505.
 *
 * Nothing here allocates per byte or rescans: http_reader keeps how far a partial head was
 * checked, so a client sending one byte at a time costs linear time.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/macro.h"

#define HTTP_MAX_REQUEST_LINE (8u * 1024u)
#define HTTP_MAX_HEAD (64u * 1024u)
#define HTTP_MAX_FIELDS 128u
#define HTTP_MAX_LEADING_CRLF 4u      /* empty lines tolerated before a request line */
#define HTTP_MAX_CHUNK_LINE 1024u     /* chunk size with its extensions */
#define HTTP_MAX_TRAILER (8u * 1024u) /* all trailer fields of a chunked body */
#define HTTP_MAX_CONTENT_LENGTH (1ull << 62)

struct http_field {
	char *name;  /* as received (case kept), NUL-terminated */
	char *value; /* without leading and trailing whitespace, NUL-terminated */
};

enum http_framing {
	HTTP_BODY_NONE,
	HTTP_BODY_LENGTH,      /* content_length bytes */
	HTTP_BODY_CHUNKED,     /* chunked, the only coding */
	HTTP_BODY_UNTIL_CLOSE, /* responses only: the body ends when the server closes */
};

struct http_head {
	char *mem; /* owns every string below */
	bool response;
	/* Requests. */
	char *method;
	char *target;
	/* Responses. */
	unsigned status;
	char *reason;
	unsigned version_minor; /* HTTP/1.<minor>: 0 or 1 */
	struct http_field *fields;
	size_t n_fields;
	size_t head_len; /* bytes the head took on the wire, leading empty lines included */
	/* Derived. */
	enum http_framing framing;
	uint64_t content_length;
	bool keep_alive;      /* the sender allows another message on the connection */
	bool upgrade;         /* "Connection: upgrade" and an Upgrade field */
	bool expect_continue; /* requests: "Expect: 100-continue" */
	const char *host;     /* requests: the one Host value */
};

void http_head_free(struct http_head *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct http_head *, http_head_free);

/* State across calls while a head arrives in pieces; zero it (or http_reader_reset) per head. */
struct http_reader {
	size_t scanned; /* bytes of the buffer already checked */
	size_t leading; /* empty lines skipped before the start line */
	size_t line_start;
	size_t start_line_end; /* 0 until the start line's LF was seen */
	bool last_cr;          /* the byte before scanned was CR */
	unsigned crlf_run;     /* consecutive CRLFs at scanned */
};
static inline void http_reader_reset(struct http_reader *r)
{
	*r = (struct http_reader){0};
}

/*
 * Parses a request head from the unread bytes of in. Returns 1 and the head in *ret (its bytes
 * consumed from in), 0 when more bytes are needed (nothing consumed; call again with the same
 * reader after appending), or SLATE_ERR_INVALID_FORMAT when the head is refused: *ret_status
 * (may be NULL) gets the status to answer with (400, 414, 417, 431, 501, 505) and err the reason
 * for people; the connection must be answered with that status and closed.
 */
int http_parse_request(struct http_reader *r, struct buf *in, struct http_head **ret,
                       unsigned *ret_status, struct slate_error *err);
/*
 * The same for a response to a request with method request_method (a response to HEAD has no
 * body). Every refusal is 502 in *ret_status (a bad gateway: the server is at fault).
 */
int http_parse_response(struct http_reader *r, struct buf *in, const char *request_method,
                        struct http_head **ret, unsigned *ret_status, struct slate_error *err);

/* The value of the only field called name (case-insensitive). Returns NULL when there is none;
 * *ret_count (may be NULL) gets how many there are. */
const char *http_head_get(const struct http_head *h, const char *name, size_t *ret_count);
/* Whether the comma-separated list in value holds token (case-insensitive). */
bool http_list_has(const char *value, const char *token);

/* Decoding a chunked body. Zero it (or http_chunked_reset) per body. */
struct http_chunked {
	int state;
	uint64_t remaining; /* of the current chunk's data */
	unsigned digits;
	size_t line_len;
	size_t trailer_len;
};
static inline void http_chunked_reset(struct http_chunked *c)
{
	*c = (struct http_chunked){0};
}

/*
 * Advances through the len bytes at p. Sets *ret_consumed (bytes of p used) and, when it reached
 * chunk data, *ret_data and *ret_data_len (a span inside p, already counted in *ret_consumed);
 * otherwise *ret_data_len is 0. Returns 1 when the body (last chunk and trailers) ended, 0 when
 * more may follow (call again with p + consumed), or SLATE_ERR_INVALID_FORMAT (bad size, bad
 * line ending, oversized extension or trailer, NUL). Trailer fields are checked like header
 * fields and then dropped.
 */
int http_chunked_feed(struct http_chunked *c, const uint8_t *p, size_t len, size_t *ret_consumed,
                      const uint8_t **ret_data, size_t *ret_data_len);

/* Is c a tchar (RFC 9110 token character)? */
bool http_is_tchar(int c);

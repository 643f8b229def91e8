/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for proxy/sigv4: what a guest controls. The first byte chooses:
 *   0  an Authorization value (sigv4_parse_authorization)
 *   1  a raw query (sigv4_parse_query)
 *   2  a request, one line each: method, target, then "name:value" headers; detected,
 *      canonicalised both ways and re-signed against a fixed placeholder lookup
 *   3  an aws-chunked body (after a flags byte and a piece-size byte) through a sigv4_stream
 * Results are checked, not only survived: a re-signed request carries the real key id, parses
 * back, and no longer verifies under the placeholder; a body that went through whole keeps its
 * length.
 */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/sigv4.h"
#include "util/buf.h"
#include "util/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PLACEHOLDER_ID "AKIDEXAMPLE"
#define PLACEHOLDER_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define PLACEHOLDER_TOKEN "slatePlaceholderToken"
#define REAL_ID "AKIAREALREALREAL7777"
#define MAX_FIELDS 24

struct creds {
	struct buf *id, *secret, *token;
	bool check_guest;
};

static struct buf *secure(const char *s)
{
	struct buf *b = buf_new(strlen(s));
	if (!b || buf_put(b, s, strlen(s)) < 0)
		abort();
	return b;
}

static int lookup(void *userdata, const char *key_id, struct sigv4_credentials *ret)
{
	struct creds *c = userdata;

	if (strcmp(key_id, PLACEHOLDER_ID) != 0)
		return -ENOENT;
	*ret = (struct sigv4_credentials){
	        .access_key_id = c->id,
	        .secret_access_key = c->secret,
	        .session_token = c->token,
	        .placeholder_secret_access_key = c->check_guest ? PLACEHOLDER_SECRET : NULL,
	        .placeholder_session_token = PLACEHOLDER_TOKEN,
	};
	return 0;
}

static void fuzz_request(const uint8_t *data, size_t size, bool check_guest)
{
	char *text = malloc(size + 1), *line, *next;
	struct sigv4_header h[MAX_FIELDS];
	struct sigv4_request req = {.headers = h, .body_sha256 = SIGV4_EMPTY_SHA256};
	struct creds c = {secure(REAL_ID), secure("realSecretrealSecretrealSecretrealSecret"),
	                  secure("realToken/+="), check_guest};
	struct sigv4_resigned *res = NULL;
	int r;

	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = 0;
	line = text;
	for (int i = 0; line; i++, line = next) {
		char *colon;
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		if (i == 0)
			req.method = line;
		else if (i == 1)
			req.target = line;
		else if (req.n_headers < MAX_FIELDS && (colon = strchr(line, ':'))) {
			*colon = 0;
			h[req.n_headers++] = (struct sigv4_header){line, colon + 1};
		}
	}
	if (!req.method || !req.target)
		goto out;

	(void)sigv4_detect(&req);
	(void)sigv4_request_needs_body_hash(&req);
	for (int s3 = 0; s3 < 2; s3++) {
		struct buf *b = buf_new(1 << 20);
		struct sigv4_canon canon = {
		        .s3 = s3, .signed_headers = "host;x-amz-date", .payload_hash = "x"};
		if (!b)
			abort();
		(void)sigv4_canonical_request(&req, &canon, b);
		buf_free(b);
	}

	r = sigv4_resign(&req, lookup, &c, &res);
	if (r > 0) {
		struct sigv4_auth a;
		if (!res)
			abort();
		if (r == SIGV4_AUTH_HEADER) {
			if (sigv4_parse_authorization(res->authorization,
			                              strlen(res->authorization), &a) != 0 ||
			    strcmp(a.key_id, REAL_ID) != 0)
				abort();
		} else {
			const char *q = strchr(res->target, '?');
			if (!q || sigv4_parse_query(q + 1, strlen(q + 1), &a) != SIGV4_AUTH_QUERY ||
			    strcmp(a.key_id, REAL_ID) != 0)
				abort();
		}
		/* Re-signing the re-signed request finds no placeholder any more. */
		if (r == SIGV4_AUTH_QUERY) {
			struct sigv4_request again = req;
			struct sigv4_resigned *res2 = NULL;
			again.target = res->target;
			if (sigv4_resign(&again, lookup, &c, &res2) != SIGV4_ERR_UNKNOWN_KEY)
				abort();
		}
	} else if (res)
		abort();
	sigv4_resigned_free(res);
out:
	buf_free_secure(c.id);
	buf_free_secure(c.secret);
	buf_free_secure(c.token);
	free(text);
}

static void fuzz_stream(const uint8_t *data, size_t size)
{
	static const char seed[] =
	        "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
	uint8_t key[32] = {7}, flags, piece;
	struct sigv4_stream *s = NULL;
	struct buf *out;
	size_t fed = 0;
	int r = 0;

	if (size < 2)
		return;
	flags = data[0];
	piece = data[1] ? data[1] : 1;
	data += 2;
	size -= 2;
	if (sigv4_stream_new(key, "20130524T000000Z", "20130524/us-east-1/s3/aws4_request", seed,
	                     flags & 1, (flags & 2) ? (int64_t)(flags >> 2) : -1, &s) != 0)
		abort();
	out = buf_new(BUF_MAX_DEFAULT);
	if (!out)
		abort();
	while (fed < size && r == 0) {
		size_t n = size - fed < piece ? size - fed : piece;
		r = sigv4_stream_feed(s, data + fed, n, out);
		fed += n;
	}
	if (r == 0 && sigv4_stream_finish(s) == 0) {
		/* Only signatures change: a complete body keeps its length. */
		if (!sigv4_stream_done(s) || buf_len(out) != size)
			abort();
	}
	sigv4_stream_free(s);
	buf_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sigv4_auth a;

	if (size < 1)
		return 0;
	switch (data[0] % 5) {
	case 0:
		(void)sigv4_parse_authorization((const char *)data + 1, size - 1, &a);
		break;
	case 1:
		(void)sigv4_parse_query((const char *)data + 1, size - 1, &a);
		break;
	case 2:
		fuzz_request(data + 1, size - 1, true);
		break;
	case 3:
		fuzz_request(data + 1, size - 1, false);
		break;
	default:
		fuzz_stream(data + 1, size - 1);
	}
	return 0;
}

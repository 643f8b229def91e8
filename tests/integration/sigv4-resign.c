/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * sigv4-resign: re-signs one raw HTTP/1.1 request with proxy/sigv4, as the egress proxy does,
 * for tests/integration/sigv4.sh (which has clients sign with placeholders and a server that
 * only accepts the real key). Reads the request (Content-Length framing) on stdin and writes
 * the re-signed one to stdout: the Authorization value or the presigned query replaced, the
 * session token swapped, an aws-chunked body passed through the sigv4_stream in small pieces.
 * Credentials come from the environment: SIGV4_PLACEHOLDER_ID, SIGV4_PLACEHOLDER_SECRET
 * (optional: checks the guest's signature), SIGV4_PLACEHOLDER_TOKEN, SIGV4_REAL_ID,
 * SIGV4_REAL_SECRET, SIGV4_REAL_TOKEN. Exits 2 with sigv4_strerror() when it refuses.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy/sigv4.h"
#include "util/buf.h"
#include "util/error.h"

#define MAX_REQUEST (64u * 1024u * 1024u)
#define MAX_FIELDS 64

static struct buf *env_buf(const char *name)
{
	const char *v = getenv(name);
	struct buf *b;

	if (!v || !*v)
		return NULL;
	b = buf_new(strlen(v));
	if (!b || buf_put(b, v, strlen(v)) < 0)
		exit(1);
	return b;
}

struct env_creds {
	struct buf *id, *secret, *token;
};

static int lookup(void *userdata, const char *key_id, struct sigv4_credentials *ret)
{
	struct env_creds *c = userdata;
	const char *placeholder = getenv("SIGV4_PLACEHOLDER_ID");

	if (!placeholder || strcmp(placeholder, key_id) != 0)
		return -ENOENT;
	*ret = (struct sigv4_credentials){
	        .access_key_id = c->id,
	        .secret_access_key = c->secret,
	        .session_token = c->token,
	        .placeholder_secret_access_key = getenv("SIGV4_PLACEHOLDER_SECRET"),
	        .placeholder_session_token = getenv("SIGV4_PLACEHOLDER_TOKEN"),
	};
	return 0;
}

int main(void)
{
	struct env_creds c = {env_buf("SIGV4_REAL_ID"), env_buf("SIGV4_REAL_SECRET"),
	                      env_buf("SIGV4_REAL_TOKEN")};
	struct sigv4_header h[MAX_FIELDS];
	struct sigv4_request req = {.headers = h};
	struct sigv4_resigned *res = NULL;
	char *in, *end, *line, *next, *body, body_hash[65];
	size_t len = 0, body_len, n;
	bool token_done = false;
	int r;

	in = malloc(MAX_REQUEST + 1);
	if (!in || !c.id || !c.secret)
		return 1;
	while ((n = fread(in + len, 1, MAX_REQUEST - len, stdin)) > 0)
		len += n;
	in[len] = 0;
	end = strstr(in, "\r\n\r\n");
	if (!end)
		return 1;
	*end = 0;
	body = end + 4;
	body_len = len - (size_t)(body - in);

	/* Request line, then "Name: value" fields. */
	line = in;
	next = strstr(line, "\r\n");
	if (next) {
		*next = 0;
		next += 2;
	}
	req.method = strtok(line, " ");
	req.target = strtok(NULL, " ");
	if (!req.method || !req.target)
		return 1;
	for (line = next; line && *line; line = next) {
		char *colon;
		next = strstr(line, "\r\n");
		if (next) {
			*next = 0;
			next += 2;
		}
		colon = strchr(line, ':');
		if (!colon || req.n_headers >= MAX_FIELDS)
			return 1;
		*colon++ = 0;
		while (*colon == ' ' || *colon == '\t')
			colon++;
		h[req.n_headers++] = (struct sigv4_header){line, colon};
	}

	r = sigv4_resign(&req, lookup, &c, &res);
	if (r == SIGV4_ERR_NEED_BODY_HASH) {
		if (sigv4_sha256_hex(body, body_len, body_hash) < 0)
			return 1;
		req.body_sha256 = body_hash;
		r = sigv4_resign(&req, lookup, &c, &res);
	}
	if (r < 0) {
		fprintf(stderr, "sigv4-resign: %s\n", sigv4_strerror(r));
		return 2;
	}
	if (r == SIGV4_AUTH_NONE) {
		fprintf(stderr, "sigv4-resign: no AWS signature, forwarded as is\n");
		res = NULL;
	} else
		fprintf(stderr, "sigv4-resign: %s %s %s %s\n",
		        r == SIGV4_AUTH_HEADER ? "header" : "query", res->service, res->region,
		        res->key_id_masked);

	printf("%s %s HTTP/1.1\r\n", req.method, res && res->target ? res->target : req.target);
	for (size_t i = 0; i < req.n_headers; i++) {
		const char *v = h[i].value;
		if (res && res->authorization && strcasecmp(h[i].name, "authorization") == 0)
			v = res->authorization;
		if (res && res->security_token &&
		    strcasecmp(h[i].name, "x-amz-security-token") == 0) {
			printf("%s: %.*s\r\n", h[i].name, (int)buf_len(res->security_token),
			       (const char *)buf_ptr(res->security_token));
			token_done = true;
			continue;
		}
		printf("%s: %s\r\n", h[i].name, v);
	}
	if (res && res->security_token && !token_done)
		printf("X-Amz-Security-Token: %.*s\r\n", (int)buf_len(res->security_token),
		       (const char *)buf_ptr(res->security_token));
	printf("\r\n");
	if (res && res->stream) {
		struct buf *out = buf_new(BUF_MAX_DEFAULT);
		/* Odd-sized pieces, so chunk boundaries fall anywhere. */
		for (size_t off = 0; off < body_len; off += 1021) {
			size_t k = body_len - off < 1021 ? body_len - off : 1021;
			r = sigv4_stream_feed(res->stream, body + off, k, out);
			if (r < 0)
				break;
			fwrite(buf_ptr(out), 1, buf_len(out), stdout);
			(void)buf_reset(out);
		}
		if (r >= 0)
			r = sigv4_stream_finish(res->stream);
		buf_free(out);
		if (r < 0) {
			fprintf(stderr, "sigv4-resign: body: %s\n", sigv4_strerror(r));
			return 2;
		}
	} else
		fwrite(body, 1, body_len, stdout);
	sigv4_resigned_free(res);
	buf_free_secure(c.id);
	buf_free_secure(c.secret);
	buf_free_secure(c.token);
	free(in);
	return fflush(stdout) == 0 ? 0 : 1;
}

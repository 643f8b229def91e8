/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bench/sigv4: what re-signing an AWS request costs slated (proxy/sigv4). Times, per call,
 * sigv4_resign() of a typical header-signed S3 GetObject as botocore sends it (8 header fields,
 * a session token, the guest's signature checked with its placeholder secret), the same without
 * that check, a presigned GET, and the aws-chunked transformer's throughput on 64 KiB chunks next
 * to plain SHA-256 of the same bytes (its floor). Prints medians and 99th percentiles; with
 * BENCH_RESULTS set, appends them there. Usage: bench/sigv4 [RUNS [header|presigned|stream]]
 * (default: 20000 runs of all three).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proxy/sigv4.h"
#include "util/buf.h"
#include "util/error.h"

#define PLACEHOLDER_ID "AKIASLATE7QX2LMN4PQR"
#define PLACEHOLDER_SECRET "slateQ2mYd8k3RtVx7LpW0cZb5NfHj4GsAe9TuIo"
#define PLACEHOLDER_TOKEN "slateTokenPlaceholderAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
#define REAL_ID "AKIAIOSFODNN7EXAMPLE"
#define REAL_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define REAL_TOKEN "FwoGZXIvYXdzEJr//////////wEaDKexampletokenexampletokenexampletoken+/=="

struct creds {
	struct buf *id, *secret, *token;
	const char *placeholder_secret;
};

static struct buf *secure(const char *s)
{
	struct buf *b = buf_new(strlen(s));
	if (!b || buf_put(b, s, strlen(s)) < 0)
		exit(1);
	return b;
}

static int lookup(void *userdata, const char *key_id, struct sigv4_credentials *ret)
{
	struct creds *c = userdata;

	if (strcmp(key_id, PLACEHOLDER_ID) != 0)
		return -ENOENT;
	*ret = (struct sigv4_credentials){.access_key_id = c->id,
	                                  .secret_access_key = c->secret,
	                                  .session_token = c->token,
	                                  .placeholder_secret_access_key = c->placeholder_secret,
	                                  .placeholder_session_token = PLACEHOLDER_TOKEN};
	return 0;
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *name, double *t, int n)
{
	const char *path = getenv("BENCH_RESULTS");
	char line[256], date[32];
	time_t now = time(NULL);

	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	snprintf(line, sizeof(line), "%s: median %.2f us, p99 %.2f us, min %.2f us (%d runs)", name,
	         t[n / 2], t[(n * 99) / 100], t[0], n);
	printf("%s\n", line);
	if (path) {
		FILE *f = fopen(path, "a");
		strftime(date, sizeof(date), "%Y-%m-%d", gmtime(&now));
		if (f) {
			fprintf(f, "%s %s\n", date, line);
			fclose(f);
		}
	}
}

static void die(const char *what, int r)
{
	fprintf(stderr, "bench/sigv4: %s: %s\n", what, sigv4_strerror(r));
	exit(1);
}

static void time_resign(const char *name, const struct sigv4_request *req, struct creds *c,
                        int runs)
{
	double *t = calloc((size_t)runs, sizeof(*t));
	struct sigv4_resigned *res = NULL;
	int r;

	if (!t)
		exit(1);
	for (int i = 0; i < runs / 10 + 10; i++) { /* warm-up */
		r = sigv4_resign(req, lookup, c, &res);
		if (r <= 0)
			die(name, r);
		sigv4_resigned_free(res);
	}
	for (int i = 0; i < runs; i++) {
		double t0 = now_us();
		r = sigv4_resign(req, lookup, c, &res);
		sigv4_resigned_free(res);
		t[i] = now_us() - t0;
		if (r <= 0)
			die(name, r);
	}
	report(name, t, runs);
	free(t);
}

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 20000;
	const char *only = argc > 2 ? argv[2] : NULL;
	struct creds c = {secure(REAL_ID), secure(REAL_SECRET), secure(REAL_TOKEN),
	                  PLACEHOLDER_SECRET};
	char *authz = NULL;
	char ts[17];
	time_t now = time(NULL);
	int r;

	if (runs < 100)
		runs = 100;
	strftime(ts, sizeof(ts), "%Y%m%dT%H%M%SZ", gmtime(&now));

	/* GetObject as botocore 1.29 sends it (aws s3 cp s3://bucket/key -). */
	struct sigv4_header h[9] = {
	        {"Host", "example-bucket.s3.us-east-1.amazonaws.com"},
	        {"Accept-Encoding", "identity"},
	        {"User-Agent", "aws-cli/2.9.19 Python/3.11.2 Linux/6.1.0 source/x86_64.debian.12 "
	                       "prompt/off command/s3.cp"},
	        {"X-Amz-Date", ts},
	        {"X-Amz-Content-SHA256", SIGV4_UNSIGNED_PAYLOAD},
	        {"X-Amz-Security-Token", PLACEHOLDER_TOKEN},
	        {"Range", "bytes=0-8388607"},
	        {"Content-Length", "0"},
	};
	struct sigv4_request req = {.method = "GET",
	                            .target = "/data/2026/11/report%20final.parquet",
	                            .headers = h,
	                            .n_headers = 8};
	struct sigv4_sign_input in = {.key_id = PLACEHOLDER_ID,
	                              .secret = PLACEHOLDER_SECRET,
	                              .secret_len = strlen(PLACEHOLDER_SECRET),
	                              .timestamp = ts,
	                              .region = "us-east-1",
	                              .service = "s3",
	                              .signed_headers =
	                                      "host;range;x-amz-content-sha256;x-amz-date;"
	                                      "x-amz-security-token",
	                              .payload_hash = SIGV4_UNSIGNED_PAYLOAD};
	r = sigv4_sign_header(&req, &in, &authz);
	if (r < 0)
		die("signing", r);
	h[8] = (struct sigv4_header){"Authorization", authz};
	req.n_headers = 9;
	if (!only || strcmp(only, "header") == 0) {
		time_resign("sigv4-resign-header", &req, &c, runs);
		c.placeholder_secret = NULL;
		time_resign("sigv4-resign-header-unchecked", &req, &c, runs);
		c.placeholder_secret = PLACEHOLDER_SECRET;
	}

	/* A presigned GET (aws s3 presign), its query rebuilt. */
	if (!only || strcmp(only, "presigned") == 0) {
		struct sigv4_header ph[] = {{"Host", "example-bucket.s3.us-east-1.amazonaws.com"},
		                            {"User-Agent", "curl/7.88.1"},
		                            {"Accept", "*/*"}};
		struct sigv4_request preq = {.method = "GET", .headers = ph, .n_headers = 3};
		_cleanup_buf_ struct buf *creq = buf_new(1 << 16), *sts = buf_new(1 << 16);
		char base[1024], target[1200], sig[65], scope[64];
		uint8_t key[32];
		snprintf(scope, sizeof(scope), "%.8s/us-east-1/s3/aws4_request", ts);
		snprintf(base, sizeof(base),
		         "/data/"
		         "report.parquet?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-"
		         "Credential=" PLACEHOLDER_ID
		         "%%2F%.8s%%2Fus-east-1%%2Fs3%%2Faws4_request&X-Amz-Date=%s"
		         "&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-"
		         "Token=" PLACEHOLDER_TOKEN,
		         ts, ts);
		snprintf(target, sizeof(target), "%s&X-Amz-Signature=%064d", base, 0);
		preq.target = target;
		struct sigv4_canon canon = {.s3 = true,
		                            .presigned = true,
		                            .signed_headers = "host",
		                            .payload_hash = SIGV4_UNSIGNED_PAYLOAD};
		char date[9];
		memcpy(date, ts, 8);
		date[8] = 0;
		if (!creq || !sts || sigv4_canonical_request(&preq, &canon, creq) < 0 ||
		    sigv4_string_to_sign(ts, scope, buf_ptr(creq), buf_len(creq), sts) < 0 ||
		    sigv4_signing_key(PLACEHOLDER_SECRET, strlen(PLACEHOLDER_SECRET), date,
		                      "us-east-1", "s3", key) < 0 ||
		    sigv4_sign_hex(key, buf_ptr(sts), buf_len(sts), sig) < 0)
			die("presigning", SLATE_ERR_INTERNAL);
		snprintf(target, sizeof(target), "%s&X-Amz-Signature=%s", base, sig);
		time_resign("sigv4-resign-presigned", &preq, &c, runs);
	}

	/* aws-chunked: 64 MiB in 64 KiB chunks through the transformer, against SHA-256 alone. */
	if (!only || strcmp(only, "stream") == 0) {
		const size_t chunk = 65536, total = 64u << 20;
		size_t body_len = (total / chunk) * (chunk + 90) + 90;
		uint8_t *body = malloc(body_len), *data = malloc(chunk), key[32] = {1};
		struct buf *out = buf_new(BUF_MAX_DEFAULT);
		struct sigv4_stream *s = NULL;
		char hex[65];
		size_t len = 0;
		double t0, t_stream, t_sha;

		if (!body || !data || !out)
			exit(1);
		memset(data, 'x', chunk);
		for (size_t i = 0; i < total / chunk; i++) {
			len += (size_t)sprintf((char *)body + len, "%zx;chunk-signature=%064d\r\n",
			                       chunk, 0);
			memcpy(body + len, data, chunk);
			len += chunk;
			memcpy(body + len, "\r\n", 2);
			len += 2;
		}
		len += (size_t)sprintf((char *)body + len, "0;chunk-signature=%064d\r\n\r\n", 0);
		r = sigv4_stream_new(
		        key, ts, "20261130/us-east-1/s3/aws4_request",
		        "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9", false,
		        (int64_t)total, &s);
		if (r < 0)
			die("stream", r);
		t0 = now_us();
		for (size_t off = 0; off < len && r >= 0; off += 16384) {
			size_t n = len - off < 16384 ? len - off : 16384;
			r = sigv4_stream_feed(s, body + off, n, out);
			(void)buf_reset(out);
		}
		if (r >= 0)
			r = sigv4_stream_finish(s);
		t_stream = now_us() - t0;
		if (r < 0)
			die("stream", r);
		t0 = now_us();
		if (sigv4_sha256_hex(body, len, hex) < 0)
			die("sha256", SLATE_ERR_CRYPTO);
		t_sha = now_us() - t0;
		printf("sigv4-stream: %.0f MB/s through the aws-chunked re-signer, %.0f MB/s "
		       "SHA-256 "
		       "alone (64 KiB chunks, 64 MiB)\n",
		       (double)len / t_stream, (double)len / t_sha);
		sigv4_stream_free(s);
		buf_free(out);
		free(body);
		free(data);
	}
	free(authz);
	buf_free_secure(c.id);
	buf_free_secure(c.secret);
	buf_free_secure(c.token);
	return 0;
}

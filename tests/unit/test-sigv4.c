/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * proxy/sigv4: the published AWS SigV4 test suite (tests/data/sigv4/suite), the S3
 * documentation's header-signed, presigned and aws-chunked examples, re-signing round trips
 * (signed with a placeholder secret, re-signed, checked with the real one), and refusals.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/sigv4.h"
#include "secrets/secrets.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/host.h"

/* The test suite's credentials (docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite). */
#define SUITE_KEY_ID "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
/* The S3 API reference's (sig-v4-header-based-auth, sigv4-query-string-auth, sigv4-streaming). */
#define S3_KEY_ID "AKIAIOSFODNN7EXAMPLE"
#define S3_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
/* What the host holds behind the placeholders in the round trips. */
#define REAL_KEY_ID "AKIAREALREALREAL7777"
#define REAL_SECRET "realrealSecretKeyWhichTheGuestNeverSees0"
#define REAL_TOKEN "FwoGZXIvYXdzEREALTOKEN//+/=="
#define PLACEHOLDER_TOKEN "slateTokenPlaceholder000000000000000000"

/* ---- a request read from a .req file ---- */

struct test_req {
	char *text;
	char *method;
	char *target;
	struct sigv4_header headers[32];
	size_t n_headers;
	const char *body;
	size_t body_len;
	bool folded; /* had an obs-fold continuation line */
	char *folded_values[8];
	size_t n_folded;
};

static void test_req_free(struct test_req *r)
{
	for (size_t i = 0; i < r->n_folded; i++)
		free(r->folded_values[i]);
	free(r->text);
	memset(r, 0, sizeof(*r));
}

/* "METHOD TARGET HTTP/1.1\nName:value\n...\n\nbody" (the target may hold spaces: get-space). */
static void test_req_parse(const char *text, struct test_req *r)
{
	char *line, *next, *sp;

	memset(r, 0, sizeof(*r));
	r->text = strdup(text);
	assert_non_null(r->text);
	line = r->text;
	next = strchr(line, '\n');
	if (next)
		*next++ = 0;
	sp = strchr(line, ' ');
	assert_non_null(sp);
	*sp = 0;
	r->method = line;
	r->target = sp + 1;
	sp = strrchr(r->target, ' ');
	assert_non_null(sp);
	*sp = 0;
	while (next && *next) {
		line = next;
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		if (*line == 0) {
			r->body = next ? next : "";
			r->body_len = strlen(r->body);
			return;
		}
		if (*line == ' ' || *line == '\t') {
			/* obs-fold: keep it as the proxy never would, to see it refused */
			struct sigv4_header *h = &r->headers[r->n_headers - 1];
			char *v;
			assert_true(r->n_folded < ELEMENTSOF(r->folded_values));
			assert_true(asprintf(&v, "%s\n%s", h->value, line) > 0);
			h->value = r->folded_values[r->n_folded++] = v;
			r->folded = true;
			continue;
		}
		sp = strchr(line, ':');
		assert_non_null(sp);
		*sp = 0;
		assert_true(r->n_headers < ELEMENTSOF(r->headers));
		r->headers[r->n_headers++] = (struct sigv4_header){line, sp + 1};
	}
	r->body = "";
}

static struct sigv4_request test_req_request(const struct test_req *r)
{
	return (struct sigv4_request){.method = r->method,
	                              .target = r->target,
	                              .headers = r->headers,
	                              .n_headers = r->n_headers};
}

static const char *test_req_header(const struct test_req *r, const char *name)
{
	for (size_t i = 0; i < r->n_headers; i++)
		if (strcasecmp(r->headers[i].name, name) == 0)
			return r->headers[i].value;
	return NULL;
}

static char *read_text(const char *dir, const char *name, const char *ext)
{
	char path[4096];
	struct buf *b = NULL;
	char *s;
	int r;

	snprintf(path, sizeof(path), "%s/%s.%s", dir, name, ext);
	r = fs_read_file_at(AT_FDCWD, path, 1 << 20, &b);
	if (r == -ENOENT)
		return NULL;
	assert_int_equal(r, 0);
	s = buf_dup_string(b);
	buf_free(b);
	assert_non_null(s);
	return s;
}

/* ---- lookups ---- */

struct creds {
	const char *placeholder_id;
	const char *placeholder_secret; /* NULL: no check of the guest's signature */
	const char *placeholder_token;
	struct buf *id, *secret, *token;
	int lookups;
};

static struct buf *secure_buf(const char *s)
{
	struct buf *b = buf_new(strlen(s));
	assert_non_null(b);
	assert_int_equal(buf_put(b, s, strlen(s)), 0);
	return b;
}

static void creds_init(struct creds *c, const char *placeholder_id, const char *placeholder_secret,
                       const char *placeholder_token, const char *real_token)
{
	*c = (struct creds){.placeholder_id = placeholder_id,
	                    .placeholder_secret = placeholder_secret,
	                    .placeholder_token = placeholder_token};
	c->id = secure_buf(REAL_KEY_ID);
	c->secret = secure_buf(REAL_SECRET);
	c->token = real_token ? secure_buf(real_token) : NULL;
}

static void creds_done(struct creds *c)
{
	buf_free_secure(c->id);
	buf_free_secure(c->secret);
	buf_free_secure(c->token);
}

static int lookup(void *userdata, const char *key_id, struct sigv4_credentials *ret)
{
	struct creds *c = userdata;

	c->lookups++;
	if (strcmp(key_id, c->placeholder_id) != 0)
		return -ENOENT;
	*ret = (struct sigv4_credentials){.access_key_id = c->id,
	                                  .secret_access_key = c->secret,
	                                  .session_token = c->token,
	                                  .placeholder_secret_access_key = c->placeholder_secret,
	                                  .placeholder_session_token = c->placeholder_token};
	return 0;
}

/* The signature an Authorization value carries. */
static const char *authz_signature(const char *authz)
{
	const char *p = strstr(authz, "Signature=");
	assert_non_null(p);
	return p + strlen("Signature=");
}

/* Checks a re-signed header request independently: the request as forwarded (Authorization and
 * token swapped) signed with the real secret by sigv4_sign_header gives the same value. */
static void check_resigned_header(const struct sigv4_request *req, const struct sigv4_resigned *res,
                                  const char *payload_hash, const char *region, const char *service)
{
	struct sigv4_header fwd[40];
	struct sigv4_request freq = *req;
	struct sigv4_auth a;
	char *expect = NULL, timestamp[17] = "";
	char *token = NULL;
	size_t n = 0;

	assert_int_equal(res->kind, SIGV4_AUTH_HEADER);
	assert_non_null(res->authorization);
	assert_int_equal(
	        sigv4_parse_authorization(res->authorization, strlen(res->authorization), &a), 0);
	assert_string_equal(a.key_id, REAL_KEY_ID);
	if (res->security_token) {
		token = strndup((const char *)buf_ptr(res->security_token),
		                buf_len(res->security_token));
		assert_non_null(token);
	}
	for (size_t i = 0; i < req->n_headers; i++) {
		if (strcasecmp(req->headers[i].name, "authorization") == 0)
			continue;
		fwd[n] = req->headers[i];
		if (strcasecmp(fwd[n].name, "x-amz-security-token") == 0) {
			assert_non_null(token);
			fwd[n].value = token;
		}
		if (strcasecmp(fwd[n].name, "x-amz-date") == 0)
			snprintf(timestamp, sizeof(timestamp), "%s", fwd[n].value);
		n++;
	}
	if (res->security_token_add)
		fwd[n++] = (struct sigv4_header){"X-Amz-Security-Token", token};
	freq.headers = fwd;
	freq.n_headers = n;
	struct sigv4_sign_input in = {.key_id = REAL_KEY_ID,
	                              .secret = REAL_SECRET,
	                              .secret_len = strlen(REAL_SECRET),
	                              .timestamp = timestamp,
	                              .region = region,
	                              .service = service,
	                              .signed_headers = a.signed_headers,
	                              .payload_hash = payload_hash};
	assert_int_equal(sigv4_sign_header(&freq, &in, &expect), 0);
	assert_string_equal(res->authorization, expect);
	free(expect);
	free(token);
}

/* ---- the AWS SigV4 test suite ---- */

static void run_vector(const char *dir, const char *name, bool s3)
{
	_cleanup_buf_ struct buf *creq = buf_new(1 << 20);
	_cleanup_buf_ struct buf *sts = buf_new(1 << 20);
	char *req_text = read_text(dir, name, "req");
	char *creq_text = read_text(dir, name, "creq");
	char *sts_text = read_text(dir, name, "sts");
	char *authz_text = read_text(dir, name, "authz");
	const char *secret = s3 ? S3_SECRET : SUITE_SECRET;
	const char *key_id = s3 ? S3_KEY_ID : SUITE_KEY_ID;
	const char *service = s3 ? "s3" : "service";
	char body_hash[65], sig[65], scope[256];
	const char *payload, *timestamp;
	struct test_req tr;
	struct sigv4_request req;
	struct sigv4_auth a;
	uint8_t key[32];
	char *authz = NULL;

	print_message("  %s\n", name);
	assert_non_null(req_text);
	assert_non_null(creq_text);
	assert_non_null(authz_text);
	assert_non_null(creq);
	assert_non_null(sts);
	test_req_parse(req_text, &tr);
	req = test_req_request(&tr);
	assert_int_equal(sigv4_parse_authorization(authz_text, strlen(authz_text), &a), 0);
	assert_int_equal(sigv4_sha256_hex(tr.body, tr.body_len, body_hash), 0);
	payload = test_req_header(&tr, "x-amz-content-sha256");
	if (!payload)
		payload = body_hash;
	struct sigv4_canon c = {
	        .s3 = s3, .signed_headers = a.signed_headers, .payload_hash = payload};

	if (tr.folded) {
		/* get-header-value-multiline: obs-fold is refused by the proxy (proxy/http.h) and
		 * by the signer, never canonicalised. */
		assert_int_equal(sigv4_canonical_request(&req, &c, creq), SLATE_ERR_INVALID_FORMAT);
		goto out;
	}
	assert_int_equal(sigv4_canonical_request(&req, &c, creq), 0);
	assert_int_equal(buf_len(creq), strlen(creq_text));
	assert_memory_equal(buf_ptr(creq), creq_text, strlen(creq_text));

	timestamp = test_req_header(&tr, "x-amz-date");
	assert_non_null(timestamp);
	snprintf(scope, sizeof(scope), "%s/%s/%s/aws4_request", a.date, a.region, a.service);
	assert_int_equal(sigv4_string_to_sign(timestamp, scope, buf_ptr(creq), buf_len(creq), sts),
	                 0);
	if (sts_text) {
		assert_int_equal(buf_len(sts), strlen(sts_text));
		assert_memory_equal(buf_ptr(sts), sts_text, strlen(sts_text));
	}
	assert_int_equal(
	        sigv4_signing_key(secret, strlen(secret), a.date, a.region, a.service, key), 0);
	assert_int_equal(sigv4_sign_hex(key, buf_ptr(sts), buf_len(sts), sig), 0);
	assert_string_equal(sig, a.signature);

	/* The same through the client-side signer: the whole Authorization value. */
	struct sigv4_sign_input in = {.key_id = key_id,
	                              .secret = secret,
	                              .secret_len = strlen(secret),
	                              .timestamp = timestamp,
	                              .region = a.region,
	                              .service = service,
	                              .signed_headers = a.signed_headers,
	                              .payload_hash = payload};
	assert_int_equal(sigv4_sign_header(&req, &in, &authz), 0);
	assert_string_equal(authz, authz_text);
	free(authz);

	/* And re-signed: the vector's key is the placeholder, its signature verified with the
	 * vector's secret, the result checked with the real one. */
	{
		struct sigv4_header h[40];
		struct sigv4_request rq = req;
		struct sigv4_resigned *res = NULL;
		struct creds cr;
		const char *tok = test_req_header(&tr, "x-amz-security-token");

		creds_init(&cr, key_id, secret, tok, tok ? REAL_TOKEN : NULL);
		memcpy(h, tr.headers, tr.n_headers * sizeof(h[0]));
		h[tr.n_headers] = (struct sigv4_header){"Authorization", authz_text};
		rq.headers = h;
		rq.n_headers = tr.n_headers + 1;
		if (!test_req_header(&tr, "x-amz-content-sha256")) {
			assert_true(sigv4_request_needs_body_hash(&rq));
			assert_int_equal(sigv4_resign(&rq, lookup, &cr, &res),
			                 SIGV4_ERR_NEED_BODY_HASH);
			rq.body_sha256 = body_hash;
		}
		assert_int_equal(sigv4_resign(&rq, lookup, &cr, &res), SIGV4_AUTH_HEADER);
		assert_non_null(res);
		assert_null(res->stream);
		assert_string_equal(res->service, service);
		assert_string_equal(res->key_id_masked, "AKIA...7777");
		assert_string_not_equal(authz_signature(res->authorization), a.signature);
		check_resigned_header(&rq, res, payload, a.region, service);
		sigv4_resigned_free(res);
		creds_done(&cr);
	}
out:
	test_req_free(&tr);
	free(req_text);
	free(creq_text);
	free(sts_text);
	free(authz_text);
}

static void run_dir(const char *sub, bool s3)
{
	char dir[4096];
	struct dirent **names = NULL;
	int n;

	snprintf(dir, sizeof(dir), "%s/sigv4/%s", TEST_DATA_DIR, sub);
	n = scandir(dir, &names, NULL, alphasort);
	assert_true(n > 2);
	for (int i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			char casedir[8192];
			snprintf(casedir, sizeof(casedir), "%s/%s", dir, names[i]->d_name);
			run_vector(casedir, names[i]->d_name, s3);
		}
		free(names[i]);
	}
	free(names);
}

static void test_aws_suite(void **state)
{
	run_dir("suite", false);
}

static void test_s3_examples(void **state)
{
	run_dir("s3", true);
}

/* ---- presigned ---- */

#define S3_PRESIGNED                                                                               \
	"/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%"        \
	"2F20130524"                                                                               \
	"%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400"         \
	"&X-Amz-SignedHeaders=host&X-Amz-Signature="                                               \
	"aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"

/* The query's X-Amz-Signature, recomputed over target with secret. */
static void presigned_signature(const char *target, const char *host, const char *secret,
                                const char *payload, char sig[65], char ret_creq_hash[65])
{
	_cleanup_buf_ struct buf *creq = buf_new(1 << 16);
	_cleanup_buf_ struct buf *sts = buf_new(1 << 16);
	struct sigv4_header h[] = {{"Host", host}};
	struct sigv4_request req = {
	        .method = "GET", .target = target, .headers = h, .n_headers = 1};
	const char *q = strchr(target, '?');
	struct sigv4_auth a;
	char scope[256];
	uint8_t key[32];

	assert_int_equal(sigv4_parse_query(q + 1, strlen(q + 1), &a), SIGV4_AUTH_QUERY);
	struct sigv4_canon c = {.s3 = true,
	                        .presigned = true,
	                        .signed_headers = a.signed_headers,
	                        .payload_hash = payload};
	assert_int_equal(sigv4_canonical_request(&req, &c, creq), 0);
	if (ret_creq_hash)
		assert_int_equal(sigv4_sha256_hex(buf_ptr(creq), buf_len(creq), ret_creq_hash), 0);
	snprintf(scope, sizeof(scope), "%s/%s/%s/aws4_request", a.date, a.region, a.service);
	assert_int_equal(
	        sigv4_string_to_sign(a.timestamp, scope, buf_ptr(creq), buf_len(creq), sts), 0);
	assert_int_equal(
	        sigv4_signing_key(secret, strlen(secret), a.date, a.region, a.service, key), 0);
	assert_int_equal(sigv4_sign_hex(key, buf_ptr(sts), buf_len(sts), sig), 0);
}

static void test_presigned_example(void **state)
{
	struct sigv4_auth a;
	char sig[65], hash[65];
	const char *q = strchr(S3_PRESIGNED, '?') + 1;

	assert_int_equal(sigv4_parse_query(q, strlen(q), &a), SIGV4_AUTH_QUERY);
	assert_string_equal(a.key_id, S3_KEY_ID);
	assert_string_equal(a.date, "20130524");
	assert_string_equal(a.region, "us-east-1");
	assert_string_equal(a.service, "s3");
	assert_string_equal(a.timestamp, "20130524T000000Z");
	assert_int_equal(a.expires, 86400);
	assert_string_equal(a.signed_headers, "host");
	assert_false(a.has_security_token);
	presigned_signature(S3_PRESIGNED, "examplebucket.s3.amazonaws.com", S3_SECRET,
	                    SIGV4_UNSIGNED_PAYLOAD, sig, hash);
	assert_string_equal(hash,
	                    "3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04");
	assert_string_equal(sig,
	                    "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
}

static void test_presigned_resign(void **state)
{
	struct sigv4_header h[] = {{"Host", "examplebucket.s3.amazonaws.com"}, {"Accept", "*/*"}};
	struct sigv4_request req = {
	        .method = "GET", .target = S3_PRESIGNED, .headers = h, .n_headers = 2};
	struct sigv4_resigned *res = NULL;
	struct sigv4_auth a;
	struct creds cr;
	char sig[65];

	/* The documented URL is the guest's (placeholder key = the doc's key). */
	creds_init(&cr, S3_KEY_ID, S3_SECRET, NULL, NULL);
	assert_int_equal(sigv4_detect(&req), SIGV4_AUTH_QUERY);
	assert_false(sigv4_request_needs_body_hash(&req));
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_QUERY);
	assert_non_null(res->target);
	assert_null(res->authorization);
	{
		static const char prefix[] =
		        "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" REAL_KEY_ID
		        "%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z"
		        "&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=";
		assert_int_equal(strlen(res->target), strlen(prefix) + 64);
		assert_memory_equal(res->target, prefix, strlen(prefix));
	}
	const char *q = strchr(res->target, '?') + 1;
	assert_int_equal(sigv4_parse_query(q, strlen(q), &a), SIGV4_AUTH_QUERY);
	assert_string_equal(a.key_id, REAL_KEY_ID);
	presigned_signature(res->target, "examplebucket.s3.amazonaws.com", REAL_SECRET,
	                    SIGV4_UNSIGNED_PAYLOAD, sig, NULL);
	assert_string_equal(a.signature, sig);
	/* Not valid under the placeholder secret any more. */
	presigned_signature(res->target, "examplebucket.s3.amazonaws.com", S3_SECRET,
	                    SIGV4_UNSIGNED_PAYLOAD, sig, NULL);
	assert_string_not_equal(a.signature, sig);
	sigv4_resigned_free(res);

	/* A session token in a header as well as (or instead of) the query: refused. */
	h[1] = (struct sigv4_header){"X-Amz-Security-Token", "slateX"};
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	h[1] = (struct sigv4_header){"Accept", "*/*"};

	/* A guest URL edited after presigning is refused (its signature no longer verifies). */
	req.target =
	        "/other.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
	        "AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date="
	        "20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
	        "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_GUEST_SIGNATURE);
	assert_null(res);
	creds_done(&cr);
}

/* Presigned with a session token (placeholder in, real out) and the non-S3 payload line. */
static void test_presigned_token(void **state)
{
	_cleanup_buf_ struct buf *creq = buf_new(1 << 16), *sts = buf_new(1 << 16);
	char target[2048], sig[65], scope[] = "20150830/us-east-1/sts/aws4_request";
	struct sigv4_header h[] = {{"Host", "sts.amazonaws.com"}};
	struct sigv4_request req = {
	        .method = "GET", .target = target, .headers = h, .n_headers = 1};
	struct sigv4_resigned *res = NULL;
	struct sigv4_auth a;
	struct creds cr;
	uint8_t key[32];
	const char *base =
	        "/?Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm=AWS4-HMAC-SHA256"
	        "&X-Amz-Credential=AKIASLATEPLACEHOLDER%2F20150830%2Fus-east-1%2Fsts%2Faws4_request"
	        "&X-Amz-Date=20150830T123600Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
	        "&X-Amz-Security-Token=" PLACEHOLDER_TOKEN;

	/* The guest presigns as aws-sdk-go does outside S3: the empty body's hash. */
	snprintf(target, sizeof(target), "%s&X-Amz-Signature=%064d", base, 0);
	struct sigv4_canon c = {
	        .presigned = true, .signed_headers = "host", .payload_hash = SIGV4_EMPTY_SHA256};
	assert_int_equal(sigv4_canonical_request(&req, &c, creq), 0);
	assert_int_equal(
	        sigv4_string_to_sign("20150830T123600Z", scope, buf_ptr(creq), buf_len(creq), sts),
	        0);
	assert_int_equal(sigv4_signing_key(SUITE_SECRET, strlen(SUITE_SECRET), "20150830",
	                                   "us-east-1", "sts", key),
	                 0);
	assert_int_equal(sigv4_sign_hex(key, buf_ptr(sts), buf_len(sts), sig), 0);
	snprintf(target, sizeof(target), "%s&X-Amz-Signature=%s", base, sig);

	creds_init(&cr, "AKIASLATEPLACEHOLDER", SUITE_SECRET, PLACEHOLDER_TOKEN, REAL_TOKEN);
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_QUERY);
	assert_non_null(strstr(res->target,
	                       "X-Amz-Security-Token=FwoGZXIvYXdzEREALTOKEN%2F%2F%2B%2F%3D%3D"));
	assert_null(strstr(res->target, PLACEHOLDER_TOKEN));
	assert_non_null(strstr(res->target, "Action=GetCallerIdentity&Version=2011-06-15&"));
	const char *q = strchr(res->target, '?') + 1;
	assert_int_equal(sigv4_parse_query(q, strlen(q), &a), SIGV4_AUTH_QUERY);
	assert_true(a.has_security_token);
	assert_string_equal(a.key_id, REAL_KEY_ID);
	/* Signed over the empty body's hash, the variant the guest used. */
	(void)buf_reset(creq);
	(void)buf_reset(sts);
	req.target = res->target;
	assert_int_equal(sigv4_canonical_request(&req, &c, creq), 0);
	assert_int_equal(
	        sigv4_string_to_sign("20150830T123600Z", scope, buf_ptr(creq), buf_len(creq), sts),
	        0);
	assert_int_equal(sigv4_signing_key(REAL_SECRET, strlen(REAL_SECRET), "20150830",
	                                   "us-east-1", "sts", key),
	                 0);
	assert_int_equal(sigv4_sign_hex(key, buf_ptr(sts), buf_len(sts), sig), 0);
	assert_string_equal(a.signature, sig);
	sigv4_resigned_free(res);

	/* Another token than the placeholder: refused. */
	req.target = target;
	cr.placeholder_token = "slateSomeOtherToken";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_TOKEN_MISMATCH);
	creds_done(&cr);
}

/* ---- header re-signing ---- */

static void test_resign_header_token(void **state)
{
	struct sigv4_header h[8] = {
	        {"Host", "examplebucket.s3.amazonaws.com"},
	        {"x-amz-content-sha256", SIGV4_EMPTY_SHA256},
	        {"x-amz-date", "20130524T000000Z"},
	        {"X-Amz-Security-Token", PLACEHOLDER_TOKEN},
	        {"User-Agent", "aws-cli/2.9.19"},
	};
	struct sigv4_request req = {
	        .method = "GET", .target = "/test.txt", .headers = h, .n_headers = 5};
	struct sigv4_resigned *res = NULL;
	struct sigv4_sign_input in = {.key_id = "AKIASLATEPLACEHOLDER",
	                              .secret = S3_SECRET,
	                              .secret_len = strlen(S3_SECRET),
	                              .timestamp = "20130524T000000Z",
	                              .region = "us-east-1",
	                              .service = "s3",
	                              .signed_headers = "host;x-amz-content-sha256;x-amz-date;"
	                                                "x-amz-security-token",
	                              .payload_hash = SIGV4_EMPTY_SHA256};
	struct creds cr;
	char *guest = NULL;

	assert_int_equal(sigv4_sign_header(&req, &in, &guest), 0);
	h[5] = (struct sigv4_header){"Authorization", guest};
	req.n_headers = 6;
	creds_init(&cr, "AKIASLATEPLACEHOLDER", S3_SECRET, PLACEHOLDER_TOKEN, REAL_TOKEN);
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_HEADER);
	assert_non_null(res->security_token);
	assert_false(res->security_token_add);
	assert_int_equal(buf_len(res->security_token), strlen(REAL_TOKEN));
	assert_memory_equal(buf_ptr(res->security_token), REAL_TOKEN, strlen(REAL_TOKEN));
	assert_non_null(strstr(res->authorization, "Credential=" REAL_KEY_ID "/20130524/"));
	assert_string_equal(res->payload, "sha256");
	check_resigned_header(&req, res, SIGV4_EMPTY_SHA256, "us-east-1", "s3");
	sigv4_resigned_free(res);

	/* Without the placeholder secret the guest's signature is not checked, and the result is
	 * the same. */
	cr.placeholder_secret = NULL;
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_HEADER);
	check_resigned_header(&req, res, SIGV4_EMPTY_SHA256, "us-east-1", "s3");
	sigv4_resigned_free(res);
	cr.placeholder_secret = S3_SECRET;

	/* The token header missing while the credentials have one: added, and signed. */
	h[3] = (struct sigv4_header){"X-Other", "1"};
	in.signed_headers = "host;x-amz-content-sha256;x-amz-date";
	free(guest);
	req.n_headers = 5;
	assert_int_equal(sigv4_sign_header(&req, &in, &guest), 0);
	h[5].value = guest;
	req.n_headers = 6;
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_HEADER);
	assert_true(res->security_token_add);
	assert_non_null(
	        strstr(res->authorization,
	               "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"));
	check_resigned_header(&req, res, SIGV4_EMPTY_SHA256, "us-east-1", "s3");
	sigv4_resigned_free(res);

	/* A token that is not the placeholder, or one where the credentials have none. */
	h[3] = (struct sigv4_header){"X-Amz-Security-Token", "someRealTokenOfTheGuest"};
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_TOKEN_MISMATCH);
	creds_done(&cr);
	creds_init(&cr, "AKIASLATEPLACEHOLDER", S3_SECRET, NULL, NULL);
	h[3].value = PLACEHOLDER_TOKEN;
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_TOKEN_MISMATCH);
	creds_done(&cr);
	free(guest);
}

static void test_resign_refusals(void **state)
{
	struct sigv4_header h[8] = {
	        {"Host", "example.amazonaws.com"},
	        {"X-Amz-Date", "20150830T123600Z"},
	        {"Authorization", ""},
	};
	struct sigv4_request req = {.method = "GET", .target = "/", .headers = h, .n_headers = 3};
	struct sigv4_resigned *res = (struct sigv4_resigned *)1;
	struct creds cr;
	const char *good =
	        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
	        "aws4_request, SignedHeaders=host;x-amz-date, "
	        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";

	creds_init(&cr, SUITE_KEY_ID, SUITE_SECRET, NULL, NULL);
	req.body_sha256 = SIGV4_EMPTY_SHA256;

	/* Not AWS at all: nothing to do. */
	h[2].value = "Bearer abc";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_NONE);
	assert_null(res);
	req.n_headers = 2;
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_NONE);
	req.n_headers = 3;

	/* What cannot be re-signed. */
	h[2].value = "AWS4-ECDSA-P256-SHA256 Credential=AKIDEXAMPLE/20150830/service/aws4_request, "
	             "SignedHeaders=host;x-amz-date;x-amz-region-set, Signature=3045022100";
	assert_int_equal(sigv4_detect(&req), SIGV4_ERR_UNSUPPORTED);
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_UNSUPPORTED);
	h[2].value = "AWS AKIDEXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_UNSUPPORTED);
	h[2].value = "AWS4-HMAC-SHA512 Credential=x";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_UNSUPPORTED);
	h[2].value = good;
	req.target = "/?X-Amz-Algorithm=AWS4-ECDSA-P256-SHA256&X-Amz-Credential=a";
	h[2].value = "x";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_UNSUPPORTED);
	req.target = "/?AWSAccessKeyId=AKIDEXAMPLE&Expires=1&Signature=abc";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_UNSUPPORTED);
	req.target = "/";
	h[2].value = good;
	h[3] = (struct sigv4_header){"x-amz-content-sha256",
	                             "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD"};
	req.n_headers = 4;
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_UNSUPPORTED);
	h[3].value = "not-a-hash";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	req.n_headers = 3;

	/* The suite's get-vanilla goes through... */
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_HEADER);
	sigv4_resigned_free(res);
	/* ...but not with another key id, */
	cr.placeholder_id = "AKIDOTHER";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_UNKNOWN_KEY);
	cr.placeholder_id = SUITE_KEY_ID;
	/* nor changed after signing (path, header, method), */
	req.target = "/admin";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_GUEST_SIGNATURE);
	req.target = "/";
	h[0].value = "evil.amazonaws.com";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_GUEST_SIGNATURE);
	h[0].value = "example.amazonaws.com";
	req.method = "DELETE";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_GUEST_SIGNATURE);
	req.method = "GET";
	/* nor ambiguous: two Authorization, two X-Amz-Date, two Host, header and query, */
	h[3] = h[2];
	req.n_headers = 4;
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	h[3] = h[1];
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	h[3] = h[0];
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	req.n_headers = 3;
	req.target = S3_PRESIGNED;
	assert_int_equal(sigv4_detect(&req), SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	req.target = "/?X-Amz-Signature=abc";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	req.target = "/?x-amz-algorithm=AWS4-HMAC-SHA256";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	req.target = "/";
	/* nor without X-Amz-Date, or with a date outside the scope's day, */
	h[1].name = "Date";
	h[1].value = "Sun, 30 Aug 2015 12:36:00 GMT";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_ERR_UNSUPPORTED);
	h[1] = (struct sigv4_header){"X-Amz-Date", "20150831T123600Z"};
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	h[1].value = "20150830T123600Z";
	/* nor with a signed header that is not sent, or Authorization signed. */
	h[2].value = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
	             "aws4_request, SignedHeaders=host;x-amz-date;x-missing, "
	             "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	h[2].value = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
	             "aws4_request, SignedHeaders=authorization;host;x-amz-date, "
	             "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	/* Header values with CR/LF never reach a canonical request. */
	h[2].value = good;
	h[0].value = "example.amazonaws.com\r\nX-Evil: 1";
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SLATE_ERR_INVALID_FORMAT);
	h[0].value = "example.amazonaws.com";
	/* A lookup failing otherwise passes its error on. */
	creds_done(&cr);
	assert_null(res);
	assert_true(strstr(sigv4_strerror(SIGV4_ERR_UNSUPPORTED), "cannot re-sign") != NULL);
	assert_string_equal(sigv4_strerror(SLATE_ERR_INVALID_FORMAT),
	                    slate_strerror(SLATE_ERR_INVALID_FORMAT));
}

/* ---- parsing tables ---- */

static const struct authz_case {
	const char *name;
	const char *v;
	int expect;
} authz_cases[] = {
        {"plain",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, "
         "SignedHeaders=host;x-amz-date, Signature=" /**/
         "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         0},
        {"no spaces, other order",
         "AWS4-HMAC-SHA256 "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31,"
         "Credential=AKID/20150830/us-east-1/s3/aws4_request,SignedHeaders=host",
         0},
        {"missing signature",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, SignedHeaders=host",
         SLATE_ERR_INVALID_FORMAT},
        {"repeated part",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, SignedHeaders=host, "
         "SignedHeaders=host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"unknown part",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, SignedHeaders=host, "
         "Foo=1, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"four-part credential",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/aws4_request, SignedHeaders=host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"six-part credential",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request/x, "
         "SignedHeaders=host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"bad date",
         "AWS4-HMAC-SHA256 Credential=AKID/20151330/us-east-1/s3/aws4_request, SignedHeaders=host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"bad terminator",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws5_request, SignedHeaders=host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"slash in key id",
         "AWS4-HMAC-SHA256 Credential=AK+D/20150830/us-east-1/s3/aws4_request, SignedHeaders=host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"upper-case signed header",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, SignedHeaders=Host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"unsorted signed headers",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, "
         "SignedHeaders=x-amz-date;host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"repeated signed header",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, "
         "SignedHeaders=host;host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"empty signed header",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, "
         "SignedHeaders=host;;x, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"short signature",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, SignedHeaders=host, "
         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf3",
         SLATE_ERR_INVALID_FORMAT},
        {"upper-case signature",
         "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request, SignedHeaders=host, "
         "Signature=5FA00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
         SLATE_ERR_INVALID_FORMAT},
        {"sigv4a", "AWS4-ECDSA-P256-SHA256 Credential=AKID/20150830/s3/aws4_request",
         SIGV4_ERR_UNSUPPORTED},
        {"sigv2", "AWS AKID:c2lnbmF0dXJl", SIGV4_ERR_UNSUPPORTED},
        {"bearer", "Bearer xyz", SLATE_ERR_INVALID_FORMAT},
        {"no space after algorithm", "AWS4-HMAC-SHA256", SIGV4_ERR_UNSUPPORTED},
};

static void test_parse_authorization(void **state)
{
	char big[SIGV4_MAX_AUTHORIZATION + 2];

	for (size_t i = 0; i < ELEMENTSOF(authz_cases); i++) {
		struct sigv4_auth a;
		print_message("  %s\n", authz_cases[i].name);
		assert_int_equal(
		        sigv4_parse_authorization(authz_cases[i].v, strlen(authz_cases[i].v), &a),
		        authz_cases[i].expect);
		if (authz_cases[i].expect == 0) {
			assert_string_equal(a.key_id, "AKID");
			assert_string_equal(a.service, "s3");
			assert_int_equal(a.kind, SIGV4_AUTH_HEADER);
		}
	}
	memset(big, 'a', sizeof(big));
	memcpy(big, "AWS4-HMAC-SHA256 ", 17);
	assert_int_equal(sigv4_parse_authorization(big, sizeof(big), &(struct sigv4_auth){0}),
	                 SLATE_ERR_TOO_LARGE);
}

static const struct query_case {
	const char *name;
	const char *q;
	int expect;
} query_cases[] = {
        {"none", "a=1&b=2", SIGV4_AUTH_NONE},
        {"empty", "", SIGV4_AUTH_NONE},
        {"example", strchr(S3_PRESIGNED, '?') + 1, SIGV4_AUTH_QUERY},
        {"no expires",
         "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fr%2Fs3%2Faws4_request"
         "&X-Amz-Date=20130524T000000Z&X-Amz-SignedHeaders=host&X-Amz-Signature="
         "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
         SLATE_ERR_INVALID_FORMAT},
        {"expires too long",
         "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fr%2Fs3%2Faws4_request"
         "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=604801&X-Amz-SignedHeaders=host&X-Amz-"
         "Signature="
         "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
         SLATE_ERR_INVALID_FORMAT},
        {"date of another day",
         "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fr%2Fs3%2Faws4_request"
         "&X-Amz-Date=20130525T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature="
         "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
         SLATE_ERR_INVALID_FORMAT},
        {"repeated signature",
         "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fr%2Fs3%2Faws4_request"
         "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature="
         "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404&X-Amz-Signature="
         "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
         SLATE_ERR_INVALID_FORMAT},
        {"encoded name",
         "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fr%2Fs3%2Faws4_request"
         "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature="
         "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404&X%2DAmz%2DSignature=1",
         SLATE_ERR_INVALID_FORMAT},
        {"bad escape", "X-Amz-Algorithm=AWS4%2", SLATE_ERR_INVALID_FORMAT},
        {"sigv4a", "X-Amz-Algorithm=AWS4-ECDSA-P256-SHA256", SIGV4_ERR_UNSUPPORTED},
        {"sigv2", "AWSAccessKeyId=AKID&Signature=x&Expires=1", SIGV4_ERR_UNSUPPORTED},
        {"credential without algorithm", "X-Amz-Credential=x", SLATE_ERR_INVALID_FORMAT},
        {"token without algorithm", "a=1&X-Amz-Security-Token=slateX", SLATE_ERR_INVALID_FORMAT},
        {"date without algorithm", "X-Amz-Date=20130524T000000Z", SLATE_ERR_INVALID_FORMAT},
};

static void test_parse_query(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(query_cases); i++) {
		struct sigv4_auth a;
		print_message("  %s\n", query_cases[i].name);
		assert_int_equal(sigv4_parse_query(query_cases[i].q, strlen(query_cases[i].q), &a),
		                 query_cases[i].expect);
	}
}

/* Canonical forms on their own: query encoding and sorting, S3 against the others' paths. */
static void test_canonical_forms(void **state)
{
	static const struct {
		const char *target;
		bool s3;
		const char *path, *query;
	} cases[] = {
	        {"/a%20b/c+d?b=2&a=1&a=0", true, "/a%20b/c%2Bd", "a=0&a=1&b=2"},
	        {"/a%20b/c+d?b=2", false, "/a%2520b/c%2Bd", "b=2"},
	        {"/a/./b/../c//d/", false, "/a/c/d/", ""},
	        {"/a/./b/../c//d/", true, "/a/./b/../c//d/", ""},
	        {"/k%7e%2f?x=a%2bb&x=a+b&y", true, "/k~/", "x=a%2Bb&x=a%2Bb&y="},
	        {"/?a-=1&a=2", true, "/", "a=2&a-=1"},
	        {"/?prefix=photos/2006/&delimiter=/", true, "/",
	         "delimiter=%2F&prefix=photos%2F2006%2F"},
	        {"/%E1%88%B4?%e1%88%b4=%41", true, "/%E1%88%B4", "%E1%88%B4=A"},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		_cleanup_buf_ struct buf *b = buf_new(4096);
		struct sigv4_header h[] = {{"Host", "h"}};
		struct sigv4_request req = {
		        .method = "GET", .target = cases[i].target, .headers = h, .n_headers = 1};
		struct sigv4_canon c = {
		        .s3 = cases[i].s3, .signed_headers = "host", .payload_hash = "x"};
		char expect[512];

		snprintf(expect, sizeof(expect), "GET\n%s\n%s\nhost:h\n\nhost\nx", cases[i].path,
		         cases[i].query);
		assert_int_equal(sigv4_canonical_request(&req, &c, b), 0);
		assert_int_equal(buf_len(b), strlen(expect));
		assert_memory_equal(buf_ptr(b), expect, strlen(expect));
	}
	/* Bad escapes and fragments are refused. */
	for (const char *const *t =
	             (const char *const[]){"/a%2", "/a%zz", "/?a=%", "/a#b", "a", NULL};
	     *t; t++) {
		_cleanup_buf_ struct buf *b = buf_new(4096);
		struct sigv4_header h[] = {{"Host", "h"}};
		struct sigv4_request req = {
		        .method = "GET", .target = *t, .headers = h, .n_headers = 1};
		struct sigv4_canon c = {.s3 = true, .signed_headers = "host", .payload_hash = "x"};
		assert_int_equal(sigv4_canonical_request(&req, &c, b), SLATE_ERR_INVALID_FORMAT);
	}
}

/* ---- aws-chunked ---- */

#define STREAM_SCOPE "20130524/us-east-1/s3/aws4_request"
#define STREAM_TS "20130524T000000Z"
static const char *const chunk_sigs[] = {
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
};
static const char *const trailer_sigs[] = {
        "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
        "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
        "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
        "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435",
};

/* The documented body: 65536 and 1024 bytes of 'a', then the empty chunk, signed with sigs
 * (NULL: 64 zeros, as if by another key); with a trailer when trailer_sig is set. */
static struct buf *example_body(const char *const *sigs, const char *trailer_sig, bool blank)
{
	struct buf *b = buf_new(1 << 20);
	static const size_t sizes[] = {65536, 1024, 0};
	char zeros[65];

	memset(zeros, '0', 64);
	zeros[64] = 0;
	assert_non_null(b);
	for (size_t i = 0; i < 3; i++) {
		uint8_t *p;
		assert_int_equal(
		        buf_putf(b, "%zx;chunk-signature=%s\r\n", sizes[i], sigs ? sigs[i] : zeros),
		        0);
		assert_int_equal(buf_reserve(b, sizes[i], &p), 0);
		memset(p, 'a', sizes[i]);
		if (i < 2 || !trailer_sig || blank)
			assert_int_equal(buf_put(b, "\r\n", 2), 0);
	}
	if (trailer_sig)
		assert_int_equal(buf_putf(b,
		                          "x-amz-checksum-crc32c:sOO8/Q==\r\n"
		                          "x-amz-trailer-signature:%s\r\n\r\n",
		                          trailer_sig),
		                 0);
	return b;
}

static void stream_through(const char *seed, bool trailer, const struct buf *in, size_t piece,
                           struct buf *out, int expect_feed, int expect_finish)
{
	struct sigv4_stream *s = NULL;
	uint8_t key[32];
	int r = 0;

	assert_int_equal(
	        sigv4_signing_key(S3_SECRET, strlen(S3_SECRET), "20130524", "us-east-1", "s3", key),
	        0);
	assert_int_equal(sigv4_stream_new(key, STREAM_TS, STREAM_SCOPE, seed, trailer, 66560, &s),
	                 0);
	for (size_t off = 0; off < buf_len(in) && r == 0; off += piece) {
		size_t n = buf_len(in) - off < piece ? buf_len(in) - off : piece;
		r = sigv4_stream_feed(s, buf_ptr(in) + off, n, out);
	}
	assert_int_equal(r, expect_feed);
	if (r == 0)
		assert_int_equal(sigv4_stream_finish(s), expect_finish);
	sigv4_stream_free(s);
}

static void test_stream_example(void **state)
{
	static const size_t pieces[] = {1, 7, 4096, 65536 + 200, 1 << 20};
	_cleanup_buf_ struct buf *guest = example_body(NULL, NULL, true);
	_cleanup_buf_ struct buf *expect = example_body(chunk_sigs, NULL, true);

	/* The documented seed signature from the documented request. */
	{
		struct sigv4_header h[] = {
		        {"Host", "s3.amazonaws.com"},
		        {"x-amz-date", STREAM_TS},
		        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
		        {"x-amz-content-sha256", SIGV4_STREAMING_PAYLOAD},
		        {"Content-Encoding", "aws-chunked"},
		        {"x-amz-decoded-content-length", "66560"},
		        {"Content-Length", "66824"},
		};
		struct sigv4_request req = {.method = "PUT",
		                            .target = "/examplebucket/chunkObject.txt",
		                            .headers = h,
		                            .n_headers = ELEMENTSOF(h)};
		struct sigv4_sign_input in = {.key_id = S3_KEY_ID,
		                              .secret = S3_SECRET,
		                              .secret_len = strlen(S3_SECRET),
		                              .timestamp = STREAM_TS,
		                              .region = "us-east-1",
		                              .service = "s3",
		                              .payload_hash = SIGV4_STREAMING_PAYLOAD};
		char *authz = NULL;
		assert_int_equal(sigv4_sign_header(&req, &in, &authz), 0);
		assert_string_equal(
		        authz,
		        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
		        "aws4_request, SignedHeaders=content-encoding;content-length;host;"
		        "x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;"
		        "x-amz-storage-class, "
		        "Signature="
		        "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9");
		assert_int_equal(buf_len(expect), 66824);
		free(authz);
	}
	for (size_t i = 0; i < ELEMENTSOF(pieces); i++) {
		_cleanup_buf_ struct buf *out = buf_new(BUF_MAX_DEFAULT);
		print_message("  pieces of %zu\n", pieces[i]);
		stream_through("4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
		               false, guest, pieces[i], out, 0, 0);
		assert_int_equal(buf_len(out), buf_len(expect));
		assert_memory_equal(buf_ptr(out), buf_ptr(expect), buf_len(expect));
	}
}

static void test_stream_trailer_example(void **state)
{
	for (int blank = 0; blank < 2; blank++) {
		_cleanup_buf_ struct buf *guest = example_body(
		        NULL, "0000000000000000000000000000000000000000000000000000000000000000",
		        blank);
		_cleanup_buf_ struct buf *expect =
		        example_body(trailer_sigs, trailer_sigs[3], blank);
		_cleanup_buf_ struct buf *out = buf_new(BUF_MAX_DEFAULT);

		stream_through("106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e",
		               true, guest, 3, out, 0, 0);
		assert_int_equal(buf_len(out), buf_len(expect));
		assert_memory_equal(buf_ptr(out), buf_ptr(expect), buf_len(expect));
	}
}

/* tmpl with each '@' replaced by sig. */
static void expand(char *out, size_t max, const char *tmpl, const char *sig)
{
	size_t n = 0;

	for (const char *p = tmpl; *p; p++) {
		const char *add = *p == '@' ? sig : (char[]){*p, 0};
		assert_true(n + strlen(add) < max);
		memcpy(out + n, add, strlen(add));
		n += strlen(add);
	}
	out[n] = 0;
}

static void test_stream_malformed(void **state)
{
	static const char sig[] =
	        "0000000000000000000000000000000000000000000000000000000000000000";
	static const struct {
		const char *name;
		const char *body;
		bool trailer;
		int feed, finish;
	} cases[] = {
	        {"bad size", "zz;chunk-signature=@\r\n", false, SLATE_ERR_INVALID_FORMAT, 0},
	        {"size too long", "000000001;chunk-signature=@\r\n", false,
	         SLATE_ERR_INVALID_FORMAT, 0},
	        {"chunk too large", "1000001;chunk-signature=@\r\n", false, SLATE_ERR_TOO_LARGE, 0},
	        {"no signature", "5\r\nhello\r\n", false, SLATE_ERR_INVALID_FORMAT, 0},
	        {"other extension", "5;foo=bar\r\n", false, SLATE_ERR_INVALID_FORMAT, 0},
	        {"short signature", "5;chunk-signature=abc\r\n", false, SLATE_ERR_INVALID_FORMAT,
	         0},
	        {"bare LF", "5;chunk-signature=@\n", false, SLATE_ERR_INVALID_FORMAT, 0},
	        {"CR without LF", "5;chunk-signature=@\rx", false, SLATE_ERR_INVALID_FORMAT, 0},
	        {"data longer than declared", "5;chunk-signature=@\r\nhelloX\r\n", false,
	         SLATE_ERR_INVALID_FORMAT, 0},
	        {"truncated data", "5;chunk-signature=@\r\nhel", false, 0,
	         SLATE_ERR_MESSAGE_INCOMPLETE},
	        {"no last chunk", "5;chunk-signature=@\r\nhello\r\n", false, 0,
	         SLATE_ERR_MESSAGE_INCOMPLETE},
	        {"bytes after the end", "0;chunk-signature=@\r\n\r\nX", false,
	         SLATE_ERR_INVALID_FORMAT, 0},
	        {"trailer without trailer mode",
	         "0;chunk-signature=@\r\nx-amz-checksum-crc32:AAAA\r\n", false,
	         SLATE_ERR_INVALID_FORMAT, 0},
	        {"trailer without signature",
	         "0;chunk-signature=@\r\nx-amz-checksum-crc32:AAAA\r\n\r\n", true,
	         SLATE_ERR_INVALID_FORMAT, 0},
	        {"trailer signature alone", "0;chunk-signature=@\r\nx-amz-trailer-signature:@\r\n",
	         true, SLATE_ERR_INVALID_FORMAT, 0},
	        {"trailer line without colon", "0;chunk-signature=@\r\nnocolon\r\n", true,
	         SLATE_ERR_INVALID_FORMAT, 0},
	        {"two blank lines", "0;chunk-signature=@\r\n\r\n\r\n", true,
	         SLATE_ERR_INVALID_FORMAT, 0},
	        {"trailer cut short", "0;chunk-signature=@\r\nx-amz-checksum-crc32:AAAA\r\n", true,
	         0, SLATE_ERR_MESSAGE_INCOMPLETE},
	        {"more than the decoded length", "5;chunk-signature=@\r\nhello\r\n", false, 0, 0},
	        {"less than the decoded length", "0;chunk-signature=@\r\n\r\n", false, 0,
	         SLATE_ERR_SIZE_MISMATCH},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		_cleanup_buf_ struct buf *out = buf_new(BUF_MAX_DEFAULT);
		struct sigv4_stream *s = NULL;
		char body[512];
		uint8_t key[32] = {1};
		int r;

		print_message("  %s\n", cases[i].name);
		expand(body, sizeof(body), cases[i].body, sig);
		/* The "decoded length" cases declare 3 bytes. */
		assert_int_equal(sigv4_stream_new(key, STREAM_TS, STREAM_SCOPE, sig,
		                                  cases[i].trailer,
		                                  strstr(cases[i].name, "decoded") ? 3 : -1, &s),
		                 0);
		r = sigv4_stream_feed(s, body, strlen(body), out);
		if (strstr(cases[i].name, "more than the decoded")) {
			assert_int_equal(r, SLATE_ERR_SIZE_MISMATCH);
			sigv4_stream_free(s);
			continue;
		}
		assert_int_equal(r, cases[i].feed);
		if (r == 0)
			assert_int_equal(sigv4_stream_finish(s), cases[i].finish);
		else /* an error sticks */
			assert_int_equal(sigv4_stream_feed(s, "0", 1, out), cases[i].feed);
		sigv4_stream_free(s);
	}

	/* out too small for a chunk: an error, not a partial chunk. */
	{
		_cleanup_buf_ struct buf *out = buf_new(16);
		struct sigv4_stream *s = NULL;
		char body[256];
		uint8_t key[32] = {1};
		expand(body, sizeof(body), "5;chunk-signature=@\r\nhello\r\n", sig);
		assert_int_equal(sigv4_stream_new(key, STREAM_TS, STREAM_SCOPE, sig, false, -1, &s),
		                 0);
		assert_int_equal(sigv4_stream_feed(s, body, strlen(body), out),
		                 SLATE_ERR_NO_BUFFER_SPACE);
		assert_int_equal(buf_len(out), 0);
		sigv4_stream_free(s);
	}
}

/* The whole path: a streaming PUT signed with the placeholder, re-signed, its body passed through
 * the stream sigv4_resign returns, each chunk signature checked against the real key. */
static void test_resign_streaming(void **state)
{
	struct sigv4_header h[] = {
	        {"Host", "s3.amazonaws.com"},
	        {"x-amz-date", STREAM_TS},
	        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
	        {"x-amz-content-sha256", SIGV4_STREAMING_PAYLOAD},
	        {"Content-Encoding", "aws-chunked"},
	        {"x-amz-decoded-content-length", "66560"},
	        {"Content-Length", "66824"},
	        {"Authorization",
	         "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
	         "s3/aws4_request, SignedHeaders=content-encoding;content-length;host;"
	         "x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;"
	         "x-amz-storage-class, Signature="
	         "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"},
	};
	struct sigv4_request req = {.method = "PUT",
	                            .target = "/examplebucket/chunkObject.txt",
	                            .headers = h,
	                            .n_headers = ELEMENTSOF(h)};
	_cleanup_buf_ struct buf *guest = example_body(chunk_sigs, NULL, true);
	_cleanup_buf_ struct buf *out = buf_new(BUF_MAX_DEFAULT);
	struct sigv4_resigned *res = NULL;
	struct creds cr;
	char prev[65], sts[512], sig[65], hash[65];
	uint8_t key[32];
	const uint8_t *p;
	size_t left;

	creds_init(&cr, S3_KEY_ID, S3_SECRET, NULL, NULL);
	assert_int_equal(sigv4_resign(&req, lookup, &cr, &res), SIGV4_AUTH_HEADER);
	assert_non_null(res->stream);
	assert_string_equal(res->payload, SIGV4_STREAMING_PAYLOAD);
	check_resigned_header(&req, res, SIGV4_STREAMING_PAYLOAD, "us-east-1", "s3");
	assert_int_equal(sigv4_stream_feed(res->stream, buf_ptr(guest), buf_len(guest), out), 0);
	assert_int_equal(sigv4_stream_finish(res->stream), 0);
	assert_true(sigv4_stream_done(res->stream));
	assert_int_equal(buf_len(out), buf_len(guest)); /* Content-Length holds */

	/* Walk the output checking each signature, chained from the new seed. */
	assert_int_equal(sigv4_signing_key(REAL_SECRET, strlen(REAL_SECRET), "20130524",
	                                   "us-east-1", "s3", key),
	                 0);
	snprintf(prev, sizeof(prev), "%s", authz_signature(res->authorization));
	p = buf_ptr(out);
	left = buf_len(out);
	for (;;) {
		size_t size = strtoul((const char *)p, NULL, 16);
		const char *s = memchr(p, '=', left);
		assert_non_null(s);
		s++;
		assert_int_equal(sigv4_sha256_hex(s + 64 + 2, size, hash), 0);
		snprintf(sts, sizeof(sts),
		         "AWS4-HMAC-SHA256-PAYLOAD\n" STREAM_TS "\n" STREAM_SCOPE "\n%s\n%s\n%s",
		         prev, SIGV4_EMPTY_SHA256, hash);
		assert_int_equal(sigv4_sign_hex(key, sts, strlen(sts), sig), 0);
		assert_memory_equal(s, sig, 64);
		snprintf(prev, sizeof(prev), "%s", sig);
		left -= (size_t)((const uint8_t *)s + 64 + 2 + size + 2 - p);
		p = (const uint8_t *)s + 64 + 2 + size + 2;
		if (size == 0)
			break;
	}
	assert_int_equal(left, 0);
	sigv4_resigned_free(res);
	creds_done(&cr);
}

/* ---- the secret-set lookup ---- */

/* The rule the proxy passes (host_matches(); the names here are normalised already). */
static bool test_host_bound(const char *bound, const char *host)
{
	return host_matches(host, bound);
}

static void test_lookup_secret_set(void **state)
{
	struct buf *id = secure_buf(REAL_KEY_ID), *secret = secure_buf(REAL_SECRET),
	           *token = secure_buf(REAL_TOKEN);
	char *hosts[] = {(char *)"amazonaws.com"};
	struct secret_value values[] = {
	        {.name = (char *)"access-key-id",
	         .placeholder = (char *)"AKIASLATEAAAAAAAAAAA",
	         .real = id},
	        {.name = (char *)"secret-access-key",
	         .placeholder = (char *)"slateSECRET",
	         .real = secret},
	        {.name = (char *)"session-token",
	         .placeholder = (char *)"slateTOKEN",
	         .real = token},
	};
	struct secret secrets[] = {
	        {.key = (char *)"GH", .kind = SECRET_KIND_GITHUB, .hosts = hosts, .n_hosts = 1},
	        {.key = (char *)"AWS",
	         .kind = SECRET_KIND_AWS,
	         .hosts = hosts,
	         .n_hosts = 1,
	         .values = values,
	         .n_values = 3},
	};
	struct secret_set set = {.v = secrets, .n = 2};
	struct sigv4_secret_lookup l = {&set, "s3.us-east-1.amazonaws.com", test_host_bound};
	struct sigv4_credentials c;

	assert_int_equal(sigv4_lookup_secret_set(&l, "AKIASLATEAAAAAAAAAAA", &c), 0);
	assert_ptr_equal(c.access_key_id, id);
	assert_ptr_equal(c.secret_access_key, secret);
	assert_ptr_equal(c.session_token, token);
	assert_string_equal(c.placeholder_secret_access_key, "slateSECRET");
	assert_string_equal(c.placeholder_session_token, "slateTOKEN");
	assert_int_equal(sigv4_lookup_secret_set(&l, "AKIAOTHER", &c), -ENOENT);
	l.host = "amazonaws.com.evil.example";
	assert_int_equal(sigv4_lookup_secret_set(&l, "AKIASLATEAAAAAAAAAAA", &c), -ENOENT);
	l.host = "notamazonaws.com";
	assert_int_equal(sigv4_lookup_secret_set(&l, "AKIASLATEAAAAAAAAAAA", &c), -ENOENT);
	buf_free_secure(id);
	buf_free_secure(secret);
	buf_free_secure(token);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_aws_suite),
	        cmocka_unit_test(test_s3_examples),
	        cmocka_unit_test(test_presigned_example),
	        cmocka_unit_test(test_presigned_resign),
	        cmocka_unit_test(test_presigned_token),
	        cmocka_unit_test(test_resign_header_token),
	        cmocka_unit_test(test_resign_refusals),
	        cmocka_unit_test(test_parse_authorization),
	        cmocka_unit_test(test_parse_query),
	        cmocka_unit_test(test_canonical_forms),
	        cmocka_unit_test(test_stream_example),
	        cmocka_unit_test(test_stream_trailer_example),
	        cmocka_unit_test(test_stream_malformed),
	        cmocka_unit_test(test_resign_streaming),
	        cmocka_unit_test(test_lookup_secret_set),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

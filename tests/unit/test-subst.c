/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Body and query substitution (proxy/subst.c), and the secret settings that ask for it. */

#include <errno.h>
#include <json-c/json.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/subst.h"
#include "secrets/secrets.h"
#include "secrets/vault.h"
#include "util/buf.h"
#include "util/error.h"

#define PH "slt_slateAAAAbbbbCCCCdddd0123456789xyz"
#define PH2 "slt_slateAAAAbbbbCCCCdddd0123456789xyzLONGER"
/* A real value with every byte that means something in a form, a JSON string or a query. */
#define REAL "r&e=a+l \"v\\a/l%u#e?"

static const struct subst_item items[] = {
        {PH, (const uint8_t *)REAL, sizeof(REAL) - 1, "key"},
        {PH2, (const uint8_t *)"LONG-real", 9, "other"},
};

/* Runs one substitution; returns its result and puts the output, NUL-terminated, in out. */
static int run(int what, const char *in, char *out, size_t outlen, unsigned *counts)
{
	_cleanup_buf_secure_ struct buf *b = buf_new_secure(4096);
	int r;

	assert_non_null(b);
	if (what == 0)
		r = subst_query(in, strlen(in), items, 2, b, counts);
	else
		r = subst_body((enum subst_body_type)what, (const uint8_t *)in, strlen(in), items,
		               2, b, counts);
	assert_true(buf_len(b) < outlen);
	memcpy(out, buf_ptr(b), buf_len(b));
	out[buf_len(b)] = '\0';
	return r;
}

static void test_type(void **state)
{
	(void)state;
	assert_int_equal(subst_body_type("application/x-www-form-urlencoded", NULL),
	                 SUBST_BODY_FORM);
	assert_int_equal(
	        subst_body_type(" Application/X-WWW-Form-Urlencoded ; charset=utf-8", NULL),
	        SUBST_BODY_FORM);
	assert_int_equal(subst_body_type("application/json", NULL), SUBST_BODY_JSON);
	assert_int_equal(subst_body_type("application/json; charset=utf-8", "identity"),
	                 SUBST_BODY_JSON);
	assert_int_equal(subst_body_type("application/vnd.api+json", NULL), SUBST_BODY_JSON);
	/* Other types, none, and encoded bodies: never rewritten. */
	assert_int_equal(subst_body_type("application/json", "gzip"), SUBST_BODY_NONE);
	assert_int_equal(subst_body_type("application/x-www-form-urlencoded", "br"),
	                 SUBST_BODY_NONE);
	assert_int_equal(subst_body_type("text/plain", NULL), SUBST_BODY_NONE);
	assert_int_equal(subst_body_type("multipart/form-data; boundary=x", NULL), SUBST_BODY_NONE);
	assert_int_equal(subst_body_type("application/jsonx", NULL), SUBST_BODY_NONE);
	assert_int_equal(subst_body_type("application/+json", NULL), SUBST_BODY_NONE);
	assert_int_equal(subst_body_type("text/x+json", NULL), SUBST_BODY_NONE);
	assert_int_equal(subst_body_type(NULL, NULL), SUBST_BODY_NONE);
}

static void test_form(void **state)
{
	static const struct {
		const char *in, *out;
		int n;
	} cases[] = {
	        {"a=1&token=" PH "&b=2", "a=1&token=r%26e%3Da%2Bl+%22v%5Ca%2Fl%25u%23e%3F&b=2", 1},
	        {PH, "r%26e%3Da%2Bl+%22v%5Ca%2Fl%25u%23e%3F", 1},
	        /* The longest placeholder at a position wins. */
	        {"x=" PH2, "x=LONG-real", 1},
	        {"x=" PH PH,
	         "x=r%26e%3Da%2Bl+%22v%5Ca%2Fl%25u%23e%3Fr%26e%3Da%2Bl+%22v%5Ca%2Fl%25u%23e%3F", 2},
	        /* Nothing to do. */
	        {"a=1&b=slt_other", "a=1&b=slt_other", 0},
	        {"", "", 0},
	        /* An encoded placeholder is not the placeholder: left alone. */
	        {"a=%73lt_slateAAAAbbbbCCCCdddd0123456789xyz",
	         "a=%73lt_slateAAAAbbbbCCCCdddd0123456789xyz", 0},
	        {"a=%" PH, "a=%r%26e%3Da%2Bl+%22v%5Ca%2Fl%25u%23e%3F", 1},
	};
	char out[4096];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned counts[2] = {0};
		assert_int_equal(run(SUBST_BODY_FORM, cases[i].in, out, sizeof(out), counts),
		                 cases[i].n);
		assert_string_equal(out, cases[i].out);
		assert_int_equal(counts[0] + counts[1], cases[i].n);
	}
}

static void test_json(void **state)
{
	static const struct {
		const char *in, *out;
		int n;
	} cases[] = {
	        {"{\"token\":\"" PH "\"}", "{\"token\":\"r&e=a+l \\\"v\\\\a/l%u#e?\"}", 1},
	        {"{\"auth\":\"Bearer " PH "\",\"n\":1}",
	         "{\"auth\":\"Bearer r&e=a+l \\\"v\\\\a/l%u#e?\",\"n\":1}", 1},
	        /* Outside a string (not JSON anyway): never. */
	        {"{\"a\":" PH "}", "{\"a\":" PH "}", 0},
	        /* Inside an escape, or after one: the escape is skipped whole. */
	        {"[\"\\\"" PH "\"]", "[\"\\\"r&e=a+l \\\"v\\\\a/l%u#e?\"]", 1},
	        {"[\"\\\\\"," PH "]", "[\"\\\\\"," PH "]", 0},
	        {"[\"\\u0041" PH "\"]", "[\"\\u0041r&e=a+l \\\"v\\\\a/l%u#e?\"]", 1},
	        /* A key is a string too. */
	        {"{\"" PH2 "\":0}", "{\"LONG-real\":0}", 1},
	        {"\"unterminated " PH, "\"unterminated r&e=a+l \\\"v\\\\a/l%u#e?", 1},
	};
	char out[4096];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(run(SUBST_BODY_JSON, cases[i].in, out, sizeof(out), NULL),
		                 cases[i].n);
		assert_string_equal(out, cases[i].out);
	}
}

/* What json-c reads back from a substituted JSON body is the real value itself. */
static void test_json_roundtrip(void **state)
{
	char out[4096];
	struct json_object *o, *v;

	(void)state;
	assert_int_equal(run(SUBST_BODY_JSON, "{\"k\":\"" PH "\"}", out, sizeof(out), NULL), 1);
	o = json_tokener_parse(out);
	assert_non_null(o);
	assert_true(json_object_object_get_ex(o, "k", &v));
	assert_string_equal(json_object_get_string(v), REAL);
	json_object_put(o);
}

static void test_query(void **state)
{
	static const struct {
		const char *in, *out;
		int n;
	} cases[] = {
	        {"/v1/x?key=" PH, "/v1/x?key=r%26e%3Da%2Bl%20%22v%5Ca%2Fl%25u%23e%3F", 1},
	        {"/v1/x?a=1&key=" PH "&b=2",
	         "/v1/x?a=1&key=r%26e%3Da%2Bl%20%22v%5Ca%2Fl%25u%23e%3F&b=2", 1},
	        {"/?k%65y=" PH, "/?k%65y=r%26e%3Da%2Bl%20%22v%5Ca%2Fl%25u%23e%3F", 1},
	        {"/?key=%73lt_slateAAAAbbbbCCCCdddd0123456789xyz",
	         "/?key=r%26e%3Da%2Bl%20%22v%5Ca%2Fl%25u%23e%3F", 1},
	        {"/?other=" PH2 "&key=" PH2, "/?other=LONG-real&key=" PH2, 1},
	        /* Anywhere else: never. */
	        {"/" PH "?key=1", "/" PH "?key=1", 0},
	        {"/?token=" PH, "/?token=" PH, 0},
	        {"/?key=x" PH, "/?key=x" PH, 0},
	        {"/?key=" PH "x", "/?key=" PH "x", 0},
	        {"/?" PH "=key", "/?" PH "=key", 0},
	        {"/?key", "/?key", 0},
	        {"/?key=" PH "#key=" PH, "/?key=r%26e%3Da%2Bl%20%22v%5Ca%2Fl%25u%23e%3F#key=" PH,
	         1},
	        {"/path", "/path", 0},
	        {"/?", "/?", 0},
	        {"/?&&key=" PH "&", "/?&&key=r%26e%3Da%2Bl%20%22v%5Ca%2Fl%25u%23e%3F&", 1},
	};
	char out[4096];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(run(0, cases[i].in, out, sizeof(out), NULL), cases[i].n);
		assert_string_equal(out, cases[i].out);
	}
}

/* Placeholders holding a structural byte are never matched; a full buffer is an error. */
static void test_limits(void **state)
{
	static const struct subst_item bad[] = {{"slt_a&bcdefgh", (const uint8_t *)"x", 1, "k"}};
	_cleanup_buf_secure_ struct buf *b = buf_new_secure(8);

	(void)state;
	assert_non_null(b);
	assert_int_equal(
	        subst_body(SUBST_BODY_FORM, (const uint8_t *)"slt_a&bcdefgh", 13, bad, 1, b, NULL),
	        SLATE_ERR_NO_BUFFER_SPACE);
	(void)buf_reset(b);
	assert_int_equal(
	        subst_body(SUBST_BODY_FORM, (const uint8_t *)"a=slt_a&", 8, bad, 1, b, NULL), 0);
	(void)buf_reset(b);
	assert_int_equal(subst_body(SUBST_BODY_NONE, (const uint8_t *)"x", 1, items, 2, b, NULL),
	                 -EINVAL);
	assert_true(subst_body(SUBST_BODY_FORM, (const uint8_t *)PH, strlen(PH), items, 2, b,
	                       NULL) < 0);
}

/* The settings: checked, refused for aws, kept by the vault, in the JSON; an old vault (flags
 * 0) reads as before. */
static void test_secret_settings(void **state)
{
	static const unsigned char salt[32] = {7};
	const char *hosts[] = {"api.example"};
	struct secret_spec spec = {.key = "K",
	                           .kind = SECRET_KIND_GENERIC,
	                           .hosts = hosts,
	                           .n_hosts = 1,
	                           .value = "real-value-1234",
	                           .value_len = 15,
	                           .body = true,
	                           .query = "api_key",
	                           .plain_http = true};
	_cleanup_(secret_set_freep) struct secret_set *set = secret_set_new(), *back = NULL;
	_cleanup_buf_secure_ struct buf *plain = NULL;
	struct secret *s = NULL;
	struct json_object *o = NULL, *v;
	struct slate_error err = {0};

	(void)state;
	assert_int_equal(secret_new(&spec, salt, &s, &err), 0);
	assert_true(s->body);
	assert_string_equal(s->query, "api_key");
	assert_int_equal(secret_to_json(s, false, &o), 0);
	assert_true(json_object_object_get_ex(o, "body", &v) && json_object_get_boolean(v));
	assert_true(json_object_object_get_ex(o, "query", &v));
	assert_string_equal(json_object_get_string(v), "api_key");
	assert_true(json_object_object_get_ex(o, "allow_plain_http", &v) &&
	            json_object_get_boolean(v));
	json_object_put(o);
	assert_int_equal(secret_set_put(set, s, NULL), 0);
	assert_int_equal(vault_serialize(set, &plain), 0);
	assert_int_equal(vault_parse(buf_ptr(plain), buf_len(plain), salt, false, &back, &err), 0);
	assert_true(back->v[0].body);
	assert_string_equal(back->v[0].query, "api_key");
	assert_true(back->v[0].plain_http);

	spec.query = "bad&name";
	assert_int_equal(secret_new(&spec, salt, &s, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "query parameter"));
	spec.query = NULL;
	spec.kind = SECRET_KIND_AWS;
	spec.value = "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
	spec.value_len = strlen(spec.value);
	assert_int_equal(secret_new(&spec, salt, &s, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "aws"));
	assert_int_equal(secret_query_check("key"), 0);
	assert_int_equal(secret_query_check("a[b]"), 0);
	assert_int_equal(secret_query_check(""), -EINVAL);
	assert_int_equal(secret_query_check("a b"), -EINVAL);
}

/* The stored format: flags 0 is an old secret; unknown bits are refused. */
static void test_vault_flags(void **state)
{
	static const unsigned char salt[32] = {7};
	_cleanup_(secret_set_freep) struct secret_set *set = NULL;
	_cleanup_buf_ struct buf *b = buf_new(4096);
	struct slate_error err = {0};
	uint8_t *flags;

	(void)state;
	assert_non_null(b);
	assert_int_equal(buf_put(b, VAULT_MAGIC, 8), 0);
	assert_int_equal(buf_put_u32(b, 1), 0);
	assert_int_equal(buf_put_cstring(b, "K"), 0);
	assert_int_equal(buf_put_cstring(b, "generic"), 0);
	assert_int_equal(buf_put_u8(b, 0), 0);
	assert_int_equal(buf_put_cstring(b, "K"), 0);
	assert_int_equal(buf_put_cstring(b, ""), 0);
	assert_int_equal(buf_put_u32(b, 1), 0);
	assert_int_equal(buf_put_cstring(b, "api.example"), 0);
	assert_int_equal(buf_put_u32(b, 1), 0);
	assert_int_equal(buf_put_cstring(b, "value"), 0);
	assert_int_equal(buf_put_cstring(b, "real-value-1234"), 0);
	assert_int_equal(vault_parse(buf_ptr(b), buf_len(b), salt, false, &set, &err), 0);
	assert_false(set->v[0].body);
	assert_null(set->v[0].query);
	assert_false(set->v[0].plain_http); /* an old vault: HTTPS only */
	secret_set_free(TAKE_PTR(set));
	flags = buf_mutable_ptr(b) + 8 + 4 + 4 + 1 + 4 + 7;
	assert_int_equal(*flags, 0);
	*flags = 1;
	assert_int_equal(vault_parse(buf_ptr(b), buf_len(b), salt, false, &set, &err), 0);
	assert_true(set->v[0].body);
	secret_set_free(TAKE_PTR(set));
	*flags = 4; /* --allow-plain-http */
	assert_int_equal(vault_parse(buf_ptr(b), buf_len(b), salt, false, &set, &err), 0);
	assert_true(set->v[0].plain_http);
	assert_false(set->v[0].body);
	secret_set_free(TAKE_PTR(set));
	*flags = 8;
	assert_true(vault_parse(buf_ptr(b), buf_len(b), salt, false, &set, &err) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_type),
	        cmocka_unit_test(test_form),
	        cmocka_unit_test(test_json),
	        cmocka_unit_test(test_json_roundtrip),
	        cmocka_unit_test(test_query),
	        cmocka_unit_test(test_limits),
	        cmocka_unit_test(test_secret_settings),
	        cmocka_unit_test(test_vault_flags),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

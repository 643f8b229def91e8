/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

#define S(x) x, sizeof(x) - 1 /* a literal and its length, NULs included */

static const struct parse_case {
	const char *name;
	const char *data;
	size_t len;
	size_t max;
	int expect;
	enum json_type type; /* of the value, when expect is 0 */
} parse_cases[] = {
        {"object", S("{\"a\":1}"), 64, 0, json_type_object},
        {"whitespace around", S(" \t\r\n{\"a\":[1,2]} \n\t"), 64, 0, json_type_object},
        {"array", S("[1,\"x\",true,null,{}]"), 64, 0, json_type_array},
        {"bare number", S("123"), 64, 0, json_type_int},
        {"bare number, space", S("-1.5e3 "), 64, 0, json_type_double},
        {"bare string", S("\"x\""), 64, 0, json_type_string},
        {"bare true", S("true"), 64, 0, json_type_boolean},
        {"bare null", S("null"), 64, 0, json_type_null},
        {"escaped backslash then u0000", S("[\"\\\\u0000\"]"), 64, 0, json_type_array},
        {"unicode escape", S("[\"\\u00e9\\ud83d\\ude00\"]"), 64, 0, json_type_array},
        {"raw UTF-8", S("[\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"]"), 64, 0,
         json_type_array},
        {"exactly max", S("{\"a\":1}"), 7, 0, json_type_object},
        {"number forms", S("[0,-0,1.5,-0.25e-3,1E+2,2e2]"), 64, 0, json_type_array},
        {"int64 min", S("-9223372036854775808"), 64, 0, json_type_int},
        {"uint64 max", S("18446744073709551615"), 64, 0, json_type_int},
        {"large double", S("99999999999999999999.5"), 64, 0, json_type_double},

        {"one over max", S("{\"a\":1}"), 6, SLATE_ERR_TOO_LARGE, 0},
        {"max 0", S("{}"), 0, SLATE_ERR_TOO_LARGE, 0},
        {"empty", S(""), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"only space", S("  "), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"trailing garbage", S("{}x"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"trailing garbage after space", S("{} x"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"two values", S("{}{}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"two numbers", S("1 2"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"trailing NUL", S("{}\0"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"NUL in string", S("{\"a\":\"b\0c\"}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"NUL between tokens", S("{\"a\":\0 1}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"u0000 in value", S("{\"a\":\"b\\u0000c\"}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"u0000 in key", S("{\"a\\u0000b\":1}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"unterminated", S("{\"a\":1"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"truncated literal", S("tru"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"single quotes", S("{'a':1}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"trailing comma", S("[1,]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"trailing comma in object", S("{\"a\":1,}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"comment", S("/**/{}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"bad escape", S("[\"\\x41\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"invalid UTF-8", S("[\"\xff\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"overlong UTF-8", S("[\"\xc0\xaf\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"overlong 3-byte UTF-8", S("[\"\xe0\x80\xaf\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"UTF-8 surrogate", S("[\"\xed\xa0\x80\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"above U+10FFFF", S("[\"\xf4\x90\x80\x80\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"truncated UTF-8", S("[\"\xe2\x82\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"NaN", S("[NaN]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"Infinity", S("{\"a\":-Infinity}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"overflowing double", S("[1e999]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"plus sign", S("[+1]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"leading zero", S("01"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"bare word", S("hello"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"single-quoted key", S("{'a':1}"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"leading zeros", S("[00]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"negative leading zero", S("[-01]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"no fraction digits", S("[1.]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"no fraction before exponent", S("[1.e5]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"no exponent digits", S("[1e]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"lone minus", S("[-]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"hex", S("[0x10]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"above uint64", S("18446744073709551616"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"below int64", S("[-9223372036854775809]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"raw control character", S("[\"a\x01\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"raw newline in string", S("[\"a\nb\"]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"literal with junk", S("[truex]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"capitalised literal", S("[True]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"unterminated string", S("[\"abc"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"backslash at end", S("[\"abc\\"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"non-ASCII outside strings", S("[1]\xc2\xa0"), 64, SLATE_ERR_INVALID_FORMAT, 0},
        {"vertical tab", S("[1\x0b]"), 64, SLATE_ERR_INVALID_FORMAT, 0},
};

static void test_parse_table(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(parse_cases); i++) {
		const struct parse_case *c = &parse_cases[i];
		struct json_object *sentinel = (struct json_object *)state, *o = sentinel;
		/* An exact-size heap copy: ASan catches any read past len (no NUL after it). */
		_cleanup_free_ char *copy = malloc(c->len ? c->len : 1);
		int r;

		assert_non_null(copy);
		memcpy(copy, c->data, c->len);
		r = json_parse_bounded(copy, c->len, c->max, &o);
		if (r != c->expect)
			fail_msg("%s: got %d (%s), want %d", c->name, r, slate_strerror(r),
			         c->expect);
		if (r < 0) {
			assert_ptr_equal(o, sentinel);
			continue;
		}
		if (json_object_get_type(o) != c->type)
			fail_msg("%s: type %s", c->name,
			         json_type_to_name(json_object_get_type(o)));
		json_object_put(o);
	}
}

/* Writes depth nested objects, {"a":{"a":...{"a":1}...}}, and returns the length. */
static size_t nest_objects(char *doc, size_t depth)
{
	size_t o = 0;

	for (size_t k = 0; k + 1 < depth; k++, o += 5)
		memcpy(doc + o, "{\"a\":", 5);
	memcpy(doc + o, "{\"a\":1}", 7);
	o += 7;
	memset(doc + o, '}', depth - 1);
	return o + depth - 1;
}

/* Nesting: JSON_MAX_DEPTH levels parse, one more does not, and a bomb fails fast. */
static void test_depth(void **state)
{
	static char doc[2 * 100000];
	struct json_object *o = NULL;

	for (size_t depth = JSON_MAX_DEPTH - 1; depth <= JSON_MAX_DEPTH + 1; depth++) {
		int expect = depth <= JSON_MAX_DEPTH ? 0 : SLATE_ERR_JSON_DEPTH;

		memset(doc, '[', depth);
		memset(doc + depth, ']', depth);
		assert_int_equal(json_parse_bounded(doc, 2 * depth, sizeof(doc), &o), expect);
		json_object_put(TAKE_PTR(o));
		/* Objects count the same as arrays. */
		assert_int_equal(json_parse_bounded(doc, nest_objects(doc, depth), sizeof(doc), &o),
		                 expect);
		json_object_put(TAKE_PTR(o));
	}

	memset(doc, '[', sizeof(doc));
	assert_int_equal(json_parse_bounded(doc, sizeof(doc), sizeof(doc), &o),
	                 SLATE_ERR_JSON_DEPTH);
	memset(doc, '{', sizeof(doc));
	assert_int_equal(json_parse_bounded(doc, sizeof(doc), sizeof(doc), &o),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_null(o);
}

static void test_parse_object(void **state)
{
	static const struct {
		const char *data;
		int expect;
		bool twice; /* a member given twice (json_members_unique says false) */
	} cases[] = {
	        {"{}", 0, false},
	        {"[]", SLATE_ERR_JSON_TYPE, false},
	        {"1", SLATE_ERR_JSON_TYPE, false},
	        {"\"{}\"", SLATE_ERR_JSON_TYPE, false},
	        {"null", SLATE_ERR_JSON_TYPE, false},
	        {"{} x", SLATE_ERR_INVALID_FORMAT, false},
	        {"{\"a\":1,\"b\":{\"a\":2}}", 0, false},
	        {"{\"a:\\\":\":\"x:y\"}", 0, false}, /* ':' and '\"' inside strings */
	        {"{\"a\":[{\"a\":1},{\"a\":1}]}", 0, false},
	        {"{\"a\":1,\"a\":9}", 0, true},
	        {"{\"o\":{\"k\":[1,{\"x\":1,\"x\":2}]}}", 0, true},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		struct json_object *o = (struct json_object *)state;
		int r = json_parse_object(cases[i].data, strlen(cases[i].data), 64, &o);

		if (r != cases[i].expect)
			fail_msg("%s: got %d, want %d", cases[i].data, r, cases[i].expect);
		if (r == 0 &&
		    json_members_unique(cases[i].data, strlen(cases[i].data), o) == cases[i].twice)
			fail_msg("%s: a member twice is %sseen", cases[i].data,
			         cases[i].twice ? "not " : "wrongly ");
		if (r == 0)
			json_object_put(o);
		else
			assert_ptr_equal(o, (struct json_object *)state);
	}
	assert_int_equal(json_parse_object(NULL, 0, 64, NULL), SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(json_parse_object(NULL, 1, 64, NULL), -EINVAL);
}

static const char getter_doc[] =
        "{\"s\":\"str\",\"i\":-5,\"zero\":0,\"big\":18446744073709551615,"
        "\"i64max\":9223372036854775807,\"i64min\":-9223372036854775808,"
        "\"u\":4294967295,\"u1\":4294967296,\"neg\":-1,\"b\":true,\"f\":false,"
        "\"o\":{\"x\":1},\"a\":[1],\"n\":null,\"d\":1.5,\"si\":\"5\"}";

enum getter { G_STRING, G_INT64, G_UINT32, G_BOOL, G_OBJECT, G_ARRAY };
static const struct getter_case {
	enum getter g;
	const char *key;
	int expect;
	int64_t value; /* numbers and bools */
} getter_cases[] = {
        {G_STRING, "s", 0, 0},
        {G_STRING, "i", SLATE_ERR_JSON_TYPE, 0},
        {G_STRING, "n", SLATE_ERR_JSON_TYPE, 0},
        {G_STRING, "o", SLATE_ERR_JSON_TYPE, 0},
        {G_STRING, "missing", -ENOENT, 0},
        {G_INT64, "i", 0, -5},
        {G_INT64, "zero", 0, 0},
        {G_INT64, "i64max", 0, INT64_MAX},
        {G_INT64, "i64min", 0, INT64_MIN},
        {G_INT64, "big", -ERANGE, 0},
        {G_INT64, "d", SLATE_ERR_JSON_TYPE, 0},
        {G_INT64, "si", SLATE_ERR_JSON_TYPE, 0},
        {G_INT64, "b", SLATE_ERR_JSON_TYPE, 0},
        {G_INT64, "n", SLATE_ERR_JSON_TYPE, 0},
        {G_INT64, "missing", -ENOENT, 0},
        {G_UINT32, "u", 0, UINT32_MAX},
        {G_UINT32, "zero", 0, 0},
        {G_UINT32, "u1", -ERANGE, 0},
        {G_UINT32, "neg", -ERANGE, 0},
        {G_UINT32, "big", -ERANGE, 0},
        {G_UINT32, "i64min", -ERANGE, 0},
        {G_UINT32, "d", SLATE_ERR_JSON_TYPE, 0},
        {G_UINT32, "si", SLATE_ERR_JSON_TYPE, 0},
        {G_BOOL, "b", 0, 1},
        {G_BOOL, "f", 0, 0},
        {G_BOOL, "zero", SLATE_ERR_JSON_TYPE, 0},
        {G_BOOL, "s", SLATE_ERR_JSON_TYPE, 0},
        {G_BOOL, "n", SLATE_ERR_JSON_TYPE, 0},
        {G_OBJECT, "o", 0, 0},
        {G_OBJECT, "a", SLATE_ERR_JSON_TYPE, 0},
        {G_OBJECT, "n", SLATE_ERR_JSON_TYPE, 0},
        {G_OBJECT, "missing", -ENOENT, 0},
        {G_ARRAY, "a", 0, 0},
        {G_ARRAY, "o", SLATE_ERR_JSON_TYPE, 0},
        {G_ARRAY, "n", SLATE_ERR_JSON_TYPE, 0},
};

static void test_getters(void **state)
{
	_cleanup_json_ struct json_object *doc = NULL;

	assert_int_equal(json_parse_object(getter_doc, strlen(getter_doc), 4096, &doc), 0);
	for (size_t i = 0; i < ELEMENTSOF(getter_cases); i++) {
		const struct getter_case *c = &getter_cases[i];
		struct json_object *const sentinel = (struct json_object *)&doc;
		const char *s = "untouched";
		int64_t i64 = 4242;
		uint32_t u32 = 4242;
		bool b = true, untouched = false;
		struct json_object *o = sentinel;
		int r = -1;

		switch (c->g) {
		case G_STRING:
			r = json_get_string(doc, c->key, &s);
			untouched = streq(s, "untouched");
			if (r == 0)
				assert_string_equal(s, "str");
			break;
		case G_INT64:
			r = json_get_int64(doc, c->key, &i64);
			untouched = i64 == 4242;
			if (r == 0)
				assert_true(i64 == c->value);
			break;
		case G_UINT32:
			r = json_get_uint32(doc, c->key, &u32);
			untouched = u32 == 4242;
			if (r == 0)
				assert_true(u32 == (uint32_t)c->value);
			break;
		case G_BOOL:
			b = !c->value;
			r = json_get_bool(doc, c->key, &b);
			untouched = b == !c->value;
			if (r == 0)
				assert_true(b == (bool)c->value);
			break;
		case G_OBJECT:
			r = json_get_object(doc, c->key, &o);
			untouched = o == sentinel;
			if (r == 0)
				assert_true(json_object_is_type(o, json_type_object));
			break;
		case G_ARRAY:
			r = json_get_array(doc, c->key, &o);
			untouched = o == sentinel;
			if (r == 0)
				assert_true(json_object_is_type(o, json_type_array));
			break;
		default:
			fail();
		}
		if (r != c->expect)
			fail_msg("case %zu (key %s): got %d, want %d", i, c->key, r, c->expect);
		if (r < 0 && !untouched)
			fail_msg("case %zu (key %s): output changed on failure", i, c->key);
	}
}

/* Getters on something that is not an object, and a string with a NUL built in memory. */
static void test_getters_misuse(void **state)
{
	_cleanup_json_ struct json_object *arr = json_object_new_array();
	_cleanup_json_ struct json_object *o = json_object_new_object();
	const char *s = "untouched";
	int64_t v = 7;

	assert_int_equal(json_get_int64(arr, "a", &v), SLATE_ERR_JSON_TYPE);
	assert_int_equal(json_get_int64(NULL, "a", &v), SLATE_ERR_JSON_TYPE);
	assert_int_equal(json_get_int64(o, NULL, &v), -EINVAL);
	assert_int_equal(v, 7);
	assert_int_equal(json_add(o, "nul", json_object_new_string_len("a\0b", 3)), 0);
	assert_int_equal(json_get_string(o, "nul", &s), SLATE_ERR_INVALID_FORMAT);
	assert_string_equal(s, "untouched");
}

static void test_build_and_serialise(void **state)
{
	_cleanup_json_ struct json_object *o = json_object_new_object(), *back = NULL;
	_cleanup_json_ struct json_object *arr = json_object_new_array();
	_cleanup_free_ char *s = NULL, *nl = NULL;
	const char *str = NULL;

	assert_non_null(o);
	assert_int_equal(json_add_string(o, "path", "/var/lib/slate"), 0);
	assert_int_equal(json_add_int64(o, "n", -9007199254740993LL), 0);
	assert_int_equal(json_add_bool(o, "ok", true), 0);
	assert_int_equal(json_add(o, "nothing", NULL), 0);
	assert_int_equal(json_add_string(o, "q", "a\"b\n"), 0);
	assert_int_equal(json_add_string(o, "ok", "replaced"), 0); /* same key: replaces */
	assert_int_equal(json_add_string(o, "x", NULL), -EINVAL);

	assert_int_equal(json_to_string_dup(o, false, &s), 0);
	assert_string_equal(s, "{\"path\":\"/var/lib/slate\",\"n\":-9007199254740993,"
	                       "\"ok\":\"replaced\",\"nothing\":null,\"q\":\"a\\\"b\\n\"}");
	assert_int_equal(json_to_string_dup(o, true, &nl), 0);
	assert_int_equal(strlen(nl), strlen(s) + 1);
	assert_int_equal(nl[strlen(s)], '\n');

	/* What we write, we read back. */
	assert_int_equal(json_parse_object(nl, strlen(nl), 4096, &back), 0);
	assert_int_equal(json_get_string(back, "q", &str), 0);
	assert_string_equal(str, "a\"b\n");

	/* The value is taken over even when adding fails: LeakSanitizer checks that. */
	assert_non_null(arr);
	assert_int_equal(json_add(arr, "k", json_object_new_int(1)), -EINVAL);
	assert_int_equal(json_add(o, NULL, json_object_new_int(1)), -EINVAL);
	assert_int_equal(json_add(NULL, "k", json_object_new_int(1)), -EINVAL);
}

/* A fixture from tests/data through fs_read_file_at() and the strict parser. */
static void test_fixture(void **state)
{
	_cleanup_close_ int dfd = open(TEST_DATA_DIR "/json", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *ssh = NULL;
	const char *name = NULL;
	uint32_t cpus = 0;
	bool net = true;

	assert_true(dfd >= 0);
	assert_int_equal(fs_read_file_at(dfd, "workspace.json", 65536, &b), 0);
	assert_int_equal(json_parse_object((const char *)buf_ptr(b), buf_len(b), 65536, &o), 0);
	assert_int_equal(json_get_string(o, "name", &name), 0);
	assert_string_equal(name, "dev-box");
	assert_int_equal(json_get_uint32(o, "cpus", &cpus), 0);
	assert_int_equal(cpus, 4);
	assert_int_equal(json_get_bool(o, "network", &net), 0);
	assert_false(net);
	assert_int_equal(json_get_object(o, "ssh", &ssh), 0);
	assert_int_equal(json_get_array(ssh, "keys", &ssh), 0);
	assert_int_equal(json_object_array_length(ssh), 2);

	/* The same bytes with one byte of junk after them are refused. */
	buf_free(TAKE_PTR(b));
	assert_int_equal(fs_read_file_at(dfd, "trailing-garbage.json", 65536, &b), 0);
	json_object_put(TAKE_PTR(o));
	assert_int_equal(json_parse_object((const char *)buf_ptr(b), buf_len(b), 65536, &o),
	                 SLATE_ERR_INVALID_FORMAT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse_table),    cmocka_unit_test(test_depth),
	        cmocka_unit_test(test_parse_object),   cmocka_unit_test(test_getters),
	        cmocka_unit_test(test_getters_misuse), cmocka_unit_test(test_build_and_serialise),
	        cmocka_unit_test(test_fixture),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

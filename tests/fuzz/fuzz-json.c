/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for util/json: strict bounded parsing, then every getter on every member
 * (recursively), then a serialise/parse round trip that must succeed.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/error.h"
#include "util/json.h"

#define FUZZ_JSON_MAX 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(struct json_object *o, unsigned depth)
{
	if (depth > JSON_MAX_DEPTH + 1)
		abort(); /* the parser let something deeper through */

	json_object_object_foreach (o, key, val) {
		struct json_object *sub = NULL;
		const char *s = NULL;
		int64_t i64 = 0;
		uint32_t u32 = 0;
		bool b = false;
		int r;

		/* Keys with a NUL are refused by the parser, so every key is found by name. */
		r = json_get_string(o, key, &s);
		if (r == 0 && (!s || strlen(s) != (size_t)json_object_get_string_len(val)))
			abort();
		if (r == -ENOENT)
			abort(); /* every key we iterate over must be found */
		(void)json_get_int64(o, key, &i64);
		r = json_get_uint32(o, key, &u32);
		if (r == 0 && (json_object_get_int64(val) != (int64_t)u32))
			abort();
		(void)json_get_bool(o, key, &b);
		if (json_get_array(o, key, &sub) == 0) {
			for (size_t i = 0, n = json_object_array_length(sub); i < n; i++) {
				struct json_object *e = json_object_array_get_idx(sub, i);
				if (json_object_is_type(e, json_type_object))
					exercise(e, depth + 1);
			}
		}
		if (json_get_object(o, key, &sub) == 0)
			exercise(sub, depth + 1);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_json_ struct json_object *o = NULL, *back = NULL;
	_cleanup_free_ char *text = NULL;
	struct json_object *any = NULL;
	bool any_is_object = false;
	int r;

	/* Any value first: it must agree with json_parse_object() about validity. */
	r = json_parse_bounded((const char *)data, size, FUZZ_JSON_MAX, &any);
	if (r == 0) {
		any_is_object = json_object_is_type(any, json_type_object);
		json_object_put(any);
	}

	if (json_parse_object((const char *)data, size, FUZZ_JSON_MAX, &o) < 0) {
		if (any_is_object)
			abort();
		return 0;
	}
	if (r != 0)
		abort();
	exercise(o, 1);

	/* What we accepted, we must be able to write and read back. */
	if (json_to_string_dup(o, true, &text) < 0)
		return 0;
	if (json_parse_object(text, strlen(text), SIZE_MAX, &back) < 0)
		abort();
	return 0;
}

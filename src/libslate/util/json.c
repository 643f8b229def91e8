/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <limits.h>
#include <math.h>
#include <string.h>

#include "util/error.h"
#include "util/json.h"

static bool is_json_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/*
 * Returns the length of the RFC 8259 number at p, or 0 when there is none or it is malformed
 * (leading zeros, "1.", ".5", "1e"). An integer that json-c would silently clamp to the int64
 * or uint64 range is refused too: the value we hand out must be the one that was sent.
 */
static size_t number_len(const char *p, size_t n)
{
	bool neg = false, integer = true, overflow = false;
	uint64_t v = 0;
	size_t j = 0, s;

	if (j < n && p[j] == '-') {
		neg = true;
		j++;
	}
	if (j >= n || !is_digit(p[j]))
		return 0;
	if (p[j] == '0') {
		j++;
	} else {
		for (; j < n && is_digit(p[j]); j++) {
			unsigned d = (unsigned)(p[j] - '0');
			if (v > (UINT64_MAX - d) / 10)
				overflow = true;
			else
				v = v * 10 + d;
		}
	}
	if (j < n && p[j] == '.') {
		integer = false;
		for (s = ++j; j < n && is_digit(p[j]); j++)
			;
		if (j == s)
			return 0;
	}
	if (j < n && (p[j] == 'e' || p[j] == 'E')) {
		integer = false;
		j++;
		if (j < n && (p[j] == '+' || p[j] == '-'))
			j++;
		for (s = j; j < n && is_digit(p[j]); j++)
			;
		if (j == s)
			return 0;
	}
	/* "01", "1.2.3", "1-2" and "1x" are one malformed token, not two. */
	if (j < n && (is_digit(p[j]) || p[j] == '.' || p[j] == '-' || p[j] == '+' ||
	              (p[j] >= 'a' && p[j] <= 'z') || (p[j] >= 'A' && p[j] <= 'Z')))
		return 0;
	if (integer && (overflow || (neg && v > (uint64_t)INT64_MAX + 1)))
		return 0;
	return j;
}

/*
 * Returns the length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0. json-c's own check lets overlong forms through,
 * and "\xc0\xaf" is a '/' to a sloppy decoder.
 */
static size_t utf8_len(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	/* The second byte's range is what rules out overlong forms, surrogates and > U+10FFFF. */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if (p[k] < 0x80 || p[k] > 0xbf)
			return 0;
	return len;
}

/*
 * The lexical half of strictness, in one pass before json-c sees the bytes. json-c's strict
 * mode still takes single-quoted keys, NaN and Infinity, leading zeros, "1.", raw control
 * characters and overlong UTF-8 in strings, and NULs (raw, or as \u0000, which it decodes into strings that then
 * read shorter than they are and which silently cut object keys short: "a\u0000b" becomes
 * "a"). Each of those is a way for two parsers to disagree about one document, so refuse them
 * here and leave the grammar to json-c.
 */
static bool lex_ok(const char *data, size_t len)
{
	size_t i = 0;

	while (i < len) {
		char c = data[i];
		size_t n;

		switch (c) {
		case ' ':
		case '\t':
		case '\n':
		case '\r':
		case '{':
		case '}':
		case '[':
		case ']':
		case ',':
		case ':':
			i++;
			break;
		case '"':
			for (i++;; i++) {
				if (i >= len)
					return false;
				c = data[i];
				if (c == '"')
					break;
				if ((unsigned char)c < 0x20)
					return false;
				if ((unsigned char)c >= 0x80) {
					n = utf8_len((const unsigned char *)data + i, len - i);
					if (n == 0)
						return false;
					i += n - 1;
					continue;
				}
				if (c != '\\')
					continue;
				if (i + 1 >= len)
					return false;
				if (data[i + 1] == 'u' && i + 5 < len &&
				    memcmp(data + i + 2, "0000", 4) == 0)
					return false;
				i++; /* the escaped character; json-c checks the rest of the escape */
			}
			i++;
			break;
		case 't':
		case 'f':
		case 'n':
			n = c == 't' ? 4 : c == 'f' ? 5 : 4;
			if (len - i < n || memcmp(data + i,
			                          c == 't'   ? "true"
			                          : c == 'f' ? "false"
			                                     : "null",
			                          n) != 0)
				return false;
			i += n;
			if (i < len && ((data[i] >= 'a' && data[i] <= 'z') || is_digit(data[i])))
				return false;
			break;
		default:
			n = number_len(data + i, len - i);
			if (n == 0)
				return false;
			i += n;
			break;
		}
	}
	return true;
}

/*
 * Checks what json-c cannot: container nesting (its depth also counts the scalar at the
 * bottom) and doubles that overflowed to infinity ("1e999"), which are not JSON and do not
 * survive a round trip.
 */
static int check_tree(struct json_object *o, unsigned depth)
{
	int r;

	switch (json_object_get_type(o)) {
	case json_type_double:
		return isfinite(json_object_get_double(o)) ? 0 : SLATE_ERR_INVALID_FORMAT;
	case json_type_array:
		if (depth >= JSON_MAX_DEPTH)
			return SLATE_ERR_JSON_DEPTH;
		for (size_t i = 0, n = json_object_array_length(o); i < n; i++) {
			r = check_tree(json_object_array_get_idx(o, i), depth + 1);
			if (r < 0)
				return r;
		}
		return 0;
	case json_type_object: {
		if (depth >= JSON_MAX_DEPTH)
			return SLATE_ERR_JSON_DEPTH;
		json_object_object_foreach (o, k, v) {
			(void)k;
			r = check_tree(v, depth + 1);
			if (r < 0)
				return r;
		}
		return 0;
	}
	default:
		return 0;
	}
}

/* Every ':' outside a string in the text is one member. */
static size_t count_members_text(const char *p, size_t len)
{
	bool in_string = false;
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (in_string) {
			if (p[i] == '\\')
				i++;
			else if (p[i] == '"')
				in_string = false;
		} else if (p[i] == '"') {
			in_string = true;
		} else if (p[i] == ':') {
			n++;
		}
	}
	return n;
}

static size_t count_members_tree(struct json_object *o)
{
	size_t n = 0;

	if (json_object_is_type(o, json_type_array)) {
		for (size_t i = 0, len = json_object_array_length(o); i < len; i++)
			n += count_members_tree(json_object_array_get_idx(o, i));
	} else if (json_object_is_type(o, json_type_object)) {
		json_object_object_foreach (o, k, v) {
			(void)k;
			n += 1 + count_members_tree(v);
		}
	}
	return n;
}

bool json_members_unique(const char *data, size_t len, struct json_object *tree)
{
	return count_members_text(data, len) == count_members_tree(tree);
}

int json_parse_bounded(const char *data, size_t len, size_t max, struct json_object **ret)
{
	struct json_tokener *tok;
	struct json_object *o;
	enum json_tokener_error e;
	size_t end;
	int r;

	if (!data && len > 0)
		return -EINVAL;
	/* Before anything looks at the bytes. */
	if (len > max || len > INT_MAX)
		return SLATE_ERR_TOO_LARGE;
	if (len == 0 || !lex_ok(data, len))
		return SLATE_ERR_INVALID_FORMAT;

	/* One more than the limit, because json-c's depth also counts the innermost scalar;
	 * check_tree() enforces the limit exactly. This bound keeps bombs cheap. */
	tok = json_tokener_new_ex(JSON_MAX_DEPTH + 1);
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);

	o = json_tokener_parse_ex(tok, data, (int)len);
	e = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	if (e == json_tokener_continue) {
		/* A bare number or literal only ends at a delimiter; the terminating NUL is one. */
		o = json_tokener_parse_ex(tok, "", 1);
		e = json_tokener_get_error(tok);
		end = len;
	}
	json_tokener_free(tok);

	if (e != json_tokener_success) {
		json_object_put(o);
		if (e == json_tokener_error_depth)
			return SLATE_ERR_JSON_DEPTH;
		return SLATE_ERR_INVALID_FORMAT;
	}
	for (size_t i = end; i < len; i++)
		if (!is_json_space(data[i])) {
			json_object_put(o);
			return SLATE_ERR_INVALID_FORMAT;
		}
	r = check_tree(o, 0);
	if (r < 0) {
		json_object_put(o);
		return r;
	}

	/* A top-level "null" is json-c's NULL object: success with *ret == NULL. */
	*ret = o;
	return 0;
}

int json_parse_object(const char *data, size_t len, size_t max, struct json_object **ret)
{
	struct json_object *o = NULL;
	int r;

	r = json_parse_bounded(data, len, max, &o);
	if (r < 0)
		return r;
	if (!json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return SLATE_ERR_JSON_TYPE;
	}
	*ret = o;
	return 0;
}

/* Finds member key of object o and checks its type. JSON null is json-c's NULL object. */
static int get_member(struct json_object *o, const char *key, enum json_type type,
                      struct json_object **ret)
{
	struct json_object *v;

	if (!key)
		return -EINVAL;
	if (!json_object_is_type(o, json_type_object))
		return SLATE_ERR_JSON_TYPE;
	if (!json_object_object_get_ex(o, key, &v))
		return -ENOENT;
	if (!json_object_is_type(v, type))
		return SLATE_ERR_JSON_TYPE;
	*ret = v;
	return 0;
}

int json_get_string(struct json_object *o, const char *key, const char **ret)
{
	struct json_object *v;
	const char *s;
	int r;

	r = get_member(o, key, json_type_string, &v);
	if (r < 0)
		return r;
	s = json_object_get_string(v);
	/* A string built in memory may still hold a NUL; C would see a shorter one. */
	if (strlen(s) != (size_t)json_object_get_string_len(v))
		return SLATE_ERR_INVALID_FORMAT;
	*ret = s;
	return 0;
}

int json_get_int64(struct json_object *o, const char *key, int64_t *ret)
{
	struct json_object *v;
	int64_t i;
	int r;

	r = get_member(o, key, json_type_int, &v);
	if (r < 0)
		return r;
	i = json_object_get_int64(v);
	/* json-c keeps values above INT64_MAX as uint64 and clamps them here. */
	if (i == INT64_MAX && json_object_get_uint64(v) > (uint64_t)INT64_MAX)
		return -ERANGE;
	*ret = i;
	return 0;
}

int json_get_uint32(struct json_object *o, const char *key, uint32_t *ret)
{
	struct json_object *v;
	int r;

	r = get_member(o, key, json_type_int, &v);
	if (r < 0)
		return r;
	/* Check the signed view first: json_object_get_uint64() turns negatives into 0. */
	if (json_object_get_int64(v) < 0 || json_object_get_uint64(v) > UINT32_MAX)
		return -ERANGE;
	*ret = (uint32_t)json_object_get_uint64(v);
	return 0;
}

int json_get_bool(struct json_object *o, const char *key, bool *ret)
{
	struct json_object *v;
	int r;

	r = get_member(o, key, json_type_boolean, &v);
	if (r < 0)
		return r;
	*ret = json_object_get_boolean(v);
	return 0;
}

int json_get_object(struct json_object *o, const char *key, struct json_object **ret)
{
	return get_member(o, key, json_type_object, ret);
}

int json_get_array(struct json_object *o, const char *key, struct json_object **ret)
{
	return get_member(o, key, json_type_array, ret);
}

int json_add(struct json_object *o, const char *key, struct json_object *value)
{
	/* json-c asserts on a non-object; refuse instead, and keep the promise about value. */
	if (!key || !json_object_is_type(o, json_type_object) || value == o) {
		json_object_put(value);
		return -EINVAL;
	}
	if (json_object_object_add(o, key, value) < 0) {
		json_object_put(value);
		return -ENOMEM;
	}
	return 0;
}

int json_add_string(struct json_object *o, const char *key, const char *s)
{
	struct json_object *v;

	if (!s)
		return -EINVAL;
	v = json_object_new_string(s);
	if (!v)
		return -ENOMEM;
	return json_add(o, key, v);
}

int json_add_int64(struct json_object *o, const char *key, int64_t i)
{
	struct json_object *v = json_object_new_int64(i);
	if (!v)
		return -ENOMEM;
	return json_add(o, key, v);
}

int json_add_bool(struct json_object *o, const char *key, bool b)
{
	struct json_object *v = json_object_new_boolean(b);
	if (!v)
		return -ENOMEM;
	return json_add(o, key, v);
}

int json_to_string_dup(struct json_object *o, bool newline, char **ret)
{
	const char *s;
	size_t len;
	char *d;

	s = json_object_to_json_string_length(
	        o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (!s)
		return -ENOMEM;
	d = malloc(len + 2);
	if (!d)
		return -ENOMEM;
	memcpy(d, s, len);
	if (newline)
		d[len++] = '\n';
	d[len] = '\0';
	*ret = d;
	return 0;
}

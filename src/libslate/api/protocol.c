/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/protocol.h"
#include "util/error.h"
#include "util/json.h"

int api_path_split(const char *path, unsigned *ret_version, const char **ret_rest)
{
	const char *p = path;
	unsigned long v = 0;
	size_t digits = 0;

	if (!path || p[0] != '/' || p[1] != 'v')
		return SLATE_ERR_INVALID_FORMAT;
	p += 2;
	/* Plain decimal, no sign, no leading zero, at most 4 digits: strtoul accepts too much. */
	while (*p >= '0' && *p <= '9') {
		if (++digits > 4 || (digits == 2 && v == 0))
			return SLATE_ERR_INVALID_FORMAT;
		v = v * 10 + (unsigned long)(*p - '0');
		p++;
	}
	if (digits == 0 || v == 0)
		return SLATE_ERR_INVALID_FORMAT;
	if (*p != '\0' && *p != '/')
		return SLATE_ERR_INVALID_FORMAT;

	*ret_version = (unsigned)v;
	*ret_rest = *p ? p : "/";
	return 0;
}

struct json_object *api_error_new(const char *code, const char *message)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *e = json_object_new_object();

	if (!o || !e) {
		json_object_put(e);
		return NULL;
	}
	if (json_add(o, "error", e) < 0 || json_add_string(e, "code", code) < 0 ||
	    json_add_string(e, "message", message ? message : "") < 0)
		return NULL;
	return TAKE_PTR(o);
}

struct json_object *api_event_new(const char *type, struct json_object *data)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();

	if (!o || json_add_string(o, "type", type) < 0)
		return NULL;
	if (data) {
		json_object_object_foreach (data, k, v) {
			if (streq(k, "type"))
				continue;
			if (json_add(o, k, json_object_get(v)) < 0)
				return NULL;
		}
	}
	return TAKE_PTR(o);
}

int api_error_parse(struct json_object *o, const char **ret_code, const char **ret_message)
{
	struct json_object *e;
	const char *code, *message = "";

	if (!o || json_get_object(o, "error", &e) < 0 || json_get_string(e, "code", &code) < 0)
		return -ENOENT;
	(void)json_get_string(e, "message", &message);
	*ret_code = code;
	*ret_message = message;
	return 0;
}

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

int api_route_match(const char *pattern, const char *path, char params[][API_PARAM_MAX],
                    size_t *ret_n)
{
	char tmp[API_MAX_PARAMS][API_PARAM_MAX];
	const char *p = pattern, *q = path;
	size_t n = 0;

	while (*p && *q) {
		size_t pl, ql;

		if (*p != '/' || *q != '/')
			return 0;
		p++, q++;
		pl = strcspn(p, "/");
		ql = strcspn(q, "/");
		if (p[0] == ':') {
			if (ql == 0 || ql >= API_PARAM_MAX || n >= API_MAX_PARAMS)
				return 0;
			if ((ql == 1 && q[0] == '.') || (ql == 2 && q[0] == '.' && q[1] == '.'))
				return 0;
			memcpy(tmp[n], q, ql);
			tmp[n][ql] = '\0';
			n++;
		} else if (pl != ql || memcmp(p, q, pl) != 0) {
			return 0;
		}
		p += pl;
		q += ql;
	}
	if (*p || *q)
		return 0;
	for (size_t i = 0; i < n; i++)
		memcpy(params[i], tmp[i], API_PARAM_MAX);
	*ret_n = n;
	return 1;
}

const char *api_error_code(int code, unsigned *ret_status)
{
	static const struct {
		int code;
		unsigned status;
		const char *name;
	} map[] = {
	        {-ENOENT, 404, API_ERR_NOT_FOUND},
	        {-EEXIST, 409, API_ERR_CONFLICT},
	        {-EALREADY, 409, API_ERR_CONFLICT},
	        {-ENOTCONN, 409, API_ERR_CONFLICT},
	        {SLATE_ERR_SHARE, 409, API_ERR_CONFLICT},
	        {-EBUSY, 409, API_ERR_BUSY},
	        {-EINVAL, 400, API_ERR_BAD_REQUEST},
	        {-ENOSPC, 507, API_ERR_NO_SPACE},
	        {-EDQUOT, 507, API_ERR_NO_SPACE},
	        {SLATE_ERR_LIBVIRT, 503, API_ERR_UNAVAILABLE},
	        {SLATE_ERR_COMPROMISED, 409, API_ERR_COMPROMISED},
	        {SLATE_ERR_BASE_DRIFT, 409, API_ERR_BASE_DRIFT},
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].code == code) {
			if (ret_status)
				*ret_status = map[i].status;
			return map[i].name;
		}
	if (ret_status)
		*ret_status = 500;
	return API_ERR_FAILED;
}

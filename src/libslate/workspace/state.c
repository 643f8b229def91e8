/* SPDX-License-Identifier: GPL-2.0-or-later */

/* workspace.json: the state of one workspace, read strictly and written atomically. */

#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "image/store.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "workspace/internal.h"
#include "workspace/mac.h"

#define WS_FORMAT_VERSION 1

int workspace_name_check(const char *name)
{
	size_t n;

	if (!name)
		return -EINVAL;
	n = strlen(name);
	if (n == 0 || n > WORKSPACE_NAME_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && i > 0);
		if (!ok)
			return -EINVAL;
	}
	return 0;
}

static void share_done(struct workspace_share *sh)
{
	free(sh->host_dir);
	free(sh->guest_dir);
}

void workspace_free(struct workspace *w)
{
	if (!w)
		return;
	free(w->name);
	free(w->image_id);
	for (size_t i = 0; i < w->n_shares; i++)
		share_done(&w->shares[i]);
	free(w->shares);
	free(w->compromised_host);
	free(w);
}

void workspace_list_free(struct workspace **list, size_t n)
{
	if (!list)
		return;
	for (size_t i = 0; i < n; i++)
		workspace_free(list[i]);
	free(list);
}

int64_t ws_now(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
		return 0;
	return (int64_t)ts.tv_sec;
}

int workspace_uuid_v4(char ret[37])
{
	uint8_t u[16];

	randombytes_buf(u, sizeof(u));
	u[6] = (uint8_t)((u[6] & 0x0f) | 0x40); /* version 4 */
	u[8] = (uint8_t)((u[8] & 0x3f) | 0x80); /* RFC 4122 variant */
	(void)snprintf(ret, 37,
	               "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
	               u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
	               u[13], u[14], u[15]);
	return 0;
}

int ws_random_suffix(char *ret, size_t size)
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	uint8_t b[6];

	if (size < sizeof(b) + 1)
		return -EINVAL;
	randombytes_buf(b, sizeof(b));
	for (size_t i = 0; i < sizeof(b); i++)
		ret[i] = alphabet[b[i] % (sizeof(alphabet) - 1)];
	ret[sizeof(b)] = '\0';
	return 0;
}

static bool uuid_ok(const char *s)
{
	if (strlen(s) != 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		char c = s[i];
		if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return true;
}

static bool path_ok(const char *p)
{
	size_t n = strlen(p);
	return n > 0 && n < PATH_MAX && p[0] == '/';
}

/* ---- writing ---- */

static int add_nullable_string(struct json_object *o, const char *key, const char *s)
{
	if (!s)
		return json_add(o, key, NULL);
	return json_add_string(o, key, s);
}

static int shares_to_json(const struct workspace *w, struct json_object **ret)
{
	_cleanup_json_ struct json_object *a = json_object_new_array();

	if (!a)
		return -ENOMEM;
	for (size_t i = 0; i < w->n_shares; i++) {
		const struct workspace_share *sh = &w->shares[i];
		struct json_object *o = json_object_new_object();
		int r;

		if (!o)
			return -ENOMEM;
		if (json_object_array_add(a, o) < 0) {
			json_object_put(o);
			return -ENOMEM;
		}
		r = json_add_string(o, "hostDir", sh->host_dir ? sh->host_dir : "");
		if (r >= 0)
			r = add_nullable_string(o, "guestDir", sh->guest_dir);
		if (r >= 0)
			r = json_add_bool(o, "readonly", sh->readonly);
		if (r >= 0 && sh->uid != (uid_t)-1)
			r = json_add_int64(o, "uid", (int64_t)sh->uid);
		if (r < 0)
			return r;
	}
	*ret = TAKE_PTR(a);
	return 0;
}

int ws_state_to_json(const struct workspace *w, char **ret)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *shares = NULL;
	int r;

	if (!o)
		return -ENOMEM;
	if (workspace_name_check(w->name) < 0 || !w->image_id || mac_check(w->mac) < 0 ||
	    !uuid_ok(w->uuid))
		return -EINVAL;
	r = shares_to_json(w, &shares);
	if (r < 0)
		return r;
	if ((r = json_add_int64(o, "formatVersion", WS_FORMAT_VERSION)) < 0 ||
	    (r = json_add_string(o, "name", w->name)) < 0 ||
	    (r = json_add_int64(o, "owner", (int64_t)w->owner)) < 0 ||
	    (r = json_add_string(o, "uuid", w->uuid)) < 0 ||
	    (r = json_add_string(o, "image", w->image_id)) < 0 ||
	    (r = json_add_int64(o, "baseVersion", w->base_version)) < 0 ||
	    (r = json_add_int64(o, "memoryMiB", (int64_t)w->memory_mib)) < 0 ||
	    (r = json_add_int64(o, "cpus", (int64_t)w->cpus)) < 0 ||
	    (r = json_add_int64(o, "homeSize", (int64_t)w->home_size)) < 0 ||
	    (r = json_add(o, "shares", shares)) < 0 ||
	    (r = json_add_string(o, "mac", w->mac)) < 0 ||
	    (r = json_add_int64(o, "created", w->created)) < 0 ||
	    (r = json_add_int64(o, "lastUsed", w->last_used)) < 0 ||
	    (r = json_add_bool(o, "compromised", w->compromised)) < 0 ||
	    (r = json_add_int64(o, "compromisedAt", w->compromised_at)) < 0 ||
	    (r = add_nullable_string(o, "compromisedHost", w->compromised_host)) < 0 ||
	    (r = json_add_bool(o, "diskPresent", w->disk_present)) < 0 ||
	    (r = json_add_bool(o, "homePresent", w->home_present)) < 0 ||
	    (r = json_add_bool(o, "diskFresh", w->disk_fresh)) < 0 ||
	    (r = json_add_bool(o, "ephemeral", w->ephemeral)) < 0)
		return r;
	return json_to_string_dup(o, true, ret);
}

/* ---- reading ---- */

/* Missing members and out-of-range numbers are a malformed file, not a missing workspace. */
static int fmt(int r)
{
	return r == -ENOENT || r == -ERANGE ? SLATE_ERR_INVALID_FORMAT : r;
}

static int get_strdup(struct json_object *o, const char *key, char **ret)
{
	const char *s;
	char *d;
	int r;

	r = json_get_string(o, key, &s);
	if (r < 0)
		return fmt(r);
	d = strdup(s);
	if (!d)
		return -ENOMEM;
	*ret = d;
	return 0;
}

static int get_nullable_string(struct json_object *o, const char *key, char **ret)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v))
		return SLATE_ERR_INVALID_FORMAT;
	if (!v) {
		*ret = NULL;
		return 0;
	}
	return get_strdup(o, key, ret);
}

static int get_positive(struct json_object *o, const char *key, int64_t max, int64_t *ret)
{
	int64_t v;
	int r;

	r = json_get_int64(o, key, &v);
	if (r < 0)
		return fmt(r);
	if (v <= 0 || v > max)
		return SLATE_ERR_INVALID_FORMAT;
	*ret = v;
	return 0;
}

static int shares_from_json(struct json_object *a, struct workspace *w)
{
	size_t n = json_object_array_length(a);

	if (n > WS_MAX_SHARES)
		return SLATE_ERR_INVALID_FORMAT;
	if (n == 0)
		return 0;
	w->shares = calloc(n, sizeof(*w->shares));
	if (!w->shares)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *o = json_object_array_get_idx(a, i);
		struct workspace_share *sh = &w->shares[i];
		int r;

		w->n_shares = i + 1;
		sh->uid = (uid_t)-1;
		if (!json_object_is_type(o, json_type_object) || json_object_object_length(o) < 3 ||
		    json_object_object_length(o) > 4)
			return SLATE_ERR_INVALID_FORMAT;
		/* "uid" arrived when shares started being served as their owner (doc/security.md,
		 * "Shares"); records made before have three members. */
		if (json_object_object_length(o) == 4) {
			int64_t uid;
			if ((r = fmt(json_get_int64(o, "uid", &uid))) < 0)
				return r;
			if (uid < 0 || uid >= (int64_t)UINT32_MAX)
				return SLATE_ERR_INVALID_FORMAT;
			sh->uid = (uid_t)uid;
		}
		if ((r = get_strdup(o, "hostDir", &sh->host_dir)) < 0 ||
		    (r = get_nullable_string(o, "guestDir", &sh->guest_dir)) < 0 ||
		    (r = fmt(json_get_bool(o, "readonly", &sh->readonly))) < 0)
			return r;
		if (!path_ok(sh->host_dir) || (sh->guest_dir && !path_ok(sh->guest_dir)))
			return SLATE_ERR_INVALID_FORMAT;
	}
	return 0;
}

/* The members of a format-1 workspace.json; anything else is refused. */
#define WS_STATE_MEMBERS 18

int ws_state_from_json(const char *data, size_t len, struct workspace **ret)
{
	_cleanup_json_ struct json_object *o = NULL;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	struct json_object *shares;
	const char *s;
	int64_t version, v;
	uint32_t owner;
	int r;

	r = json_parse_object(data, len, WS_STATE_MAX_SIZE, &o);
	if (r < 0)
		return r == SLATE_ERR_JSON_TYPE ? SLATE_ERR_INVALID_FORMAT : r;
	r = json_get_int64(o, "formatVersion", &version);
	if (r < 0)
		return fmt(r);
	if (version != WS_FORMAT_VERSION)
		return SLATE_ERR_PROTOCOL_VERSION;
	/* "ephemeral" and "diskFresh" are optional (files written before `slate run --rm`, and
	 * before starts from booted snapshots, lack them). */
	if ((size_t)json_object_object_length(o) !=
	    WS_STATE_MEMBERS + (json_object_object_get_ex(o, "ephemeral", NULL) ? 1u : 0u) +
	            (json_object_object_get_ex(o, "diskFresh", NULL) ? 1u : 0u))
		return SLATE_ERR_INVALID_FORMAT;

	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	if ((r = get_strdup(o, "name", &w->name)) < 0)
		return r;
	if (workspace_name_check(w->name) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	if ((r = fmt(json_get_uint32(o, "owner", &owner))) < 0)
		return r;
	if (owner == UINT32_MAX)
		return SLATE_ERR_INVALID_FORMAT;
	w->owner = (uid_t)owner;
	if ((r = fmt(json_get_string(o, "uuid", &s))) < 0)
		return r;
	if (!uuid_ok(s))
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(w->uuid, s, sizeof(w->uuid));
	if ((r = get_strdup(o, "image", &w->image_id)) < 0)
		return r;
	if (image_id_check(w->image_id) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	if ((r = fmt(json_get_int64(o, "baseVersion", &w->base_version))) < 0)
		return r;
	if ((r = get_positive(o, "memoryMiB", INT32_MAX, &v)) < 0)
		return r;
	w->memory_mib = (uint64_t)v;
	if ((r = get_positive(o, "cpus", 4096, &v)) < 0)
		return r;
	w->cpus = (unsigned)v;
	if ((r = get_positive(o, "homeSize", INT64_MAX, &v)) < 0)
		return r;
	w->home_size = (uint64_t)v;
	if ((r = fmt(json_get_array(o, "shares", &shares))) < 0)
		return r;
	if ((r = shares_from_json(shares, w)) < 0)
		return r;
	if ((r = fmt(json_get_string(o, "mac", &s))) < 0)
		return r;
	if (mac_check(s) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(w->mac, s, sizeof(w->mac));
	if ((r = fmt(json_get_int64(o, "created", &w->created))) < 0 ||
	    (r = fmt(json_get_int64(o, "lastUsed", &w->last_used))) < 0 ||
	    (r = fmt(json_get_bool(o, "compromised", &w->compromised))) < 0 ||
	    (r = fmt(json_get_int64(o, "compromisedAt", &w->compromised_at))) < 0 ||
	    (r = get_nullable_string(o, "compromisedHost", &w->compromised_host)) < 0 ||
	    (r = fmt(json_get_bool(o, "diskPresent", &w->disk_present))) < 0 ||
	    (r = fmt(json_get_bool(o, "homePresent", &w->home_present))) < 0)
		return r;
	/* Optional: absent in files written before starts from booted snapshots (not fresh). */
	r = json_get_bool(o, "diskFresh", &w->disk_fresh);
	if (r < 0 && r != -ENOENT)
		return fmt(r);
	/* Optional: absent in files written before `slate run --rm` existed. */
	r = json_get_bool(o, "ephemeral", &w->ephemeral);
	if (r < 0 && r != -ENOENT)
		return fmt(r);
	*ret = TAKE_PTR(w);
	return 0;
}

int ws_state_load_at(int dir_fd, struct workspace **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	r = fs_read_file_at(dir_fd, WS_STATE_FILE, WS_STATE_MAX_SIZE, &b);
	if (r == -EFBIG)
		return SLATE_ERR_TOO_LARGE;
	if (r < 0)
		return r;
	return ws_state_from_json((const char *)buf_ptr(b), buf_len(b), ret);
}

int ws_state_save_at(int dir_fd, const struct workspace *w)
{
	_cleanup_free_ char *s = NULL;
	int r;

	r = ws_state_to_json(w, &s);
	if (r < 0)
		return r;
	return fs_write_atomic_at(dir_fd, WS_STATE_FILE, s, strlen(s), 0600);
}

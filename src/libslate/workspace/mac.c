/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "workspace/internal.h"
#include "workspace/mac.h"
#include "workspace/workspace.h"

/* Attempts at drawing a free address before giving up; 24 bits make a miss very rare. */
#define MAC_RESERVE_ATTEMPTS 256

struct registry {
	struct mac_entry *e;
	size_t n;
};

static void registry_done(struct registry *r)
{
	mac_list_free(r->e, r->n);
	r->e = NULL;
	r->n = 0;
}

static bool is_lower_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

int mac_check(const char *mac)
{
	if (!mac || strlen(mac) != MAC_STRLEN || !strneq(mac, MAC_PREFIX, strlen(MAC_PREFIX)))
		return -EINVAL;
	for (size_t i = strlen(MAC_PREFIX); i < MAC_STRLEN; i++) {
		if (i % 3 == 2) {
			if (mac[i] != ':')
				return -EINVAL;
		} else if (!is_lower_hex(mac[i])) {
			return -EINVAL;
		}
	}
	return 0;
}

void mac_list_free(struct mac_entry *list, size_t n)
{
	if (!list)
		return;
	for (size_t i = 0; i < n; i++)
		free(list[i].name);
	free(list);
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct mac_entry *)a)->mac, ((const struct mac_entry *)b)->mac);
}

static struct mac_entry *registry_find(const struct registry *r, const char *mac)
{
	struct mac_entry key = {0};

	if (r->n == 0)
		return NULL;
	(void)snprintf(key.mac, sizeof(key.mac), "%s", mac);
	return bsearch(&key, r->e, r->n, sizeof(*r->e), entry_cmp);
}

/* Adds mac -> name keeping the array sorted. */
static int registry_add(struct registry *r, const char *mac, const char *name)
{
	struct mac_entry *e;
	char *n;
	size_t i;

	n = strdup(name);
	if (!n)
		return -ENOMEM;
	e = reallocarray(r->e, r->n + 1, sizeof(*e));
	if (!e) {
		free(n);
		return -ENOMEM;
	}
	r->e = e;
	for (i = r->n; i > 0 && strcmp(r->e[i - 1].mac, mac) > 0; i--)
		r->e[i] = r->e[i - 1];
	memset(&r->e[i], 0, sizeof(r->e[i]));
	(void)snprintf(r->e[i].mac, sizeof(r->e[i].mac), "%s", mac);
	r->e[i].name = n;
	r->n++;
	return 0;
}

static void registry_remove_at(struct registry *r, size_t i)
{
	free(r->e[i].name);
	memmove(&r->e[i], &r->e[i + 1], (r->n - i - 1) * sizeof(*r->e));
	r->n--;
}

static int registry_parse(const char *data, size_t len, struct registry *ret)
{
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *macs = NULL;
	struct registry r = {0};
	int64_t version;
	int k;

	k = json_parse_object(data, len, MAC_REGISTRY_MAX_SIZE, &o);
	if (k < 0)
		return k == SLATE_ERR_JSON_TYPE ? SLATE_ERR_INVALID_FORMAT : k;
	if (json_get_int64(o, "formatVersion", &version) < 0 || version != 1)
		return SLATE_ERR_INVALID_FORMAT;
	if (json_get_object(o, "macs", &macs) < 0 || json_object_object_length(o) != 2)
		return SLATE_ERR_INVALID_FORMAT;

	json_object_object_foreach (macs, key, val) {
		const char *name;

		if (mac_check(key) < 0 || !json_object_is_type(val, json_type_string) ||
		    registry_find(&r, key)) {
			k = SLATE_ERR_INVALID_FORMAT;
			break;
		}
		name = json_object_get_string(val);
		if (strlen(name) != (size_t)json_object_get_string_len(val) ||
		    workspace_name_check(name) < 0) {
			k = SLATE_ERR_INVALID_FORMAT;
			break;
		}
		k = registry_add(&r, key, name);
		if (k < 0)
			break;
	}
	if (k < 0) {
		registry_done(&r);
		return k;
	}
	*ret = r;
	return 0;
}

/* Reads the registry (empty when the file does not exist yet). Call with the lock held. */
static int registry_read(int dirfd, struct registry *ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	r = fs_read_file_at(dirfd, MAC_REGISTRY_FILE, MAC_REGISTRY_MAX_SIZE, &b);
	if (r == -ENOENT) {
		*ret = (struct registry){0};
		return 0;
	}
	if (r == -EFBIG)
		return SLATE_ERR_TOO_LARGE;
	if (r < 0)
		return r;
	return registry_parse((const char *)buf_ptr(b), buf_len(b), ret);
}

/* Takes the lock (into *ret_lock, held until the caller closes it), then reads the registry. */
static int registry_open(int dirfd, int *ret_lock, struct registry *ret)
{
	int k;

	k = ws_lock_wait_at(dirfd, MAC_REGISTRY_LOCK, ret_lock);
	if (k < 0)
		return k;
	return registry_read(dirfd, ret);
}

static int registry_write(int dirfd, const struct registry *r)
{
	_cleanup_json_ struct json_object *o = NULL;
	_cleanup_free_ char *s = NULL;
	struct json_object *macs;
	int k;

	o = json_object_new_object();
	macs = json_object_new_object();
	if (!o || !macs) {
		json_object_put(macs);
		return -ENOMEM;
	}
	k = json_add_int64(o, "formatVersion", 1);
	if (k < 0) {
		json_object_put(macs);
		return k;
	}
	k = json_add(o, "macs", macs);
	if (k < 0)
		return k;
	for (size_t i = 0; i < r->n; i++) {
		k = json_add_string(macs, r->e[i].mac, r->e[i].name);
		if (k < 0)
			return k;
	}
	k = json_to_string_dup(o, true, &s);
	if (k < 0)
		return k;
	return fs_write_atomic_at(dirfd, MAC_REGISTRY_FILE, s, strlen(s), 0600);
}

static void mac_random(char ret[MAC_STRLEN + 1])
{
	uint8_t b[3];

	randombytes_buf(b, sizeof(b));
	(void)snprintf(ret, MAC_STRLEN + 1, MAC_PREFIX "%02x:%02x:%02x", b[0], b[1], b[2]);
}

int mac_reserve(int dirfd, const char *name, char ret[MAC_STRLEN + 1])
{
	_cleanup_close_ int lock = -1;
	_cleanup_(registry_done) struct registry r = {0};
	char mac[MAC_STRLEN + 1];
	int k;

	k = workspace_name_check(name);
	if (k < 0)
		return k;
	k = registry_open(dirfd, &lock, &r);
	if (k < 0)
		return k;
	for (int attempt = 0;; attempt++) {
		if (attempt == MAC_RESERVE_ATTEMPTS)
			return -EADDRNOTAVAIL;
		mac_random(mac);
		if (!registry_find(&r, mac))
			break;
	}
	k = registry_add(&r, mac, name);
	if (k < 0)
		return k;
	k = registry_write(dirfd, &r);
	if (k < 0)
		return k;
	memcpy(ret, mac, sizeof(mac));
	return 0;
}

int mac_claim(int dirfd, const char *mac, const char *name)
{
	_cleanup_close_ int lock = -1;
	_cleanup_(registry_done) struct registry r = {0};
	struct mac_entry *e;
	int k;

	if (mac_check(mac) < 0 || workspace_name_check(name) < 0)
		return -EINVAL;
	k = registry_open(dirfd, &lock, &r);
	if (k < 0)
		return k;
	e = registry_find(&r, mac);
	if (e)
		return streq(e->name, name) ? 0 : -EADDRINUSE;
	k = registry_add(&r, mac, name);
	if (k < 0)
		return k;
	return registry_write(dirfd, &r);
}

int mac_release(int dirfd, const char *mac, const char *name)
{
	_cleanup_close_ int lock = -1;
	_cleanup_(registry_done) struct registry r = {0};
	struct mac_entry *e;
	int k;

	if (mac_check(mac) < 0)
		return -EINVAL;
	k = registry_open(dirfd, &lock, &r);
	if (k < 0)
		return k;
	e = registry_find(&r, mac);
	if (!e || (name && !streq(e->name, name)))
		return 0;
	registry_remove_at(&r, (size_t)(e - r.e));
	k = registry_write(dirfd, &r);
	if (k < 0)
		return k;
	return 1;
}

int mac_list(int dirfd, struct mac_entry **ret, size_t *ret_n)
{
	_cleanup_close_ int lock = -1;
	struct registry r = {0};
	int k;

	k = registry_open(dirfd, &lock, &r);
	if (k < 0)
		return k;
	*ret = r.e;
	*ret_n = r.n;
	return 0;
}

int mac_sweep(int dirfd, int (*keep)(const char *mac, const char *name, void *ud), void *ud)
{
	_cleanup_close_ int lock = -1;
	_cleanup_(registry_done) struct registry r = {0};
	int k, freed = 0;

	k = registry_open(dirfd, &lock, &r);
	if (k < 0)
		return k;
	for (size_t i = 0; i < r.n;) {
		k = keep(r.e[i].mac, r.e[i].name, ud);
		if (k < 0)
			return k;
		if (k > 0) {
			i++;
			continue;
		}
		registry_remove_at(&r, i);
		freed++;
	}
	if (freed == 0)
		return 0;
	k = registry_write(dirfd, &r);
	if (k < 0)
		return k;
	return freed;
}

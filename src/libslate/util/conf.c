/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libxml/uri.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/buf.h"
#include "util/conf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/size.h"

#define CONF_MAX_KEYS 128
#define CONF_NAME_MAX 64

/* Every key of slate.conf, one line each; doc/slate.conf.5.in describes each (man-coverage.test). */
static const struct conf_key keys[] = {
        {.name = "state-dir", .type = CONF_PATH, .def = SLATE_STATE_DIR},
        {.name = "runtime-dir", .type = CONF_PATH, .def = SLATE_RUNTIME_DIR},
        {.name = "socket-group", .type = CONF_GROUP},
        {.name = "libvirt-uri", .type = CONF_URI, .def = "qemu:///system"},
        {.name = "log-level", .type = CONF_LOG_LEVEL, .def = "info"},
        {.name = "storage", .type = CONF_ENUM, .def = "auto", .choices = "auto|pool|qcow2"},
        {.name = "pool-size", .type = CONF_SIZE, .def = "64G", .min = 256ull << 20},
        {.name = "trusted-keys", .type = CONF_PATH, .def = SLATE_SYSCONF_DIR "/trusted-keys"},
        {.name = "channel", .type = CONF_NAME, .def = "stable"},
        {.name = "catalog-url", .type = CONF_URL},
        {.name = "core-dumps", .type = CONF_ENUM, .def = "no", .choices = "no|yes"},
        {.name = "max-running", .type = CONF_COUNT, .def = "0", .max = 100000},
        {.name = "memory-budget", .type = CONF_SIZE_AUTO, .def = "auto", .min = 64ull << 20},
        {.name = "when-full", .type = CONF_ENUM, .def = "queue", .choices = "queue|refuse"},
        {.name = "queue-timeout", .type = CONF_COUNT, .def = "0", .max = 7 * 24 * 3600},
        {.name = "boot-snapshots", .type = CONF_ENUM, .def = "auto", .choices = "auto|use|off"},
        {.name = "browser-image", .type = CONF_NAME},
};

struct conf {
	size_t n;
	char *keys[CONF_MAX_KEYS];
	char *values[CONF_MAX_KEYS];
};

const struct conf_key *conf_keys(size_t *ret_n)
{
	*ret_n = ELEMENTSOF(keys);
	return keys;
}

const struct conf_key *conf_key_find(const char *name)
{
	for (size_t i = 0; name && i < ELEMENTSOF(keys); i++)
		if (streq(keys[i].name, name))
			return &keys[i];
	return NULL;
}

void conf_free(struct conf *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		free(c->keys[i]);
		free(c->values[i]);
	}
	free(c);
}

const char *conf_get(const struct conf *c, const char *key)
{
	for (size_t i = 0; c && i < c->n; i++)
		if (streq(c->keys[i], key))
			return c->values[i];
	return NULL;
}

const char *conf_value(const struct conf *c, const char *key)
{
	const struct conf_key *k = conf_key_find(key);
	const char *v = conf_get(c, key);

	return v ? v : k ? k->def : NULL;
}

_printf_(3, 4) static int why_set(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why && len > 0) {
		va_start(ap, fmt);
		(void)vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return SLATE_ERR_INVALID_FORMAT;
}

static bool enum_has(const char *choices, const char *v)
{
	size_t n = strlen(v);

	for (const char *p = choices; p && *p;) {
		const char *bar = strchr(p, '|');
		size_t l = bar ? (size_t)(bar - p) : strlen(p);

		if (l == n && n > 0 && strncmp(p, v, n) == 0)
			return true;
		p = bar ? bar + 1 : NULL;
	}
	return false;
}

/* The channel names slate-catalog signs for (image/sign.c: sign_channel_check). */
static bool name_ok(const char *v)
{
	size_t n = strlen(v);

	if (n == 0 || n > CONF_NAME_MAX || strstr(v, ".."))
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = v[i];
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');

		if (!alnum && (i == 0 || (ch != '.' && ch != '_' && ch != '-')))
			return false;
	}
	return true;
}

/* shadow-utils' rule for group names (32 bytes at most), or a number. */
static bool group_ok(const char *v)
{
	size_t n = strlen(v);

	if (n == 0 || n > 32)
		return false;
	if (strspn(v, "0123456789") == n)
		return true;
	for (size_t i = 0; i < n; i++) {
		char ch = v[i];
		bool ok = (ch >= 'a' && ch <= 'z') || ch == '_' ||
		          (i > 0 &&
		           ((ch >= '0' && ch <= '9') || ch == '-' || (ch == '$' && i == n - 1)));

		if (!ok)
			return false;
	}
	return true;
}

/* libvirt parses connection URIs with libxml2's parser: take what it takes, with a scheme. */
static bool libvirt_uri_ok(const char *v)
{
	xmlURIPtr u;
	bool ok;

	if (!*v || strpbrk(v, " \t"))
		return false;
	u = xmlParseURI(v);
	ok = u && u->scheme && *u->scheme;
	xmlFreeURI(u);
	return ok;
}

static bool url_ok(const char *v)
{
	CURLU *u;
	char *scheme = NULL;
	bool ok;

	if (v[0] == '/')
		return true;
	u = curl_url();
	if (!u)
		return false;
	ok = curl_url_set(u, CURLUPART_URL, v, 0) == CURLUE_OK &&
	     curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	     (strcasecmp(scheme, "https") == 0 || strcasecmp(scheme, "http") == 0 ||
	      strcasecmp(scheme, "file") == 0);
	curl_free(scheme);
	curl_url_cleanup(u);
	return ok;
}

int conf_check_value(const struct conf_key *key, const char *value, char *why, size_t why_len)
{
	uint64_t size;

	if (!key || !value)
		return -EINVAL;
	switch (key->type) {
	case CONF_PATH:
		if (value[0] != '/')
			return why_set(why, why_len, "an absolute path");
		return 0;
	case CONF_ENUM:
		if (!enum_has(key->choices, value))
			return why_set(why, why_len, "one of %s", key->choices);
		return 0;
	case CONF_SIZE:
	case CONF_SIZE_AUTO:
		if (key->type == CONF_SIZE_AUTO &&
		    (strcmp(value, "auto") == 0 || strcmp(value, "none") == 0))
			return 0;
		if (size_parse(value, &size) < 0 || size < key->min) {
			char min[32];
			return why_set(why, why_len, "a size such as 64G, at least %s%s",
			               size_format(key->min, min, sizeof(min)),
			               key->type == CONF_SIZE_AUTO ? ", auto or none" : "");
		}
		return 0;
	case CONF_COUNT: {
		char *end;
		unsigned long long v;
		errno = 0;
		v = strtoull(value, &end, 10);
		if (value[0] < '0' || value[0] > '9' || errno || *end || v > key->max)
			return why_set(why, why_len, "a number from 0 to %llu",
			               (unsigned long long)key->max);
		return 0;
	}
	case CONF_LOG_LEVEL:
		if (log_level_from_string(value) < 0)
			return why_set(why, why_len, "err, warning, notice, info or debug");
		return 0;
	case CONF_URI:
		if (!libvirt_uri_ok(value))
			return why_set(why, why_len, "a libvirt URI such as qemu:///system");
		return 0;
	case CONF_URL:
		if (!url_ok(value))
			return why_set(why, why_len,
			               "an https://, http:// or file:// URL, or an "
			               "absolute path");
		return 0;
	case CONF_NAME:
		if (!name_ok(value))
			return why_set(why, why_len,
			               "a name of [a-z0-9._-] starting with a letter or digit, at "
			               "most %d bytes",
			               CONF_NAME_MAX);
		return 0;
	case CONF_GROUP:
		if (!group_ok(value))
			return why_set(why, why_len,
			               "a group name ([a-z_][a-z0-9_-]*, at most 32 bytes) or a "
			               "numeric gid");
		return 0;
	}
	return -EINVAL;
}

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

static int parse_line(struct conf *c, const char *p, size_t len, struct slate_error *err)
{
	_cleanup_free_ char *key = NULL, *value = NULL;
	const struct conf_key *k;
	const char *eq, *k_end, *v;
	char why[160];
	size_t klen, vlen;
	int r;

	while (len > 0 && is_space(*p))
		p++, len--;
	while (len > 0 && is_space(p[len - 1]))
		len--;
	if (len == 0 || p[0] == '#')
		return 0;
	eq = memchr(p, '=', len);
	if (!eq)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "expected \"key = value\"");
	k_end = eq;
	while (k_end > p && is_space(k_end[-1]))
		k_end--;
	klen = (size_t)(k_end - p);
	if (klen == 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "a value without a key");
	for (size_t i = 0; i < klen; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '-'))
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "a key is made of a-z, 0-9 and '-'");
	v = eq + 1;
	vlen = len - (size_t)(v - p);
	while (vlen > 0 && is_space(*v))
		v++, vlen--;
	if (memchr(v, '\0', vlen))
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "a NUL byte in the value");
	if (c->n >= CONF_MAX_KEYS)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE, "more than %u settings",
		                       CONF_MAX_KEYS);
	key = strndup(p, klen);
	value = strndup(v, vlen);
	if (!key || !value)
		return -ENOMEM;
	k = conf_key_find(key);
	if (!k)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "unknown key '%s'", key);
	if (conf_get(c, key))
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "'%s' is set twice", key);
	r = conf_check_value(k, value, why, sizeof(why));
	if (r < 0)
		/* The value is the administrator's own configuration, never a secret. */
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s = %s: %s", key, value,
		                       why);
	c->keys[c->n] = TAKE_PTR(key);
	c->values[c->n] = TAKE_PTR(value);
	c->n++;
	return 0;
}

/* Refusals name the line as compilers do: "NAME:LINE: why", or "line LINE: why" without a
 * name. */
static int parse_named(const char *name, const char *text, size_t len, struct conf **ret,
                       struct slate_error *err)
{
	_cleanup_conf_ struct conf *c = NULL;
	unsigned line = 0;
	int r;

	if (len > CONF_MAX_SIZE) {
		if (name)
			return slate_error_set(err, SLATE_ERR_TOO_LARGE,
			                       "cannot read configuration %s: larger than %u bytes",
			                       name, CONF_MAX_SIZE);
		return slate_error_set(err, SLATE_ERR_TOO_LARGE, "larger than %u bytes",
		                       CONF_MAX_SIZE);
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	while (len > 0) {
		const char *nl = memchr(text, '\n', len);
		size_t l = nl ? (size_t)(nl - text) : len;

		line++;
		r = parse_line(c, text, l, err);
		if (r < 0)
			return name ? slate_error_wrap(err, r, "%s:%u", name, line)
			            : slate_error_wrap(err, r, "line %u", line);
		text += l + (nl ? 1 : 0);
		len -= l + (nl ? 1 : 0);
	}
	*ret = TAKE_PTR(c);
	return 0;
}

int conf_parse(const char *text, size_t len, struct conf **ret, struct slate_error *err)
{
	return parse_named(NULL, text, len, ret, err);
}

int conf_load(const char *path, struct conf **ret, struct slate_error *err)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	r = fs_read_file_at(AT_FDCWD, path, CONF_MAX_SIZE, &b);
	if (r == -EFBIG)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE,
		                       "cannot read configuration %s: larger than %u bytes", path,
		                       CONF_MAX_SIZE);
	if (r < 0)
		return slate_error_errno(err, r, "cannot read configuration %s", path);
	return parse_named(path, (const char *)buf_ptr(b), buf_len(b), ret, err);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/conf.h"
#include "util/error.h"
#include "util/fs.h"

#define CONF_MAX_KEYS 128

struct conf {
	size_t n;
	char *keys[CONF_MAX_KEYS];
	char *values[CONF_MAX_KEYS];
};

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

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

static int parse_line(struct conf *c, const char *p, size_t len)
{
	const char *eq, *k_end, *v;
	size_t klen, vlen;

	while (len > 0 && is_space(*p))
		p++, len--;
	while (len > 0 && is_space(p[len - 1]))
		len--;
	if (len == 0 || p[0] == '#')
		return 0;
	eq = memchr(p, '=', len);
	if (!eq)
		return SLATE_ERR_INVALID_FORMAT;
	k_end = eq;
	while (k_end > p && is_space(k_end[-1]))
		k_end--;
	klen = (size_t)(k_end - p);
	if (klen == 0)
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; i < klen; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '-'))
			return SLATE_ERR_INVALID_FORMAT;
	v = eq + 1;
	vlen = len - (size_t)(v - p);
	while (vlen > 0 && is_space(*v))
		v++, vlen--;
	if (memchr(v, '\0', vlen))
		return SLATE_ERR_INVALID_FORMAT;
	if (c->n >= CONF_MAX_KEYS)
		return SLATE_ERR_TOO_LARGE;
	c->keys[c->n] = strndup(p, klen);
	c->values[c->n] = strndup(v, vlen);
	if (!c->keys[c->n] || !c->values[c->n]) {
		free(c->keys[c->n]);
		free(c->values[c->n]);
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->n; i++)
		if (streq(c->keys[i], c->keys[c->n])) {
			free(c->keys[c->n]);
			free(c->values[c->n]);
			return SLATE_ERR_INVALID_FORMAT;
		}
	c->n++;
	return 0;
}

int conf_parse(const char *text, size_t len, struct conf **ret, unsigned *ret_line)
{
	_cleanup_conf_ struct conf *c = NULL;
	unsigned line = 0;

	if (len > CONF_MAX_SIZE)
		return SLATE_ERR_TOO_LARGE;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	while (len > 0) {
		const char *nl = memchr(text, '\n', len);
		size_t l = nl ? (size_t)(nl - text) : len;
		int r;

		line++;
		r = parse_line(c, text, l);
		if (r < 0) {
			if (ret_line)
				*ret_line = line;
			return r;
		}
		text += l + (nl ? 1 : 0);
		len -= l + (nl ? 1 : 0);
	}
	*ret = TAKE_PTR(c);
	return 0;
}

int conf_load(const char *path, struct conf **ret, unsigned *ret_line)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	r = fs_read_file_at(AT_FDCWD, path, CONF_MAX_SIZE, &b);
	if (r == -EFBIG)
		return SLATE_ERR_TOO_LARGE;
	if (r < 0)
		return r;
	return conf_parse((const char *)buf_ptr(b), buf_len(b), ret, ret_line);
}

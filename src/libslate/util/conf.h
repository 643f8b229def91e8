/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * slate.conf: "key = value" lines, '#' comments, blank lines. Keys are [a-z0-9-]; values run
 * to the end of the line, surrounding whitespace trimmed. A key given twice, a line without
 * '=', a key slated does not know, a value its key does not accept, or a file over 64 KiB is
 * refused, and the error names the line. See slate.conf(5).
 *
 * Every key is one line of the table in conf.c (name, type, default). To add one: add that
 * line, describe the key in doc/slate.conf.5.in (tests/unit/man-coverage.test fails until it is),
 * and read it with conf_value().
 */

#include <stdint.h>

#include "util/error.h"
#include "util/macro.h"

#define CONF_MAX_SIZE (64u * 1024u)

enum conf_type {
	CONF_PATH,      /* an absolute path */
	CONF_ENUM,      /* one of choices ("a|b|c") */
	CONF_SIZE,      /* size_parse(): "64G", "512M", at least min bytes */
	CONF_LOG_LEVEL, /* log_level_from_string() */
	CONF_URI,       /* a libvirt connection URI, as libxml2's URI parser (libvirt's) takes it */
	CONF_URL,       /* an http(s):// or file:// URL (curl's parser), or an absolute path */
	CONF_NAME,      /* [a-z0-9][a-z0-9._-]*, at most 64 bytes, no "..": a catalog channel */
	CONF_GROUP,     /* a group name as useradd takes it ([a-z_][a-z0-9_-]*[$]?), or a gid */
	CONF_COUNT,     /* a decimal count, 0 to max */
	CONF_SIZE_AUTO, /* as CONF_SIZE, or "auto" or "none" */
};

struct conf_key {
	const char *name;
	enum conf_type type;
	const char *def;     /* the default as slate.conf(5) writes it; NULL: none */
	const char *choices; /* CONF_ENUM only */
	uint64_t min;        /* CONF_SIZE, CONF_SIZE_AUTO */
	uint64_t max;        /* CONF_COUNT */
};

struct conf;

/* Returns the table of every key, ret_n its length. */
const struct conf_key *conf_keys(size_t *ret_n);
/* Returns the key called name, or NULL. */
const struct conf_key *conf_key_find(const char *name);
/* Checks value for key. Returns 0, or SLATE_ERR_INVALID_FORMAT with why (when non-NULL) saying
 * what the key accepts. Used for the file and for command-line options alike. */
int conf_check_value(const struct conf_key *key, const char *value, char *why, size_t why_len);

/* Parses and checks path. Returns 0, -ENOENT when missing, SLATE_ERR_INVALID_FORMAT (or
 * SLATE_ERR_TOO_LARGE), or another negative error; err (may be NULL) says why, a refused line
 * as "PATH:LINE: why". */
int conf_load(const char *path, struct conf **ret, struct slate_error *err);
/* Parses and checks len bytes at text, as conf_load does; a refused line is "line LINE: why". */
int conf_parse(const char *text, size_t len, struct conf **ret, struct slate_error *err);
/* Returns the value key was given in the file, or NULL. */
const char *conf_get(const struct conf *c, const char *key);
/* Returns the value key was given in the file (c may be NULL), else its default (may be NULL).
 * key must be in the table. */
const char *conf_value(const struct conf *c, const char *key);
void conf_free(struct conf *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct conf *, conf_free);
#define _cleanup_conf_ _cleanup_(conf_freep)

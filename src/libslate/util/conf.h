/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * slate.conf: "key = value" lines, '#' comments, blank lines. Keys are [a-z0-9-]; values run
 * to the end of the line, surrounding whitespace trimmed. A key given twice, a line without
 * '=', or a file over 64 KiB is refused. See slate.conf(5).
 */

#include "util/macro.h"

#define CONF_MAX_SIZE (64u * 1024u)

struct conf;

/* Parses path. Returns 0, -ENOENT when missing, SLATE_ERR_INVALID_FORMAT with the offending
 * line number in *ret_line (when non-NULL), or another negative error. */
int conf_load(const char *path, struct conf **ret, unsigned *ret_line);
/* Parses len bytes at text, as conf_load does. */
int conf_parse(const char *text, size_t len, struct conf **ret, unsigned *ret_line);
/* Returns the value of key, or NULL. */
const char *conf_get(const struct conf *c, const char *key);
void conf_free(struct conf *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct conf *, conf_free);
#define _cleanup_conf_ _cleanup_(conf_freep)

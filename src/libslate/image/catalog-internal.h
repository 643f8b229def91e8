/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* What catalog-parse.c (the parser) and catalog.c (the decisions, the rollback state) share:
 * the strict field readers. Each reads o's member key, checks it, and on failure fills err with
 * "where.key: why" and returns its error (SLATE_ERR_INVALID_FORMAT mostly). */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/catalog.h"

enum text_kind {
	TEXT_PLAIN,   /* any UTF-8 text without control characters (C0, DEL, C1) */
	TEXT_COMMAND, /* like TEXT_PLAIN, and tab and newline */
	TEXT_URL,     /* printable ASCII without space, not empty: URLs and other tokens */
	TEXT_CMDLINE, /* printable ASCII */
};

/* Refuses members of o not in allowed (NULL-terminated). */
int catalog_check_members(struct json_object *o, const char *where, const char *const allowed[],
                          struct slate_error *err);
/* A string of kind, at most max bytes; optional unless required (*ret untouched then). */
int catalog_get_text(struct json_object *o, const char *where, const char *key, bool required,
                     size_t max, enum text_kind kind, const char **ret, struct slate_error *err);
/* An integer of at least min. */
int catalog_get_int(struct json_object *o, const char *where, const char *key, int64_t min,
                    int64_t *ret, struct slate_error *err);
/* A time as catalog_time_parse reads it. */
int catalog_get_time(struct json_object *o, const char *where, const char *key, int64_t *ret,
                     struct slate_error *err);
/* "sha256": 64 lowercase hex digits, into a->sha256 and a->sha256_hex. */
int catalog_get_sha256(struct json_object *o, const char *where, struct catalog_artifact *a,
                       struct slate_error *err);
/* For messages: t as a timestamp, or as a number when it is out of range. Returns buf. */
const char *catalog_time_str(int64_t t, char buf[32]);

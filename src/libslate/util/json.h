/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * JSON helpers on json-c: bounded strict parsing and typed getters. A getter returns
 * -ENOENT when the member is missing, SLATE_ERR_JSON_TYPE when it has the wrong type, and
 * leaves its output untouched on failure.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/macro.h"

#define JSON_MAX_DEPTH 32

DEFINE_TRIVIAL_CLEANUP_FUNC(struct json_object *, json_object_put);
#define _cleanup_json_ _cleanup_(json_object_putp)

/*
 * Parses exactly len bytes as one JSON value: refuses input longer than max before parsing
 * (SLATE_ERR_TOO_LARGE), nesting deeper than JSON_MAX_DEPTH, trailing bytes other than
 * whitespace, and interior NULs (SLATE_ERR_INVALID_FORMAT). *ret gets a new reference.
 */
int json_parse_bounded(const char *data, size_t len, size_t max, struct json_object **ret);
/* Like json_parse_bounded, and the value must be an object. */
int json_parse_object(const char *data, size_t len, size_t max, struct json_object **ret);
/* Whether tree, parsed from the len bytes at data, holds every member the text gives: json-c
 * keeps the last of duplicate members silently, so {"v":1,"v":9} would read differently here
 * than in a tool that keeps the first. Returns false when a member was given twice. */
bool json_members_unique(const char *data, size_t len, struct json_object *tree);

int json_get_string(struct json_object *o, const char *key, const char **ret);
int json_get_int64(struct json_object *o, const char *key, int64_t *ret);
int json_get_uint32(struct json_object *o, const char *key, uint32_t *ret); /* range-checked */
int json_get_bool(struct json_object *o, const char *key, bool *ret);
int json_get_object(struct json_object *o, const char *key,
                    struct json_object **ret);                                        /* borrowed */
int json_get_array(struct json_object *o, const char *key, struct json_object **ret); /* borrowed */

/* Adds key to o; the value reference is taken over even on failure. Returns 0 or -ENOMEM. */
int json_add(struct json_object *o, const char *key, struct json_object *value);
int json_add_string(struct json_object *o, const char *key, const char *s);
int json_add_int64(struct json_object *o, const char *key, int64_t v);
int json_add_bool(struct json_object *o, const char *key, bool v);

/* Serialises o (compact, no escaping of '/') into a new string, with a trailing newline when
 * newline is true. Returns 0 or -ENOMEM. */
int json_to_string_dup(struct json_object *o, bool newline, char **ret);

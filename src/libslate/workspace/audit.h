/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A workspace's audit trail: <workspace>/audit.jsonl, one JSON object per line, appended with
 * O_APPEND and one write() per event so concurrent writers (the egress proxy, the SSH agent)
 * never interleave. Each event carries "time" (Unix seconds, with milliseconds as a fraction)
 * and "type" ("egress", "leak", "ssh-sign", "sigv4"...) plus the caller's fields. Secret values
 * never go in: callers pass masked key ids and fingerprints only. Past AUDIT_ROTATE_BYTES the
 * file becomes audit.jsonl.1 (the previous .1 goes), so the trail is bounded.
 * `slate trace` reads it; `slate rm` deletes it with the workspace.
 */

#include <json-c/json.h>
#include <stddef.h>

struct workspace_store;

#define AUDIT_ROTATE_BYTES (8u << 20)
#define AUDIT_LINE_MAX (16u << 10)

/* Appends ev (borrowed; "time" and "type" are added to a copy) to workspace name's trail. */
int audit_append(struct workspace_store *st, const char *name, const char *type,
                 struct json_object *ev);
/*
 * Reads the trail, oldest first, into a new JSON array in *ret: only events whose "type" is in
 * types (a NULL-terminated list; NULL: every type), at most the newest max (0: no limit).
 * Lines that do not parse are skipped (a crash can leave a torn last line).
 */
int audit_read(struct workspace_store *st, const char *name, const char *const *types, size_t max,
               struct json_object **ret);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The daemon<->client protocol: REST-style HTTP/1.1 with JSON bodies over a unix socket,
 * versioned paths (/v1/...), and newline-delimited JSON event streams for long operations.
 * doc/api.md is the specification; this header holds the names both sides share.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#define API_VERSION_HEADER "Slate-Api-Version"
#define API_CONTENT_JSON "application/json"
#define API_CONTENT_NDJSON "application/x-ndjson"
/* Request bodies larger than this are refused (413) before parsing. */
#define API_MAX_REQUEST_BODY (1024u * 1024u)
/* Replies larger than this are refused by the client. */
#define API_MAX_REPLY (16u * 1024u * 1024u)
/* One event line of a stream. */
#define API_MAX_EVENT (256u * 1024u)

/* Stable error codes carried in {"error":{"code":...,"message":...}}. */
#define API_ERR_BAD_REQUEST "bad_request"
#define API_ERR_NOT_FOUND "not_found"
#define API_ERR_METHOD "method_not_allowed"
#define API_ERR_TOO_LARGE "too_large"
#define API_ERR_API_VERSION "api_version_mismatch"
#define API_ERR_PERMISSION "permission_denied"
#define API_ERR_INTERNAL "internal"
#define API_ERR_FAILED "failed"
#define API_ERR_CONFLICT "conflict"       /* 409: it exists already */
#define API_ERR_BUSY "busy"               /* 409: the workspace runs; stop it first */
#define API_ERR_UNAVAILABLE "unavailable" /* 503: storage or libvirt cannot be used */
#define API_ERR_NO_SPACE "no_space"       /* 507: the filesystem is full */
#define API_ERR_COMPROMISED "compromised" /* 409: a leak quarantined it: wipe first */
#define API_ERR_BASE_DRIFT "base_drift"   /* 409: its image moved on: reset or keep */

/* The code and HTTP status an error code of the library (a negative errno or SLATE_ERR_*,
 * util/error.h) is reported with; *ret_status may be NULL. */
const char *api_error_code(int code, unsigned *ret_status);

/* Event types in a stream: zero or more "progress", then exactly one "result" or "error". */
#define API_EVENT_PROGRESS "progress"
#define API_EVENT_RESULT "result"
#define API_EVENT_ERROR "error"
/*
 * While a streamed operation waits (on libvirt, QEMU, the guest, the network), the server repeats
 * its last progress event at least this often with "waiting_s" added: the seconds since that
 * event. A client shows it as "still waiting"; one that sees nothing for much longer than this
 * is talking to a stalled connection.
 */
#define API_STREAM_KEEPALIVE_S 4

/*
 * Splits a request path "/v<N>/rest" into the version and the rest ("/rest", never empty).
 * Returns 0, or SLATE_ERR_INVALID_FORMAT when the path has no version prefix.
 */
int api_path_split(const char *path, unsigned *ret_version, const char **ret_rest);

#define API_MAX_PARAMS 4
#define API_PARAM_MAX 256

/*
 * Matches path ("/workspaces/foo/reset") against a route pattern ("/workspaces/:name/reset"):
 * segments starting with ':' capture one non-empty segment (at most API_PARAM_MAX - 1 bytes,
 * never "." or ".."). Returns 1 and fills params/ret_n on a match, 0 otherwise.
 */
int api_route_match(const char *pattern, const char *path, char params[][API_PARAM_MAX],
                    size_t *ret_n);

/* Returns a new {"error":{"code":code,"message":message}} object, or NULL. */
struct json_object *api_error_new(const char *code, const char *message);

/* Returns a new {"type":type, ...} event object (members of data are copied), or NULL. */
struct json_object *api_event_new(const char *type, struct json_object *data);

/* Parses an "error" object: borrowed pointers into o. Returns 0 or -ENOENT. */
int api_error_parse(struct json_object *o, const char **ret_code, const char **ret_message);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The API client: libcurl over the daemon's unix socket, or that socket reached over ssh (every
 * connection is api_dial()'s, api/dial.h). It checks that the daemon speaks
 * the client's API version on every reply and turns transport failures into messages that say
 * which socket was tried and how to start the daemon.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/macro.h"

struct api_client;

/* What went wrong, for the top level to print once: "slate: <what>: <message>". */
struct api_error {
	int code;        /* negative errno / slate_err, or SLATE_ERR_PROTOCOL_VERSION */
	unsigned status; /* HTTP status when the daemon answered, else 0 */
	char kind[64];   /* the daemon's error code ("not_found"...), or "" */
	char message[1024];
};

/* Called for each "progress" event of a stream; return < 0 to stop reading. */
typedef int (*api_event_fn)(struct json_object *event, void *userdata);

struct api_endpoint;

/* Returns 0 and a client for slated at ep (api/dial.h; copied) in *ret, or a negative error. */
int api_client_new_endpoint(const struct api_endpoint *ep, struct api_client **ret);
/* Returns 0 and a client for the socket at path in *ret, or a negative error. */
int api_client_new(const char *socket_path, struct api_client **ret);
void api_client_free(struct api_client *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct api_client *, api_client_free);

/* Returns where the client finds slated, for messages: the socket's path, or ssh://... */
const char *api_client_socket(const struct api_client *c);

/*
 * connect()s to the unix socket at path and closes again: 0 when something listens there, else
 * -errno (-ENOENT, -ECONNREFUSED, -EACCES...): what curl's "Couldn't connect to server" hides.
 */
int api_socket_probe(const char *path);

/*
 * Says why the socket at socket_path cannot be reached, for a connection that failed (detail:
 * what the transport said). It connects itself to learn the errno curl does not tell: for
 * EACCES it names the socket's mode and group and whether the caller is in that group; else
 * how to start slated. Writes the message to buf. Returns -EACCES, else -ECONNREFUSED.
 */
int api_socket_explain(const char *socket_path, const char *detail, char *buf, size_t len);

/*
 * Sends method path (e.g. "GET", "/v1/version") with an optional JSON body. For a JSON reply,
 * *ret gets the document on 2xx. For a stream, on_event sees each progress event and *ret gets
 * the final "result" event. On failure returns < 0 and fills err (when non-NULL): the daemon's
 * error reply, an unreachable socket, or an API version mismatch.
 */
int api_client_call(struct api_client *c, const char *method, const char *path,
                    struct json_object *body, api_event_fn on_event, void *userdata,
                    struct json_object **ret, struct api_error *err);

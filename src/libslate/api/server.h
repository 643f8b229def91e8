/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The API server: libmicrohttpd on a unix socket, one thread per connection (bounded), callers
 * identified by SO_PEERCRED. Routes answer with one JSON document or with a stream of events
 * produced by a worker thread, so blocking work never runs on a connection's I/O path.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <sys/types.h>

#include "api/protocol.h"
#include "util/macro.h"

struct api_server;
struct api_stream;

struct api_caller {
	uid_t uid;
	gid_t gid;
	pid_t pid;
};

struct api_request {
	const char *method;
	const char *path; /* after the version prefix, e.g. "/version" */
	struct api_caller caller;
	struct json_object *body;                   /* parsed JSON body or NULL */
	char params[API_MAX_PARAMS][API_PARAM_MAX]; /* ":name" segments of the route, in order */
	size_t n_params;
	struct api_server *server;
	void *userdata;    /* the server's userdata */
	void *connection_; /* private */
};

/* Returns the value of query argument key (decoded), or NULL. */
const char *api_request_arg(const struct api_request *req, const char *key);

/* A handler's answer: either a JSON document with an HTTP status, or a stream. */
typedef int (*api_stream_fn)(struct api_stream *s, void *arg);
/*
 * An upgraded connection (101 Switching Protocols): runs on a thread of its own with the raw,
 * blocking socket fd and the bytes the client sent after its request (extra, may be empty). It
 * must not close fd; the server closes it when the function returns.
 */
typedef void (*api_upgrade_fn)(int fd, const char *extra, size_t extra_len, void *arg);
struct api_reply {
	unsigned status;
	struct json_object *json; /* owned by the reply */
	api_stream_fn stream;     /* when set, json is ignored and stream runs on a worker */
	void *stream_arg;
	void (*stream_arg_free)(void *arg);
	api_upgrade_fn upgrade; /* when set, the connection is upgraded to upgrade_protocol */
	const char *upgrade_protocol;
};

typedef int (*api_handler_fn)(struct api_request *req, struct api_reply *reply);

struct api_route {
	const char *method;
	const char *path;
	api_handler_fn handler;
};

struct api_server_config {
	const char *socket_path; /* bound here unless listen_fd >= 0 */
	int listen_fd;           /* an already listening socket (socket activation), or -1 */
	mode_t socket_mode;      /* e.g. 0660 */
	gid_t socket_gid;        /* (gid_t)-1 to leave it */
	const struct api_route *routes;
	size_t n_routes;
	void *userdata;
	unsigned max_connections; /* 0: default */
	unsigned idle_timeout_s;  /* 0: default; a half-sent request is dropped after this */
};

/* Starts serving. Returns 0 and the server in *ret, or a negative error. */
int api_server_start(const struct api_server_config *cfg, struct api_server **ret);
/* Stops accepting, closes every connection, waits for streams to end, frees. NULL is fine. */
void api_server_stop(struct api_server *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct api_server *, api_server_stop);

/* Reply helpers: each takes over obj. Return 0 (or -ENOMEM). */
int api_reply_json(struct api_reply *r, unsigned status, struct json_object *obj);
int api_reply_error(struct api_reply *r, unsigned status, const char *code, const char *fmt, ...)
        _printf_(4, 5);
int api_reply_stream(struct api_reply *r, api_stream_fn fn, void *arg, void (*arg_free)(void *));
/* Upgrades the connection to protocol (the request must have asked for it with "Connection:
 * Upgrade" and "Upgrade: <protocol>"; 400 otherwise). fn then owns arg (frees it with arg_free). */
int api_reply_upgrade(struct api_reply *r, const char *protocol, api_upgrade_fn fn, void *arg,
                      void (*arg_free)(void *));

/*
 * Inside a stream function: send one event. Takes over data (may be NULL). Returns 0, or -EPIPE
 * once the client has gone away (the operation may then finish or stop, as it sees fit).
 * The stream function's return value ends the stream: it must have sent exactly one "result"
 * or "error" event; if it returns < 0 without one, an "error" event is sent for it.
 */
int api_stream_progress(struct api_stream *s, struct json_object *data);
/* A vm_progress_fn for the daemon's long operations: one progress event {"step", "detail"} on
 * the stream userdata. A client that left does not stop the operation: it finishes, unobserved. */
void api_stream_step(const char *step, const char *detail, void *userdata);
int api_stream_result(struct api_stream *s, struct json_object *data);
int api_stream_error(struct api_stream *s, const char *code, const char *message);
const struct api_caller *api_stream_caller(const struct api_stream *s);
/* Whether the client has gone away (a send failed); a keep-alive notices within seconds. */
bool api_stream_gone(struct api_stream *s);

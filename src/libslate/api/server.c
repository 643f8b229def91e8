/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api/protocol.h"
#include "api/server.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"
#include "version.h"

#define DEFAULT_MAX_CONNECTIONS 128
#define DEFAULT_IDLE_TIMEOUT_S 30
/* Request line plus headers must fit in this (MHD answers 431 otherwise). */
#define CONNECTION_MEMORY_LIMIT (64u * 1024u)

struct api_server {
	struct MHD_Daemon *mhd;
	int listen_fd;
	char *socket_path; /* unlinked on stop when we bound it */
	const struct api_route *routes;
	size_t n_routes;
	void *userdata;
	/* Streams still running on worker threads; stop waits for them. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned n_streams;
};

struct request_ctx {
	struct api_caller caller;
	bool have_caller;
	struct buf *body;
	bool body_too_large;
};

struct api_stream {
	struct api_server *server;
	struct api_caller caller;
	int wfd;
	bool finished; /* a result or error event was sent */
	bool gone;     /* the client went away */
	api_stream_fn fn;
	void *arg;
	void (*arg_free)(void *);
};

/*
 * The connection's side of a stream. It passes the worker's lines on and, while the worker is
 * quiet (waiting on libvirt, QEMU or the guest), sends a keep-alive every
 * API_STREAM_KEEPALIVE_S: the last progress event again with "waiting_s" added, so that no idle
 * timeout (ours, a proxy's, the client's) cuts a live operation, a client sees what is still
 * under way, and a client that went away is noticed while the operation runs.
 */
#define KEEPALIVE_LINE_MAX 1024u
struct stream_reader {
	int rfd;
	bool mid_line;                     /* the last byte passed on was not a newline */
	char line[KEEPALIVE_LINE_MAX];     /* the line being passed on, while it fits */
	size_t line_len;                   /* SIZE_MAX: it did not fit */
	char progress[KEEPALIVE_LINE_MAX]; /* the last progress event, without its newline */
	size_t progress_len;
	double progress_at; /* when it (or the stream's start) was passed on */
	double sent_at;     /* when anything was last passed on */
};

_printf_(2, 0) static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	(void)vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_debug("http: %s", line);
}

int api_reply_json(struct api_reply *r, unsigned status, struct json_object *obj)
{
	json_object_put(r->json);
	r->status = status;
	r->json = obj;
	return obj ? 0 : -ENOMEM;
}

int api_reply_error(struct api_reply *r, unsigned status, const char *code, const char *fmt, ...)
{
	char message[1024];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	return api_reply_json(r, status, api_error_new(code, message));
}

int api_reply_stream(struct api_reply *r, api_stream_fn fn, void *arg, void (*arg_free)(void *))
{
	r->stream = fn;
	r->stream_arg = arg;
	r->stream_arg_free = arg_free;
	return 0;
}

int api_reply_upgrade(struct api_reply *r, const char *protocol, api_upgrade_fn fn, void *arg,
                      void (*arg_free)(void *))
{
	r->upgrade = fn;
	r->upgrade_protocol = protocol;
	r->stream_arg = arg;
	r->stream_arg_free = arg_free;
	return 0;
}

struct upgrade_job {
	api_upgrade_fn fn;
	void *arg;
	void (*arg_free)(void *);
	int fd;
	char *extra;
	size_t extra_len;
	struct MHD_UpgradeResponseHandle *urh;
};

static void upgrade_job_free(struct upgrade_job *j)
{
	if (j->arg_free)
		j->arg_free(j->arg);
	free(j->extra);
	free(j);
}

static void *upgrade_worker(void *p)
{
	struct upgrade_job *j = p;
	int fl = fcntl(j->fd, F_GETFL);

	/* MHD hands over a non-blocking socket; the handler gets a plain blocking one. */
	if (fl >= 0)
		(void)fcntl(j->fd, F_SETFL, fl & ~O_NONBLOCK);
	j->fn(j->fd, j->extra ? j->extra : "", j->extra_len, j->arg);
	(void)MHD_upgrade_action(j->urh, MHD_UPGRADE_ACTION_CLOSE);
	upgrade_job_free(j);
	return NULL;
}

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
	struct upgrade_job *j = cls;
	pthread_attr_t attr;
	pthread_t tid;

	j->fd = sock;
	j->urh = urh;
	if (extra_in_size > 0) {
		j->extra = malloc(extra_in_size);
		if (j->extra) {
			memcpy(j->extra, extra_in, extra_in_size);
			j->extra_len = extra_in_size;
		}
	}
	(void)pthread_attr_init(&attr);
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&tid, &attr, upgrade_worker, j) != 0) {
		(void)MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		upgrade_job_free(j);
	}
	(void)pthread_attr_destroy(&attr);
}

static void upgrade_reply_free(struct api_reply *reply)
{
	if (reply->stream_arg_free)
		reply->stream_arg_free(reply->stream_arg);
	reply->stream_arg = NULL;
}

static enum MHD_Result queue_json(struct MHD_Connection *conn, unsigned status,
                                  struct json_object *obj);

static enum MHD_Result queue_upgrade(struct MHD_Connection *conn, struct api_reply *reply)
{
	const char *up =
	        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_UPGRADE);
	struct MHD_Response *resp;
	struct upgrade_job *j;
	enum MHD_Result ret;

	if (!up || strcasecmp(up, reply->upgrade_protocol) != 0) {
		char msg[256];
		(void)snprintf(msg, sizeof(msg),
		               "this path needs \"Connection: Upgrade\" and \"Upgrade: %s\"",
		               reply->upgrade_protocol);
		upgrade_reply_free(reply);
		return queue_json(conn, MHD_HTTP_BAD_REQUEST,
		                  api_error_new(API_ERR_BAD_REQUEST, msg));
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		upgrade_reply_free(reply);
		return MHD_NO;
	}
	*j = (struct upgrade_job){.fn = reply->upgrade,
	                          .arg = reply->stream_arg,
	                          .arg_free = reply->stream_arg_free,
	                          .fd = -1};
	reply->stream_arg = NULL;
	resp = MHD_create_response_for_upgrade(on_upgraded, j);
	if (!resp) {
		upgrade_job_free(j);
		return MHD_NO;
	}
	(void)MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, reply->upgrade_protocol);
	(void)MHD_add_response_header(resp, API_VERSION_HEADER, STRINGIFY(SLATE_API_VERSION));
	ret = MHD_queue_response(conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	return ret;
}

const char *api_request_arg(const struct api_request *req, const char *key)
{
	return MHD_lookup_connection_value(req->connection_, MHD_GET_ARGUMENT_KIND, key);
}

static int stream_send(struct api_stream *s, struct json_object *event)
{
	_cleanup_free_ char *line = NULL;
	int r;

	if (!event)
		return -ENOMEM;
	r = json_to_string_dup(event, true, &line);
	json_object_put(event);
	if (r < 0)
		return r;
	if (s->gone)
		return -EPIPE;
	if (strlen(line) > API_MAX_EVENT)
		return SLATE_ERR_TOO_LARGE;
	r = fs_write_all(s->wfd, line, strlen(line));
	if (r < 0) {
		s->gone = true;
		return r;
	}
	return 0;
}

int api_stream_progress(struct api_stream *s, struct json_object *data)
{
	struct json_object *ev = api_event_new(API_EVENT_PROGRESS, data);

	json_object_put(data);
	return stream_send(s, ev);
}

void api_stream_step(const char *step, const char *detail, void *userdata)
{
	struct json_object *o = json_object_new_object();

	if (!o || json_add_string(o, "step", step) < 0 ||
	    json_add_string(o, "detail", detail ? detail : "") < 0) {
		json_object_put(o);
		return;
	}
	(void)api_stream_progress(userdata, o);
}

int api_stream_result(struct api_stream *s, struct json_object *data)
{
	struct json_object *ev = api_event_new(API_EVENT_RESULT, data);

	json_object_put(data);
	s->finished = true;
	return stream_send(s, ev);
}

int api_stream_error(struct api_stream *s, const char *code, const char *message)
{
	_cleanup_json_ struct json_object *e = api_error_new(code, message);
	struct json_object *ev = api_event_new(API_EVENT_ERROR, e);

	s->finished = true;
	return stream_send(s, ev);
}

const struct api_caller *api_stream_caller(const struct api_stream *s)
{
	return &s->caller;
}

bool api_stream_gone(struct api_stream *s)
{
	struct pollfd p = {.fd = s->wfd};

	/* The read end closes when the connection does: the pipe's write end then reports it. */
	if (!s->gone && poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP)))
		s->gone = true;
	return s->gone;
}

static void *stream_worker(void *p)
{
	struct api_stream *s = p;
	struct api_server *server = s->server;
	int r;

	r = s->fn(s, s->arg);
	if (!s->finished) {
		if (r >= 0)
			(void)api_stream_error(s, API_ERR_INTERNAL,
			                       "operation ended without a result");
		else
			(void)api_stream_error(s, API_ERR_FAILED, slate_strerror(r));
	}
	(void)safe_close(s->wfd);
	if (s->arg_free)
		s->arg_free(s->arg);
	free(s);

	pthread_mutex_lock(&server->lock);
	server->n_streams--;
	pthread_cond_broadcast(&server->cond);
	pthread_mutex_unlock(&server->lock);
	return NULL;
}

/* Notes the lines in what is passed on, keeping the last progress event that fits. */
static void stream_track(struct stream_reader *rd, const char *p, size_t n, double now)
{
	static const char prefix[] = "{\"type\":\"" API_EVENT_PROGRESS "\"";

	rd->sent_at = now;
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\n') {
			if (rd->line_len < sizeof(rd->line))
				rd->line[rd->line_len++] = p[i];
			else
				rd->line_len = SIZE_MAX;
			continue;
		}
		if (rd->line_len != SIZE_MAX && rd->line_len >= sizeof(prefix) - 1 &&
		    memcmp(rd->line, prefix, sizeof(prefix) - 1) == 0) {
			memcpy(rd->progress, rd->line, rd->line_len);
			rd->progress_len = rd->line_len;
			rd->progress_at = now;
		}
		rd->line_len = 0;
	}
	if (n > 0)
		rd->mid_line = p[n - 1] != '\n';
}

/* The keep-alive line: the last progress event with "waiting_s", or just that. */
static ssize_t stream_keepalive(struct stream_reader *rd, char *out, size_t max, double now)
{
	_cleanup_json_ struct json_object *ev = NULL;
	_cleanup_free_ char *text = NULL;
	size_t len;

	if (rd->progress_len == 0 ||
	    json_parse_object(rd->progress, rd->progress_len, KEEPALIVE_LINE_MAX, &ev) < 0) {
		json_object_put(ev);
		ev = api_event_new(API_EVENT_PROGRESS, NULL);
	}
	if (!ev || json_add_int64(ev, "waiting_s", (int64_t)(now - rd->progress_at)) < 0 ||
	    json_to_string_dup(ev, true, &text) < 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	len = strlen(text);
	if (len > max)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	memcpy(out, text, len);
	rd->sent_at = now;
	return (ssize_t)len;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct stream_reader *rd = cls;
	struct pollfd pfd = {.fd = rd->rfd, .events = POLLIN};
	double now, wait;
	ssize_t n;
	int k;

	/* Thread per connection: blocking here only holds this connection's own thread. */
	for (;;) {
		now = time_mono_s();
		wait = rd->sent_at + API_STREAM_KEEPALIVE_S - now;
		k = poll(&pfd, 1, wait > 0 ? (int)(wait * 1000) + 1 : 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (k > 0)
			break;
		/* Quiet for a while; a keep-alive goes only between two lines. */
		if (!rd->mid_line && time_mono_s() >= rd->sent_at + API_STREAM_KEEPALIVE_S)
			return stream_keepalive(rd, out, max, time_mono_s());
	}
	do
		n = read(rd->rfd, out, max);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (n < 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	stream_track(rd, out, (size_t)n, time_mono_s());
	return n;
}

static void stream_reader_free(void *cls)
{
	struct stream_reader *rd = cls;

	/* Closing the read end makes the worker's next write fail with EPIPE. */
	(void)safe_close(rd->rfd);
	free(rd);
}

static enum MHD_Result queue_json(struct MHD_Connection *conn, unsigned status,
                                  struct json_object *obj)
{
	_cleanup_free_ char *text = NULL;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	size_t len;

	if (!obj || json_to_string_dup(obj, true, &text) < 0) {
		json_object_put(obj);
		return MHD_NO;
	}
	json_object_put(obj);
	len = strlen(text);
	resp = MHD_create_response_from_buffer(len, TAKE_PTR(text), MHD_RESPMEM_MUST_FREE);
	if (!resp)
		return MHD_NO;
	(void)MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, API_CONTENT_JSON);
	(void)MHD_add_response_header(resp, API_VERSION_HEADER, STRINGIFY(SLATE_API_VERSION));
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result queue_error(struct MHD_Connection *conn, unsigned status, const char *code,
                                   const char *message)
{
	return queue_json(conn, status, api_error_new(code, message));
}

static enum MHD_Result queue_stream(struct api_server *server, struct MHD_Connection *conn,
                                    const struct api_caller *caller, struct api_reply *reply)
{
	struct stream_reader *rd = NULL;
	struct api_stream *s = NULL;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	pthread_attr_t attr;
	pthread_t tid;
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		goto fail;
	rd = calloc(1, sizeof(*rd));
	s = calloc(1, sizeof(*s));
	if (!rd || !s) {
		(void)safe_close(p[0]);
		(void)safe_close(p[1]);
		goto fail;
	}
	rd->rfd = p[0];
	rd->progress_at = rd->sent_at = time_mono_s();
	*s = (struct api_stream){.server = server,
	                         .caller = *caller,
	                         .wfd = p[1],
	                         .fn = reply->stream,
	                         .arg = reply->stream_arg,
	                         .arg_free = reply->stream_arg_free};
	reply->stream_arg = NULL; /* owned by the stream now */

	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, rd,
	                                         stream_reader_free);
	if (!resp) {
		stream_reader_free(rd);
		rd = NULL;
		goto fail_stream;
	}
	rd = NULL;
	(void)MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, API_CONTENT_NDJSON);
	(void)MHD_add_response_header(resp, API_VERSION_HEADER, STRINGIFY(SLATE_API_VERSION));

	pthread_mutex_lock(&server->lock);
	server->n_streams++;
	pthread_mutex_unlock(&server->lock);
	(void)pthread_attr_init(&attr);
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&tid, &attr, stream_worker, s) != 0) {
		(void)pthread_attr_destroy(&attr);
		pthread_mutex_lock(&server->lock);
		server->n_streams--;
		pthread_mutex_unlock(&server->lock);
		MHD_destroy_response(resp); /* closes the read end */
		goto fail_stream;
	}
	(void)pthread_attr_destroy(&attr);

	ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;

fail_stream:
	(void)safe_close(s->wfd);
	if (s->arg_free)
		s->arg_free(s->arg);
	free(s);
	return queue_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, API_ERR_INTERNAL,
	                   "cannot start the operation");
fail:
	free(rd);
	free(s);
	if (reply->stream_arg_free)
		reply->stream_arg_free(reply->stream_arg);
	reply->stream_arg = NULL;
	return queue_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, API_ERR_INTERNAL,
	                   "cannot start the operation");
}

static int peer_caller(struct MHD_Connection *conn, struct api_caller *ret)
{
	const union MHD_ConnectionInfo *ci;
	struct ucred uc;
	socklen_t len = sizeof(uc);

	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return -EBADF;
	if (getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	if (len != sizeof(uc))
		return -EIO;
	*ret = (struct api_caller){.uid = uc.uid, .gid = uc.gid, .pid = uc.pid};
	return 0;
}

static enum MHD_Result dispatch(struct api_server *server, struct MHD_Connection *conn,
                                const char *method, const char *url, struct request_ctx *ctx)
{
	_cleanup_json_ struct json_object *body = NULL;
	struct api_reply reply = {0};
	const char *rest, *hdr;
	unsigned version;
	bool path_known = false;
	enum MHD_Result ret;
	int r;

	hdr = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, API_VERSION_HEADER);
	if (hdr && !streq(hdr, STRINGIFY(SLATE_API_VERSION))) {
		char msg[256];
		(void)snprintf(msg, sizeof(msg),
		               "client speaks API version %.16s, slated %s speaks version %d", hdr,
		               SLATE_VERSION, SLATE_API_VERSION);
		return queue_error(conn, MHD_HTTP_BAD_REQUEST, API_ERR_API_VERSION, msg);
	}
	if (api_path_split(url, &version, &rest) < 0)
		return queue_error(conn, MHD_HTTP_NOT_FOUND, API_ERR_NOT_FOUND,
		                   "paths start with an API version, e.g. /v1/version");
	if (version != SLATE_API_VERSION) {
		char msg[256];
		(void)snprintf(msg, sizeof(msg),
		               "API version %u is not served; slated %s speaks %d", version,
		               SLATE_VERSION, SLATE_API_VERSION);
		return queue_error(conn, MHD_HTTP_NOT_FOUND, API_ERR_API_VERSION, msg);
	}
	if (ctx->body_too_large)
		return queue_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, API_ERR_TOO_LARGE,
		                   "request body over the limit");
	if (ctx->body && buf_len(ctx->body) > 0) {
		r = json_parse_object((const char *)buf_ptr(ctx->body), buf_len(ctx->body),
		                      API_MAX_REQUEST_BODY, &body);
		if (r < 0) {
			char msg[256];
			(void)snprintf(msg, sizeof(msg), "request body is not a JSON object: %s",
			               slate_strerror(r));
			return queue_error(conn, MHD_HTTP_BAD_REQUEST, API_ERR_BAD_REQUEST, msg);
		}
	}

	for (size_t i = 0; i < server->n_routes; i++) {
		const struct api_route *rt = &server->routes[i];
		struct api_request req = {0};

		if (!api_route_match(rt->path, rest, req.params, &req.n_params))
			continue;
		path_known = true;
		if (!streq(rt->method, method))
			continue;

		req.method = method;
		req.path = rest;
		req.caller = ctx->caller;
		req.body = body;
		req.server = server;
		req.userdata = server->userdata;
		req.connection_ = conn;
		r = rt->handler(&req, &reply);
		if (r < 0 && !reply.json && !reply.stream && !reply.upgrade) {
			log_debug_errno(r, "%s %s failed", method, url);
			return queue_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, API_ERR_INTERNAL,
			                   slate_strerror(r));
		}
		if (reply.stream) {
			json_object_put(reply.json);
			return queue_stream(server, conn, &ctx->caller, &reply);
		}
		if (reply.upgrade) {
			json_object_put(reply.json);
			return queue_upgrade(conn, &reply);
		}
		ret = queue_json(conn, reply.status ? reply.status : MHD_HTTP_OK, reply.json);
		return ret;
	}
	if (path_known)
		return queue_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, API_ERR_METHOD,
		                   "method not allowed on this path");
	return queue_error(conn, MHD_HTTP_NOT_FOUND, API_ERR_NOT_FOUND, "no such API path");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *http_version,
                                  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct api_server *server = cls;
	struct request_ctx *ctx = *con_cls;

	if (!ctx) {
		const char *cl;

		ctx = calloc(1, sizeof(*ctx));
		if (!ctx)
			return MHD_NO;
		*con_cls = ctx;
		if (peer_caller(conn, &ctx->caller) < 0)
			/* No credentials, no service: never guess who is asking. */
			return queue_error(conn, MHD_HTTP_FORBIDDEN, API_ERR_PERMISSION,
			                   "cannot identify the caller (SO_PEERCRED)");
		ctx->have_caller = true;
		/* Refuse a declared oversize body before reading a byte of it. */
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > API_MAX_REQUEST_BODY)
			return queue_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, API_ERR_TOO_LARGE,
			                   "request body over the limit");
		return MHD_YES;
	}
	if (!ctx->have_caller)
		return MHD_NO;

	if (*upload_data_size > 0) {
		if (!ctx->body_too_large) {
			if (!ctx->body)
				ctx->body = buf_new(API_MAX_REQUEST_BODY);
			if (!ctx->body)
				return MHD_NO;
			if (buf_put(ctx->body, upload_data, *upload_data_size) < 0) {
				/* Keep draining so the reply can be sent, but keep nothing. */
				ctx->body_too_large = true;
				buf_free_secure(ctx->body);
				ctx->body = NULL;
			}
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	return dispatch(server, conn, method, url, ctx);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	struct request_ctx *ctx = *con_cls;

	if (!ctx)
		return;
	buf_free_secure(ctx->body);
	free(ctx);
	*con_cls = NULL;
}

static int bind_socket(const char *path, mode_t mode, gid_t gid, int *ret_fd)
{
	_cleanup_close_ int fd = -1;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	mode_t old;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* The caller holds the instance lock, so a socket file here is a stale one. */
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	old = umask(0177);
	r = RET_NERRNO(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
	umask(old);
	if (r < 0)
		return r;
	if (gid != (gid_t)-1 && chown(path, (uid_t)-1, gid) < 0)
		return -errno;
	if (chmod(path, mode) < 0)
		return -errno;
	if (listen(fd, SOMAXCONN) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int api_server_start(const struct api_server_config *cfg, struct api_server **ret)
{
	struct api_server *s;
	int r;

	/* A client that disconnects mid-stream must not kill the daemon. */
	(void)signal(SIGPIPE, SIG_IGN);

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->listen_fd = -1;
	s->routes = cfg->routes;
	s->n_routes = cfg->n_routes;
	s->userdata = cfg->userdata;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);

	if (cfg->listen_fd >= 0) {
		s->listen_fd = cfg->listen_fd;
	} else {
		r = bind_socket(cfg->socket_path, cfg->socket_mode, cfg->socket_gid, &s->listen_fd);
		if (r < 0)
			goto fail;
		s->socket_path = strdup(cfg->socket_path);
		if (!s->socket_path) {
			r = -ENOMEM;
			goto fail;
		}
	}

	s->mhd = MHD_start_daemon(
	        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
	                MHD_USE_ERROR_LOG | MHD_USE_ITC | MHD_ALLOW_UPGRADE,
	        0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
	        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
	        cfg->max_connections ? cfg->max_connections : DEFAULT_MAX_CONNECTIONS,
	        MHD_OPTION_CONNECTION_TIMEOUT,
	        cfg->idle_timeout_s ? cfg->idle_timeout_s : DEFAULT_IDLE_TIMEOUT_S,
	        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY_LIMIT,
	        MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL, MHD_OPTION_END);
	if (!s->mhd) {
		r = -EIO;
		goto fail;
	}
	*ret = s;
	return 0;
fail:
	api_server_stop(s);
	return r;
}

void api_server_stop(struct api_server *s)
{
	if (!s)
		return;
	if (s->mhd) {
		/* Stop accepting first, then close connections; MHD joins their threads. */
		(void)MHD_quiesce_daemon(s->mhd);
		MHD_stop_daemon(s->mhd);
	}
	/* Detached stream workers may still be finishing an operation: let them. */
	pthread_mutex_lock(&s->lock);
	while (s->n_streams > 0)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);

	if (s->socket_path) {
		(void)unlink(s->socket_path);
		free(s->socket_path);
	}
	(void)safe_close(s->listen_fd);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

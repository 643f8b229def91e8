/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The API server and client over a real unix socket: round trips, streams, SO_PEERCRED, and
 * hostile clients (garbage, half requests, oversized headers and bodies, disconnects mid-stream).
 */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/client.h"
#include "api/protocol.h"
#include "api/server.h"
#include "util/error.h"
#include "util/json.h"
#include "version.h"

struct fixture {
	char dir[64];
	char sock[128];
	struct api_server *server;
	struct api_client *client;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int slow_stream_result; /* what the slow stream's last emit returned */
static bool slow_stream_done;

static int h_echo(struct api_request *req, struct api_reply *reply)
{
	struct json_object *o = json_object_new_object();

	(void)json_add_int64(o, "uid", req->caller.uid);
	(void)json_add_int64(o, "pid", req->caller.pid);
	(void)json_add_string(o, "path", req->path);
	if (req->body)
		(void)json_add(o, "body", json_object_get(req->body));
	if (api_request_arg(req, "q"))
		(void)json_add_string(o, "q", api_request_arg(req, "q"));
	return api_reply_json(reply, 200, o);
}

static int h_fail(struct api_request *req, struct api_reply *reply)
{
	return api_reply_error(reply, 409, "conflict", "workspace %s is busy", "w1");
}

static int counting_stream(struct api_stream *s, void *arg)
{
	for (int i = 0; i < 5; i++) {
		struct json_object *o = json_object_new_object();
		(void)json_add_int64(o, "step", i);
		(void)api_stream_progress(s, o);
	}
	struct json_object *res = json_object_new_object();
	(void)json_add_int64(res, "uid", api_stream_caller(s)->uid);
	return api_stream_result(s, res);
}

static int failing_stream(struct api_stream *s, void *arg)
{
	(void)api_stream_progress(s, NULL);
	return -ENOSPC; /* no result: the server must send an error event for it */
}

static int slow_stream(struct api_stream *s, void *arg)
{
	int r = 0;

	for (int i = 0; i < 2000 && r == 0; i++) {
		struct json_object *o = json_object_new_object();
		(void)json_add_string(o, "pad",
		                      "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
		r = api_stream_progress(s, o);
		usleep(2000);
	}
	pthread_mutex_lock(&mu);
	slow_stream_result = r;
	slow_stream_done = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return api_stream_result(s, NULL);
}

static int h_stream(struct api_request *req, struct api_reply *reply)
{
	return api_reply_stream(reply, counting_stream, NULL, NULL);
}
static int h_failing_stream(struct api_request *req, struct api_reply *reply)
{
	return api_reply_stream(reply, failing_stream, NULL, NULL);
}
static int h_slow_stream(struct api_request *req, struct api_reply *reply)
{
	return api_reply_stream(reply, slow_stream, NULL, NULL);
}

static const struct api_route routes[] = {
        {"GET", "/echo", h_echo},
        {"POST", "/echo", h_echo},
        {"GET", "/fail", h_fail},
        {"GET", "/stream", h_stream},
        {"GET", "/failing-stream", h_failing_stream},
        {"GET", "/slow-stream", h_slow_stream},
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct api_server_config cfg = {.listen_fd = -1,
	                                .socket_mode = 0660,
	                                .socket_gid = (gid_t)-1,
	                                .routes = routes,
	                                .n_routes = ELEMENTSOF(routes),
	                                .idle_timeout_s = 2};

	strcpy(f->dir, "/tmp/slate-test-api.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->sock, sizeof(f->sock), "%s/s.sock", f->dir);
	cfg.socket_path = f->sock;
	assert_int_equal(api_server_start(&cfg, &f->server), 0);
	assert_int_equal(api_client_new(f->sock, &f->client), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	api_client_free(f->client);
	api_server_stop(f->server);
	/* The server removes its socket on stop. */
	assert_int_equal(access(f->sock, F_OK), -1);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void test_round_trip(void **state)
{
	struct fixture *f = *state;
	_cleanup_json_ struct json_object *reply = NULL, *body = json_object_new_object();
	struct api_error err;
	int64_t uid, pid;
	const char *path, *q;

	assert_int_equal(api_client_call(f->client, "GET", "/v1/echo?q=a%20b", NULL, NULL, NULL,
	                                 &reply, &err),
	                 0);
	assert_int_equal(json_get_int64(reply, "uid", &uid), 0);
	assert_int_equal(json_get_int64(reply, "pid", &pid), 0);
	/* SO_PEERCRED: the server sees this very process. */
	assert_int_equal(uid, getuid());
	assert_int_equal(pid, getpid());
	assert_int_equal(json_get_string(reply, "path", &path), 0);
	assert_string_equal(path, "/echo");
	assert_int_equal(json_get_string(reply, "q", &q), 0);
	assert_string_equal(q, "a b");

	json_object_put(reply);
	reply = NULL;
	(void)json_add_string(body, "name", "ws\"1");
	assert_int_equal(
	        api_client_call(f->client, "POST", "/v1/echo", body, NULL, NULL, &reply, &err), 0);
	struct json_object *b;
	const char *name;
	assert_int_equal(json_get_object(reply, "body", &b), 0);
	assert_int_equal(json_get_string(b, "name", &name), 0);
	assert_string_equal(name, "ws\"1");
}

static void test_errors(void **state)
{
	struct fixture *f = *state;
	struct json_object *reply = NULL;
	struct api_error err;

	assert_true(api_client_call(f->client, "GET", "/v1/fail", NULL, NULL, NULL, &reply, &err) <
	            0);
	assert_null(reply);
	assert_int_equal(err.status, 409);
	assert_string_equal(err.kind, "conflict");
	assert_string_equal(err.message, "workspace w1 is busy");

	assert_true(api_client_call(f->client, "GET", "/v1/nope", NULL, NULL, NULL, &reply, &err) <
	            0);
	assert_int_equal(err.status, 404);
	assert_string_equal(err.kind, API_ERR_NOT_FOUND);

	assert_true(api_client_call(f->client, "DELETE", "/v1/echo", NULL, NULL, NULL, &reply,
	                            &err) < 0);
	assert_int_equal(err.status, 405);

	/* A version the daemon does not serve is named as such, not as a parse error. */
	assert_int_equal(
	        api_client_call(f->client, "GET", "/v9/echo", NULL, NULL, NULL, &reply, &err),
	        SLATE_ERR_PROTOCOL_VERSION);
	assert_string_equal(err.kind, API_ERR_API_VERSION);
	assert_non_null(strstr(err.message, "API version 9"));
}

static int progress_count;
static int on_progress(struct json_object *ev, void *userdata)
{
	int64_t step;

	if (json_get_int64(ev, "step", &step) == 0)
		assert_int_equal(step, progress_count);
	progress_count++;
	return 0;
}

static void test_stream(void **state)
{
	struct fixture *f = *state;
	_cleanup_json_ struct json_object *result = NULL;
	struct api_error err;
	const char *type;
	int64_t uid;

	progress_count = 0;
	assert_int_equal(api_client_call(f->client, "GET", "/v1/stream", NULL, on_progress, NULL,
	                                 &result, &err),
	                 0);
	assert_int_equal(progress_count, 5);
	assert_int_equal(json_get_string(result, "type", &type), 0);
	assert_string_equal(type, "result");
	assert_int_equal(json_get_int64(result, "uid", &uid), 0);
	assert_int_equal(uid, getuid());

	progress_count = 0;
	json_object_put(result);
	result = NULL;
	assert_true(api_client_call(f->client, "GET", "/v1/failing-stream", NULL, on_progress, NULL,
	                            &result, &err) < 0);
	assert_int_equal(progress_count, 1);
	assert_non_null(strstr(err.message, "space"));
}

/* A raw connection for hostile-client tests. */
static int raw_connect(const struct fixture *f)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	strcpy(sa.sun_path, f->sock);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Sends req and returns the status code of the answer (0 if the server just closed). */
static int raw_exchange(const struct fixture *f, const char *req, size_t len)
{
	char resp[4096] = {0};
	size_t got = 0;
	int fd = raw_connect(f), status = 0;

	if (len)
		(void)send(fd, req, len, MSG_NOSIGNAL);
	(void)shutdown(fd, SHUT_WR);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 5000) <= 0)
			break;
		ssize_t n = read(fd, resp + got, sizeof(resp) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got >= sizeof(resp) - 1)
			break;
	}
	close(fd);
	if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1)
		status = 0;
	return status;
}

static void assert_still_serving(struct fixture *f)
{
	_cleanup_json_ struct json_object *reply = NULL;
	struct api_error err;

	assert_int_equal(
	        api_client_call(f->client, "GET", "/v1/echo", NULL, NULL, NULL, &reply, &err), 0);
}

static void test_hostile_clients(void **state)
{
	struct fixture *f = *state;
	static const char garbage[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n";
	static const char half[] = "GET /v1/echo HTTP/1.1\r\nHost: x\r\n";
	static const char bad_version_hdr[] =
	        "GET /v1/echo HTTP/1.1\r\nHost: x\r\n" API_VERSION_HEADER ": 7\r\n\r\n";
	static const char smuggle[] = "POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
	                              "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
	static const char big_declared[] = "POST /v1/echo HTTP/1.1\r\nHost: x\r\n"
	                                   "Content-Length: 100000000\r\n\r\n{}";
	static const char not_json[] = "POST /v1/echo HTTP/1.1\r\nHost: x\r\n"
	                               "Content-Length: 4\r\n\r\nnope";
	char *big_header;
	int status;

	status = raw_exchange(f, garbage, sizeof(garbage) - 1);
	assert_true(status == 0 || status == 400);
	assert_still_serving(f);

	/* Half a request, then the client goes away. */
	(void)raw_exchange(f, half, sizeof(half) - 1);
	assert_still_serving(f);

	assert_int_equal(raw_exchange(f, bad_version_hdr, sizeof(bad_version_hdr) - 1), 400);
	assert_int_equal(raw_exchange(f, big_declared, sizeof(big_declared) - 1), 413);
	assert_int_equal(raw_exchange(f, not_json, sizeof(not_json) - 1), 400);
	status = raw_exchange(f, smuggle, sizeof(smuggle) - 1);
	assert_true(status == 400 || status == 200); /* MHD lets chunked win, never both */
	assert_still_serving(f);

	/* Headers far over the per-connection memory limit. */
	big_header = malloc(300 * 1024);
	assert_non_null(big_header);
	strcpy(big_header, "GET /v1/echo HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(big_header + strlen(big_header), 'a', 290 * 1024);
	big_header[strlen("GET /v1/echo HTTP/1.1\r\nHost: x\r\nX-Big: ") + 290 * 1024] = '\0';
	strcat(big_header, "\r\n\r\n");
	status = raw_exchange(f, big_header, strlen(big_header));
	assert_true(status == 0 || status == 431 || status == 413 || status == 400);
	free(big_header);
	assert_still_serving(f);

	/* An oversized body without a Content-Length (chunked) is cut off at the limit. */
	{
		int fd = raw_connect(f);
		char chunk[64];
		static const char head[] = "POST /v1/echo HTTP/1.1\r\nHost: x\r\n"
		                           "Transfer-Encoding: chunked\r\n\r\n";
		char *data = malloc(64 * 1024);
		memset(data, ' ', 64 * 1024);
		(void)send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL);
		for (int i = 0; i < 20; i++) { /* 1.25 MiB */
			snprintf(chunk, sizeof(chunk), "%x\r\n", 64 * 1024);
			(void)send(fd, chunk, strlen(chunk), MSG_NOSIGNAL);
			(void)send(fd, data, 64 * 1024, MSG_NOSIGNAL);
			(void)send(fd, "\r\n", 2, MSG_NOSIGNAL);
		}
		(void)send(fd, "0\r\n\r\n", 5, MSG_NOSIGNAL);
		char resp[256] = {0};
		struct pollfd p = {.fd = fd, .events = POLLIN};
		assert_true(poll(&p, 1, 5000) > 0);
		assert_true(read(fd, resp, sizeof(resp) - 1) > 0);
		assert_non_null(strstr(resp, " 413 "));
		close(fd);
		free(data);
	}
	assert_still_serving(f);
}

static void test_disconnect_mid_stream(void **state)
{
	struct fixture *f = *state;
	static const char req[] = "GET /v1/slow-stream HTTP/1.1\r\nHost: x\r\n\r\n";
	char resp[512];
	int fd = raw_connect(f);

	slow_stream_done = false;
	assert_int_equal(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	assert_true(read(fd, resp, sizeof(resp)) > 0); /* the stream has started */
	close(fd);

	/* The operation learns the client left (-EPIPE) instead of crashing the daemon. */
	pthread_mutex_lock(&mu);
	while (!slow_stream_done)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	assert_int_equal(slow_stream_result, -EPIPE);
	assert_still_serving(f);
}

static void test_unreachable(void **state)
{
	_cleanup_(api_client_freep) struct api_client *c = NULL;
	struct json_object *reply = NULL;
	struct api_error err;

	assert_int_equal(api_client_new("/nonexistent/slated.sock", &c), 0);
	assert_int_equal(api_client_call(c, "GET", "/v1/version", NULL, NULL, NULL, &reply, &err),
	                 -ECONNREFUSED);
	/* The message names the socket and how to start the daemon. */
	assert_non_null(strstr(err.message, "/nonexistent/slated.sock"));
	assert_non_null(strstr(err.message, "slated"));
}

/*
 * A user the socket's mode keeps out is told so (slate(1), "DESCRIPTION"): permission denied, the socket's
 * group, and no advice to start a slated that runs. Needs root, to be someone else after a fork.
 */
static void test_permission_denied(void **state)
{
	struct fixture *f = *state;
	struct group *gr = getgrgid(0);
	char want[128];
	pid_t pid;
	int status;

	if (geteuid() != 0)
		skip();
	assert_non_null(gr);
	(void)snprintf(want, sizeof(want), "permission denied: the socket is mode 0660, group %s",
	               gr->gr_name);
	assert_int_equal(chmod(f->dir, 0755), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		_cleanup_(api_client_freep) struct api_client *c = NULL;
		struct json_object *reply = NULL;
		struct api_error err;
		int r;

		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(2);
		if (api_client_new(f->sock, &c) < 0)
			_exit(3);
		r = api_client_call(c, "GET", "/echo", NULL, NULL, NULL, &reply, &err);
		fprintf(stderr, "as uid 65534: %d %s\n", r, err.message);
		_exit(r == -EACCES && strstr(err.message, want) &&
		                      !strstr(err.message, "start it with")
		              ? 0
		              : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* A server that answers with another API version: the client refuses it by name. */
static void *fake_daemon(void *p)
{
	int lfd = *(int *)p, fd;
	char buf[2048];
	static const char resp[] =
	        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" API_VERSION_HEADER
	        ": 2\r\nContent-Length: 2\r\n"
	        "Connection: close\r\n\r\n{}";

	fd = accept(lfd, NULL, NULL);
	if (fd >= 0) {
		(void)read(fd, buf, sizeof(buf));
		(void)send(fd, resp, sizeof(resp) - 1, MSG_NOSIGNAL);
		close(fd);
	}
	return NULL;
}

static void test_version_mismatch(void **state)
{
	struct fixture *f = *state;
	_cleanup_(api_client_freep) struct api_client *c = NULL;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct json_object *reply = NULL;
	struct api_error err;
	pthread_t t;
	int lfd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/fake.sock", f->dir);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	assert_int_equal(pthread_create(&t, NULL, fake_daemon, &lfd), 0);
	assert_int_equal(api_client_new(sa.sun_path, &c), 0);
	assert_int_equal(api_client_call(c, "GET", "/v1/version", NULL, NULL, NULL, &reply, &err),
	                 SLATE_ERR_PROTOCOL_VERSION);
	assert_non_null(strstr(err.message, "API version 2"));
	pthread_join(t, NULL);
	close(lfd);
	unlink(sa.sun_path);
}

static void test_path_split(void **state)
{
	static const struct {
		const char *path;
		int ok;
		unsigned version;
		const char *rest;
	} cases[] = {
	        {"/v1/version", 1, 1, "/version"},
	        {"/v1", 1, 1, "/"},
	        {"/v12/x/y", 1, 12, "/x/y"},
	        {"/v0/x", 0, 0, NULL},
	        {"/v01/x", 0, 0, NULL},
	        {"/v/x", 0, 0, NULL},
	        {"/v1x", 0, 0, NULL},
	        {"/v99999/x", 0, 0, NULL},
	        {"v1/x", 0, 0, NULL},
	        {"", 0, 0, NULL},
	        {"/v-1/x", 0, 0, NULL},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		unsigned v = 77;
		const char *rest = NULL;
		int r = api_path_split(cases[i].path, &v, &rest);
		if (cases[i].ok) {
			assert_int_equal(r, 0);
			assert_int_equal(v, cases[i].version);
			assert_string_equal(rest, cases[i].rest);
		} else {
			assert_int_equal(r, SLATE_ERR_INVALID_FORMAT);
			assert_int_equal(v, 77); /* untouched on failure */
			assert_null(rest);
		}
	}
}

static void test_route_match(void **state)
{
	static const struct {
		const char *pattern, *path;
		int match;
		size_t n;
		const char *p0, *p1;
	} cases[] = {
	        {"/version", "/version", 1, 0, NULL, NULL},
	        {"/version", "/version/", 0, 0, NULL, NULL},
	        {"/version", "/versions", 0, 0, NULL, NULL},
	        {"/workspaces/:name", "/workspaces/dev", 1, 1, "dev", NULL},
	        {"/workspaces/:name", "/workspaces/", 0, 0, NULL, NULL},
	        {"/workspaces/:name", "/workspaces/..", 0, 0, NULL, NULL},
	        {"/workspaces/:name", "/workspaces/.", 0, 0, NULL, NULL},
	        {"/workspaces/:name", "/workspaces/a/b", 0, 0, NULL, NULL},
	        {"/workspaces/:name/reset", "/workspaces/dev/reset", 1, 1, "dev", NULL},
	        {"/workspaces/:name/reset", "/workspaces/dev/wipe", 0, 0, NULL, NULL},
	        {"/w/:name/c/:id/revert", "/w/x/c/17-1/revert", 1, 2, "x", "17-1"},
	        {"/w/:name", "//", 0, 0, NULL, NULL},
	};
	char params[API_MAX_PARAMS][API_PARAM_MAX];
	char long_path[600] = "/workspaces/";

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		size_t n = 99;
		int m = api_route_match(cases[i].pattern, cases[i].path, params, &n);
		assert_int_equal(m, cases[i].match);
		if (!m) {
			assert_int_equal(n, 99);
			continue;
		}
		assert_int_equal(n, cases[i].n);
		if (cases[i].p0)
			assert_string_equal(params[0], cases[i].p0);
		if (cases[i].p1)
			assert_string_equal(params[1], cases[i].p1);
	}
	/* A segment longer than a parameter may be is no match, never a truncated one. */
	memset(long_path + strlen(long_path), 'a', 300);
	size_t n = 0;
	assert_int_equal(api_route_match("/workspaces/:name", long_path, params, &n), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_path_split),
	        cmocka_unit_test(test_route_match),
	        cmocka_unit_test(test_unreachable),
	        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_hostile_clients, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_disconnect_mid_stream, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_version_mismatch, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_permission_denied, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

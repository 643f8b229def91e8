/* SPDX-License-Identifier: GPL-2.0-or-later */
/* CDP calls on a target's WebSocket, and what slated asks of a browser (cdp.h). */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "browser/cdp.h"
#include "util/json.h"
#include "util/time.h"

static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

struct cdp_conn {
	struct cdp_ws *ws;
	int64_t next_id;
	const char *watch;           /* an event to keep, or NULL */
	struct json_object *watched; /* its params, once it came */
	bool watched_seen;
};

static int64_t deadline_for(int timeout_ms)
{
	return time_mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
}

int cdp_conn_open(int fd, const char *path, int timeout_ms, struct cdp_conn **ret,
                  struct slate_error *err)
{
	struct cdp_conn *c = calloc(1, sizeof(*c));
	int k;

	if (!c) {
		safe_close(fd);
		return -ENOMEM;
	}
	k = cdp_ws_connect(fd, path, deadline_for(timeout_ms), &c->ws, err);
	if (k < 0) {
		free(c);
		return k;
	}
	c->next_id = 1;
	*ret = c;
	return 0;
}

void cdp_conn_free(struct cdp_conn *c)
{
	if (!c)
		return;
	cdp_ws_free(c->ws);
	json_object_put(c->watched);
	free(c);
}

void cdp_watch(struct cdp_conn *c, const char *method)
{
	c->watch = method;
	c->watched_seen = false;
	json_object_put(c->watched);
	c->watched = NULL;
}

/*
 * Reads messages until the reply to id (id > 0) or the watched event (id 0). Returns 0 and, for a
 * reply, the message in *ret_msg.
 */
static int read_until(struct cdp_conn *c, int64_t id, int64_t deadline_ms,
                      struct json_object **ret_msg, struct slate_error *err)
{
	for (;;) {
		_cleanup_free_ char *text = NULL;
		_cleanup_json_ struct json_object *msg = NULL;
		struct json_object *params = NULL;
		const char *method;
		size_t len;
		int64_t got;
		uint8_t op;
		int k;

		if (id == 0 && c->watched_seen)
			return 0;
		k = cdp_ws_recv(c->ws, &text, &len, &op, deadline_ms, err);
		if (k < 0)
			return k;
		if (op != CDP_WS_TEXT)
			return slate_error_set(err, -EPROTO, "a binary message from the browser");
		k = json_parse_object(text, len, CDP_WS_MAX_MESSAGE, &msg);
		if (k < 0)
			return slate_error_set(err, k,
			                       "a message from the browser that is not JSON");
		if (json_get_int64(msg, "id", &got) == 0) {
			if (id > 0 && got == id) {
				*ret_msg = TAKE_PTR(msg);
				return 0;
			}
			continue; /* a reply to an earlier call that gave up */
		}
		if (json_get_string(msg, "method", &method) < 0)
			continue;
		if (c->watch && !c->watched_seen && streq(method, c->watch)) {
			(void)json_get_object(msg, "params", &params);
			c->watched = params ? json_object_get(params) : NULL;
			c->watched_seen = true;
		}
	}
}

/* Sends {"id","method","params"} with the next id; returns the id or an error. */
static int64_t send_call(struct cdp_conn *c, const char *method, struct json_object *params,
                         int64_t deadline_ms, struct slate_error *err)
{
	_cleanup_json_ struct json_object *req = json_object_new_object();
	_cleanup_free_ char *text = NULL;
	int64_t id = c->next_id++;
	int k;

	if (!req || json_add_int64(req, "id", id) < 0 || json_add_string(req, "method", method) < 0)
		return -ENOMEM;
	if (params && json_add(req, "params", json_object_get(params)) < 0)
		return -ENOMEM;
	k = json_to_string_dup(req, false, &text);
	if (k < 0)
		return k;
	k = cdp_ws_send(c->ws, CDP_WS_TEXT, text, strlen(text), deadline_ms, err);
	return k < 0 ? k : id;
}

int64_t cdp_send(struct cdp_conn *c, const char *method, struct json_object *params, int timeout_ms,
                 struct slate_error *err)
{
	int64_t id = send_call(c, method, params, deadline_for(timeout_ms), err);

	return id < 0 ? slate_error_wrap(err, (int)id, "%s", method) : id;
}

int cdp_next(struct cdp_conn *c, struct json_object **ret_msg, int timeout_ms,
             struct slate_error *err)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	uint8_t op;
	int k;

	k = cdp_ws_recv(c->ws, &text, &len, &op, deadline_for(timeout_ms), err);
	if (k < 0)
		return k;
	if (op != CDP_WS_TEXT)
		return slate_error_set(err, -EPROTO, "a binary message from the browser");
	k = json_parse_object(text, len, CDP_WS_MAX_MESSAGE, ret_msg);
	if (k < 0)
		return slate_error_set(err, k, "a message from the browser that is not JSON");
	return 1;
}

int cdp_conn_fd(const struct cdp_conn *c)
{
	return cdp_ws_fd(c->ws);
}

int cdp_call_json(struct cdp_conn *c, const char *method, struct json_object *params,
                  struct json_object **ret_result, int timeout_ms, struct slate_error *err)
{
	_cleanup_json_ struct json_object *reply = NULL;
	struct json_object *e, *result;
	int64_t deadline = deadline_for(timeout_ms), id;
	int k;

	id = send_call(c, method, params, deadline, err);
	k = id < 0 ? (int)id : read_until(c, id, deadline, &reply, err);
	if (k < 0)
		return slate_error_wrap(err, k, "%s", method);
	if (json_get_object(reply, "error", &e) == 0) {
		const char *m = "no message";
		int64_t code = 0;
		(void)json_get_string(e, "message", &m);
		(void)json_get_int64(e, "code", &code);
		return slate_error_set(err, -EREMOTEIO, "%s: the browser says: %s (%lld)", method,
		                       m, (long long)code);
	}
	if (json_get_object(reply, "result", &result) < 0)
		return slate_error_set(err, -EPROTO, "%s: a reply with neither result nor error",
		                       method);
	if (ret_result)
		*ret_result = json_object_get(result);
	return 0;
}

int cdp_call(struct cdp_conn *c, const char *method, const char *params_json,
             struct json_object **ret_result, int timeout_ms, struct slate_error *err)
{
	_cleanup_json_ struct json_object *params = NULL;

	if (params_json &&
	    json_parse_object(params_json, strlen(params_json), CDP_WS_MAX_MESSAGE, &params) < 0)
		return slate_error_set(err, -EINVAL, "%s: params are not a JSON object", method);
	return cdp_call_json(c, method, params, ret_result, timeout_ms, err);
}

int cdp_wait_event(struct cdp_conn *c, struct json_object **ret_params, int timeout_ms,
                   struct slate_error *err)
{
	int k;

	if (!c->watch)
		return slate_error_set(err, -EINVAL, "no event is watched");
	k = read_until(c, 0, deadline_for(timeout_ms), NULL, err);
	if (k < 0)
		return slate_error_wrap(err, k, "waiting for %s", c->watch);
	if (ret_params)
		*ret_params = c->watched ? json_object_get(c->watched) : NULL;
	return 0;
}

/* ---- through a dial callback ---- */

static int remaining_ms(int64_t deadline_ms)
{
	int64_t left = deadline_ms - time_mono_ms();
	return left <= 0 ? 1 : left > INT32_MAX ? INT32_MAX : (int)left;
}

/* One HTTP request on a fresh stream; a 200 whose body is JSON, parsed into *ret. */
static int http_json(cdp_dial_fn dial, void *ud, const char *method, const char *path,
                     int64_t deadline_ms, struct json_object **ret, struct slate_error *err)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *body = NULL;
	unsigned status;
	size_t len;
	int k;

	k = dial(ud, &fd, err);
	if (k < 0)
		return slate_error_wrap(err, k, "connecting to the browser");
	k = cdp_http_request(fd, method, path, deadline_ms, &status, &body, &len, err);
	if (k < 0)
		return k;
	if (status != 200)
		return slate_error_set(err, -EPROTO, "%s %s: HTTP %u from the browser", method,
		                       path, status);
	k = json_parse_bounded(body, len, CDP_HTTP_MAX_BODY, ret);
	if (k < 0)
		return slate_error_set(err, k, "%s %s: the browser's answer is not JSON", method,
		                       path);
	return 0;
}

int cdp_version(cdp_dial_fn dial, void *ud, struct json_object **ret, int timeout_ms,
                struct slate_error *err)
{
	_cleanup_json_ struct json_object *v = NULL;
	int k;

	k = http_json(dial, ud, "GET", "/json/version", deadline_for(timeout_ms), &v, err);
	if (k < 0)
		return k;
	if (!json_object_is_type(v, json_type_object))
		return slate_error_set(err, -EPROTO, "/json/version is not a JSON object");
	*ret = TAKE_PTR(v);
	return 0;
}

/* The path of a target's webSocketDebuggerUrl ("ws://HOST/devtools/page/ID"). */
static int target_path(struct json_object *t, char **ret, struct slate_error *err)
{
	const char *url, *p;

	if (json_get_string(t, "webSocketDebuggerUrl", &url) < 0)
		return slate_error_set(err, -EPROTO, "a page target without webSocketDebuggerUrl");
	if (strncmp(url, "ws://", 5) != 0 || !(p = strchr(url + 5, '/')) ||
	    strncmp(p, "/devtools/", 10) != 0)
		return slate_error_set(err, -EPROTO, "an unexpected webSocketDebuggerUrl: %.200s",
		                       url);
	for (const char *q = p; *q; q++)
		if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
			return slate_error_set(err, -EPROTO,
			                       "an unexpected webSocketDebuggerUrl: %.200s", url);
	*ret = strdup(p);
	return *ret ? 0 : -ENOMEM;
}

/* A CDP session on the first page target, made when there is none. */
static int page_open(cdp_dial_fn dial, void *ud, int64_t deadline_ms, struct cdp_conn **ret,
                     struct slate_error *err)
{
	_cleanup_json_ struct json_object *list = NULL, *made = NULL;
	_cleanup_free_ char *path = NULL;
	struct json_object *page = NULL;
	int fd = -1, k;

	k = http_json(dial, ud, "GET", "/json/list", deadline_ms, &list, err);
	if (k < 0)
		return k;
	if (!json_object_is_type(list, json_type_array))
		return slate_error_set(err, -EPROTO, "/json/list is not a JSON array");
	for (size_t i = 0; i < json_object_array_length(list) && !page; i++) {
		struct json_object *t = json_object_array_get_idx(list, i);
		const char *type;
		if (json_object_is_type(t, json_type_object) &&
		    json_get_string(t, "type", &type) == 0 && streq(type, "page"))
			page = t;
	}
	if (!page) {
		/* PUT: Chromium 111 and later refuse GET here. */
		k = http_json(dial, ud, "PUT", "/json/new?about:blank", deadline_ms, &made, err);
		if (k < 0)
			return k;
		if (!json_object_is_type(made, json_type_object))
			return slate_error_set(err, -EPROTO, "/json/new is not a JSON object");
		page = made;
	}
	k = target_path(page, &path, err);
	if (k < 0)
		return k;
	k = dial(ud, &fd, err);
	if (k < 0)
		return slate_error_wrap(err, k, "connecting to the browser");
	return cdp_conn_open(fd, path, remaining_ms(deadline_ms), ret, err);
}

int cdp_page_open(cdp_dial_fn dial, void *ud, int timeout_ms, struct cdp_conn **ret,
                  struct slate_error *err)
{
	return page_open(dial, ud, deadline_for(timeout_ms), ret, err);
}

int cdp_screenshot(cdp_dial_fn dial, void *ud, uint8_t **ret_png, size_t *ret_len, int timeout_ms,
                   struct slate_error *err)
{
	_cleanup_(cdp_conn_freep) struct cdp_conn *c = NULL;
	_cleanup_json_ struct json_object *result = NULL;
	_cleanup_free_ uint8_t *png = NULL;
	int64_t deadline = deadline_for(timeout_ms);
	const char *data, *end;
	size_t len, cap, png_len;
	int k;

	k = page_open(dial, ud, deadline, &c, err);
	if (k < 0)
		return slate_error_wrap(err, k, "screenshot");
	k = cdp_call(c, "Page.captureScreenshot", "{\"format\":\"png\"}", &result,
	             remaining_ms(deadline), err);
	if (k < 0)
		return slate_error_wrap(err, k, "screenshot");
	if (json_get_string(result, "data", &data) < 0)
		return slate_error_set(err, -EPROTO, "screenshot: no data in the browser's reply");
	len = strlen(data);
	cap = len / 4 * 3 + 3;
	png = malloc(cap);
	if (!png)
		return -ENOMEM;
	if (sodium_base642bin(png, cap, data, len, NULL, &png_len, &end,
	                      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    end != data + len)
		return slate_error_set(err, -EPROTO,
		                       "screenshot: the browser's data is not base64");
	if (png_len < sizeof(png_signature) || memcmp(png, png_signature, 8) != 0)
		return slate_error_set(err, -EPROTO, "screenshot: the browser's data is not a PNG");
	*ret_png = TAKE_PTR(png);
	*ret_len = png_len;
	return 0;
}

int cdp_navigate(cdp_dial_fn dial, void *ud, const char *url, char **ret_title, int timeout_ms,
                 struct slate_error *err)
{
	_cleanup_(cdp_conn_freep) struct cdp_conn *c = NULL;
	_cleanup_json_ struct json_object *params = json_object_new_object(), *nav = NULL,
	                                  *eval = NULL;
	int64_t deadline = deadline_for(timeout_ms);
	struct json_object *value;
	const char *failed, *title;
	int k;

	if (!params)
		return -ENOMEM;
	k = page_open(dial, ud, deadline, &c, err);
	if (k < 0)
		return slate_error_wrap(err, k, "navigate");
	k = cdp_call(c, "Page.enable", NULL, NULL, remaining_ms(deadline), err);
	if (k < 0)
		return slate_error_wrap(err, k, "navigate");
	/* Watched from before the call: the load event may come before navigate's reply. */
	cdp_watch(c, "Page.loadEventFired");
	if (json_add_string(params, "url", url) < 0)
		return -ENOMEM;
	k = cdp_call_json(c, "Page.navigate", params, &nav, remaining_ms(deadline), err);
	if (k < 0)
		return slate_error_wrap(err, k, "navigate");
	if (json_get_string(nav, "errorText", &failed) == 0)
		return slate_error_set(err, -EREMOTEIO, "navigate to %s: %s", url, failed);
	k = cdp_wait_event(c, NULL, remaining_ms(deadline), err);
	if (k < 0)
		return slate_error_wrap(err, k, "navigate to %s", url);
	if (!ret_title)
		return 0;
	k = cdp_call(c, "Runtime.evaluate",
	             "{\"expression\":\"document.title\",\"returnByValue\":true}", &eval,
	             remaining_ms(deadline), err);
	if (k < 0)
		return slate_error_wrap(err, k, "navigate: reading the title");
	if (json_get_object(eval, "exceptionDetails", &value) == 0 ||
	    json_get_object(eval, "result", &value) < 0 ||
	    json_get_string(value, "value", &title) < 0)
		return slate_error_set(err, -EPROTO, "navigate: document.title is not a string");
	*ret_title = strdup(title);
	return *ret_title ? 0 : -ENOMEM;
}

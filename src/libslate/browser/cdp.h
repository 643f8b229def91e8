/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A small Chrome DevTools Protocol client (doc/browser.md, "CDP client") for the browser VM of a
 * workspace (issue 24): slated reaches Chromium's DevTools endpoint through byte streams, a new
 * one per HTTP request or WebSocket, which a dial callback opens. Three layers, each usable alone:
 *
 *   - HTTP/1.1: one request per connection ("Connection: close"), its response head read with the
 *     egress proxy's strict parser (proxy/http.h), at most CDP_HTTP_MAX_HEAD bytes of head and
 *     CDP_HTTP_MAX_BODY of body (Content-Length, chunked, or until the server closes);
 *   - WebSocket (RFC 6455), client side: the upgrade, masked frames out, unmasked frames in
 *     (7-, 16- and 64-bit lengths, fragmented messages, ping answered with pong, close), messages
 *     up to CDP_WS_MAX_MESSAGE (a screenshot is one base64 string);
 *   - CDP: numbered calls whose replies are matched by id, events skipped (or watched for one).
 *
 * Everything that reads or writes takes a deadline and polls: a browser that stops answering ends
 * a call with -ETIMEDOUT. The peer (the browser VM) is not trusted: every length is checked before
 * memory is allocated for it. Functions return >= 0 or a negative errno / SLATE_ERR_* code and say
 * why in err (may be NULL). Deadlines are time_mono_ms() values (util/time.h).
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proxy/http.h"
#include "util/error.h"
#include "util/macro.h"

#define CDP_HTTP_MAX_HEAD (16u * 1024u)
#define CDP_HTTP_MAX_BODY (1u * 1024u * 1024u)
#define CDP_WS_MAX_MESSAGE (64u * 1024u * 1024u)
/* The Host every request names: Chromium builds webSocketDebuggerUrl from it, and accepts only
 * an IP address or localhost there (DNS rebinding). */
#define CDP_HOST "127.0.0.1:9222"

/* ---- Deadline I/O on a connected stream socket ---- */

/* Writes all n bytes. -ETIMEDOUT past the deadline, -EPIPE (never SIGPIPE) when the peer left. */
int cdp_io_write(int fd, const void *p, size_t n, int64_t deadline_ms, struct slate_error *err);
/* Reads what is there, at most n bytes: > 0 bytes read, 0 at end of file, or -ETIMEDOUT. */
ssize_t cdp_io_read(int fd, void *p, size_t n, int64_t deadline_ms, struct slate_error *err);

/* ---- HTTP/1.1 responses ---- */

/*
 * Reads one response incrementally: feed it what arrives, tell it when the server closed. With
 * head_only (the WebSocket upgrade) it stops after the head and consumes nothing beyond it.
 */
struct cdp_http_reader {
	int state;
	bool head_only;
	const char *method; /* the request's: a response to HEAD has no body */
	struct buf *in;     /* the head so far (at most CDP_HTTP_MAX_HEAD bytes) */
	struct http_reader hr;
	struct http_head *head;
	uint64_t remaining; /* Content-Length bytes still to come */
	struct http_chunked ck;
	char *body; /* NUL-terminated */
	size_t body_len, body_cap;
};
/* Sets r up for a response to a request with method. Returns 0 or -ENOMEM. */
int cdp_http_reader_init(struct cdp_http_reader *r, const char *method, bool head_only);
void cdp_http_reader_done(struct cdp_http_reader *r);
/*
 * Advances through the len bytes at p; *ret_consumed gets how many it used (all of them unless
 * the response ended inside p). Returns 1 when the response is complete, 0 when more may follow,
 * or an error: SLATE_ERR_INVALID_FORMAT (a malformed head or chunked body), SLATE_ERR_TOO_LARGE
 * (over CDP_HTTP_MAX_HEAD or CDP_HTTP_MAX_BODY), -ENOMEM.
 */
int cdp_http_reader_feed(struct cdp_http_reader *r, const uint8_t *p, size_t len,
                         size_t *ret_consumed, struct slate_error *err);
/* The server closed: returns 1 when that ends the response (a body until close), else an error
 * (SLATE_ERR_MESSAGE_INCOMPLETE). */
int cdp_http_reader_eof(struct cdp_http_reader *r, struct slate_error *err);
/* The complete response's status and head (borrowed). */
unsigned cdp_http_reader_status(const struct cdp_http_reader *r);
const struct http_head *cdp_http_reader_head(const struct cdp_http_reader *r);

/*
 * Sends "METHOD path HTTP/1.1" with Host: CDP_HOST and Connection: close on fd, and reads the
 * response to its end. *ret_status gets the status and *ret_body (caller frees, NUL-terminated,
 * no interior NUL checked) the body, *ret_len its length (may be NULL). The status is not judged.
 * path must start with '/' and hold only visible ASCII (-EINVAL).
 */
int cdp_http_request(int fd, const char *method, const char *path, int64_t deadline_ms,
                     unsigned *ret_status, char **ret_body, size_t *ret_len,
                     struct slate_error *err);

/* ---- WebSocket frames (RFC 6455 section 5) ---- */

enum {
	CDP_WS_CONTINUATION = 0x0,
	CDP_WS_TEXT = 0x1,
	CDP_WS_BINARY = 0x2,
	CDP_WS_CLOSE = 0x8,
	CDP_WS_PING = 0x9,
	CDP_WS_PONG = 0xa,
};
#define CDP_WS_MAX_HEAD 14u
#define CDP_WS_MAX_CONTROL 125u

struct cdp_ws_frame {
	bool fin;
	uint8_t opcode;
	bool masked;
	uint8_t mask[4];
	uint64_t len;    /* payload bytes */
	size_t head_len; /* 2 to 14 */
};

/* Encodes a frame head into out; mask NULL: an unmasked frame. Returns its length. */
size_t cdp_ws_frame_encode(uint8_t out[CDP_WS_MAX_HEAD], uint8_t opcode, bool fin,
                           const uint8_t *mask, uint64_t len);
/*
 * Decodes a frame head from the len bytes at p. Returns 1 and *ret, 0 when incomplete, or
 * SLATE_ERR_INVALID_FORMAT: RSV bits set (no extension is negotiated), an unknown opcode, a
 * fragmented or over-125-byte control frame, a 64-bit length with its top bit set, or a length
 * not in its shortest form.
 */
int cdp_ws_frame_decode(const uint8_t *p, size_t len, struct cdp_ws_frame *ret,
                        struct slate_error *err);
/* XORs the n bytes at p with mask, starting at byte offset of the payload. */
void cdp_ws_mask(uint8_t *p, size_t n, const uint8_t mask[4], uint64_t offset);

/* What the frame reader hands out: a whole message, or a control frame. */
struct cdp_ws_event {
	uint8_t opcode; /* CDP_WS_TEXT, CDP_WS_BINARY, CDP_WS_PING, CDP_WS_PONG, CDP_WS_CLOSE */
	char *data; /* messages: the payload, NUL-terminated (caller frees: cdp_ws_event_done) */
	size_t len; /* messages and control frames */
	uint8_t control[CDP_WS_MAX_CONTROL]; /* control frames' payload */
	uint16_t close_code;                 /* CDP_WS_CLOSE: 1005 when the frame had none */
};
void cdp_ws_event_done(struct cdp_ws_event *ev);

/* Reassembles a server's frames into messages, payloads streamed out of the input. */
struct cdp_ws_reader {
	uint64_t max_message;
	bool in_frame;
	struct cdp_ws_frame frame;
	uint64_t frame_left;
	uint8_t head[CDP_WS_MAX_HEAD];
	size_t head_len;
	bool in_message; /* a text or binary message is being assembled */
	uint8_t message_opcode;
	char *message;
	size_t message_len, message_cap;
	size_t control_len;
	uint8_t control[CDP_WS_MAX_CONTROL];
};
void cdp_ws_reader_init(struct cdp_ws_reader *r, uint64_t max_message);
void cdp_ws_reader_done(struct cdp_ws_reader *r);
/*
 * Advances through the len bytes at p; *ret_consumed gets how many it used. Returns 1 and *ev
 * when a message or a control frame is complete (the rest of p is not consumed), 0 when all of p
 * was used and more is needed, or an error: SLATE_ERR_INVALID_FORMAT (a bad frame head, a masked
 * frame from the server, a continuation without a message or a new message inside one, a 1-byte
 * or invalid close code), SLATE_ERR_TOO_LARGE (a message over max_message, refused at its
 * frame's head before its payload is read), -ENOMEM.
 */
int cdp_ws_reader_feed(struct cdp_ws_reader *r, const uint8_t *p, size_t len, size_t *ret_consumed,
                       struct cdp_ws_event *ev, struct slate_error *err);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(SHA-1(key + RFC 6455's GUID)). */
int cdp_ws_accept_for(const char *key, char ret[29]);

/* ---- WebSocket connections ---- */

struct cdp_ws;
/*
 * Upgrades fd (taken over: closed on failure too) to a WebSocket on path with a random key, and
 * checks the server's 101 and Sec-WebSocket-Accept.
 */
int cdp_ws_connect(int fd, const char *path, int64_t deadline_ms, struct cdp_ws **ret,
                   struct slate_error *err);
/* Sends one masked, unfragmented frame. */
int cdp_ws_send(struct cdp_ws *ws, uint8_t opcode, const void *p, size_t n, int64_t deadline_ms,
                struct slate_error *err);
/*
 * Receives the next text or binary message (*ret_opcode may be NULL): answers pings, drops pongs.
 * *ret (caller frees) is NUL-terminated. A close from the server is answered and ends with
 * -ECONNRESET, as does the end of the stream.
 */
int cdp_ws_recv(struct cdp_ws *ws, char **ret, size_t *ret_len, uint8_t *ret_opcode,
                int64_t deadline_ms, struct slate_error *err);
/* The stream under ws (-1 once closed). */
int cdp_ws_fd(const struct cdp_ws *ws);
/* Sends a close frame (1000) if none was exchanged, without waiting, and closes the stream. */
void cdp_ws_free(struct cdp_ws *ws);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct cdp_ws *, cdp_ws_free);

/* ---- CDP ---- */

struct cdp_conn;
/* A CDP session on a target's WebSocket: fd (taken over) upgraded on path. */
int cdp_conn_open(int fd, const char *path, int timeout_ms, struct cdp_conn **ret,
                  struct slate_error *err);
void cdp_conn_free(struct cdp_conn *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct cdp_conn *, cdp_conn_free);
/*
 * Calls method with params (a JSON object's text, or NULL for none) and waits for the reply with
 * its id: *ret_result (may be NULL; a new reference) gets its "result". Events and replies to
 * other ids are skipped, but an event that cdp_watch named is kept for cdp_wait_event. An "error"
 * reply ends with -EREMOTEIO and the browser's message in err.
 */
int cdp_call(struct cdp_conn *c, const char *method, const char *params_json,
             struct json_object **ret_result, int timeout_ms, struct slate_error *err);
/* The same with params as an object (borrowed; NULL for none). */
int cdp_call_json(struct cdp_conn *c, const char *method, struct json_object *params,
                  struct json_object **ret_result, int timeout_ms, struct slate_error *err);
/* From now on, keep the first event called method (a static string) that arrives. */
void cdp_watch(struct cdp_conn *c, const char *method);
/* Waits for the watched event (perhaps already kept by a call); *ret_params (may be NULL) gets
 * its params. */
int cdp_wait_event(struct cdp_conn *c, struct json_object **ret_params, int timeout_ms,
                   struct slate_error *err);

/*
 * Sends a call without waiting for its reply: its reply comes later through cdp_next, as the
 * events do (a view that must never drop a screencast frame reads everything itself). Returns
 * the call's id (> 0) or an error.
 */
int64_t cdp_send(struct cdp_conn *c, const char *method, struct json_object *params, int timeout_ms,
                 struct slate_error *err);
/*
 * The next message, reply or event, in *ret_msg (a new reference): 1, or -ETIMEDOUT when none is
 * complete within timeout_ms (0: only what is already there; a message half read stays half read
 * for the next call), or an error (the browser closed: -ECONNRESET).
 */
int cdp_next(struct cdp_conn *c, struct json_object **ret_msg, int timeout_ms,
             struct slate_error *err);
/* The stream under c, for poll(2) (data may also wait in c's buffer: call cdp_next(c, 0)). */
int cdp_conn_fd(const struct cdp_conn *c);

/* ---- The browser, through a dial callback ---- */

/* Opens a fresh byte stream to the DevTools endpoint; returns 0 and the fd, or an error. */
typedef int (*cdp_dial_fn)(void *ud, int *ret_fd, struct slate_error *err);

/* GET /json/version: *ret (a new reference) gets the object (Browser, Protocol-Version, ...). */
int cdp_version(cdp_dial_fn dial, void *ud, struct json_object **ret, int timeout_ms,
                struct slate_error *err);
/*
 * A PNG of the first page target (GET /json/list; PUT /json/new?about:blank when there is none):
 * Page.captureScreenshot on its WebSocket, base64-decoded, its signature checked. *ret_png
 * (caller frees) and *ret_len get the image.
 */
int cdp_screenshot(cdp_dial_fn dial, void *ud, uint8_t **ret_png, size_t *ret_len, int timeout_ms,
                   struct slate_error *err);
/*
 * Navigates the first page target to url and waits for its load event (Page.enable,
 * Page.navigate, Page.loadEventFired); *ret_title (may be NULL; caller frees) gets document.title.
 * A navigation the browser reports failed (errorText) ends with -EREMOTEIO.
 */
/* A CDP session on the first page target (GET /json/list; PUT /json/new?about:blank when there
 * is none). */
int cdp_page_open(cdp_dial_fn dial, void *ud, int timeout_ms, struct cdp_conn **ret,
                  struct slate_error *err);
int cdp_navigate(cdp_dial_fn dial, void *ud, const char *url, char **ret_title, int timeout_ms,
                 struct slate_error *err);

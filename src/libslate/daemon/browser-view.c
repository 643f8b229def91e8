/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * DevTools to VNC for a browser VM (browser-view.h). One thread per view: it polls the listening
 * unix socket, the CDP session and a stop pipe, hands accepted connections to LibVNCServer with
 * rfbNewClient (LibVNCServer itself listens on nothing: port and ipv6port are -1, autoPort off,
 * no UDP, no httpd), decodes Page.screencastFrame's PNGs into the framebuffer and acks them, and
 * runs rfbProcessEvents, whose pointer and key callbacks send Input.dispatch* calls without
 * waiting for their replies. Everything the browser sends is read on this thread, so no
 * screencast frame is ever skipped unacked (Chromium sends no more frames until it has an ack).
 */

#include <errno.h>
#include <fcntl.h>
#include <png.h>
#include <poll.h>
#include <pthread.h>
#include <rfb/rfb.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/browser-view.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

#define VIEW_START_TIMEOUT_MS 30000
#define VIEW_SEND_TIMEOUT_MS 5000
#define VIEW_POLL_MS 15

struct browser_view {
	struct cdp_conn *cdp;
	rfbScreenInfoPtr screen;
	uint8_t *fb;
	unsigned width, height;
	int listen_fd;
	int stop_pipe[2];
	uid_t uid;
	char *sock_path;
	pthread_t thread;
	bool thread_started;
	int alive;   /* read and written atomically */
	int buttons; /* the RFB button mask last seen */
	int modifiers;
	bool failed; /* a call to the browser failed: the thread ends */
	uint64_t frames;
};

/* ---- the pure parts ---- */

static size_t utf8_put(uint32_t cp, char out[8])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = '\0';
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		out[2] = '\0';
		return 2;
	}
	if (cp >= 0xd800 && cp < 0xe000)
		return 0;
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		out[3] = '\0';
		return 3;
	}
	if (cp < 0x110000) {
		out[0] = (char)(0xf0 | (cp >> 18));
		out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[3] = (char)(0x80 | (cp & 0x3f));
		out[4] = '\0';
		return 4;
	}
	return 0;
}

static const struct {
	uint32_t keysym;
	const char *key, *code;
	int vk;
	const char *text;
	int modifier;
} special_keys[] = {
        {0xff0d, "Enter", "Enter", 13, "\r", 0},
        {0xff8d, "Enter", "NumpadEnter", 13, "\r", 0},
        {0xff08, "Backspace", "Backspace", 8, "", 0},
        {0xff09, "Tab", "Tab", 9, "", 0},
        {0xff1b, "Escape", "Escape", 27, "", 0},
        {0xff51, "ArrowLeft", "ArrowLeft", 37, "", 0},
        {0xff52, "ArrowUp", "ArrowUp", 38, "", 0},
        {0xff53, "ArrowRight", "ArrowRight", 39, "", 0},
        {0xff54, "ArrowDown", "ArrowDown", 40, "", 0},
        {0xff50, "Home", "Home", 36, "", 0},
        {0xff57, "End", "End", 35, "", 0},
        {0xff55, "PageUp", "PageUp", 33, "", 0},
        {0xff56, "PageDown", "PageDown", 34, "", 0},
        {0xff63, "Insert", "Insert", 45, "", 0},
        {0xffff, "Delete", "Delete", 46, "", 0},
        {0xffe1, "Shift", "ShiftLeft", 16, "", 8},
        {0xffe2, "Shift", "ShiftRight", 16, "", 8},
        {0xffe3, "Control", "ControlLeft", 17, "", 2},
        {0xffe4, "Control", "ControlRight", 17, "", 2},
        {0xffe9, "Alt", "AltLeft", 18, "", 1},
        {0xffea, "Alt", "AltRight", 18, "", 1},
        {0xffe7, "Meta", "MetaLeft", 91, "", 4},
        {0xffe8, "Meta", "MetaRight", 92, "", 4},
        {0xffeb, "Meta", "MetaLeft", 91, "", 4},
        {0xffec, "Meta", "MetaRight", 92, "", 4},
};

/* The DOM code and virtual key of a printable ASCII character on a US keyboard. */
static void ascii_code(char c, struct browser_view_key *k)
{
	static const char punct[] = " -=[]\\;',./`";
	static const char *const punct_code[] = {
	        "Space",     "Minus", "Equal", "BracketLeft", "BracketRight", "Backslash",
	        "Semicolon", "Quote", "Comma", "Period",      "Slash",        "Backquote"};
	static const int punct_vk[] = {32, 189, 187, 219, 221, 220, 186, 222, 188, 190, 191, 192};
	const char *p;

	if (c >= 'a' && c <= 'z') {
		(void)snprintf(k->code, sizeof(k->code), "Key%c", c - 'a' + 'A');
		k->vk = c - 'a' + 'A';
	} else if (c >= 'A' && c <= 'Z') {
		(void)snprintf(k->code, sizeof(k->code), "Key%c", c);
		k->vk = c;
	} else if (c >= '0' && c <= '9') {
		(void)snprintf(k->code, sizeof(k->code), "Digit%c", c);
		k->vk = c;
	} else if (c && (p = strchr(punct, c))) {
		(void)snprintf(k->code, sizeof(k->code), "%s", punct_code[p - punct]);
		k->vk = punct_vk[p - punct];
	}
}

int browser_view_keysym(uint32_t keysym, struct browser_view_key *ret)
{
	struct browser_view_key k = {0};
	uint32_t cp = 0;

	for (size_t i = 0; i < ELEMENTSOF(special_keys); i++)
		if (special_keys[i].keysym == keysym) {
			(void)snprintf(k.key, sizeof(k.key), "%s", special_keys[i].key);
			(void)snprintf(k.code, sizeof(k.code), "%s", special_keys[i].code);
			(void)snprintf(k.text, sizeof(k.text), "%s", special_keys[i].text);
			k.vk = special_keys[i].vk;
			k.modifier = special_keys[i].modifier;
			*ret = k;
			return 0;
		}
	if ((keysym >= 0x20 && keysym <= 0x7e) || (keysym >= 0xa0 && keysym <= 0xff))
		cp = keysym; /* Latin-1 keysyms are their code points */
	else if (keysym >= 0x01000100 && keysym <= 0x0110ffff)
		cp = keysym - 0x01000000; /* Unicode keysyms */
	if (!cp || utf8_put(cp, k.text) == 0)
		return -ENOENT;
	memcpy(k.key, k.text, sizeof(k.text));
	if (cp < 0x80)
		ascii_code((char)cp, &k);
	*ret = k;
	return 0;
}

int browser_view_png_decode(const uint8_t *png, size_t len, uint8_t **ret_rgba, unsigned *ret_w,
                            unsigned *ret_h, struct slate_error *err)
{
	png_image img = {.version = PNG_IMAGE_VERSION};
	uint8_t *rgba;

	if (!png_image_begin_read_from_memory(&img, png, len))
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "a frame that is not a PNG: %s", img.message);
	if (img.width == 0 || img.height == 0 || img.width > BROWSER_VIEW_MAX_SIDE ||
	    img.height > BROWSER_VIEW_MAX_SIDE) {
		png_image_free(&img);
		return slate_error_set(err, SLATE_ERR_TOO_LARGE, "a frame of %ux%u pixels",
		                       img.width, img.height);
	}
	img.format = PNG_FORMAT_RGBA;
	rgba = malloc(PNG_IMAGE_SIZE(img));
	if (!rgba) {
		png_image_free(&img);
		return -ENOMEM;
	}
	if (!png_image_finish_read(&img, NULL, rgba, 0, NULL)) {
		free(rgba);
		png_image_free(&img);
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "a broken PNG frame: %s",
		                       img.message);
	}
	*ret_rgba = rgba;
	*ret_w = img.width;
	*ret_h = img.height;
	return 0;
}

void browser_view_blit(uint8_t *fb, unsigned fb_w, unsigned fb_h, const uint8_t *rgba, unsigned w,
                       unsigned h)
{
	unsigned cw = w < fb_w ? w : fb_w, ch = h < fb_h ? h : fb_h;

	for (unsigned y = 0; y < ch; y++) {
		const uint8_t *s = rgba + (size_t)y * w * 4;
		uint8_t *d = fb + (size_t)y * fb_w * 4;
		for (unsigned x = 0; x < cw; x++, s += 4, d += 4) {
			d[0] = s[0];
			d[1] = s[1];
			d[2] = s[2];
			d[3] = 0;
		}
	}
}

/* RFB's button bits: 0 left, 1 middle, 2 right, 3 wheel up, 4 wheel down, 5 wheel left, 6 wheel
 * right. CDP's held-buttons mask: left 1, right 2, middle 4. */
static int cdp_buttons(int mask)
{
	return ((mask & 1) ? 1 : 0) | ((mask & 4) ? 2 : 0) | ((mask & 2) ? 4 : 0);
}

size_t browser_view_pointer(int old_mask, int new_mask, bool moved,
                            struct browser_view_mouse out[8])
{
	static const char *const names[3] = {"left", "middle", "right"};
	static const int wheel_dx[4] = {0, 0, -120, 120}, wheel_dy[4] = {-120, 120, 0, 0};
	int held = old_mask & 7;
	size_t n = 0;

	if (moved)
		out[n++] = (struct browser_view_mouse){
		        .type = "mouseMoved", .button = "none", .buttons = cdp_buttons(held)};
	for (int b = 0; b < 3; b++) {
		int bit = 1 << b;
		if ((new_mask & bit) == (old_mask & bit))
			continue;
		held = (held & ~bit) | (new_mask & bit);
		out[n++] = (struct browser_view_mouse){.type = (new_mask & bit) ? "mousePressed"
		                                                                : "mouseReleased",
		                                       .button = names[b],
		                                       .buttons = cdp_buttons(held)};
	}
	/* The wheel "buttons" are pressed and released at once: the press is the step. */
	for (int b = 3; b < 7; b++)
		if ((new_mask & (1 << b)) && !(old_mask & (1 << b)))
			out[n++] = (struct browser_view_mouse){.type = "mouseWheel",
			                                       .button = "none",
			                                       .buttons = cdp_buttons(held),
			                                       .delta_x = wheel_dx[b - 3],
			                                       .delta_y = wheel_dy[b - 3]};
	return n;
}

/* ---- the bridge ---- */

__attribute__((format(printf, 1, 2))) static void rfb_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	(void)vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	log_debug("vnc: %s", line);
}

static void send_call(struct browser_view *v, const char *method, struct json_object *params)
{
	struct slate_error e = {0};

	if (!params) {
		v->failed = true;
		return;
	}
	if (!v->failed && cdp_send(v->cdp, method, params, VIEW_SEND_TIMEOUT_MS, &e) < 0) {
		log_warning("browser view: %s", slate_error_text(&e));
		v->failed = true;
	}
	json_object_put(params);
}

static void on_pointer(int mask, int x, int y, rfbClientPtr cl)
{
	struct browser_view *v = cl->screen->screenData;
	struct browser_view_mouse ev[8];
	size_t n;

	if (x < 0 || y < 0 || (unsigned)x >= v->width || (unsigned)y >= v->height)
		return;
	n = browser_view_pointer(v->buttons, mask, true, ev);
	v->buttons = mask;
	for (size_t i = 0; i < n; i++) {
		struct json_object *p = json_object_new_object();
		if (p && (json_add_string(p, "type", ev[i].type) < 0 ||
		          json_add_int64(p, "x", x) < 0 || json_add_int64(p, "y", y) < 0 ||
		          json_add_string(p, "button", ev[i].button) < 0 ||
		          json_add_int64(p, "buttons", ev[i].buttons) < 0 ||
		          json_add_int64(p, "modifiers", v->modifiers) < 0 ||
		          (streq(ev[i].type, "mousePressed") || streq(ev[i].type, "mouseReleased")
		                   ? json_add_int64(p, "clickCount", 1) < 0
		                   : 0) ||
		          (streq(ev[i].type, "mouseWheel") &&
		           (json_add_int64(p, "deltaX", ev[i].delta_x) < 0 ||
		            json_add_int64(p, "deltaY", ev[i].delta_y) < 0)))) {
			json_object_put(p);
			p = NULL;
		}
		send_call(v, "Input.dispatchMouseEvent", p);
	}
	rfbDefaultPtrAddEvent(mask, x, y, cl);
}

static void on_key(rfbBool down, rfbKeySym keysym, rfbClientPtr cl)
{
	struct browser_view *v = cl->screen->screenData;
	struct browser_view_key k;
	struct json_object *p;
	bool typed;

	if (browser_view_keysym((uint32_t)keysym, &k) < 0)
		return;
	if (k.modifier)
		v->modifiers = down ? (v->modifiers | k.modifier) : (v->modifiers & ~k.modifier);
	/* Text only without Ctrl, Alt or Meta: those make shortcuts, not characters. */
	typed = down && k.text[0] && !(v->modifiers & 7);
	p = json_object_new_object();
	if (p &&
	    (json_add_string(p, "type", down ? (typed ? "keyDown" : "rawKeyDown") : "keyUp") < 0 ||
	     json_add_string(p, "key", k.key) < 0 ||
	     (k.code[0] && json_add_string(p, "code", k.code) < 0) ||
	     (k.vk && (json_add_int64(p, "windowsVirtualKeyCode", k.vk) < 0 ||
	               json_add_int64(p, "nativeVirtualKeyCode", k.vk) < 0)) ||
	     json_add_int64(p, "modifiers", v->modifiers) < 0 ||
	     (typed && (json_add_string(p, "text", k.text) < 0 ||
	                json_add_string(p, "unmodifiedText", k.text) < 0)))) {
		json_object_put(p);
		p = NULL;
	}
	send_call(v, "Input.dispatchKeyEvent", p);
}

/* One Page.screencastFrame: into the framebuffer, then acked. */
static void on_frame(struct browser_view *v, struct json_object *params)
{
	_cleanup_free_ uint8_t *png = NULL, *rgba = NULL;
	struct slate_error e = {0};
	const char *data, *end;
	int64_t session;
	size_t len, cap, png_len;
	unsigned w, h;

	if (json_get_string(params, "data", &data) < 0 ||
	    json_get_int64(params, "sessionId", &session) < 0) {
		log_warning("browser view: a screencast frame without data or sessionId");
		return;
	}
	len = strlen(data);
	cap = len / 4 * 3 + 3;
	png = malloc(cap);
	if (png &&
	    sodium_base642bin(png, cap, data, len, NULL, &png_len, &end,
	                      sodium_base64_VARIANT_ORIGINAL) == 0 &&
	    end == data + len) {
		if (browser_view_png_decode(png, png_len, &rgba, &w, &h, &e) >= 0) {
			browser_view_blit(v->fb, v->width, v->height, rgba, w, h);
			rfbMarkRectAsModified(v->screen, 0, 0, (int)(w < v->width ? w : v->width),
			                      (int)(h < v->height ? h : v->height));
			v->frames++;
		} else {
			log_warning("browser view: %s", slate_error_text(&e));
		}
	} else {
		log_warning("browser view: a screencast frame that is not base64");
	}
	{
		struct json_object *p = json_object_new_object();
		if (p && json_add_int64(p, "sessionId", session) < 0) {
			json_object_put(p);
			p = NULL;
		}
		send_call(v, "Page.screencastFrameAck", p);
	}
}

static void on_message(struct browser_view *v, struct json_object *msg)
{
	struct json_object *params, *error;
	const char *method, *m = "";

	if (json_get_string(msg, "method", &method) == 0) {
		if (streq(method, "Page.screencastFrame") &&
		    json_get_object(msg, "params", &params) == 0)
			on_frame(v, params);
		return;
	}
	if (json_get_object(msg, "error", &error) == 0) {
		(void)json_get_string(error, "message", &m);
		log_debug("browser view: the browser refused a call: %s", m);
	}
}

/* A connection on the view's socket: only its owner (or root) gets as far as RFB. */
static void on_accept(struct browser_view *v)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd = accept4(v->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 ||
	    (cred.uid != v->uid && cred.uid != 0)) {
		log_warning("browser view: a connection from uid %u refused",
		            cl == sizeof(cred) ? (unsigned)cred.uid : 0u);
		(void)close(fd);
		return;
	}
	/* LibVNCServer select()s on its clients. */
	if (fd >= FD_SETSIZE) {
		log_warning("browser view: no room for another client (fd %d)", fd);
		(void)close(fd);
		return;
	}
	(void)rfbNewClient(v->screen, fd); /* closes fd itself when it fails */
}

static void *view_thread(void *p)
{
	struct browser_view *v = p;
	struct slate_error e = {0};

	for (;;) {
		struct pollfd pf[3] = {{.fd = v->stop_pipe[0], .events = POLLIN},
		                       {.fd = v->listen_fd, .events = POLLIN},
		                       {.fd = cdp_conn_fd(v->cdp), .events = POLLIN}};

		if (poll(pf, 3, VIEW_POLL_MS) < 0 && errno != EINTR)
			break;
		if (pf[0].revents)
			break;
		if (pf[1].revents & POLLIN)
			on_accept(v);
		for (;;) {
			_cleanup_json_ struct json_object *msg = NULL;
			int k = cdp_next(v->cdp, &msg, 0, &e);
			if (k == -ETIMEDOUT)
				break;
			if (k < 0) {
				log_info("browser view: the browser's session ended: %s",
				         slate_error_text(&e));
				v->failed = true;
				break;
			}
			on_message(v, msg);
		}
		if (v->failed)
			break;
		(void)rfbProcessEvents(v->screen, 0);
	}
	__atomic_store_n(&v->alive, 0, __ATOMIC_RELEASE);
	return NULL;
}

/* The page's viewport, for the framebuffer and the screencast's size. */
static void viewport(struct browser_view *v)
{
	_cleanup_json_ struct json_object *r = NULL;
	struct json_object *res, *val;
	int64_t w = 0, h = 0;

	v->width = BROWSER_VIEW_DEFAULT_WIDTH;
	v->height = BROWSER_VIEW_DEFAULT_HEIGHT;
	if (cdp_call(v->cdp, "Runtime.evaluate",
	             "{\"expression\":\"[innerWidth,innerHeight]\",\"returnByValue\":true}", &r,
	             VIEW_START_TIMEOUT_MS, NULL) < 0 ||
	    json_get_object(r, "result", &res) < 0 ||
	    !json_object_object_get_ex(res, "value", &val) ||
	    !json_object_is_type(val, json_type_array) || json_object_array_length(val) != 2)
		return;
	w = json_object_get_int64(json_object_array_get_idx(val, 0));
	h = json_object_get_int64(json_object_array_get_idx(val, 1));
	if (w >= 16 && h >= 16 && w <= BROWSER_VIEW_MAX_SIDE && h <= BROWSER_VIEW_MAX_SIDE) {
		v->width = (unsigned)w & ~3u; /* viewers prefer a width that is a multiple of 4 */
		v->height = (unsigned)h;
	}
}

/* Binds a unix socket at path, mode 0600 and owned by uid from its first moment: made under a
 * temporary name, then renamed over path. */
static int listen_at(const char *path, uid_t uid, struct slate_error *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_free_ char *tmp = NULL;
	_cleanup_close_ int fd = -1;

	if (asprintf(&tmp, "%s.new", path) < 0)
		return -ENOMEM;
	if (strlen(tmp) >= sizeof(sa.sun_path))
		return slate_error_set(err, -ENAMETOOLONG, "%s: too long for a unix socket", path);
	memcpy(sa.sun_path, tmp, strlen(tmp) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return slate_error_errno(err, -errno, "socket");
	(void)unlink(tmp);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return slate_error_errno(err, -errno, "binding %s", tmp);
	if (chmod(tmp, 0600) < 0 || chown(tmp, uid, (gid_t)-1) < 0 || listen(fd, 8) < 0 ||
	    rename(tmp, path) < 0) {
		int r = -errno;
		(void)unlink(tmp);
		return slate_error_errno(err, r, "setting up %s", path);
	}
	return TAKE_FD(fd);
}

static int start_screencast(struct browser_view *v, struct slate_error *err)
{
	_cleanup_json_ struct json_object *p = json_object_new_object();

	if (!p || json_add_string(p, "format", "png") < 0 ||
	    json_add_int64(p, "maxWidth", v->width) < 0 ||
	    json_add_int64(p, "maxHeight", v->height) < 0 ||
	    json_add_int64(p, "everyNthFrame", 1) < 0)
		return -ENOMEM;
	return cdp_call_json(v->cdp, "Page.startScreencast", p, NULL, VIEW_START_TIMEOUT_MS, err);
}

int browser_view_start(cdp_dial_fn dial, void *ud, const char *sock_path, uid_t uid,
                       struct browser_view **ret, struct slate_error *err)
{
	struct browser_view *v = calloc(1, sizeof(*v));
	int r;

	if (!v)
		return -ENOMEM;
	v->listen_fd = -1;
	v->stop_pipe[0] = v->stop_pipe[1] = -1;
	v->uid = uid;
	v->sock_path = strdup(sock_path);
	if (!v->sock_path) {
		r = -ENOMEM;
		goto fail;
	}
	r = cdp_page_open(dial, ud, VIEW_START_TIMEOUT_MS, &v->cdp, err);
	if (r < 0)
		goto fail;
	viewport(v);
	v->fb = calloc((size_t)v->width * v->height, 4);
	if (!v->fb || pipe2(v->stop_pipe, O_CLOEXEC) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	rfbLog = rfb_log;
	rfbErr = rfb_log;
	v->screen = rfbGetScreen(NULL, NULL, (int)v->width, (int)v->height, 8, 3, 4);
	if (!v->screen) {
		r = slate_error_set(err, -ENOMEM, "LibVNCServer could not make a screen");
		goto fail;
	}
	v->screen->frameBuffer = (char *)v->fb;
	v->screen->desktopName = "slate browser";
	v->screen->screenData = v;
	v->screen->ptrAddEvent = on_pointer;
	v->screen->kbdAddEvent = on_key;
	v->screen->alwaysShared = TRUE;
	/* No listener of LibVNCServer's own: connections come from our unix socket only. */
	v->screen->autoPort = FALSE;
	v->screen->port = -1;
	v->screen->ipv6port = -1;
	v->screen->udpPort = 0;
	v->screen->httpPort = -1;
	v->screen->httpDir = NULL;
	rfbInitServer(v->screen);
	r = start_screencast(v, err);
	if (r < 0)
		goto fail;
	r = listen_at(sock_path, uid, err);
	if (r < 0)
		goto fail;
	v->listen_fd = r;
	v->alive = 1;
	if (pthread_create(&v->thread, NULL, view_thread, v) != 0) {
		v->alive = 0;
		r = slate_error_set(err, -EAGAIN, "cannot start the view's thread");
		goto fail;
	}
	v->thread_started = true;
	*ret = v;
	return 0;
fail:
	browser_view_stop(v);
	return r;
}

void browser_view_stop(struct browser_view *v)
{
	if (!v)
		return;
	if (v->thread_started) {
		(void)!write(v->stop_pipe[1], "x", 1);
		(void)pthread_join(v->thread, NULL);
	}
	if (v->listen_fd >= 0 && v->sock_path)
		(void)unlink(v->sock_path);
	safe_close(v->listen_fd);
	if (v->screen) {
		rfbShutdownServer(v->screen, TRUE);
		rfbScreenCleanup(v->screen);
	}
	cdp_conn_free(v->cdp); /* closes the screencast's session */
	safe_close(v->stop_pipe[0]);
	safe_close(v->stop_pipe[1]);
	free(v->fb);
	free(v->sock_path);
	free(v);
}

bool browser_view_alive(struct browser_view *v)
{
	return v && __atomic_load_n(&v->alive, __ATOMIC_ACQUIRE);
}

const char *browser_view_socket(const struct browser_view *v)
{
	return v->sock_path;
}

void browser_view_size(const struct browser_view *v, unsigned *ret_w, unsigned *ret_h)
{
	*ret_w = v->width;
	*ret_h = v->height;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Watching and taking over a browser VM's page (daemon/browser-view.c, doc/browser.md): headless
 * Chromium has no display and the browser VM no framebuffer, so slated bridges DevTools to VNC.
 * Page.startScreencast's PNG frames are decoded into an RFB framebuffer that LibVNCServer serves
 * on a unix socket of slated's own (mode 0600, owned by the caller: the socket's mode is the
 * access control, RFB security type None); RFB pointer and key events become
 * Input.dispatchMouseEvent and Input.dispatchKeyEvent. No TCP listener at all.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "browser/cdp.h"
#include "util/error.h"

#define BROWSER_VIEW_DEFAULT_WIDTH 1280u
#define BROWSER_VIEW_DEFAULT_HEIGHT 800u
#define BROWSER_VIEW_MAX_SIDE 4096u

struct browser_view;

/*
 * Opens a CDP session on the browser's first page (through dial), starts its screencast and
 * serves RFB on a new unix socket at sock_path (replacing what is there), mode 0600 and owned by
 * uid, on a thread of its own. *ret gets the view; its size is the page's viewport.
 */
int browser_view_start(cdp_dial_fn dial, void *ud, const char *sock_path, uid_t uid,
                       struct browser_view **ret, struct slate_error *err);
/* Stops the thread, closes the clients and the browser session, removes the socket. NULL: no-op. */
void browser_view_stop(struct browser_view *v);
/* Whether its thread still serves (false once the browser closed the session). */
bool browser_view_alive(struct browser_view *v);
const char *browser_view_socket(const struct browser_view *v);
void browser_view_size(const struct browser_view *v, unsigned *ret_w, unsigned *ret_h);

/* ---- the pure parts, for the tests ---- */

/* CDP's Input.dispatchKeyEvent fields for an X keysym. */
struct browser_view_key {
	char key[24];  /* DOM key: "a", "Enter", "ArrowLeft" */
	char code[24]; /* DOM code, "" when unknown */
	int vk;        /* windowsVirtualKeyCode, 0 when none */
	char text[8];  /* UTF-8 text a keyDown types, "" for none */
	int modifier;  /* the CDP modifier bit this key is (Alt 1, Ctrl 2, Meta 4, Shift 8), or 0 */
};
/* Fills *ret for keysym. Returns 0, or -ENOENT for a keysym it does not map. */
int browser_view_keysym(uint32_t keysym, struct browser_view_key *ret);

/* Decodes a PNG into RGBA (4 bytes a pixel, caller frees). SLATE_ERR_INVALID_FORMAT when it is
 * not one, SLATE_ERR_TOO_LARGE over BROWSER_VIEW_MAX_SIDE a side. */
int browser_view_png_decode(const uint8_t *png, size_t len, uint8_t **ret_rgba, unsigned *ret_w,
                            unsigned *ret_h, struct slate_error *err);
/* Copies an RGBA image into a 32-bit framebuffer (R, G, B, 0 in memory: LibVNCServer's default
 * true-colour format) at the top left, clipped to it. */
void browser_view_blit(uint8_t *fb, unsigned fb_w, unsigned fb_h, const uint8_t *rgba, unsigned w,
                       unsigned h);

/* One RFB pointer event against the buttons held before: the CDP mouse events it makes, in
 * order (at most 8). */
struct browser_view_mouse {
	const char *type;   /* mouseMoved, mousePressed, mouseReleased, mouseWheel */
	const char *button; /* none, left, middle, right */
	int buttons;        /* CDP's held-buttons mask after the event: left 1, right 2, middle 4 */
	int delta_x, delta_y;
};
size_t browser_view_pointer(int old_mask, int new_mask, bool moved,
                            struct browser_view_mouse out[8]);

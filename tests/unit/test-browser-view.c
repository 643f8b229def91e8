/* SPDX-License-Identifier: GPL-2.0-or-later */
/* daemon/browser-view's pure parts: X keysyms to CDP key events, RFB button masks to CDP mouse
 * events, screencast PNGs decoded and blitted into the RFB framebuffer. The bridge itself runs
 * against a real Chromium in tests/unit/view-chromium.test and a browser VM in
 * tests/integration/browser-view.sh. */
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/browser-view.h"

static void test_keysyms(void **state)
{
	static const struct {
		uint32_t keysym;
		const char *key, *code, *text;
		int vk, modifier;
	} cases[] = {
	        {'a', "a", "KeyA", "a", 'A', 0},
	        {'Z', "Z", "KeyZ", "Z", 'Z', 0},
	        {'7', "7", "Digit7", "7", '7', 0},
	        {' ', " ", "Space", " ", 32, 0},
	        {'.', ".", "Period", ".", 190, 0},
	        {'!', "!", "", "!", 0, 0},
	        {0xe9, "\xc3\xa9", "", "\xc3\xa9", 0, 0},               /* eacute, Latin-1 */
	        {0x010020ac, "\xe2\x82\xac", "", "\xe2\x82\xac", 0, 0}, /* EuroSign as Unicode */
	        {0xff0d, "Enter", "Enter", "\r", 13, 0},
	        {0xff08, "Backspace", "Backspace", "", 8, 0},
	        {0xff09, "Tab", "Tab", "", 9, 0},
	        {0xff1b, "Escape", "Escape", "", 27, 0},
	        {0xff51, "ArrowLeft", "ArrowLeft", "", 37, 0},
	        {0xff52, "ArrowUp", "ArrowUp", "", 38, 0},
	        {0xff53, "ArrowRight", "ArrowRight", "", 39, 0},
	        {0xff54, "ArrowDown", "ArrowDown", "", 40, 0},
	        {0xffff, "Delete", "Delete", "", 46, 0},
	        {0xffe1, "Shift", "ShiftLeft", "", 16, 8},
	        {0xffe4, "Control", "ControlRight", "", 17, 2},
	        {0xffe9, "Alt", "AltLeft", "", 18, 1},
	};
	struct browser_view_key k;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(browser_view_keysym(cases[i].keysym, &k), 0);
		assert_string_equal(k.key, cases[i].key);
		assert_string_equal(k.code, cases[i].code);
		assert_string_equal(k.text, cases[i].text);
		assert_int_equal(k.vk, cases[i].vk);
		assert_int_equal(k.modifier, cases[i].modifier);
	}
	/* Unmapped: F-keys, control characters, a surrogate as a Unicode keysym, past U+10FFFF. */
	assert_int_equal(browser_view_keysym(0xffbe, &k), -ENOENT);
	assert_int_equal(browser_view_keysym(0x1f, &k), -ENOENT);
	assert_int_equal(browser_view_keysym(0x0100d800, &k), -ENOENT);
	assert_int_equal(browser_view_keysym(0x01110000, &k), -ENOENT);
	assert_int_equal(browser_view_keysym(0, &k), -ENOENT);
}

static void test_pointer(void **state)
{
	struct browser_view_mouse ev[8];
	size_t n;

	(void)state;
	/* A move with nothing held. */
	n = browser_view_pointer(0, 0, true, ev);
	assert_int_equal(n, 1);
	assert_string_equal(ev[0].type, "mouseMoved");
	assert_string_equal(ev[0].button, "none");
	assert_int_equal(ev[0].buttons, 0);
	/* Left down, then up. */
	n = browser_view_pointer(0, 1, true, ev);
	assert_int_equal(n, 2);
	assert_string_equal(ev[1].type, "mousePressed");
	assert_string_equal(ev[1].button, "left");
	assert_int_equal(ev[1].buttons, 1);
	n = browser_view_pointer(1, 0, false, ev);
	assert_int_equal(n, 1);
	assert_string_equal(ev[0].type, "mouseReleased");
	assert_string_equal(ev[0].button, "left");
	assert_int_equal(ev[0].buttons, 0);
	/* RFB's middle is bit 1 and right bit 2; CDP's held mask has right 2 and middle 4. */
	n = browser_view_pointer(0, 2, false, ev);
	assert_int_equal(n, 1);
	assert_string_equal(ev[0].button, "middle");
	assert_int_equal(ev[0].buttons, 4);
	n = browser_view_pointer(2, 6, false, ev);
	assert_int_equal(n, 1);
	assert_string_equal(ev[0].button, "right");
	assert_int_equal(ev[0].buttons, 6);
	/* A drag: the move carries the held button. */
	n = browser_view_pointer(1, 1, true, ev);
	assert_int_equal(n, 1);
	assert_string_equal(ev[0].type, "mouseMoved");
	assert_int_equal(ev[0].buttons, 1);
	/* The wheel: a step on the press only (up: negative deltaY), nothing on its release. */
	n = browser_view_pointer(0, 8, false, ev);
	assert_int_equal(n, 1);
	assert_string_equal(ev[0].type, "mouseWheel");
	assert_int_equal(ev[0].delta_y, -120);
	assert_int_equal(browser_view_pointer(8, 0, false, ev), 0);
	n = browser_view_pointer(0, 16, false, ev);
	assert_int_equal(n, 1);
	assert_int_equal(ev[0].delta_y, 120);
	n = browser_view_pointer(0, 64, false, ev);
	assert_int_equal(n, 1);
	assert_int_equal(ev[0].delta_x, 120);
	/* Everything at once fits. */
	assert_true(browser_view_pointer(0, 0x7f, true, ev) <= 8);
}

/* A w x h PNG of one colour (libpng's simplified writer). */
static uint8_t *make_png(unsigned w, unsigned h, uint8_t r, uint8_t g, uint8_t b, size_t *ret_len)
{
	png_image img = {
	        .version = PNG_IMAGE_VERSION, .width = w, .height = h, .format = PNG_FORMAT_RGB};
	uint8_t *px = malloc((size_t)w * h * 3), *out;
	png_alloc_size_t len = 0;

	assert_non_null(px);
	for (size_t i = 0; i < (size_t)w * h; i++) {
		px[i * 3] = r;
		px[i * 3 + 1] = g;
		px[i * 3 + 2] = b;
	}
	assert_true(png_image_write_to_memory(&img, NULL, &len, 0, px, 0, NULL));
	out = malloc(len);
	assert_non_null(out);
	assert_true(png_image_write_to_memory(&img, out, &len, 0, px, 0, NULL));
	free(px);
	*ret_len = len;
	return out;
}

static void test_png_blit(void **state)
{
	struct slate_error err = {0};
	uint8_t *png, *rgba = NULL, fb[8 * 4 * 4];
	unsigned w = 0, h = 0;
	size_t len;

	(void)state;
	png = make_png(6, 5, 255, 0, 0, &len);
	assert_int_equal(browser_view_png_decode(png, len, &rgba, &w, &h, &err), 0);
	assert_int_equal(w, 6);
	assert_int_equal(h, 5);
	assert_int_equal(rgba[0], 255);
	assert_int_equal(rgba[1], 0);
	assert_int_equal(rgba[3], 255); /* opaque */
	/* Into an 8x4 framebuffer of 0x55: clipped at the bottom, the two right columns kept. */
	memset(fb, 0x55, sizeof(fb));
	browser_view_blit(fb, 8, 4, rgba, w, h);
	for (unsigned y = 0; y < 4; y++)
		for (unsigned x = 0; x < 8; x++) {
			const uint8_t *p = fb + (y * 8 + x) * 4;
			if (x < 6) {
				assert_int_equal(p[0], 255);
				assert_int_equal(p[1], 0);
				assert_int_equal(p[2], 0);
				assert_int_equal(p[3], 0);
			} else {
				assert_int_equal(p[0], 0x55);
			}
		}
	free(rgba);
	/* Truncated, not a PNG at all, over the size limit. */
	rgba = NULL;
	assert_int_equal(browser_view_png_decode(png, len / 2, &rgba, &w, &h, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_null(rgba);
	assert_int_equal(
	        browser_view_png_decode((const uint8_t *)"GIF89a....", 10, &rgba, &w, &h, &err),
	        SLATE_ERR_INVALID_FORMAT);
	free(png);
	png = make_png(BROWSER_VIEW_MAX_SIDE + 1, 1, 0, 0, 0, &len);
	assert_int_equal(browser_view_png_decode(png, len, &rgba, &w, &h, &err),
	                 SLATE_ERR_TOO_LARGE);
	assert_null(rgba);
	free(png);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_keysyms),
	        cmocka_unit_test(test_pointer),
	        cmocka_unit_test(test_png_blit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

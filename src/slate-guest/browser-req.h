/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The lines of the "browser" protocol (doc/guest-channel.md, "The browser VM"), parsed strictly
 * and in order. libc only: the unit test and the fuzz target compile it on the host.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BROWSER_LINE_MAX 256 /* bytes, the newline not counted */
#define BROWSER_CA_MAX (64u * 1024)
#define BROWSER_KEY_LEN 64
#define BROWSER_WINDOW_MIN 16
#define BROWSER_WINDOW_MAX 16384
#define BROWSER_DEFAULT_WIDTH 1280
#define BROWSER_DEFAULT_HEIGHT 800

/* What a line was; also how far the request has come (each comes at most once, in this order). */
enum browser_line {
	BL_NONE,
	BL_CA,      /* "ca LEN": LEN bytes of PEM follow */
	BL_PERSIST, /* "persist HEXKEY" */
	BL_WINDOW,  /* "window WxH" */
	BL_START,   /* "start" */
	BL_STOP,    /* "stop", after "start" only */
};

struct browser_req {
	enum browser_line last; /* the last line accepted */
	uint32_t ca_len;        /* "ca": the PEM's length */
	bool persist;
	uint8_t key[BROWSER_KEY_LEN];
	unsigned width, height;
};

/* An empty request: no CA, no persist, the default window. */
void browser_req_init(struct browser_req *r);
/* Takes the next line (n bytes, without its newline). Returns what it was, or -EINVAL with *why
 * set to a static text; r is unchanged then. */
int browser_req_line(struct browser_req *r, const char *line, size_t n, const char **why);
/* Whether n bytes look like a PEM certificate: printable ASCII, tabs and newlines only, and a
 * "-----BEGIN CERTIFICATE-----" line. */
bool browser_ca_valid(const uint8_t *p, size_t n);

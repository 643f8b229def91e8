/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The "browser" protocol's request lines (browser-req.h). */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "browser-req.h"
#include "parse.h"

void browser_req_init(struct browser_req *r)
{
	memset(r, 0, sizeof(*r));
	r->width = BROWSER_DEFAULT_WIDTH;
	r->height = BROWSER_DEFAULT_HEIGHT;
}

static int refuse(const char **why, const char *text)
{
	*why = text;
	return -EINVAL;
}

/* "WxH", each a decimal in BROWSER_WINDOW_MIN..MAX. */
static bool parse_window(char *s, unsigned *w, unsigned *h)
{
	char *x = strchr(s, 'x');
	uint64_t a, b;

	if (!x)
		return false;
	*x = '\0';
	if (!parse_dec(s, BROWSER_WINDOW_MAX, &a) || !parse_dec(x + 1, BROWSER_WINDOW_MAX, &b) ||
	    a < BROWSER_WINDOW_MIN || b < BROWSER_WINDOW_MIN)
		return false;
	*w = (unsigned)a;
	*h = (unsigned)b;
	return true;
}

int browser_req_line(struct browser_req *r, const char *line, size_t n, const char **why)
{
	char buf[BROWSER_LINE_MAX + 1], *arg;
	enum browser_line kind;

	if (n > BROWSER_LINE_MAX)
		return refuse(why, "line too long");
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] > 0x7e)
			return refuse(why, "control or non-ASCII byte in a line");
	memcpy(buf, line, n);
	buf[n] = '\0';
	arg = strchr(buf, ' ');
	if (arg)
		*arg++ = '\0';
	if (strcmp(buf, "ca") == 0)
		kind = BL_CA;
	else if (strcmp(buf, "persist") == 0)
		kind = BL_PERSIST;
	else if (strcmp(buf, "window") == 0)
		kind = BL_WINDOW;
	else if (strcmp(buf, "start") == 0)
		kind = BL_START;
	else if (strcmp(buf, "stop") == 0)
		kind = BL_STOP;
	else
		return refuse(why, "unknown line");
	if (kind == BL_STOP ? r->last < BL_START || r->last == BL_STOP : r->last >= kind)
		return refuse(why, kind == BL_STOP ? "stop before start" : "line out of order");
	if ((kind == BL_START || kind == BL_STOP) != !arg)
		return refuse(why, arg ? "unexpected argument" : "missing argument");
	switch (kind) {
	case BL_CA: {
		uint64_t v;
		if (!parse_dec(arg, BROWSER_CA_MAX, &v) || v == 0)
			return refuse(why, "bad ca length");
		r->ca_len = (uint32_t)v;
		break;
	}
	case BL_PERSIST: {
		uint8_t key[BROWSER_KEY_LEN];
		bool ok = parse_hex(arg, key, BROWSER_KEY_LEN);
		if (ok)
			memcpy(r->key, key, sizeof(key));
		explicit_bzero(key, sizeof(key));
		explicit_bzero(buf, sizeof(buf));
		if (!ok)
			return refuse(why, "persist wants 128 lower-case hex digits");
		r->persist = true;
		break;
	}
	case BL_WINDOW:
		if (!parse_window(arg, &r->width, &r->height))
			return refuse(why, "window wants WxH, each 16..16384");
		break;
	default:
		break;
	}
	r->last = kind;
	return (int)kind;
}

bool browser_ca_valid(const uint8_t *p, size_t n)
{
	static const char begin[] = "-----BEGIN CERTIFICATE-----";
	bool found = false;

	for (size_t i = 0; i < n; i++)
		if ((p[i] < 0x20 || p[i] > 0x7e) && p[i] != '\n' && p[i] != '\r' && p[i] != '\t')
			return false;
	for (size_t i = 0; !found && i + sizeof(begin) - 1 <= n; i++)
		found = (i == 0 || p[i - 1] == '\n') &&
		        memcmp(p + i, begin, sizeof(begin) - 1) == 0;
	return found;
}

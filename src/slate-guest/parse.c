/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The strict number parsers of the line protocols slate-guest reads (--probe, --identity, the
 * browser's requests). libc only: unit tests and fuzz targets compile it on the host.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "parse.h"

bool parse_dec(const char *s, uint64_t max, uint64_t *ret)
{
	uint64_t v = 0;

	if (!*s || (s[0] == '0' && s[1]))
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		unsigned d = (unsigned)(*s - '0');
		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*ret = v;
	return true;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

bool parse_hex(const char *s, uint8_t *outp, size_t len)
{
	if (strlen(s) != 2 * len)
		return false;
	for (size_t i = 0; i < len; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		outp[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

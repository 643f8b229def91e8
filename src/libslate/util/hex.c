/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Hexadecimal digits and percent escapes (see hex.h). */
#include "util/hex.h"
#include "util/error.h"

int hex_digit(int c, unsigned flags)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (!(flags & HEX_LOWER) && c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool hex_is(const char *p, size_t n, unsigned flags)
{
	for (size_t i = 0; i < n; i++)
		if (hex_digit((unsigned char)p[i], flags) < 0)
			return false;
	return true;
}

int hex_decode(const char *s, size_t n, uint8_t *out, unsigned flags)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hex_digit((unsigned char)s[2 * i], flags);
		int lo = hex_digit((unsigned char)s[2 * i + 1], flags);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int hex_pct_escape(const char *p, size_t n)
{
	int hi, lo;

	if (n < 3 || p[0] != '%')
		return -1;
	hi = hex_digit((unsigned char)p[1], 0);
	lo = hex_digit((unsigned char)p[2], 0);
	return hi < 0 || lo < 0 ? -1 : hi << 4 | lo;
}

long hex_pct_decode(const char *p, size_t n, char *dst, size_t max, unsigned flags)
{
	size_t out = 0;

	for (size_t i = 0; i < n; i++) {
		int e = hex_pct_escape(p + i, n - i);
		char c = p[i];

		if (e >= 0) {
			c = (char)e;
			i += 2;
		} else if (c == '%' && (flags & PCT_STRICT)) {
			return SLATE_ERR_INVALID_FORMAT;
		}
		if (out >= max) {
			if (flags & PCT_TRUNCATE)
				break;
			return SLATE_ERR_TOO_LARGE;
		}
		dst[out++] = c;
	}
	dst[out] = 0;
	return (long)out;
}

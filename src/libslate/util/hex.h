/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The one hexadecimal and one percent decoder (RFC 3986 section 2.1), so that the egress proxy's
 * scanner, its substituter and the SigV4 re-signer read an escape alike, and the catalog reads
 * its digests the same way. '+' is never a space here: no caller decodes form bodies. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	HEX_LOWER = 1 << 0, /* only 0-9 and a-f are digits (digests, signatures as written) */
};

/* The value of the hexadecimal digit c (0-9, a-f, A-F; with HEX_LOWER not A-F), or -1. */
int hex_digit(int c, unsigned flags);
/* Whether the n bytes at p are all digits under flags. */
bool hex_is(const char *p, size_t n, unsigned flags);
/* Decodes 2n digits at s into n bytes at out. Returns 0, or -1 if one is no digit (out partly
 * written). */
int hex_decode(const char *s, size_t n, uint8_t *out, unsigned flags);

enum {
	/* A '%' not followed by two hex digits is an error. Without it, it is an ordinary byte. */
	PCT_STRICT = 1 << 0,
	/* Output past max stops the decoding (what fits is kept). Without it: SLATE_ERR_TOO_LARGE. */
	PCT_TRUNCATE = 1 << 1,
};

/* If the n bytes at p start with an escape ('%' and two hex digits, either case): its byte.
 * Otherwise -1. */
int hex_pct_escape(const char *p, size_t n);
/* Percent-decodes the n bytes at p into dst (room for max bytes and a NUL, which it writes).
 * Returns the decoded length, or SLATE_ERR_INVALID_FORMAT (PCT_STRICT, a bad escape) or
 * SLATE_ERR_TOO_LARGE (over max, without PCT_TRUNCATE). */
long hex_pct_decode(const char *p, size_t n, char *dst, size_t max, unsigned flags);

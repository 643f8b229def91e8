/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Strict parsers shared by slate-guest's line protocols (parse.c; libc only). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exactly 2 * len lower-case hex digits into out. */
bool parse_hex(const char *s, uint8_t *out, size_t len);
/* A decimal number: digits only, no leading zero, at most max. */
bool parse_dec(const char *s, uint64_t max, uint64_t *ret);

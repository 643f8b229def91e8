/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Sizes as people write them: "64G", "512M", "1.5T", "4096" (IEC multiples: K = 1024). */

#include <stddef.h>
#include <stdint.h>

/* Parses s into bytes. Returns 0, or -EINVAL (malformed) / -ERANGE (over 2^63). */
int size_parse(const char *s, uint64_t *ret);
/* Formats bytes as "1.5 GiB" / "512 B" into buf (at least 16 bytes). Returns buf. */
char *size_format(uint64_t bytes, char *buf, size_t len);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/size.h"

int size_parse(const char *s, uint64_t *ret)
{
	static const char units[] = "BKMGTPE";
	uint64_t whole = 0, frac = 0, frac_div = 1, mult = 1;
	const char *p = s;
	const char *u;

	if (!s || *p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (whole > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		/* Up to 6 decimals are meaningful; more would only overflow the divisor. */
		for (int i = 0; *p >= '0' && *p <= '9'; p++, i++)
			if (i < 6) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				frac_div *= 10;
			}
	}
	if (*p) {
		u = strchr(units, *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
		if (!u || !*u)
			return -EINVAL;
		for (long i = 0; i < u - units; i++)
			mult *= 1024;
		p++;
		/* Accept "G", "GB", "GiB" alike: binary multiples either way. */
		if (*p == 'i' && u != units)
			p++;
		if (*p == 'B' && u != units)
			p++;
		if (*p)
			return -EINVAL;
	}
	if (whole > (UINT64_C(1) << 63) / mult)
		return -ERANGE;
	whole *= mult;
	if (frac) {
		__uint128_t f = (__uint128_t)frac * mult / frac_div;
		if (whole + (uint64_t)f < whole || whole + (uint64_t)f > (UINT64_C(1) << 63))
			return -ERANGE;
		whole += (uint64_t)f;
	}
	*ret = whole;
	return 0;
}

char *size_format(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	double v = (double)bytes;
	size_t i = 0;

	while (v >= 1024.0 && i + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		i++;
	}
	if (i == 0)
		(void)snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		(void)snprintf(buf, len, "%.1f %s", v, units[i]);
	return buf;
}

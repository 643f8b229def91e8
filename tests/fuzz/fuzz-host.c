/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the one host normaliser (util/host.c), which secret bindings, egress
 * rules and every request's host go through. The input is a host (or, when its first byte is
 * odd, an authority "host:port"). Besides not crashing, the target checks what binding relies
 * on, since what it returns is stored and compared as is:
 *   - accepted output normalises to itself, with the same kind (stored hosts re-used as is);
 *   - a name is 1..253 bytes of labels of 1..63 [a-z0-9_-], no '-' at a label's edge, and not
 *     something inet_aton() reads as an IPv4 address; an IP literal is what inet_pton() reads;
 *   - a refusal says why;
 *   - a host matches itself, and an authority's host is a normalised host.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_normal(const char *h, int kind)
{
	char again[HOST_BUF];
	unsigned char a[16];
	struct in_addr a4;
	size_t n = strlen(h), label = 0;

	if (host_normalize(h, again, sizeof(again)) != kind || strcmp(again, h) != 0)
		abort();
	if (!host_matches(h, h))
		abort();
	if (kind == HOST_IPV4 || kind == HOST_IPV6) {
		if (inet_pton(kind == HOST_IPV4 ? AF_INET : AF_INET6, h, a) != 1 || !host_is_ip(h))
			abort();
		return;
	}
	if (kind != HOST_NAME || n == 0 || n > HOST_MAX || inet_aton(h, &a4) != 0 || host_is_ip(h))
		abort();
	for (size_t i = 0; i <= n; i++) {
		if (h[i] == '.' || h[i] == '\0') {
			if (label == 0 || h[i - 1] == '-' || h[i - label] == '-')
				abort();
			label = 0;
			continue;
		}
		if (!((h[i] >= 'a' && h[i] <= 'z') || (h[i] >= '0' && h[i] <= '9') || h[i] == '-' ||
		      h[i] == '_') ||
		    ++label > 63)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[HOST_BUF];
	const char *why = NULL;
	int r;

	if (size < 1 || size > 4096)
		return 0;
	if (data[0] & 1) {
		uint16_t port = 0;
		r = host_split_authority((const char *)data + 1, size - 1, 443, out, sizeof(out),
		                         &port);
		if (r > 0) {
			if (port == 0)
				abort();
			check_normal(out, r);
		} else if (r != -EINVAL)
			abort();
		return 0;
	}
	r = host_normalize_why((const char *)data + 1, size - 1, out, sizeof(out), &why);
	if (r > 0)
		check_normal(out, r);
	else if (r != -EINVAL || !why || !*why)
		abort();
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the ssh://[USER@]HOST[:PORT] parser of slate --host (api/dial.c), whose
 * output becomes ssh's arguments. Besides not crashing, the target checks what the ssh command
 * line relies on:
 *   - an accepted USER and HOST are non-empty (HOST) names of [A-Za-z0-9._-] that do not start
 *     with '-', or HOST is an IPv6 address inet_pton() reads: nothing ssh could take as an option
 *     and nothing a shell or ssh_config's %-tokens would expand;
 *   - the port is 0 (none given) or 1..65535;
 *   - the endpoint's name parses back to the same endpoint;
 *   - a refusal says why and leaves the output untouched.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/dial.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *s, bool may_be_empty)
{
	if (!*s) {
		if (!may_be_empty)
			abort();
		return;
	}
	if (s[0] == '-' ||
	    strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
	            strlen(s))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_endpoint ep, again, untouched;
	char url[1024], name[1024], err[256] = "";
	unsigned char a[16];
	int r;

	if (size >= sizeof(url))
		return 0;
	memcpy(url, data, size);
	url[size] = '\0';
	memset(&ep, 0x5a, sizeof(ep));
	untouched = ep;
	r = api_endpoint_parse_host(url, &ep, err, sizeof(err));
	if (r < 0) {
		if (r != -EINVAL || !err[0] || memcmp(&ep, &untouched, sizeof(ep)) != 0)
			abort();
		return 0;
	}
	if (r != 0 || !ep.ssh || ep.ssh_command || ep.port > 65535)
		abort();
	check_name(ep.user, true);
	if (strchr(ep.host, ':')) {
		if (inet_pton(AF_INET6, ep.host, a) != 1)
			abort();
	} else {
		check_name(ep.host, false);
	}
	(void)api_endpoint_name(&ep, name, sizeof(name));
	if (api_endpoint_parse_host(name, &again, err, sizeof(err)) != 0 ||
	    strcmp(again.user, ep.user) != 0 || strcmp(again.host, ep.host) != 0 ||
	    again.port != ep.port)
		abort();
	return 0;
}

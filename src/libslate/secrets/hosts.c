/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <arpa/inet.h>
#include <errno.h>
#include <idn2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "secrets/hosts.h"
#include "util/macro.h"

static int refuse(char *err, size_t errlen, const char *fmt, ...) _printf_(3, 4);
static int refuse(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen > 0) {
		va_start(ap, fmt);
		(void)vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* An IP literal in its inet_ntop() form (IPv6 without brackets), or -EINVAL if in is none. */
static int ip_literal(const char *in, char **ret)
{
	char tmp[INET6_ADDRSTRLEN + 2], out[INET6_ADDRSTRLEN];
	unsigned char a[sizeof(struct in6_addr)];
	size_t n = strlen(in);

	if (inet_pton(AF_INET, in, a) == 1) {
		if (!inet_ntop(AF_INET, a, out, sizeof(out)))
			return -EINVAL;
	} else {
		if (n >= 2 && in[0] == '[' && in[n - 1] == ']') {
			if (n - 2 >= sizeof(tmp))
				return -EINVAL;
			memcpy(tmp, in + 1, n - 2);
			tmp[n - 2] = '\0';
			in = tmp;
		}
		if (inet_pton(AF_INET6, in, a) != 1 || !inet_ntop(AF_INET6, a, out, sizeof(out)))
			return -EINVAL;
	}
	*ret = strdup(out);
	return *ret ? 0 : -ENOMEM;
}

bool secret_host_is_ip(const char *h)
{
	unsigned char a[sizeof(struct in6_addr)];

	return h && (inet_pton(AF_INET, h, a) == 1 || inet_pton(AF_INET6, h, a) == 1);
}

/* Checks an A-label name: labels of [a-z0-9_-], 1-63 long, no '-' at either end. */
static int check_labels(const char *orig, const char *h, char *err, size_t errlen)
{
	size_t n = strlen(h), label = 0;

	if (n == 0)
		return refuse(err, errlen, "host '%s' is empty", orig);
	if (n > SECRET_HOST_MAX_LEN)
		return refuse(err, errlen, "host '%s' is longer than %d characters", orig,
		              SECRET_HOST_MAX_LEN);
	for (size_t i = 0; i <= n; i++) {
		char c = h[i];

		if (c == '.' || c == '\0') {
			if (label == 0)
				return refuse(err, errlen, "host '%s' has an empty label", orig);
			if (h[i - 1] == '-' || h[i - label] == '-')
				return refuse(err, errlen,
				              "host '%s': a label may not start or end with '-'",
				              orig);
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return refuse(
			        err, errlen,
			        "host '%s': '%c' is not allowed in a host name (a host is a DNS "
			        "name or an IP address, without scheme, port or path)",
			        orig, c);
		if (++label > 63)
			return refuse(err, errlen,
			              "host '%s' has a label longer than 63 characters", orig);
	}
	/* A last label of digits ("1.2.3", "a.123") or anything inet_aton() reads as an address
	 * ("0x7f.1"): resolvers and URL parsers take such names for numbers. Refused. */
	{
		const char *last = strrchr(h, '.');
		struct in_addr ia;
		last = last ? last + 1 : h;
		if (strspn(last, "0123456789") == strlen(last) || inet_aton(h, &ia))
			return refuse(err, errlen,
			              "host '%s' is neither a valid IP address nor a name", orig);
	}
	return 0;
}

int secret_host_normalize(const char *in, char **ret, char *err, size_t errlen)
{
	_cleanup_free_ char *low = NULL;
	char *ascii = NULL;
	size_t n;
	bool non_ascii = false;
	int r;

	if (!in || !*in)
		return refuse(err, errlen, "a host may not be empty");
	n = strlen(in);
	if (n > 4 * SECRET_HOST_MAX_LEN)
		return refuse(err, errlen, "host is longer than %d characters",
		              SECRET_HOST_MAX_LEN);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c < 0x21 || c == 0x7f)
			return refuse(err, errlen,
			              "host '%s' contains white space or a control "
			              "character",
			              in);
		if (c >= 0x80)
			non_ascii = true;
	}
	if (strchr(in, '*'))
		return refuse(err, errlen,
		              "host '%s': wildcards are not allowed; a secret bound to a name "
		              "also goes to its subdomains",
		              in);
	if (strchr(in, '/') || strchr(in, '@') || strchr(in, '?') || strchr(in, '#'))
		return refuse(err, errlen,
		              "host '%s': give a bare host name, without scheme, user, path or "
		              "query",
		              in);
	if (!non_ascii && (strchr(in, ':') || strspn(in, "0123456789.") == n)) {
		r = ip_literal(in, ret);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			return refuse(
			        err, errlen,
			        strchr(in, ':')
			                ? "host '%s' is not an IP address (and a port does not "
			                  "belong in a host)"
			                : "host '%s' is neither an IPv4 address nor a name",
			        in);
		return 0;
	}

	low = strdup(in);
	if (!low)
		return -ENOMEM;
	for (char *p = low; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	n = strlen(low);
	if (n > 1 && low[n - 1] == '.')
		low[--n] = '\0'; /* one trailing dot: the root */
	else if (n == 1 && low[0] == '.')
		return refuse(err, errlen, "host '%s' is empty", in);

	if (non_ascii) {
		r = idn2_to_ascii_8z(low, &ascii, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
		if (r != IDN2_OK)
			return refuse(err, errlen,
			              "host '%s' is not a valid internationalised name: %s", in,
			              idn2_strerror(r));
		free(low);
		low = strdup(ascii);
		idn2_free(ascii);
		if (!low)
			return -ENOMEM;
	}
	r = check_labels(in, low, err, errlen);
	if (r < 0)
		return r;
	/* An A-label written by hand must be one libidn2 can read back ("xn--" + valid punycode). */
	if (!non_ascii && strstr(low, "xn--")) {
		char *u8 = NULL;
		r = idn2_to_unicode_8z8z(low, &u8, 0);
		if (r != IDN2_OK)
			return refuse(err, errlen, "host '%s' has an invalid IDNA A-label: %s", in,
			              idn2_strerror(r));
		idn2_free(u8);
	}
	*ret = TAKE_PTR(low);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Host normalisation and binding, address classes (see host.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <idn2.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/host.h"
#include "util/macro.h"

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int refuse(const char **ret_why, const char *why)
{
	if (ret_why)
		*ret_why = why;
	return -EINVAL;
}

/* Checks an ASCII, lower-case name: labels of 1-63 bytes of [a-z0-9-_] not starting or ending
 * with '-', at most HOST_MAX in all. */
static int check_name(const char *s, const char **ret_why)
{
	size_t n = strlen(s), label = 0;

	if (n == 0)
		return refuse(ret_why, "is empty");
	if (n > HOST_MAX)
		return refuse(ret_why, "is longer than 253 characters");
	for (size_t i = 0; i <= n; i++) {
		if (s[i] == '.' || s[i] == '\0') {
			if (label == 0)
				return refuse(ret_why, "has an empty label");
			if (s[i - 1] == '-' || s[i - label] == '-')
				return refuse(ret_why, "has a label that starts or ends with '-'");
			label = 0;
			continue;
		}
		if (!name_char(s[i]))
			return refuse(ret_why, "has a character that is not allowed in a host name "
			                       "(a host is a DNS name or an IP address, without "
			                       "scheme, port or path)");
		if (++label > 63)
			return refuse(ret_why, "has a label longer than 63 characters");
	}
	return 0;
}

/* True when resolvers or URL parsers would take the name for an IPv4 address: inet_aton()
 * reads it ("127.1", "0x7f.0.0.1", "2130706433", "0177.0.0.1"), or its last label is a number
 * the WHATWG URL parser reads ("1.2.3.0x4", "x.0x7f", "a.123", "0x"). */
static bool looks_numeric(const char *s)
{
	struct in_addr a;
	const char *last = strrchr(s, '.');

	if (inet_aton(s, &a) != 0)
		return true;
	last = last ? last + 1 : s;
	if (*last == '\0')
		return false;
	if (last[0] == '0' && (last[1] == 'x' || last[1] == 'X'))
		return strspn(last + 2, "0123456789abcdefABCDEF") == strlen(last + 2);
	return strspn(last, "0123456789") == strlen(last);
}

/* An IPv6 literal (without brackets) in its inet_ntop() form. */
static int ipv6_literal(const char *in, size_t n, char *out, size_t len, const char **ret_why)
{
	char tmp[INET6_ADDRSTRLEN + 1];
	struct in6_addr a6;

	if (memchr(in, '%', n))
		return refuse(ret_why, "has an IPv6 zone ('%'), which names an interface of this "
		                       "machine, not a destination");
	if (n >= sizeof(tmp))
		return refuse(ret_why, "is not an IPv6 address");
	memcpy(tmp, in, n);
	tmp[n] = '\0';
	if (inet_pton(AF_INET6, tmp, &a6) != 1)
		return refuse(ret_why,
		              "is not an IP address (and a port does not belong in a host)");
	if (!inet_ntop(AF_INET6, &a6, out, (socklen_t)len))
		return refuse(ret_why, "is not an IPv6 address");
	return HOST_IPV6;
}

int host_normalize_why(const char *in, size_t n, char *out, size_t len, const char **ret_why)
{
	char tmp[4 * HOST_MAX + 2];
	struct in_addr a4;
	bool ascii = true;

	if (len < HOST_BUF)
		return refuse(ret_why, "does not fit");
	if (n == 0)
		return refuse(ret_why, "is empty");
	/* U-labels take up to 4 bytes a character; what is longer cannot be 253 A-label bytes. */
	if (n > 4 * HOST_MAX)
		return refuse(ret_why, "is longer than 253 characters");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c < 0x21 || c == 0x7f)
			return refuse(ret_why, "contains white space or a control character");
		if (c >= 0x80)
			ascii = false;
		else if (c == '*')
			return refuse(ret_why,
			              "is a wildcard: not allowed (a secret bound to a name "
			              "also goes to its subdomains)");
		else if (c == '/' || c == '@' || c == '?' || c == '#')
			return refuse(ret_why, "is not a bare host name: give it without scheme, "
			                       "user, path or query");
	}
	/* "[v6]", and a bare IPv6 address: the only hosts with a colon. */
	if (in[0] == '[') {
		if (n < 3 || in[n - 1] != ']')
			return refuse(ret_why, "is not an IPv6 address in brackets");
		return ipv6_literal(in + 1, n - 2, out, len, ret_why);
	}
	if (memchr(in, ':', n))
		return ascii ? ipv6_literal(in, n, out, len, ret_why)
		             : refuse(ret_why, "is not an IP address (and a port does not belong "
		                               "in a host)");
	memcpy(tmp, in, n);
	tmp[n] = '\0';
	/* One trailing dot stripped ("example.com." is example.com), not two. */
	if (n > 1 && tmp[n - 1] == '.')
		tmp[--n] = '\0';
	if (inet_pton(AF_INET, tmp, &a4) == 1) {
		if (!inet_ntop(AF_INET, &a4, out, (socklen_t)len))
			return refuse(ret_why, "is not an IPv4 address");
		return HOST_IPV4;
	}
	for (size_t i = 0; i < n; i++)
		if (tmp[i] >= 'A' && tmp[i] <= 'Z')
			tmp[i] = (char)(tmp[i] - 'A' + 'a');
	if (!ascii || strstr(tmp, "xn--")) {
		/* U-labels become A-labels (TR46 non-transitional mapping, so full-width and
		 * upper-case forms map too); A-labels are checked to be valid ones. */
		char *alabel = NULL;
		int r = idn2_lookup_u8((const uint8_t *)tmp, (uint8_t **)&alabel,
		                       IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
		if (r != IDN2_OK)
			return refuse(ret_why, "is not a valid internationalised (IDNA) name");
		if (strlen(alabel) > HOST_MAX) {
			idn2_free(alabel);
			return refuse(ret_why, "is longer than 253 characters");
		}
		for (char *q = alabel; *q; q++)
			if (*q >= 'A' && *q <= 'Z')
				*q = (char)(*q - 'A' + 'a');
		(void)snprintf(tmp, sizeof(tmp), "%s", alabel);
		idn2_free(alabel);
	}
	{
		int r = check_name(tmp, ret_why);
		if (r < 0)
			return r;
	}
	if (looks_numeric(tmp))
		return refuse(ret_why, "looks like a number, which resolvers and URL parsers read "
		                       "as an IPv4 address, but is no dotted quad");
	(void)snprintf(out, len, "%s", tmp);
	return HOST_NAME;
}

int host_normalize_n(const char *in, size_t n, char *out, size_t len)
{
	return host_normalize_why(in, n, out, len, NULL);
}

int host_normalize(const char *in, char *out, size_t len)
{
	return host_normalize_n(in, strlen(in), out, len);
}

bool host_is_ip(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	return inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
}

bool host_matches(const char *host, const char *pattern)
{
	size_t hl = strlen(host), pl = strlen(pattern);

	if (pl == 0 || hl == 0)
		return false;
	if (host_is_ip(host) || host_is_ip(pattern))
		return strcmp(host, pattern) == 0;
	if (hl == pl)
		return strcmp(host, pattern) == 0;
	return hl > pl && host[hl - pl - 1] == '.' && strcmp(host + hl - pl, pattern) == 0;
}

/*
 * The shared zones this project knows (doc/secrets.md "Broad bindings"): where anyone can own
 * a name, and the owner runs the server behind it (API Gateway, Lambda URLs, load balancers,
 * EC2, CloudFront, App Engine, Cloud Run, Heroku...) or at least its content (buckets, Pages
 * sites). The first zone a host covers is the one a warning names: the most telling first.
 * '*' stands for one region label (host_is_region_label: "us-east-1"), not for any label, or
 * "sts.amazonaws.com" would be above "s3.*.amazonaws.com". An example's labels right of its
 * zone are the zone's, with a sample region for each '*'.
 */
static const struct host_shared_zone top_level = {"*", "attacker-owned.com",
                                                  "the service's full host name (api.example.com)"};
static const struct host_shared_zone shared_zones[] = {
        /* Amazon Web Services */
        {"s3.amazonaws.com", "evil-bucket.s3.amazonaws.com", "BUCKET.s3.REGION.amazonaws.com"},
        {"s3.*.amazonaws.com", "evil-bucket.s3.us-east-1.amazonaws.com",
         "BUCKET.s3.REGION.amazonaws.com"},
        {"s3.dualstack.*.amazonaws.com", "evil-bucket.s3.dualstack.us-east-1.amazonaws.com",
         "BUCKET.s3.dualstack.REGION.amazonaws.com"},
        {"s3-external-1.amazonaws.com", "evil-bucket.s3-external-1.amazonaws.com",
         "BUCKET.s3.us-east-1.amazonaws.com"},
        {"s3-website.*.amazonaws.com", "evil-bucket.s3-website.us-east-1.amazonaws.com",
         "BUCKET.s3-website.REGION.amazonaws.com"},
        {"s3-accesspoint.*.amazonaws.com",
         "evil-111122223333.s3-accesspoint.us-east-1.amazonaws.com",
         "NAME-ACCOUNT.s3-accesspoint.REGION.amazonaws.com"},
        {"execute-api.*.amazonaws.com", "abc123.execute-api.us-east-1.amazonaws.com",
         "API_ID.execute-api.REGION.amazonaws.com"},
        {"*.elb.amazonaws.com", "evil-123.us-east-1.elb.amazonaws.com",
         "NAME.REGION.elb.amazonaws.com"},
        {"*.compute.amazonaws.com", "ec2-203-0-113-1.us-east-2.compute.amazonaws.com",
         "the instance's own name"},
        {"compute-1.amazonaws.com", "ec2-203-0-113-1.compute-1.amazonaws.com",
         "the instance's own name"},
        {"lambda-url.*.on.aws", "abc123.lambda-url.us-east-1.on.aws",
         "URL_ID.lambda-url.REGION.on.aws"},
        {"s3.*.amazonaws.com.cn", "evil-bucket.s3.cn-north-1.amazonaws.com.cn",
         "BUCKET.s3.REGION.amazonaws.com.cn"},
        {"execute-api.*.amazonaws.com.cn", "abc123.execute-api.cn-north-1.amazonaws.com.cn",
         "API_ID.execute-api.REGION.amazonaws.com.cn"},
        {"*.elasticbeanstalk.com", "evil.us-east-1.elasticbeanstalk.com",
         "ENV.REGION.elasticbeanstalk.com"},
        {"*.awsapprunner.com", "abc123.us-east-1.awsapprunner.com", "ID.REGION.awsapprunner.com"},
        {"cloudfront.net", "d111111abcdef8.cloudfront.net", "DISTRIBUTION.cloudfront.net"},
        {"amplifyapp.com", "main.d111111abcdef8.amplifyapp.com", "BRANCH.APP.amplifyapp.com"},
        /* Google */
        {"storage.googleapis.com", "evil-bucket.storage.googleapis.com",
         "BUCKET.storage.googleapis.com"},
        {"appspot.com", "evil-project.appspot.com", "PROJECT.appspot.com"},
        {"cloudfunctions.net", "us-central1-evil.cloudfunctions.net",
         "REGION-PROJECT.cloudfunctions.net"},
        {"run.app", "evil-abc123-uc.a.run.app", "SERVICE-HASH-REGION.a.run.app"},
        {"web.app", "evil.web.app", "SITE.web.app"},
        {"firebaseapp.com", "evil.firebaseapp.com", "PROJECT.firebaseapp.com"},
        /* Microsoft Azure */
        {"azurewebsites.net", "evil.azurewebsites.net", "APP.azurewebsites.net"},
        {"blob.core.windows.net", "evil.blob.core.windows.net", "ACCOUNT.blob.core.windows.net"},
        {"azure-api.net", "evil.azure-api.net", "SERVICE.azure-api.net"},
        {"azurestaticapps.net", "evil-123.azurestaticapps.net", "SITE.azurestaticapps.net"},
        /* Azure's region labels ("eastus") are no region labels here: the zone is the
         * parent of them all. */
        {"cloudapp.azure.com", "evil.eastus.cloudapp.azure.com", "LABEL.REGION.cloudapp.azure.com"},
        /* Code hosting */
        {"github.io", "evil.github.io", "OWNER.github.io"},
        {"gitlab.io", "evil.gitlab.io", "NAMESPACE.gitlab.io"},
        /* Application platforms and tunnels */
        {"herokuapp.com", "evil.herokuapp.com", "APP.herokuapp.com"},
        {"vercel.app", "evil.vercel.app", "PROJECT.vercel.app"},
        {"netlify.app", "evil.netlify.app", "SITE.netlify.app"},
        {"pages.dev", "evil.pages.dev", "PROJECT.pages.dev"},
        {"workers.dev", "evil.account.workers.dev", "WORKER.ACCOUNT.workers.dev"},
        {"r2.dev", "pub-0123456789abcdef.r2.dev", "pub-ID.r2.dev"},
        {"fly.dev", "evil.fly.dev", "APP.fly.dev"},
        {"onrender.com", "evil.onrender.com", "SERVICE.onrender.com"},
        {"ngrok.io", "evil.ngrok.io", "the tunnel's own name"},
        {"ngrok-free.app", "evil.ngrok-free.app", "the tunnel's own name"},
        {"ngrok.app", "evil.ngrok.app", "the tunnel's own name"},
        {"trycloudflare.com", "evil.trycloudflare.com", "the tunnel's own name"},
};

bool host_is_region_label(const char *s, size_t n)
{
	if (n == 0 || n > 63 || !memchr(s, '-', n) || s[0] < 'a' || s[0] > 'z' || s[n - 1] < '0' ||
	    s[n - 1] > '9')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      (s[i] == '-' && s[i - 1] != '-')))
			return false;
	return true;
}

/* The number of host's labels when they all match the rightmost labels of zone ('*' matching
 * one region label); 0 when one differs or host has more labels than zone (a name inside it). */
static size_t zone_covers(const char *host, const char *zone)
{
	const char *h = host + strlen(host), *z = zone + strlen(zone);
	size_t labels = 0;

	if (h == host || z == zone)
		return 0;
	for (;;) {
		const char *hs = h, *zs = z;
		while (hs > host && hs[-1] != '.')
			hs--;
		while (zs > zone && zs[-1] != '.')
			zs--;
		if (z - zs == 1 && *zs == '*'
		            ? !host_is_region_label(hs, (size_t)(h - hs))
		            : h - hs != z - zs || memcmp(hs, zs, (size_t)(h - hs)) != 0)
			return 0;
		labels++;
		if (hs == host)
			return labels;
		if (zs == zone)
			return 0;
		h = hs - 1;
		z = zs - 1;
	}
}

/* The last n labels of name (all of it when it has no more). */
static const char *last_labels(const char *name, size_t n)
{
	for (const char *p = name + strlen(name); p > name; p--)
		if (p[-1] == '.' && --n == 0)
			return p;
	return name;
}

/* Fills example and instance (see host.h) for host, which covers covered labels of z. */
static void zone_names(const struct host_shared_zone *z, const char *host, size_t covered,
                       char *example, char *instance, size_t len)
{
	const char *cut = last_labels(z->example, covered);
	size_t zone_labels = 1;
	char buf[HOST_BUF];

	/* The example's labels left of what host covers, then host itself; the zone's instance
	 * is as many of that name's last labels as the zone has. */
	(void)snprintf(buf, sizeof(buf), "%.*s%s", (int)(cut - z->example), z->example, host);
	for (const char *p = z->zone; *p; p++)
		zone_labels += *p == '.';
	if (example)
		(void)snprintf(example, len, "%s", buf);
	if (instance)
		(void)snprintf(instance, len, "%s", last_labels(buf, zone_labels));
}

const struct host_shared_zone *host_shared_zone(const char *host, char *example, char *instance,
                                                size_t len)
{
	if (host_is_ip(host) || !*host)
		return NULL;
	if (!strchr(host, '.')) {
		zone_names(&top_level, host, 1, example, instance, len);
		return &top_level;
	}
	for (size_t i = 0; i < ELEMENTSOF(shared_zones); i++) {
		size_t covered = zone_covers(host, shared_zones[i].zone);
		if (covered > 0) {
			zone_names(&shared_zones[i], host, covered, example, instance, len);
			return &shared_zones[i];
		}
	}
	return NULL;
}

int host_split_authority(const char *authority, size_t n, uint16_t default_port, char *host,
                         size_t hostlen, uint16_t *ret_port)
{
	const char *colon = NULL;
	size_t host_n = n;
	unsigned long port = default_port;

	if (n == 0)
		return -EINVAL;
	if (authority[0] == '[') {
		const char *close = memchr(authority, ']', n);
		if (!close)
			return -EINVAL;
		host_n = (size_t)(close - authority) + 1;
		if (host_n < n) {
			if (authority[host_n] != ':')
				return -EINVAL;
			colon = authority + host_n;
		}
	} else {
		/* More than one colon without brackets: no valid authority. */
		colon = memchr(authority, ':', n);
		if (colon) {
			if (memchr(colon + 1, ':', n - (size_t)(colon - authority) - 1))
				return -EINVAL;
			host_n = (size_t)(colon - authority);
		}
	}
	if (colon) {
		const char *p = colon + 1, *end = authority + n;
		if (p == end || end - p > 5)
			return -EINVAL;
		port = 0;
		for (; p < end; p++) {
			if (*p < '0' || *p > '9')
				return -EINVAL;
			port = port * 10 + (unsigned long)(*p - '0');
		}
	}
	if (port == 0 || port > 65535)
		return -EINVAL;
	{
		int kind = host_normalize_n(authority, host_n, host, hostlen);
		if (kind < 0)
			return kind;
		*ret_port = (uint16_t)port;
		return kind;
	}
}

void host_format_authority(const char *host, uint16_t port, char *out, size_t len)
{
	if (strchr(host, ':'))
		(void)snprintf(out, len, "[%s]:%u", host, (unsigned)port);
	else
		(void)snprintf(out, len, "%s:%u", host, (unsigned)port);
}

const char *host_addr_class_name(enum addr_class c)
{
	static const char *const names[] = {
	        [ADDR_PUBLIC] = "public",         [ADDR_LOOPBACK] = "loopback",
	        [ADDR_PRIVATE] = "private",       [ADDR_LINK_LOCAL] = "link-local",
	        [ADDR_HOST_LOCAL] = "host-local", [ADDR_METADATA] = "cloud metadata",
	        [ADDR_MULTICAST] = "multicast",   [ADDR_RESERVED] = "reserved",
	};
	return (size_t)c < ELEMENTSOF(names) ? names[c] : "reserved";
}

static bool in4(uint32_t a, uint32_t net, unsigned prefix)
{
	uint32_t mask = prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
	return (a & mask) == (net & mask);
}

#define IP4(a, b, c, d) (((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (d))

static enum addr_class classify4(uint32_t a)
{
	if (a == IP4(169, 254, 169, 254) || a == IP4(169, 254, 170, 2) ||
	    a == IP4(100, 100, 100, 200) || a == IP4(192, 0, 0, 192))
		return ADDR_METADATA;
	if (in4(a, IP4(0, 0, 0, 0), 8))
		return ADDR_HOST_LOCAL;
	if (in4(a, IP4(127, 0, 0, 0), 8))
		return ADDR_LOOPBACK;
	if (in4(a, IP4(10, 0, 0, 0), 8) || in4(a, IP4(172, 16, 0, 0), 12) ||
	    in4(a, IP4(192, 168, 0, 0), 16) || in4(a, IP4(100, 64, 0, 0), 10))
		return ADDR_PRIVATE;
	if (in4(a, IP4(169, 254, 0, 0), 16))
		return ADDR_LINK_LOCAL;
	if (in4(a, IP4(224, 0, 0, 0), 4))
		return ADDR_MULTICAST;
	if (in4(a, IP4(240, 0, 0, 0), 4) || in4(a, IP4(192, 0, 0, 0), 24) ||
	    in4(a, IP4(192, 0, 2, 0), 24) || in4(a, IP4(198, 51, 100, 0), 24) ||
	    in4(a, IP4(203, 0, 113, 0), 24) || in4(a, IP4(198, 18, 0, 0), 15))
		return ADDR_RESERVED;
	return ADDR_PUBLIC;
}

static uint32_t get4(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static bool prefix6(const uint8_t *a, const uint8_t *net, unsigned bits)
{
	size_t bytes = bits / 8;
	unsigned rest = bits % 8;

	if (memcmp(a, net, bytes) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((a[bytes] ^ net[bytes]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

bool host_ip6_embedded_v4(const uint8_t *a, uint32_t *ret)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};            /* RFC 6052 */
	static const uint8_t nat64_local[6] = {0, 0x64, 0xff, 0x9b, 0, 1}; /* RFC 8215 */
	static const uint8_t six2four[2] = {0x20, 0x02};                   /* RFC 3056 */
	static const uint8_t teredo[4] = {0x20, 0x01, 0, 0};               /* RFC 4380 */
	uint32_t v;

	if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
		v = get4(a + 12);
	else if (memcmp(a, nat64_local, 6) == 0)
		/* A /48 prefix (RFC 6052 2.2): bits 48-63 and 72-87, around the u octet. */
		v = ((uint32_t)a[6] << 24) | ((uint32_t)a[7] << 16) | ((uint32_t)a[9] << 8) | a[10];
	else if (memcmp(a, six2four, 2) == 0)
		v = get4(a + 2);
	else if (memcmp(a, teredo, 4) == 0)
		v = get4(a + 12) ^ 0xffffffffu; /* the client's address, obfuscated */
	else
		return false;
	*ret = v;
	return true;
}

static enum addr_class classify6(const uint8_t *a)
{
	static const uint8_t zero[16] = {0};
	static const uint8_t ec2[16] = {0xfd, 0, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54};
	static const uint8_t doc[4] = {0x20, 0x01, 0x0d, 0xb8};
	static const uint8_t discard[8] = {0x01, 0x00};
	uint8_t loop[16] = {[15] = 1};
	uint32_t v4;

	if (memcmp(a, zero, 16) == 0)
		return ADDR_HOST_LOCAL;
	if (memcmp(a, loop, 16) == 0)
		return ADDR_LOOPBACK;
	if (host_ip6_embedded_v4(a, &v4))
		return classify4(v4);
	if (memcmp(a, ec2, 16) == 0)
		return ADDR_METADATA;
	if (memcmp(a, zero, 12) == 0) /* IPv4-compatible (deprecated) */
		return ADDR_RESERVED;
	if ((a[0] & 0xfe) == 0xfc || (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0))
		return ADDR_PRIVATE; /* ULA, site-local */
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return ADDR_LINK_LOCAL;
	if (a[0] == 0xff)
		return ADDR_MULTICAST;
	if (prefix6(a, doc, 32) || prefix6(a, discard, 64))
		return ADDR_RESERVED;
	return ADDR_PUBLIC;
}

enum addr_class host_addr_classify(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return classify4(
		        ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr));
	if (sa->sa_family == AF_INET6)
		return classify6(
		        ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr);
	return ADDR_RESERVED;
}

int host_net_parse(const char *s, struct ip_net *ret)
{
	char tmp[INET6_ADDRSTRLEN + 8];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	struct ip_net net = {0};
	unsigned long prefix;
	char *end;

	if (n == 0 || n >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (tmp[0] == '[' && n > 2 && tmp[n - 1] == ']') {
		memmove(tmp, tmp + 1, n - 2);
		tmp[n - 2] = '\0';
	}
	if (inet_pton(AF_INET, tmp, net.addr) == 1) {
		net.family = AF_INET;
		prefix = 32;
	} else if (inet_pton(AF_INET6, tmp, net.addr) == 1) {
		net.family = AF_INET6;
		prefix = 128;
	} else
		return -EINVAL;
	if (slash) {
		unsigned long max = prefix;
		if (!slash[1] || slash[1] < '0' || slash[1] > '9')
			return -EINVAL;
		errno = 0;
		prefix = strtoul(slash + 1, &end, 10);
		if (errno || *end || prefix > max)
			return -EINVAL;
	}
	net.prefix = (unsigned)prefix;
	/* Host bits set ("10.1.2.3/8") are a typo more often than a wish: refused. */
	{
		size_t bytes = net.family == AF_INET ? 4 : 16;
		for (size_t i = 0; i < bytes; i++) {
			unsigned bit0 = (unsigned)i * 8;
			uint8_t keep = bit0 >= net.prefix ? 0
			               : bit0 + 8 <= net.prefix
			                       ? 0xff
			                       : (uint8_t)(0xff << (8 - (net.prefix - bit0)));
			if (net.addr[i] & (uint8_t)~keep)
				return -EINVAL;
		}
	}
	*ret = net;
	return 0;
}

void host_net_format(const struct ip_net *n, char *out, size_t len)
{
	char a[INET6_ADDRSTRLEN];

	if (!inet_ntop(n->family, n->addr, a, sizeof(a)))
		(void)snprintf(a, sizeof(a), "?");
	if (n->prefix == (n->family == AF_INET ? 32u : 128u))
		(void)snprintf(out, len, "%s", a);
	else
		(void)snprintf(out, len, "%s/%u", a, n->prefix);
}

bool host_net_contains(const struct ip_net *n, const struct sockaddr *sa)
{
	uint8_t a[4];
	uint32_t v4;

	if (sa->sa_family == AF_INET) {
		memcpy(a, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
		return n->family == AF_INET && prefix6(a, n->addr, n->prefix);
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *p =
		        ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
		if (n->family == AF_INET6)
			return prefix6(p, n->addr, n->prefix);
		/* An IPv4 network holds the IPv6 addresses that carry one of its addresses: they
		 * reach it (through a translator or a tunnel) as surely as the address itself. */
		if (n->family != AF_INET || !host_ip6_embedded_v4(p, &v4))
			return false;
		a[0] = (uint8_t)(v4 >> 24);
		a[1] = (uint8_t)(v4 >> 16);
		a[2] = (uint8_t)(v4 >> 8);
		a[3] = (uint8_t)v4;
		return prefix6(a, n->addr, n->prefix);
	}
	return false;
}

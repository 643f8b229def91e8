/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Host names and addresses as the egress proxy compares them (doc/security.md, "Credentials"):
 *
 *   - a host is normalised before any comparison: one trailing dot stripped, lower case, IDNA
 *     A-labels (libidn2, IDNA2008 non-transitional) for names, the canonical text form for IP
 *     literals (no brackets);
 *   - a host is bound to a pattern when it equals it or is a subdomain at a dot boundary
 *     ("api.github.com" is bound to "github.com"; "evilgithub.com" and "github.com.evil.test"
 *     are not); IP literals only ever equal another IP literal, never match a name;
 *   - destination addresses are classified after DNS resolution so that loopback, private,
 *     link-local, host-local and cloud metadata addresses can be refused.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define HOST_MAX 253
#define HOST_BUF (HOST_MAX + 1)

enum host_kind {
	HOST_NAME = 1,
	HOST_IPV4 = 2,
	HOST_IPV6 = 3,
};

/*
 * The one host normaliser: secret bindings (secret set, the vault), egress policy rules and
 * every host a request names go through it, and what it returns is stored and compared as is.
 * Normalises in (a name, a dotted IPv4 address, an IPv6 address with or without brackets) into
 * out (at least HOST_BUF bytes): one trailing dot stripped, lower case, IDNA2008 A-labels
 * (libidn2, TR46 non-transitional; A-labels given as such checked), labels of 1-63 characters
 * of [a-z0-9_-] not starting or ending with '-', at most HOST_MAX in all; IP literals in
 * their inet_ntop() form without brackets. Returns its kind (> 0), or -EINVAL for something
 * that is no host: empty, too long, an empty or over-long label, other characters (white space,
 * '*', scheme, user, port, path), an IPv6 zone id, an invalid A-label, or a numeric form that
 * resolvers or URL parsers would read as an IPv4 address but that is not a dotted quad
 * ("127.1", "0x7f.0.0.1", "2130706433", "a.0x7f", "a.123").
 */
int host_normalize(const char *in, char *out, size_t len);
/* Same for the n bytes at in (not NUL-terminated). */
int host_normalize_n(const char *in, size_t n, char *out, size_t len);
/* Same; on -EINVAL, when ret_why is non-NULL, *ret_why says what is wrong (a static phrase to
 * follow "host 'X' ": "is empty", "has a label longer than 63 characters", ...). */
int host_normalize_why(const char *in, size_t n, char *out, size_t len, const char **ret_why);
/* Whether a normalised host is an IP literal. */
bool host_is_ip(const char *host);
/* Whether normalised host is bound to normalised pattern (see above). */
bool host_matches(const char *host, const char *pattern);

/*
 * Shared zones: DNS zones in which anyone can own a name (an S3 bucket, an API Gateway API, a
 * CloudFront distribution, a GitHub Pages site...), from a list this project keeps for the
 * providers it knows (host.c; doc/secrets.md "Broad bindings"). In a zone '*' stands for one
 * region label ("execute-api.*.amazonaws.com"). A secret bound to a zone, or to a name above one
 * ("amazonaws.com", "us-east-1.amazonaws.com", "com"), also goes to names that other people own.
 */
struct host_shared_zone {
	const char *zone;    /* "s3.*.amazonaws.com" */
	const char *example; /* a name in it that someone else may own: "evil-bucket.s3..." */
	const char *instead; /* the narrowest binding to use: "BUCKET.s3.REGION.amazonaws.com" */
};
/*
 * Whether binding normalised host covers a shared zone: host is a zone, or a name above one,
 * its labels matching the zone's rightmost ones ('*' matching a region label); a name inside a zone
 * ("mybucket.s3.amazonaws.com") and IP literals never do. A single-label host (a top-level
 * domain) always does. Returns the first such zone of the list (NULL for none). When it returns
 * one, example (when non-NULL, len bytes) receives a name in that zone that host covers and that
 * someone else may own ("evil-bucket.s3.amazonaws.com" for "amazonaws.com"), and instance (when
 * non-NULL, len bytes) the zone as host covers it ("s3.us-east-1.amazonaws.com" for
 * "us-east-1.amazonaws.com" and "s3.*.amazonaws.com").
 */
const struct host_shared_zone *host_shared_zone(const char *host, char *example, char *instance,
                                                size_t len);
/* Whether the n bytes at s are a region label as AWS names them ("us-east-1", "us-gov-west-1",
 * "cn-north-1"): 1-63 of [a-z0-9-], starting with a letter, ending with a digit, with at least
 * one '-' and no two in a row. */
bool host_is_region_label(const char *s, size_t n);

/*
 * Splits an authority ("host", "host:port", "[v6]:port") into a normalised host and a port.
 * Without a port, default_port is used; a port is required when default_port is 0. Returns the
 * host's kind, or -EINVAL.
 */
int host_split_authority(const char *authority, size_t n, uint16_t default_port, char *host,
                         size_t hostlen, uint16_t *ret_port);
/* Formats host and port as an authority ("[::1]:443", "a.test:80") into out. */
void host_format_authority(const char *host, uint16_t port, char *out, size_t len);

enum addr_class {
	ADDR_PUBLIC = 0,
	ADDR_LOOPBACK,   /* 127/8, ::1 */
	ADDR_PRIVATE,    /* 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, fec0::/10 */
	ADDR_LINK_LOCAL, /* 169.254/16, fe80::/10 */
	ADDR_HOST_LOCAL, /* 0/8, :: */
	ADDR_METADATA,   /* cloud metadata: 169.254.169.254, 169.254.170.2, fd00:ec2::254,
	                  * 100.100.100.200, 192.0.0.192 */
	ADDR_MULTICAST,
	ADDR_RESERVED, /* broadcast, 240/4, documentation, benchmarking, IETF assignments */
};
/* "public", "loopback", "private", ... */
const char *host_addr_class_name(enum addr_class c);
/*
 * Whether the IPv6 address a (16 bytes) carries an IPv4 address, and which (host order) in
 * *ret: IPv4-mapped (::ffff:0:0/96), NAT64 (64:ff9b::/96, and the local-use 64:ff9b:1::/48 with
 * RFC 6052's /48 layout), 6to4 (2002::/16, bits 16-47) and Teredo (2001::/32, the client's
 * address: the last 32 bits XOR 0xffffffff). Such an address reaches the IPv4 one through a
 * translator or a tunnel, so every address check judges it as that IPv4 address.
 */
bool host_ip6_embedded_v4(const uint8_t *a, uint32_t *ret);
/* Classifies an AF_INET or AF_INET6 address (one that carries an IPv4 address, host_ip6_embedded_v4,
 * by that address). Anything else is ADDR_RESERVED. */
enum addr_class host_addr_classify(const struct sockaddr *sa);

/* An address or a network ("10.0.0.0/8", "127.0.0.1", "::1", "[fd00::]/8"). */
struct ip_net {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	unsigned prefix;
};
/* Returns 0, or -EINVAL when s is not an address or network (host bits set are refused). */
int host_net_parse(const char *s, struct ip_net *ret);
/* Writes the canonical text form ("10.0.0.0/8", or just the address for a full prefix). */
void host_net_format(const struct ip_net *n, char *out, size_t len);
/* Whether sa (AF_INET/AF_INET6) lies inside n: an IPv6 network holds IPv6 addresses by prefix;
 * an IPv4 network holds IPv4 addresses and the IPv6 addresses carrying one of them
 * (host_ip6_embedded_v4: mapped, NAT64, 6to4, Teredo). */
bool host_net_contains(const struct ip_net *n, const struct sockaddr *sa);

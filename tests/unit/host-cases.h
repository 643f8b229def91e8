/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Hostile spellings of hosts, shared by every caller of the one host normaliser (util/host.h):
 * tests/unit/test-host (host_normalize, host_split_authority), test-vault (secret_new's
 * --host, what the vault stores) and test-proxy (egress policy rules). Each must accept exactly
 * these and store exactly the normal form given; out NULL: refused.
 */

#include "util/host.h"

struct host_case {
	const char *in, *out;
	int kind; /* HOST_NAME, HOST_IPV4, HOST_IPV6; 0 when refused */
};

#define L63 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define L61 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static const struct host_case host_cases[] = {
        /* Names, case and one trailing dot. */
        {"api.github.com", "api.github.com", HOST_NAME},
        {"API.GitHub.COM", "api.github.com", HOST_NAME},
        {"api.github.com.", "api.github.com", HOST_NAME},
        {"Api.GitHub.Com.", "api.github.com", HOST_NAME},
        {"localhost", "localhost", HOST_NAME},
        {"under_score.test", "under_score.test", HOST_NAME},
        {"a--b.example", "a--b.example", HOST_NAME},
        {"s3.eu-west-1.amazonaws.com", "s3.eu-west-1.amazonaws.com", HOST_NAME},
        {"", NULL, 0},
        {".", NULL, 0},
        {"..", NULL, 0},
        {"a.test..", NULL, 0}, /* one trailing dot only */
        {"a..b", NULL, 0},
        {".a.test", NULL, 0},
        /* IDNA: U-labels become A-labels (non-transitional: ß stays), A-labels are checked. */
        {"Bücher.Example", "xn--bcher-kva.example", HOST_NAME},
        {"BÜCHER.Example.", "xn--bcher-kva.example", HOST_NAME},
        {"xn--bcher-kva.example", "xn--bcher-kva.example", HOST_NAME},
        {"XN--BCHER-KVA.EXAMPLE", "xn--bcher-kva.example", HOST_NAME},
        {"faß.de", "xn--fa-hia.de", HOST_NAME},
        {"\xef\xbd\x85xample.com", "example.com", HOST_NAME}, /* full-width e, mapped */
        {"xn--.example", NULL, 0},
        {"xn--a.example", NULL, 0},          /* punycode of nothing valid */
        {"xn--bcher-kva-.example", NULL, 0}, /* '-' at the end */
        {"b\xc3"
         "cher.example",
         NULL, 0}, /* not UTF-8 */
        /* '-' at a label's edge. */
        {"-a.example", NULL, 0},
        {"a-.example", NULL, 0},
        {"a.-b.example", NULL, 0},
        {"a.b-", NULL, 0},
        /* Over-long: a label over 63, a name over 253. */
        {L63 ".test", L63 ".test", HOST_NAME},
        {L63 "a.test", NULL, 0},
        {L63 "." L63 "." L63 "." L61, L63 "." L63 "." L63 "." L61, HOST_NAME}, /* 253 */
        {L63 "." L63 "." L63 "." L61 "a", NULL, 0},                            /* 254 */
        /* Numeric forms resolvers or URL parsers read as IPv4: only a dotted quad is one. */
        {"127.0.0.1", "127.0.0.1", HOST_IPV4},
        {"127.0.0.1.", "127.0.0.1", HOST_IPV4},
        {"10.1.2.3", "10.1.2.3", HOST_IPV4},
        {"127.1", NULL, 0},
        {"1.2.3", NULL, 0},
        {"0x7f.0.0.1", NULL, 0},
        {"0x7f.1", NULL, 0},
        {"0177.0.0.1", NULL, 0},
        {"127.0.0.01", NULL, 0},
        {"2130706433", NULL, 0},
        {"017700000001", NULL, 0},
        {"0x7f.0.0.1", NULL, 0},
        {"0x7f.1", NULL, 0},
        {"256.1.1.1", NULL, 0},
        {"a.0x7f", NULL, 0},
        {"a.0X7F", NULL, 0},
        {"a.0x", NULL, 0},
        {"1.2.3.0x4", NULL, 0},
        {"a.123", NULL, 0},
        {"example.123", NULL, 0},
        /* IPv6 literals, with or without brackets; zones refused. */
        {"::1", "::1", HOST_IPV6},
        {"[::1]", "::1", HOST_IPV6},
        {"[0:0::0001]", "::1", HOST_IPV6},
        {"2001:DB8:0:0::1", "2001:db8::1", HOST_IPV6},
        {"[::ffff:127.0.0.1]", "::ffff:127.0.0.1", HOST_IPV6},
        {"[::ffff:7f00:1]", "::ffff:127.0.0.1", HOST_IPV6},
        {"[64:ff9b::cb00:7107]", "64:ff9b::cb00:7107", HOST_IPV6},
        {"[fe80::1%eth0]", NULL, 0},
        {"fe80::1%25eth0", NULL, 0},
        {"[::1", NULL, 0},
        {"::1]", NULL, 0},
        {"[]", NULL, 0},
        {"[1.2.3.4]", NULL, 0},
        {"[::1]:443", NULL, 0},
        {"[example.com]", NULL, 0},
        /* Not a bare host. */
        {"*", NULL, 0},
        {"*.example.com", NULL, 0},
        {"api.*.com", NULL, 0},
        {"example.com:443", NULL, 0},
        {"https://example.com", NULL, 0},
        {"example.com/path", NULL, 0},
        {"user@example.com", NULL, 0},
        {"example.com?x", NULL, 0},
        {"example.com#x", NULL, 0},
        {"exa mple.com", NULL, 0},
        {"ex\tample.com", NULL, 0},
        {"a%2e.test", NULL, 0},
        {"exa\"mple.com", NULL, 0},
        {"exa\\mple.com", NULL, 0},
};

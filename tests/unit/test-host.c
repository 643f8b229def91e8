/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Host normalisation and binding, address classes, networks (util/host.c). */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "host-cases.h"
#include "util/host.h"

/* The shared table of hostile spellings (host-cases.h): the normaliser, the authority form a
 * request names, and the normal form normalising to itself (what is stored is re-used as is). */
static void test_normalize(void **state)
{
	char out[HOST_BUF], again[HOST_BUF], auth[1200];
	(void)state;

	for (size_t i = 0; i < sizeof(host_cases) / sizeof(host_cases[0]); i++) {
		const struct host_case *c = &host_cases[i];
		const char *why = NULL;
		size_t n = strlen(c->in);
		int r = host_normalize_why(c->in, n, out, sizeof(out), &why);
		uint16_t port = 0;

		if (r != (c->out ? c->kind : -EINVAL))
			fail_msg("'%s': %d, want %d", c->in, r, c->out ? c->kind : -EINVAL);
		if (!c->out) {
			if (!why || strlen(why) < 8)
				fail_msg("'%s': refused without saying why", c->in);
		} else {
			if (strcmp(out, c->out) != 0)
				fail_msg("'%s': '%s', want '%s'", c->in, out, c->out);
			if (host_normalize(out, again, sizeof(again)) != r ||
			    strcmp(again, out) != 0)
				fail_msg("'%s' does not normalise to itself", out);
		}
		assert_int_equal(host_normalize(c->in, out, sizeof(out)), r);
		/* As the host of an authority ("host:443", "[v6]:443"). */
		if (n == 0 || (strchr(c->in, ':') && c->in[0] != '['))
			continue;
		(void)snprintf(auth, sizeof(auth), "%s:443", c->in);
		r = host_split_authority(auth, strlen(auth), 80, out, sizeof(out), &port);
		if (r != (c->out ? c->kind : -EINVAL))
			fail_msg("authority '%s': %d", auth, r);
		if (c->out && (strcmp(out, c->out) != 0 || port != 443))
			fail_msg("authority '%s': '%s' port %u", auth, out, (unsigned)port);
	}
}

static void test_matches(void **state)
{
	static const struct {
		const char *host, *pattern;
		bool match;
	} cases[] = {
	        {"github.com", "github.com", true},
	        {"api.github.com", "github.com", true},
	        {"a.b.api.github.com", "github.com", true},
	        {"github.com", "api.github.com", false},
	        /* Look-alikes. */
	        {"evilgithub.com", "github.com", false},
	        {"evil-github.com", "github.com", false},
	        {"github.com.evil.test", "github.com", false},
	        {"api.github.com.evil.test", "api.github.com", false},
	        {"github.co", "github.com", false},
	        {"xgithub.com", "github.com", false},
	        /* IP literals match only themselves. */
	        {"127.0.0.1", "127.0.0.1", true},
	        {"1.127.0.0.1", "127.0.0.1", false},
	        {"127.0.0.1", "0.0.1", false},
	        {"::1", "::1", true},
	        /* A name never matches an IP literal, nor the other way round. */
	        {"::1", "example.com", false},
	        {"example.com", "::1", false},
	        {"1", "127.0.0.1", false},
	        {"", "github.com", false},
	        {"github.com", "", false},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (host_matches(cases[i].host, cases[i].pattern) != cases[i].match)
			fail_msg("%s vs %s: want %d", cases[i].host, cases[i].pattern,
			         cases[i].match);

	/* The whole path the proxy takes: what a request says, normalised, against a binding. */
	{
		static const struct {
			const char *said;
			bool bound;
		} said[] = {
		        {"API.GITHUB.COM", true},
		        {"api.github.com.", true},
		        {"Api.GitHub.Com.", true},
		        {"EVIL-API.GITHUB.COM", false},
		        {"api.github.com.evil.test.", false},
		        {"API.GITHUB.COM.EVIL.TEST", false},
		        {"evilapi.github.com", false},
		};
		char h[HOST_BUF];
		for (size_t i = 0; i < sizeof(said) / sizeof(said[0]); i++) {
			assert_int_equal(host_normalize(said[i].said, h, sizeof(h)), HOST_NAME);
			if (host_matches(h, "api.github.com") != said[i].bound)
				fail_msg("%s: want bound=%d", said[i].said, said[i].bound);
		}
	}
}

/* Broad bindings: hosts whose binding covers a shared zone (names other people own), the zone
 * and an example of such a name; the narrow hosts to bind instead cover none. */
static void test_shared_zone(void **state)
{
	static const struct {
		const char *host, *zone, *instance, *example;
	} cases[] = {
	        /* The binding tests used to make, and the names it hands the key to. */
	        {"amazonaws.com", "s3.amazonaws.com", "s3.amazonaws.com",
	         "evil-bucket.s3.amazonaws.com"},
	        {"s3.amazonaws.com", "s3.amazonaws.com", "s3.amazonaws.com",
	         "evil-bucket.s3.amazonaws.com"},
	        {"s3.us-east-1.amazonaws.com", "s3.*.amazonaws.com", "s3.us-east-1.amazonaws.com",
	         "evil-bucket.s3.us-east-1.amazonaws.com"},
	        {"us-east-1.amazonaws.com", "s3.*.amazonaws.com", "s3.us-east-1.amazonaws.com",
	         "evil-bucket.s3.us-east-1.amazonaws.com"},
	        {"eu-west-3.amazonaws.com", "s3.*.amazonaws.com", "s3.eu-west-3.amazonaws.com",
	         "evil-bucket.s3.eu-west-3.amazonaws.com"},
	        {"execute-api.us-east-1.amazonaws.com", "execute-api.*.amazonaws.com",
	         "execute-api.us-east-1.amazonaws.com",
	         "abc123.execute-api.us-east-1.amazonaws.com"},
	        {"s3-website.eu-west-1.amazonaws.com", "s3-website.*.amazonaws.com",
	         "s3-website.eu-west-1.amazonaws.com",
	         "evil-bucket.s3-website.eu-west-1.amazonaws.com"},
	        {"elb.amazonaws.com", "*.elb.amazonaws.com", "us-east-1.elb.amazonaws.com",
	         "evil-123.us-east-1.elb.amazonaws.com"},
	        {"eu-west-1.elb.amazonaws.com", "*.elb.amazonaws.com",
	         "eu-west-1.elb.amazonaws.com", "evil-123.eu-west-1.elb.amazonaws.com"},
	        {"compute.amazonaws.com", "*.compute.amazonaws.com",
	         "us-east-2.compute.amazonaws.com",
	         "ec2-203-0-113-1.us-east-2.compute.amazonaws.com"},
	        {"on.aws", "lambda-url.*.on.aws", "lambda-url.us-east-1.on.aws",
	         "abc123.lambda-url.us-east-1.on.aws"},
	        {"amazonaws.com.cn", "s3.*.amazonaws.com.cn", "s3.cn-north-1.amazonaws.com.cn",
	         "evil-bucket.s3.cn-north-1.amazonaws.com.cn"},
	        {"cloudfront.net", "cloudfront.net", "cloudfront.net",
	         "d111111abcdef8.cloudfront.net"},
	        {"googleapis.com", "storage.googleapis.com", "storage.googleapis.com",
	         "evil-bucket.storage.googleapis.com"},
	        {"storage.googleapis.com", "storage.googleapis.com", "storage.googleapis.com",
	         "evil-bucket.storage.googleapis.com"},
	        {"appspot.com", "appspot.com", "appspot.com", "evil-project.appspot.com"},
	        {"windows.net", "blob.core.windows.net", "blob.core.windows.net",
	         "evil.blob.core.windows.net"},
	        {"github.io", "github.io", "github.io", "evil.github.io"},
	        {"gitlab.io", "gitlab.io", "gitlab.io", "evil.gitlab.io"},
	        {"herokuapp.com", "herokuapp.com", "herokuapp.com", "evil.herokuapp.com"},
	        {"workers.dev", "workers.dev", "workers.dev", "evil.account.workers.dev"},
	        /* A top-level domain: every name under it. */
	        {"com", "*", "com", "attacker-owned.com"},
	        {"io", "*", "io", "attacker-owned.io"},
	        {"aws", "*", "aws", "attacker-owned.aws"},
	        {"cloudapp.azure.com", "cloudapp.azure.com", "cloudapp.azure.com",
	         "evil.eastus.cloudapp.azure.com"},
	        /* Narrow: a name inside a zone, a service endpoint, an unrelated name. */
	        {"mybucket.s3.amazonaws.com", NULL, NULL, NULL},
	        {"mybucket.s3.us-east-1.amazonaws.com", NULL, NULL, NULL},
	        {"abc123.execute-api.us-east-1.amazonaws.com", NULL, NULL, NULL},
	        /* '*' is a region, not any label: sts.amazonaws.com is no s3.*.amazonaws.com. */
	        {"sts.amazonaws.com", NULL, NULL, NULL},
	        {"sts.us-east-1.amazonaws.com", NULL, NULL, NULL},
	        {"dynamodb.eu-west-1.amazonaws.com", NULL, NULL, NULL},
	        {"iam.amazonaws.com", NULL, NULL, NULL},
	        {"my-lb-1.us-east-1.elb.amazonaws.com", NULL, NULL, NULL},
	        {"oauth2.googleapis.com", NULL, NULL, NULL},
	        {"owner.github.io", NULL, NULL, NULL},
	        {"api.github.com", NULL, NULL, NULL},
	        {"github.com", NULL, NULL, NULL},
	        {"api.anthropic.com", NULL, NULL, NULL},
	        {"example.com", NULL, NULL, NULL},
	        /* Look-alikes of zones are no zones. */
	        {"xs3.amazonaws.com", NULL, NULL, NULL},
	        {"notgithub.io", NULL, NULL, NULL},
	        {"github.io.evil.test", NULL, NULL, NULL},
	        /* IP literals never. */
	        {"127.0.0.1", NULL, NULL, NULL},
	        {"::1", NULL, NULL, NULL},
	};
	char example[HOST_BUF], instance[HOST_BUF];
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct host_shared_zone *z =
		        host_shared_zone(cases[i].host, example, instance, sizeof(example));

		if (!cases[i].zone) {
			if (z)
				fail_msg("%s: covers %s (%s), want narrow", cases[i].host, z->zone,
				         example);
			continue;
		}
		if (!z)
			fail_msg("%s: narrow, want it to cover %s", cases[i].host, cases[i].zone);
		if (strcmp(z->zone, cases[i].zone) != 0 || strcmp(example, cases[i].example) != 0 ||
		    strcmp(instance, cases[i].instance) != 0)
			fail_msg("%s: %s, %s, %s; want %s, %s, %s", cases[i].host, z->zone,
			         instance, example, cases[i].zone, cases[i].instance,
			         cases[i].example);
		/* The example is what the binding hands the secret to, and it is narrow itself. */
		if (!host_matches(example, cases[i].host) || !host_matches(example, instance))
			fail_msg("%s: example %s is not bound", cases[i].host, example);
		if (host_shared_zone(example, NULL, NULL, 0))
			fail_msg("%s: example %s is broad itself", cases[i].host, example);
		assert_non_null(z->instead);
		assert_ptr_equal(host_shared_zone(cases[i].host, NULL, NULL, 0), z);
	}
	{
		static const char *const regions[] = {"us-east-1", "us-gov-west-1", "cn-north-1",
		                                      "ap-southeast-5", "eu-central-2"};
		static const char *const not_regions[] = {
		        "",      "sts",       "s3",        "us-east",    "1-us-east",
		        "us--1", "us_east-1", "US-EAST-1", "us-east-1-", "us.east-1",
		        "-us-1", "us east-1", "eastus"};
		for (size_t i = 0; i < sizeof(regions) / sizeof(regions[0]); i++)
			if (!host_is_region_label(regions[i], strlen(regions[i])))
				fail_msg("%s: not a region", regions[i]);
		for (size_t i = 0; i < sizeof(not_regions) / sizeof(not_regions[0]); i++)
			if (host_is_region_label(not_regions[i], strlen(not_regions[i])))
				fail_msg("'%s': a region", not_regions[i]);
	}
}

static void test_authority(void **state)
{
	char h[HOST_BUF], f[HOST_BUF + 8];
	uint16_t port;
	(void)state;

	assert_int_equal(host_split_authority("A.test:443", 10, 0, h, sizeof(h), &port), HOST_NAME);
	assert_string_equal(h, "a.test");
	assert_int_equal(port, 443);
	assert_int_equal(host_split_authority("a.test", 6, 80, h, sizeof(h), &port), HOST_NAME);
	assert_int_equal(port, 80);
	assert_int_equal(host_split_authority("a.test", 6, 0, h, sizeof(h), &port), -EINVAL);
	assert_int_equal(host_split_authority("[::1]:8443", 10, 0, h, sizeof(h), &port), HOST_IPV6);
	assert_string_equal(h, "::1");
	assert_int_equal(port, 8443);
	assert_int_equal(host_split_authority("::1:443", 7, 0, h, sizeof(h), &port), -EINVAL);
	assert_int_equal(host_split_authority("a.test:0", 8, 0, h, sizeof(h), &port), -EINVAL);
	assert_int_equal(host_split_authority("a.test:65536", 12, 0, h, sizeof(h), &port), -EINVAL);
	assert_int_equal(host_split_authority("a.test:", 7, 80, h, sizeof(h), &port), -EINVAL);
	assert_int_equal(host_split_authority("a.test:+1", 9, 80, h, sizeof(h), &port), -EINVAL);
	assert_int_equal(host_split_authority("[::1]x", 6, 80, h, sizeof(h), &port), -EINVAL);
	host_format_authority("::1", 443, f, sizeof(f));
	assert_string_equal(f, "[::1]:443");
	host_format_authority("a.test", 80, f, sizeof(f));
	assert_string_equal(f, "a.test:80");
}

static enum addr_class classify(const char *text)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	if (inet_pton(AF_INET, text, &s4->sin_addr) == 1)
		s4->sin_family = AF_INET;
	else if (inet_pton(AF_INET6, text, &s6->sin6_addr) == 1)
		s6->sin6_family = AF_INET6;
	else
		fail_msg("%s is no address", text);
	return host_addr_classify((struct sockaddr *)&ss);
}

static void test_classes(void **state)
{
	static const struct {
		const char *addr;
		enum addr_class c;
	} cases[] = {
	        {"8.8.8.8", ADDR_PUBLIC},
	        {"1.1.1.1", ADDR_PUBLIC},
	        {"127.0.0.1", ADDR_LOOPBACK},
	        {"127.255.0.9", ADDR_LOOPBACK},
	        {"10.1.2.3", ADDR_PRIVATE},
	        {"172.16.0.1", ADDR_PRIVATE},
	        {"172.31.255.255", ADDR_PRIVATE},
	        {"172.32.0.1", ADDR_PUBLIC},
	        {"192.168.1.1", ADDR_PRIVATE},
	        {"100.64.0.1", ADDR_PRIVATE},
	        {"169.254.1.1", ADDR_LINK_LOCAL},
	        {"169.254.169.254", ADDR_METADATA},
	        {"169.254.170.2", ADDR_METADATA},
	        {"100.100.100.200", ADDR_METADATA},
	        {"192.0.0.192", ADDR_METADATA},
	        {"0.0.0.0", ADDR_HOST_LOCAL},
	        {"0.1.2.3", ADDR_HOST_LOCAL},
	        {"224.0.0.1", ADDR_MULTICAST},
	        {"255.255.255.255", ADDR_RESERVED},
	        {"198.18.0.1", ADDR_RESERVED},
	        {"::1", ADDR_LOOPBACK},
	        {"::", ADDR_HOST_LOCAL},
	        {"::ffff:127.0.0.1", ADDR_LOOPBACK},
	        {"::ffff:10.0.0.1", ADDR_PRIVATE},
	        {"::ffff:8.8.8.8", ADDR_PUBLIC},
	        {"64:ff9b::a9fe:a9fe", ADDR_METADATA},       /* NAT64 of 169.254.169.254 */
	        {"2002:7f00:1::", ADDR_LOOPBACK},            /* 6to4 of 127.0.0.1 */
	        {"64:ff9b:1:7f00:0:100::", ADDR_LOOPBACK},   /* local-use NAT64 /48 of 127.0.0.1 */
	        {"64:ff9b:1:a9fe:a9:fe00::", ADDR_METADATA}, /* ... of 169.254.169.254 */
	        {"2001:0:4136:e378:8000:63bf:5601:5601", ADDR_METADATA}, /* Teredo, client
	                                                                 * 169.254.169.254 */
	        {"2001:0:4136:e378:8000:63bf:80ff:fffe", ADDR_LOOPBACK}, /* Teredo, 127.0.0.1 */
	        {"2001:0:4136:e378:8000:63bf:f7f7:f7f7", ADDR_PUBLIC},   /* Teredo, 8.8.8.8 */
	        {"fd00:ec2::254", ADDR_METADATA},
	        {"fd12::1", ADDR_PRIVATE},
	        {"fc00::1", ADDR_PRIVATE},
	        {"fe80::1", ADDR_LINK_LOCAL},
	        {"fec0::1", ADDR_PRIVATE},
	        {"ff02::1", ADDR_MULTICAST},
	        {"2001:db8::1", ADDR_RESERVED},
	        {"2606:4700::1111", ADDR_PUBLIC},
	        {"::7f00:1", ADDR_RESERVED}, /* IPv4-compatible */
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum addr_class c = classify(cases[i].addr);
		if (c != cases[i].c)
			fail_msg("%s: %s, want %s", cases[i].addr, host_addr_class_name(c),
			         host_addr_class_name(cases[i].c));
	}
}

static bool net_has(const char *net, const char *addr)
{
	struct ip_net n;
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	assert_int_equal(host_net_parse(net, &n), 0);
	if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1)
		s4->sin_family = AF_INET;
	else {
		assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
		s6->sin6_family = AF_INET6;
	}
	return host_net_contains(&n, (struct sockaddr *)&ss);
}

static void test_nets(void **state)
{
	struct ip_net n;
	char t[64];
	(void)state;

	assert_true(net_has("10.0.0.0/8", "10.9.8.7"));
	assert_false(net_has("10.0.0.0/8", "11.0.0.1"));
	assert_true(net_has("127.0.0.1", "127.0.0.1"));
	assert_false(net_has("127.0.0.1", "127.0.0.2"));
	assert_true(net_has("127.0.0.1", "::ffff:127.0.0.1")); /* v4-mapped counts as IPv4 */
	/* So does every other IPv6 address that carries an IPv4 one (deny 203.0.113.7). */
	{
		static const struct {
			const char *addr;
			bool in;
		} emb[] = {
		        {"::ffff:203.0.113.7", true},                   /* mapped */
		        {"64:ff9b::cb00:7107", true},                   /* NAT64 /96 */
		        {"64:ff9b::203.0.113.7", true},                 /* the same */
		        {"64:ff9b:1:cb00:71:700::", true},              /* NAT64 local-use /48 */
		        {"2002:cb00:7107::1", true},                    /* 6to4 */
		        {"2002:cb00:7107:1234:5678::9", true},          /* 6to4, any host part */
		        {"2001:0:4136:e378:8000:63bf:34ff:8ef8", true}, /* Teredo client */
		        {"64:ff9b::cb00:7108", false},                  /* next address */
		        {"2002:cb00:7108::1", false},
		        {"2001:0:cb00:7107:8000:63bf:5601:5601",
		         false},                        /* Teredo server, not client */
		        {"2001:db8::cb00:7107", false}, /* documentation, no embedding */
		        {"::cb00:7107", false}, /* IPv4-compatible: deprecated, never routed */
		        {"64:ff9b:2:cb00:71:700::", false},
		};
		for (size_t i = 0; i < sizeof(emb) / sizeof(emb[0]); i++)
			if (net_has("203.0.113.7", emb[i].addr) != emb[i].in)
				fail_msg("203.0.113.7 vs %s: want %d", emb[i].addr, emb[i].in);
		assert_true(net_has("203.0.113.0/24", "64:ff9b::cb00:71ff"));
		assert_true(net_has("0.0.0.0/0", "2002:0102:0304::1"));
		/* An IPv6 network still holds them as IPv6 addresses. */
		assert_true(net_has("2002::/16", "2002:cb00:7107::1"));
		assert_true(net_has("64:ff9b::/96", "64:ff9b::cb00:7107"));
		assert_false(net_has("64:ff9b::/96", "203.0.113.7"));
	}
	assert_true(net_has("::1", "::1"));
	assert_false(net_has("::1", "127.0.0.1"));
	assert_true(net_has("fd00::/8", "fd12::1"));
	assert_true(net_has("[fd00::]/8", "fdff::1"));
	assert_true(net_has("0.0.0.0/0", "8.8.8.8"));
	assert_true(net_has("172.16.0.0/12", "172.31.0.1"));
	assert_false(net_has("172.16.0.0/12", "172.32.0.1"));
	assert_int_equal(host_net_parse("10.1.2.3/8", &n), -EINVAL); /* host bits set */
	assert_int_equal(host_net_parse("10.0.0.0/33", &n), -EINVAL);
	assert_int_equal(host_net_parse("10.0.0.0/", &n), -EINVAL);
	assert_int_equal(host_net_parse("10.0.0.0/-1", &n), -EINVAL);
	assert_int_equal(host_net_parse("example.com", &n), -EINVAL);
	assert_int_equal(host_net_parse("127.1", &n), -EINVAL);
	assert_int_equal(host_net_parse("::/0", &n), 0);
	assert_int_equal(host_net_parse("192.168.0.0/16", &n), 0);
	host_net_format(&n, t, sizeof(t));
	assert_string_equal(t, "192.168.0.0/16");
	assert_int_equal(host_net_parse("[0::1]", &n), 0);
	host_net_format(&n, t, sizeof(t));
	assert_string_equal(t, "::1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_normalize), cmocka_unit_test(test_matches),
	        cmocka_unit_test(test_authority), cmocka_unit_test(test_classes),
	        cmocka_unit_test(test_nets),      cmocka_unit_test(test_shared_zone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A workspace's egress policy, <workspace>/egress.json (written atomically):
 *   {"default": "allow-all" | "deny-all",
 *    "rules": [{"action": "allow" | "deny", "host": "github.com" | "10.0.0.0/8" | "::1"}...]}
 *
 * Hosts: a host is decided by the most specific rule that matches it (a name rule matches the
 * name and its subdomains at a dot boundary, the longer name winning; an address rule matches IP
 * literals inside it, the longer prefix winning; deny wins a tie), else by the default.
 *
 * Addresses, after DNS resolution: loopback, private, link-local, host-local, cloud metadata,
 * multicast and reserved addresses are refused unless an "allow" address rule covers them
 * (`slate egress NAME allow 10.1.2.3`): allowing a *name* never opens a private address, so a
 * name that resolves (or is rebound) to 127.0.0.1 does not reach the host. A "deny" address rule
 * refuses the addresses it covers whatever name led there. An IPv6 address carrying an IPv4 one
 * (mapped, NAT64, 6to4, Teredo: host_ip6_embedded_v4) is judged as that IPv4 address too.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "util/host.h"
#include "util/macro.h"

#define EGRESS_FILE "egress.json"
#define EGRESS_MAX_RULES 1024u
#define EGRESS_MAX_FILE (256u * 1024u)

enum egress_default {
	EGRESS_ALLOW_ALL = 0,
	EGRESS_DENY_ALL,
};

struct egress_rule {
	char *host; /* normalised name, or the canonical address/network text */
	bool allow;
	bool is_net;
	struct ip_net net; /* when is_net */
};

struct egress_policy {
	enum egress_default def;
	struct egress_rule *rules;
	size_t n_rules;
};

/* A new allow-all policy with no rules. Returns 0 or -ENOMEM. */
int egress_policy_new(struct egress_policy **ret);
void egress_policy_free(struct egress_policy *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct egress_policy *, egress_policy_free);

/* Parses egress.json's contents. SLATE_ERR_INVALID_FORMAT for unknown values or hosts. */
int egress_policy_parse(const char *data, size_t len, struct egress_policy **ret);
/* The JSON form above. Returns 0 or -ENOMEM. */
int egress_policy_to_json(const struct egress_policy *p, struct json_object **ret);
/* Reads dirfd/egress.json; a missing file is the default policy (allow-all). */
int egress_policy_load_at(int dirfd, struct egress_policy **ret);
/* Writes dirfd/egress.json atomically (0600). */
int egress_policy_save_at(int dirfd, const struct egress_policy *p);

/*
 * Applies one verb of `slate egress`: "allow-all" and "deny-all" set the default and drop every
 * rule; "allow" and "deny" add a rule for host (a name, an address or a network) or turn the
 * existing rule for it around. Returns 0, -EINVAL (unknown verb, bad or missing host), -E2BIG
 * (EGRESS_MAX_RULES), -ENOMEM.
 */
int egress_policy_apply(struct egress_policy *p, const char *verb, const char *host);

/* Whether normalised host may be contacted: true or false, and in *ret_rule (may be NULL) the
 * rule that decided, or NULL when the default did. */
bool egress_policy_allows_host(const struct egress_policy *p, const char *host,
                               const struct egress_rule **ret_rule);
/* Whether a resolved address may be connected to; *ret_class (may be NULL) gets its class. */
bool egress_policy_allows_addr(const struct egress_policy *p, const struct sockaddr *sa,
                               enum addr_class *ret_class);

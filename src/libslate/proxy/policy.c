/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Egress policy: egress.json and the decisions it makes (see policy.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/policy.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

int egress_policy_new(struct egress_policy **ret)
{
	struct egress_policy *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	*ret = p;
	return 0;
}

void egress_policy_free(struct egress_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_rules; i++)
		free(p->rules[i].host);
	free(p->rules);
	free(p);
}

/* A rule's host in canonical form: a network, or a host as the one normaliser (util/host.h)
 * writes it, an address as a full-length network. */
static int rule_target(const char *host, char **ret_host, bool *ret_is_net, struct ip_net *ret_net)
{
	char norm[HOST_BUF], text[64];
	struct ip_net net;
	int kind = 0;

	if (!host || !*host)
		return -EINVAL;
	if (!strchr(host, '/')) {
		kind = host_normalize(host, norm, sizeof(norm));
		if (kind < 0)
			return -EINVAL;
	}
	if (kind != HOST_NAME) {
		if (host_net_parse(kind ? norm : host, &net) < 0)
			return -EINVAL;
		host_net_format(&net, text, sizeof(text));
		*ret_host = strdup(text);
		*ret_is_net = true;
		*ret_net = net;
	} else {
		*ret_host = strdup(norm);
		*ret_is_net = false;
	}
	return *ret_host ? 0 : -ENOMEM;
}

static int add_rule(struct egress_policy *p, const char *host, bool allow)
{
	struct egress_rule r = {.allow = allow}, *nr;
	int e = rule_target(host, &r.host, &r.is_net, &r.net);

	if (e < 0)
		return e;
	for (size_t i = 0; i < p->n_rules; i++)
		if (strcmp(p->rules[i].host, r.host) == 0) {
			p->rules[i].allow = allow;
			free(r.host);
			return 0;
		}
	if (p->n_rules >= EGRESS_MAX_RULES) {
		free(r.host);
		return -E2BIG;
	}
	nr = realloc(p->rules, (p->n_rules + 1) * sizeof(*nr));
	if (!nr) {
		free(r.host);
		return -ENOMEM;
	}
	p->rules = nr;
	p->rules[p->n_rules++] = r;
	return 0;
}

static void clear_rules(struct egress_policy *p)
{
	for (size_t i = 0; i < p->n_rules; i++)
		free(p->rules[i].host);
	free(p->rules);
	p->rules = NULL;
	p->n_rules = 0;
}

int egress_policy_apply(struct egress_policy *p, const char *verb, const char *host)
{
	if (streq(verb, "allow-all") || streq(verb, "deny-all")) {
		if (host)
			return -EINVAL;
		clear_rules(p);
		p->def = streq(verb, "allow-all") ? EGRESS_ALLOW_ALL : EGRESS_DENY_ALL;
		return 0;
	}
	if (streq(verb, "allow") || streq(verb, "deny"))
		return add_rule(p, host, streq(verb, "allow"));
	return -EINVAL;
}

int egress_policy_parse(const char *data, size_t len, struct egress_policy **ret)
{
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *rules = NULL;
	const char *def = NULL;
	int r;

	r = json_parse_object(data, len, EGRESS_MAX_FILE, &o);
	if (r < 0)
		return r;
	r = egress_policy_new(&p);
	if (r < 0)
		return r;
	if (json_get_string(o, "default", &def) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	if (streq(def, "allow-all"))
		p->def = EGRESS_ALLOW_ALL;
	else if (streq(def, "deny-all"))
		p->def = EGRESS_DENY_ALL;
	else
		return SLATE_ERR_INVALID_FORMAT;
	r = json_get_array(o, "rules", &rules);
	if (r == SLATE_ERR_JSON_TYPE)
		return SLATE_ERR_INVALID_FORMAT;
	for (size_t i = 0; rules && i < json_object_array_length(rules); i++) {
		struct json_object *e = json_object_array_get_idx(rules, i);
		const char *action, *host;
		if (!json_object_is_type(e, json_type_object) ||
		    json_get_string(e, "action", &action) < 0 ||
		    json_get_string(e, "host", &host) < 0 ||
		    (!streq(action, "allow") && !streq(action, "deny")))
			return SLATE_ERR_INVALID_FORMAT;
		r = add_rule(p, host, streq(action, "allow"));
		if (r == -EINVAL)
			return SLATE_ERR_INVALID_FORMAT;
		if (r < 0)
			return r;
	}
	*ret = TAKE_PTR(p);
	return 0;
}

int egress_policy_to_json(const struct egress_policy *p, struct json_object **ret)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *rules = json_object_new_array();

	if (!o || !rules) {
		json_object_put(rules);
		return -ENOMEM;
	}
	if (json_add_string(o, "default", p->def == EGRESS_ALLOW_ALL ? "allow-all" : "deny-all") <
	            0 ||
	    json_add(o, "rules", rules) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_rules; i++) {
		struct json_object *e = json_object_new_object();
		if (!e || json_add_string(e, "action", p->rules[i].allow ? "allow" : "deny") < 0 ||
		    json_add_string(e, "host", p->rules[i].host) < 0 ||
		    json_object_array_add(rules, e) < 0) {
			json_object_put(e);
			return -ENOMEM;
		}
	}
	*ret = TAKE_PTR(o);
	return 0;
}

int egress_policy_load_at(int dirfd, struct egress_policy **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r = fs_read_file_at(dirfd, EGRESS_FILE, EGRESS_MAX_FILE, &b);

	if (r == -ENOENT)
		return egress_policy_new(ret);
	if (r < 0)
		return r;
	return egress_policy_parse((const char *)buf_ptr(b), buf_len(b), ret);
}

int egress_policy_save_at(int dirfd, const struct egress_policy *p)
{
	_cleanup_json_ struct json_object *o = NULL;
	_cleanup_free_ char *s = NULL;
	int r;

	r = egress_policy_to_json(p, &o);
	if (r < 0)
		return r;
	r = json_to_string_dup(o, true, &s);
	if (r < 0)
		return r;
	return fs_write_atomic_at(dirfd, EGRESS_FILE, s, strlen(s), 0600);
}

static bool net_contains_host(const struct ip_net *n, const char *host)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1)
		s4->sin_family = AF_INET;
	else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1)
		s6->sin6_family = AF_INET6;
	else
		return false;
	return host_net_contains(n, (const struct sockaddr *)&ss);
}

bool egress_policy_allows_host(const struct egress_policy *p, const char *host,
                               const struct egress_rule **ret_rule)
{
	const struct egress_rule *best = NULL;
	size_t best_score = 0;
	bool ip = host_is_ip(host);

	for (size_t i = 0; i < p->n_rules; i++) {
		const struct egress_rule *r = &p->rules[i];
		size_t score;
		if (r->is_net) {
			if (!ip || !net_contains_host(&r->net, host))
				continue;
			score = r->net.prefix + 1;
		} else {
			if (ip || !host_matches(host, r->host))
				continue;
			score = strlen(r->host) + 1;
		}
		if (!best || score > best_score || (score == best_score && !r->allow)) {
			best = r;
			best_score = score;
		}
	}
	if (ret_rule)
		*ret_rule = best;
	if (best)
		return best->allow;
	return p->def == EGRESS_ALLOW_ALL;
}

bool egress_policy_allows_addr(const struct egress_policy *p, const struct sockaddr *sa,
                               enum addr_class *ret_class)
{
	enum addr_class c = host_addr_classify(sa);
	bool allowed_by_rule = false;

	if (ret_class)
		*ret_class = c;
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct egress_rule *r = &p->rules[i];
		if (!r->is_net || !host_net_contains(&r->net, sa))
			continue;
		if (!r->allow)
			return false;
		allowed_by_rule = true;
	}
	return c == ADDR_PUBLIC || allowed_by_rule;
}

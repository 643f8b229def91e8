/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Secrets and secret sets: building, validating, freeing, merging, describing. */
#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "secrets/placeholder.h"
#include "secrets/secrets.h"
#include "util/error.h"
#include "util/host.h"
#include "util/json.h"
#include "util/log.h"

static const char *const kind_names[] = {
        [SECRET_KIND_GENERIC] = "generic", [SECRET_KIND_ANTHROPIC] = "anthropic",
        [SECRET_KIND_OPENAI] = "openai",   [SECRET_KIND_GITHUB] = "github",
        [SECRET_KIND_GITLAB] = "gitlab",   [SECRET_KIND_AWS] = "aws",
};

const char *secret_kind_name(enum secret_kind k)
{
	if ((unsigned)k >= ELEMENTSOF(kind_names))
		return NULL;
	return kind_names[k];
}

int secret_kind_from_string(const char *s, enum secret_kind *ret)
{
	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < ELEMENTSOF(kind_names); i++)
		if (streq(s, kind_names[i])) {
			*ret = (enum secret_kind)i;
			return 0;
		}
	return -EINVAL;
}

int secret_key_check(const char *key)
{
	size_t n = key ? strlen(key) : 0;

	if (n == 0 || n > SECRET_KEY_MAX || key[0] == '.' || key[0] == '-')
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = key[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return -EINVAL;
	}
	return 0;
}

int secret_env_check(const char *env)
{
	size_t n = env ? strlen(env) : 0;

	if (n == 0 || n > SECRET_ENV_MAX || (env[0] >= '0' && env[0] <= '9'))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = env[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_'))
			return -EINVAL;
	}
	return 0;
}

int secret_file_check(const char *file)
{
	size_t n = file ? strlen(file) : 0;
	const char *rest;

	if (n == 0 || n > SECRET_FILE_MAX)
		return -EINVAL;
	if (strneq(file, "~/", 2))
		rest = file + 1;
	else if (file[0] == '/')
		rest = file;
	else
		return -EINVAL;
	if (rest[1] == '\0' || rest[strlen(rest) - 1] == '/' || strstr(rest, "//") ||
	    strstr(rest, "/./") || strstr(rest, "/../"))
		return -EINVAL;
	if ((strlen(rest) >= 3 && streq(rest + strlen(rest) - 3, "/..")) ||
	    (strlen(rest) >= 2 && streq(rest + strlen(rest) - 2, "/.")))
		return -EINVAL;
	for (const char *c = file; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '\\')
			return -EINVAL;
	return 0;
}

int secret_query_check(const char *param)
{
	size_t n = param ? strlen(param) : 0;

	if (n == 0 || n > SECRET_QUERY_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = param[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-' || c == '~' || c == '[' || c == ']'))
			return -EINVAL;
	}
	return 0;
}

int secret_aws_region_check(const char *region)
{
	return region && host_is_region_label(region, strlen(region)) ? 0 : -EINVAL;
}

int secret_aws_service_check(const char *service)
{
	size_t n = service ? strlen(service) : 0;

	if (n == 0 || n > 63 || service[0] < 'a' || service[0] > 'z' || service[n - 1] == '-')
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!((service[i] >= 'a' && service[i] <= 'z') ||
		      (service[i] >= '0' && service[i] <= '9') || service[i] == '-'))
			return -EINVAL;
	return 0;
}

int secret_set_subst(struct secret *s, bool body, const char *query, struct slate_error *err)
{
	char *q = NULL;

	if ((body || query) && s->kind == SECRET_KIND_AWS)
		return slate_error_set(
		        err, -EINVAL,
		        "secret %s: aws secrets are re-signed (SigV4), never substituted in a "
		        "body or a query",
		        s->key);
	if (query && secret_query_check(query) < 0)
		return slate_error_set(
		        err, -EINVAL,
		        "secret %s: invalid query parameter '%s' (1 to %d of A-Z a-z 0-9 _ . - ~ "
		        "[ ])",
		        s->key, query, SECRET_QUERY_MAX);
	if (query && !(q = strdup(query)))
		return slate_error_errno(err, -ENOMEM, "secret %s", s->key);
	free(s->query);
	s->query = q;
	s->body = body;
	return 0;
}

void secret_clear(struct secret *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_values; i++) {
		struct secret_value *v = &s->values[i];
		if (v->real && v->forbidden)
			log_unforbid(buf_ptr(v->real), buf_len(v->real));
		buf_free_secure(v->real);
		free(v->name);
		free(v->placeholder);
	}
	free(s->values);
	for (size_t i = 0; i < s->n_hosts; i++)
		free(s->hosts[i]);
	free(s->hosts);
	free(s->key);
	free(s->env);
	free(s->file);
	free(s->query);
	*s = (struct secret){0};
}

void secret_free(struct secret *s)
{
	secret_clear(s);
	free(s);
}

void secret_set_free(struct secret_set *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		secret_clear(&s->v[i]);
	free(s->v);
	free(s);
}

struct secret_set *secret_set_new(void)
{
	return calloc(1, sizeof(struct secret_set));
}

int secret_set_find(const struct secret_set *s, const char *key)
{
	for (size_t i = 0; s && key && i < s->n; i++)
		if (streq(s->v[i].key, key))
			return (int)i;
	return -ENOENT;
}

int secret_set_put(struct secret_set *s, struct secret *sec, bool *ret_replaced)
{
	int i = secret_set_find(s, sec->key);
	struct secret *nv;

	if (i >= 0) {
		secret_clear(&s->v[i]);
		s->v[i] = *sec;
	} else {
		if (s->n >= SECRET_SET_MAX)
			return -E2BIG;
		nv = reallocarray(s->v, s->n + 1, sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		s->v = nv;
		s->v[s->n++] = *sec;
	}
	free(sec);
	if (ret_replaced)
		*ret_replaced = i >= 0;
	return 0;
}

int secret_set_remove(struct secret_set *s, const char *key)
{
	int i = secret_set_find(s, key);

	if (i < 0)
		return i;
	secret_clear(&s->v[i]);
	memmove(&s->v[i], &s->v[i + 1], (s->n - (size_t)i - 1) * sizeof(s->v[0]));
	s->n--;
	return 0;
}

int secret_set_merge(struct secret_set *global, struct secret_set *ws, struct secret_set **ret)
{
	_cleanup_(secret_set_freep) struct secret_set *g = global, *w = ws;
	struct secret_set *out;
	size_t n = 0;

	if (!g)
		g = secret_set_new();
	if (!w)
		w = secret_set_new();
	if (!g || !w)
		return -ENOMEM;
	out = secret_set_new();
	if (!out)
		return -ENOMEM;
	out->v = calloc(g->n + w->n + 1, sizeof(out->v[0]));
	if (!out->v) {
		free(out);
		return -ENOMEM;
	}
	for (size_t i = 0; i < g->n; i++) {
		if (secret_set_find(w, g->v[i].key) >= 0)
			continue; /* the workspace's own overrides it (freed with g) */
		out->v[n++] = g->v[i];
		g->v[i] = (struct secret){0};
	}
	for (size_t i = 0; i < w->n; i++) {
		out->v[n++] = w->v[i];
		w->v[i] = (struct secret){0};
	}
	out->n = n;
	*ret = out;
	return 0;
}

/* Appends a real value: copied into a secure buffer, registered with log_forbid(), and its
 * placeholder derived. */
static int value_add(struct secret *s, const char *name, const void *real, size_t len,
                     const unsigned char *salt, struct slate_error *err)
{
	struct secret_value *nv, *v;
	const unsigned char *p = real;
	int r;

	if (len < SECRET_VALUE_MIN)
		return slate_error_set(err, -EINVAL, "the %s of secret %s is shorter than %d bytes",
		                       name, s->key, SECRET_VALUE_MIN);
	if (len > SECRET_VALUE_MAX)
		return slate_error_set(err, -EINVAL, "the %s of secret %s is longer than %d bytes",
		                       name, s->key, SECRET_VALUE_MAX);
	for (size_t i = 0; i < len; i++)
		if (p[i] < 0x20 || p[i] == 0x7f)
			/* It would end up in an HTTP header: no line breaks, no NUL, no controls. */
			return slate_error_set(
			        err, -EINVAL,
			        "the %s of secret %s contains a control character (byte %zu)", name,
			        s->key, i + 1);
	nv = reallocarray(s->values, s->n_values + 1, sizeof(*nv));
	if (!nv)
		return slate_error_errno(err, -ENOMEM, "secret %s", s->key);
	s->values = nv;
	v = &s->values[s->n_values];
	*v = (struct secret_value){0};
	v->name = strdup(name);
	v->real = buf_new_secure(len ? len : 1);
	if (!v->name || !v->real || buf_put(v->real, real, len) < 0) {
		buf_free_secure(v->real);
		free(v->name);
		return slate_error_errno(err, -ENOMEM, "secret %s", s->key);
	}
	s->n_values++; /* from here on secret_clear() frees it */
	r = log_forbid(real, len);
	if (r < 0)
		return slate_error_errno(err, r, "cannot keep the %s of secret %s out of the logs",
		                         name, s->key);
	v->forbidden = true;
	if (salt) {
		r = placeholder_derive(salt, s->kind, name, real, len, &v->placeholder);
		if (r < 0)
			return slate_error_errno(err, r, "deriving the placeholder of secret %s",
			                         s->key);
	}
	return 0;
}

/* Fills the secret's names and hosts (normalised, duplicates dropped). */
static int meta_init(struct secret *s, const char *key, enum secret_kind kind,
                     const char *const *hosts, size_t n_hosts, const char *env, const char *file,
                     bool global, struct slate_error *err)
{

	if (secret_key_check(key) < 0)
		return slate_error_set(
		        err, -EINVAL,
		        "invalid secret name '%s': 1 to %d of A-Z a-z 0-9 _ . -, not starting "
		        "with '.' or '-'",
		        key ? key : "", SECRET_KEY_MAX);
	if (!secret_kind_name(kind))
		return slate_error_set(err, -EINVAL, "secret %s: unknown kind", key);
	if (env && secret_env_check(env) < 0)
		return slate_error_set(
		        err, -EINVAL,
		        "secret %s: invalid environment variable name '%s' (letters, digits "
		        "and '_', not starting with a digit, at most %d)",
		        key, env, SECRET_ENV_MAX);
	if (file && secret_file_check(file) < 0)
		return slate_error_set(
		        err, -EINVAL,
		        "secret %s: invalid guest file '%s' (an absolute path or one under "
		        "~/, without '..', at most %d characters)",
		        key, file, SECRET_FILE_MAX);
	if (n_hosts == 0)
		return slate_error_set(
		        err, -EINVAL,
		        kind == SECRET_KIND_AWS
		                ? "secret %s: bind it to at least one host (--host), or name "
		                  "its endpoints with --region and --service"
		                : "secret %s: bind it to at least one host (--host)",
		        key);
	if (n_hosts > SECRET_HOSTS_MAX)
		return slate_error_set(err, -EINVAL, "secret %s: at most %d hosts", key,
		                       SECRET_HOSTS_MAX);
	s->key = strdup(key);
	s->kind = kind;
	s->global = global;
	s->env = env ? strdup(env) : NULL;
	s->file = file ? strdup(file) : NULL;
	s->hosts = calloc(n_hosts, sizeof(char *));
	if (!s->key || (env && !s->env) || (file && !s->file) || !s->hosts)
		return slate_error_errno(err, -ENOMEM, "secret %s", key);
	for (size_t i = 0; i < n_hosts; i++) {
		char h[HOST_BUF];
		const char *why = "is not a host";
		bool dup = false;

		/* The proxy's normaliser (util/host.h), the one every binding is compared with. */
		if (host_normalize_why(hosts[i], strlen(hosts[i]), h, sizeof(h), &why) < 0)
			return slate_error_set(err, -EINVAL, "secret %s: host '%s' %s", key,
			                       hosts[i], why);
		for (size_t j = 0; j < s->n_hosts; j++)
			dup = dup || streq(s->hosts[j], h);
		if (!dup && !(s->hosts[s->n_hosts++] = strdup(h)))
			return slate_error_errno(err, -ENOMEM, "secret %s", key);
	}
	return 0;
}

/* The values a kind needs: aws has access-key-id, secret-access-key and maybe session-token;
 * every other kind exactly one "value". */
static int values_check(const struct secret *s)
{
	if (s->kind != SECRET_KIND_AWS)
		return s->n_values == 1 && streq(s->values[0].name, "value") ? 0 : -EINVAL;
	if (s->n_values < 2 || s->n_values > 3 || !streq(s->values[0].name, "access-key-id") ||
	    !streq(s->values[1].name, "secret-access-key") ||
	    (s->n_values == 3 && !streq(s->values[2].name, "session-token")))
		return -EINVAL;
	return 0;
}

int secret_from_parts(const char *key, enum secret_kind kind, const char *const *hosts,
                      size_t n_hosts, const char *env, const char *file, bool global,
                      const char *const *names, const struct buf *const *reals, size_t n_values,
                      const unsigned char *salt, struct secret **ret, struct slate_error *err)
{
	_cleanup_(secret_freep) struct secret *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return slate_error_errno(err, -ENOMEM, "building a secret");
	r = meta_init(s, key, kind, hosts, n_hosts, env, file, global, err);
	if (r < 0)
		return r;
	/* Stored hosts were normalised when they were set: anything else is not ours. */
	if (s->n_hosts != n_hosts)
		return slate_error_set(err, -EINVAL, "secret %s: duplicate host", key);
	for (size_t i = 0; i < n_hosts; i++)
		if (!streq(s->hosts[i], hosts[i]))
			return slate_error_set(err, -EINVAL,
			                       "secret %s: host '%s' is not normalised", key,
			                       hosts[i]);
	for (size_t i = 0; i < n_values; i++) {
		r = value_add(s, names[i], buf_ptr(reals[i]), buf_len(reals[i]), salt, err);
		if (r < 0)
			return r;
	}
	if (values_check(s) < 0)
		return slate_error_set(err, -EINVAL, "secret %s: the values do not fit its kind %s",
		                       key, secret_kind_name(kind));
	*ret = TAKE_PTR(s);
	return 0;
}

/*
 * The hosts spec binds: its own, then SERVICE.REGION.amazonaws.com for each region x service
 * pair (aws only; AWS's regional endpoint names, .amazonaws.com.cn in the China regions). The
 * generated names are written into names; hosts (SECRET_HOSTS_MAX) points at them all.
 */
static int aws_endpoints(const struct secret_spec *spec, const char **hosts,
                         char (*names)[HOST_BUF], size_t *ret_n, struct slate_error *err)
{
	size_t n = 0;

	if (spec->n_hosts > SECRET_HOSTS_MAX)
		return slate_error_set(err, -EINVAL, "secret %s: at most %d hosts", spec->key,
		                       SECRET_HOSTS_MAX);
	for (size_t i = 0; i < spec->n_hosts; i++)
		hosts[n++] = spec->hosts[i];
	if (spec->n_regions == 0 && spec->n_services == 0) {
		*ret_n = n;
		return 0;
	}
	if (spec->kind != SECRET_KIND_AWS)
		return slate_error_set(
		        err, -EINVAL,
		        "secret %s: --region and --service name AWS endpoints: for aws "
		        "secrets only (give the hosts with --host)",
		        spec->key);
	if (spec->n_regions == 0 || spec->n_services == 0)
		return slate_error_set(
		        err, -EINVAL,
		        "secret %s: give both --region and --service (each pair binds "
		        "SERVICE.REGION.amazonaws.com)",
		        spec->key);
	for (size_t i = 0; i < spec->n_regions; i++)
		if (secret_aws_region_check(spec->regions[i]) < 0)
			return slate_error_set(
			        err, -EINVAL,
			        "secret %s: invalid AWS region '%s' (a region code such as "
			        "us-east-1: lowercase letters, digits and '-', ending with a "
			        "digit)",
			        spec->key, spec->regions[i]);
	for (size_t i = 0; i < spec->n_services; i++)
		if (secret_aws_service_check(spec->services[i]) < 0)
			return slate_error_set(
			        err, -EINVAL,
			        "secret %s: invalid AWS service '%s' (a service code such as "
			        "sts, s3 or dynamodb: lowercase letters, digits and '-')",
			        spec->key, spec->services[i]);
	if (spec->n_regions > SECRET_HOSTS_MAX || spec->n_services > SECRET_HOSTS_MAX ||
	    n + spec->n_regions * spec->n_services > SECRET_HOSTS_MAX)
		return slate_error_set(
		        err, -EINVAL,
		        "secret %s: at most %d hosts (--host, and one for each region and "
		        "service pair)",
		        spec->key, SECRET_HOSTS_MAX);
	for (size_t i = 0; i < spec->n_regions; i++)
		for (size_t j = 0; j < spec->n_services; j++) {
			const char *region = spec->regions[i];
			char *name = names[n - spec->n_hosts];
			(void)snprintf(name, HOST_BUF, "%s.%s.%s", spec->services[j], region,
			               strneq(region, "cn-", 3) ? "amazonaws.com.cn"
			                                        : "amazonaws.com");
			hosts[n++] = name;
		}
	*ret_n = n;
	return 0;
}

int secret_new(const struct secret_spec *spec, const unsigned char *salt, struct secret **ret,
               struct slate_error *err)
{
	_cleanup_(secret_freep) struct secret *s = calloc(1, sizeof(*s));
	const char *env = spec->env;
	const unsigned char *v = spec->value;
	const char *hosts[SECRET_HOSTS_MAX];
	char endpoints[SECRET_HOSTS_MAX][HOST_BUF];
	size_t len = spec->value_len, n_hosts = 0;
	int r;

	if (!s)
		return slate_error_errno(err, -ENOMEM, "building a secret");
	if (!env && !spec->file)
		env = spec->kind == SECRET_KIND_AWS      ? SECRET_DEFAULT_AWS_ENV
		      : secret_env_check(spec->key) == 0 ? spec->key
		                                         : NULL;
	r = aws_endpoints(spec, hosts, endpoints, &n_hosts, err);
	if (r < 0)
		return r;
	r = meta_init(s, spec->key, spec->kind, hosts, n_hosts, env, spec->file, spec->global, err);
	if (r < 0)
		return r;
	if (!v || len == 0)
		return slate_error_set(err, -EINVAL, "secret %s: the value is empty", spec->key);
	if (memchr(v, '\0', len))
		return slate_error_set(err, -EINVAL, "secret %s: the value contains a NUL byte",
		                       spec->key);

	if (spec->kind == SECRET_KIND_AWS) {
		static const char *const names[] = {"access-key-id", "secret-access-key",
		                                    "session-token"};
		size_t i = 0, n = 0;

		while (i < len) {
			size_t start;
			while (i < len &&
			       (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r'))
				i++;
			if (i >= len)
				break;
			start = i;
			while (i < len &&
			       !(v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r'))
				i++;
			if (n >= ELEMENTSOF(names))
				return slate_error_set(
				        err, -EINVAL,
				        "secret %s: an aws value is ACCESS_KEY_ID "
				        "SECRET_ACCESS_KEY "
				        "[SESSION_TOKEN]: more than three fields given",
				        spec->key);
			r = value_add(s, names[n++], v + start, i - start, salt, err);
			if (r < 0)
				return r;
		}
		if (n < 2)
			return slate_error_set(
			        err, -EINVAL,
			        "secret %s: an aws value is ACCESS_KEY_ID SECRET_ACCESS_KEY "
			        "[SESSION_TOKEN], separated by white space",
			        spec->key);
	} else {
		r = value_add(s, "value", v, len, salt, err);
		if (r < 0)
			return r;
	}
	if (values_check(s) < 0)
		return slate_error_set(err, -EINVAL, "secret %s: the value does not fit its kind",
		                       spec->key);
	r = secret_set_subst(s, spec->body, spec->query, err);
	if (r < 0)
		return r;
	s->plain_http = spec->plain_http;
	*ret = TAKE_PTR(s);
	return 0;
}

int secret_to_json(const struct secret *s, bool with_placeholders, struct json_object **ret)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *hosts, *ph = NULL;

	if (!o || json_add_string(o, "key", s->key) < 0 ||
	    json_add_string(o, "kind", secret_kind_name(s->kind)) < 0 ||
	    json_add_string(o, "scope", s->global ? "global" : "workspace") < 0)
		return -ENOMEM;
	hosts = json_object_new_array();
	if (!hosts || json_add(o, "hosts", hosts) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_hosts; i++)
		if (json_object_array_add(hosts, json_object_new_string(s->hosts[i])) < 0)
			return -ENOMEM;
	if ((s->env && json_add_string(o, "env", s->env) < 0) ||
	    (s->file && json_add_string(o, "file", s->file) < 0) ||
	    json_add_bool(o, "body", s->body) < 0 ||
	    json_add_bool(o, "allow_plain_http", s->plain_http) < 0 ||
	    (s->query && json_add_string(o, "query", s->query) < 0))
		return -ENOMEM;
	if (with_placeholders) {
		ph = json_object_new_object();
		if (!ph || json_add(o, "placeholders", ph) < 0)
			return -ENOMEM;
		for (size_t i = 0; i < s->n_values; i++)
			if (s->values[i].placeholder &&
			    json_add_string(ph, s->values[i].name, s->values[i].placeholder) < 0)
				return -ENOMEM;
	}
	*ret = TAKE_PTR(o);
	return 0;
}

/* Whether binding host covers AWS's regional service endpoints (SERVICE.REGION.amazonaws.com):
 * amazonaws.com, a name above it, or REGION.amazonaws.com. */
static bool above_aws_endpoints(const char *host)
{
	const char *dot = strchr(host, '.');

	if (host_matches("amazonaws.com", host) || host_matches("amazonaws.com.cn", host))
		return true;
	return dot && (streq(dot + 1, "amazonaws.com") || streq(dot + 1, "amazonaws.com.cn")) &&
	       host_is_region_label(host, (size_t)(dot - host));
}

int secret_broad_warnings(const struct secret *s, struct json_object **ret)
{
	_cleanup_json_ struct json_object *arr = json_object_new_array();

	if (!arr)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_hosts; i++) {
		const char *host = s->hosts[i];
		char example[HOST_BUF], zone[HOST_BUF], msg[1024], where[2 * HOST_BUF];
		const struct host_shared_zone *z =
		        host_shared_zone(host, example, zone, sizeof(example));
		bool aws = s->kind == SECRET_KIND_AWS;
		struct json_object *w;

		if (!z)
			continue;
		if (streq(z->zone, "*"))
			(void)snprintf(where, sizeof(where), "is a top-level domain");
		else if (streq(zone, host))
			(void)snprintf(where, sizeof(where), "is a shared zone");
		else
			(void)snprintf(where, sizeof(where), "covers the shared zone %s", zone);
		(void)snprintf(msg, sizeof(msg),
		               "secret %s: host %s %s, where anyone can own a name: %s would go "
		               "to %s too; bind the narrowest host instead: %s%s",
		               s->key, host, where,
		               aws ? "the real access key id and session token" : "the real value",
		               example, z->instead,
		               aws && above_aws_endpoints(host)
		                       ? ", and for AWS APIs the regional endpoints "
		                         "SERVICE.REGION.amazonaws.com (--region, --service)"
		                       : "");
		w = json_object_new_object();
		if (!w || json_object_array_add(arr, w) < 0) {
			json_object_put(w);
			return -ENOMEM;
		}
		if (json_add_string(w, "host", host) < 0 || json_add_string(w, "zone", zone) < 0 ||
		    json_add_string(w, "example", example) < 0 ||
		    json_add_string(w, "instead", z->instead) < 0 ||
		    json_add_string(w, "message", msg) < 0)
			return -ENOMEM;
	}
	*ret = TAKE_PTR(arr);
	return 0;
}

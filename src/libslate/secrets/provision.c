/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "secrets/provision.h"
#include "util/buf.h"
#include "util/json.h"

#define FILE_MAX (1024u * 1024u)

enum format { FMT_BARE, FMT_DOTENV, FMT_GIT_CREDENTIALS, FMT_GH_HOSTS, FMT_AWS_CREDENTIALS };

struct out_file {
	char *path;
	enum format fmt;
	struct buf *content;
	unsigned aws_profiles;
};

struct files {
	struct out_file *v;
	size_t n;
};

static void files_clear(struct files *f)
{
	for (size_t i = 0; i < f->n; i++) {
		free(f->v[i].path);
		buf_free(f->v[i].content);
	}
	free(f->v);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && streq(s + a - b, suffix);
}

static enum format format_of(const char *path)
{
	if (ends_with(path, "/.env"))
		return FMT_DOTENV;
	if (ends_with(path, "/.git-credentials"))
		return FMT_GIT_CREDENTIALS;
	if (ends_with(path, "/.config/gh/hosts.yml"))
		return FMT_GH_HOSTS;
	if (ends_with(path, "/.aws/credentials"))
		return FMT_AWS_CREDENTIALS;
	return FMT_BARE;
}

static int file_get(struct files *f, const char *guest_home, const char *file,
                    struct out_file **ret)
{
	_cleanup_free_ char *path = NULL;
	struct out_file *nv;

	if (strneq(file, "~/", 2)) {
		if (asprintf(&path, "%s%s%s", guest_home, ends_with(guest_home, "/") ? "" : "/",
		             file + 2) < 0)
			return -ENOMEM;
	} else {
		path = strdup(file);
		if (!path)
			return -ENOMEM;
	}
	for (size_t i = 0; i < f->n; i++)
		if (streq(f->v[i].path, path)) {
			*ret = &f->v[i];
			return 0;
		}
	nv = reallocarray(f->v, f->n + 1, sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	f->v = nv;
	nv = &f->v[f->n];
	*nv = (struct out_file){.fmt = format_of(path), .content = buf_new(FILE_MAX)};
	if (!nv->content)
		return -ENOMEM;
	nv->path = TAKE_PTR(path);
	f->n++;
	*ret = nv;
	return 0;
}

static const char *placeholder_of(const struct secret *s, const char *name)
{
	for (size_t i = 0; i < s->n_values; i++)
		if (streq(s->values[i].name, name))
			return s->values[i].placeholder;
	return NULL;
}

/* The AWS variables: suffix and value name. */
static const struct {
	const char *var, *name, *ini;
} aws_vars[] = {
        {"_ACCESS_KEY_ID", "access-key-id", "aws_access_key_id"},
        {"_SECRET_ACCESS_KEY", "secret-access-key", "aws_secret_access_key"},
        {"_SESSION_TOKEN", "session-token", "aws_session_token"},
};

static int env_put(struct json_object *env, const char *var, const char *value)
{
	/* A later secret's variable wins: json-c replaces the member. */
	return json_add_string(env, var, value);
}

/* The variable name in a .env file: env, else the key with what a shell would not take made '_'. */
static void dotenv_name(const struct secret *s, char *buf, size_t len)
{
	(void)snprintf(buf, len, "%s", s->env ? s->env : s->key);
	for (char *p = buf; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			*p = '_';
}

static int host_url(const char *h, char *buf, size_t len)
{
	int n = snprintf(buf, len, strchr(h, ':') ? "[%s]" : "%s", h);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int render_file(struct out_file *f, const struct secret *s)
{
	struct buf *b = f->content;
	const char *ph = placeholder_of(s, "value");
	char name[SECRET_ENV_MAX + SECRET_KEY_MAX + 32], host[300];
	int r = 0;

	switch (f->fmt) {
	case FMT_DOTENV:
		dotenv_name(s, name, sizeof(name));
		if (s->kind != SECRET_KIND_AWS)
			return buf_putf(b, "%s=%s\n", name, ph);
		for (size_t i = 0; i < ELEMENTSOF(aws_vars); i++) {
			const char *p = placeholder_of(s, aws_vars[i].name);
			if (p && (r = buf_putf(b, "%s%s=%s\n", s->env ? s->env : "AWS",
			                       aws_vars[i].var, p)) < 0)
				return r;
		}
		return 0;
	case FMT_GIT_CREDENTIALS:
		if (s->kind == SECRET_KIND_AWS)
			return 0;
		for (size_t i = 0; i < s->n_hosts; i++) {
			if ((r = host_url(s->hosts[i], host, sizeof(host))) < 0 ||
			    (r = buf_putf(b, "https://%s:%s@%s\n",
			                  s->kind == SECRET_KIND_GITLAB ? "oauth2"
			                                                : "x-access-token",
			                  ph, host)) < 0)
				return r;
		}
		return 0;
	case FMT_GH_HOSTS:
		if (s->kind == SECRET_KIND_AWS)
			return 0;
		for (size_t i = 0; i < s->n_hosts; i++)
			if ((r = buf_putf(b,
			                  "\"%s\":\n    oauth_token: %s\n    git_protocol: https\n",
			                  s->hosts[i], ph)) < 0)
				return r;
		return 0;
	case FMT_AWS_CREDENTIALS:
		if (s->kind != SECRET_KIND_AWS)
			return 0;
		if ((r = buf_putf(b, "%s[%s]\n", f->aws_profiles ? "\n" : "",
		                  f->aws_profiles ? s->key : "default")) < 0)
			return r;
		f->aws_profiles++;
		for (size_t i = 0; i < ELEMENTSOF(aws_vars); i++) {
			const char *p = placeholder_of(s, aws_vars[i].name);
			if (p && (r = buf_putf(b, "%s = %s\n", aws_vars[i].ini, p)) < 0)
				return r;
		}
		return 0;
	case FMT_BARE:
		for (size_t i = 0; i < s->n_values; i++)
			if ((r = buf_putf(b, "%s\n", s->values[i].placeholder)) < 0)
				return r;
		return 0;
	}
	return -EINVAL;
}

static int compare_files(const void *a, const void *b)
{
	return strcmp(((const struct out_file *)a)->path, ((const struct out_file *)b)->path);
}

int provision_render(const struct secret_set *s, const char *guest_home, struct json_object **ret)
{
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *env, *arr;
	struct files files = {0};
	int r = 0;

	/* "~" leaves "~/..." paths for slate-guest to put in its workspace user's home. */
	if (!guest_home || (guest_home[0] != '/' && strcmp(guest_home, "~") != 0))
		return -EINVAL;
	o = json_object_new_object();
	if (!o)
		return -ENOMEM;
	env = json_object_new_object();
	if (!env || json_add(o, "env", env) < 0)
		return -ENOMEM;
	arr = json_object_new_array();
	if (!arr || json_add(o, "files", arr) < 0)
		return -ENOMEM;
	for (size_t i = 0; s && i < s->n; i++) {
		const struct secret *x = &s->v[i];
		bool complete = x->n_values > 0;

		for (size_t j = 0; j < x->n_values; j++)
			complete = complete && x->values[j].placeholder;
		if (!complete)
			continue;
		if (x->env && x->kind == SECRET_KIND_AWS) {
			for (size_t j = 0; j < ELEMENTSOF(aws_vars) && r >= 0; j++) {
				const char *p = placeholder_of(x, aws_vars[j].name);
				char var[SECRET_ENV_MAX + 32];
				(void)snprintf(var, sizeof(var), "%s%s", x->env, aws_vars[j].var);
				if (p)
					r = env_put(env, var, p);
			}
		} else if (x->env)
			r = env_put(env, x->env, placeholder_of(x, "value"));
		if (r < 0)
			goto out;
		if (x->file) {
			struct out_file *f;
			r = file_get(&files, guest_home, x->file, &f);
			if (r < 0)
				goto out;
			r = render_file(f, x);
			if (r < 0)
				goto out;
		}
	}
	if (files.n > 1)
		qsort(files.v, files.n, sizeof(files.v[0]), compare_files);
	for (size_t i = 0; i < files.n; i++) {
		struct json_object *f = json_object_new_object();
		if (!f || json_add_string(f, "path", files.v[i].path) < 0 ||
		    json_add_int64(f, "mode", PROVISION_FILE_MODE) < 0 ||
		    json_add(f, "content",
		             json_object_new_string_len((const char *)buf_ptr(files.v[i].content),
		                                        (int)buf_len(files.v[i].content))) < 0 ||
		    json_object_array_add(arr, f) < 0) {
			json_object_put(f);
			r = -ENOMEM;
			goto out;
		}
	}
	*ret = TAKE_PTR(o);
out:
	files_clear(&files);
	return r;
}

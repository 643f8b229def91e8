/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * What a guest is given of a secret set (secrets/provision.c): environment variables and files in
 * each format, several secrets merged into one file, and never a real value anywhere.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "secrets/install.h"
#include "secrets/provision.h"
#include "secrets/secrets.h"
#include "util/json.h"

#define ANTHROPIC_REAL "sk-ant-api03-ProvisionTestValueNotRealAtAll0123456789abcdefghAA"
#define GITHUB_REAL "ghp_ProvisionTestNotARealToken0123456789"
#define GITLAB_REAL "glpat-ProvisionTest01234567"
#define AWS_ID "AKIAPROVISIONTEST777"
#define AWS_SECRET "ProvisionTestSecretKey/0123456789abcdefg"
#define AWS_TOKEN "ProvisionTestSessionToken0123456789"
#define GENERIC1 "generic-one-provision-value"
#define GENERIC2 "generic-two-provision-value"
#define BARE_REAL "bare-file-provision-value"

static unsigned char salt[INSTALL_SALT_LEN];

static void add(struct secret_set *s, const char *key, enum secret_kind kind,
                const char *const *hosts, size_t n_hosts, const char *env, const char *file,
                const char *value, bool global)
{
	struct secret_spec spec = {.key = key,
	                           .kind = kind,
	                           .hosts = hosts,
	                           .n_hosts = n_hosts,
	                           .env = env,
	                           .file = file,
	                           .value = value,
	                           .value_len = strlen(value),
	                           .global = global};
	struct secret *x = NULL;
	struct slate_error err = {0};

	if (secret_new(&spec, salt, &x, &err) < 0)
		fail_msg("%s: %s", key, err.msg);
	assert_int_equal(secret_set_put(s, x, NULL), 0);
}

static const char *ph(const struct secret_set *s, const char *key, const char *name)
{
	int i = secret_set_find(s, key);

	assert_true(i >= 0);
	for (size_t j = 0; j < s->v[i].n_values; j++)
		if (streq(s->v[i].values[j].name, name))
			return s->v[i].values[j].placeholder;
	fail_msg("%s: no %s", key, name);
	return NULL;
}

static const char *file_content(struct json_object *o, const char *path)
{
	struct json_object *files;
	const char *p, *c;
	int64_t mode;

	assert_int_equal(json_get_array(o, "files", &files), 0);
	for (size_t i = 0; i < json_object_array_length(files); i++) {
		struct json_object *f = json_object_array_get_idx(files, i);
		assert_int_equal(json_get_string(f, "path", &p), 0);
		if (!streq(p, path))
			continue;
		assert_int_equal(json_get_int64(f, "mode", &mode), 0);
		assert_int_equal(mode, 0600);
		assert_int_equal(json_get_string(f, "content", &c), 0);
		return c;
	}
	fail_msg("no file %s", path);
	return NULL;
}

static void test_render(void **state)
{
	_cleanup_(secret_set_freep) struct secret_set *s = secret_set_new();
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *env, *files;
	const char *gh_hosts[] = {"github.com", "Gist.GitHub.com."};
	const char *gl_hosts[] = {"gitlab.example"};
	const char *any[] = {"api.example"};
	const char *text, *v;
	char want[4096];

	(void)state;
	add(s, "ANTHROPIC_API_KEY", SECRET_KIND_ANTHROPIC, any, 1, NULL, NULL, ANTHROPIC_REAL,
	    true);
	add(s, "GH_TOKEN", SECRET_KIND_GITHUB, gh_hosts, 2, "GH_TOKEN", "~/.git-credentials",
	    GITHUB_REAL, false);
	add(s, "GH_CLI", SECRET_KIND_GITHUB, gh_hosts, 1, NULL, "~/.config/gh/hosts.yml",
	    GITHUB_REAL, false);
	add(s, "GITLAB", SECRET_KIND_GITLAB, gl_hosts, 1, NULL, "~/.git-credentials", GITLAB_REAL,
	    false);
	add(s, "AWS", SECRET_KIND_AWS, any, 1, "AWS", "~/.aws/credentials",
	    AWS_ID " " AWS_SECRET " " AWS_TOKEN, false);
	add(s, "AWS_OTHER", SECRET_KIND_AWS, any, 1, NULL, "~/.aws/credentials",
	    AWS_ID "\t" AWS_SECRET, false);
	add(s, "ONE", SECRET_KIND_GENERIC, any, 1, NULL, "~/.env", GENERIC1, false);
	add(s, "TWO", SECRET_KIND_GENERIC, any, 1, "TWO_VAR", "~/.env", GENERIC2, false);
	add(s, "BARE", SECRET_KIND_GENERIC, any, 1, NULL, "/etc/app/token", BARE_REAL, false);

	assert_int_equal(provision_render(s, "/home/slate", &o), 0);
	text = json_object_to_json_string(o);
	print_message("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));

	/* Never a real value, anywhere. */
	static const char *const reals[] = {ANTHROPIC_REAL, GITHUB_REAL,    GITLAB_REAL, AWS_ID,
	                                    AWS_SECRET,     AWS_TOKEN,      GENERIC1,    GENERIC2,
	                                    BARE_REAL,      "ProvisionTest"};
	for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++)
		assert_null(strstr(text, reals[i]));

	/* The environment: the key by default, explicit names, aws by prefix. */
	assert_int_equal(json_get_object(o, "env", &env), 0);
	assert_int_equal(json_get_string(env, "ANTHROPIC_API_KEY", &v), 0);
	assert_string_equal(v, ph(s, "ANTHROPIC_API_KEY", "value"));
	assert_int_equal(json_get_string(env, "GH_TOKEN", &v), 0);
	assert_string_equal(v, ph(s, "GH_TOKEN", "value"));
	assert_int_equal(json_get_string(env, "TWO_VAR", &v), 0);
	assert_int_equal(json_get_string(env, "AWS_ACCESS_KEY_ID", &v), 0);
	assert_string_equal(v, ph(s, "AWS", "access-key-id"));
	assert_int_equal(json_get_string(env, "AWS_SECRET_ACCESS_KEY", &v), 0);
	assert_string_equal(v, ph(s, "AWS", "secret-access-key"));
	assert_int_equal(json_get_string(env, "AWS_SESSION_TOKEN", &v), 0);
	assert_string_equal(v, ph(s, "AWS", "session-token"));
	assert_int_equal(json_get_string(env, "ONE", &v), -ENOENT); /* a file was named */
	assert_int_equal(json_get_string(env, "GH_CLI", &v), -ENOENT);

	/* Files, sorted by path; several secrets in one. */
	assert_int_equal(json_get_array(o, "files", &files), 0);
	assert_int_equal(json_object_array_length(files), 5);
	snprintf(want, sizeof(want),
	         "https://x-access-token:%s@github.com\n"
	         "https://x-access-token:%s@gist.github.com\n"
	         "https://oauth2:%s@gitlab.example\n",
	         ph(s, "GH_TOKEN", "value"), ph(s, "GH_TOKEN", "value"), ph(s, "GITLAB", "value"));
	assert_string_equal(file_content(o, "/home/slate/.git-credentials"), want);
	snprintf(want, sizeof(want),
	         "\"github.com\":\n    oauth_token: %s\n    git_protocol: https\n",
	         ph(s, "GH_CLI", "value"));
	assert_string_equal(file_content(o, "/home/slate/.config/gh/hosts.yml"), want);
	snprintf(want, sizeof(want),
	         "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
	         "aws_session_token = %s\n\n[AWS_OTHER]\naws_access_key_id = %s\n"
	         "aws_secret_access_key = %s\n",
	         ph(s, "AWS", "access-key-id"), ph(s, "AWS", "secret-access-key"),
	         ph(s, "AWS", "session-token"), ph(s, "AWS_OTHER", "access-key-id"),
	         ph(s, "AWS_OTHER", "secret-access-key"));
	assert_string_equal(file_content(o, "/home/slate/.aws/credentials"), want);
	snprintf(want, sizeof(want), "ONE=%s\nTWO_VAR=%s\n", ph(s, "ONE", "value"),
	         ph(s, "TWO", "value"));
	assert_string_equal(file_content(o, "/home/slate/.env"), want);
	snprintf(want, sizeof(want), "%s\n", ph(s, "BARE", "value"));
	assert_string_equal(file_content(o, "/etc/app/token"), want);
	{
		const char *first;
		assert_int_equal(
		        json_get_string(json_object_array_get_idx(files, 0), "path", &first), 0);
		assert_string_equal(first, "/etc/app/token");
	}
}

/* A later (workspace) secret's variable replaces an earlier (global) one's. */
static void test_env_override_and_empty(void **state)
{
	_cleanup_(secret_set_freep) struct secret_set *s = secret_set_new();
	_cleanup_json_ struct json_object *o = NULL, *e = NULL;
	struct json_object *env, *files;
	const char *any[] = {"api.example"};
	const char *v;

	(void)state;
	add(s, "G", SECRET_KIND_GENERIC, any, 1, "TOKEN", NULL, GENERIC1, true);
	add(s, "W", SECRET_KIND_GENERIC, any, 1, "TOKEN", NULL, GENERIC2, false);
	assert_int_equal(provision_render(s, "/home/slate/", &o), 0);
	assert_int_equal(json_get_object(o, "env", &env), 0);
	assert_int_equal(json_get_string(env, "TOKEN", &v), 0);
	assert_string_equal(v, ph(s, "W", "value"));

	assert_int_equal(provision_render(NULL, "/home/slate", &e), 0);
	assert_int_equal(json_get_array(e, "files", &files), 0);
	assert_int_equal(json_object_array_length(files), 0);
	assert_int_equal(provision_render(s, "relative", &e), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_render),
	        cmocka_unit_test(test_env_override_and_empty),
	};

	for (size_t i = 0; i < sizeof(salt); i++)
		salt[i] = (unsigned char)(i * 3 + 5);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

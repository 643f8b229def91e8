/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The vault (secrets/vault.c, secrets/secret.c; hosts by util/host.c) on a real install directory:
 * no plaintext in the sealed file, purpose binding (a vault moved to another workspace's
 * directory or another user's does not open), tampering refused, the strict plaintext parser,
 * global + workspace merge with override, host normalisation and binding, values kept out of
 * logs and error messages, and the master key file's checks.
 */

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "host-cases.h"
#include "secrets/install.h"
#include "secrets/secrets.h"
#include "secrets/vault.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

#define ANTHROPIC_REAL "sk-ant-api03-Rl9vQ2hxNzRrZXlfZm9yX3Rlc3RpbmdfT25seV9ub3RfcmVhbA-xYzAA"
#define GITHUB_REAL "ghp_TestOnlyNotARealTokenAbcdef0123456789"
#define GENERIC_REAL "generic-real-value-for-the-vault-test"
#define AWS_REAL                                                                                   \
	"AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY FwoGZXIvYXdzEXAMPLETOKEN"

struct ctx {
	char dir[64];
	int dfd;
	struct install *in;
};

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	snprintf(c->dir, sizeof(c->dir), "/tmp/test-vault.XXXXXX");
	assert_non_null(mkdtemp(c->dir));
	c->dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(c->dfd >= 0);
	assert_int_equal(install_open(c->dfd, "/nonexistent", &c->in, NULL), 0);
	assert_int_equal(mkdirat(c->dfd, "a", 0700), 0);
	assert_int_equal(mkdirat(c->dfd, "b", 0700), 0);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;
	char cmd[128];

	install_free(c->in);
	(void)close(c->dfd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
	assert_int_equal(system(cmd), 0);
	free(c);
	return 0;
}

static struct secret *mk(const struct install *in, const char *key, enum secret_kind kind,
                         const char *host, const char *value, bool global)
{
	const char *hosts[] = {host};
	struct secret_spec spec = {.key = key,
	                           .kind = kind,
	                           .hosts = hosts,
	                           .n_hosts = 1,
	                           .value = value,
	                           .value_len = strlen(value),
	                           .global = global};
	struct secret *s = NULL;
	struct slate_error err = {0};
	int r = secret_new(&spec, install_salt(in), &s, &err);

	if (r < 0)
		fail_msg("secret_new(%s): %s", key, err.msg);
	return s;
}

static struct secret_set *three(const struct install *in, bool global)
{
	struct secret_set *s = secret_set_new();

	assert_non_null(s);
	assert_int_equal(secret_set_put(s,
	                                mk(in, "ANTHROPIC_API_KEY", SECRET_KIND_ANTHROPIC,
	                                   "API.Anthropic.com.", ANTHROPIC_REAL, global),
	                                NULL),
	                 0);
	assert_int_equal(secret_set_put(s,
	                                mk(in, "GH_TOKEN", SECRET_KIND_GITHUB, "github.com",
	                                   GITHUB_REAL, global),
	                                NULL),
	                 0);
	assert_int_equal(
	        secret_set_put(s, mk(in, "AWS", SECRET_KIND_AWS, "amazonaws.com", AWS_REAL, global),
	                       NULL),
	        0);
	return s;
}

static const struct secret_value *value_of(const struct secret_set *s, const char *key,
                                           const char *name)
{
	int i = secret_set_find(s, key);

	assert_true(i >= 0);
	for (size_t j = 0; j < s->v[i].n_values; j++)
		if (streq(s->v[i].values[j].name, name))
			return &s->v[i].values[j];
	fail_msg("%s has no %s", key, name);
	return NULL;
}

static void assert_real(const struct secret_value *v, const char *want)
{
	assert_int_equal(buf_len(v->real), strlen(want));
	assert_memory_equal(buf_ptr(v->real), want, strlen(want));
}

static void test_round_trip(void **state)
{
	struct ctx *c = *state;
	_cleanup_(secret_set_freep) struct secret_set *s = three(c->in, false), *back = NULL;
	struct slate_error err = {0};

	assert_int_equal(vault_write_at(c->in, c->dfd, "a/" VAULT_FILE, "vault:a", s), 0);
	assert_int_equal(
	        vault_read_at(c->in, c->dfd, "a/" VAULT_FILE, "vault:a", false, &back, &err), 0);
	assert_int_equal(back->n, 3);
	for (size_t i = 0; i < s->n; i++) {
		assert_string_equal(back->v[i].key, s->v[i].key);
		assert_int_equal(back->v[i].kind, s->v[i].kind);
		assert_int_equal(back->v[i].n_values, s->v[i].n_values);
		for (size_t j = 0; j < s->v[i].n_values; j++) {
			assert_string_equal(back->v[i].values[j].placeholder,
			                    s->v[i].values[j].placeholder);
			assert_int_equal(buf_len(back->v[i].values[j].real),
			                 buf_len(s->v[i].values[j].real));
		}
	}
	assert_string_equal(back->v[0].hosts[0], "api.anthropic.com");
	assert_string_equal(back->v[0].env, "ANTHROPIC_API_KEY"); /* the default: the key */
	assert_string_equal(back->v[2].env, "AWS");               /* aws: the prefix */
	assert_real(value_of(back, "ANTHROPIC_API_KEY", "value"), ANTHROPIC_REAL);
	assert_real(value_of(back, "AWS", "access-key-id"), "AKIAIOSFODNN7EXAMPLE");
	assert_real(value_of(back, "AWS", "secret-access-key"),
	            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
	assert_real(value_of(back, "AWS", "session-token"), "FwoGZXIvYXdzEXAMPLETOKEN");
	assert_false(back->v[0].global);

	/* A missing vault is an empty one. */
	secret_set_free(TAKE_PTR(back));
	assert_int_equal(
	        vault_read_at(c->in, c->dfd, "b/" VAULT_FILE, "vault:b", false, &back, &err), 0);
	assert_int_equal(back->n, 0);
}

/* Neither a value nor a key name nor a host is in the sealed file. */
static void test_no_plaintext(void **state)
{
	struct ctx *c = *state;
	_cleanup_(secret_set_freep) struct secret_set *s = three(c->in, false);
	_cleanup_buf_ struct buf *raw = NULL;
	struct stat st;
	static const char *const needles[] = {
	        ANTHROPIC_REAL,
	        GITHUB_REAL,
	        "AKIAIOSFODNN7EXAMPLE",
	        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	        "FwoGZXIvYXdzEXAMPLETOKEN",
	        "ANTHROPIC_API_KEY",
	        "GH_TOKEN",
	        "github.com",
	        "anthropic",
	        VAULT_MAGIC,
	        "Rl9vQ2hx", /* a slice of a value */
	};

	assert_int_equal(vault_write_at(c->in, c->dfd, "a/" VAULT_FILE, "vault:a", s), 0);
	assert_int_equal(fstatat(c->dfd, "a/" VAULT_FILE, &st, 0), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(fs_read_file_at(c->dfd, "a/" VAULT_FILE, 1 << 20, &raw), 0);
	assert_memory_equal(buf_ptr(raw), "SLSEAL1\n", 8);
	for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++)
		assert_null(memmem(buf_ptr(raw), buf_len(raw), needles[i], strlen(needles[i])));
}

static int copy_file(int dfd, const char *from, const char *to)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r = fs_read_file_at(dfd, from, 1 << 20, &b);
	if (r < 0)
		return r;
	return fs_write_atomic_at(dfd, to, buf_ptr(b), buf_len(b), 0600);
}

/* A vault copied into another workspace's directory, or another user's global vault, does not
 * open: the purpose is authenticated with it. */
static void test_purpose_binding(void **state)
{
	struct ctx *c = *state;
	_cleanup_(secret_set_freep) struct secret_set *s = three(c->in, false), *back = NULL;
	struct slate_error err = {0};

	assert_int_equal(vault_write_at(c->in, c->dfd, "a/" VAULT_FILE, "vault:a", s), 0);
	assert_int_equal(copy_file(c->dfd, "a/" VAULT_FILE, "b/" VAULT_FILE), 0);
	assert_int_equal(
	        vault_read_at(c->in, c->dfd, "b/" VAULT_FILE, "vault:b", false, &back, &err),
	        SLATE_ERR_SIGNATURE_INVALID);
	assert_null(back);
	assert_non_null(strstr(err.msg, "does not open"));
	/* Read as a global vault it does not open either. */
	assert_int_equal(
	        vault_read_at(c->in, c->dfd, "b/" VAULT_FILE, "vault-global:0", true, &back, &err),
	        SLATE_ERR_SIGNATURE_INVALID);

	assert_int_equal(vault_write_at(c->in, c->dfd, "a/global-1000.enc", "vault-global:1000", s),
	                 0);
	assert_int_equal(copy_file(c->dfd, "a/global-1000.enc", "a/global-1001.enc"), 0);
	assert_int_equal(vault_read_at(c->in, c->dfd, "a/global-1001.enc", "vault-global:1001",
	                               true, &back, &err),
	                 SLATE_ERR_SIGNATURE_INVALID);
	assert_int_equal(vault_read_at(c->in, c->dfd, "a/global-1000.enc", "vault-global:1000",
	                               true, &back, &err),
	                 0);
	assert_true(back->v[0].global);
}

/* Any change to the sealed bytes is refused, never half-read. */
static void test_tampered(void **state)
{
	struct ctx *c = *state;
	_cleanup_(secret_set_freep) struct secret_set *s = three(c->in, false), *back = NULL;
	_cleanup_buf_ struct buf *raw = NULL;
	struct slate_error err = {0};
	size_t n;
	uint8_t *p;

	assert_int_equal(vault_write_at(c->in, c->dfd, "a/" VAULT_FILE, "vault:a", s), 0);
	assert_int_equal(fs_read_file_at(c->dfd, "a/" VAULT_FILE, 1 << 20, &raw), 0);
	n = buf_len(raw);
	p = buf_mutable_ptr(raw);
	size_t offsets[] = {9, 8 + 24 + 3, n / 2, n - 1};
	for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
		p[offsets[i]] ^= 0x01;
		assert_int_equal(fs_write_atomic_at(c->dfd, "b/" VAULT_FILE, p, n, 0600), 0);
		assert_int_equal(vault_read_at(c->in, c->dfd, "b/" VAULT_FILE, "vault:a", false,
		                               &back, &err),
		                 SLATE_ERR_SIGNATURE_INVALID);
		p[offsets[i]] ^= 0x01;
	}
	/* Truncated, extended, or not sealed at all. */
	assert_int_equal(fs_write_atomic_at(c->dfd, "b/" VAULT_FILE, p, n - 1, 0600), 0);
	assert_true(vault_read_at(c->in, c->dfd, "b/" VAULT_FILE, "vault:a", false, &back, &err) <
	            0);
	assert_int_equal(fs_write_atomic_at(c->dfd, "b/" VAULT_FILE, "SLSEAL1\nshort", 13, 0600),
	                 0);
	assert_true(vault_read_at(c->in, c->dfd, "b/" VAULT_FILE, "vault:a", false, &back, &err) <
	            0);
	assert_null(back);
	/* Untouched, it opens. */
	assert_int_equal(fs_write_atomic_at(c->dfd, "b/" VAULT_FILE, p, n, 0600), 0);
	assert_int_equal(
	        vault_read_at(c->in, c->dfd, "b/" VAULT_FILE, "vault:a", false, &back, &err), 0);
}

/* A vault sealed under another installation's master key does not open here. */
static void test_other_install(void **state)
{
	struct ctx *c = *state;
	_cleanup_(secret_set_freep) struct secret_set *s = three(c->in, false), *back = NULL;
	struct install *other = NULL;
	struct slate_error err = {0};

	assert_int_equal(mkdirat(c->dfd, "other", 0700), 0);
	{
		_cleanup_close_ int ofd = openat(c->dfd, "other", O_RDONLY | O_DIRECTORY);
		assert_int_equal(install_open(ofd, "/nonexistent", &other, NULL), 0);
	}
	assert_int_equal(vault_write_at(other, c->dfd, "a/" VAULT_FILE, "vault:a", s), 0);
	install_free(other);
	assert_int_equal(
	        vault_read_at(c->in, c->dfd, "a/" VAULT_FILE, "vault:a", false, &back, &err),
	        SLATE_ERR_SIGNATURE_INVALID);
}

/* Global secrets, then the workspace's, which override by key name. */
static void test_merge(void **state)
{
	struct ctx *c = *state;
	struct secret_set *g = secret_set_new(), *w = secret_set_new();
	_cleanup_(secret_set_freep) struct secret_set *m = NULL;

	assert_int_equal(secret_set_put(g,
	                                mk(c->in, "ONLY_GLOBAL", SECRET_KIND_GENERIC, "a.example",
	                                   "global-only-value-1", true),
	                                NULL),
	                 0);
	assert_int_equal(secret_set_put(g,
	                                mk(c->in, "BOTH", SECRET_KIND_GENERIC, "b.example",
	                                   "global-both-value-2", true),
	                                NULL),
	                 0);
	assert_int_equal(secret_set_put(w,
	                                mk(c->in, "BOTH", SECRET_KIND_GENERIC, "c.example",
	                                   "workspace-both-value-3", false),
	                                NULL),
	                 0);
	assert_int_equal(secret_set_put(w,
	                                mk(c->in, "ONLY_WS", SECRET_KIND_GENERIC, "d.example",
	                                   "workspace-only-value-4", false),
	                                NULL),
	                 0);
	assert_int_equal(secret_set_merge(g, w, &m), 0);
	assert_int_equal(m->n, 3);
	assert_string_equal(m->v[0].key, "ONLY_GLOBAL");
	assert_true(m->v[0].global);
	assert_int_equal(secret_set_find(m, "BOTH"), 1);
	assert_false(m->v[1].global);
	assert_string_equal(m->v[1].hosts[0], "c.example");
	assert_real(&m->v[1].values[0], "workspace-both-value-3");
	assert_string_equal(m->v[2].key, "ONLY_WS");

	/* Either side may be missing. */
	secret_set_free(TAKE_PTR(m));
	assert_int_equal(secret_set_merge(NULL, NULL, &m), 0);
	assert_int_equal(m->n, 0);
}

/* The put/remove primitives under the vault verbs. */
static void test_set_put_remove(void **state)
{
	struct ctx *c = *state;
	_cleanup_(secret_set_freep) struct secret_set *s = secret_set_new();
	bool replaced = true;

	assert_int_equal(secret_set_put(s,
	                                mk(c->in, "K", SECRET_KIND_GENERIC, "x.example",
	                                   "first-value-abc", false),
	                                &replaced),
	                 0);
	assert_false(replaced);
	assert_int_equal(secret_set_put(s,
	                                mk(c->in, "K", SECRET_KIND_GENERIC, "y.example",
	                                   "second-value-abc", false),
	                                &replaced),
	                 0);
	assert_true(replaced);
	assert_int_equal(s->n, 1);
	assert_string_equal(s->v[0].hosts[0], "y.example");
	assert_int_equal(secret_set_remove(s, "nope"), -ENOENT);
	assert_int_equal(secret_set_remove(s, "K"), 0);
	assert_int_equal(s->n, 0);
}

/* The shared table of hostile spellings (host-cases.h), as secret set's --host: accepted
 * exactly when the proxy's normaliser accepts, stored in its normal form, and the vault reads
 * the stored form back as it is. */
static void test_host_normalize(void **state)
{
	static const unsigned char salt[32] = {3};
	static const char value[] = "very-secret-value-123";
	(void)state;
	for (size_t i = 0; i < sizeof(host_cases) / sizeof(host_cases[0]); i++) {
		const struct host_case *hc = &host_cases[i];
		const char *hosts[] = {hc->in};
		struct secret_spec spec = {.key = "K",
		                           .kind = SECRET_KIND_GENERIC,
		                           .hosts = hosts,
		                           .n_hosts = 1,
		                           .value = value,
		                           .value_len = sizeof(value) - 1};
		_cleanup_(secret_set_freep) struct secret_set *set = NULL, *back = NULL;
		_cleanup_buf_secure_ struct buf *plain = NULL;
		struct secret *sec = NULL;
		struct slate_error err = {0};
		int r = secret_new(&spec, salt, &sec, &err);

		if (!hc->out) {
			if (r != -EINVAL)
				fail_msg("'%s' accepted as '%s'", hc->in, sec ? sec->hosts[0] : "");
			assert_null(sec);
			assert_non_null(strstr(err.msg, "host '")); /* a precise message */
			continue;
		}
		if (r != 0)
			fail_msg("'%s' refused: %s", hc->in, err.msg);
		assert_string_equal(sec->hosts[0], hc->out);
		set = secret_set_new();
		assert_non_null(set);
		assert_int_equal(secret_set_put(set, sec, NULL), 0);
		assert_int_equal(vault_serialize(set, &plain), 0);
		assert_int_equal(
		        vault_parse(buf_ptr(plain), buf_len(plain), salt, false, &back, &err), 0);
		assert_string_equal(back->v[0].hosts[0], hc->out);
	}
}

/* Refusals say what is wrong and never quote the value. */
static void test_secret_new_refusals(void **state)
{
	struct ctx *c = *state;
	const char *good[] = {"api.example.com"}, *bad[] = {"*.example.com"};
	static const char value[] = "very-secret-value-123";
	struct {
		struct secret_spec spec;
		const char *want;
	} cases[] = {
	        {{.key = "K", .hosts = good, .n_hosts = 0, .value = value, .value_len = 21},
	         "at least one host"},
	        {{.key = "K", .hosts = bad, .n_hosts = 1, .value = value, .value_len = 21},
	         "wildcard"},
	        {{.key = "bad key", .hosts = good, .n_hosts = 1, .value = value, .value_len = 21},
	         "invalid secret name"},
	        {{.key = "K", .hosts = good, .n_hosts = 1, .value = value, .value_len = 4},
	         "shorter than"},
	        {{.key = "K",
	          .hosts = good,
	          .n_hosts = 1,
	          .value = "abc\r\ndefghijk",
	          .value_len = 13},
	         "control character"},
	        {{.key = "K", .hosts = good, .n_hosts = 1, .value = "", .value_len = 0}, "empty"},
	        {{.key = "K",
	          .kind = SECRET_KIND_AWS,
	          .hosts = good,
	          .n_hosts = 1,
	          .value = value,
	          .value_len = 21},
	         "ACCESS_KEY_ID SECRET_ACCESS_KEY"},
	        {{.key = "K",
	          .hosts = good,
	          .n_hosts = 1,
	          .env = "1BAD",
	          .value = value,
	          .value_len = 21},
	         "environment variable"},
	        {{.key = "K",
	          .hosts = good,
	          .n_hosts = 1,
	          .file = "~/../etc/passwd",
	          .value = value,
	          .value_len = 21},
	         "guest file"},
	        {{.key = "K",
	          .hosts = good,
	          .n_hosts = 1,
	          .file = "relative/file",
	          .value = value,
	          .value_len = 21},
	         "guest file"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct secret *s = NULL;
		struct slate_error err = {0};
		int r = secret_new(&cases[i].spec, install_salt(c->in), &s, &err);
		if (r != -EINVAL || !strstr(err.msg, cases[i].want))
			fail_msg("case %zu: r=%d err='%s', want '%s'", i, r, err.msg,
			         cases[i].want);
		assert_null(s);
		assert_null(strstr(err.msg, "very-secret"));
	}
}

/* aws --region x --service bind the regional endpoints, checked; a broad host warns, with the
 * zone, a name someone else may own and the narrow host to bind instead; a narrow one does not. */
static void test_aws_endpoints_and_warnings(void **state)
{
	struct ctx *c = *state;
	static const char aws[] = "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
	static const char value[] = "very-secret-value-123";
	const char *iam[] = {"iam.amazonaws.com"}, *regions[] = {"us-east-1", "cn-north-1"},
	           *services[] = {"sts", "s3"},
	           *six[] = {"a1-b-1", "a2-b-1", "a3-b-1", "a4-b-1", "a5-b-1", "a6-b-1"},
	           *broad[] = {"github.io", "api.example.com", "amazonaws.com"};
	static const char *const want_hosts[] = {
	        "iam.amazonaws.com", "sts.us-east-1.amazonaws.com", "s3.us-east-1.amazonaws.com",
	        "sts.cn-north-1.amazonaws.com.cn", "s3.cn-north-1.amazonaws.com.cn"};
	struct secret_spec spec = {.key = "AWS",
	                           .kind = SECRET_KIND_AWS,
	                           .hosts = iam,
	                           .n_hosts = 1,
	                           .regions = regions,
	                           .n_regions = 2,
	                           .services = services,
	                           .n_services = 2,
	                           .value = aws,
	                           .value_len = sizeof(aws) - 1};
	/* Refused: kind, one region and one service (NULL: none) or six of each (over the
	 * maximum), and what the message says. */
	static const struct {
		enum secret_kind kind;
		const char *region, *service, *want;
		bool six;
	} refused[] = {
	        {SECRET_KIND_GENERIC, "us-east-1", "sts", "for aws secrets only", false},
	        {SECRET_KIND_AWS, "us-east-1", NULL, "give both --region and --service", false},
	        {SECRET_KIND_AWS, NULL, "sts", "give both --region and --service", false},
	        {SECRET_KIND_AWS, "us_east_1", "sts", "invalid AWS region 'us_east_1'", false},
	        {SECRET_KIND_AWS, "sts", "us-east-1", "invalid AWS region 'sts'", false},
	        {SECRET_KIND_AWS, "us-east-1", "s3.evil", "invalid AWS service 's3.evil'", false},
	        {SECRET_KIND_AWS, NULL, NULL, "or name its endpoints with --region and --service",
	         false},
	        {SECRET_KIND_AWS, NULL, NULL, "at most 32 hosts", true},
	};
	_cleanup_(secret_freep) struct secret *s = NULL, *g = NULL;
	_cleanup_json_ struct json_object *w = NULL, *gw = NULL;
	const char *host = NULL, *msg = NULL;
	struct slate_error err = {0};

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		bool is_aws = refused[i].kind == SECRET_KIND_AWS;
		struct secret_spec bad = {.key = "K",
		                          .kind = refused[i].kind,
		                          .regions = refused[i].six ? six : &refused[i].region,
		                          .n_regions = refused[i].six ? 6 : !!refused[i].region,
		                          .services = refused[i].six ? six : &refused[i].service,
		                          .n_services = refused[i].six ? 6 : !!refused[i].service,
		                          .value = is_aws ? aws : value,
		                          .value_len =
		                                  is_aws ? sizeof(aws) - 1 : sizeof(value) - 1};
		struct secret *r = NULL;
		int rc = secret_new(&bad, install_salt(c->in), &r, &err);
		if (rc != -EINVAL || !strstr(err.msg, refused[i].want))
			fail_msg("case %zu: r=%d err='%s', want '%s'", i, rc, err.msg,
			         refused[i].want);
		assert_null(r);
	}
	if (secret_new(&spec, install_salt(c->in), &s, &err) < 0)
		fail_msg("aws with regions and services: %s", err.msg);
	assert_int_equal(s->n_hosts, sizeof(want_hosts) / sizeof(want_hosts[0]));
	for (size_t i = 0; i < s->n_hosts; i++)
		assert_string_equal(s->hosts[i], want_hosts[i]);
	/* The s3 endpoints cover every bucket's name; iam and sts cover nobody else's. */
	assert_int_equal(secret_broad_warnings(s, &w), 0);
	assert_int_equal(json_object_array_length(w), 2);
	assert_int_equal(json_get_string(json_object_array_get_idx(w, 0), "host", &host), 0);
	assert_string_equal(host, "s3.us-east-1.amazonaws.com");
	assert_int_equal(json_get_string(json_object_array_get_idx(w, 1), "message", &msg), 0);
	assert_non_null(
	        strstr(msg, "secret AWS: host s3.cn-north-1.amazonaws.com.cn is a shared zone"));
	assert_non_null(strstr(msg, "evil-bucket.s3.cn-north-1.amazonaws.com.cn"));
	assert_non_null(strstr(msg, "BUCKET.s3.REGION.amazonaws.com.cn"));
	assert_null(strstr(msg, "--region")); /* an endpoint already */

	spec = (struct secret_spec){.key = "G",
	                            .hosts = broad,
	                            .n_hosts = 3,
	                            .value = value,
	                            .value_len = sizeof(value) - 1};
	if (secret_new(&spec, install_salt(c->in), &g, &err) < 0)
		fail_msg("generic: %s", err.msg);
	assert_int_equal(secret_broad_warnings(g, &gw), 0);
	assert_int_equal(json_object_array_length(gw), 2);
	assert_int_equal(json_get_string(json_object_array_get_idx(gw, 0), "message", &msg), 0);
	assert_string_equal(msg,
	                    "secret G: host github.io is a shared zone, where anyone can own a "
	                    "name: the real value would go to evil.github.io too; bind the "
	                    "narrowest host instead: OWNER.github.io");
	assert_int_equal(json_get_string(json_object_array_get_idx(gw, 1), "message", &msg), 0);
	assert_string_equal(msg, "secret G: host amazonaws.com covers the shared zone "
	                         "s3.amazonaws.com, where anyone can own a name: the real value "
	                         "would go to evil-bucket.s3.amazonaws.com too; bind the narrowest "
	                         "host instead: BUCKET.s3.REGION.amazonaws.com");
	assert_null(strstr(json_object_to_json_string(gw), "very-secret"));
}

/* While a secret is in memory its value never reaches a log line; afterwards it is released. */
static void test_log_redaction(void **state)
{
	struct ctx *c = *state;
	_cleanup_(secret_set_freep) struct secret_set *s = three(c->in, false);
	char path[] = "/tmp/test-vault-log.XXXXXX", text[4096];
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	log_open("test-vault", LOG_TARGET_STDERR);
	log_set_max_level(LOG_DEBUG);
	assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	log_error("leaking %s and %s", ANTHROPIC_REAL, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
	(void)fflush(stderr);
	assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	(void)close(saved);
	n = pread(fd, text, sizeof(text) - 1, 0);
	assert_true(n > 0);
	text[n] = '\0';
	(void)close(fd);
	(void)unlink(path);
	assert_null(strstr(text, ANTHROPIC_REAL));
	assert_null(strstr(text, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"));
	assert_non_null(strstr(text, "[redacted]"));
}

/* The plaintext parser: strict, and every refusal says why. */
static void test_parse_strict(void **state)
{
	struct ctx *c = *state;
	_cleanup_(secret_set_freep) struct secret_set *s = three(c->in, false), *back = NULL;
	_cleanup_buf_secure_ struct buf *plain = NULL;
	_cleanup_buf_ struct buf *b = NULL;
	struct slate_error err = {0};

	assert_int_equal(vault_serialize(s, &plain), 0);
	assert_int_equal(vault_parse(buf_ptr(plain), buf_len(plain), install_salt(c->in), false,
	                             &back, &err),
	                 0);
	secret_set_free(TAKE_PTR(back));
	/* Trailing byte, truncation, bad magic. */
	b = buf_new(1 << 20);
	assert_int_equal(buf_put(b, buf_ptr(plain), buf_len(plain)), 0);
	assert_int_equal(buf_put_u8(b, 0), 0);
	assert_int_equal(vault_parse(buf_ptr(b), buf_len(b), NULL, false, &back, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(vault_parse(buf_ptr(plain), buf_len(plain) - 1, NULL, false, &back, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(vault_parse("SLVAULT2\0\0\0\0", 12, NULL, false, &back, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(vault_parse("SLVAULT1\0\0\0\0", 12, NULL, false, &back, &err), 0);
	assert_int_equal(back->n, 0);
	secret_set_free(TAKE_PTR(back));

	/* A host that is not normalised, a duplicate key, an unknown kind, an aws secret without
	 * its secret key: each refused. */
	{
		struct {
			const char *key, *kind, *host;
			const char *names[2];
			size_t n_values;
			int dup;
			const char *want;
		} cases[] = {
		        {"K", "generic", "Example.com", {"value"}, 1, 0, "not normalised"},
		        {"K", "generic", "a.example", {"value"}, 1, 1, "appears twice"},
		        {"K", "nosuch", "a.example", {"value"}, 1, 0, "unknown kind"},
		        {"K", "aws", "a.example", {"access-key-id"}, 1, 0, "do not fit"},
		        {"K", "generic", "a.example", {"nope"}, 1, 0, "do not fit"},
		};
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			buf_free(TAKE_PTR(b));
			b = buf_new(1 << 20);
			assert_int_equal(buf_put(b, VAULT_MAGIC, 8), 0);
			assert_int_equal(buf_put_u32(b, 1 + (uint32_t)cases[i].dup), 0);
			for (int k = 0; k <= cases[i].dup; k++) {
				assert_int_equal(buf_put_cstring(b, cases[i].key), 0);
				assert_int_equal(buf_put_cstring(b, cases[i].kind), 0);
				assert_int_equal(buf_put_u8(b, 0), 0);
				assert_int_equal(buf_put_cstring(b, ""), 0);
				assert_int_equal(buf_put_cstring(b, ""), 0);
				assert_int_equal(buf_put_u32(b, 1), 0);
				assert_int_equal(buf_put_cstring(b, cases[i].host), 0);
				assert_int_equal(buf_put_u32(b, (uint32_t)cases[i].n_values), 0);
				for (size_t j = 0; j < cases[i].n_values; j++) {
					assert_int_equal(buf_put_cstring(b, cases[i].names[j]), 0);
					assert_int_equal(buf_put_cstring(b, "value-long-enough"),
					                 0);
				}
			}
			err = (struct slate_error){0};
			assert_int_equal(
			        vault_parse(buf_ptr(b), buf_len(b), NULL, false, &back, &err),
			        SLATE_ERR_INVALID_FORMAT);
			if (!strstr(err.msg, cases[i].want))
				fail_msg("case %zu: '%s', want '%s'", i, err.msg, cases[i].want);
			assert_null(strstr(err.msg, "value-long-enough"));
		}
	}
}

/* install.c: a master key open to others is refused, never used; a damaged one says why. */
static void test_master_key_file(void **state)
{
	struct ctx *c = *state;
	struct install *in = NULL;
	struct slate_error err = {0};
	char buf[16];

	/* Refused, and the error names the file (install_open logs nothing: its caller does). */
	assert_int_equal(fchmodat(c->dfd, "install/master.key", 0644, 0), 0);
	assert_int_equal(install_open(c->dfd, "/nonexistent", &in, &err),
	                 SLATE_ERR_KEY_PERMISSIONS);
	assert_string_equal(slate_error_text(&err),
	                    "master key install/master.key: Secret key file "
	                    "is accessible to group or others");
	assert_null(in);
	assert_int_equal(fchmodat(c->dfd, "install/master.key", 0600, 0), 0);
	assert_int_equal(install_open(c->dfd, "/nonexistent", &in, NULL), 0);
	install_free(TAKE_PTR(in));

	/* A salt open to others likewise. */
	assert_int_equal(fchmodat(c->dfd, "install/salt", 0640, 0), 0);
	assert_int_equal(install_open(c->dfd, "/nonexistent", &in, &err),
	                 SLATE_ERR_KEY_PERMISSIONS);
	assert_non_null(strstr(slate_error_text(&err), "placeholder salt install/salt: "));
	assert_int_equal(fchmodat(c->dfd, "install/salt", 0600, 0), 0);

	/* A truncated key: refused, not padded, and not replaced by a new one. */
	memset(buf, 'k', sizeof(buf));
	assert_int_equal(fs_write_atomic_at(c->dfd, "install/master.key", buf, sizeof(buf), 0600),
	                 0);
	assert_int_equal(install_open(c->dfd, "/nonexistent", &in, NULL), SLATE_ERR_SIZE_MISMATCH);
	assert_null(in);
	{
		struct stat st;
		assert_int_equal(fstatat(c->dfd, "install/master.key", &st, 0), 0);
		assert_int_equal(st.st_size, sizeof(buf));
	}
	/* A key that is a directory. */
	assert_int_equal(unlinkat(c->dfd, "install/master.key", 0), 0);
	assert_int_equal(mkdirat(c->dfd, "install/master.key", 0700), 0);
	assert_true(install_open(c->dfd, "/nonexistent", &in, NULL) < 0);
	assert_null(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_no_plaintext, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_purpose_binding, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_tampered, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_other_install, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_merge, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_set_put_remove, setup, teardown),
	        cmocka_unit_test(test_host_normalize),
	        cmocka_unit_test_setup_teardown(test_secret_new_refusals, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_aws_endpoints_and_warnings, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_log_redaction, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_parse_strict, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_master_key_file, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The secrets a workspace's egress may use, as the egress proxy and the guest provisioning see
 * them: the vault (secrets/vault.c) decrypts them, merged (the user's global secrets, then the
 * workspace's own, which override by key name), into a secret_set. Real values live only in
 * secure buffers (util/buf.h: buf_free_secure wipes them) and are registered with log_forbid()
 * while loaded. Nothing here is ever written where a guest can read it; placeholders are.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/macro.h"

enum secret_kind {
	SECRET_KIND_GENERIC,
	SECRET_KIND_ANTHROPIC,
	SECRET_KIND_OPENAI,
	SECRET_KIND_GITHUB,
	SECRET_KIND_GITLAB,
	SECRET_KIND_AWS,
};

/* One placeholder and the real value it stands for. Most secrets have one ("value"); an AWS
 * secret has "access-key-id", "secret-access-key" and, with temporary credentials,
 * "session-token". */
struct secret_value {
	char *name;
	char *placeholder; /* what the guest sees; not secret */
	struct buf *real;  /* the real value: a secure buffer, never logged or returned */
	bool forbidden;    /* real is registered with log_forbid() (secret_set_free undoes it) */
};

struct secret {
	char *key; /* the name the user gave, e.g. ANTHROPIC_API_KEY */
	enum secret_kind kind;
	bool global; /* from the user's global vault */
	/* Hosts it may be sent to: normalised (lower case, IDNA A-labels, no trailing dot). A
	 * secret matches a host that equals one of these or ends in "." + one of these. */
	char **hosts;
	size_t n_hosts;
	char *env; /* environment variable the guest sees the placeholder in, or NULL */
	char *file; /* guest file the placeholder is written to (e.g. "~/.git-credentials"), or NULL */
	/* Where else than header fields the proxy puts the real value (proxy/subst.h): form and
	 * JSON request bodies, and the value of this query parameter (NULL: never in the URL). */
	bool body;
	char *query;
	/* The real value may go to a bound host over plain http:// too (--allow-plain-http).
	 * Without it the proxy puts it only into requests inside a TLS tunnel whose server
	 * certificate verified for the host; a plain-HTTP request that would carry it is refused. */
	bool plain_http;
	struct secret_value *values;
	size_t n_values;
};

struct secret_set {
	struct secret *v;
	size_t n;
};

void secret_set_free(struct secret_set *s); /* wipes every real value; NULL is fine */
DEFINE_TRIVIAL_CLEANUP_FUNC(struct secret_set *, secret_set_free);

/* "generic", "anthropic", ...; NULL for an unknown kind. */
const char *secret_kind_name(enum secret_kind k);
/* Returns 0, or -EINVAL for a name that is not a kind. */
int secret_kind_from_string(const char *s, enum secret_kind *ret);

/* ---- building secrets (secrets/secret.c) ---- */

#define SECRET_KEY_MAX 64            /* [A-Za-z0-9_.-], not starting with '.' or '-' */
#define SECRET_ENV_MAX 128           /* [A-Za-z_][A-Za-z0-9_]* */
#define SECRET_FILE_MAX 255          /* "~/..." or an absolute guest path */
#define SECRET_VALUE_MIN 8           /* shorter values are refused (too easy to find anywhere) */
#define SECRET_VALUE_MAX 16384       /* bytes of one real value */
#define SECRET_HOSTS_MAX 32          /* hosts one secret may be bound to */
#define SECRET_SET_MAX 64            /* secrets in one vault (log_forbid holds 256 values) */
#define SECRET_QUERY_MAX 64          /* a --query parameter name: [A-Za-z0-9._~[]-] */
#define SECRET_DEFAULT_AWS_ENV "AWS" /* AWS: the prefix of the _ACCESS_KEY_ID... variables */

/* What the user asks to store. value is what came on stdin (one trailing newline already
 * stripped); for SECRET_KIND_AWS it is "ACCESS_KEY_ID SECRET_ACCESS_KEY [SESSION_TOKEN]",
 * separated by white space. env NULL and file NULL: env defaults to key (to "AWS" for aws). */
struct secret_spec {
	const char *key;
	enum secret_kind kind;
	const char *const *hosts; /* as typed; normalised here */
	size_t n_hosts;
	/* aws only: each region x service pair adds SERVICE.REGION.amazonaws.com (.amazonaws.com.cn
	 * for cn- regions) to the hosts (--region, --service); both given, or neither. */
	const char *const *regions;
	size_t n_regions;
	const char *const *services;
	size_t n_services;
	const char *env;
	const char *file;
	const void *value;
	size_t value_len;
	bool global;
	bool body;         /* substituted in form and JSON request bodies too */
	const char *query; /* substituted as the value of this query parameter too, or NULL */
	bool plain_http;   /* may be sent over plain http:// (--allow-plain-http) */
};

/*
 * Validates spec and builds the secret: hosts normalised (host_normalize, util/host.h), the value split by
 * kind, copied into secure buffers, registered with log_forbid(), and each placeholder derived
 * from salt (INSTALL_SALT_LEN bytes; secrets/placeholder.h). On failure err (may be NULL) says
 * what is wrong without ever quoting the value. Returns 0 or a negative error (-EINVAL for
 * a refused spec).
 */
int secret_new(const struct secret_spec *spec, const unsigned char *salt, struct secret **ret,
               struct slate_error *err);
/* For the vault parser: a secret from its stored parts (hosts must be normalised already,
 * names and reals n_values long); salt NULL derives no placeholders. */
int secret_from_parts(const char *key, enum secret_kind kind, const char *const *hosts,
                      size_t n_hosts, const char *env, const char *file, bool global,
                      const char *const *names, const struct buf *const *reals, size_t n_values,
                      const unsigned char *salt, struct secret **ret, struct slate_error *err);
/* Sets where else than header fields s is substituted (body, query: see struct secret_spec),
 * checked: not for aws secrets (re-signed, never substituted), query a valid parameter name.
 * Returns 0, -EINVAL (err says why) or -ENOMEM. */
int secret_set_subst(struct secret *s, bool body, const char *query, struct slate_error *err);
/* Frees what s holds (wiping and unforbidding the real values) and s itself; NULL is fine. */
void secret_free(struct secret *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct secret *, secret_free);
/* Frees what s holds but not s (an element of a secret_set). */
void secret_clear(struct secret *s);

/* Returns a new empty set, or NULL. */
struct secret_set *secret_set_new(void);
/* Index of the secret named key, or -ENOENT. */
int secret_set_find(const struct secret_set *s, const char *key);
/* Moves *sec into s (replacing a secret of the same key; *ret_replaced says so) and frees the
 * emptied shell. Returns 0 or -ENOMEM/-E2BIG (sec untouched then). */
int secret_set_put(struct secret_set *s, struct secret *sec, bool *ret_replaced);
/* Removes the secret named key. Returns 0 or -ENOENT. */
int secret_set_remove(struct secret_set *s, const char *key);
/* The effective set of a workspace: every secret of global, then those of ws, a workspace
 * secret replacing a global one of the same key. Both inputs are consumed (freed), also on
 * failure; either may be NULL. */
int secret_set_merge(struct secret_set *global, struct secret_set *ws, struct secret_set **ret);
/* The secret (never its real values) as JSON: key, kind, scope ("global"/"workspace"), hosts,
 * env, file, body (bool), query (when set), allow_plain_http (bool) and, when with_placeholders, {"placeholders": {name: placeholder}}. */
struct json_object;
int secret_to_json(const struct secret *s, bool with_placeholders, struct json_object **ret);

/*
 * The warnings a secret's hosts call for: one for each host whose binding covers a shared zone
 * (host_shared_zone, util/host.h), where people other than the user own names that would get
 * the real value too. Returns 0 and in *ret a JSON array (empty when every host is narrow) of
 * {"host", "zone", "example", "instead", "message"}, message a sentence naming all of them; or
 * -ENOMEM.
 */
int secret_broad_warnings(const struct secret *s, struct json_object **ret);

/* Checks for the names a secret carries; each returns 0 or -EINVAL. */
int secret_key_check(const char *key);
/* An AWS region ("us-east-1": host_is_region_label, util/host.h) and service code ("sts",
 * "s3", "execute-api": 1-63 of [a-z0-9-], starting with a letter, not ending with '-'). */
int secret_aws_region_check(const char *region);
int secret_aws_service_check(const char *service);
int secret_env_check(const char *env);
int secret_file_check(const char *file);
int secret_query_check(const char *param);

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate ci gitlab config|prepare|run|cleanup: a GitLab Runner custom executor driver
 * (doc/ci-runners.md). Each job gets a fresh workspace named after the runner and the job,
 * created and started by prepare, used by every run and deleted by cleanup. The job token and
 * the CI variables the runner names become secrets of that workspace bound to the GitLab host;
 * run replaces each of their real values in the script gitlab-runner wrote with its placeholder
 * before the script enters the guest, so the guest only ever holds placeholders and slated's
 * proxy puts the real value back on the way to that host only.
 *
 * gitlab-runner's contract: the job's variables arrive as CUSTOM_ENV_<NAME>; a failure of the
 * job's own script exits $BUILD_FAILURE_EXIT_CODE, anything on slate's side
 * $SYSTEM_FAILURE_EXIT_CODE (prepare is then retried; cleanup runs whatever happened).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/client.h"
#include "secrets/secrets.h"
#include "slate.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/time.h"
#include "version.h"
#include "workspace/workspace.h"

#define CI_ENV_PREFIX "CUSTOM_ENV_"
#define CI_TOKEN_VAR "CI_JOB_TOKEN"
/* Shorter values are not protected: replacing every occurrence of "abc" in a script would
 * break it. GitLab itself masks only values of 8 characters or more. */
#define CI_SECRET_MIN 8
#define CI_MAX_SECRETS 32
#define CI_MAX_IMAGE_MAPS 64
#define CI_SCRIPT_MAX (64u << 20)
/* Where run copies each stage's (rewritten) script in the guest. */
#define CI_GUEST_DIR "/tmp/slate-ci"
#define CI_STAGE_MAX 64

/* gitlab-runner always sets both; the defaults are for a driver run by hand. */
static int exit_code(const char *var, int def)
{
	const char *v = getenv(var);
	char *end;
	long n;

	if (!v || !*v)
		return def;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || *end || n < 0 || n > 255)
		return def;
	return (int)n;
}

static int build_failure(void)
{
	return exit_code("BUILD_FAILURE_EXIT_CODE", 1);
}

static int system_failure(void)
{
	return exit_code("SYSTEM_FAILURE_EXIT_CODE", 2);
}

/* Prints "slate: ci gitlab STAGE: ..." and returns the system failure code. */
_printf_(2, 3) static int ci_fail(const char *what, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	slate_vsay(what, fmt, ap);
	va_end(ap);
	return system_failure();
}

static const char *job_var(const char *name)
{
	char var[128];

	(void)snprintf(var, sizeof(var), CI_ENV_PREFIX "%s", name);
	return getenv(var);
}

/*
 * The job's workspace: "ci-" RUNNER "-" JOB, RUNNER being CI_RUNNER_SHORT_TOKEN lowercased with
 * anything but letters and digits dropped (a name is [a-z0-9][a-z0-9-]{0,62}), so that the jobs
 * of several runners on one host never share a name. Returns 0, or -EINVAL without a job id.
 */
static int ci_workspace_name(char *buf, size_t len)
{
	const char *job = job_var("CI_JOB_ID"), *runner = job_var("CI_RUNNER_SHORT_TOKEN");
	char tag[17];
	size_t n = 0;

	if (!job || !*job || strlen(job) > 20 || strspn(job, "0123456789") != strlen(job))
		return -EINVAL;
	for (const char *p = runner; p && *p && n < sizeof(tag) - 1; p++)
		if (isalnum((unsigned char)*p))
			tag[n++] = (char)tolower((unsigned char)*p);
	tag[n] = '\0';
	if (n)
		(void)snprintf(buf, len, "ci-%s-%s", tag, job);
	else
		(void)snprintf(buf, len, "ci-%s", job);
	return workspace_name_check(buf) < 0 ? -EINVAL : 0;
}

static int need_name(const char *what, char *buf, size_t len)
{
	if (ci_workspace_name(buf, len) < 0)
		return ci_fail(what, "no job: " CI_ENV_PREFIX "CI_JOB_ID is unset or not a number "
		                     "(gitlab-runner sets it; by hand, export it)");
	return 0;
}

static int ci_call(const struct slate_ctx *ctx, const char *method, const char *path,
                   struct json_object *body, api_event_fn on_event, void *userdata,
                   struct json_object **ret, struct api_error *err)
{
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	struct api_endpoint ep;
	int r;

	memset(err, 0, sizeof(*err));
	/* --host/SLATE_HOST too: a runner may drive the slated of another host. */
	r = slate_endpoint(ctx, &ep);
	if (r < 0) {
		err->code = r;
		(void)snprintf(err->message, sizeof(err->message), "no daemon to reach");
		return r;
	}
	r = api_client_new_endpoint(&ep, &client);
	if (r < 0) {
		err->code = r;
		(void)snprintf(err->message, sizeof(err->message), "%s", strerror(-r));
		return r;
	}
	return api_client_call(client, method, path, body, on_event, userdata, ret, err);
}

static const char *err_text(const struct api_error *err)
{
	return err->message[0] ? err->message : strerror(err->code < 0 ? -err->code : EIO);
}

static bool gone(const struct api_error *err)
{
	return err->status == 404;
}

/*
 * Removes the workspace name and its secrets, whatever state it is in: powered off, its secrets
 * removed from its vault (so that they are gone even should the delete fail), deleted. A
 * workspace that is not there is fine. Returns 0, or -1 after saying what is left.
 */
static int ci_remove(const struct slate_ctx *ctx, const char *what, const char *name)
{
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL,
	                                  *list = NULL;
	struct json_object *arr;
	char prefix[160];
	struct slate_progress p = {.prefix = prefix};
	struct api_error err;
	char path[512];

	if (!body || json_add_bool(body, "force", true) < 0)
		return ci_fail(what, "out of memory"), -1;
	(void)snprintf(prefix, sizeof(prefix), "slate: %s: ", what);
	p.t0 = time_mono_s();
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/stop", name);
	if (ci_call(ctx, "POST", path, body, slate_print_progress, &p, &reply, &err) < 0) {
		if (gone(&err))
			return 0;
		/* Not fatal yet: the delete below says whether anything stays. */
		fprintf(stderr, "slate: %s: stopping %s: %s\n", what, name, err_text(&err));
	}
	(void)snprintf(path, sizeof(path), "/v1/secrets?workspace=%s", name);
	if (ci_call(ctx, "GET", path, NULL, NULL, NULL, &list, &err) >= 0 &&
	    json_get_array(list, "secrets", &arr) >= 0)
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			struct json_object *s = json_object_array_get_idx(arr, i), *r2 = NULL;
			const char *key = NULL, *scope = NULL;
			if (json_get_string(s, "key", &key) < 0 ||
			    json_get_string(s, "scope", &scope) < 0 || !streq(scope, "workspace") ||
			    secret_key_check(key) < 0)
				continue;
			(void)snprintf(path, sizeof(path), "/v1/secrets/%s?workspace=%s", key,
			               name);
			if (ci_call(ctx, "DELETE", path, NULL, NULL, NULL, &r2, &err) < 0 &&
			    !gone(&err))
				fprintf(stderr, "slate: %s: removing secret %s of %s: %s\n", what,
				        key, name, err_text(&err));
			json_object_put(r2);
		}
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s", name);
	json_object_put(reply);
	reply = NULL;
	if (ci_call(ctx, "DELETE", path, NULL, NULL, NULL, &reply, &err) < 0 && !gone(&err)) {
		ci_fail(what, "deleting workspace %s: %s (remove it with 'slate rm %s --yes')",
		        name, err_text(&err), name);
		return -1;
	}
	return 0;
}

static const char config_usage[] =
        "Usage: slate ci gitlab config [--builds-dir DIR] [--cache-dir DIR]\n"
        "GitLab Runner's config_exec: prints the executor's settings as JSON: builds_dir\n"
        "(default /builds) and cache_dir (default /cache) inside the guest,\n"
        "builds_dir_is_shared false (every job has a VM of its own), the job's workspace as\n"
        "hostname, and the driver's name and version.\n";

static int ci_config(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_BUILDS = 3000, OPT_CACHE };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"builds-dir", required_argument, NULL, OPT_BUILDS},
	        {"cache-dir", required_argument, NULL, OPT_CACHE},
	        {},
	};
	_cleanup_json_ struct json_object *out = json_object_new_object();
	struct json_object *driver = json_object_new_object();
	const char *builds = "/builds", *cache = "/cache", *what = "ci gitlab config";
	char name[WORKSPACE_NAME_MAX + 1];
	int c;

	if (!out || !driver || json_add(out, "driver", driver) < 0)
		return ci_fail(what, "out of memory");
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_BUILDS:
		case OPT_CACHE:
			if (optarg[0] != '/')
				return ci_fail(what, "%s %s: an absolute path in the guest",
				               c == OPT_BUILDS ? "--builds-dir" : "--cache-dir",
				               optarg);
			*(c == OPT_BUILDS ? &builds : &cache) = optarg;
			break;
		case 'h':
		case OPT_HELP:
			fputs(config_usage, stdout);
			return EXIT_SUCCESS;
		default:
			return ci_fail(what, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc)
		return ci_fail(what, "unexpected argument '%s'", argv[optind]);
	if (json_add_string(out, "builds_dir", builds) < 0 ||
	    json_add_string(out, "cache_dir", cache) < 0 ||
	    json_add_bool(out, "builds_dir_is_shared", false) < 0 ||
	    json_add_string(driver, "name", "slate") < 0 ||
	    json_add_string(driver, "version", SLATE_VERSION) < 0 ||
	    (ci_workspace_name(name, sizeof(name)) == 0 &&
	     json_add_string(out, "hostname", name) < 0))
		return ci_fail(what, "out of memory");
	puts(json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN |
	                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
	return EXIT_SUCCESS;
}

static const char prepare_usage[] =
        "Usage: slate ci gitlab prepare [--image-map IMAGE=ID]... [--default-image ID]\n"
        "                               [--secret-var VAR]... [--memory MIB] [--cpus N]\n"
        "                               [--egress allow-all|deny-all] [--allow HOST]...\n"
        "                               [--deny HOST]... [--timeout S]\n"
        "GitLab Runner's prepare_exec: creates and starts the job's fresh workspace\n"
        "ci-RUNNER-JOBID (a leftover of that name, from a prepare that was retried, is\n"
        "deleted first). Progress goes to stderr (the job log).\n"
        "\n"
        "  --image-map IMAGE=ID  the job's image: (CI_JOB_IMAGE) IMAGE runs on the slate image\n"
        "                        ID; IMAGE '*' matches any image. A job image no map names is\n"
        "                        a system failure, saying so.\n"
        "  --default-image ID    for jobs without an image: (default: slated's default image)\n"
        "  --secret-var VAR      the CI variable VAR (a masked one) becomes a secret too;\n"
        "                        the job token CI_JOB_TOKEN always does. Each is bound to\n"
        "                        CI_SERVER_HOST: the guest sees placeholders only\n"
        "  --memory MIB, --cpus N, --egress, --allow HOST, --deny HOST\n"
        "                        as for 'slate create'\n"
        "  --timeout S           give up the start after S seconds (default 180)\n";

struct prepare_opts {
	const char *maps[CI_MAX_IMAGE_MAPS];
	size_t n_maps;
	const char *default_image;
	const char *vars[CI_MAX_SECRETS];
	size_t n_vars;
};

/* The slate image for the job's image, or NULL for slated's default. Returns 0, or -ENOENT. */
static int resolve_image(const struct prepare_opts *o, const char *job_image, const char **ret)
{
	const char *any = NULL;

	if (!job_image || !*job_image) {
		*ret = o->default_image;
		return 0;
	}
	for (size_t i = 0; i < o->n_maps; i++) {
		const char *eq = strrchr(o->maps[i], '=');
		size_t n = (size_t)(eq - o->maps[i]);
		if (n == 1 && o->maps[i][0] == '*')
			any = eq + 1;
		else if (strlen(job_image) == n && strneq(job_image, o->maps[i], n)) {
			*ret = eq + 1;
			return 0;
		}
	}
	*ret = any;
	return any ? 0 : -ENOENT;
}

/* Stores the real value of the CI variable var as a secret of name bound to host. */
static int add_secret(const struct slate_ctx *ctx, const char *what, const char *name,
                      const char *var, const char *value, const char *host)
{
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	struct json_object *hosts = json_object_new_array(), *v, *warnings;
	struct api_error err;
	int r;

	v = json_object_new_string(value);
	if (!body || !hosts || json_add(body, "hosts", hosts) < 0 || !v ||
	    json_object_array_add(hosts, json_object_new_string(host)) < 0 ||
	    json_add_string(body, "workspace", name) < 0 || json_add_string(body, "key", var) < 0 ||
	    json_add_string(body, "kind", "generic") < 0 ||
	    json_add(body, "value", json_object_get(v)) < 0) {
		json_object_put(v);
		return ci_fail(what, "out of memory"), -ENOMEM;
	}
	r = ci_call(ctx, "POST", "/v1/secrets", body, NULL, NULL, &reply, &err);
	/* json-c keeps its own copy of the value: wipe it. */
	sodium_memzero((void *)json_object_get_string(v), (size_t)json_object_get_string_len(v));
	json_object_put(v);
	if (r < 0)
		return ci_fail(what, "storing %s as a secret of %s: %s", var, name, err_text(&err)),
		       r;
	if (json_get_array(reply, "warnings", &warnings) >= 0)
		for (size_t i = 0; i < json_object_array_length(warnings); i++) {
			const char *m = NULL;
			if (json_get_string(json_object_array_get_idx(warnings, i), "message",
			                    &m) >= 0)
				fprintf(stderr, "slate: %s: warning: %s\n", what, m);
		}
	fprintf(stderr, "slate: %s: %s is a secret bound to %s: the guest sees a placeholder\n",
	        what, var, host);
	return 0;
}

static int ci_prepare(struct slate_ctx *ctx, int argc, char **argv)
{
	enum {
		OPT_MAP = 3000,
		OPT_DEFAULT,
		OPT_VAR,
		OPT_MEMORY,
		OPT_CPUS,
		OPT_EGRESS,
		OPT_ALLOW,
		OPT_DENY,
		OPT_TIMEOUT
	};
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"image-map", required_argument, NULL, OPT_MAP},
	        {"default-image", required_argument, NULL, OPT_DEFAULT},
	        {"secret-var", required_argument, NULL, OPT_VAR},
	        {"memory", required_argument, NULL, OPT_MEMORY},
	        {"cpus", required_argument, NULL, OPT_CPUS},
	        {"egress", required_argument, NULL, OPT_EGRESS},
	        {"allow", required_argument, NULL, OPT_ALLOW},
	        {"deny", required_argument, NULL, OPT_DENY},
	        {"timeout", required_argument, NULL, OPT_TIMEOUT},
	        {},
	};
	const char *what = "ci gitlab prepare", *image = NULL, *host, *job_image;
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL,
	                                  *start = json_object_new_object();
	_cleanup_json_ struct json_object *egress = json_object_new_object();
	struct prepare_opts o = {0};
	const char *names[CI_MAX_SECRETS + 1];
	size_t n_names = 0;
	char name[WORKSPACE_NAME_MAX + 1], path[256], *end;
	char prefix[160];
	struct slate_progress p = {.prefix = prefix};
	struct api_error err;
	int opt_index = 0, c, r;
	unsigned long v;
	uint64_t u;

	if (!body || !start || !egress)
		return ci_fail(what, "out of memory");
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, &opt_index)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_MAP:
			if (!strchr(optarg, '=') || optarg[0] == '=' || !strrchr(optarg, '=')[1] ||
			    o.n_maps == CI_MAX_IMAGE_MAPS)
				return ci_fail(what, "--image-map %s: IMAGE=ID (at most %d)",
				               optarg, CI_MAX_IMAGE_MAPS);
			o.maps[o.n_maps++] = optarg;
			break;
		case OPT_DEFAULT:
			o.default_image = optarg;
			break;
		case OPT_VAR:
			if (secret_key_check(optarg) < 0 || secret_env_check(optarg) < 0 ||
			    streq(optarg, CI_TOKEN_VAR) || o.n_vars == CI_MAX_SECRETS)
				return ci_fail(what,
				               "--secret-var %s: a variable name other than %s (at "
				               "most %d)",
				               optarg, CI_TOKEN_VAR, CI_MAX_SECRETS);
			o.vars[o.n_vars++] = optarg;
			break;
		case OPT_MEMORY:
			if (slate_parse_memory(optarg, &u) < 0)
				return ci_fail(what, "--memory %s: MiB or a size like 4G", optarg);
			(void)json_add_int64(body, "memory_mib", (int64_t)u);
			break;
		case OPT_CPUS:
			if (slate_parse_cpus(optarg, &u) < 0)
				return ci_fail(what, "--cpus %s: a number from 1 to 256", optarg);
			(void)json_add_int64(body, "cpus", (int64_t)u);
			break;
		case OPT_TIMEOUT:
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || v == 0 || v > 3600)
				return ci_fail(what, "--timeout %s: out of range", optarg);
			(void)json_add_int64(start, "timeout", (int64_t)v);
			break;
		case OPT_EGRESS:
		case OPT_ALLOW:
		case OPT_DENY:
			r = slate_egress_option(ctx, longopts[opt_index].name, optarg, egress);
			if (r != 0)
				return system_failure();
			break;
		case 'h':
		case OPT_HELP:
			fputs(prepare_usage, stdout);
			return EXIT_SUCCESS;
		default:
			return ci_fail(what, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc)
		return ci_fail(what, "unexpected argument '%s'", argv[optind]);
	if (need_name(what, name, sizeof(name)) != 0)
		return system_failure();

	job_image = job_var("CI_JOB_IMAGE");
	if (resolve_image(&o, job_image, &image) < 0)
		return ci_fail(what,
		               "the job's image '%s' has no slate image: map it with --image-map "
		               "'%s=ID' (or '*=ID') in prepare_args of the runner's config.toml",
		               job_image, job_image);

	/* What becomes a secret: checked before anything is made. */
	if (job_var(CI_TOKEN_VAR))
		names[n_names++] = CI_TOKEN_VAR;
	for (size_t i = 0; i < o.n_vars; i++) {
		if (!job_var(o.vars[i])) {
			fprintf(stderr,
			        "slate: %s: the job has no variable %s: nothing to protect\n", what,
			        o.vars[i]);
			continue;
		}
		names[n_names++] = o.vars[i];
	}
	for (size_t i = 0; i < n_names; i++) {
		size_t len = strlen(job_var(names[i]));
		if (len < CI_SECRET_MIN || len > SECRET_VALUE_MAX)
			return ci_fail(
			        what,
			        "%s is %zu bytes long: a secret is %d to %d bytes (a shorter "
			        "value cannot be told apart in the job's scripts)",
			        names[i], len, CI_SECRET_MIN, SECRET_VALUE_MAX);
	}
	host = job_var("CI_SERVER_HOST");
	if (n_names && (!host || !*host))
		return ci_fail(what, CI_ENV_PREFIX "CI_SERVER_HOST is unset: no host to bind the "
		                                   "job token to");

	/* A retried prepare finds what the last try made: start afresh. */
	if (ci_remove(ctx, what, name) < 0)
		return system_failure();

	if (json_add_string(body, "name", name) < 0 ||
	    (image && json_add_string(body, "image", image) < 0) ||
	    (json_object_object_length(egress) > 0 &&
	     json_add(body, "egress", json_object_get(egress)) < 0))
		return ci_fail(what, "out of memory");
	fprintf(stderr, "slate: %s: creating workspace %s from image %s (job image %s)\n", what,
	        name, image ? image : "(slated's default)",
	        job_image && *job_image ? job_image : "(none)");
	if (ci_call(ctx, "POST", "/v1/workspaces", body, NULL, NULL, &reply, &err) < 0)
		return ci_fail(what, "creating workspace %s: %s", name, err_text(&err));

	for (size_t i = 0; i < n_names; i++)
		if (add_secret(ctx, what, name, names[i], job_var(names[i]), host) < 0)
			goto undo;

	(void)snprintf(prefix, sizeof(prefix), "slate: %s: ", what);
	p.t0 = time_mono_s();
	fprintf(stderr, "slate: %s: starting %s\n", what, name);
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/start", name);
	json_object_put(reply);
	reply = NULL;
	if (ci_call(ctx, "POST", path, start, slate_print_progress, &p, &reply, &err) < 0) {
		ci_fail(what, "starting workspace %s: %s", name, err_text(&err));
		goto undo;
	}
	fprintf(stderr, "slate: %s: workspace %s is running\n", what, name);
	return EXIT_SUCCESS;
undo:
	/* Nothing half-made stays: cleanup would remove it too, but a retry starts clean. */
	(void)ci_remove(ctx, what, name);
	return system_failure();
}

/*
 * Replaces every occurrence of from (flen bytes, flen > 0) in *text (*len bytes) with to.
 * The old text is wiped and freed. Returns the number replaced, or -ENOMEM.
 */
static ssize_t replace_all(char **text, size_t *len, const char *from, size_t flen, const char *to)
{
	size_t tlen = strlen(to), n = 0, out_len, o = 0;
	char *s = *text, *out;

	for (char *p = memmem(s, *len, from, flen); p;
	     p = memmem(p + flen, *len - (size_t)(p + flen - s), from, flen))
		n++;
	if (n == 0)
		return 0;
	out_len = *len - n * flen + n * tlen;
	out = malloc(out_len + 1);
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < *len;) {
		if (i + flen <= *len && memcmp(s + i, from, flen) == 0) {
			memcpy(out + o, to, tlen);
			o += tlen;
			i += flen;
		} else
			out[o++] = s[i++];
	}
	out[o] = '\0';
	sodium_memzero(s, *len);
	free(s);
	*text = out;
	*len = out_len;
	return (ssize_t)n;
}

/* value percent-encoded as a URL's userinfo carries it (RFC 3986 unreserved kept). */
static char *percent_encode(const char *value)
{
	size_t n = strlen(value), o = 0;
	char *out = malloc(n * 3 + 1);

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)value[i];
		if (isalnum(ch) || strchr("-._~", ch))
			out[o++] = (char)ch;
		else
			o += (size_t)sprintf(out + o, "%%%02X", ch);
	}
	out[o] = '\0';
	return out;
}

/*
 * Puts each workspace secret's placeholder where the script holds its real value (the job's
 * CUSTOM_ENV_<KEY>): literally, and percent-encoded as in CI_REPOSITORY_URL. Returns the number
 * of replacements, or < 0 after the message.
 */
static ssize_t rewrite_script(const struct slate_ctx *ctx, const char *what, const char *name,
                              char **text, size_t *len)
{
	_cleanup_json_ struct json_object *list = NULL;
	struct json_object *arr;
	struct api_error err;
	char path[256];
	ssize_t total = 0;

	(void)snprintf(path, sizeof(path), "/v1/secrets?workspace=%s", name);
	if (ci_call(ctx, "GET", path, NULL, NULL, NULL, &list, &err) < 0)
		return ci_fail(what, "the secrets of workspace %s: %s", name, err_text(&err)), -EIO;
	if (json_get_array(list, "secrets", &arr) < 0)
		return ci_fail(what, "slated's reply has no secret list"), -EPROTO;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *s = json_object_array_get_idx(arr, i), *ph;
		const char *key, *scope, *placeholder, *real;
		_cleanup_free_ char *real_pe = NULL;
		ssize_t k;

		/* The workspace's own secrets only: a global one of the same name is not the
		 * value this job's variable holds. */
		if (json_get_string(s, "key", &key) < 0 ||
		    json_get_string(s, "scope", &scope) < 0 || !streq(scope, "workspace") ||
		    json_get_object(s, "placeholders", &ph) < 0 ||
		    json_get_string(ph, "value", &placeholder) < 0)
			continue;
		real = job_var(key);
		if (!real || strlen(real) < CI_SECRET_MIN)
			continue;
		k = replace_all(text, len, real, strlen(real), placeholder);
		if (k >= 0) {
			total += k;
			real_pe = percent_encode(real);
			k = !real_pe ? -ENOMEM
			    : streq(real_pe, real)
			            ? 0
			            : replace_all(text, len, real_pe, strlen(real_pe), placeholder);
		}
		if (k < 0)
			return ci_fail(what, "out of memory"), -ENOMEM;
		total += k;
		if (real_pe)
			sodium_memzero(real_pe, strlen(real_pe));
	}
	return total;
}

/* Reads the script gitlab-runner wrote. Returns 0, or < 0 after the message. */
static int read_script(const char *what, const char *file, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = open(file, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf;
	size_t n = 0;

	if (fd < 0 || fstat(fd, &st) < 0)
		return ci_fail(what, "%s: %s", file, strerror(errno)), -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > CI_SCRIPT_MAX)
		return ci_fail(what, "%s: not a regular file of at most %u bytes", file,
		               CI_SCRIPT_MAX),
		       -EINVAL;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return ci_fail(what, "out of memory"), -ENOMEM;
	while (n < (size_t)st.st_size) {
		ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			int e = k < 0 ? errno : EIO;
			free(buf);
			return ci_fail(what, "reading %s: %s", file, strerror(e)), -e;
		}
		n += (size_t)k;
	}
	buf[n] = '\0';
	*ret = buf;
	*ret_len = n;
	return 0;
}

static const char run_usage[] =
        "Usage: slate ci gitlab run [--user USER] SCRIPT STAGE\n"
        "GitLab Runner's run_exec: runs the script gitlab-runner wrote for STAGE with bash in\n"
        "the job's workspace, as USER (root, the default, or the workspace user), its output\n"
        "streamed as it comes. First every real value of the workspace's secrets in SCRIPT is\n"
        "replaced with its placeholder, so that the copy the guest gets (" CI_GUEST_DIR
        "/STAGE.sh)\n"
        "holds placeholders only. The script's failure exits $BUILD_FAILURE_EXIT_CODE; one of\n"
        "slate's (slated unreachable, the workspace gone, the session lost) exits\n"
        "$SYSTEM_FAILURE_EXIT_CODE. SIGTERM is passed on to the script and ends the driver "
        "(143).\n";

static int ci_run(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_USER = 3000 };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"user", required_argument, NULL, OPT_USER},
	        {},
	};
	const char *what = "ci gitlab run", *user = "root";
	char name[WORKSPACE_NAME_MAX + 1], stage[CI_STAGE_MAX + 1], guest[128];
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int mfd = -1;
	size_t len = 0;
	ssize_t replaced;
	bool exited = false;
	int c, status;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_USER:
			user = optarg;
			break;
		case 'h':
		case OPT_HELP:
			fputs(run_usage, stdout);
			return EXIT_SUCCESS;
		default:
			return ci_fail(what, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 2)
		return ci_fail(what, "give SCRIPT and STAGE (gitlab-runner appends both)");
	if (need_name(what, name, sizeof(name)) != 0)
		return system_failure();
	/* The stage names a file in the guest: step_* names come from the job's YAML. */
	(void)snprintf(stage, sizeof(stage), "%s", argv[optind + 1]);
	for (char *q = stage; *q; q++)
		if (!isalnum((unsigned char)*q) && *q != '_' && *q != '-')
			*q = '_';
	if (!stage[0])
		(void)snprintf(stage, sizeof(stage), "script");
	(void)snprintf(guest, sizeof(guest), CI_GUEST_DIR "/%s.sh", stage);

	if (read_script(what, argv[optind], &text, &len) < 0)
		return system_failure();
	replaced = rewrite_script(ctx, what, name, &text, &len);
	if (replaced < 0) {
		sodium_memzero(text, len);
		return system_failure();
	}
	/* The rewritten script, for the copy session to forward as its stdin. */
	mfd = memfd_create("slate-ci-script", MFD_CLOEXEC);
	if (mfd < 0 || fs_write_all(mfd, text, len) < 0 || lseek(mfd, 0, SEEK_SET) < 0) {
		sodium_memzero(text, len);
		return ci_fail(what, "a memory file for the script: %s", strerror(errno));
	}
	sodium_memzero(text, len);

	{
		/* argv is not const in struct exec_opts; nothing writes to it. */
		char *copy_argv[] = {
		        (char *)"sh",
		        (char *)"-c",
		        (char *)"umask 077 && mkdir -p " CI_GUEST_DIR " && cat >\"$1\"",
		        (char *)"sh",
		        guest,
		        NULL};
		struct exec_opts o = {
		        .interactive = true, .user = user, .argv = copy_argv, .argc = 5};
		status = slate_exec_fds(ctx, what, name, &o, mfd, STDOUT_FILENO, STDERR_FILENO,
		                        &exited);
		if (!exited || status != 0)
			return ci_fail(what, "copying the %s script into workspace %s failed%s",
			               stage, name, exited ? " in the guest" : "");
	}
	{
		char *run_argv[] = {(char *)"bash", guest, NULL};
		struct exec_opts o = {.user = user, .argv = run_argv, .argc = 2};
		exited = false;
		status = slate_exec_fds(ctx, what, name, &o, STDIN_FILENO, STDOUT_FILENO,
		                        STDERR_FILENO, &exited);
	}
	/* SIGTERM or SIGHUP to the driver (a cancelled or timed-out job): passed on, and we
	 * left as the shell would (128+N); the runner's cleanup_exec comes next. */
	if (!exited &&
	    (status == 128 + SIGTERM || status == 128 + SIGHUP || status == 128 + SIGINT))
		return status;
	if (!exited)
		return ci_fail(what, "the %s stage did not end by itself in workspace %s", stage,
		               name);
	return status == 0 ? EXIT_SUCCESS : build_failure();
}

static const char cleanup_usage[] =
        "Usage: slate ci gitlab cleanup\n"
        "GitLab Runner's cleanup_exec: powers the job's workspace off and deletes it with its\n"
        "secrets, whatever state it is in; a workspace that is not there is fine.\n";

static int ci_cleanup(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	const char *what = "ci gitlab cleanup";
	char name[WORKSPACE_NAME_MAX + 1];
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == 'h' || c == OPT_HELP) {
			fputs(cleanup_usage, stdout);
			return EXIT_SUCCESS;
		}
		return ci_fail(what, "unknown option '%s'", argv[optind - 1]);
	}
	if (optind != argc)
		return ci_fail(what, "unexpected argument '%s'", argv[optind]);
	if (need_name(what, name, sizeof(name)) != 0)
		return system_failure();
	if (ci_remove(ctx, what, name) < 0)
		return system_failure();
	fprintf(stderr, "slate: %s: workspace %s is gone\n", what, name);
	return EXIT_SUCCESS;
}

/* Every stage's usage line with its options: bash completion reads them from `slate ci --help`. */
static const char gitlab_usage[] =
        "Usage: slate ci gitlab config [--builds-dir DIR] [--cache-dir DIR]\n"
        "       slate ci gitlab prepare [--image-map IMAGE=ID]... [--default-image ID]\n"
        "                               [--secret-var VAR]... [--memory MIB] [--cpus N]\n"
        "                               [--egress allow-all|deny-all] [--allow HOST]...\n"
        "                               [--deny HOST]... [--timeout S]\n"
        "       slate ci gitlab run [--user USER] SCRIPT STAGE\n"
        "       slate ci gitlab cleanup\n"
        "\n"
        "A GitLab Runner custom executor driver: one fresh workspace per job, the job token\n"
        "and named CI variables as secrets the guest sees only as placeholders. In the\n"
        "runner's config.toml: config_exec = \"slate\", config_args = [\"ci\", \"gitlab\",\n"
        "\"config\"], and so on (doc/ci-runners.md, contrib/gitlab-runner/config.toml.example).\n"
        "'slate ci gitlab STAGE --help' says what each stage does.\n";

static int ci_gitlab(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct slate_subcommand subs[] = {
	        {"config", ci_config},
	        {"prepare", ci_prepare},
	        {"run", ci_run},
	        {"cleanup", ci_cleanup},
	};

	ctx->command = "ci gitlab";
	return slate_dispatch(ctx, gitlab_usage, subs, ELEMENTSOF(subs), argc, argv);
}

int cmd_ci(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct slate_subcommand subs[] = {
	        {"gitlab", ci_gitlab},
	};

	return slate_dispatch(ctx, gitlab_usage, subs, ELEMENTSOF(subs), argc, argv);
}

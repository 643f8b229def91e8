/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate secret set|ls|rm: credentials the guest sees only as placeholders. */
#include <errno.h>
#include <pwd.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "secrets/secrets.h"
#include "slate.h"
#include "util/json.h"
#include "workspace/workspace.h"

/* What stdin may carry: the largest aws triple (a long session token) with room to spare. */
#define VALUE_READ_MAX (3u * SECRET_VALUE_MAX + 16u)

static const char usage_text[] =
        "Usage: slate secret set (NAME|--global) KEY --host HOST[,HOST...] [--kind KIND]\n"
        "                        [--env VAR] [--file GUEST_PATH] [--body] [--query PARAM]\n"
        "                        [--allow-plain-http]\n"
        "       slate secret set (NAME|--global) KEY --kind aws --region REGION[,REGION...]\n"
        "                        --service SERVICE[,SERVICE...] [--host HOST[,HOST...]] ...\n"
        "       slate secret ls [NAME]\n"
        "       slate secret rm (NAME|--global) KEY\n"
        "\n"
        "Credentials the guest only ever sees as placeholders; slated puts the real value in\n"
        "on the way out, and only for the hosts the secret is bound to (and their subdomains).\n"
        "\n"
        "set reads the value from standard input (never from the command line; one trailing\n"
        "newline is dropped) and prints the placeholder(s) the guest will see. For --kind aws\n"
        "the value is \"ACCESS_KEY_ID SECRET_ACCESS_KEY [SESSION_TOKEN]\", separated by white\n"
        "space. KIND is anthropic, openai, github, gitlab, aws or generic (the default).\n"
        "--env VAR names the variable the guest sees the placeholder in (default: KEY, or for\n"
        "aws the prefix AWS: AWS_ACCESS_KEY_ID...); --file puts it in a guest file (~/.env,\n"
        "~/.git-credentials, ~/.config/gh/hosts.yml, ~/.aws/credentials are written in their\n"
        "own format; any other file gets the bare placeholder). --global stores it for all of\n"
        "your workspaces; a workspace's own secret of the same KEY overrides it.\n"
        "\n"
        "For --kind aws, --region and --service (repeatable, comma-separated) bind the secret\n"
        "to SERVICE.REGION.amazonaws.com for each pair (amazonaws.com.cn in cn- regions), in\n"
        "addition to any --host: --region eu-west-1 --service sts,dynamodb.\n"
        "\n"
        "A host that also covers names other people can own (amazonaws.com, s3.amazonaws.com,\n"
        "us-east-1.amazonaws.com, github.io, cloudfront.net, a top-level domain...) gets a\n"
        "warning on standard error naming such a name and the narrowest host to bind instead\n"
        "(BUCKET.s3.REGION.amazonaws.com, OWNER.github.io); the secret is stored all the same.\n"
        "\n"
        "The real value goes in request header fields only, unless asked: --body also puts it\n"
        "in form (application/x-www-form-urlencoded) and JSON request bodies, encoded for each\n"
        "(bodies up to 256 KiB, not compressed; Content-Length fixed); --query PARAM also puts\n"
        "it as the value of the query parameter PARAM (?PARAM=placeholder), percent-encoded.\n"
        "Nowhere else in a URL, and never towards a host the secret is not bound to (that\n"
        "is a leak: the request is refused and the workspace marked compromised). Not for aws.\n"
        "\n"
        "The real value goes only over HTTPS (a CONNECT tunnel whose server certificate\n"
        "verified for the bound host). A plain http:// request that would carry it is refused\n"
        "(403, naming the secret) with the placeholder left in place, unless the secret was set\n"
        "with --allow-plain-http (anyone on the path then sees the real value).\n"
        "\n"
        "ls lists your global secrets, or with NAME what that workspace uses (global and its\n"
        "own): names, kinds, hosts, where the guest sees them, placeholders. Never values.\n";

static int call(struct slate_ctx *ctx, const char *what, const char *method, const char *path,
                struct json_object *body, struct json_object **ret)
{
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	struct api_error err;

	if (slate_client(ctx, &client) < 0)
		return -EXIT_FAILURE;
	if (api_client_call(client, method, path, body, NULL, NULL, ret, &err) < 0)
		return -slate_api_fail(what, &err);
	return 0;
}

/* Reads the value from stdin into secure memory (sodium_malloc: guarded, not in core dumps).
 * On a terminal, asks for it without echo. Returns its length, or prints and returns < 0. */
/*
 * --file names a path in the guest, but an unquoted ~ is expanded by the host's shell first:
 * `--file ~/.git-credentials` arrives as /root/.git-credentials (or /home/alice/...). A path under
 * the caller's host home gets a warning naming the likely intent; one the workspace user could
 * not read in the guest (anything under /root, which is 0700 there) is refused. Returns 0, or
 * prints and returns -EINVAL.
 */
static int check_file_intent(const struct slate_ctx *ctx, const char *file)
{
	const char *home = getenv("HOME");
	const char *rest = NULL;
	struct passwd *pw;
	size_t n;

	if ((!home || home[0] != '/') && (pw = getpwuid(getuid())))
		home = pw->pw_dir;
	n = home ? strlen(home) : 0;
	while (n > 1 && home[n - 1] == '/')
		n--;
	if (n > 1 && strneq(file, home, n) && file[n] == '/')
		rest = file + n + 1;
	if (strneq(file, "/root/", 6)) {
		if (rest)
			return slate_usage_error(ctx,
			                         "secret set: --file %s: your shell expanded '~' "
			                         "to your host "
			                         "home; in the guest that is under /root, which "
			                         "the workspace "
			                         "user cannot read. Quote it: --file '~/%s'",
			                         file, rest),
			       -EINVAL;
		return slate_usage_error(
		               ctx,
		               "secret set: --file %s: the workspace user cannot read files "
		               "under /root in the guest; use a path under '~/' (quoted)",
		               file),
		       -EINVAL;
	}
	if (rest)
		fprintf(stderr,
		        "slate: secret set: warning: --file %s is under your host home %.*s: if "
		        "you "
		        "meant the workspace user's home in the guest, quote it: --file '~/%s'\n",
		        file, (int)n, home, rest);
	return 0;
}

static ssize_t read_value(const char *key, unsigned char **ret)
{
	unsigned char *v = sodium_init() < 0 ? NULL : sodium_malloc(VALUE_READ_MAX + 1);
	struct termios saved, quiet;
	bool tty = isatty(STDIN_FILENO);
	size_t n = 0;

	if (!v)
		return slate_fail("secret set", "out of memory"), -ENOMEM;
	if (tty) {
		fprintf(stderr, "value of %s (not echoed): ", key);
		if (tcgetattr(STDIN_FILENO, &saved) == 0) {
			quiet = saved;
			quiet.c_lflag &= ~(tcflag_t)ECHO;
			(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
		} else
			tty = false;
	}
	for (;;) {
		ssize_t k = read(STDIN_FILENO, v + n, VALUE_READ_MAX + 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int e = errno;
			sodium_free(v);
			return slate_fail("secret set", "reading the value from standard input: %s",
			                  strerror(e)),
			       -e;
		}
		n += (size_t)k;
		if (k == 0 || n > VALUE_READ_MAX ||
		    (isatty(STDIN_FILENO) && n > 0 && v[n - 1] == '\n'))
			break;
	}
	if (isatty(STDIN_FILENO)) {
		if (tty)
			(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
		fputc('\n', stderr);
	}
	if (n > VALUE_READ_MAX) {
		sodium_free(v);
		return slate_fail("secret set",
		                  "the value on standard input is longer than %u bytes",
		                  VALUE_READ_MAX),
		       -EFBIG;
	}
	/* One trailing newline (as echo and here-strings add) is not part of the value. */
	if (n > 0 && v[n - 1] == '\n') {
		n--;
		if (n > 0 && v[n - 1] == '\r')
			n--;
	}
	if (n == 0) {
		sodium_free(v);
		return slate_fail("secret set", "the value on standard input is empty"), -EINVAL;
	}
	v[n] = '\0';
	*ret = v;
	return (ssize_t)n;
}

/* Wipes a JSON string's bytes in place (json-c keeps its own copy of the value). */
static void wipe_json_string(struct json_object *s)
{
	if (s)
		sodium_memzero((void *)json_object_get_string(s),
		               (size_t)json_object_get_string_len(s));
}

/* Appends each of the comma-separated names in arg to the JSON array list. */
static int add_list(struct json_object *list, const char *arg)
{
	_cleanup_free_ char *copy = strdup(arg);
	char *save = NULL;

	if (!copy)
		return -ENOMEM;
	for (char *h = strtok_r(copy, ",", &save); h; h = strtok_r(NULL, ",", &save))
		if (json_object_array_add(list, json_object_new_string(h)) < 0)
			return -ENOMEM;
	return 0;
}

/* Checks each name of list with check; prints a usage error naming option and what it wants
 * and returns -EINVAL for the first that fails. */
static int check_list(struct slate_ctx *ctx, struct json_object *list, int (*check)(const char *),
                      const char *option, const char *want)
{
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		const char *v = json_object_get_string(json_object_array_get_idx(list, i));
		if (check(v) < 0)
			return slate_usage_error(ctx, "secret set: %s %s: %s", option, v, want),
			       -EINVAL;
	}
	return 0;
}

/* Says, on stderr, each warning of slated's reply (a binding that covers names other people
 * own: doc/secrets.md "Broad bindings"); the secret is stored all the same. */
static void print_warnings(struct json_object *reply)
{
	struct json_object *warnings;

	if (json_get_array(reply, "warnings", &warnings) < 0)
		return;
	for (size_t i = 0; i < json_object_array_length(warnings); i++) {
		const char *m = NULL;
		if (json_get_string(json_object_array_get_idx(warnings, i), "message", &m) >= 0)
			fprintf(stderr, "slate: secret set: warning: %s\n", m);
	}
}

static void print_placeholders(struct json_object *secret, bool named)
{
	struct json_object *ph;

	if (json_get_object(secret, "placeholders", &ph) < 0)
		return;
	json_object_object_foreach (ph, name, v) {
		if (named)
			printf("%s %s\n", name, json_object_get_string(v));
		else
			printf("%s\n", json_object_get_string(v));
	}
}

static int secret_set_cmd(struct slate_ctx *ctx, int argc, char **argv)
{
	enum {
		OPT_GLOBAL = 1,
		OPT_HOST,
		OPT_KIND,
		OPT_ENV,
		OPT_FILE,
		OPT_BODY,
		OPT_QUERY,
		OPT_PLAIN_HTTP,
		OPT_REGION,
		OPT_SERVICE
	};
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"global", no_argument, NULL, OPT_GLOBAL},
	        {"host", required_argument, NULL, OPT_HOST},
	        {"kind", required_argument, NULL, OPT_KIND},
	        {"env", required_argument, NULL, OPT_ENV},
	        {"file", required_argument, NULL, OPT_FILE},
	        {"body", no_argument, NULL, OPT_BODY},
	        {"query", required_argument, NULL, OPT_QUERY},
	        {"allow-plain-http", no_argument, NULL, OPT_PLAIN_HTTP},
	        {"region", required_argument, NULL, OPT_REGION},
	        {"service", required_argument, NULL, OPT_SERVICE},
	        {},
	};
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	struct json_object *hosts = json_object_new_array(), *regions = json_object_new_array(),
	                   *services = json_object_new_array(), *value;
	const char *key, *kind = "generic", *env = NULL, *file = NULL, *ws = NULL, *query = NULL;
	unsigned char *v = NULL;
	enum secret_kind k;
	bool global = false, in_body = false, plain_http = false;
	ssize_t n;
	int c, r;

	if (!body || !hosts || json_add(body, "hosts", hosts) < 0 || !regions ||
	    json_add(body, "regions", regions) < 0 || !services ||
	    json_add(body, "services", services) < 0)
		return slate_fail("secret set", "out of memory");
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_GLOBAL:
			global = true;
			break;
		case OPT_HOST:
		case OPT_REGION:
		case OPT_SERVICE:
			if (add_list(c == OPT_HOST     ? hosts
			             : c == OPT_REGION ? regions
			                               : services,
			             optarg) < 0)
				return slate_fail("secret set", "out of memory");
			break;
		case OPT_KIND:
			kind = optarg;
			break;
		case OPT_ENV:
			env = optarg;
			break;
		case OPT_FILE:
			file = optarg;
			break;
		case OPT_BODY:
			in_body = true;
			break;
		case OPT_QUERY:
			query = optarg;
			break;
		case OPT_PLAIN_HTTP:
			plain_http = true;
			break;
		default:
			return slate_help_or_unknown(ctx, "secret set", c, usage_text, argv);
		}
	}
	if (global ? optind != argc - 1 : optind != argc - 2)
		return slate_usage_error(ctx, "secret set: give (NAME|--global) KEY");
	if (!global) {
		ws = argv[optind++];
		if (workspace_name_check(ws) < 0)
			return slate_usage_error(ctx, "secret set: invalid name '%s': %s", ws,
			                         WORKSPACE_NAME_RULE);
	}
	key = argv[optind];
	if (secret_key_check(key) < 0)
		return slate_usage_error(ctx,
		                         "secret set: invalid secret name '%s': 1 to %d of A-Z a-z "
		                         "0-9 _ . -, not starting with '.' or '-'",
		                         key, SECRET_KEY_MAX);
	if (secret_kind_from_string(kind, &k) < 0)
		return slate_usage_error(
		        ctx,
		        "secret set: --kind %s: anthropic, openai, github, gitlab, "
		        "aws or generic",
		        kind);
	if ((json_object_array_length(regions) > 0 || json_object_array_length(services) > 0) &&
	    k != SECRET_KIND_AWS)
		return slate_usage_error(ctx, "secret set: --region and --service name AWS "
		                              "endpoints: for --kind aws only (give the hosts with "
		                              "--host)");
	if (check_list(ctx, regions, secret_aws_region_check, "--region",
	               "not an AWS region code (such as us-east-1: lowercase letters, digits and "
	               "'-', ending with a digit)") < 0 ||
	    check_list(ctx, services, secret_aws_service_check, "--service",
	               "not an AWS service code (such as sts, s3 or dynamodb: lowercase letters, "
	               "digits and '-')") < 0)
		return EXIT_USAGE;
	if (!json_object_array_length(regions) != !json_object_array_length(services))
		return slate_usage_error(ctx, "secret set: give both --region and --service (each "
		                              "pair binds SERVICE.REGION.amazonaws.com)");
	if (json_object_array_length(hosts) == 0 && json_object_array_length(regions) == 0)
		return slate_usage_error(
		        ctx, k == SECRET_KIND_AWS ? "secret set: bind the secret to a host with "
		                                    "--host, or name its AWS endpoints with "
		                                    "--region REGION --service SERVICE"
		                                  : "secret set: bind the secret to a host with "
		                                    "--host");
	if (env && secret_env_check(env) < 0)
		return slate_usage_error(ctx, "secret set: --env %s: not a variable name", env);
	if (file && secret_file_check(file) < 0)
		return slate_usage_error(ctx,
		                         "secret set: --file %s: an absolute guest path or one "
		                         "under ~/, without '..'",
		                         file);
	if (file && check_file_intent(ctx, file) < 0)
		return EXIT_USAGE;
	if (query && secret_query_check(query) < 0)
		return slate_usage_error(
		        ctx, "secret set: --query %s: 1 to %d of A-Z a-z 0-9 _ . - ~ [ ]", query,
		        SECRET_QUERY_MAX);
	if ((in_body || query) && k == SECRET_KIND_AWS)
		return slate_usage_error(ctx,
		                         "secret set: --body and --query are not for aws secrets "
		                         "(they are re-signed, not substituted)");
	if ((ws && json_add_string(body, "workspace", ws) < 0) ||
	    (in_body && json_add_bool(body, "body", true) < 0) ||
	    (query && json_add_string(body, "query", query) < 0) ||
	    (plain_http && json_add_bool(body, "allow_plain_http", true) < 0) ||
	    (global && json_add_bool(body, "global", true) < 0) ||
	    json_add_string(body, "key", key) < 0 || json_add_string(body, "kind", kind) < 0 ||
	    (env && json_add_string(body, "env", env) < 0) ||
	    (file && json_add_string(body, "file", file) < 0))
		return slate_fail("secret set", "out of memory");

	n = read_value(key, &v);
	if (n < 0)
		return EXIT_FAILURE;
	value = json_object_new_string_len((const char *)v, (int)n);
	sodium_free(v); /* wipes */
	if (!value || json_add(body, "value", json_object_get(value)) < 0) {
		json_object_put(value);
		return slate_fail("secret set", "out of memory");
	}
	r = call(ctx, "secret set", "POST", "/v1/secrets", body, &reply);
	wipe_json_string(value);
	json_object_put(value);
	if (r < 0)
		return -r;
	print_warnings(reply);
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	print_placeholders(reply, k == SECRET_KIND_AWS);
	return EXIT_SUCCESS;
}

static void join_hosts(struct json_object *s, char *buf, size_t len)
{
	struct json_object *hosts;
	size_t off = 0;

	buf[0] = '\0';
	if (json_get_array(s, "hosts", &hosts) < 0)
		return;
	for (size_t i = 0; i < json_object_array_length(hosts) && off < len; i++) {
		int k = snprintf(buf + off, len - off, "%s%s", i ? "," : "",
		                 json_object_get_string(json_object_array_get_idx(hosts, i)));
		if (k < 0)
			break;
		off += (size_t)k;
	}
}

static int secret_ls_cmd(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	_cleanup_json_ struct json_object *reply = NULL;
	struct json_object *arr;
	char path[256], hosts[1024], where[512], in[128];
	int c, r;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		return slate_help_or_unknown(ctx, "secret ls", c, usage_text, argv);
	}
	if (optind < argc - 1)
		return slate_usage_error(ctx, "secret ls: at most one workspace NAME");
	if (optind == argc - 1) {
		if (workspace_name_check(argv[optind]) < 0)
			return slate_usage_error(ctx, "secret ls: invalid name '%s': %s",
			                         argv[optind], WORKSPACE_NAME_RULE);
		(void)snprintf(path, sizeof(path), "/v1/secrets?workspace=%s", argv[optind]);
	} else
		(void)snprintf(path, sizeof(path), "/v1/secrets");
	r = call(ctx, "secret ls", "GET", path, NULL, &reply);
	if (r < 0)
		return -r;
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	if (json_get_array(reply, "secrets", &arr) < 0)
		return slate_fail("secret ls", "slated's reply has no secret list");
	if (json_object_array_length(arr) == 0) {
		printf("no secrets\n");
		return EXIT_SUCCESS;
	}
	printf("%-24s %-10s %-10s %-32s %-28s %-20s %s\n", "KEY", "KIND", "SCOPE", "HOSTS",
	       "GUEST SEES", "SUBSTITUTED IN", "PLACEHOLDER");
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *s = json_object_array_get_idx(arr, i), *ph;
		const char *key = "?", *kind = "?", *scope = "?", *env = NULL, *file = NULL,
		           *query = NULL;
		bool in_body = false, plain_http = false;
		size_t line = 0;

		(void)json_get_string(s, "key", &key);
		(void)json_get_string(s, "kind", &kind);
		(void)json_get_string(s, "scope", &scope);
		(void)json_get_string(s, "env", &env);
		(void)json_get_string(s, "file", &file);
		(void)json_get_bool(s, "body", &in_body);
		(void)json_get_string(s, "query", &query);
		(void)json_get_bool(s, "allow_plain_http", &plain_http);
		/* aws: re-signed (SigV4), else header fields, and what --body/--query added;
		 * "+plain-http" when it may also go over plain http:// (--allow-plain-http). */
		(void)snprintf(in, sizeof(in), "%s%s%s%s%s",
		               streq(kind, "aws") ? "sigv4" : "headers", in_body ? ",body" : "",
		               query ? ",?" : "", query ? query : "",
		               plain_http ? "+plain-http" : "");
		join_hosts(s, hosts, sizeof(hosts));
		(void)snprintf(where, sizeof(where), "%s%s%s%s%s%s", env ? "$" : "", env ? env : "",
		               env && streq(kind, "aws") ? "_*" : "", env && file ? ", " : "",
		               file ? file : "", !env && !file ? "-" : "");
		if (json_get_object(s, "placeholders", &ph) < 0)
			continue;
		json_object_object_foreach (ph, name, v) {
			if (line++ == 0)
				printf("%-24s %-10s %-10s %-32s %-28s %-20s ", key, kind, scope,
				       hosts, where, in);
			else
				printf("%-24s %-10s %-10s %-32s %-28s %-20s ", "", "", "", "", "",
				       "");
			if (streq(kind, "aws"))
				printf("%s: ", name);
			printf("%s\n", json_object_get_string(v));
		}
	}
	return EXIT_SUCCESS;
}

static int secret_rm_cmd(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_GLOBAL = 1 };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"global", no_argument, NULL, OPT_GLOBAL},
	        {},
	};
	_cleanup_json_ struct json_object *reply = NULL;
	const char *ws = NULL, *key;
	bool global = false;
	char path[256];
	int c, r;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == OPT_GLOBAL) {
			global = true;
			continue;
		}
		return slate_help_or_unknown(ctx, "secret rm", c, usage_text, argv);
	}
	if (global ? optind != argc - 1 : optind != argc - 2)
		return slate_usage_error(ctx, "secret rm: give (NAME|--global) KEY");
	if (!global) {
		ws = argv[optind++];
		if (workspace_name_check(ws) < 0)
			return slate_usage_error(ctx, "secret rm: invalid name '%s': %s", ws,
			                         WORKSPACE_NAME_RULE);
	}
	key = argv[optind];
	if (secret_key_check(key) < 0)
		return slate_usage_error(ctx, "secret rm: invalid secret name '%s'", key);
	if (global)
		(void)snprintf(path, sizeof(path), "/v1/secrets/%s?global=1", key);
	else
		(void)snprintf(path, sizeof(path), "/v1/secrets/%s?workspace=%s", key, ws);
	r = call(ctx, "secret rm", "DELETE", path, NULL, &reply);
	if (r < 0)
		return -r;
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	printf("removed secret %s from %s\n", key, global ? "the global vault" : ws);
	return EXIT_SUCCESS;
}

int cmd_secret(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct slate_subcommand subs[] = {
	        {"set", secret_set_cmd},
	        {"ls", secret_ls_cmd},
	        {"rm", secret_rm_cmd},
	};

	return slate_dispatch(ctx, usage_text, subs, ELEMENTSOF(subs), argc, argv);
}

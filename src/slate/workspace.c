/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Workspace commands: create, ls, describe, reset, wipe-home, wipe, rm, checkpoint. */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/client.h"
#include "slate.h"
#include "util/json.h"
#include "util/size.h"
#include "workspace/workspace.h"

#define MAX_SHARES 8 /* VM_MAX_SHARES: one virtiofs device each */

/* Parses the options common to every command plus -y/--yes; returns the first operand index or
 * an exit status < 0 (negated) when it printed usage/help. */
/* Where --system-only goes, for the one command that takes it (checkpoint revert). */
static bool *parse_system_only;

static int parse_simple(struct slate_ctx *ctx, int argc, char **argv, bool *yes, const char *usage)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"yes", no_argument, NULL, 'y'},
	        {"system-only", no_argument, NULL, 'S'},
	        {},
	};
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "hy", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == 'y' && yes) {
			*yes = true;
			continue;
		}
		if (c == 'S' && parse_system_only) {
			*parse_system_only = true;
			continue;
		}
		if (c == 'h' || c == OPT_HELP) {
			fputs(usage, stdout);
			return -EXIT_SUCCESS - 1000;
		}
		return -slate_usage_error(ctx, "%s: unknown option '%s'", ctx->command,
		                          argv[optind - 1]);
	}
	return optind;
}

/* Maps parse_simple's negative result to the exit status. */
static int parse_exit(int r)
{
	return r == -1000 ? EXIT_SUCCESS : -r;
}

/* Names go into URL paths: check them here too, so that "a/../b" never becomes "b". */
static int check_name(struct slate_ctx *ctx, const char *name)
{
	if (workspace_name_check(name) < 0)
		return -slate_usage_error(ctx, "%s: invalid name '%s': %s", ctx->command, name,
		                          WORKSPACE_NAME_RULE);
	return 0;
}

static int call(struct slate_ctx *ctx, const char *method, const char *path,
                struct json_object *body, struct json_object **ret)
{
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	struct api_error err;

	if (slate_client(ctx, &client) < 0)
		return -EXIT_FAILURE;
	if (api_client_call(client, method, path, body, NULL, NULL, ret, &err) < 0)
		return -slate_api_fail(ctx->command, &err);
	return 0;
}

/* Parses --share HOSTDIR[:GUESTDIR][:ro] into an object appended to shares. Returns 0, or prints
 * and returns an exit status. */
int slate_egress_option(const struct slate_ctx *ctx, const char *opt, const char *arg,
                        struct json_object *egress)
{
	struct json_object *rules = NULL, *rule;

	if (streq(opt, "egress")) {
		if (!streq(arg, "allow-all") && !streq(arg, "deny-all"))
			return slate_usage_error(ctx, "%s: --egress %s: allow-all or deny-all",
			                         ctx->command, arg);
		return json_add_string(egress, "default", arg) < 0
		               ? slate_fail(ctx->command, "out of memory")
		               : 0;
	}
	/* In the order given, as `slate egress NAME allow|deny HOST` would add them; slated checks
	 * the hosts. */
	if (json_get_array(egress, "rules", &rules) < 0) {
		rules = json_object_new_array();
		if (!rules || json_add(egress, "rules", rules) < 0)
			return slate_fail(ctx->command, "out of memory");
	}
	rule = json_object_new_object();
	if (!rule || json_object_array_add(rules, rule) < 0 ||
	    json_add_string(rule, "host", arg) < 0 || json_add_string(rule, "action", opt) < 0)
		return slate_fail(ctx->command, "out of memory");
	return 0;
}

/* A plain decimal number (digits only, no sign or suffix) into *ret. 0 or -EINVAL. */
static int parse_decimal(const char *arg, uint64_t *ret)
{
	char *end;

	errno = 0;
	*ret = strtoull(arg, &end, 10);
	return errno || end == arg || *end || arg[0] == '-' ? -EINVAL : 0;
}

int slate_parse_memory(const char *arg, uint64_t *ret_mib)
{
	uint64_t v;

	/* MiB, as slate(1) says; a unit suffix is accepted too ("4G"). */
	if (parse_decimal(arg, &v) < 0) {
		if (size_parse(arg, &v) < 0)
			return -EINVAL;
		v >>= 20;
	}
	if (v == 0 || v > (UINT64_C(1) << 24))
		return -EINVAL;
	*ret_mib = v;
	return 0;
}

int slate_parse_cpus(const char *arg, uint64_t *ret)
{
	uint64_t v;

	if (parse_decimal(arg, &v) < 0 || v == 0 || v > 256)
		return -EINVAL;
	*ret = v;
	return 0;
}

int slate_parse_share(const struct slate_ctx *ctx, const char *arg, struct json_object *shares)
{
	_cleanup_free_ char *spec = strdup(arg);
	char *host, *guest = NULL, *p;
	char real[PATH_MAX];
	struct json_object *s;
	bool ro = false;

	if (!spec)
		return slate_fail(ctx->command, "out of memory");
	host = spec;
	p = strchr(spec, ':');
	if (p) {
		*p++ = '\0';
		if (streq(p, "ro"))
			ro = true;
		else {
			guest = p;
			p = strchr(p, ':');
			if (p) {
				*p++ = '\0';
				if (!streq(p, "ro"))
					return slate_usage_error(
					        ctx, "%s: --share %s: HOSTDIR[:GUESTDIR][:ro]",
					        ctx->command, arg);
				ro = true;
			}
		}
	}
	if (!realpath(host, real))
		return slate_fail(ctx->command, "--share %s: %s", host, strerror(errno));
	s = json_object_new_object();
	if (!s)
		return slate_fail(ctx->command, "out of memory");
	(void)json_add_string(s, "host", real);
	if (guest && *guest)
		(void)json_add_string(s, "guest", guest);
	(void)json_add_bool(s, "readonly", ro);
	(void)json_object_array_add(shares, s);
	if (json_object_array_length(shares) > MAX_SHARES)
		return slate_usage_error(ctx, "%s: at most %d --share", ctx->command, MAX_SHARES);
	return 0;
}

int cmd_create(struct slate_ctx *ctx, int argc, char **argv)
{
	enum {
		OPT_IMAGE = 1,
		OPT_MEMORY,
		OPT_CPUS,
		OPT_HOME,
		OPT_SHARE,
		OPT_GENKEY,
		OPT_EGRESS,
		OPT_ALLOW,
		OPT_DENY
	};
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"image", required_argument, NULL, OPT_IMAGE},
	        {"memory", required_argument, NULL, OPT_MEMORY},
	        {"cpus", required_argument, NULL, OPT_CPUS},
	        {"home-size", required_argument, NULL, OPT_HOME},
	        {"share", required_argument, NULL, OPT_SHARE},
	        {"generate-ssh-key", no_argument, NULL, OPT_GENKEY},
	        {"egress", required_argument, NULL, OPT_EGRESS},
	        {"allow", required_argument, NULL, OPT_ALLOW},
	        {"deny", required_argument, NULL, OPT_DENY},
	        {},
	};
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	struct json_object *shares = json_object_new_array();
	/* --egress, --allow, --deny: the policy `slate egress` would make, set with the create. */
	_cleanup_json_ struct json_object *egress = json_object_new_object();
	int opt_index = 0;
	uint64_t v;
	int c, r;

	if (!body || !shares || json_add(body, "shares", shares) < 0 || !egress)
		return slate_fail("create", "out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, &opt_index)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_IMAGE:
			(void)json_add_string(body, "image", optarg);
			break;
		case OPT_MEMORY:
			if (slate_parse_memory(optarg, &v) < 0)
				return slate_usage_error(
				        ctx, "create: --memory %s: MiB or a size like 4G", optarg);
			(void)json_add_int64(body, "memory_mib", (int64_t)v);
			break;
		case OPT_CPUS:
			if (slate_parse_cpus(optarg, &v) < 0)
				return slate_usage_error(
				        ctx, "create: --cpus %s: a number from 1 to 256", optarg);
			(void)json_add_int64(body, "cpus", (int64_t)v);
			break;
		case OPT_HOME:
			if (size_parse(optarg, &v) < 0)
				return slate_usage_error(
				        ctx, "create: --home-size %s: a size like 64G", optarg);
			(void)json_add_int64(body, "home_size", (int64_t)v);
			break;
		case OPT_SHARE:
			r = slate_parse_share(ctx, optarg, shares);
			if (r != 0)
				return r;
			break;
		case OPT_GENKEY:
			(void)json_add_bool(body, "generate_ssh_key", true);
			break;
		case OPT_EGRESS:
		case OPT_ALLOW:
		case OPT_DENY:
			/* The option's own name: "egress", "allow" or "deny". */
			r = slate_egress_option(ctx, longopts[opt_index].name, optarg, egress);
			if (r != 0)
				return r;
			break;
		case 'h':
		case OPT_HELP:
			printf("Usage: slate create NAME [--image ID] [--memory MIB] [--cpus N] "
			       "[--home-size SIZE]\n"
			       "                   [--share HOSTDIR[:GUESTDIR][:ro]]... "
			       "[--generate-ssh-key]\n"
			       "                   [--egress allow-all|deny-all] [--allow HOST]... "
			       "[--deny HOST]...\n"
			       "Clone the base image into a new workspace; nothing boots.\n"
			       "--generate-ssh-key also makes its SSH key pair (slate ssh-key) "
			       "and prints\nthe public key.\n"
			       "--egress, --allow and --deny set its egress policy as 'slate "
			       "egress "
			       "NAME\nallow-all|deny-all', then 'allow|deny HOST' for each in "
			       "order, "
			       "would; a host\nthat is refused fails the create and leaves nothing "
			       "behind.\n");
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "create: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return slate_usage_error(ctx, "create: give exactly one workspace NAME");
	if (check_name(ctx, argv[optind]) < 0)
		return EXIT_USAGE;
	(void)json_add_string(body, "name", argv[optind]);
	/* Members only when an egress option was given: slate_egress_option adds them. */
	if (json_object_object_length(egress) > 0 &&
	    json_add(body, "egress", json_object_get(egress)) < 0)
		return slate_fail("create", "out of memory");
	r = call(ctx, "POST", "/v1/workspaces", body, &reply);
	if (r < 0)
		return -r;
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	{
		const char *image = "?", *mac = "?";
		struct json_object *key;
		(void)json_get_string(reply, "image", &image);
		(void)json_get_string(reply, "mac", &mac);
		printf("created workspace %s from image %s (MAC %s)\n", argv[optind], image, mac);
		if (json_get_object(reply, "ssh_key", &key) >= 0 &&
		    json_get_string(key, "public_key", &image) >= 0)
			printf("%s\n", image);
	}
	return EXIT_SUCCESS;
}

static int64_t usage_physical(struct json_object *w, const char *which)
{
	struct json_object *u, *x;
	int64_t v = 0;

	if (json_get_object(w, "usage", &u) < 0 || json_get_object(u, which, &x) < 0)
		return 0;
	(void)json_get_int64(x, "physical", &v);
	return v;
}

int cmd_ls(struct slate_ctx *ctx, int argc, char **argv)
{
	_cleanup_json_ struct json_object *reply = NULL;
	struct json_object *arr;
	bool owners;
	int r;

	r = parse_simple(ctx, argc, argv, NULL,
	                 "Usage: slate ls [--json]\nList your workspaces: name, state, image, disk "
	                 "use; root's list has every user's, with an OWNER column.\n");
	if (r < 0)
		return parse_exit(r);
	if (r != argc)
		return slate_usage_error(ctx, "ls: unexpected argument '%s'", argv[r]);
	r = call(ctx, "GET", "/v1/workspaces", NULL, &reply);
	if (r < 0)
		return -r;
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	if (json_get_array(reply, "workspaces", &arr) < 0)
		return slate_fail("ls", "slated's reply has no workspace list");
	/* Root sees every user's workspaces: then each line says whose (last, so that scripts
	 * reading the first columns keep working). */
	owners = geteuid() == 0;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		int64_t uid = -1;

		(void)json_get_int64(json_object_array_get_idx(arr, i), "owner", &uid);
		if (uid != (int64_t)geteuid())
			owners = true;
	}
	printf("%-24s %-12s %-20s %10s%s\n", "NAME", "STATE", "IMAGE", "DISK USE",
	       owners ? "  OWNER" : "");
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *w = json_object_array_get_idx(arr, i);
		const char *name = "?", *state = "?", *image = "?";
		char sz[32], owner[64] = "";
		int64_t uid = -1;

		(void)json_get_string(w, "name", &name);
		(void)json_get_string(w, "state", &state);
		(void)json_get_string(w, "image", &image);
		size_format((uint64_t)(usage_physical(w, "disk") + usage_physical(w, "home") +
		                       usage_physical(w, "checkpoints")),
		            sz, sizeof(sz));
		if (owners) {
			struct passwd *pw;

			(void)json_get_int64(w, "owner", &uid);
			pw = uid >= 0 ? getpwuid((uid_t)uid) : NULL;
			if (pw)
				(void)snprintf(owner, sizeof(owner), "  %s", pw->pw_name);
			else
				(void)snprintf(owner, sizeof(owner), "  %lld", (long long)uid);
		}
		printf("%-24s %-12s %-20s %10s%s\n", name, state, image, sz, owner);
	}
	return EXIT_SUCCESS;
}

static void print_usage_line(struct json_object *w, const char *which, const char *label)
{
	struct json_object *u, *x;
	int64_t l = 0, p = 0, s = 0;
	char a[32], b[32], c[32];

	if (json_get_object(w, "usage", &u) < 0 || json_get_object(u, which, &x) < 0)
		return;
	(void)json_get_int64(x, "logical", &l);
	(void)json_get_int64(x, "physical", &p);
	(void)json_get_int64(x, "shared", &s);
	printf("  %-12s %10s logical, %10s physical, %10s shared\n", label,
	       size_format((uint64_t)l, a, sizeof(a)), size_format((uint64_t)p, b, sizeof(b)),
	       size_format((uint64_t)s, c, sizeof(c)));
}

static const char *fmt_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!gmtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%SZ", &tm))
		(void)snprintf(buf, len, "%lld", (long long)t);
	return buf;
}

int cmd_describe(struct slate_ctx *ctx, int argc, char **argv)
{
	_cleanup_json_ struct json_object *reply = NULL;
	struct json_object *arr, *ch;
	char path[512], tbuf[64], sz[32];
	const char *s;
	int64_t v;
	bool b;
	int r;

	r = parse_simple(ctx, argc, argv, NULL,
	                 "Usage: slate describe NAME [--json]\nSettings, disk use, checkpoints, "
	                 "domain and secrets (names and hosts only) of a workspace.\n");
	if (r < 0)
		return parse_exit(r);
	if (r != argc - 1)
		return slate_usage_error(ctx, "describe: give exactly one workspace NAME");
	if (check_name(ctx, argv[r]) < 0)
		return EXIT_USAGE;
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s", argv[r]);
	r = call(ctx, "GET", path, NULL, &reply);
	if (r < 0)
		return -r;
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;

#define STR(k) (json_get_string(reply, k, &s) >= 0 ? s : "?")
	printf("name:        %s\n", STR("name"));
	printf("state:       %s\n", STR("state"));
	printf("domain:      %s\n", STR("domain"));
	printf("uuid:        %s\n", STR("uuid"));
	(void)json_get_int64(reply, "base_version", &v);
	printf("image:       %s (cloned from version %lld", STR("image"), (long long)v);
	if (json_get_bool(reply, "base_drift", &b) >= 0 && b &&
	    json_get_int64(reply, "image_version", &v) >= 0)
		printf("; the image is now at version %lld: 'slate start --reset-to-base' or "
		       "'--as-is'",
		       (long long)v);
	printf(")\n");
	printf("storage:     %s\n", STR("storage"));
	if (json_object_object_get_ex(reply, "accelerator", NULL))
		printf("accelerator: %s\n", STR("accelerator"));
	if (json_get_object(reply, "channel", &ch) >= 0) {
		bool up = false, ready = false;
		int64_t sessions = 0, errors = 0, streams = 0;
		const char *last = NULL;
		(void)json_get_bool(ch, "connected", &up);
		(void)json_get_bool(ch, "ready", &ready);
		(void)json_get_int64(ch, "sessions", &sessions);
		(void)json_get_int64(ch, "errors", &errors);
		(void)json_get_int64(ch, "streams", &streams);
		printf("channel:     %s, %lld open streams, %lld sessions, %lld protocol errors",
		       ready ? "guest agent ready"
		       : up  ? "connected, no agent yet"
		             : "not connected",
		       (long long)streams, (long long)sessions, (long long)errors);
		if (json_get_string(ch, "last_error", &last) >= 0)
			printf(" (last: %s)", last);
		printf("\n");
	}
	if (json_get_bool(reply, "ephemeral", &b) >= 0 && b)
		printf("ephemeral:   made by 'slate run --rm': deleted when that run ends\n");
	v = 0;
	(void)json_get_int64(reply, "memory_mib", &v);
	printf("memory:      %lld MiB\n", (long long)v);
	(void)json_get_int64(reply, "cpus", &v);
	printf("cpus:        %lld\n", (long long)v);
	(void)json_get_int64(reply, "home_size", &v);
	printf("home size:   %s\n", size_format((uint64_t)v, sz, sizeof(sz)));
	printf("mac:         %s\n", STR("mac"));
	(void)json_get_int64(reply, "created", &v);
	printf("created:     %s\n", fmt_time(v, tbuf, sizeof(tbuf)));
	if (json_get_bool(reply, "compromised", &b) >= 0 && b) {
		(void)json_get_int64(reply, "compromised_at", &v);
		printf("COMPROMISED: %s, a placeholder was sent to %s: 'slate wipe %s' before it "
		       "may start\n",
		       fmt_time(v, tbuf, sizeof(tbuf)), STR("compromised_host"), STR("name"));
	} else if (json_get_bool(reply, "wiped_after_leak", &b) >= 0 && b) {
		(void)json_get_int64(reply, "compromised_at", &v);
		printf("leak:        %s, a placeholder was sent to %s; wiped since: the next start "
		       "makes a fresh disk and home and may go ahead\n",
		       fmt_time(v, tbuf, sizeof(tbuf)), STR("compromised_host"));
	}
	if (json_get_bool(reply, "disk_present", &b) >= 0 && !b)
		printf("disk:        reset; the next start clones a fresh one from the base\n");
	if (json_get_bool(reply, "home_present", &b) >= 0 && !b)
		printf("home:        wiped; the next start makes a fresh one\n");
	printf("disk use:\n");
	print_usage_line(reply, "disk", "disk.img");
	print_usage_line(reply, "home", "home.img");
	print_usage_line(reply, "checkpoints", "checkpoints");
	if (json_get_array(reply, "shares", &arr) >= 0 && json_object_array_length(arr) > 0) {
		printf("shares:\n");
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			struct json_object *sh = json_object_array_get_idx(arr, i);
			const char *h = "?", *g = "?";
			bool ro = false;
			(void)json_get_string(sh, "host", &h);
			(void)json_get_string(sh, "guest", &g);
			(void)json_get_bool(sh, "readonly", &ro);
			printf("  %s -> %s%s\n", h, g, ro ? " (read-only)" : "");
		}
	}
	if (json_get_array(reply, "checkpoints", &arr) >= 0) {
		printf("checkpoints: %zu\n", json_object_array_length(arr));
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			struct json_object *cp = json_object_array_get_idx(arr, i);
			const char *id = "?";
			(void)json_get_string(cp, "id", &id);
			v = 0;
			(void)json_get_int64(cp, "created", &v);
			printf("  %s  %s\n", id, fmt_time(v, tbuf, sizeof(tbuf)));
		}
	}
	if (json_get_string(reply, "secrets_error", &s) >= 0)
		printf("secrets:     cannot be read: %s\n", s);
	else if (json_get_array(reply, "secrets", &arr) >= 0) {
		/* Names, kinds and hosts; never values (slate secret ls shows placeholders). */
		printf("secrets:     %zu bound\n", json_object_array_length(arr));
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			struct json_object *sec = json_object_array_get_idx(arr, i), *hs;
			const char *k = "?", *kind = "?", *scope = "?", *query;
			bool body = false, plain_http = false;
			(void)json_get_string(sec, "key", &k);
			(void)json_get_string(sec, "kind", &kind);
			(void)json_get_string(sec, "scope", &scope);
			printf("  %s (%s, %s) ->", k, kind, scope);
			if (json_get_array(sec, "hosts", &hs) >= 0)
				for (size_t j = 0; j < json_object_array_length(hs); j++) {
					struct json_object *h = json_object_array_get_idx(hs, j);
					printf("%s%s", j ? ", " : " ", json_object_get_string(h));
				}
			/* Where else than headers it is substituted (secret set --body, --query). */
			if (json_get_bool(sec, "body", &body) >= 0 && body)
				printf("; in bodies");
			if (json_get_string(sec, "query", &query) >= 0)
				printf("; in ?%s=", query);
			/* secret set --allow-plain-http: sent over plain http:// too. */
			if (json_get_bool(sec, "allow_plain_http", &plain_http) >= 0 && plain_http)
				printf("; over plain HTTP too");
			printf("\n");
		}
	}
#undef STR
	return EXIT_SUCCESS;
}

/*
 * Asks before a destructive verb. Names what goes and what stays. Without a terminal to ask
 * on, only --yes proceeds.
 */
static int confirm(const struct slate_ctx *ctx, bool yes, const char *what, const char *goes,
                   const char *stays)
{
	char answer[16];

	if (yes)
		return 0;
	fprintf(stderr, "%s\n  goes:  %s\n  stays: %s\n", what, goes, stays);
	if (!isatty(STDIN_FILENO))
		return -slate_usage_error(ctx, "%s: no terminal to confirm on: pass --yes",
		                          ctx->command);
	fprintf(stderr, "Proceed? [y/N] ");
	if (!fgets(answer, sizeof(answer), stdin) || (answer[0] != 'y' && answer[0] != 'Y')) {
		fprintf(stderr, "slate: %s: not confirmed, nothing changed\n", ctx->command);
		return -EXIT_FAILURE;
	}
	return 0;
}

struct verb {
	const char *name, *method, *suffix, *goes, *stays, *done;
};

static const struct verb verbs[] = {
        {"reset", "POST", "/reset",
         "the system disk (disk.img): everything installed with apt, edits under /etc, /var, "
         "/usr, /opt; the next start clones a fresh one from the base",
         "home, secrets, SSH keys, the browser's kept profile (slate browser --persist), "
         "settings, checkpoints and shared host folders",
         "reset to its base image:"},
        {"wipe-home", "POST", "/wipe-home",
         "/home (home.img), the workspace's generated SSH key pair and the browser's kept "
         "profile (slate browser --persist); the next start makes a fresh empty home",
         "the system disk, secrets, imported SSH keys, settings, checkpoints and shared host "
         "folders",
         "wiped the home of"},
        {"wipe", "POST", "/wipe",
         "the system disk (disk.img), /home (home.img), the generated SSH key pair and the "
         "browser's kept profile",
         "secrets, imported SSH keys, settings, checkpoints and shared host folders",
         "system disk reset and home emptied:"},
        {"rm", "DELETE", "",
         "the whole workspace: directory, both images, vault, every checkpoint, host-side "
         "SSH material, the browser's kept profile and its MAC reservation",
         "the base image and shared host folders (never touched)", "deleted workspace"},
};

static int run_destructive(struct slate_ctx *ctx, const struct verb *vb, int argc, char **argv)
{
	_cleanup_json_ struct json_object *reply = NULL;
	char usage[256], path[512], what[128];
	bool yes = false;
	int r;

	(void)snprintf(usage, sizeof(usage), "Usage: slate %s NAME [--yes]\nIt deletes %s.\n",
	               vb->name, vb->goes);
	r = parse_simple(ctx, argc, argv, &yes, usage);
	if (r < 0)
		return parse_exit(r);
	if (r != argc - 1)
		return slate_usage_error(ctx, "%s: give exactly one workspace NAME", vb->name);
	if (check_name(ctx, argv[r]) < 0)
		return EXIT_USAGE;
	(void)snprintf(what, sizeof(what), "slate %s %s:", vb->name, argv[r]);
	r = confirm(ctx, yes, what, vb->goes, vb->stays);
	if (r < 0)
		return -r;
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s%s", argv[argc - 1], vb->suffix);
	r = call(ctx, vb->method, path, NULL, &reply);
	if (r < 0)
		return -r;
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	printf("%s %s\n", vb->done, argv[argc - 1]);
	return EXIT_SUCCESS;
}

int cmd_reset(struct slate_ctx *ctx, int argc, char **argv)
{
	return run_destructive(ctx, &verbs[0], argc, argv);
}
int cmd_wipe_home(struct slate_ctx *ctx, int argc, char **argv)
{
	return run_destructive(ctx, &verbs[1], argc, argv);
}
int cmd_wipe(struct slate_ctx *ctx, int argc, char **argv)
{
	return run_destructive(ctx, &verbs[2], argc, argv);
}
int cmd_rm(struct slate_ctx *ctx, int argc, char **argv)
{
	return run_destructive(ctx, &verbs[3], argc, argv);
}

int cmd_checkpoint(struct slate_ctx *ctx, int argc, char **argv)
{
	_cleanup_json_ struct json_object *reply = NULL;
	static const char usage[] =
	        "Usage: slate checkpoint ls NAME\n"
	        "       slate checkpoint revert NAME ID [--system-only] [--yes]\n"
	        "Proven-boot checkpoints of a workspace's disk and home: after each boot whose "
	        "terminal proof succeeded, slated keeps a copy-on-write pair (the newest 5).\n"
	        "revert (the workspace must be stopped) puts the pair back; --system-only puts "
	        "back just the system disk and keeps home as it is.\n";
	char path[700], tbuf[64], held[32];
	bool yes = false, system_only = false;
	const char *sub;
	int r;

	r = parse_simple(ctx, argc, argv, &yes, usage);
	if (r < 0)
		return parse_exit(r);
	if (r >= argc)
		return slate_usage_error(ctx, "checkpoint: ls or revert?");
	sub = argv[r];
	if (streq(sub, "ls")) {
		struct json_object *arr;
		argc -= r;
		argv += r;
		optind = 0;
		r = parse_simple(ctx, argc, argv, NULL, usage);
		if (r < 0)
			return parse_exit(r);
		if (r != argc - 1)
			return slate_usage_error(ctx,
			                         "checkpoint ls: give exactly one workspace NAME");
		if (check_name(ctx, argv[r]) < 0)
			return EXIT_USAGE;
		(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/checkpoints", argv[r]);
		r = call(ctx, "GET", path, NULL, &reply);
		if (r < 0)
			return -r;
		if (ctx->json)
			return slate_print_json(reply), EXIT_SUCCESS;
		if (json_get_array(reply, "checkpoints", &arr) < 0)
			return slate_fail("checkpoint", "slated's reply has no checkpoint list");
		printf("%-24s %-20s %10s  %s\n", "ID", "CREATED", "HELD", "NOTE");
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			struct json_object *cp = json_object_array_get_idx(arr, i);
			const char *id = "?", *note = "";
			int64_t t = 0, h = 0;
			(void)json_get_string(cp, "id", &id);
			(void)json_get_string(cp, "note", &note);
			(void)json_get_int64(cp, "created", &t);
			(void)json_get_int64(cp, "held", &h);
			printf("%-24s %-20s %10s  %s\n", id, fmt_time(t, tbuf, sizeof(tbuf)),
			       size_format((uint64_t)h, held, sizeof(held)), note);
		}
		return EXIT_SUCCESS;
	}
	if (streq(sub, "revert")) {
		char what[256];
		argc -= r;
		argv += r;
		optind = 0;
		parse_system_only = &system_only;
		r = parse_simple(ctx, argc, argv, &yes, usage);
		parse_system_only = NULL;
		if (r < 0)
			return parse_exit(r);
		if (r != argc - 2)
			return slate_usage_error(ctx, "checkpoint revert: give NAME and ID");
		if (check_name(ctx, argv[r]) < 0)
			return EXIT_USAGE;
		if (strspn(argv[r + 1], "0123456789abcdefghijklmnopqrstuvwxyz-") !=
		            strlen(argv[r + 1]) ||
		    !argv[r + 1][0] || strlen(argv[r + 1]) > 31)
			return slate_usage_error(
			        ctx, "checkpoint revert: invalid checkpoint id '%s'", argv[r + 1]);
		(void)snprintf(what, sizeof(what), "slate checkpoint revert %s %s:", argv[r],
		               argv[r + 1]);
		r = confirm(ctx, yes, what,
		            system_only ? "the current system disk (everything installed or "
		                          "changed outside /home since the checkpoint)"
		                        : "the current system disk and home (everything written "
		                          "since the checkpoint, /home included), replaced by the "
		                          "checkpoint's pair",
		            system_only
		                    ? "home, secrets, SSH keys, settings, other checkpoints and "
		                      "shared host folders"
		                    : "secrets, SSH keys, settings, other checkpoints and shared "
		                      "host folders");
		if (r < 0)
			return -r;
		(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/checkpoints/%s/revert",
		               argv[argc - 2], argv[argc - 1]);
		_cleanup_json_ struct json_object *body = json_object_new_object();
		if (!body || json_add_bool(body, "system_only", system_only) < 0)
			return slate_fail("checkpoint", "out of memory");
		r = call(ctx, "POST", path, body, &reply);
		if (r < 0)
			return -r;
		if (ctx->json)
			return slate_print_json(reply), EXIT_SUCCESS;
		printf("reverted %s to checkpoint %s\n", argv[argc - 2], argv[argc - 1]);
		return EXIT_SUCCESS;
	}
	return slate_usage_error(ctx, "checkpoint: unknown subcommand '%s' (ls, revert)", sub);
}

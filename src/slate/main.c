/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate: the command-line client. Each command group lives in its own file. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slate.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"
#include "version.h"

struct command {
	const char *name;
	int (*fn)(struct slate_ctx *ctx, int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
        {"create", cmd_create, "clone the base image into a new workspace; nothing boots"},
        {"ls", cmd_ls, "your workspaces: name, state, image, disk use"},
        {"describe", cmd_describe, "a workspace's settings, disk use, checkpoints, domain"},
        {"start", cmd_start, "boot a workspace; returns once the guest is ready"},
        {"stop", cmd_stop, "shut a workspace down, power it off (--force) or suspend it"},
        {"console", cmd_console, "the serial console of a running workspace"},
        {"exec", cmd_exec, "run a command in a running workspace; its exit status is ours"},
        {"shell", cmd_shell, "an interactive login shell in a running workspace"},
        {"run", cmd_run, "create if needed, start, run a command; --rm deletes it after"},
        {"probe", cmd_probe, "check that a running workspace's disks hold nobody else's data"},
        {"cp", cmd_cp, "copy files and directories between the host and a workspace"},
        {"reset", cmd_reset, "reset the system disk to the base; home survives"},
        {"wipe-home", cmd_wipe_home, "discard /home and the generated SSH key pair"},
        {"wipe", cmd_wipe, "reset and wipe-home together"},
        {"rm", cmd_rm, "delete a workspace and everything it holds"},
        {"checkpoint", cmd_checkpoint, "list or revert to proven-boot checkpoints"},
        {"ssh-key", cmd_ssh_key, "host-held SSH keys for the workspace's sign-only agent"},
        {"secret", cmd_secret, "credentials the guest sees only as placeholders"},
        {"egress", cmd_egress, "a workspace's egress policy: which hosts it may reach"},
        {"trace", cmd_trace, "the workspace's audit trail: egress, signatures, leaks"},
        {"browser", cmd_browser, "a disposable browser VM for the workspace's agent (CDP)"},
        {"ci", cmd_ci, "CI runner drivers: ci gitlab config|prepare|run|cleanup"},
        {"image", cmd_image, "list, pull, verify, import or snapshot base images"},
        {"catalog", cmd_catalog, "fetch and verify the signed image catalog"},
        {"version", cmd_version, "client and daemon versions"},
        {"doctor", cmd_doctor, "check the host: state directory, storage, libvirt, KVM, vsock"},
        {"system", cmd_system, "dial-stdio: slated's end of 'slate --host ssh://'"},
};

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: slate [--json] [--socket PATH | --host ssh://[USER@]HOST[:PORT]] COMMAND "
	        "[ARG]...\n\n"
	        "Run coding agents and CI jobs in one virtual machine per workspace.\n\n"
	        "Commands:\n");
	for (size_t i = 0; i < ELEMENTSOF(commands); i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(f,
	        "\nOptions (--host before the command; the others after it too):\n"
	        "  --json         machine-readable output: one JSON document on stdout\n"
	        "  --socket PATH  the daemon's socket (default %s/slated.sock, env SLATE_SOCKET)\n"
	        "  --host ssh://[USER@]HOST[:PORT]\n"
	        "                 the daemon on HOST, reached with ssh (env SLATE_HOST; the ssh\n"
	        "                 command: env SLATE_SSH)\n"
	        "  -h, --help     this help\n"
	        "  -V, --version  print the client version\n",
	        SLATE_RUNTIME_DIR);
}

int slate_getopt_name(int argc, char **argv, const char *optstring, const struct option *longopts,
                      int *longindex, const char **name)
{
	int c;

	for (;;) {
		c = getopt_long(argc, argv, optstring, longopts, longindex);
		if (c >= 0 || *name || optind >= argc)
			return c;
		/* Stopped at "--" before NAME, or at NAME itself: take NAME, go on with options. */
		*name = argv[optind++];
	}
}

int slate_common_option(struct slate_ctx *ctx, int opt, const char *arg)
{
	switch (opt) {
	case OPT_JSON:
		ctx->json = true;
		return 1;
	case OPT_SOCKET:
		ctx->socket = arg;
		ctx->socket_opt = true;
		if (ctx->host_opt)
			exit(slate_usage_error(ctx, "--host and --socket exclude each other"));
		return 1;
	case OPT_REMOTE: {
		struct api_endpoint ep;
		char why[256];

		if (api_endpoint_parse_host(arg, &ep, why, sizeof(why)) < 0)
			exit(slate_usage_error(ctx, "invalid --host '%s': %s", arg, why));
		ctx->host = arg;
		ctx->host_opt = true;
		if (ctx->socket_opt)
			exit(slate_usage_error(ctx, "--host and --socket exclude each other"));
		return 1;
	}
	default:
		return 0;
	}
}

void slate_vsay(const char *what, const char *fmt, va_list ap)
{
	fprintf(stderr, "slate: %s: ", what);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int slate_fail(const char *what, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	slate_vsay(what, fmt, ap);
	va_end(ap);
	return EXIT_FAILURE;
}

int slate_help_or_unknown(const struct slate_ctx *ctx, const char *what, int c, const char *usage,
                          char **argv)
{
	if (c == 'h' || c == OPT_HELP) {
		fputs(usage, stdout);
		return EXIT_SUCCESS;
	}
	return slate_usage_error(ctx, "%s: unknown option '%s'", what, argv[optind - 1]);
}

int slate_usage_error(const struct slate_ctx *ctx, const char *fmt, ...)
{
	va_list ap;

	fputs("slate: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (ctx && ctx->command)
		fprintf(stderr, "\nTry 'slate %s --help'.\n", ctx->command);
	else
		fprintf(stderr, "\nTry 'slate --help'.\n");
	return EXIT_USAGE;
}

/* Appends the names of subs to buf as "a, b or c" (last "or") or "a, b, c" (last ", "). */
static void subcommand_names(char *buf, size_t size, const struct slate_subcommand *subs, size_t n,
                             const char *last)
{
	size_t len = 0;

	buf[0] = 0;
	for (size_t i = 0; i < n && len < size; i++) {
		const char *sep = i == 0 ? "" : i + 1 == n ? last : ", ";
		int k = snprintf(buf + len, size - len, "%s%s", sep, subs[i].name);
		if (k < 0)
			break;
		len += (size_t)k;
	}
}

int slate_dispatch(struct slate_ctx *ctx, const char *usage, const struct slate_subcommand *subs,
                   size_t n, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	const char *group = ctx->command;
	char names[256];
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		return slate_help_or_unknown(ctx, group, c, usage, argv);
	}
	if (optind >= argc) {
		subcommand_names(names, sizeof(names), subs, n, " or ");
		return slate_usage_error(ctx, "%s: %s?", group, names);
	}
	for (size_t i = 0; i < n; i++) {
		if (!streq(argv[optind], subs[i].name))
			continue;
		argc -= optind;
		argv += optind;
		optind = 0;
		return subs[i].fn(ctx, argc, argv);
	}
	subcommand_names(names, sizeof(names), subs, n, ", ");
	return slate_usage_error(ctx, "%s: unknown subcommand '%s' (%s)", group, argv[optind],
	                         names);
}

int slate_api_fail(const char *what, const struct api_error *err)
{
	return slate_fail(what, "%s", err->message[0] ? err->message : slate_strerror(err->code));
}

int slate_endpoint(const struct slate_ctx *ctx, struct api_endpoint *ret)
{
	const char *ssh = getenv("SLATE_SSH");
	char why[256];
	int r;

	/* --socket on the command line beats SLATE_HOST in the environment. */
	if (ctx->host && *ctx->host && (ctx->host_opt || !ctx->socket_opt)) {
		r = api_endpoint_parse_host(ctx->host, ret, why, sizeof(why));
		if (r < 0)
			return slate_usage_error(ctx, "invalid %s '%s': %s",
			                         ctx->host_opt ? "--host" : "SLATE_HOST", ctx->host,
			                         why),
			       r;
		ret->ssh_command = ssh && *ssh ? ssh : NULL;
		return 0;
	}
	r = api_endpoint_unix(ctx->socket, ret);
	if (r < 0)
		return slate_fail(ctx->command, "socket path too long: %s", ctx->socket), r;
	return 0;
}

int slate_client(const struct slate_ctx *ctx, struct api_client **ret)
{
	struct api_endpoint ep;
	int r = slate_endpoint(ctx, &ep);

	if (r < 0)
		return r;
	r = api_client_new_endpoint(&ep, ret);
	if (r < 0)
		return slate_fail(ctx->command, "%s", slate_strerror(r)), r;
	return 0;
}

int slate_print_json(struct json_object *obj)
{
	puts(json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
	                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
	return 0;
}

int slate_print_progress(struct json_object *ev, void *userdata)
{
	const struct slate_progress *p = userdata;
	const char *step = NULL, *detail = "";
	int64_t waiting = -1;

	if ((p->ctx && p->ctx->json) || json_get_string(ev, "step", &step) < 0)
		return 0;
	(void)json_get_string(ev, "detail", &detail);
	/* slated repeats the last step with waiting_s while it waits (on libvirt, the guest). */
	(void)json_get_int64(ev, "waiting_s", &waiting);
	fprintf(stderr, "%s[%5.1fs] %s%s%s", p->prefix ? p->prefix : "", time_mono_s() - p->t0,
	        step, *detail ? ": " : "", detail);
	if (waiting >= 0)
		fprintf(stderr, " (still waiting, %lld s)", (long long)waiting);
	fputc('\n', stderr);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"host", required_argument, NULL, OPT_REMOTE},
	        {"version", no_argument, NULL, 'V'},
	        {},
	};
	struct slate_ctx ctx = {.socket = getenv("SLATE_SOCKET"), .host = getenv("SLATE_HOST")};
	int c;

	log_open("slate", LOG_TARGET_STDERR);
	log_set_max_level(LOG_WARNING);
	if (!ctx.socket || !*ctx.socket)
		ctx.socket = SLATE_RUNTIME_DIR "/slated.sock";

	/* '+': stop at the command; what follows belongs to it. */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hV", longopts, NULL)) >= 0) {
		if (slate_common_option(&ctx, c, optarg))
			continue;
		switch (c) {
		case 'h':
		case OPT_HELP:
			usage(stdout);
			return EXIT_SUCCESS;
		case 'V':
			printf("slate %s (API version %d)\n", SLATE_VERSION, SLATE_API_VERSION);
			return EXIT_SUCCESS;
		default:
			fprintf(stderr, "slate: unknown option '%s'\n", argv[optind - 1]);
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "slate: no command given\n");
		usage(stderr);
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
		if (!streq(argv[optind], commands[i].name))
			continue;
		ctx.command = commands[i].name;
		argc -= optind;
		argv += optind;
		optind = 0; /* reset getopt for the command's own options */
		return commands[i].fn(&ctx, argc, argv);
	}
	fprintf(stderr, "slate: unknown command '%s'\n", argv[optind]);
	usage(stderr);
	return EXIT_USAGE;
}

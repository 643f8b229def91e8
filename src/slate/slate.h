/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Shared by the command groups of the slate client. */

#include <curl/curl.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/client.h"
#include "api/dial.h"
#include "util/macro.h"

#define EXIT_USAGE 2
/* slate probe found bytes the workspace never wrote (doc/residue.md). */
#define EXIT_FOREIGN 3

struct slate_ctx {
	bool json;
	const char *socket;        /* --socket, SLATE_SOCKET or the default */
	const char *host;          /* --host, else SLATE_HOST (ssh://...), else NULL */
	bool socket_opt, host_opt; /* given on the command line */
	const char *command;       /* for messages: "version", "image ls"... */
};

/* Long options every command accepts; append to a command's own table with SLATE_COMMON_OPTS.
 * --host (OPT_REMOTE) is slate's own, before the command, as docker's -H is: "secret set --host"
 * is another option. */
enum { OPT_JSON = 1000, OPT_SOCKET, OPT_REMOTE, OPT_HELP };
#define SLATE_COMMON_OPTS                                                                          \
	{"json", no_argument, NULL, OPT_JSON}, {"socket", required_argument, NULL, OPT_SOCKET},    \
	{                                                                                          \
		"help", no_argument, NULL, OPT_HELP                                                \
	}

/* Handles a common option; returns 1 if it was one, 0 if not. A --host that is not an
 * ssh:// URL, or --host with --socket, ends the program with a usage error. */
int slate_common_option(struct slate_ctx *ctx, int opt, const char *arg);

/*
 * getopt_long for commands of the form "CMD [OPTION]... NAME [OPTION]... [--] ARG...": options
 * go before or after NAME alike, and parsing stops for good at "--" or at the first non-option
 * after NAME (the command to run, with its own options). The first non-option is stored in
 * *name (which starts NULL). optstring must begin with '+'. Returns as getopt_long does.
 */
int slate_getopt_name(int argc, char **argv, const char *optstring, const struct option *longopts,
                      int *longindex, const char **name);

/* Prints "slate: what: why" to stderr. Returns EXIT_FAILURE. */
int slate_fail(const char *what, const char *fmt, ...) _printf_(2, 3);
/* Prints "slate: WHAT: " and the message, as slate_fail does. */
void slate_vsay(const char *what, const char *fmt, va_list ap) _printf_(2, 0);
/* For an option a command does not take: -h/--help prints usage and gives EXIT_SUCCESS, anything
 * else is "WHAT: unknown option" (EXIT_USAGE). */
int slate_help_or_unknown(const struct slate_ctx *ctx, const char *what, int c, const char *usage,
                          char **argv);
/* Prints "slate: message" and a hint to stderr. Returns EXIT_USAGE. */
int slate_usage_error(const struct slate_ctx *ctx, const char *fmt, ...) _printf_(2, 3);
/* Prints the failed API call's error. Returns EXIT_FAILURE. */
int slate_api_fail(const char *what, const struct api_error *err);

/* A subcommand of a command group (slate image ls, slate secret set...): argv[0] is its name. */
struct slate_subcommand {
	const char *name;
	int (*fn)(struct slate_ctx *ctx, int argc, char **argv);
};
/*
 * Runs a command group: takes the group's own options (the common ones, -h/--help printing
 * usage) up to the subcommand, then runs the subcommand of subs (n of them) named next, with
 * getopt reset and argv starting at its name. A missing or unknown subcommand is a usage error
 * that lists them all. Returns the exit status.
 */
int slate_dispatch(struct slate_ctx *ctx, const char *usage, const struct slate_subcommand *subs,
                   size_t n, int argc, char **argv);

/*
 * Where slated is: --host (or SLATE_HOST, when --socket is not given) as ssh://, with SLATE_SSH
 * as the ssh command; else the socket. Returns 0, or prints why and returns < 0.
 */
int slate_endpoint(const struct slate_ctx *ctx, struct api_endpoint *ret);
/* Connects (lazily) to the daemon at slate_endpoint(). Returns 0 or prints and returns < 0. */
int slate_client(const struct slate_ctx *ctx, struct api_client **ret);
/* Prints obj on stdout as one pretty JSON document. Returns 0. */
int slate_print_json(struct json_object *obj);
/* slated's step/detail progress events of a long operation, on stderr (stdout keeps only the
 * outcome or the JSON document): "[  1.2s] step: detail", with "(still waiting, N s)" when slated
 * repeats a step it waits on, behind prefix when set ("slate: ci gitlab prepare: "). Nothing with
 * ctx->json. The api_client_call progress callback for a struct slate_progress. */
struct slate_progress {
	const struct slate_ctx *ctx; /* may be NULL: always printed */
	const char *prefix;          /* may be NULL */
	double t0;                   /* time_mono_s() at the start */
};
int slate_print_progress(struct json_object *ev, void *userdata);

int cmd_version(struct slate_ctx *ctx, int argc, char **argv);
int cmd_doctor(struct slate_ctx *ctx, int argc, char **argv);
int cmd_create(struct slate_ctx *ctx, int argc, char **argv);
int cmd_ls(struct slate_ctx *ctx, int argc, char **argv);
int cmd_describe(struct slate_ctx *ctx, int argc, char **argv);
int cmd_reset(struct slate_ctx *ctx, int argc, char **argv);
int cmd_wipe_home(struct slate_ctx *ctx, int argc, char **argv);
int cmd_wipe(struct slate_ctx *ctx, int argc, char **argv);
int cmd_rm(struct slate_ctx *ctx, int argc, char **argv);
int cmd_checkpoint(struct slate_ctx *ctx, int argc, char **argv);
int cmd_image(struct slate_ctx *ctx, int argc, char **argv);
/* In catalog.c: slate catalog update|show, and image pull/verify for image.c. */
int cmd_catalog(struct slate_ctx *ctx, int argc, char **argv);
int image_pull_cmd(struct slate_ctx *ctx, int argc, char **argv);
int image_verify_cmd(struct slate_ctx *ctx, int argc, char **argv);
int cmd_start(struct slate_ctx *ctx, int argc, char **argv);
int cmd_stop(struct slate_ctx *ctx, int argc, char **argv);
int cmd_probe(struct slate_ctx *ctx, int argc, char **argv);
/* In vm.c: POST /v1/workspaces/NAME/probe (regions 0: the default; marker may be NULL), with
 * progress on stderr; and the result as `slate probe` prints it. */
int slate_probe_call(struct slate_ctx *ctx, const char *name, unsigned regions, const char *marker,
                     struct json_object **ret);
void slate_probe_print(struct json_object *res);
int cmd_console(struct slate_ctx *ctx, int argc, char **argv);
int cmd_exec(struct slate_ctx *ctx, int argc, char **argv);
/* A command run in a workspace's guest, as 'slate exec' runs it. */
struct exec_opts {
	bool interactive, tty, login; /* interactive: forward stdin (else it reads end of file) */
	uint32_t timeout_s;
	const char *user, *workdir;
	char **argv;
	int argc;
};
/*
 * Runs o's command in the running workspace name like 'slate exec', with its stdin read from
 * in_fd (when o->interactive; EOF there is passed on) and its stdout and stderr written to out_fd
 * and err_fd. Returns the exit status as 'slate exec' would; *ret_ended (may be NULL) says
 * whether that is the command's own (it ended: 0-255, 128+N for signal N) rather than slate's
 * (slated unreachable, the session ended by slated: the reason was printed to stderr).
 */
int slate_exec_fds(struct slate_ctx *ctx, const char *what, const char *name,
                   const struct exec_opts *o, int in_fd, int out_fd, int err_fd, bool *ret_ended);
int cmd_shell(struct slate_ctx *ctx, int argc, char **argv);
int cmd_run(struct slate_ctx *ctx, int argc, char **argv);
/* cp.c: slate cp SRC DEST, between the host and a running workspace. */
int cmd_cp(struct slate_ctx *ctx, int argc, char **argv);
/* sshkey.c: slate ssh-key generate|show|import. */
int cmd_ssh_key(struct slate_ctx *ctx, int argc, char **argv);
/* secret.c: slate secret set|ls|rm. */
int cmd_secret(struct slate_ctx *ctx, int argc, char **argv);
/* egress.c: slate egress NAME (allow-all|deny-all|allow HOST|deny HOST|ls). */
int cmd_egress(struct slate_ctx *ctx, int argc, char **argv);
/* trace.c: slate trace NAME [--leaks]. */
int cmd_trace(struct slate_ctx *ctx, int argc, char **argv);
/* slate browser (browser.c): the workspace's browser VM. */
int cmd_browser(struct slate_ctx *ctx, int argc, char **argv);
/* system.c: slate system dial-stdio. */
int cmd_system(struct slate_ctx *ctx, int argc, char **argv);

/* In workspace.c: a workspace shape's options as create, image snapshot and ci gitlab take
 * them: --memory is MiB or a size with a unit ("4G"), at most 16 TiB; --cpus 1 to 256. 0, or
 * -EINVAL (the caller says which option and why). */
int slate_parse_memory(const char *arg, uint64_t *ret_mib);
int slate_parse_cpus(const char *arg, uint64_t *ret);
/* In workspace.c: --share HOSTDIR[:GUESTDIR][:ro] into shares. 0, or an exit status. */
int slate_parse_share(const struct slate_ctx *ctx, const char *arg, struct json_object *shares);
/* create's and run's --egress (opt "egress": allow-all|deny-all), --allow and --deny (opt "allow",
 * "deny": a HOST rule appended to egress's "rules" in the order given) into egress, the body's
 * {"default"?, "rules"?} that slated checks as `slate egress` would. Returns 0, or the exit
 * status after the message (EXIT_USAGE for a bad --egress value). */
int slate_egress_option(const struct slate_ctx *ctx, const char *opt, const char *arg,
                        struct json_object *egress);
/* ci.c: slate ci gitlab config|prepare|run|cleanup, a GitLab Runner custom executor driver. */
int cmd_ci(struct slate_ctx *ctx, int argc, char **argv);

/* In vm.c: an API connection upgraded to protocol (see there). */
int slate_upgrade(const struct slate_ctx *ctx, struct api_conn *conn, const char *what,
                  const char *path, const char *protocol, struct json_object *body, char *extra,
                  size_t *extra_len);

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate system dial-stdio: the remote end of "slate --host ssh://...". ssh runs it on slated's
 * host as the user who logged in; it connects to the local socket, so slated's SO_PEERCRED sees
 * that user, and copies stdin to the socket and the socket to stdout (api_bridge()).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/dial.h"
#include "slate.h"
#include "util/error.h"

static const char usage_text[] =
        "Usage: slate system dial-stdio [--socket PATH]\n"
        "\n"
        "Connect to slated's socket and copy stdin to it and its output to stdout until\n"
        "slated closes the connection. 'slate --host ssh://HOST' runs it on HOST through ssh;\n"
        "it is not meant to be run by hand.\n";

static int dial_stdio(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	struct api_endpoint ep;
	struct api_conn conn = API_CONN_NULL;
	char why[1024];
	int c, r;

	ctx->command = "system dial-stdio";
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		return slate_help_or_unknown(ctx, "system dial-stdio", c, usage_text, argv);
	}
	if (optind < argc)
		return slate_usage_error(ctx, "system dial-stdio: unexpected argument '%s'",
		                         argv[optind]);
	/* Always this host's socket: a SLATE_HOST in the remote environment must not loop. */
	if (ctx->host_opt)
		return slate_usage_error(ctx, "system dial-stdio: it serves slated's own host; "
		                              "--host makes no sense here");
	if (api_endpoint_unix(ctx->socket, &ep) < 0)
		return slate_fail(ctx->command, "socket path too long: %s", ctx->socket);
	if (api_dial(&ep, &conn, why, sizeof(why)) < 0)
		return slate_fail(ctx->command, "%s", why);
	r = api_bridge(STDIN_FILENO, STDOUT_FILENO, conn.fd);
	(void)api_conn_close(&conn);
	if (r < 0)
		return slate_fail(ctx->command, "%s", slate_strerror(r));
	return EXIT_SUCCESS;
}

int cmd_system(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct slate_subcommand subs[] = {
	        {"dial-stdio", dial_stdio},
	};

	return slate_dispatch(ctx, usage_text, subs, ELEMENTSOF(subs), argc, argv);
}

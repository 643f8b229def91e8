/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate version: the client's version and, round-tripped through the socket, the daemon's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/client.h"
#include "slate.h"
#include "util/error.h"
#include "util/json.h"
#include "version.h"

static void version_usage(FILE *f)
{
	fprintf(f, "Usage: slate version [--json] [--socket PATH] [--client]\n"
	           "Print the client's version and the daemon's (asked through its socket).\n"
	           "  --client   the client's version only; does not contact the daemon\n");
}

int cmd_version(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_CLIENT = 1 };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"client", no_argument, NULL, OPT_CLIENT},
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *reply = NULL, *out = NULL;
	struct api_error err;
	const char *dver = NULL;
	int64_t dapi = 0, dpid = 0;
	bool client_only = false;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_CLIENT:
			client_only = true;
			break;
		case 'h':
		case OPT_HELP:
			version_usage(stdout);
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "version: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (optind < argc)
		return slate_usage_error(ctx, "version: unexpected argument '%s'", argv[optind]);

	out = json_object_new_object();
	if (!out)
		return slate_fail("version", "out of memory");
	(void)json_add_string(out, "client_version", SLATE_VERSION);
	(void)json_add_int64(out, "client_api_version", SLATE_API_VERSION);

	if (!client_only) {
		r = slate_client(ctx, &client);
		if (r < 0)
			return EXIT_FAILURE;
		r = api_client_call(client, "GET", "/v1/version", NULL, NULL, NULL, &reply, &err);
		if (r < 0)
			return slate_api_fail("version", &err);
		if (json_get_string(reply, "version", &dver) < 0 ||
		    json_get_int64(reply, "api_version", &dapi) < 0)
			return slate_fail("version", "slated's reply has no version");
		(void)json_get_int64(reply, "pid", &dpid);
		(void)json_add_string(out, "daemon_version", dver);
		(void)json_add_int64(out, "daemon_api_version", dapi);
		(void)json_add_int64(out, "daemon_pid", dpid);
		/* Where slated was reached: its socket, or "host" for ssh://. */
		(void)json_add_string(
		        out,
		        strncmp(api_client_socket(client), "ssh://", 6) == 0 ? "host" : "socket",
		        api_client_socket(client));
	}

	if (ctx->json)
		return slate_print_json(out), EXIT_SUCCESS;
	printf("client: slate %s (API version %d)\n", SLATE_VERSION, SLATE_API_VERSION);
	if (!client_only)
		printf("daemon: slated %s (API version %lld, pid %lld, %s)\n", dver,
		       (long long)dapi, (long long)dpid, api_client_socket(client));
	return EXIT_SUCCESS;
}

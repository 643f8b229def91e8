/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate doctor: asks slated to check the host and shows each check as it completes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/client.h"
#include "slate.h"
#include "util/json.h"

static void doctor_usage(FILE *f)
{
	fprintf(f, "Usage: slate doctor [--json] [--socket PATH]\n"
	           "Check what slated needs: its state directory (and whether QEMU's user can\n"
	           "reach it), reflinks, libvirt (and how long a define takes), KVM, vsock.\n"
	           "Exit status 1 when a check failed.\n");
}

static void print_check(struct json_object *c)
{
	const char *name = "?", *status = "?", *detail = "";

	(void)json_get_string(c, "check", &name);
	(void)json_get_string(c, "status", &status);
	(void)json_get_string(c, "detail", &detail);
	printf("%-5s %-10s %s\n",
	       streq(status, "ok")     ? "ok"
	       : streq(status, "warn") ? "warn"
	                               : "FAIL",
	       name, detail);
	fflush(stdout);
}

static int on_progress(struct json_object *ev, void *userdata)
{
	const struct slate_ctx *ctx = userdata;
	int64_t waiting;

	/* With --json only the final document goes to stdout; a keep-alive repeats a check. */
	if (!ctx->json && json_get_int64(ev, "waiting_s", &waiting) < 0)
		print_check(ev);
	return 0;
}

int cmd_doctor(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *result = NULL;
	struct api_error err;
	int64_t failed = 0;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == 'h' || c == OPT_HELP) {
			doctor_usage(stdout);
			return EXIT_SUCCESS;
		}
		return slate_usage_error(ctx, "doctor: unknown option '%s'", argv[optind - 1]);
	}
	if (optind < argc)
		return slate_usage_error(ctx, "doctor: unexpected argument '%s'", argv[optind]);

	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	if (api_client_call(client, "GET", "/v1/system/check", NULL, on_progress, ctx, &result,
	                    &err) < 0)
		return slate_api_fail("doctor", &err);
	(void)json_get_int64(result, "failed", &failed);
	if (ctx->json) {
		json_object_object_del(result, "type");
		slate_print_json(result);
	} else {
		printf("%lld check%s failed\n", (long long)failed, failed == 1 ? "" : "s");
	}
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

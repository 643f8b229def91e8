/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate doctor: asks slated to check the host and shows each check as it completes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/client.h"
#include "slate.h"
#include "util/json.h"

static void doctor_usage(FILE *f)
{
	fprintf(f,
	        "Usage: slate doctor [--json] [--socket PATH]\n"
	        "       slate doctor --residue [--image ID] [--fill MIB] [--regions N] [--json]\n"
	        "Check what slated needs: its state directory (and whether QEMU's user can\n"
	        "reach it), reflinks, libvirt (and how long a define takes), KVM, vsock.\n"
	        "Exit status 1 when a check failed.\n"
	        "--residue (root): a throwaway workspace fills MIB (default 256) of its disk and\n"
	        "home with a marker and is deleted; a second one, made right after on the same\n"
	        "storage, is probed as 'slate probe' does. Exit status 3 when it finds "
	        "anything.\n");
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

/* The residue check's steps, on stderr (stdout holds the outcome). */
static int on_residue_progress(struct json_object *ev, void *userdata)
{
	const struct slate_ctx *ctx = userdata;
	const char *step = "?", *detail = "";

	if (ctx->json)
		return 0;
	(void)json_get_string(ev, "step", &step);
	(void)json_get_string(ev, "detail", &detail);
	fprintf(stderr, "%s%s%s\n", step, *detail ? ": " : "", detail);
	return 0;
}

static int residue(struct slate_ctx *ctx, const char *image, int64_t fill, int64_t regions)
{
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *body = json_object_new_object(), *res = NULL;
	const char *storage = "?";
	struct api_error err;
	bool pass = false;
	int64_t foreign = 0, markers = 0;

	if (!body || (image && json_add_string(body, "image", image) < 0) ||
	    (fill && json_add_int64(body, "fill_mib", fill) < 0) ||
	    (regions && json_add_int64(body, "regions", regions) < 0))
		return slate_fail("doctor", "out of memory");
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	if (api_client_call(client, "POST", "/v1/system/residue", body, on_residue_progress, ctx,
	                    &res, &err) < 0)
		return slate_api_fail("doctor --residue", &err);
	(void)json_get_bool(res, "pass", &pass);
	(void)json_get_string(res, "storage", &storage);
	(void)json_get_int64(res, "foreign_bytes", &foreign);
	(void)json_get_int64(res, "marker_hits", &markers);
	if (ctx->json) {
		json_object_object_del(res, "type");
		slate_print_json(res);
	} else {
		slate_probe_print(res);
		printf("%-5s residue   %s storage: %lld foreign bytes, the previous tenant's "
		       "marker "
		       "%lld times\n",
		       pass ? "ok" : "FAIL", storage, (long long)foreign, (long long)markers);
	}
	return pass ? EXIT_SUCCESS : EXIT_FOREIGN;
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
	enum { OPT_RESIDUE = 1, OPT_IMAGE, OPT_FILL, OPT_REGIONS };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"residue", no_argument, NULL, OPT_RESIDUE},
	        {"image", required_argument, NULL, OPT_IMAGE},
	        {"fill", required_argument, NULL, OPT_FILL},
	        {"regions", required_argument, NULL, OPT_REGIONS},
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *result = NULL;
	const char *image = NULL;
	bool want_residue = false;
	int64_t failed = 0, fill = 0, regions = 0;
	struct api_error err;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		char *end;
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_RESIDUE:
			want_residue = true;
			break;
		case OPT_IMAGE:
			image = optarg;
			break;
		case OPT_FILL:
		case OPT_REGIONS:
			errno = 0;
			*(c == OPT_FILL ? &fill : &regions) = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end ||
			    (c == OPT_FILL ? fill : regions) < 1 ||
			    (c == OPT_FILL ? fill : regions) > 65536)
				return slate_usage_error(ctx, "doctor: --%s %s: 1 to 65536",
				                         c == OPT_FILL ? "fill" : "regions",
				                         optarg);
			break;
		case 'h':
		case OPT_HELP:
			doctor_usage(stdout);
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "doctor: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (optind < argc)
		return slate_usage_error(ctx, "doctor: unexpected argument '%s'", argv[optind]);
	if (!want_residue && (image || fill || regions))
		return slate_usage_error(ctx,
		                         "doctor: --image, --fill and --regions go with --residue");
	if (want_residue)
		return residue(ctx, image, fill, regions);

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

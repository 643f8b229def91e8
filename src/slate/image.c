/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate image ls | import | pull | verify (pull and verify are in catalog.c). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/client.h"
#include "image/store.h"
#include "slate.h"
#include "util/json.h"
#include "util/size.h"
#include "util/time.h"

static const char image_usage[] =
        "Usage: slate image ls\n"
        "       slate image import ID FILE [--kernel FILE --initrd FILE [--cmdline ARGS]] "
        "[--replace]\n"
        "       slate image pull ID [--yes]\n"
        "       slate image verify [ID]\n"
        "List the installed images; register a local raw image the administrator trusts "
        "(import, root only); download, check and install an image of the signed catalog "
        "(pull: asks before running postinstall steps not applied yet, --yes accepts them); "
        "re-hash installed images against their recorded digests (verify).\n";

static int image_ls(struct slate_ctx *ctx, struct api_client *client)
{
	_cleanup_json_ struct json_object *reply = NULL;
	struct json_object *arr;
	struct api_error err;

	if (api_client_call(client, "GET", "/v1/images", NULL, NULL, NULL, &reply, &err) < 0)
		return slate_api_fail("image ls", &err);
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	if (json_get_array(reply, "images", &arr) < 0)
		return slate_fail("image ls", "slated's reply has no image list");
	printf("%-24s %-8s %-16s %-9s %10s\n", "ID", "VERSION", "SOURCE", "BOOT", "SIZE");
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *im = json_object_array_get_idx(arr, i);
		const char *id = "?", *boot = "?";
		int64_t version = 0, size = 0;
		bool local = false;
		char sz[32];

		(void)json_get_string(im, "id", &id);
		(void)json_get_string(im, "boot", &boot);
		(void)json_get_int64(im, "version", &version);
		(void)json_get_int64(im, "size", &size);
		(void)json_get_bool(im, "local", &local);
		printf("%-24s %-8lld %-16s %-9s %10s\n", id, (long long)version,
		       local ? "local/unsigned" : "catalog/signed", boot,
		       size_format((uint64_t)size, sz, sizeof(sz)));
	}
	return EXIT_SUCCESS;
}

struct progress {
	const struct slate_ctx *ctx;
	bool tty;
	bool drew;
	double start; /* time_mono_s() */
};

static int on_progress(struct json_object *ev, void *ud)
{
	struct progress *p = ud;
	int64_t done = 0, total = 0;
	char a[32], b[32], r[32];
	double secs, rate;

	if (!p->tty || p->ctx->json)
		return 0;
	(void)json_get_int64(ev, "done", &done);
	(void)json_get_int64(ev, "total", &total);
	secs = time_mono_s() - p->start;
	rate = secs > 0 ? (double)done / secs : 0;
	fprintf(stderr, "\rimporting: %s / %s (%3d%%), %s/s, ETA %ds   ",
	        size_format((uint64_t)done, a, sizeof(a)),
	        size_format((uint64_t)total, b, sizeof(b)), total ? (int)(done * 100 / total) : 0,
	        size_format((uint64_t)rate, r, sizeof(r)),
	        rate > 0 ? (int)((double)(total - done) / rate) : 0);
	p->drew = true;
	return 0;
}

static int image_import(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_KERNEL = 1, OPT_INITRD, OPT_CMDLINE, OPT_REPLACE };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"kernel", required_argument, NULL, OPT_KERNEL},
	        {"initrd", required_argument, NULL, OPT_INITRD},
	        {"cmdline", required_argument, NULL, OPT_CMDLINE},
	        {"replace", no_argument, NULL, OPT_REPLACE},
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	struct progress prog = {.ctx = ctx, .tty = isatty(STDERR_FILENO)};
	char real[PATH_MAX];
	struct api_error err;
	int c;

	if (!body)
		return slate_fail("image import", "out of memory");
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_KERNEL:
		case OPT_INITRD:
			/* The daemon reads the files: it needs absolute paths. */
			if (!realpath(optarg, real))
				return slate_fail("image import", "%s: %s", optarg,
				                  strerror(errno));
			(void)json_add_string(body, c == OPT_KERNEL ? "kernel" : "initrd", real);
			break;
		case OPT_CMDLINE:
			(void)json_add_string(body, "cmdline", optarg);
			break;
		case OPT_REPLACE:
			(void)json_add_bool(body, "replace", true);
			break;
		case 'h':
		case OPT_HELP:
			fputs(image_usage, stdout);
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "image import: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (optind != argc - 2)
		return slate_usage_error(ctx, "image import: give ID and FILE");
	if (image_id_check(argv[optind]) < 0)
		return slate_usage_error(ctx, "image import: invalid image id '%s'", argv[optind]);
	if (!realpath(argv[optind + 1], real))
		return slate_fail("image import", "%s: %s", argv[optind + 1], strerror(errno));
	(void)json_add_string(body, "id", argv[optind]);
	(void)json_add_string(body, "path", real);

	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	prog.start = time_mono_s();
	if (api_client_call(client, "POST", "/v1/images", body, on_progress, &prog, &reply, &err) <
	    0) {
		if (prog.drew)
			fputc('\n', stderr);
		return slate_api_fail("image import", &err);
	}
	if (prog.drew)
		fputc('\n', stderr);
	json_object_object_del(reply, "type");
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	{
		const char *id = "?", *sha = "?";
		int64_t version = 0;
		(void)json_get_string(reply, "id", &id);
		(void)json_get_string(reply, "digest", &sha);
		(void)json_get_int64(reply, "version", &version);
		printf("imported image %s version %lld (%s), local and unsigned\n", id,
		       (long long)version, sha);
	}
	return EXIT_SUCCESS;
}

static int image_ls_cmd(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == 'h' || c == OPT_HELP) {
			fputs(image_usage, stdout);
			return EXIT_SUCCESS;
		}
		return slate_usage_error(ctx, "image ls: unknown option '%s'", argv[optind - 1]);
	}
	if (optind != argc)
		return slate_usage_error(ctx, "image ls: unexpected argument '%s'", argv[optind]);
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	return image_ls(ctx, client);
}

int cmd_image(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct slate_subcommand subs[] = {
	        {"ls", image_ls_cmd},
	        {"import", image_import},
	        {"pull", image_pull_cmd},
	        {"verify", image_verify_cmd},
	};

	return slate_dispatch(ctx, image_usage, subs, ELEMENTSOF(subs), argc, argv);
}

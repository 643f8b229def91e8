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
        "       slate image snapshot ID [--memory MIB] [--cpus N]\n"
        "List the installed images; register a local raw image the administrator trusts "
        "(import, root only); download, check and install an image of the signed catalog "
        "(pull: asks before running postinstall steps not applied yet, --yes accepts them); "
        "re-hash installed images against their recorded digests (verify); boot the image "
        "once and save it booted, so that fresh workspaces of that memory and vCPU count "
        "start by restoring it (snapshot, root only; default 2048 MiB, 2 vCPUs).\n";

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
	printf("%-24s %-8s %-16s %-9s %10s  %s\n", "ID", "VERSION", "SOURCE", "BOOT", "SIZE",
	       "SNAPSHOTS");
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		struct json_object *im = json_object_array_get_idx(arr, i);
		const char *id = "?", *boot = "?";
		int64_t version = 0, size = 0;
		bool local = false;
		char sz[32], snaps[256] = "-";
		struct json_object *sa = NULL;

		(void)json_get_string(im, "id", &id);
		(void)json_get_string(im, "boot", &boot);
		(void)json_get_int64(im, "version", &version);
		(void)json_get_int64(im, "size", &size);
		(void)json_get_bool(im, "local", &local);
		/* Booted snapshots as MEMORYxCPUS: the shapes whose fresh workspaces restore. */
		if (json_get_array(im, "snapshots", &sa) >= 0) {
			size_t o = 0;
			for (size_t k = 0; k < json_object_array_length(sa) && o < sizeof(snaps);
			     k++) {
				struct json_object *sn = json_object_array_get_idx(sa, k);
				int64_t m = 0, c = 0;
				bool making = false;
				const char *step = "";
				(void)json_get_int64(sn, "memory_mib", &m);
				(void)json_get_int64(sn, "cpus", &c);
				/* One being made shows its step: "512Mx1(making:saving)". */
				(void)json_get_bool(sn, "making", &making);
				(void)json_get_string(sn, "step", &step);
				o += (size_t)snprintf(snaps + o, sizeof(snaps) - o,
				                      "%s%lldMx%lld%s%s%s", o ? "," : "",
				                      (long long)m, (long long)c,
				                      making ? "(making:" : "", making ? step : "",
				                      making ? ")" : "");
			}
		}
		printf("%-24s %-8lld %-16s %-9s %10s  %s\n", id, (long long)version,
		       local ? "local/unsigned" : "catalog/signed", boot,
		       size_format((uint64_t)size, sz, sizeof(sz)), snaps);
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

static int image_snapshot(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_MEMORY = 1, OPT_CPUS };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"memory", required_argument, NULL, OPT_MEMORY},
	        {"cpus", required_argument, NULL, OPT_CPUS},
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	struct slate_progress prog = {.ctx = ctx};
	struct api_error err;
	char path[128];
	uint64_t v;
	int c;

	if (!body)
		return slate_fail("image snapshot", "out of memory");
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_MEMORY:
			if (slate_parse_memory(optarg, &v) < 0)
				return slate_usage_error(
				        ctx, "image snapshot: --memory %s: MiB or a size like 4G",
				        optarg);
			(void)json_add_int64(body, "memory_mib", (int64_t)v);
			break;
		case OPT_CPUS:
			if (slate_parse_cpus(optarg, &v) < 0)
				return slate_usage_error(ctx, "image snapshot: --cpus %s: 1 to 256",
				                         optarg);
			(void)json_add_int64(body, "cpus", (int64_t)v);
			break;
		case 'h':
		case OPT_HELP:
			fputs(image_usage, stdout);
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "image snapshot: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return slate_usage_error(ctx, "image snapshot: give one image ID");
	if (image_id_check(argv[optind]) < 0)
		return slate_usage_error(ctx, "image snapshot: invalid image id '%s'",
		                         argv[optind]);
	(void)snprintf(path, sizeof(path), "/v1/images/%s/snapshot", argv[optind]);
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	prog.t0 = time_mono_s();
	if (api_client_call(client, "POST", path, body, slate_print_progress, &prog, &reply, &err) <
	    0)
		return slate_api_fail("image snapshot", &err);
	json_object_object_del(reply, "type");
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	{
		const char *key = "?";
		int64_t m = 0, n = 0, bytes = 0;
		bool existed = false;
		char sz[32];
		(void)json_get_string(reply, "key", &key);
		(void)json_get_int64(reply, "memory_mib", &m);
		(void)json_get_int64(reply, "cpus", &n);
		(void)json_get_int64(reply, "state_bytes", &bytes);
		(void)json_get_bool(reply, "existed", &existed);
		if (existed)
			printf("image %s has booted snapshot %s (%lld MiB, %lld vCPU) already\n",
			       argv[optind], key, (long long)m, (long long)n);
		else
			printf("made booted snapshot %s of image %s (%lld MiB, %lld vCPU, %s of "
			       "state) in %.1f s\n",
			       key, argv[optind], (long long)m, (long long)n,
			       size_format((uint64_t)bytes, sz, sizeof(sz)),
			       json_object_get_double(json_object_object_get(reply, "total_s")));
	}
	return EXIT_SUCCESS;
}

int cmd_image(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct slate_subcommand subs[] = {
	        {"ls", image_ls_cmd},         {"import", image_import},
	        {"pull", image_pull_cmd},     {"verify", image_verify_cmd},
	        {"snapshot", image_snapshot},
	};

	return slate_dispatch(ctx, image_usage, subs, ELEMENTSOF(subs), argc, argv);
}

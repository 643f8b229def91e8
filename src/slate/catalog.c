/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate catalog update|show, slate image pull, slate image verify. */
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

static const char catalog_usage[] =
        "Usage: slate catalog update [--from URL|FILE]\n"
        "       slate catalog show\n"
        "Fetch and verify the signed image catalog (and its .sig beside it), or show the\n"
        "accepted one. Unsigned, untrusted, rolled-back, expired or other-channel catalogs are\n"
        "refused.\n";

/* A progress bar on a TTY (bytes, rate, ETA); a line per phase otherwise. */
struct bar {
	const struct slate_ctx *ctx;
	const char *verb;
	bool tty;
	bool drew;
	char phase[64];
	double start; /* time_mono_s() */
	int64_t start_done;
};

static void bar_end(struct bar *b)
{
	if (b->drew)
		fputc('\n', stderr);
	b->drew = false;
}

static int on_event(struct json_object *ev, void *ud)
{
	struct bar *b = ud;
	const char *phase = "", *artifact = NULL;
	int64_t done = 0, total = 0, attempt = 0, waiting = -1;
	bool resumed = false;
	char label[64], a[32], t[32], r[32];
	double secs, rate;

	if (b->ctx->json)
		return 0;
	(void)json_get_string(ev, "phase", &phase);
	(void)json_get_string(ev, "artifact", &artifact);
	(void)json_get_int64(ev, "done", &done);
	(void)json_get_int64(ev, "total", &total);
	(void)json_get_int64(ev, "attempt", &attempt);
	(void)json_get_bool(ev, "resumed", &resumed);
	(void)json_get_int64(ev, "waiting_s", &waiting);
	if (!*phase)
		return 0;
	/* A keep-alive repeats the last event: a line for a long postinstall step, else the bar. */
	if (waiting >= 0 && streq(phase, "postinstall-output"))
		return 0;
	if (waiting >= 0 && streq(phase, "postinstall")) {
		fprintf(stderr, "postinstall step %lld of %lld: still running (%lld s)\n",
		        (long long)done + 1, (long long)total, (long long)waiting);
		return 0;
	}
	/* Postinstall: a line per step, and the output of one that failed. */
	if (streq(phase, "postinstall") || streq(phase, "postinstall-output")) {
		const char *detail = "";
		(void)json_get_string(ev, "detail", &detail);
		bar_end(b);
		b->phase[0] = '\0';
		if (streq(phase, "postinstall"))
			fprintf(stderr, "postinstall step %lld of %lld: %s\n", (long long)done + 1,
			        (long long)total, detail);
		else
			fprintf(stderr,
			        "--- output of the failed step %s ---\n%s%s--- end of output ---\n",
			        artifact ? artifact : "", detail,
			        *detail && detail[strlen(detail) - 1] != '\n' ? "\n" : "");
		return 0;
	}
	(void)snprintf(label, sizeof(label), "%s%s%s", phase, artifact ? " " : "",
	               artifact ? artifact : "");
	if (!streq(label, b->phase)) {
		bar_end(b);
		(void)snprintf(b->phase, sizeof(b->phase), "%s", label);
		b->start = time_mono_s();
		b->start_done = done;
		if (!b->tty) {
			fprintf(stderr, "%s%s%s\n", label,
			        attempt > 1 ? (resumed ? " (resuming)" : " (again)") : "",
			        total > 0 ? "..." : "");
			return 0;
		}
	}
	if (!b->tty || total <= 0)
		return 0;
	secs = time_mono_s() - b->start;
	rate = secs > 0.05 ? (double)(done - b->start_done) / secs : 0;
	fprintf(stderr, "\r%-16s %9s / %-9s %3d%%  %9s/s  ETA %4ds%s   ", label,
	        size_format((uint64_t)done, a, sizeof(a)),
	        size_format((uint64_t)total, t, sizeof(t)), (int)(done * 100 / total),
	        size_format((uint64_t)rate, r, sizeof(r)),
	        rate > 0 ? (int)((double)(total - done) / rate) : 0,
	        attempt > 1 ? (resumed ? " (resumed)" : " (retry)") : "");
	b->drew = true;
	return 0;
}

static int catalog_print(struct json_object *c)
{
	const char *channel = "?", *expires = "?", *key = "?", *source = NULL;
	int64_t version = 0;
	struct json_object *images = NULL;
	size_t n;

	(void)json_get_string(c, "channel", &channel);
	(void)json_get_string(c, "expires", &expires);
	(void)json_get_string(c, "keyId", &key);
	(void)json_get_string(c, "source", &source);
	(void)json_get_int64(c, "version", &version);
	(void)json_get_array(c, "images", &images);
	n = images ? json_object_array_length(images) : 0;
	printf("catalog %s version %lld, signed by key %s, expires %s%s%s\n", channel,
	       (long long)version, key, expires, source ? ", from " : "", source ? source : "");
	if (n)
		printf("%-24s %-8s %-10s %-9s %10s  %s\n", "ID", "VERSION", "INSTALLED", "BOOT",
		       "SIZE", "DESCRIPTION");
	for (size_t i = 0; i < n; i++) {
		struct json_object *im = json_object_array_get_idx(images, i);
		const char *id = "?", *boot = "?", *desc = "";
		int64_t v = 0, size = 0;
		bool installed = false, local = false;
		char sz[32];

		(void)json_get_string(im, "id", &id);
		(void)json_get_string(im, "boot", &boot);
		(void)json_get_string(im, "description", &desc);
		(void)json_get_int64(im, "version", &v);
		(void)json_get_int64(im, "uncompressedSize", &size);
		(void)json_get_bool(im, "installed", &installed);
		(void)json_get_bool(im, "installed_local", &local);
		printf("%-24s %-8lld %-10s %-9s %10s  %s\n", id, (long long)v,
		       installed ? (local ? "local" : "yes") : "no", boot,
		       size_format((uint64_t)size, sz, sizeof(sz)), desc);
	}
	return EXIT_SUCCESS;
}

static int catalog_update_cmd(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_FROM = 1 };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"from", required_argument, NULL, OPT_FROM},
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	struct bar b = {.ctx = ctx, .tty = isatty(STDERR_FILENO)};
	const char *from = NULL;
	char real[PATH_MAX];
	struct api_error err;
	int c;

	if (!body)
		return slate_fail("catalog update", "out of memory");
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_FROM:
			from = optarg;
			break;
		case 'h':
		case OPT_HELP:
			fputs(catalog_usage, stdout);
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "catalog update: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (optind != argc)
		return slate_usage_error(ctx, "catalog update: unexpected argument '%s'",
		                         argv[optind]);
	if (from) {
		/* The daemon reads local files: it needs an absolute path. */
		if (!strstr(from, "://")) {
			if (!realpath(from, real))
				return slate_fail("catalog update", "%s: %s", from,
				                  strerror(errno));
			from = real;
		}
		(void)json_add_string(body, "from", from);
	}
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	if (api_client_call(client, "POST", "/v1/catalog/update", body, on_event, &b, &reply,
	                    &err) < 0) {
		bar_end(&b);
		return slate_api_fail("catalog update", &err);
	}
	bar_end(&b);
	json_object_object_del(reply, "type");
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	fputs("accepted: ", stdout);
	return catalog_print(reply);
}

static int catalog_show_cmd(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *reply = NULL;
	struct api_error err;
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == 'h' || c == OPT_HELP) {
			fputs(catalog_usage, stdout);
			return EXIT_SUCCESS;
		}
		return slate_usage_error(ctx, "catalog show: unknown option '%s'",
		                         argv[optind - 1]);
	}
	if (optind != argc)
		return slate_usage_error(ctx, "catalog show: unexpected argument '%s'",
		                         argv[optind]);
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	if (api_client_call(client, "GET", "/v1/catalog", NULL, NULL, NULL, &reply, &err) < 0)
		return slate_api_fail("catalog show", &err);
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	return catalog_print(reply);
}

int cmd_catalog(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct slate_subcommand subs[] = {
	        {"update", catalog_update_cmd},
	        {"show", catalog_show_cmd},
	};

	return slate_dispatch(ctx, catalog_usage, subs, ELEMENTSOF(subs), argc, argv);
}

/*
 * Lists the steps of image id in the accepted catalog that are not applied to the installed
 * image yet (those need consent); returns how many, and adds their uuids to uuids (may be NULL).
 */
static int list_steps(struct api_client *client, const char *id, FILE *f, struct json_object *uuids)
{
	_cleanup_json_ struct json_object *cat = NULL;
	struct json_object *images = NULL, *steps = NULL;
	struct api_error err;
	int n = 0;

	if (api_client_call(client, "GET", "/v1/catalog", NULL, NULL, NULL, &cat, &err) < 0 ||
	    json_get_array(cat, "images", &images) < 0)
		return 0;
	for (size_t i = 0; i < json_object_array_length(images); i++) {
		struct json_object *im = json_object_array_get_idx(images, i);
		const char *v = NULL;
		if (json_get_string(im, "id", &v) < 0 || !streq(v, id))
			continue;
		if (json_get_array(im, "postinstall", &steps) < 0)
			return 0;
		for (size_t k = 0; k < json_object_array_length(steps); k++) {
			struct json_object *s = json_object_array_get_idx(steps, k);
			const char *desc = "", *cmd = "", *uuid = "";
			bool applied = false;
			(void)json_get_bool(s, "applied", &applied);
			if (applied)
				continue;
			(void)json_get_string(s, "description", &desc);
			(void)json_get_string(s, "command", &cmd);
			(void)json_get_string(s, "uuid", &uuid);
			fprintf(f, "  %d. %s  [%s]\n       %s\n", n + 1, desc, uuid, cmd);
			if (uuids)
				(void)json_object_array_add(uuids, json_object_new_string(uuid));
			n++;
		}
	}
	return n;
}

int image_pull_cmd(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_YES = 1 };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"yes", no_argument, NULL, OPT_YES},
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	struct json_object *uuids = json_object_new_array();
	struct bar b = {.ctx = ctx, .tty = isatty(STDERR_FILENO)};
	struct json_object *pending = NULL;
	bool yes = false, up_to_date = false;
	const char *id;
	struct api_error err;
	int c, n;

	if (!body || !uuids || json_add(body, "accept_postinstall", uuids) < 0)
		return slate_fail("image pull", "out of memory");
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "hy", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case 'y':
		case OPT_YES:
			yes = true;
			break;
		case 'h':
		case OPT_HELP:
			fputs("Usage: slate image pull ID [--yes]\n"
			      "Download image ID from the accepted catalog, verify its size and "
			      "SHA-256,\n"
			      "expand it sparsely and install it, then run its postinstall steps "
			      "in an\n"
			      "installer VM. Steps not applied before are listed and need your "
			      "consent\n"
			      "(asked on a terminal; --yes accepts them).\n",
			      stdout);
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "image pull: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return slate_usage_error(ctx, "image pull: give one image ID");
	id = argv[optind];
	if (image_id_check(id) < 0)
		return slate_usage_error(ctx, "image pull: invalid image id '%s'", id);
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;

	/* Consent to the postinstall steps before anything is downloaded. */
	if (!yes && !ctx->json) {
		n = list_steps(client, id, stdout, uuids);
		if (n > 0) {
			char answer[16] = "";
			if (!isatty(STDIN_FILENO))
				return slate_usage_error(
				        ctx,
				        "image pull: image %s has %d postinstall "
				        "step%s (listed above): pass --yes to accept",
				        id, n, n == 1 ? "" : "s");
			printf("Accept these %d postinstall step%s for image %s? [y/N] ", n,
			       n == 1 ? "" : "s", id);
			fflush(stdout);
			if (!fgets(answer, sizeof(answer), stdin) ||
			    (answer[0] != 'y' && answer[0] != 'Y'))
				return slate_fail("image pull", "postinstall steps not accepted");
		}
	} else if (!yes && ctx->json && list_steps(client, id, stderr, NULL) > 0)
		return slate_usage_error(ctx, "image pull: postinstall steps need --yes");
	/* --yes accepts every step; otherwise exactly the ones shown and accepted above. */
	if (yes)
		(void)json_add_bool(body, "accept_postinstall", true);

	{
		char path[128];
		(void)snprintf(path, sizeof(path), "/v1/images/%s/pull", id);
		if (api_client_call(client, "POST", path, body, on_event, &b, &reply, &err) < 0) {
			bar_end(&b);
			return slate_api_fail("image pull", &err);
		}
	}
	bar_end(&b);
	json_object_object_del(reply, "type");
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	{
		const char *sha = "?";
		int64_t version = 0, downloaded = 0;
		char sz[32];

		(void)json_get_string(reply, "digest", &sha);
		(void)json_get_int64(reply, "version", &version);
		(void)json_get_int64(reply, "downloaded", &downloaded);
		(void)json_get_bool(reply, "up_to_date", &up_to_date);
		(void)json_get_array(reply, "postinstall_pending", &pending);
		if (up_to_date)
			printf("image %s is up to date (local version %lld, %s)\n", id,
			       (long long)version, sha);
		else
			printf("pulled image %s: local version %lld, %s downloaded, signed, "
			       "%s\n",
			       id, (long long)version,
			       size_format((uint64_t)downloaded, sz, sizeof(sz)), sha);
		{
			int64_t applied = 0;
			(void)json_get_int64(reply, "postinstall_applied", &applied);
			if (applied > 0)
				printf("%lld postinstall step%s applied: image %s is now local "
				       "version %lld (workspaces made from an older version see "
				       "base drift)\n",
				       (long long)applied, applied == 1 ? "" : "s", id,
				       (long long)version);
		}
		n = pending ? (int)json_object_array_length(pending) : 0;
		if (n > 0)
			printf("%d postinstall step%s still pending: the catalog changed "
			       "during the pull; pull again to review %s\n",
			       n, n == 1 ? "" : "s", n == 1 ? "it" : "them");
	}
	return EXIT_SUCCESS;
}

int image_verify_cmd(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	struct bar b = {.ctx = ctx, .tty = isatty(STDERR_FILENO)};
	struct json_object *images = NULL;
	struct api_error err;
	int64_t failed = 0;
	int c;

	if (!body)
		return slate_fail("image verify", "out of memory");
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == 'h' || c == OPT_HELP) {
			fputs("Usage: slate image verify [ID]\n"
			      "Re-hash installed images (all, or ID) against what was verified "
			      "when they\n"
			      "were installed and against the accepted catalog. Exit 1 if any "
			      "differs.\n",
			      stdout);
			return EXIT_SUCCESS;
		}
		return slate_usage_error(ctx, "image verify: unknown option '%s'",
		                         argv[optind - 1]);
	}
	if (optind < argc - 1)
		return slate_usage_error(ctx, "image verify: at most one image ID");
	if (optind == argc - 1) {
		if (image_id_check(argv[optind]) < 0)
			return slate_usage_error(ctx, "image verify: invalid image id '%s'",
			                         argv[optind]);
		(void)json_add_string(body, "id", argv[optind]);
	}
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	if (api_client_call(client, "POST", "/v1/images/verify", body, on_event, &b, &reply, &err) <
	    0) {
		bar_end(&b);
		return slate_api_fail("image verify", &err);
	}
	bar_end(&b);
	json_object_object_del(reply, "type");
	(void)json_get_int64(reply, "failed", &failed);
	if (ctx->json) {
		slate_print_json(reply);
		return failed ? EXIT_FAILURE : EXIT_SUCCESS;
	}
	(void)json_get_array(reply, "images", &images);
	for (size_t i = 0; images && i < json_object_array_length(images); i++) {
		struct json_object *im = json_object_array_get_idx(images, i);
		const char *id = "?", *cat = "", *file = "", *expected = "", *sha = "", *e = NULL;
		bool ok = false;

		(void)json_get_string(im, "id", &id);
		(void)json_get_bool(im, "ok", &ok);
		(void)json_get_string(im, "catalog", &cat);
		(void)json_get_string(im, "file", &file);
		(void)json_get_string(im, "expected", &expected);
		(void)json_get_string(im, "digest", &sha);
		(void)json_get_string(im, "error", &e);
		if (ok)
			printf("%s: OK (%s, catalog: %s)\n", id, sha, cat);
		else if (e)
			printf("%s: FAILED: %s: %s\n", id, file, e);
		else
			printf("%s: FAILED: %s has %s, expected %s\n", id, file, sha, expected);
	}
	if (failed)
		return slate_fail("image verify", "%lld image%s failed verification",
		                  (long long)failed, failed == 1 ? "" : "s");
	return EXIT_SUCCESS;
}

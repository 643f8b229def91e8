/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate browser NAME [start|stop|status|view] [--screenshot FILE]: the workspace's browser VM. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image/store.h"
#include "slate.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/time.h"
#include "workspace/workspace.h"

static const char usage_text[] =
        "Usage: slate browser NAME [start] [--image ID] [--memory MIB] [--cpus N]\n"
        "       slate browser NAME stop\n"
        "       slate browser NAME status\n"
        "       slate browser NAME view [--no-viewer]\n"
        "       slate browser NAME --screenshot FILE\n"
        "\n"
        "A disposable VM running headless Chromium for the agent in workspace NAME: its\n"
        "DevTools endpoint is 127.0.0.1:9222 inside the workspace's guest (Playwright,\n"
        "Puppeteer and other CDP clients connect there unchanged). The browser VM has no\n"
        "network: its traffic goes through slated's egress proxy under the workspace's policy\n"
        "and secret bindings, and shows in 'slate trace NAME'. Its disk is a copy-on-write\n"
        "overlay in the runtime directory; stop, the workspace's stop and slated's restart\n"
        "remove it, and nothing of the browser survives.\n"
        "\n"
        "  start            boot it (the default) and wait until DevTools answers\n"
        "  stop             close Chromium, then remove the VM and its disk\n"
        "  status           whether it runs, and its figures\n"
        "  view             watch or take over the browser's first page: VNC on a unix\n"
        "                   socket only you can open, shown with remote-viewer when it is\n"
        "                   installed (else the socket is printed)\n"
        "  --no-viewer      with view: print the socket, start no viewer\n"
        "  --screenshot FILE  write a PNG of the browser's first page to FILE (\"-\": stdout)\n"
        "  --image ID       the browser image (default: slate.conf's browser-image)\n"
        "  --memory MIB     memory of the browser VM (default 1024)\n"
        "  --cpus N         vCPUs of the browser VM (default 1)\n";

static int call(struct slate_ctx *ctx, const char *method, const char *path,
                struct json_object *body, struct slate_progress *prog, struct json_object **ret,
                struct api_error *err)
{
	_cleanup_(api_client_freep) struct api_client *client = NULL;

	if (slate_client(ctx, &client) < 0) {
		*err = (struct api_error){.code = -ECONNREFUSED};
		err->message[0] = '\0';
		return -1;
	}
	return api_client_call(client, method, path, body, prog ? slate_print_progress : NULL, prog,
	                       ret, err);
}

static double get_double(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

static void print_status(struct json_object *o)
{
	const char *name = "?", *state = "?", *image = "?", *domain = "?", *accel = "?",
	           *chromium = NULL;
	int64_t mem = 0, cpus = 0;
	bool persist = false;

	(void)json_get_string(o, "name", &name);
	(void)json_get_string(o, "state", &state);
	if (strcmp(state, "stopped") == 0) {
		printf("workspace %s has no browser running\n", name);
		return;
	}
	(void)json_get_string(o, "image", &image);
	(void)json_get_string(o, "domain", &domain);
	(void)json_get_string(o, "accelerator", &accel);
	(void)json_get_string(o, "chromium", &chromium);
	(void)json_get_int64(o, "memory_mib", &mem);
	(void)json_get_int64(o, "cpus", &cpus);
	(void)json_get_bool(o, "persist", &persist);
	printf("browser of %s: %s\n", name, state);
	printf("  domain       %s (%s, %lld MiB, %lld vCPU)\n", domain, accel, (long long)mem,
	       (long long)cpus);
	printf("  image        %s\n", image);
	printf("  profile      %s\n", persist ? "kept, encrypted" : "discarded at stop");
	printf("  DevTools     127.0.0.1:9222 in the workspace's guest\n");
	printf("  boot         %.1f s, DevTools ready %.1f s later\n", get_double(o, "boot_s"),
	       get_double(o, "cdp_ready_s"));
	if (chromium)
		printf("  chromium     %s\n", chromium);
}

static int write_png(const char *file, struct json_object *o)
{
	const char *b64 = NULL;
	_cleanup_free_ uint8_t *png = NULL;
	size_t len = 0, cap;
	_cleanup_close_ int fd = -1;

	if (json_get_string(o, "png_base64", &b64) < 0)
		return slate_fail("browser --screenshot", "slated sent no PNG");
	cap = strlen(b64) / 4 * 3 + 3;
	png = malloc(cap);
	if (!png)
		return slate_fail("browser --screenshot", "out of memory");
	if (sodium_base642bin(png, cap, b64, strlen(b64), NULL, &len, NULL,
	                      sodium_base64_VARIANT_ORIGINAL) != 0)
		return slate_fail("browser --screenshot", "slated sent a PNG that is not base64");
	if (strcmp(file, "-") == 0)
		fd = dup(STDOUT_FILENO);
	else
		fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
	if (fd < 0)
		return slate_fail("browser --screenshot", "cannot write %s: %s", file,
		                  strerror(errno));
	if (fs_write_all(fd, png, len) < 0)
		return slate_fail("browser --screenshot", "cannot write %s: %s", file,
		                  strerror(errno));
	return EXIT_SUCCESS;
}

/* POST .../browser/view, then remote-viewer on its socket, or how to connect. */
static int view(struct slate_ctx *ctx, const char *name, const char *path, bool no_viewer)
{
	_cleanup_json_ struct json_object *reply = NULL;
	_cleanup_free_ char *uri = NULL;
	const char *sock = NULL;
	struct api_error err;
	int64_t w = 0, h = 0;

	if (call(ctx, "POST", path, NULL, NULL, &reply, &err) < 0)
		return slate_api_fail("browser view", &err);
	if (json_get_string(reply, "socket", &sock) < 0)
		return slate_fail("browser view", "slated named no socket");
	(void)json_get_int64(reply, "width", &w);
	(void)json_get_int64(reply, "height", &h);
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	if (asprintf(&uri, "vnc+unix://%s", sock) < 0)
		return slate_fail("browser view", "out of memory");
	if (!no_viewer) {
		char *args[] = {(char *)"remote-viewer", (char *)"--title", (char *)"slate browser",
		                uri, NULL};
		fflush(stdout);
		(void)execvp(args[0], args);
		if (errno != ENOENT)
			fprintf(stderr, "slate: browser view: remote-viewer: %s\n",
			        strerror(errno));
	}
	printf("the browser of %s is on VNC at %s (%lldx%lld; only you can open it)\n", name, sock,
	       (long long)w, (long long)h);
	printf("  remote-viewer %s\n", uri);
	printf("  or a VNC viewer through TCP on this host only, e.g.:\n");
	printf("  socat TCP-LISTEN:5901,bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:%s &\n", sock);
	printf("  vncviewer 127.0.0.1::5901\n");
	return EXIT_SUCCESS;
}

int cmd_browser(struct slate_ctx *ctx, int argc, char **argv)
{
	enum {
		OPT_SCREENSHOT = 0x100,
		OPT_IMAGE,
		OPT_MEMORY,
		OPT_CPUS,
		OPT_PERSIST,
		OPT_NO_VIEWER
	};
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"screenshot", required_argument, NULL, OPT_SCREENSHOT},
	        {"image", required_argument, NULL, OPT_IMAGE},
	        {"memory", required_argument, NULL, OPT_MEMORY},
	        {"cpus", required_argument, NULL, OPT_CPUS},
	        {"persist", no_argument, NULL, OPT_PERSIST},
	        {"no-viewer", no_argument, NULL, OPT_NO_VIEWER},
	        {},
	};
	_cleanup_json_ struct json_object *body = json_object_new_object(), *reply = NULL;
	const char *name = NULL, *verb = NULL, *shot = NULL;
	struct slate_progress prog = {.ctx = ctx, .prefix = "browser"};
	struct api_error err;
	bool start_opts = false, no_viewer = false;
	char path[160];
	uint64_t v;
	int c;

	if (!body)
		return slate_fail("browser", "out of memory");
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, "-h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case 1: /* an operand, in order: NAME, then the verb */
			if (!name)
				name = optarg;
			else if (!verb)
				verb = optarg;
			else
				return slate_usage_error(ctx, "browser: unexpected argument '%s'",
				                         optarg);
			break;
		case OPT_SCREENSHOT:
			shot = optarg;
			break;
		case OPT_IMAGE:
			if (image_id_check(optarg) < 0)
				return slate_usage_error(
				        ctx, "browser: --image %s: invalid image id", optarg);
			(void)json_add_string(body, "image", optarg);
			start_opts = true;
			break;
		case OPT_MEMORY:
			if (slate_parse_memory(optarg, &v) < 0)
				return slate_usage_error(
				        ctx, "browser: --memory %s: MiB or a size like 4G", optarg);
			(void)json_add_int64(body, "memory_mib", (int64_t)v);
			start_opts = true;
			break;
		case OPT_CPUS:
			if (slate_parse_cpus(optarg, &v) < 0)
				return slate_usage_error(ctx, "browser: --cpus %s: 1 to 256",
				                         optarg);
			(void)json_add_int64(body, "cpus", (int64_t)v);
			start_opts = true;
			break;
		case OPT_PERSIST:
			(void)json_add_bool(body, "persist", true);
			start_opts = true;
			break;
		case OPT_NO_VIEWER:
			no_viewer = true;
			break;
		case 'h':
		case OPT_HELP:
			fputs(usage_text, stdout);
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "browser: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (!name)
		return slate_usage_error(ctx, "browser: give a workspace NAME");
	if (workspace_name_check(name) < 0)
		return slate_usage_error(ctx, "browser: invalid workspace name '%s'", name);
	if (shot && verb)
		return slate_usage_error(ctx, "browser: --screenshot takes no verb");
	if (!verb && !shot)
		verb = "start";
	if (verb && strcmp(verb, "start") != 0 && strcmp(verb, "stop") != 0 &&
	    strcmp(verb, "status") != 0 && strcmp(verb, "view") != 0)
		return slate_usage_error(
		        ctx, "browser: unknown verb '%s' (start, stop, status or view)", verb);
	if (no_viewer && (!verb || strcmp(verb, "view") != 0))
		return slate_usage_error(ctx, "browser: --no-viewer goes with view");
	if (start_opts && (shot || strcmp(verb, "start") != 0))
		return slate_usage_error(ctx,
		                         "browser: --image, --memory, --cpus and --persist go with "
		                         "start");
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/browser%s", name,
	               shot                        ? "/screenshot"
	               : strcmp(verb, "view") == 0 ? "/view"
	                                           : "");
	if (!shot && strcmp(verb, "view") == 0)
		return view(ctx, name, path, no_viewer);
	if (shot) {
		if (call(ctx, "GET", path, NULL, NULL, &reply, &err) < 0)
			return slate_api_fail("browser --screenshot", &err);
		if (ctx->json && strcmp(shot, "-") != 0) {
			int r = write_png(shot, reply);
			json_object_object_del(reply, "png_base64");
			(void)json_add_string(reply, "file", shot);
			return r == EXIT_SUCCESS ? (slate_print_json(reply), EXIT_SUCCESS) : r;
		}
		return write_png(shot, reply);
	}
	if (strcmp(verb, "status") == 0) {
		if (call(ctx, "GET", path, NULL, NULL, &reply, &err) < 0)
			return slate_api_fail("browser status", &err);
		if (ctx->json)
			return slate_print_json(reply), EXIT_SUCCESS;
		print_status(reply);
		return EXIT_SUCCESS;
	}
	if (strcmp(verb, "stop") == 0) {
		bool closed = false;
		if (call(ctx, "DELETE", path, NULL, NULL, &reply, &err) < 0)
			return slate_api_fail("browser stop", &err);
		if (ctx->json)
			return slate_print_json(reply), EXIT_SUCCESS;
		(void)json_get_bool(reply, "chromium_closed", &closed);
		printf("stopped the browser of %s in %.1f s%s\n", name, get_double(reply, "stop_s"),
		       closed ? "" : " (Chromium did not close cleanly: the VM was destroyed)");
		return EXIT_SUCCESS;
	}
	prog.t0 = time_mono_s();
	if (call(ctx, "POST", path, body, &prog, &reply, &err) < 0)
		return slate_api_fail("browser start", &err);
	json_object_object_del(reply, "type");
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	printf("browser of %s running: DevTools at 127.0.0.1:9222 in its guest (booted in "
	       "%.1f s, DevTools ready %.1f s later)\n",
	       name, get_double(reply, "boot_s"), get_double(reply, "cdp_ready_s"));
	return EXIT_SUCCESS;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A workspace's virtual machine: start, stop, console. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "api/client.h"
#include "api/protocol.h"
#include "slate.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/time.h"
#include "version.h"
#include "workspace/workspace.h"

static int check_name(struct slate_ctx *ctx, const char *name)
{
	if (workspace_name_check(name) < 0)
		return slate_usage_error(ctx, "%s: invalid name '%s': %s", ctx->command, name,
		                         WORKSPACE_NAME_RULE);
	return 0;
}

static int parse_timeout(struct slate_ctx *ctx, const char *arg, int64_t *ret)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(arg, &end, 10);
	if (errno || end == arg || *end || v < 1 || v > 3600)
		return slate_usage_error(ctx, "%s: --timeout %s: whole seconds, 1 to 3600",
		                         ctx->command, arg);
	*ret = v;
	return 0;
}

static int call_stream(struct slate_ctx *ctx, const char *name, const char *verb,
                       struct json_object *body, struct json_object **ret)
{
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	struct slate_progress p = {.ctx = ctx};
	struct api_error err;
	char path[256];

	p.t0 = time_mono_s();
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/%s", name, verb);
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	if (api_client_call(client, "POST", path, body, slate_print_progress, &p, ret, &err) < 0)
		return slate_api_fail(ctx->command, &err);
	return 0;
}

int cmd_start(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_RESET = 1, OPT_ASIS, OPT_TIMEOUT, OPT_COLD };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"cold", no_argument, NULL, OPT_COLD},
	        {"reset-to-base", no_argument, NULL, OPT_RESET},
	        {"as-is", no_argument, NULL, OPT_ASIS},
	        {"timeout", required_argument, NULL, OPT_TIMEOUT},
	        {},
	};
	_cleanup_json_ struct json_object *body = json_object_new_object(), *res = NULL;
	const char *name, *accel = "?";
	bool reset = false, as_is = false, cold = false, b = false;
	double boot_s = 0;
	int64_t timeout = 0;
	int c, r;

	if (!body)
		return slate_fail("start", "out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_RESET:
			reset = true;
			break;
		case OPT_ASIS:
			as_is = true;
			break;
		case OPT_COLD:
			cold = true;
			break;
		case OPT_TIMEOUT:
			if (parse_timeout(ctx, optarg, &timeout) != 0)
				return EXIT_USAGE;
			break;
		case 'h':
		case OPT_HELP:
			printf("Usage: slate start NAME [--reset-to-base|--as-is] [--cold] "
			       "[--timeout "
			       "S]\n"
			       "Boot the workspace; returns once the guest reports it is ready.\n"
			       "A fresh workspace (created or reset, never started since) starts "
			       "from\n"
			       "its image's booted snapshot when there is one ('slate image ls').\n"
			       "  --cold           boot it, even where a snapshot could be "
			       "restored\n"
			       "When the image changed since the workspace was cloned, say what to "
			       "do:\n"
			       "  --reset-to-base  a fresh system disk from the new base (home is "
			       "kept)\n"
			       "  --as-is          keep the system disk as it is\n"
			       "  --timeout S      give up (and stop the guest) after S seconds "
			       "(default 180)\n");
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "start: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (reset && as_is)
		return slate_usage_error(ctx,
		                         "start: --reset-to-base and --as-is exclude each other");
	if (optind != argc - 1)
		return slate_usage_error(ctx, "start: give exactly one workspace NAME");
	name = argv[optind];
	if (check_name(ctx, name) != 0)
		return EXIT_USAGE;
	if ((reset && json_add_bool(body, "reset_to_base", true) < 0) ||
	    (as_is && json_add_bool(body, "as_is", true) < 0) ||
	    (cold && json_add_bool(body, "cold", true) < 0) ||
	    (timeout && json_add_int64(body, "timeout", timeout) < 0))
		return slate_fail("start", "out of memory");
	r = call_stream(ctx, name, "start", body, &res);
	if (r != 0)
		return r;
	if (ctx->json) {
		json_object_object_del(res, "type");
		return slate_print_json(res), EXIT_SUCCESS;
	}
	(void)json_get_string(res, "accelerator", &accel);
	boot_s = json_object_get_double(json_object_object_get(res, "boot_s"));
	if (json_get_bool(res, "already_running", &b) >= 0 && b)
		printf("%s is already running\n", name);
	else if (json_get_bool(res, "resumed", &b) >= 0 && b)
		printf("resumed %s in %.1f s (%s)\n", name, boot_s, accel);
	else if (json_get_bool(res, "restored", &b) >= 0 && b)
		printf("started %s in %.1f s (%s, from a booted snapshot)\n", name, boot_s, accel);
	else
		printf("started %s in %.1f s (%s)\n", name, boot_s, accel);
	return EXIT_SUCCESS;
}

int cmd_stop(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_FORCE = 1, OPT_SUSPEND, OPT_TIMEOUT };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"force", no_argument, NULL, OPT_FORCE},
	        {"suspend", no_argument, NULL, OPT_SUSPEND},
	        {"timeout", required_argument, NULL, OPT_TIMEOUT},
	        {},
	};
	_cleanup_json_ struct json_object *body = json_object_new_object(), *res = NULL;
	bool force = false, suspend = false, was = false, destroyed = false;
	const char *name, *state = "?";
	int64_t timeout = 0;
	int c, r;

	if (!body)
		return slate_fail("stop", "out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_FORCE:
			force = true;
			break;
		case OPT_SUSPEND:
			suspend = true;
			break;
		case OPT_TIMEOUT:
			if (parse_timeout(ctx, optarg, &timeout) != 0)
				return EXIT_USAGE;
			break;
		case 'h':
		case OPT_HELP:
			printf("Usage: slate stop NAME [--force|--suspend] [--timeout S]\n"
			       "Shut the workspace down: the ACPI power button, then power off "
			       "after "
			       "S seconds (default 30).\n"
			       "  --force    power off at once (a suspended workspace loses its "
			       "saved "
			       "memory)\n"
			       "  --suspend  save the guest's memory; the next start resumes it\n");
			return EXIT_SUCCESS;
		default:
			return slate_usage_error(ctx, "stop: unknown option '%s'",
			                         argv[optind - 1]);
		}
	}
	if (force && suspend)
		return slate_usage_error(ctx, "stop: --force and --suspend exclude each other");
	if (optind != argc - 1)
		return slate_usage_error(ctx, "stop: give exactly one workspace NAME");
	name = argv[optind];
	if (check_name(ctx, name) != 0)
		return EXIT_USAGE;
	if ((force && json_add_bool(body, "force", true) < 0) ||
	    (suspend && json_add_bool(body, "suspend", true) < 0) ||
	    (timeout && json_add_int64(body, "timeout", timeout) < 0))
		return slate_fail("stop", "out of memory");
	r = call_stream(ctx, name, "stop", body, &res);
	if (r != 0)
		return r;
	if (ctx->json) {
		json_object_object_del(res, "type");
		return slate_print_json(res), EXIT_SUCCESS;
	}
	(void)json_get_string(res, "state", &state);
	(void)json_get_bool(res, "was_running", &was);
	(void)json_get_bool(res, "destroyed", &destroyed);
	if (streq(state, "suspended"))
		printf("suspended %s: 'slate start %s' resumes it\n", name, name);
	else if (!was)
		printf("%s was not running\n", name);
	else
		printf("stopped %s%s\n", name,
		       destroyed ? (force ? " (powered off)"
		                          : " (it did not power off in time: powered off)")
		                 : "");
	return EXIT_SUCCESS;
}

/* ---- probe: the residue check (doc/residue.md) ---- */

int slate_probe_call(struct slate_ctx *ctx, const char *name, unsigned regions, const char *marker,
                     struct json_object **ret)
{
	_cleanup_json_ struct json_object *body = json_object_new_object();

	if (!body || (regions && json_add_int64(body, "regions", regions) < 0) ||
	    (marker && json_add_string(body, "marker", marker) < 0))
		return slate_fail(ctx->command, "out of memory");
	return call_stream(ctx, name, "probe", body, ret);
}

static int64_t member_int(struct json_object *o, const char *key)
{
	int64_t v = 0;

	(void)json_get_int64(o, key, &v);
	return v;
}

void slate_probe_print(struct json_object *res)
{
	struct json_object *devs = NULL;
	const char *name = "?", *storage = "?";
	bool clean = false, complete = false;
	double secs = json_object_get_double(json_object_object_get(res, "seconds"));

	(void)json_get_string(res, "name", &name);
	(void)json_get_string(res, "storage", &storage);
	(void)json_get_bool(res, "clean", &clean);
	(void)json_get_bool(res, "complete", &complete);
	printf("probe of %s (%s storage): %lld regions written, %lld compared, %lld foreign bytes "
	       "in %.1f s\n",
	       name, storage, (long long)member_int(res, "written"),
	       (long long)member_int(res, "compared"), (long long)member_int(res, "foreign_bytes"),
	       secs);
	(void)json_get_array(res, "devices", &devs);
	for (size_t i = 0; devs && i < json_object_array_length(devs); i++) {
		struct json_object *v = json_object_array_get_idx(devs, i), *hits = NULL,
		                   *errs = NULL, *fss = NULL, *cl = NULL;
		const char *dev = "?", *file = "?";

		(void)json_get_string(v, "device", &dev);
		(void)json_get_string(v, "file", &file);
		(void)json_get_array(v, "hits", &hits);
		(void)json_get_array(v, "errors", &errs);
		(void)json_get_array(v, "filesystems", &fss);
		(void)json_get_object(v, "classes", &cl);
		printf("  %s (%s): %lld free 64 KiB regions; %lld written, %lld compared", dev,
		       file, (long long)member_int(v, "free_regions"),
		       (long long)member_int(v, "written"), (long long)member_int(v, "compared"));
		if (cl && member_int(cl, "unknown") > 0)
			printf(" (a block device: the host cannot tell freed guest data from "
			       "foreign)");
		if (member_int(v, "foreign_bytes") > 0)
			printf("; FOREIGN: %lld bytes in %lld regions",
			       (long long)member_int(v, "foreign_bytes"),
			       (long long)member_int(v, "regions_with_foreign_bytes"));
		else
			printf("; clean");
		printf("\n");
		for (size_t k = 0; fss && k < json_object_array_length(fss); k++) {
			const char *f = "?";
			(void)json_get_string(json_object_array_get_idx(fss, k), "filesystem", &f);
			printf("    file system %s\n", f);
		}
		for (size_t k = 0; hits && k < json_object_array_length(hits); k++) {
			struct json_object *h = json_object_array_get_idx(hits, k);
			const char *pass = "?", *sample = "";
			(void)json_get_string(h, "pass", &pass);
			(void)json_get_string(h, "sample", &sample);
			printf("    %s at %lld (%s pass): %lld bytes from +%lld, marker %lld "
			       "times: "
			       "\"%s\"\n",
			       dev, (long long)member_int(h, "offset"), pass,
			       (long long)member_int(h, "bytes"), (long long)member_int(h, "first"),
			       (long long)member_int(h, "markers"), sample);
		}
		for (size_t k = 0; errs && k < json_object_array_length(errs); k++)
			printf("    not probed: %s\n",
			       json_object_get_string(json_object_array_get_idx(errs, k)));
	}
	if (!clean)
		printf("%s holds bytes it never wrote: report this with the output of "
		       "'slate probe %s --json'\n",
		       name, name);
	else if (!complete)
		printf("no foreign bytes, but the probe did not cover everything (above)\n");
}

int cmd_probe(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_REGIONS = 1, OPT_MARKER };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"regions", required_argument, NULL, OPT_REGIONS},
	        {"marker", required_argument, NULL, OPT_MARKER},
	        {},
	};
	static const char usage[] =
	        "Usage: slate probe NAME [--regions N] [--marker TEXT] [--json]\n"
	        "Check that the running workspace's disks hold nobody else's data: write 4 KiB\n"
	        "into free 64 KiB regions the host never wrote, read the rest back, and compare\n"
	        "free blocks with the base image. Exit status 3 when a foreign byte is found.\n"
	        "  --regions N    regions per disk, spread over it (default 256)\n"
	        "  --marker TEXT  also count TEXT in what is found (at most 64 bytes)\n";
	_cleanup_json_ struct json_object *res = NULL;
	const char *name, *marker = NULL;
	bool clean = false, complete = false;
	unsigned regions = 0;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == OPT_REGIONS) {
			char *end;
			unsigned long v;
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 1 || v > 65536 ||
			    optarg[0] == '-')
				return slate_usage_error(ctx, "probe: --regions %s: 1 to 65536",
				                         optarg);
			regions = (unsigned)v;
		} else if (c == OPT_MARKER) {
			if (!*optarg || strlen(optarg) > 64)
				return slate_usage_error(ctx, "probe: --marker: 1 to 64 bytes");
			marker = optarg;
		} else {
			return slate_help_or_unknown(ctx, "probe", c, usage, argv);
		}
	}
	if (optind != argc - 1)
		return slate_usage_error(ctx, "probe: give exactly one workspace NAME");
	name = argv[optind];
	if (check_name(ctx, name) != 0)
		return EXIT_USAGE;
	r = slate_probe_call(ctx, name, regions, marker, &res);
	if (r != 0)
		return r;
	(void)json_get_bool(res, "clean", &clean);
	(void)json_get_bool(res, "complete", &complete);
	if (ctx->json) {
		json_object_object_del(res, "type");
		slate_print_json(res);
	} else {
		slate_probe_print(res);
	}
	if (!clean)
		return EXIT_FOREIGN;
	return complete ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* ---- console: an upgraded connection, then raw bytes both ways ---- */

#define CONSOLE_PROTOCOL "slate-console"
#define DETACH_KEY 0x1d /* Ctrl-] */
#define MAX_REPLY_HEAD 16384

static struct termios saved_tio;
static bool tio_saved;

static void restore_tty(void)
{
	if (tio_saved)
		(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
	tio_saved = false;
}

/*
 * Opens an API connection upgraded to protocol through api_dial() (conn gets it): POST path with
 * body (may be NULL), then reads the reply head. Returns the socket (blocking), or prints
 * "slate: what: ..." and returns < 0 with conn closed. The bytes that came after the head are
 * copied to extra (at most *extra_len; *extra_len gets how many). api_conn_close(conn) ends it.
 */
int slate_upgrade(const struct slate_ctx *ctx, struct api_conn *conn, const char *what,
                  const char *path, const char *protocol, struct json_object *body, char *extra,
                  size_t *extra_len)
{
	char head[MAX_REPLY_HEAD + 1], *end, why[1024];
	_cleanup_free_ char *req = NULL;
	const char *json = body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : "";
	struct api_endpoint ep;
	size_t got = 0, n;
	unsigned status = 0;
	int sock;

	if (!json ||
	    asprintf(&req,
	             "POST %s HTTP/1.1\r\nHost: slated\r\n"
	             "Connection: Upgrade\r\nUpgrade: %s\r\n"
	             "%s: %d\r\n%sContent-Length: %zu\r\n\r\n%s",
	             path, protocol, API_VERSION_HEADER, SLATE_API_VERSION,
	             body ? "Content-Type: application/json\r\n" : "", strlen(json), json) < 0)
		return slate_fail(what, "out of memory"), -1;
	if (slate_endpoint(ctx, &ep) < 0)
		return -1;
	if (api_dial(&ep, conn, why, sizeof(why)) < 0)
		return slate_fail(what, "%s", why), -1;
	sock = conn->fd;
	/* A lost connection must be an error, not the end of slate. */
	(void)signal(SIGPIPE, SIG_IGN);
	if (fs_write_all(sock, req, strlen(req)) < 0) {
		(void)api_conn_fail(&ep, conn, strerror(errno), why, sizeof(why));
		return slate_fail(what, "%s", why), -1;
	}
	for (;;) {
		ssize_t r = read(sock, head + got, MAX_REPLY_HEAD - got);
		const char *cl;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		head[got] = '\0';
		end = strstr(head, "\r\n\r\n");
		if (!end)
			continue;
		if (sscanf(head, "HTTP/1.1 %u", &status) != 1 || status == 101)
			break;
		/* An error: read its body, as long as Content-Length says (the connection stays). */
		cl = strcasestr(head, "\r\nContent-Length:");
		if (!cl || cl > end || got - (size_t)(end + 4 - head) >= strtoul(cl + 17, NULL, 10))
			break;
		if (got == MAX_REPLY_HEAD)
			break;
	}
	head[got] = '\0';
	if (got == 0) {
		/* Nothing at all: for ssh, it could not log in or the remote end failed. */
		(void)api_conn_fail(&ep, conn, "no reply", why, sizeof(why));
		return slate_fail(what, "%s", why), -1;
	}
	end = strstr(head, "\r\n\r\n");
	if (!end || sscanf(head, "HTTP/1.1 %u", &status) != 1)
		return api_conn_close(conn), slate_fail(what, "slated's reply is not HTTP"), -1;
	if (status != 101) {
		_cleanup_json_ struct json_object *o = NULL;
		const char *code = NULL, *msg = NULL;
		size_t blen = strlen(end + 4);

		while (blen > 0 && strchr(" \t\r\n", end[4 + blen - 1]))
			blen--;
		(void)api_conn_close(conn);
		if (json_parse_object(end + 4, blen, MAX_REPLY_HEAD, &o) >= 0 &&
		    api_error_parse(o, &code, &msg) >= 0)
			return slate_fail(what, "%s", msg), -1;
		return slate_fail(what, "slated answered HTTP %u", status), -1;
	}
	n = got - (size_t)(end + 4 - head);
	if (n > *extra_len)
		n = *extra_len;
	memcpy(extra, end + 4, n);
	*extra_len = n;
	return sock;
}

/* The console's connection; the first output goes to stdout. */
static int console_connect(struct slate_ctx *ctx, const char *name, struct api_conn *conn)
{
	char path[128 + WORKSPACE_NAME_MAX], extra[MAX_REPLY_HEAD];
	size_t n = sizeof(extra);
	int sock;

	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/console", name);
	sock = slate_upgrade(ctx, conn, "console", path, CONSOLE_PROTOCOL, NULL, extra, &n);
	if (sock >= 0 && n > 0)
		(void)fs_write_all(STDOUT_FILENO, extra, n);
	return sock;
}

int cmd_console(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {},
	};
	struct api_conn conn = API_CONN_NULL;
	struct pollfd pfd[2];
	bool tty, in_open = true;
	const char *name;
	char buf[4096];
	int c, sock, rc = EXIT_SUCCESS;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == 'h' || c == OPT_HELP) {
			printf("Usage: slate console NAME\n"
			       "Attach the terminal to the workspace's serial console; Ctrl-] "
			       "detaches.\n"
			       "Without a terminal, stdin is sent as it is and output is copied "
			       "until the guest or slated ends the console.\n");
			return EXIT_SUCCESS;
		}
		return slate_usage_error(ctx, "console: unknown option '%s'", argv[optind - 1]);
	}
	if (optind != argc - 1)
		return slate_usage_error(ctx, "console: give exactly one workspace NAME");
	name = argv[optind];
	if (check_name(ctx, name) != 0)
		return EXIT_USAGE;
	if (ctx->json)
		return slate_usage_error(ctx, "console: --json makes no sense for a console");

	(void)signal(SIGPIPE, SIG_IGN);
	sock = console_connect(ctx, name, &conn);
	if (sock < 0)
		return EXIT_FAILURE;
	tty = isatty(STDIN_FILENO);
	if (tty && tcgetattr(STDIN_FILENO, &saved_tio) == 0) {
		struct termios raw = saved_tio;
		cfmakeraw(&raw);
		tio_saved = true;
		atexit(restore_tty);
		(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw);
		fprintf(stderr, "Connected to %s's console; Ctrl-] detaches.\r\n", name);
	}
	for (;;) {
		ssize_t n;

		pfd[0] = (struct pollfd){.fd = in_open ? STDIN_FILENO : -1, .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = sock, .events = POLLIN};
		/* After the input ended, output that pauses for 2 s is taken as the end. */
		c = poll(pfd, 2, in_open ? -1 : 2000);
		if (c == 0)
			break;
		if (c < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents) {
			n = read(sock, buf, sizeof(buf));
			if (n <= 0)
				break; /* the console ended */
			if (fs_write_all(STDOUT_FILENO, buf, (size_t)n) < 0)
				break;
		}
		if (in_open && pfd[0].revents) {
			n = read(STDIN_FILENO, buf, sizeof(buf));
			if (n <= 0) {
				/* No more input: keep showing output until the console ends. */
				in_open = false;
				continue;
			}
			if (tty && memchr(buf, DETACH_KEY, (size_t)n)) {
				n = (char *)memchr(buf, DETACH_KEY, (size_t)n) - buf;
				if (n > 0)
					(void)fs_write_all(sock, buf, (size_t)n);
				break;
			}
			if (fs_write_all(sock, buf, (size_t)n) < 0) {
				rc = EXIT_FAILURE;
				break;
			}
		}
	}
	restore_tty();
	if (tty)
		fprintf(stderr, "\nDetached from %s's console.\n", name);
	(void)api_conn_close(&conn);
	return rc;
}

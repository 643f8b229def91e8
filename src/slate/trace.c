/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate trace NAME [--leaks] [--max N]: the workspace's audit trail. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "slate.h"
#include "util/json.h"
#include "workspace/workspace.h"

static const char usage_text[] =
        "Usage: slate trace NAME [--leaks] [--max N] [--json]\n"
        "\n"
        "The workspace's audit trail, oldest first: every request its guest sent through the\n"
        "egress proxy (time, method, host, path with query values redacted, status, the\n"
        "secrets substituted -- names, never values), leaks blocked, and SSH signatures.\n"
        "--leaks shows only the leaks; --max N the newest N events (default 1000, 0: all).\n";

static void fmt_time(double t, char *buf, size_t len)
{
	time_t s = (time_t)t;
	struct tm tm;

	if (!localtime_r(&s, &tm) || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
		(void)snprintf(buf, len, "%.3f", t);
}

static const char *str(struct json_object *o, const char *key)
{
	const char *v = NULL;
	return json_get_string(o, key, &v) >= 0 ? v : "";
}

static void join(struct json_object *arr, char *out, size_t len)
{
	size_t o = 0;

	out[0] = '\0';
	for (size_t i = 0; arr && i < json_object_array_length(arr) && o + 1 < len; i++) {
		const char *s = json_object_get_string(json_object_array_get_idx(arr, i));
		int k = snprintf(out + o, len - o, "%s%s", i ? "," : "", s ? s : "");
		if (k < 0)
			break;
		o += (size_t)k;
	}
}

static void print_event(struct json_object *ev)
{
	char when[32], detail[1024], list[512], status[24] = "-";
	const char *type = str(ev, "type");
	struct json_object *t = NULL, *arr = NULL;
	int64_t st = 0, port = 0, bytes = 0;
	double tv = 0;

	if (json_object_object_get_ex(ev, "time", &t))
		tv = json_object_get_double(t);
	fmt_time(tv, when, sizeof(when));
	if (json_get_int64(ev, "status", &st) >= 0 && st > 0)
		(void)snprintf(status, sizeof(status), "%" PRId64, st);
	(void)json_get_int64(ev, "port", &port);
	detail[0] = '\0';
	if (streq(type, "egress")) {
		int64_t sent = 0, recv = 0;
		(void)json_get_int64(ev, "bytes_sent", &sent);
		(void)json_get_int64(ev, "bytes_received", &recv);
		if (json_get_array(ev, "substituted", &arr) >= 0 && json_object_array_length(arr)) {
			struct json_object *in = NULL;
			join(arr, list, sizeof(list));
			/* With where each went: "KEY (header,body)". */
			if (json_get_object(ev, "substituted_in", &in) >= 0) {
				size_t o = 0;
				list[0] = '\0';
				json_object_object_foreach (in, k, v) {
					char w[64];
					int n;
					join(v, w, sizeof(w));
					n = snprintf(list + o, sizeof(list) - o, "%s%s (%s)",
					             o ? ", " : "", k, w);
					if (n < 0 || (size_t)n >= sizeof(list) - o)
						break;
					o += (size_t)n;
				}
			}
			(void)snprintf(detail, sizeof(detail), "substituted %s; ", list);
		}
		(void)snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail),
		               "%" PRId64 "B out, %" PRId64 "B in%s%s", sent, recv,
		               *str(ev, "refused") ? "; refused: " : "", str(ev, "refused"));
	} else if (streq(type, "leak")) {
		(void)json_get_array(ev, "bound_hosts", &arr);
		join(arr, list, sizeof(list));
		(void)snprintf(detail, sizeof(detail), "LEAK BLOCKED: %s in the %s (bound to %s)",
		               str(ev, "secret"), str(ev, "where"), list[0] ? list : "nothing");
	} else if (streq(type, "ssh-sign")) {
		(void)json_get_int64(ev, "bytes", &bytes);
		(void)snprintf(detail, sizeof(detail), "%s %s, %" PRId64 " bytes signed",
		               str(ev, "key_type"), str(ev, "fingerprint"), bytes);
	} else {
		/* Another kind (sigv4...): its fields as they are. */
		(void)snprintf(detail, sizeof(detail), "%s",
		               json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN));
	}
	{
		char hostport[300] = "";
		const char *host = str(ev, "host");
		if (*host)
			(void)snprintf(hostport, sizeof(hostport),
			               port && port != 443 && port != 80 ? "%s:%" PRId64 : "%s",
			               host, port);
		printf("%-19s  %-8s  %-7s  %-30s  %-30s  %-6s  %s\n", when, type,
		       *str(ev, "method") ? str(ev, "method") : "-", *hostport ? hostport : "-",
		       *str(ev, "path") ? str(ev, "path") : "-", status, detail);
	}
}

int cmd_trace(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_LEAKS = 1, OPT_MAX };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"leaks", no_argument, NULL, OPT_LEAKS},
	        {"max", required_argument, NULL, OPT_MAX},
	        {},
	};
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	_cleanup_json_ struct json_object *reply = NULL;
	struct json_object *events = NULL;
	struct api_error err = {0};
	char path[128 + WORKSPACE_NAME_MAX];
	const char *name, *max = NULL;
	bool leaks = false;
	int c;

	ctx->command = "trace";
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_LEAKS:
			leaks = true;
			break;
		case OPT_MAX:
			if (!*optarg || strspn(optarg, "0123456789") != strlen(optarg) ||
			    strlen(optarg) > 6)
				return slate_usage_error(ctx, "trace: --max wants a number");
			max = optarg;
			break;
		default:
			return slate_help_or_unknown(ctx, "trace", c, usage_text, argv);
		}
	}
	if (argc - optind != 1)
		return slate_usage_error(ctx, "trace: give exactly one workspace NAME");
	name = argv[optind];
	if (workspace_name_check(name) < 0)
		return slate_usage_error(ctx, "trace: invalid name '%s': %s", name,
		                         WORKSPACE_NAME_RULE);
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/trace?leaks=%d%s%s", name,
	               leaks ? 1 : 0, max ? "&max=" : "", max ? max : "");
	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	if (api_client_call(client, "GET", path, NULL, NULL, NULL, &reply, &err) < 0)
		return slate_api_fail("trace", &err);
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	if (json_get_array(reply, "events", &events) < 0)
		return slate_fail("trace", "slated's reply has no event list");
	if (json_object_array_length(events) == 0) {
		printf(leaks ? "no leaks recorded for %s\n" : "no events recorded for %s\n", name);
		return EXIT_SUCCESS;
	}
	printf("%-19s  %-8s  %-7s  %-30s  %-30s  %-6s  %s\n", "TIME", "TYPE", "METHOD", "HOST",
	       "PATH", "STATUS", "DETAIL");
	for (size_t i = 0; i < json_object_array_length(events); i++)
		print_event(json_object_array_get_idx(events, i));
	return EXIT_SUCCESS;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate egress NAME (allow-all|deny-all|allow HOST|deny HOST|ls): a workspace's egress policy. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slate.h"
#include "util/json.h"
#include "workspace/workspace.h"

static const char usage_text[] =
        "Usage: slate egress NAME ls\n"
        "       slate egress NAME allow-all|deny-all\n"
        "       slate egress NAME allow|deny HOST\n"
        "\n"
        "The workspace's egress policy: which hosts its guest may reach through slated's\n"
        "proxy (the guest's only way out). allow-all (the default) and deny-all set the\n"
        "default and drop every rule; allow and deny add a rule for HOST, which covers the\n"
        "host and its subdomains (a host name), or addresses (an IP address or a network\n"
        "such as 10.0.0.0/8). The most specific rule wins.\n"
        "Loopback, private, link-local and cloud metadata addresses are refused after DNS\n"
        "resolution unless an allow rule names the address or its network: allowing a name\n"
        "never opens a private address. Changes apply to new connections.\n";

static int call(struct slate_ctx *ctx, const char *method, const char *path,
                struct json_object *body, struct json_object **ret)
{
	_cleanup_(api_client_freep) struct api_client *client = NULL;
	struct api_error err = {0};

	if (slate_client(ctx, &client) < 0)
		return EXIT_FAILURE;
	if (api_client_call(client, method, path, body, NULL, NULL, ret, &err) < 0)
		return slate_api_fail(ctx->command ? ctx->command : "egress", &err);
	return EXIT_SUCCESS;
}

static int print_policy(struct slate_ctx *ctx, struct json_object *reply)
{
	struct json_object *rules = NULL;
	const char *def = "?";

	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	(void)json_get_string(reply, "default", &def);
	(void)json_get_array(reply, "rules", &rules);
	printf("default: %s\n", def);
	for (size_t i = 0; rules && i < json_object_array_length(rules); i++) {
		struct json_object *r = json_object_array_get_idx(rules, i);
		const char *action = "?", *host = "?";
		(void)json_get_string(r, "action", &action);
		(void)json_get_string(r, "host", &host);
		printf("%-5s  %s\n", action, host);
	}
	return EXIT_SUCCESS;
}

int cmd_egress(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {SLATE_COMMON_OPTS, {}};
	_cleanup_json_ struct json_object *reply = NULL, *body = NULL;
	char path[64 + WORKSPACE_NAME_MAX];
	const char *name, *verb, *host = NULL;
	int c, nargs, r;

	ctx->command = "egress";
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		return slate_help_or_unknown(ctx, "egress", c, usage_text, argv);
	}
	nargs = argc - optind;
	if (nargs < 2)
		return slate_usage_error(ctx,
		                         "egress: give NAME and one of ls, allow-all, deny-all, "
		                         "allow HOST, deny HOST");
	name = argv[optind];
	verb = argv[optind + 1];
	if (workspace_name_check(name) < 0)
		return slate_usage_error(ctx, "egress: invalid name '%s': %s", name,
		                         WORKSPACE_NAME_RULE);
	if (streq(verb, "allow") || streq(verb, "deny")) {
		if (nargs != 3)
			return slate_usage_error(ctx, "egress %s: give exactly one HOST", verb);
		host = argv[optind + 2];
	} else if (streq(verb, "ls") || streq(verb, "allow-all") || streq(verb, "deny-all")) {
		if (nargs != 2)
			return slate_usage_error(ctx, "egress %s: unexpected argument '%s'", verb,
			                         argv[optind + 2]);
	} else
		return slate_usage_error(ctx,
		                         "egress: unknown action '%s' (ls, allow-all, deny-all, "
		                         "allow, deny)",
		                         verb);

	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/egress", name);
	if (streq(verb, "ls")) {
		r = call(ctx, "GET", path, NULL, &reply);
	} else {
		body = json_object_new_object();
		if (!body || json_add_string(body, "action", verb) < 0 ||
		    (host && json_add_string(body, "host", host) < 0))
			return slate_fail("egress", "out of memory");
		r = call(ctx, "POST", path, body, &reply);
	}
	if (r != EXIT_SUCCESS)
		return r;
	return print_policy(ctx, reply);
}

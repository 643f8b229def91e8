/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * /v1/workspaces/:name/exec and /v1/run: API connections upgraded to "slate-exec" and handed to
 * an exec session (daemon/exec.h); a run creates, starts and with rm deletes around it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "api/access.h"
#include "api/exec.h"
#include "api/parse.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "daemon/exec.h"
#include "daemon/run.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "vm/domain.h"
#include "workspace/workspace.h"

#define EXEC_PROTOCOL "slate-exec"

/* ---- /v1/workspaces/:name/exec ---- */

struct exec_job {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
	uid_t uid;
	/* run only */
	bool run, rm;
	struct json_object *create; /* the create body */
};

static void exec_job_free(void *p)
{
	struct exec_job *j = p;

	if (j) {
		json_object_put(j->create);
		free(j);
	}
}

static void exec_job_freep(struct exec_job **j)
{
	exec_job_free(*j);
}

static void exec_bridge(int fd, const char *extra, size_t extra_len, void *arg)
{
	struct exec_job *j = arg;
	_cleanup_(exec_first_done) struct exec_first first = {0};

	if (exec_first_read(fd, extra, extra_len, &first) < 0)
		return;
	(void)exec_session(j->d, j->name, fd, &first, NULL);
}

int handle_workspace_exec(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	struct exec_job *j;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	r = vm_domain_is_active(d->libvirt_uri, name);
	if (r == 0)
		return api_reply_error(reply, 409, API_ERR_CONFLICT,
		                       "exec %s: it is not running ('slate start %s' first)", name,
		                       name);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	j->uid = req->caller.uid;
	memcpy(j->name, name, strnlen(name, WORKSPACE_NAME_MAX));
	return api_reply_upgrade(reply, EXEC_PROTOCOL, exec_bridge, j, exec_job_free);
}

/* ---- /v1/run: create if needed, start, exec, and with rm delete whatever happens ---- */

/* A run: the create body parsed as POST /workspaces does (an error goes to the client as an
 * ERROR record, as everything after the upgrade), then daemon_run. */
static void run_bridge(int fd, const char *extra, size_t extra_len, void *arg)
{
	struct exec_job *j = arg;
	struct daemon_ctx *d = j->d;
	_cleanup_(exec_first_done) struct exec_first first = {0};
	_cleanup_(api_create_done) struct api_create c = {0};
	struct daemon_run_spec spec = {
	        .name = j->name, .rm = j->rm, .keepalive_s = API_STREAM_KEEPALIVE_S};

	if (exec_first_read(fd, extra, extra_len, &first) < 0)
		return;
	if (j->create) {
		struct api_request creq = {.method = "POST",
		                           .path = "/workspaces",
		                           .caller = {.uid = j->uid},
		                           .body = j->create,
		                           .userdata = d};
		struct api_reply crep = {0};
		const char *msg = NULL, *ecode = NULL;
		int r = api_create_parse(&creq, j->create, &c, &crep);

		if (r < 0) {
			if (crep.json)
				(void)api_error_parse(crep.json, &ecode, &msg);
			exec_send_error(fd, "%s", msg ? msg : slate_strerror(r));
			json_object_put(crep.json);
			return;
		}
		spec.create = &c.spec;
	}
	daemon_run(d, &spec, fd, &first);
}

int handle_run(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_(exec_job_freep) struct exec_job *j = NULL;
	struct json_object *create = NULL;
	const char *name = NULL;
	bool rm = false;
	int r;

	if (api_need_workspaces(d, reply) < 0)
		return -ENODEV;
	if (req->body) {
		(void)json_get_bool(req->body, "rm", &rm);
		(void)json_get_object(req->body, "create", &create);
	}
	if (create && !json_object_is_type(create, json_type_object))
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "create must be an object");
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	j->uid = req->caller.uid;
	j->run = true;
	j->rm = rm;
	j->create = create ? json_object_get(create) : json_object_new_object();
	if (!j->create)
		return -ENOMEM;
	if (json_get_string(j->create, "name", &name) >= 0) {
		if (workspace_name_check(name) < 0)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "invalid name '%s': %s", name, WORKSPACE_NAME_RULE);
		memcpy(j->name, name, strnlen(name, WORKSPACE_NAME_MAX));
		r = api_load_visible(d, req, name, NULL, reply);
		if (r == 0) {
			/* It exists: reuse it, never delete it. */
			if (rm)
				return api_reply_error(
				        reply, 409, API_ERR_CONFLICT,
				        "run --rm makes a new workspace, and '%s' exists already "
				        "(without --rm, run uses it)",
				        name);
			/* An egress policy asked for would silently not apply: say so instead. */
			if (json_object_object_get_ex(j->create, "egress", NULL))
				return api_reply_error(
				        reply, 409, API_ERR_CONFLICT,
				        "run --egress/--allow/--deny set a new workspace's policy, "
				        "and "
				        "'%s' exists already (change it with 'slate egress %s')",
				        name, name);
			json_object_put(TAKE_PTR(j->create));
		} else if (r != -ENOENT) {
			return r;
		} else {
			/* api_load_visible filled a 404: start over with a fresh reply. */
			json_object_put(reply->json);
			reply->json = NULL;
			reply->status = 0;
		}
	} else {
		uint8_t rnd[4];
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return -EIO;
		(void)snprintf(j->name, sizeof(j->name), "run-%02x%02x%02x%02x", rnd[0], rnd[1],
		               rnd[2], rnd[3]);
		if (json_add_string(j->create, "name", j->name) < 0)
			return -ENOMEM;
	}
	if (j->create && rm && json_add_bool(j->create, "ephemeral", true) < 0)
		return -ENOMEM;
	return api_reply_upgrade(reply, EXEC_PROTOCOL, run_bridge, TAKE_PTR(j), exec_job_free);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * /v1/workspaces/:name/{start,stop,console}: a workspace's virtual machine. start and stop run
 * in stream workers and call daemon/start.h; the console is an upgraded connection bridged to
 * the domain's serial console.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/access.h"
#include "api/parse.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "channel/channels.h"
#include "daemon/probe.h"
#include "daemon/start.h"
#include "image/store.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "vm/domain.h"
#include "vm/kvm.h"
#include "vm/lifecycle.h"
#include "workspace/workspace.h"

struct vm_op {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
	uid_t uid;
	bool reset_to_base, as_is, cold;
	bool force, suspend;
	unsigned timeout_s;
};

static bool stream_gone(void *userdata)
{
	return api_stream_gone(userdata);
}

static int start_stream(struct api_stream *s, void *arg)
{
	struct vm_op *op = arg;
	struct daemon_start_opts o = {.reset_to_base = op->reset_to_base,
	                              .as_is = op->as_is,
	                              .timeout_s = op->timeout_s,
	                              .cold = op->cold};
	struct daemon_started st;
	struct slate_error err = {0};
	struct json_object *res;

	/* The reply ends the error's journey; slated's log keeps it for whoever runs slated. */
	if (daemon_start(op->d, op->name, &o, api_stream_step, s, stream_gone, &st, &err) < 0) {
		log_ws(LOG_WARNING, op->name, "%s", err.msg);
		return api_stream_error(s, api_error_code(err.code, NULL), err.msg), -EIO;
	}
	res = json_object_new_object();
	if (!res || json_add_string(res, "name", op->name) < 0 ||
	    json_add_string(res, "domain", st.domain) < 0 ||
	    json_add_string(res, "state", "running") < 0 ||
	    json_add_string(res, "accelerator", vm_accel_name(st.kvm)) < 0 ||
	    json_add_bool(res, "resumed", st.resumed) < 0 ||
	    json_add_bool(res, "already_running", st.already_running) < 0 ||
	    json_add_bool(res, "restored", st.restored) < 0 ||
	    json_add(res, "boot_s", json_object_new_double(st.boot_s)) < 0) {
		json_object_put(res);
		return -ENOMEM;
	}
	if (st.disk_io[0])
		(void)json_add_string(res, "disk_io", st.disk_io);
	if (st.snapshot[0])
		(void)json_add_string(res, "snapshot", st.snapshot);
	(void)json_add(res, "proof_s", json_object_new_double(st.proof_s));
	if (st.checkpoint[0]) {
		(void)json_add_string(res, "checkpoint", st.checkpoint);
		(void)json_add(res, "checkpoint_pause_ms",
		               json_object_new_double(st.checkpoint_pause_ms));
	}
	return api_stream_result(s, res);
}

static int stop_stream(struct api_stream *s, void *arg)
{
	struct vm_op *op = arg;
	struct daemon_stop_opts o = {
	        .force = op->force, .suspend = op->suspend, .timeout_s = op->timeout_s};
	struct daemon_stopped st;
	struct slate_error err = {0};
	struct json_object *res;

	if (daemon_stop(op->d, op->name, &o, api_stream_step, s, &st, &err) < 0)
		return api_stream_error(s, api_error_code(err.code, NULL), err.msg), -EIO;
	res = json_object_new_object();
	if (!res || json_add_string(res, "name", op->name) < 0 ||
	    json_add_string(res, "state", vm_state_name(st.state)) < 0 ||
	    json_add_bool(res, "was_running", st.was_running) < 0 ||
	    json_add_bool(res, "destroyed", st.destroyed) < 0 ||
	    json_add(res, "stop_s", json_object_new_double(st.stop_s)) < 0) {
		json_object_put(res);
		return -ENOMEM;
	}
	return api_stream_result(s, res);
}

static int op_new(struct api_request *req, struct api_reply *reply, struct vm_op **ret)
{
	struct daemon_ctx *d = req->userdata;
	struct vm_op *op;
	int64_t t;

	if (api_need_workspaces(d, reply) < 0 ||
	    api_load_visible(d, req, req->params[0], NULL, reply) < 0)
		return -EINVAL;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->d = d;
	op->uid = req->caller.uid;
	/* api_load_visible() made sure it is a valid name (at most WORKSPACE_NAME_MAX bytes). */
	memcpy(op->name, req->params[0], strnlen(req->params[0], WORKSPACE_NAME_MAX));
	if (req->body) {
		(void)json_get_bool(req->body, "reset_to_base", &op->reset_to_base);
		(void)json_get_bool(req->body, "as_is", &op->as_is);
		(void)json_get_bool(req->body, "cold", &op->cold);
		(void)json_get_bool(req->body, "force", &op->force);
		(void)json_get_bool(req->body, "suspend", &op->suspend);
		if (json_get_int64(req->body, "timeout", &t) >= 0) {
			if (t < 1 || t > 3600) {
				free(op);
				return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
				                       "timeout must be 1 to 3600 seconds"),
				       -EINVAL;
			}
			op->timeout_s = (unsigned)t;
		}
	}
	if ((op->reset_to_base && op->as_is) || (op->force && op->suspend)) {
		free(op);
		return api_reply_error(
		               reply, 400, API_ERR_BAD_REQUEST,
		               "reset_to_base and as_is (or force and suspend) exclude each "
		               "other"),
		       -EINVAL;
	}
	*ret = op;
	return 0;
}

int handle_workspace_start(struct api_request *req, struct api_reply *reply)
{
	struct vm_op *op = NULL;
	int r = op_new(req, reply, &op);

	if (r < 0)
		return r;
	return api_reply_stream(reply, start_stream, op, free);
}

int handle_workspace_stop(struct api_request *req, struct api_reply *reply)
{
	struct vm_op *op = NULL;
	int r = op_new(req, reply, &op);

	if (r < 0)
		return r;
	return api_reply_stream(reply, stop_stream, op, free);
}

/* ---- the residue probe (doc/residue.md) ---- */

struct probe_op {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
	struct daemon_probe_opts o;
	uint8_t marker[PROBE_MARKER_MAX];
};

static int probe_stream(struct api_stream *s, void *arg)
{
	struct probe_op *op = arg;
	struct slate_error err = {0};
	struct json_object *res = NULL;

	if (daemon_probe(op->d, op->name, &op->o, api_stream_step, s, &res, &err) < 0) {
		log_ws(LOG_WARNING, op->name, "probe of %s: %s", op->name, err.msg);
		return api_stream_error(s, api_error_code(err.code, NULL), err.msg), -EIO;
	}
	{
		struct json_object *fb = NULL;
		(void)json_object_object_get_ex(res, "foreign_bytes", &fb);
		log_ws(json_object_get_int64(fb) ? LOG_WARNING : LOG_INFO, op->name,
		       "probe of %s: %lld foreign bytes", op->name,
		       (long long)json_object_get_int64(fb));
	}
	return api_stream_result(s, res);
}

int handle_workspace_probe(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	struct probe_op *op;
	const char *marker = NULL;
	int64_t n;

	if (api_need_workspaces(d, reply) < 0 ||
	    api_load_visible(d, req, req->params[0], NULL, reply) < 0)
		return -EINVAL;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->d = d;
	memcpy(op->name, req->params[0], strnlen(req->params[0], WORKSPACE_NAME_MAX));
	if (req->body && json_get_int64(req->body, "regions", &n) >= 0) {
		if (n < 1 || n > PROBE_REGIONS_MAX) {
			free(op);
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "regions must be 1 to %u", PROBE_REGIONS_MAX),
			       -EINVAL;
		}
		op->o.regions = (unsigned)n;
	}
	if (req->body && json_get_string(req->body, "marker", &marker) >= 0) {
		size_t len = strlen(marker);
		if (len < 1 || len > PROBE_MARKER_MAX) {
			free(op);
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "a marker is 1 to %u bytes", PROBE_MARKER_MAX),
			       -EINVAL;
		}
		memcpy(op->marker, marker, len);
		op->o.marker = op->marker;
		op->o.marker_len = len;
	}
	return api_reply_stream(reply, probe_stream, op, free);
}

/* ---- slate doctor --residue ---- */

struct residue_op {
	struct daemon_ctx *d;
	struct daemon_residue_opts o;
	char *image;
};

static void residue_op_free(void *p)
{
	struct residue_op *op = p;

	if (op)
		free(op->image);
	free(op);
}

static int residue_stream(struct api_stream *s, void *arg)
{
	struct residue_op *op = arg;
	struct slate_error err = {0};
	struct json_object *res = NULL;

	if (daemon_residue_check(op->d, &op->o, api_stream_step, s, &res, &err) < 0) {
		log_warning("residue check: %s", err.msg);
		return api_stream_error(s, api_error_code(err.code, NULL), err.msg), -EIO;
	}
	return api_stream_result(s, res);
}

int handle_system_residue(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	struct residue_op *op;
	const char *img = NULL;
	int64_t n;

	if (req->caller.uid != 0)
		return api_reply_error(reply, 403, API_ERR_PERMISSION,
		                       "the residue check makes and deletes workspaces of its own: "
		                       "run it as root"),
		       -EPERM;
	if (api_need_workspaces(d, reply) < 0)
		return -EINVAL;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->d = d;
	if (req->body && json_get_string(req->body, "image", &img) >= 0) {
		if (image_id_check(img) < 0) {
			residue_op_free(op);
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "invalid image id '%s'", img),
			       -EINVAL;
		}
		op->image = strdup(img);
	} else if (api_default_image(d, &op->image, reply) < 0) {
		residue_op_free(op);
		return -EINVAL;
	}
	if (!op->image) {
		residue_op_free(op);
		return -ENOMEM;
	}
	op->o.image_id = op->image;
	if (req->body && json_get_int64(req->body, "fill_mib", &n) >= 0) {
		if (n < 1 || n > 65536) {
			residue_op_free(op);
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "fill_mib must be 1 to 65536"),
			       -EINVAL;
		}
		op->o.fill_mib = (uint64_t)n;
	}
	if (req->body && json_get_int64(req->body, "regions", &n) >= 0) {
		if (n < 1 || n > PROBE_REGIONS_MAX) {
			residue_op_free(op);
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "regions must be 1 to %u", PROBE_REGIONS_MAX),
			       -EINVAL;
		}
		op->o.regions = (unsigned)n;
	}
	return api_reply_stream(reply, residue_stream, op, residue_op_free);
}

/* ---- the console: an upgraded connection bridged to the domain's serial console ---- */

#define CONSOLE_PROTOCOL "slate-console"

struct console_job {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
	virStreamPtr st;
	int fd;
};

/* Guest to client: the stream's bytes onto the socket, until either side ends. */
static void *console_out_main(void *p)
{
	struct console_job *j = p;
	char buf[4096];
	int n;

	for (;;) {
		n = virStreamRecv(j->st, buf, sizeof(buf));
		if (n <= 0 || fs_write_all(j->fd, buf, (size_t)n) < 0)
			break;
	}
	/* Wakes the other direction's read. */
	(void)shutdown(j->fd, SHUT_RDWR);
	return NULL;
}

static void console_bridge(int fd, const char *extra, size_t extra_len, void *arg)
{
	struct console_job *j = arg;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	_cleanup_(virStreamFreep) virStreamPtr st = NULL;
	char buf[4096], msg[512];
	pthread_t out;
	ssize_t n;

	if (vm_connect(j->d->libvirt_uri, &conn) < 0 || vm_domain_lookup(conn, j->name, &dom) < 0 ||
	    !(st = virStreamNew(conn, 0)) ||
	    virDomainOpenConsole(dom, NULL, st, VIR_DOMAIN_CONSOLE_FORCE) < 0) {
		(void)snprintf(msg, sizeof(msg), "\r\nslate: cannot open the console of %s: %s\r\n",
		               j->name, vm_last_error());
		(void)fs_write_all(fd, msg, strlen(msg));
		return;
	}
	log_ws(LOG_INFO, j->name, "console of %s attached", j->name);
	j->st = st;
	j->fd = fd;
	if (extra_len > 0 && virStreamSend(st, extra, extra_len) < 0)
		return;
	if (pthread_create(&out, NULL, console_out_main, j) != 0)
		return;
	for (;;) {
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || virStreamSend(st, buf, (size_t)n) < 0)
			break;
	}
	/* Client gone: end the stream, which ends the other direction. */
	(void)virStreamAbort(st);
	(void)shutdown(fd, SHUT_RDWR);
	(void)pthread_join(out, NULL);
	log_ws(LOG_INFO, j->name, "console of %s detached", j->name);
}

int handle_workspace_console(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	struct console_job *j;
	enum vm_state st;
	int r;

	if (api_need_workspaces(d, reply) < 0 ||
	    api_load_visible(d, req, req->params[0], NULL, reply) < 0)
		return -EINVAL;
	r = vm_workspace_state_uri(d->libvirt_uri, req->params[0], &st);
	if (r < 0)
		return api_reply_error(reply, 503, API_ERR_UNAVAILABLE, "console %s: libvirt: %s",
		                       req->params[0], slate_strerror(r));
	if (st != VM_STATE_RUNNING && st != VM_STATE_PAUSED)
		return api_reply_error(reply, 409, API_ERR_CONFLICT,
		                       "console %s: it is %s ('slate start %s' first)",
		                       req->params[0], vm_state_name(st), req->params[0]);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	j->fd = -1;
	memcpy(j->name, req->params[0], strnlen(req->params[0], WORKSPACE_NAME_MAX));
	return api_reply_upgrade(reply, CONSOLE_PROTOCOL, console_bridge, j, free);
}

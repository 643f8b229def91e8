/* SPDX-License-Identifier: GPL-2.0-or-later */
/* /v1/images: the local image store. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/access.h"
#include "api/protocol.h"
#include "api/render.h"
#include "api/routes.h"
#include "daemon/daemon.h"
#include "daemon/snapshot.h"
#include "image/store.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"
#include "workspace/workspace.h"

int handle_image_list(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *arr = json_object_new_array();
	struct image_info **list = NULL;
	size_t n = 0;
	int r;

	if (!o || !arr || json_add(o, "images", arr) < 0)
		return -ENOMEM;
	if (api_need_images(d, reply) < 0)
		return -ENODEV;
	r = image_store_list(d->storage, &list, &n);
	if (r < 0)
		return api_reply_error(reply, 500, API_ERR_FAILED, "listing images: %s",
		                       slate_strerror(r));
	for (size_t i = 0; i < n; i++) {
		struct json_object *img = api_image_json(list[i], true), *snaps = NULL;

		if (img && daemon_snapshot_list(d, list[i]->id, &snaps) >= 0 &&
		    json_add(img, "snapshots", snaps) < 0)
			json_object_put(snaps);
		(void)json_object_array_add(arr, img);
	}
	image_info_list_free(list, n);
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

struct import_job {
	struct daemon_ctx *d;
	char *id, *path, *kernel, *initrd, *cmdline;
	bool replace;
	struct api_stream *stream;
	int64_t last; /* time_mono_ms() of the last event sent */
};

static void import_job_free(void *p)
{
	struct import_job *j = p;

	if (!j)
		return;
	free(j->id);
	free(j->path);
	free(j->kernel);
	free(j->initrd);
	free(j->cmdline);
	free(j);
}

static void import_progress(uint64_t done, uint64_t total, void *ud)
{
	struct import_job *j = ud;
	struct json_object *o;
	int64_t now = time_mono_ms();

	/* Five events a second is plenty for a progress bar. */
	if (done < total && now - j->last < 200)
		return;
	j->last = now;
	o = json_object_new_object();
	if (!o || json_add_string(o, "phase", "copying") < 0 ||
	    json_add_int64(o, "done", (int64_t)done) < 0 ||
	    json_add_int64(o, "total", (int64_t)total) < 0) {
		json_object_put(o);
		return;
	}
	(void)api_stream_progress(j->stream, o);
}

static int import_run(struct api_stream *s, void *arg)
{
	struct import_job *j = arg;
	_cleanup_(image_info_freep) struct image_info *info = NULL;
	char msg[512];
	int r;

	j->stream = s;
	r = image_store_import(j->d->storage, j->id, j->path, j->kernel, j->initrd, j->cmdline,
	                       j->replace, import_progress, j, &info);
	if (r < 0) {
		if (r == -EEXIST)
			(void)snprintf(msg, sizeof(msg),
			               "image '%s' is installed already (--replace to replace it)",
			               j->id);
		else
			(void)snprintf(msg, sizeof(msg), "importing %s as '%s': %s", j->path, j->id,
			               slate_strerror(r));
		return api_stream_error(s, r == -EEXIST ? API_ERR_CONFLICT : API_ERR_FAILED, msg);
	}
	log_info("imported image %s version %lld from %s", info->id, (long long)info->version,
	         j->path);
	return api_stream_result(s, api_image_json(info, true));
}

int handle_image_import(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	struct import_job *j;
	const char *id = NULL, *path = NULL, *kernel = NULL, *initrd = NULL, *cmdline = NULL;
	bool replace = false;

	/* slated reads the file as root: only root may name one (a user could otherwise read
	 * any file on the host by importing it and booting it). */
	if (req->caller.uid != 0)
		return api_reply_error(reply, 403, API_ERR_PERMISSION,
		                       "only root may import local images");
	if (api_need_images(d, reply) < 0)
		return -ENODEV;
	if (!req->body || json_get_string(req->body, "id", &id) < 0 ||
	    json_get_string(req->body, "path", &path) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "an import needs id and path");
	if (image_id_check(id) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "invalid image id '%s': lowercase letters, digits, '.', '_' "
		                       "and '-', at most 64",
		                       id);
	(void)json_get_string(req->body, "kernel", &kernel);
	(void)json_get_string(req->body, "initrd", &initrd);
	(void)json_get_string(req->body, "cmdline", &cmdline);
	(void)json_get_bool(req->body, "replace", &replace);
	if (!kernel != !initrd)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "--kernel and --initrd go together");
	if (cmdline && !kernel)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "--cmdline needs --kernel");
	if (path[0] != '/' || (kernel && kernel[0] != '/') || (initrd && initrd[0] != '/'))
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "paths must be absolute");
	{
		const char *const files[] = {path, kernel, initrd};
		for (size_t i = 0; i < ELEMENTSOF(files); i++)
			if (files[i] && image_store_source_check(d->storage, files[i]) == -EPERM)
				return api_reply_error(
				        reply, 403, API_ERR_PERMISSION,
				        "%s is inside slated's state directory (a workspace's disk "
				        "or home, a checkpoint): a base image is never made from "
				        "what a workspace used",
				        files[i]);
	}

	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	j->replace = replace;
	j->id = strdup(id);
	j->path = strdup(path);
	j->kernel = kernel ? strdup(kernel) : NULL;
	j->initrd = initrd ? strdup(initrd) : NULL;
	j->cmdline = cmdline ? strdup(cmdline) : NULL;
	if (!j->id || !j->path || (kernel && !j->kernel) || (initrd && !j->initrd) ||
	    (cmdline && !j->cmdline)) {
		import_job_free(j);
		return -ENOMEM;
	}
	return api_reply_stream(reply, import_run, j, import_job_free);
}

/* ---- booted snapshots (daemon/snapshot.h) ---- */

struct snapshot_job {
	struct daemon_ctx *d;
	char id[IMAGE_ID_MAX + 1];
	uint64_t memory_mib;
	unsigned cpus;
};

static int snapshot_run(struct api_stream *s, void *arg)
{
	struct snapshot_job *j = arg;
	struct slate_error err = {0};
	struct snapshot_made made;
	struct json_object *res;

	if (daemon_snapshot_make(j->d, j->id, j->memory_mib, j->cpus, api_stream_step, s, &made,
	                         &err) < 0)
		return api_stream_error(s, api_error_code(err.code, NULL), err.msg), -EIO;
	res = json_object_new_object();
	if (!res || json_add_string(res, "image", j->id) < 0 ||
	    json_add_string(res, "key", made.key) < 0 ||
	    json_add_int64(res, "memory_mib", (int64_t)j->memory_mib) < 0 ||
	    json_add_int64(res, "cpus", j->cpus) < 0 ||
	    json_add_bool(res, "existed", made.existed) < 0 ||
	    json_add(res, "boot_s", json_object_new_double(made.boot_s)) < 0 ||
	    json_add(res, "save_s", json_object_new_double(made.save_s)) < 0 ||
	    json_add(res, "total_s", json_object_new_double(made.total_s)) < 0 ||
	    json_add_int64(res, "state_bytes", (int64_t)made.state_bytes) < 0) {
		json_object_put(res);
		return -ENOMEM;
	}
	return api_stream_result(s, res);
}

int handle_image_snapshot(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *id = req->params[0];
	struct snapshot_job *j;
	int64_t mem = WORKSPACE_DEFAULT_MEMORY_MIB, cpus = WORKSPACE_DEFAULT_CPUS;

	/* It boots a guest of the size asked for: an administrator's decision, as an import is. */
	if (req->caller.uid != 0)
		return api_reply_error(reply, 403, API_ERR_PERMISSION,
		                       "only root may make booted snapshots (with boot-snapshots = "
		                       "auto, slated makes them itself)");
	if (api_need_images(d, reply) < 0)
		return -ENODEV;
	if (image_id_check(id) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "invalid image id");
	if (req->body) {
		int rm = json_get_int64(req->body, "memory_mib", &mem);
		int rc = json_get_int64(req->body, "cpus", &cpus);

		if ((rm < 0 && rm != -ENOENT) || (rc < 0 && rc != -ENOENT))
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "memory_mib and cpus are integers");
	}
	if (mem < 128 || mem > (1 << 20) || cpus < 1 || cpus > 256)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "memory_mib must be 128 to 1048576, cpus 1 to 256");
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (struct snapshot_job){.d = d, .memory_mib = (uint64_t)mem, .cpus = (unsigned)cpus};
	memcpy(j->id, id, strlen(id) + 1);
	return api_reply_stream(reply, snapshot_run, j, free);
}

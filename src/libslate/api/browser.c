/* SPDX-License-Identifier: GPL-2.0-or-later */

/* A workspace's browser VM (daemon/browser.h): start (streamed), stop, status, screenshot. */

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "api/access.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "daemon/browser.h"
#include "image/store.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "workspace/layout.h"

struct browser_job {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
	char image[IMAGE_ID_MAX + 1];
	struct browser_opts o;
};

static int start_run(struct api_stream *s, void *arg)
{
	struct browser_job *j = arg;
	struct slate_error err = {0};
	struct json_object *res = NULL;

	if (daemon_browser_start(j->d, j->name, &j->o, api_stream_step, s, &res, &err) < 0)
		return api_stream_error(s, api_error_code(err.code, NULL), err.msg), -EIO;
	if (!res)
		return -ENOMEM;
	return api_stream_result(s, res);
}

int handle_browser_start(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0], *image = NULL;
	int64_t mem = BROWSER_DEFAULT_MEMORY_MIB, cpus = BROWSER_DEFAULT_CPUS;
	struct browser_job *j;
	bool persist = false;

	if (api_need_workspaces(d, reply) < 0 || api_need_images(d, reply) < 0 ||
	    api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	if (req->body) {
		int rm = json_get_int64(req->body, "memory_mib", &mem);
		int rc = json_get_int64(req->body, "cpus", &cpus);
		int ri = json_get_string(req->body, "image", &image);
		int rp = json_get_bool(req->body, "persist", &persist);

		if ((rm < 0 && rm != -ENOENT) || (rc < 0 && rc != -ENOENT) ||
		    (ri < 0 && ri != -ENOENT) || (rp < 0 && rp != -ENOENT))
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "memory_mib and cpus are integers, image a string, "
			                       "persist a boolean");
	}
	if (mem < 256 || mem > (1 << 20) || cpus < 1 || cpus > 256)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "memory_mib must be 256 to 1048576, cpus 1 to 256");
	if (image && image_id_check(image) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "invalid image id");
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	memcpy(j->name, name, strnlen(name, WORKSPACE_NAME_MAX));
	if (image)
		memcpy(j->image, image, strlen(image));
	j->o = (struct browser_opts){.image = image ? j->image : NULL,
	                             .persist = persist,
	                             .memory_mib = (uint64_t)mem,
	                             .cpus = (unsigned)cpus};
	return api_reply_stream(reply, start_run, j, free);
}

static int reply_err(struct api_reply *reply, const struct slate_error *err)
{
	unsigned status = 500;
	const char *code = api_error_code(err->code, &status);

	return api_reply_error(reply, status, code, "%s", err->msg);
}

int handle_browser_stop(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	struct slate_error err = {0};
	struct json_object *res = NULL;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	if (daemon_browser_stop(d, name, &res, &err) < 0)
		return reply_err(reply, &err);
	if (!res)
		return -ENOMEM;
	return api_reply_json(reply, 200, res);
}

int handle_browser_get(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	struct json_object *res = NULL;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	r = daemon_browser_status(d, name, &res);
	if (r < 0)
		return r;
	return api_reply_json(reply, 200, res);
}

int handle_browser_screenshot(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	struct slate_error err = {0};
	_cleanup_json_ struct json_object *o = NULL;
	uint8_t *png = NULL;
	char *b64;
	size_t len = 0, b64_len;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	if (daemon_browser_screenshot(d, name, &png, &len, &err) < 0)
		return reply_err(reply, &err);
	b64_len = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
	b64 = malloc(b64_len);
	o = json_object_new_object();
	if (!b64 || !o) {
		free(png);
		free(b64);
		return -ENOMEM;
	}
	(void)sodium_bin2base64(b64, b64_len, png, len, sodium_base64_VARIANT_ORIGINAL);
	free(png);
	if (json_add_string(o, "name", name) < 0 || json_add_string(o, "format", "png") < 0 ||
	    json_add_int64(o, "bytes", (int64_t)len) < 0 ||
	    json_add_string(o, "png_base64", b64) < 0) {
		free(b64);
		return -ENOMEM;
	}
	free(b64);
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

int handle_browser_view(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	struct slate_error err = {0};
	struct json_object *res = NULL;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	/* The socket belongs to the caller: it is the view's only access control. */
	if (daemon_browser_view(d, name, req->caller.uid, &res, &err) < 0)
		return reply_err(reply, &err);
	return api_reply_json(reply, 200, res);
}

int handle_browser_view_stop(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	struct slate_error err = {0};
	struct json_object *res = NULL;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return -EINVAL;
	if (daemon_browser_view_stop(d, name, &res, &err) < 0)
		return reply_err(reply, &err);
	return api_reply_json(reply, 200, res);
}

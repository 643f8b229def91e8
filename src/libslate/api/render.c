/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Rendering shared by the handlers (api/render.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/protocol.h"
#include "api/render.h"
#include "image/store.h"
#include "util/error.h"
#include "util/json.h"

int api_reply_errno(struct api_reply *reply, int r, const char *what, const char *name)
{
	switch (r) {
	case -EEXIST:
		(void)api_reply_error(reply, 409, API_ERR_CONFLICT, "%s: %s exists already", what,
		                      name);
		break;
	case -ENOENT:
		(void)api_reply_error(reply, 404, API_ERR_NOT_FOUND, "%s: %s: %s", what, name,
		                      slate_strerror(r));
		break;
	case -EINVAL:
		(void)api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "%s: %s: %s", what, name,
		                      slate_strerror(r));
		break;
	case -ENOSPC:
	case -EDQUOT:
		(void)api_reply_error(
		        reply, 507, API_ERR_NO_SPACE,
		        "%s: %s: the filesystem holding workspaces is full; nothing was "
		        "left half-made",
		        what, name);
		break;
	default:
		(void)api_reply_error(reply, 500, API_ERR_FAILED, "%s: %s: %s", what, name,
		                      slate_strerror(r));
	}
	return r;
}

const char *api_digest_text(const char *stored, char out[API_DIGEST_TEXT_MAX])
{
	if (!stored || !*stored)
		return "";
	if (strchr(stored, ':'))
		return stored;
	(void)snprintf(out, API_DIGEST_TEXT_MAX, "sha256:%s", stored);
	return out;
}

struct json_object *api_image_json(const struct image_info *i, bool with_installed)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	char digest[API_DIGEST_TEXT_MAX];

	if (!o || json_add_string(o, "id", i->id) < 0 ||
	    json_add_int64(o, "version", i->version) < 0 ||
	    json_add_bool(o, "local", i->local) < 0 || json_add_bool(o, "signed", !i->local) < 0 ||
	    json_add_string(o, "digest", api_digest_text(i->sha256, digest)) < 0 ||
	    json_add_int64(o, "size", (int64_t)i->size) < 0 ||
	    json_add_string(o, "boot", i->kernel_boot ? "kernel" : "firmware") < 0 ||
	    (with_installed && json_add_int64(o, "installed", i->installed) < 0))
		return NULL;
	if (i->cmdline)
		(void)json_add_string(o, "cmdline", i->cmdline);
	if (i->description)
		(void)json_add_string(o, "description", i->description);
	return TAKE_PTR(o);
}

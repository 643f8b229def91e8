/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Rendering shared by the handlers (api/render.c): library errors as replies, installed images
 * as JSON. */

#include <stdbool.h>

#include "api/server.h"

struct image_info;
struct json_object;

/* Maps a library error r about what (of name) onto reply: 409 exists, 404, 400, 507 full, else
 * 500. Always returns r (< 0). */
int api_reply_errno(struct api_reply *reply, int r, const char *what, const char *name);
/* An installed image as JSON (GET /v1/images, pull, import); its digest as the API shows it
 * (api_digest_text): "sha256-1m:<hex>" (image/verify.h) or, for an image installed with a plain
 * SHA-256, "sha256:<hex>". out holds API_DIGEST_TEXT_MAX bytes. */
#define API_DIGEST_TEXT_MAX 96
struct json_object *api_image_json(const struct image_info *i, bool with_installed);
const char *api_digest_text(const char *stored, char out[API_DIGEST_TEXT_MAX]);

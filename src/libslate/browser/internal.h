/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* What the CDP client's files share (cdp-http.c, cdp-ws.c, cdp.c) beyond cdp.h. */

#include <stddef.h>
#include <stdint.h>

#include "browser/cdp.h"

/*
 * Sends the WebSocket upgrade request for path with key on fd and reads the response head into r
 * (set up here; the caller judges it and calls cdp_http_reader_done). The bytes that came after
 * the head (the server's first frames) go to rest, at most rest_max, their count to *ret_rest.
 */
int cdp_http_upgrade(int fd, const char *path, const char *key, int64_t deadline_ms,
                     struct cdp_http_reader *r, uint8_t *rest, size_t rest_max, size_t *ret_rest,
                     struct slate_error *err);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Error codes. Functions return >= 0 on success and a negative value on failure: either
 * -errno, or one of the wire/crypto codes below (after OpenSSH's ssherr.h). The wire codes
 * live far above the errno range so the two never collide.
 */

#define SLATE_ERR_BASE 4096

enum slate_err {
	SLATE_ERR_INTERNAL = -(SLATE_ERR_BASE + 1),
	SLATE_ERR_NO_BUFFER_SPACE = -(SLATE_ERR_BASE + 2), /* would exceed the buffer's maximum */
	SLATE_ERR_MESSAGE_INCOMPLETE = -(SLATE_ERR_BASE + 3), /* read past the end of the data */
	SLATE_ERR_INVALID_FORMAT = -(SLATE_ERR_BASE + 4),
	SLATE_ERR_STRING_TOO_LARGE = -(SLATE_ERR_BASE + 5),
	SLATE_ERR_TOO_LARGE = -(SLATE_ERR_BASE + 6), /* input over its hard cap, refused unparsed */
	SLATE_ERR_SIGNATURE_INVALID = -(SLATE_ERR_BASE + 7),
	SLATE_ERR_KEY_NOT_TRUSTED = -(SLATE_ERR_BASE + 8),
	SLATE_ERR_PROTOCOL_VERSION = -(SLATE_ERR_BASE + 9),
	SLATE_ERR_JSON_TYPE = -(SLATE_ERR_BASE + 10), /* a JSON member has the wrong type */
	SLATE_ERR_JSON_DEPTH = -(SLATE_ERR_BASE + 11),
	SLATE_ERR_CRYPTO = -(SLATE_ERR_BASE + 12),
	SLATE_ERR_LAST_ = -(SLATE_ERR_BASE + 13),
};

/* Returns a static description of r: a slate_err code or a negative errno. Never NULL. */
const char *slate_strerror(int r);

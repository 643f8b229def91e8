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
	SLATE_ERR_SIGNATURE_MISSING = -(SLATE_ERR_BASE + 13), /* no detached signature at all */
	SLATE_ERR_SIGNATURE_FORMAT = -(SLATE_ERR_BASE + 14),  /* a signature file we cannot read */
	SLATE_ERR_ROLLBACK = -(SLATE_ERR_BASE + 15), /* older than the last accepted version */
	SLATE_ERR_VERSION_REUSED = -(SLATE_ERR_BASE + 16), /* same version, different bytes */
	SLATE_ERR_EXPIRED = -(SLATE_ERR_BASE + 17),       /* past its expiry time (freeze attack) */
	SLATE_ERR_WRONG_CHANNEL = -(SLATE_ERR_BASE + 18), /* made for another channel */
	SLATE_ERR_SIZE_MISMATCH = -(SLATE_ERR_BASE + 19), /* more or fewer bytes than declared */
	SLATE_ERR_DIGEST_MISMATCH = -(SLATE_ERR_BASE + 20), /* SHA-256 differs from the declared */
	SLATE_ERR_KEY_PERMISSIONS = -(SLATE_ERR_BASE + 21), /* secret key file open to others */
	SLATE_ERR_LAST_ = -(SLATE_ERR_BASE + 22),
};

/* Returns a static description of r: a slate_err code or a negative errno. Never NULL. */
const char *slate_strerror(int r);

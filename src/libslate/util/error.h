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
	SLATE_ERR_COMPROMISED = -(SLATE_ERR_BASE + 22), /* quarantined after a leak: wipe first */
	SLATE_ERR_BASE_DRIFT = -(SLATE_ERR_BASE + 23),  /* cloned from an older image version */
	SLATE_ERR_SHARE = -(SLATE_ERR_BASE + 24),       /* a shared folder may not be served */
	SLATE_ERR_LIBVIRT = -(SLATE_ERR_BASE + 25),     /* libvirt cannot be reached or asked */
	SLATE_ERR_LAST_ = -(SLATE_ERR_BASE + 26),
};

/* Returns a static description of r: a slate_err code or a negative errno. Never NULL. */
const char *slate_strerror(int r);

/*
 * The library's error with its context (after crun's libcrun_error_t). A function that can fail
 * in more than one way takes `struct slate_error *err` (NULL: the caller wants the code only),
 * returns the negative code, and says in err what failed; a caller that knows more puts its
 * context in front with slate_error_wrap, so that the message reads from the outermost context
 * in: "start ws1: preparing its disks: No space left on device". Library code does not log an
 * error it returns: whoever ends its journey (a reply, a log line) shows it once.
 */
#define SLATE_ERROR_MSG_MAX 4096

struct slate_error {
	int code;                      /* 0: none; else a negative errno or a SLATE_ERR_* */
	char msg[SLATE_ERROR_MSG_MAX]; /* "" until set; always NUL-terminated */
};

/* Sets err (may be NULL) to code and the formatted message. Returns code. */
int slate_error_set(struct slate_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* The same, with ": " and code's description after the message, unless the message already
 * ends with it (no "X: No such file: No such file"). Returns code. */
int slate_error_errno(struct slate_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Puts the formatted context and ": " in front of err's message (err's code is kept, or set to
 * code when err holds none yet, its message then code's description). Returns err's code, or
 * code when err is NULL. */
int slate_error_wrap(struct slate_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* err's message, or its code's description when it has none. Never NULL. */
const char *slate_error_text(const struct slate_error *err);

/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"
#include "util/macro.h"

/* Where code sits in the table below. */
#define ERR_INDEX(code) ((size_t)(-(code)-SLATE_ERR_BASE - 1))

static const char *const slate_err_table[] = {
        [ERR_INDEX(SLATE_ERR_INTERNAL)] = "Internal error",
        [ERR_INDEX(SLATE_ERR_NO_BUFFER_SPACE)] = "Buffer maximum would be exceeded",
        [ERR_INDEX(SLATE_ERR_MESSAGE_INCOMPLETE)] = "Message incomplete",
        [ERR_INDEX(SLATE_ERR_INVALID_FORMAT)] = "Invalid format",
        [ERR_INDEX(SLATE_ERR_STRING_TOO_LARGE)] = "String too large",
        [ERR_INDEX(SLATE_ERR_TOO_LARGE)] = "Input larger than allowed",
        [ERR_INDEX(SLATE_ERR_SIGNATURE_INVALID)] = "Signature invalid",
        [ERR_INDEX(SLATE_ERR_KEY_NOT_TRUSTED)] = "Key not trusted",
        [ERR_INDEX(SLATE_ERR_PROTOCOL_VERSION)] = "Unsupported protocol version",
        [ERR_INDEX(SLATE_ERR_JSON_TYPE)] = "JSON member has the wrong type",
        [ERR_INDEX(SLATE_ERR_JSON_DEPTH)] = "JSON nested too deeply",
        [ERR_INDEX(SLATE_ERR_CRYPTO)] = "Cryptographic operation failed",
        [ERR_INDEX(SLATE_ERR_SIGNATURE_MISSING)] = "Signature missing",
        [ERR_INDEX(SLATE_ERR_SIGNATURE_FORMAT)] = "Malformed signature",
        [ERR_INDEX(SLATE_ERR_ROLLBACK)] = "Older than the last accepted version (rollback)",
        [ERR_INDEX(SLATE_ERR_VERSION_REUSED)] = "Version already accepted with different contents",
        [ERR_INDEX(SLATE_ERR_EXPIRED)] = "Expired",
        [ERR_INDEX(SLATE_ERR_WRONG_CHANNEL)] = "Made for another channel",
        [ERR_INDEX(SLATE_ERR_SIZE_MISMATCH)] = "Size differs from the declared size",
        [ERR_INDEX(SLATE_ERR_DIGEST_MISMATCH)] = "SHA-256 differs from the declared digest",
        [ERR_INDEX(SLATE_ERR_KEY_PERMISSIONS)] = "Secret key file is accessible to group or others",
        [ERR_INDEX(SLATE_ERR_COMPROMISED)] = "Compromised: may not start until wiped",
        [ERR_INDEX(SLATE_ERR_BASE_DRIFT)] = "Cloned from an older version of its image",
        [ERR_INDEX(SLATE_ERR_SHARE)] = "Shared folder cannot be served",
        [ERR_INDEX(SLATE_ERR_LIBVIRT)] = "libvirt cannot be reached",
};

/* A new code without a description here fails the build instead of printing NULL. */
_Static_assert(ELEMENTSOF(slate_err_table) == ERR_INDEX(SLATE_ERR_LAST_),
               "every enum slate_err needs a description");

const char *slate_strerror(int r)
{
	const char *s;

	if (r == 0)
		return "Success";
	/* Be lenient about the sign, but -INT_MIN does not exist. */
	if (r == INT_MIN)
		return "Unknown error";
	if (r > 0)
		r = -r;

	if (r <= -(SLATE_ERR_BASE + 1) && r > SLATE_ERR_LAST_) {
		s = slate_err_table[ERR_INDEX(r)];
		return s ? s : "Unknown slate error";
	}
	if (r <= -SLATE_ERR_BASE)
		return "Unknown slate error";

	/* strerror() may use a static buffer for unknown values; strerrordesc_np() never does. */
	s = strerrordesc_np(-r);
	return s ? s : "Unknown error";
}

static void error_vset(struct slate_error *err, int code, const char *fmt, va_list ap)
{
	err->code = code;
	(void)vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
}

int slate_error_set(struct slate_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	va_start(ap, fmt);
	error_vset(err, code, fmt, ap);
	va_end(ap);
	return code;
}

int slate_error_errno(struct slate_error *err, int code, const char *fmt, ...)
{
	const char *desc = slate_strerror(code);
	size_t n, dn = strlen(desc);
	va_list ap;

	if (!err)
		return code;
	va_start(ap, fmt);
	error_vset(err, code, fmt, ap);
	va_end(ap);
	n = strlen(err->msg);
	if (n < dn || strcmp(err->msg + n - dn, desc) != 0)
		(void)snprintf(err->msg + n, sizeof(err->msg) - n, "%s%s", n ? ": " : "", desc);
	return code;
}

int slate_error_wrap(struct slate_error *err, int code, const char *fmt, ...)
{
	char old[SLATE_ERROR_MSG_MAX];
	size_t n, on;
	va_list ap;

	if (!err)
		return code;
	if (err->code == 0)
		err->code = code;
	on = strlen(slate_error_text(err));
	memcpy(old, slate_error_text(err), on + 1);
	va_start(ap, fmt);
	(void)vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	/* context, ": ", the old message: whatever fits */
	n = strlen(err->msg);
	for (const char *p = ": "; *p && n < sizeof(err->msg) - 1; p++)
		err->msg[n++] = *p;
	if (on > sizeof(err->msg) - 1 - n)
		on = sizeof(err->msg) - 1 - n;
	memcpy(err->msg + n, old, on);
	err->msg[n + on] = '\0';
	return err->code;
}

const char *slate_error_text(const struct slate_error *err)
{
	if (!err)
		return "Unknown error";
	return err->msg[0] ? err->msg : slate_strerror(err->code);
}

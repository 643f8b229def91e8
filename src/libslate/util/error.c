/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <limits.h>
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

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/proto.h"
#include "util/error.h"

int agent_frame_length_check(uint32_t len)
{
	if (len == 0)
		return SLATE_ERR_INVALID_FORMAT;
	if (len > AGENT_MAX_FRAME)
		return SLATE_ERR_TOO_LARGE;
	return 0;
}

/* Checks a message body's size and reads its type byte; *ret holds the rest. */
static int frame_open(const uint8_t *msg, size_t len, struct buf **ret, uint8_t *ret_type)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	if (!msg || len == 0 || len > AGENT_MAX_FRAME)
		return SLATE_ERR_INVALID_FORMAT;
	b = buf_from(msg, len);
	if (!b)
		return -ENOMEM;
	r = buf_get_u8(b, ret_type);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(b);
	return 0;
}

int agent_sign_request_parse(const uint8_t *msg, size_t len, struct agent_sign_request *ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	struct agent_sign_request req;
	uint8_t type;
	int r;

	r = frame_open(msg, len, &b, &type);
	if (r < 0)
		return r;
	if ((r = buf_get_string_direct(b, &req.key, &req.key_len)) < 0 ||
	    (r = buf_get_string_direct(b, &req.data, &req.data_len)) < 0 ||
	    (r = buf_get_u32(b, &req.flags)) < 0)
		return r;
	if (type != SSH_AGENTC_SIGN_REQUEST || buf_len(b) != 0)
		return SLATE_ERR_INVALID_FORMAT;
	if (req.key_len == 0 || req.key_len > AGENT_MAX_KEY_BLOB)
		return SLATE_ERR_INVALID_FORMAT;
	*ret = req;
	return 0;
}

static bool type_name_ok(const uint8_t *p, size_t n)
{
	if (n == 0 || n >= AGENT_MAX_KEY_TYPE)
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] <= 0x20 || p[i] >= 0x7f)
			return false;
	return true;
}

/* Reads one string that names a type or algorithm from b into ret. */
static int get_type_name(struct buf *b, char ret[AGENT_MAX_KEY_TYPE])
{
	const uint8_t *p;
	size_t n;
	int r;

	r = buf_get_string_direct(b, &p, &n);
	if (r < 0)
		return r;
	if (!type_name_ok(p, n))
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(ret, p, n);
	ret[n] = '\0';
	return 0;
}

int agent_sign_response_parse(const uint8_t *msg, size_t len, char ret_alg[AGENT_MAX_KEY_TYPE])
{
	_cleanup_buf_ struct buf *b = NULL, *sig = NULL;
	char alg[AGENT_MAX_KEY_TYPE];
	const uint8_t *s;
	size_t n;
	uint8_t type;
	int r;

	r = frame_open(msg, len, &b, &type);
	if (r < 0)
		return r;
	r = buf_get_string_direct(b, &s, &n);
	if (r < 0)
		return r;
	if (type != SSH_AGENT_SIGN_RESPONSE || buf_len(b) != 0)
		return SLATE_ERR_INVALID_FORMAT;
	sig = buf_from(s, n);
	if (!sig)
		return -ENOMEM;
	if ((r = get_type_name(sig, alg)) < 0 || (r = buf_get_string_direct(sig, &s, &n)) < 0)
		return r;
	if (n == 0 || buf_len(sig) != 0)
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(ret_alg, alg, sizeof(alg));
	return 0;
}

int agent_key_blob_type(const uint8_t *blob, size_t len, char ret_type[AGENT_MAX_KEY_TYPE])
{
	_cleanup_buf_ struct buf *b = NULL;
	char type[AGENT_MAX_KEY_TYPE];
	int r;

	if (!blob || len == 0 || len > AGENT_MAX_KEY_BLOB)
		return SLATE_ERR_INVALID_FORMAT;
	b = buf_from(blob, len);
	if (!b)
		return -ENOMEM;
	r = get_type_name(b, type);
	if (r < 0)
		return r;
	/* A key is its type and at least one field more. */
	if (buf_len(b) == 0)
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(ret_type, type, sizeof(type));
	return 0;
}

int agent_fingerprint(const uint8_t *blob, size_t len, char ret[AGENT_FINGERPRINT_MAX])
{
	uint8_t h[crypto_hash_sha256_BYTES];
	char b64[sodium_base64_ENCODED_LEN(crypto_hash_sha256_BYTES,
	                                   sodium_base64_VARIANT_ORIGINAL_NO_PADDING)];

	if (!blob || len == 0)
		return SLATE_ERR_INVALID_FORMAT;
	(void)crypto_hash_sha256(h, blob, len);
	(void)sodium_bin2base64(b64, sizeof(b64), h, sizeof(h),
	                        sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
	(void)snprintf(ret, AGENT_FINGERPRINT_MAX, "SHA256:%s", b64);
	return 0;
}

bool agent_comment_ok(const char *c)
{
	if (strlen(c) > AGENT_MAX_COMMENT)
		return false;
	for (const char *p = c; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

int agent_public_line(const uint8_t *blob, size_t len, const char *comment, char **ret)
{
	char type[AGENT_MAX_KEY_TYPE];
	_cleanup_free_ char *b64 = NULL;
	size_t b64_len;
	char *line;
	int r;

	r = agent_key_blob_type(blob, len, type);
	if (r < 0)
		return r;
	if (comment && !agent_comment_ok(comment))
		return SLATE_ERR_INVALID_FORMAT;
	b64_len = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
	b64 = malloc(b64_len);
	if (!b64)
		return -ENOMEM;
	(void)sodium_bin2base64(b64, b64_len, blob, len, sodium_base64_VARIANT_ORIGINAL);
	if (asprintf(&line, "%s %s%s%s", type, b64, comment && *comment ? " " : "",
	             comment ? comment : "") < 0)
		return -ENOMEM;
	*ret = line;
	return 0;
}

int agent_public_line_parse(const char *line, uint8_t **ret_blob, size_t *ret_len,
                            char **ret_comment)
{
	char type[AGENT_MAX_KEY_TYPE], blob_type[AGENT_MAX_KEY_TYPE];
	_cleanup_free_ uint8_t *blob = NULL;
	_cleanup_free_ char *comment = NULL;
	const char *p = line, *b64, *end;
	size_t n, b64_len, blob_len;

	if (!line)
		return SLATE_ERR_INVALID_FORMAT;
	n = strcspn(p, " \t\r\n");
	if (!type_name_ok((const uint8_t *)p, n))
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(type, p, n);
	type[n] = '\0';
	p += n;
	if (*p != ' ' && *p != '\t')
		return SLATE_ERR_INVALID_FORMAT;
	p += strspn(p, " \t");
	b64 = p;
	b64_len = strcspn(p, " \t\r\n");
	if (b64_len == 0 ||
	    b64_len > sodium_base64_ENCODED_LEN(AGENT_MAX_KEY_BLOB, sodium_base64_VARIANT_ORIGINAL))
		return SLATE_ERR_INVALID_FORMAT;
	p += b64_len;
	blob = malloc(b64_len);
	if (!blob)
		return -ENOMEM;
	if (sodium_base642bin(blob, b64_len, b64, b64_len, NULL, &blob_len, &end,
	                      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    end != b64 + b64_len)
		return SLATE_ERR_INVALID_FORMAT;
	if (agent_key_blob_type(blob, blob_len, blob_type) < 0 || !streq(type, blob_type))
		return SLATE_ERR_INVALID_FORMAT;
	p += strspn(p, " \t");
	/* The rest is the comment; one line ending ("\n" or "\r\n") may follow. */
	n = strlen(p);
	if (n > 0 && p[n - 1] == '\n')
		n--;
	if (n > 0 && p[n - 1] == '\r')
		n--;
	while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	if (n > 0) {
		comment = strndup(p, n);
		if (!comment)
			return -ENOMEM;
		if (!agent_comment_ok(comment))
			return SLATE_ERR_INVALID_FORMAT;
	}
	*ret_blob = TAKE_PTR(blob);
	*ret_len = blob_len;
	if (ret_comment)
		*ret_comment = TAKE_PTR(comment);
	return 0;
}

int agent_frame_put(struct buf *out, const void *msg, size_t len)
{
	int r;

	if (len == 0 || len > AGENT_MAX_FRAME)
		return SLATE_ERR_TOO_LARGE;
	r = buf_put_u32(out, (uint32_t)len);
	if (r < 0)
		return r;
	return buf_put(out, msg, len);
}

int agent_put_failure(struct buf *out)
{
	static const uint8_t failure = SSH_AGENT_FAILURE;

	return agent_frame_put(out, &failure, 1);
}

int agent_ed25519_blob(const uint8_t pk[32], struct buf *out)
{
	int r = buf_put_cstring(out, AGENT_ED25519_TYPE);

	if (r < 0)
		return r;
	return buf_put_string(out, pk, 32);
}

int agent_ed25519_signature(const uint8_t sig[64], struct buf *out)
{
	int r = buf_put_cstring(out, AGENT_ED25519_TYPE);

	if (r < 0)
		return r;
	return buf_put_string(out, sig, 64);
}

const char *agent_message_name(uint8_t type)
{
	switch (type) {
	case SSH_AGENTC_REQUEST_IDENTITIES:
		return "request-identities";
	case SSH_AGENTC_SIGN_REQUEST:
		return "sign-request";
	case SSH_AGENTC_ADD_IDENTITY:
		return "add-identity";
	case SSH_AGENTC_REMOVE_IDENTITY:
		return "remove-identity";
	case SSH_AGENTC_REMOVE_ALL_IDENTITIES:
		return "remove-all-identities";
	case SSH_AGENTC_ADD_SMARTCARD_KEY:
		return "add-smartcard-key";
	case SSH_AGENTC_REMOVE_SMARTCARD_KEY:
		return "remove-smartcard-key";
	case SSH_AGENTC_LOCK:
		return "lock";
	case SSH_AGENTC_UNLOCK:
		return "unlock";
	case SSH_AGENTC_ADD_ID_CONSTRAINED:
		return "add-identity-constrained";
	case SSH_AGENTC_ADD_SMARTCARD_KEY_CONSTRAINED:
		return "add-smartcard-key-constrained";
	case SSH_AGENTC_EXTENSION:
		return "extension";
	default:
		return "unknown";
	}
}

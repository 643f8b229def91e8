/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The SSH agent protocol (draft-ietf-sshm-ssh-agent, OpenSSH's PROTOCOL.agent), the part a
 * sign-only agent speaks. A frame is a u32 length and that many bytes: a message type byte and
 * its contents. Lengths of 0 or over AGENT_MAX_FRAME are refused before anything is read.
 * Every parser here reads through the bounded buffer (util/buf.h) and refuses trailing bytes;
 * each returns 0 or a negative slate_err, with outputs untouched on failure.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define AGENT_MAX_FRAME (256u * 1024u)

/* Message numbers (draft-ietf-sshm-ssh-agent section 6.1). */
enum {
	SSH_AGENT_FAILURE = 5,
	SSH_AGENT_SUCCESS = 6,
	SSH_AGENTC_REQUEST_IDENTITIES = 11,
	SSH_AGENT_IDENTITIES_ANSWER = 12,
	SSH_AGENTC_SIGN_REQUEST = 13,
	SSH_AGENT_SIGN_RESPONSE = 14,
	SSH_AGENTC_ADD_IDENTITY = 17,
	SSH_AGENTC_REMOVE_IDENTITY = 18,
	SSH_AGENTC_REMOVE_ALL_IDENTITIES = 19,
	SSH_AGENTC_ADD_SMARTCARD_KEY = 20,
	SSH_AGENTC_REMOVE_SMARTCARD_KEY = 21,
	SSH_AGENTC_LOCK = 22,
	SSH_AGENTC_UNLOCK = 23,
	SSH_AGENTC_ADD_ID_CONSTRAINED = 25,
	SSH_AGENTC_ADD_SMARTCARD_KEY_CONSTRAINED = 26,
	SSH_AGENTC_EXTENSION = 27,
};

/* Signature flags of SSH_AGENTC_SIGN_REQUEST (section 6.6.1); others are refused. */
#define SSH_AGENT_RSA_SHA2_256 0x02u
#define SSH_AGENT_RSA_SHA2_512 0x04u
#define AGENT_SIGN_FLAGS_KNOWN (SSH_AGENT_RSA_SHA2_256 | SSH_AGENT_RSA_SHA2_512)

/* Bounds on what a key blob, a key type name and a comment may be. */
#define AGENT_MAX_KEY_BLOB 16384u
#define AGENT_MAX_KEY_TYPE 64u
#define AGENT_MAX_COMMENT 1024u
/* "SHA256:" and 43 characters of unpadded base64. */
#define AGENT_FINGERPRINT_MAX 64u

#define AGENT_ED25519_TYPE "ssh-ed25519"

/* Returns 0 when a frame may be len bytes long (1..AGENT_MAX_FRAME), SLATE_ERR_TOO_LARGE over
 * the limit and SLATE_ERR_INVALID_FORMAT for 0. */
int agent_frame_length_check(uint32_t len);

struct agent_sign_request {
	const uint8_t *key; /* the key blob; points into the message */
	size_t key_len;
	const uint8_t *data; /* what to sign; points into the message */
	size_t data_len;
	uint32_t flags;
};

/*
 * Parses an SSH_AGENTC_SIGN_REQUEST message (msg starts with the type byte): string key blob,
 * string data, u32 flags, nothing after. Pointers in *ret point into msg.
 */
int agent_sign_request_parse(const uint8_t *msg, size_t len, struct agent_sign_request *ret);

/*
 * Parses an SSH_AGENT_SIGN_RESPONSE message (msg starts with the type byte): one string, the
 * signature blob (string algorithm, string signature), nothing after either. *ret_alg gets the
 * algorithm name ("rsa-sha2-512", ...), NUL-terminated.
 */
int agent_sign_response_parse(const uint8_t *msg, size_t len, char ret_alg[AGENT_MAX_KEY_TYPE]);

/* The key type a public key blob starts with ("ssh-ed25519", ...): printable, non-empty. */
int agent_key_blob_type(const uint8_t *blob, size_t len, char ret_type[AGENT_MAX_KEY_TYPE]);

/* "SHA256:" + unpadded base64 of the blob's SHA-256, as ssh-keygen -l prints it. */
int agent_fingerprint(const uint8_t *blob, size_t len, char ret[AGENT_FINGERPRINT_MAX]);

/*
 * An OpenSSH public key line "TYPE BASE64 [COMMENT]". agent_public_line() returns it in a new
 * string (comment may be NULL). agent_public_line_parse() checks the line and that the blob
 * names the same type; *ret_blob (and *ret_comment, NULL when there is none) are new.
 */
int agent_public_line(const uint8_t *blob, size_t len, const char *comment, char **ret);
int agent_public_line_parse(const char *line, uint8_t **ret_blob, size_t *ret_len,
                            char **ret_comment);

/* A key comment: at most AGENT_MAX_COMMENT bytes, no control characters. */
bool agent_comment_ok(const char *c);

/* Appends the frame for a message body (type byte first) to out. */
int agent_frame_put(struct buf *out, const void *msg, size_t len);
/* Appends the one-byte SSH_AGENT_FAILURE frame to out. */
int agent_put_failure(struct buf *out);

/* The ed25519 public key blob and signature blob (RFC 8709). */
int agent_ed25519_blob(const uint8_t pk[32], struct buf *out);
int agent_ed25519_signature(const uint8_t sig[64], struct buf *out);

/* A printable name for a message type ("sign-request", "add-identity", ...), for logs. */
const char *agent_message_name(uint8_t type);

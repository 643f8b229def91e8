/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Placeholders: what a guest sees instead of a real secret. Each is derived with HKDF-SHA256
 * (OpenSSL's EVP_KDF "HKDF") from the real value (the input key material) and the install salt
 * (secrets/install.h), with the kind and the value's name in the info string, so it is the same
 * every time on this installation (tools never think a key rotated) and changes everywhere when
 * the salt file is deleted. It keeps the shape client-side validators check, with a visible
 * "slate" marker right after the provider's prefix:
 *
 *   anthropic  sk-ant-api03-slate…   the real key's prefix and length ("…AA" kept)
 *   openai     sk-proj-slate… / sk-slate…   prefix and length ("T3BlbkFJ" kept in place)
 *   github     ghp_slate… (gho_ ghu_ ghs_ ghr_): 4 + payload + 6-character base62 CRC32 of the
 *              payload, as GitHub's checksum validators compute it; github_pat_slate…_… with
 *              the real token's segment lengths
 *   gitlab     glpat-slate…           prefix and length ('.' separators kept in place)
 *   aws        access-key-id AKIASLATE… (20, [A-Z2-7], the real AKIA/ASIA prefix kept),
 *              secret-access-key slate… (40), session-token slate… (the real length)
 *   generic    slt_…                  the real length, at least 36
 *
 * The random part is base62 (a subset of every provider's alphabet). A placeholder never equals
 * nor contains its real value.
 */

#include <stddef.h>
#include <stdint.h>

#include "secrets/secrets.h"

#define PLACEHOLDER_MARKER "slate"
#define PLACEHOLDER_MAX (SECRET_VALUE_MAX + 64)

/*
 * Derives the placeholder of the real value real (len bytes) of a secret of kind, for the value
 * called name ("value", or for aws "access-key-id", "secret-access-key", "session-token"), from
 * salt (INSTALL_SALT_LEN bytes). Returns 0 and a new string in *ret, or a negative error.
 */
int placeholder_derive(const unsigned char *salt, enum secret_kind kind, const char *name,
                       const void *real, size_t len, char **ret);

/* Writes the 6-character base62 CRC32 of payload (GitHub's classic token checksum), NUL
 * terminated, into out. */
void placeholder_github_checksum(const char *payload, size_t len, char out[7]);

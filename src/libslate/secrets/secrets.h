/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The secrets a workspace's egress may use, as the egress proxy and the guest provisioning see
 * them: the vault (secrets/vault.c) decrypts them, merged (the user's global secrets, then the
 * workspace's own, which override by key name), into a secret_set. Real values live only in
 * secure buffers (util/buf.h: buf_free_secure wipes them) and are registered with log_forbid()
 * while loaded. Nothing here is ever written where a guest can read it; placeholders are.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "util/buf.h"
#include "util/macro.h"

enum secret_kind {
	SECRET_KIND_GENERIC,
	SECRET_KIND_ANTHROPIC,
	SECRET_KIND_OPENAI,
	SECRET_KIND_GITHUB,
	SECRET_KIND_GITLAB,
	SECRET_KIND_AWS,
};

/* One placeholder and the real value it stands for. Most secrets have one ("value"); an AWS
 * secret has "access-key-id", "secret-access-key" and, with temporary credentials,
 * "session-token". */
struct secret_value {
	char *name;
	char *placeholder; /* what the guest sees; not secret */
	struct buf *real;  /* the real value: a secure buffer, never logged or returned */
};

struct secret {
	char *key; /* the name the user gave, e.g. ANTHROPIC_API_KEY */
	enum secret_kind kind;
	bool global; /* from the user's global vault */
	/* Hosts it may be sent to: normalised (lower case, IDNA A-labels, no trailing dot). A
	 * secret matches a host that equals one of these or ends in "." + one of these. */
	char **hosts;
	size_t n_hosts;
	char *env;  /* environment variable the guest sees the placeholder in, or NULL */
	char *file; /* guest file the placeholder is written to (e.g. "~/.git-credentials"), or NULL */
	struct secret_value *values;
	size_t n_values;
};

struct secret_set {
	struct secret *v;
	size_t n;
};

void secret_set_free(struct secret_set *s); /* wipes every real value; NULL is fine */
DEFINE_TRIVIAL_CLEANUP_FUNC(struct secret_set *, secret_set_free);

const char *secret_kind_name(enum secret_kind k);
int secret_kind_from_string(const char *s, enum secret_kind *ret);

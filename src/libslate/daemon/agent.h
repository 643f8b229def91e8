/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The sign-only SSH agent as the daemon holds it (daemon/agent.c, doc/ssh-agent.md). */

#include <stddef.h>

#include "util/error.h"

struct daemon_ctx;
struct json_object;

/*
 * Starts the agent into d->agent and registers it as the guest channels' "ssh-agent" service
 * (each stream on a thread of its own; every signature goes to the workspace's audit trail).
 * Returns < 0 when the agent cannot start (logged); a failed registration is logged only.
 * Stop undoes it; a stream arriving after it is closed.
 */
int daemon_agent_start(struct daemon_ctx *d);
void daemon_agent_stop(struct daemon_ctx *d);

/* The workspace's keys (public side only): a JSON array, managed key first; NULL: no memory. */
struct json_object *daemon_agent_keys(struct daemon_ctx *d, const char *name);
/*
 * Under the workspace's lock: generates its managed ed25519 key (agent_generate), or imports an
 * OpenSSH private key of len bytes (agent_import), into *ret (the key's JSON). Both need
 * d->agent. Returns 0, or < 0 with err saying why: a lock failure as "locking NAME: ...", else
 * agent_generate's and agent_import's codes (-EEXIST, -E2BIG, -ENOKEY, -EKEYREJECTED...).
 */
int daemon_agent_generate(struct daemon_ctx *d, const char *name, struct json_object **ret,
                          struct slate_error *err);
int daemon_agent_import(struct daemon_ctx *d, const char *name, const char *key, size_t len,
                        const char *passphrase, struct json_object **ret, struct slate_error *err);

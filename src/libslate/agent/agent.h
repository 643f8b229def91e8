/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The sign-only SSH agent (doc/ssh-agent.md). One struct agent serves every workspace: each
 * guest connection arrives with its workspace's name (known from the channel, never from the
 * guest) and sees that workspace's keys only. It answers SSH_AGENTC_REQUEST_IDENTITIES and
 * SSH_AGENTC_SIGN_REQUEST; every other message gets SSH_AGENT_FAILURE. A frame of length 0 or
 * over AGENT_MAX_FRAME closes the connection before a byte of it is parsed.
 *
 * Managed keys (ed25519, agent/keys.h) are signed with in process, the secret unsealed into
 * guarded memory. Imported keys live in a private OpenSSH ssh-agent per workspace
 * (agent/openssh.h), started when first needed (after a slated restart too) and fed the keys
 * unsealed from ssh/; a sign request for one is checked here and forwarded to it unchanged,
 * flags included, and only a well-formed SSH_AGENT_SIGN_RESPONSE comes back. The agent notices
 * changes to ssh/keys.json (a new key, wipe-home, delete) on the next request, and a reaper
 * stops private agents whose keys went away.
 *
 * Every signature is reported to the audit callback: key fingerprint, type, comment and kind,
 * bytes signed (the length, never the data), flags and the signature algorithm.
 */

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/macro.h"

struct install;
struct agent;
struct agent_conn;

/* An "error" code of the ssh-key API: the key is protected and no passphrase came with it. */
#define AGENT_API_ERR_PASSPHRASE_REQUIRED "passphrase_required"
/* An "error" code of the ssh-key API: the passphrase did not open the key. */
#define AGENT_API_ERR_PASSPHRASE_INCORRECT "passphrase_incorrect"

/* Connections: at most this many per workspace and in all; more are closed at once. */
#define AGENT_MAX_CONNS_PER_WORKSPACE 32u
#define AGENT_MAX_CONNS 512u
/* A frame must arrive whole within this long once its first byte has. */
#define AGENT_FRAME_TIMEOUT_MS 10000
/* A connection idle (between frames) for this long is closed. */
#define AGENT_IDLE_TIMEOUT_MS (30 * 60 * 1000)

typedef void (*agent_audit_fn)(const char *workspace, struct json_object *event, void *userdata);

struct agent_config {
	int workspaces_dirfd;          /* holds <workspace>/ssh/ (borrowed); -1: no workspaces */
	const struct install *install; /* master key (borrowed); NULL: nothing can be unsealed */
	const char *runtime_dir;       /* private agents go in <runtime_dir>/ssh-agent/ */
	agent_audit_fn audit;          /* may be NULL */
	void *userdata;
};

/* Sweeps what private agents of an earlier run left in the runtime directory and starts the
 * reaper. Returns 0 or -errno. */
int agent_new(const struct agent_config *cfg, struct agent **ret);
/* Closes every connection (shutdown; waits for them to end), stops every private agent and
 * wipes every secret. NULL is fine. */
void agent_free(struct agent *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct agent *, agent_free);

/*
 * Serves one connection of workspace on fd (blocking; closed at the end). agent_conn_begin()
 * registers it (so that agent_free waits for it) and fails with -ESHUTDOWN when stopping or
 * -EMFILE past the limits, closing fd; agent_conn_run() then serves it to the end.
 * agent_serve() is the two together.
 */
int agent_conn_begin(struct agent *a, int fd, const char *workspace, struct agent_conn **ret);
void agent_conn_run(struct agent_conn *c);
void agent_serve(struct agent *a, int fd, const char *workspace);

/*
 * One message (msg starts with the type byte, len is the frame's length) of a connection;
 * the reply frame is appended to out. Returns 0 (a failure reply counts) or < 0 when the
 * connection should close. For the fuzz target and tests; agent_conn_run() uses it.
 */
int agent_conn_handle(struct agent_conn *c, const uint8_t *msg, size_t len, struct buf *out);
/* A connection without a socket, for agent_conn_handle() alone. */
int agent_conn_new_detached(struct agent *a, const char *workspace, struct agent_conn **ret);
void agent_conn_free_detached(struct agent_conn *c);

/* Drops what is cached for the workspace: its keys, the unsealed managed key, its private
 * agent (and the imported keys in it). wipe-home and delete call it. */
void agent_forget(struct agent *a, const char *workspace);

/* The key operations behind the API (the caller holds the workspace lock). Each fills err
 * (may be NULL) with a reason on failure. */
/* The workspace's managed key (comment NULL: "slate:<workspace>@<host>"); -EEXIST if it has
 * one; *ret gets its agent_key_json. */
int agent_generate(struct agent *a, const char *workspace, const char *comment, const uint8_t *seed,
                   struct json_object **ret);
/* Imports an OpenSSH private key (see openssh_key_normalize for the errors) and checks that
 * the workspace's private agent takes it; -EEXIST when the workspace has the key already. */
int agent_import(struct agent *a, const char *workspace, const void *key, size_t len,
                 const char *passphrase, struct json_object **ret, struct slate_error *err);
/* The workspace's keys: a JSON array of agent_key_json, managed first. */
int agent_describe(struct agent *a, const char *workspace, struct json_object **ret);
/* The same without a running agent, from the workspace directory's ssh/ (describe). */
struct json_object *agent_keys_describe(int workspaces_dirfd, const char *workspace);

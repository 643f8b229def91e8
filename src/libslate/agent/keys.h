/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A workspace's host-held SSH keys, in <workspace>/ssh/ (0700, files 0600):
 *   keys.json        the public side: {"version":1,"keys":[{"kind","type","public","comment",
 *                    "file","created"}]}, "public" being the base64 key blob. Written
 *                    atomically; the agent notices a new one by its inode and times.
 *   managed.key      the workspace's own ed25519 secret key (libsodium's 64 bytes), sealed
 *                    under the host master key (secrets/install.h).
 *   imported-*.key   an imported OpenSSH private key, its passphrase removed, sealed likewise.
 * Each sealed file's purpose is "ssh-key:<workspace>/<file>", so a blob copied to another
 * workspace or file name does not open. Private bytes are only ever unsealed into secure
 * buffers. Callers serialise writers (the API holds the workspace lock); readers see the old
 * or the new keys.json. wipe-home removes the generated key and keeps imported ones
 * (agent_keys_keep_imported()); delete removes the whole directory (workspace/).
 */

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/proto.h"
#include "util/buf.h"
#include "util/macro.h"
#include "workspace/layout.h"

struct install;

#define AGENT_SSH_DIR WORKSPACE_SSH_DIR /* in the workspace's directory */
#define AGENT_KEYS_FILE "keys.json"
#define AGENT_MANAGED_FILE "managed.key"
#define AGENT_MAX_KEYS 16u
/* keys.json is refused past this size, unparsed. */
#define AGENT_KEYS_JSON_MAX (256u * 1024u)
/* A sealed key file: an OpenSSH private key of the largest kind is well under this. */
#define AGENT_SEALED_MAX (64u * 1024u)

enum agent_key_kind {
	AGENT_KEY_MANAGED,  /* generated here, signed with in process */
	AGENT_KEY_IMPORTED, /* an OpenSSH key; a private ssh-agent signs with it */
};

struct agent_key {
	enum agent_key_kind kind;
	uint8_t *blob; /* the public key blob */
	size_t blob_len;
	char type[AGENT_MAX_KEY_TYPE];
	char fingerprint[AGENT_FINGERPRINT_MAX];
	char *comment; /* may be NULL */
	char file[64]; /* the sealed file in ssh/ */
	int64_t created;
};

struct agent_keyset {
	struct agent_key *keys;
	size_t n;
};

/* Parses keys.json (strict: bounded size, known kinds, blobs that name their type, file names
 * of the two known shapes, at most one managed key, at most AGENT_MAX_KEYS). */
int agent_keyset_parse(const char *data, size_t len, struct agent_keyset **ret);
/* Loads <ws_dirfd>/ssh/keys.json; an absent directory or file is an empty set. */
int agent_keyset_load(int ws_dirfd, struct agent_keyset **ret);
/* A new empty set, or NULL. */
struct agent_keyset *agent_keyset_new(void);
void agent_keyset_free(struct agent_keyset *ks);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct agent_keyset *, agent_keyset_free);
/* Serialises ks as keys.json (caller frees). */
int agent_keyset_format(const struct agent_keyset *ks, char **ret);

/* The key whose blob equals blob, or NULL. */
const struct agent_key *agent_keyset_find(const struct agent_keyset *ks, const uint8_t *blob,
                                          size_t len);
/* The managed key, or NULL. */
const struct agent_key *agent_keyset_managed(const struct agent_keyset *ks);

/* {"kind","type","fingerprint","comment","public_key" (the OpenSSH line),"created"}. */
struct json_object *agent_key_json(const struct agent_key *k);
/* An array of agent_key_json, managed key first. */
struct json_object *agent_keyset_json(const struct agent_keyset *ks);

/*
 * Generates the workspace's managed ed25519 key (from seed when non-NULL: tests and benchmarks
 * only) with comment, seals the secret into ssh/managed.key and adds it to keys.json. -EEXIST
 * when it has one already. *ret (may be NULL) gets agent_key_json of the new key.
 */
int agent_keys_generate(int ws_dirfd, const struct install *in, const char *workspace,
                        const char *comment, const uint8_t *seed, struct json_object **ret);
/*
 * Seals an OpenSSH private key (no passphrase; agent/openssh.h makes it so) into
 * ssh/imported-<id>.key and adds it, with its public blob and comment, to keys.json. -EEXIST
 * for a key the workspace has already, -E2BIG past AGENT_MAX_KEYS.
 */
int agent_keys_add_imported(int ws_dirfd, const struct install *in, const char *workspace,
                            const void *key, size_t key_len, const uint8_t *blob, size_t blob_len,
                            const char *comment, struct json_object **ret);
/* Takes the key with this fingerprint out of keys.json and removes its sealed file. */
int agent_keys_remove(int ws_dirfd, const char *fingerprint);
/*
 * What wipe-home leaves of <ws_dirfd>/ssh/: the imported keys (the user's own, brought in with
 * `slate ssh-key import`), with keys.json rewritten to list them alone and every other file of
 * the directory (the generated key, anything else) removed. Returns how many were kept; 0 when
 * there are none, the directory is absent or keys.json cannot be read (the caller then removes
 * the whole directory). Running it again after a crash gives the same result.
 */
int agent_keys_keep_imported(int ws_dirfd);
/* Unseals k's private bytes into a secure buffer (free with buf_free_secure). */
int agent_keys_unseal(int ws_dirfd, const struct install *in, const char *workspace,
                      const struct agent_key *k, struct buf **ret);

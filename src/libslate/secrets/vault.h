/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The vaults: a workspace's secrets in <workspace dir>/secrets.enc, and each user's global
 * secrets in <state>/secrets/global-<uid>.enc (directory 0700, files 0600). A vault is one
 * blob sealed with install_seal() under the purpose "vault:<workspace>" or
 * "vault-global:<uid>", so a vault copied into another workspace's directory, or another
 * user's, does not open; it is replaced atomically (fs_write_atomic_at) under the workspace's
 * lock, or for a global vault under <state>/secrets/global-<uid>.lock.
 *
 * Inside the seal (the only place key names, hosts and values exist at rest):
 *   "SLVAULT1" | u32 count | count x secret
 *   secret: string key | string kind | u8 flags | string env ("" none) | string file
 *           ("" none) | [string query, when flags has 0x02] | u32 n_hosts |
 *           n_hosts x string host | u32 n_values | n_values x (string name | string real)
 *   flags: 0x01 substituted in bodies (--body), 0x02 in a query parameter (--query); other
 *           bits refused. A secret with neither is stored exactly as before they existed
 *           (flags 0), so older vaults read unchanged and older slateds read such secrets.
 * (strings are a u32 big-endian length and the bytes, util/buf.h). Placeholders are not
 * stored: they are derived again from the install salt at every load.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "secrets/install.h"
#include "secrets/secrets.h"
#include "util/buf.h"
#include "util/error.h"

#define VAULT_FILE "secrets.enc"
#define VAULT_GLOBAL_DIR "secrets"
#define VAULT_MAGIC "SLVAULT1"
#define VAULT_MAX_FILE (8u * 1024u * 1024u)

struct workspace_store;
struct json_object;

/*
 * Parses a vault's plaintext (what install_unseal returned): strictly, every secret checked as
 * secret_new checks it, hosts already normalised, no duplicate keys, no trailing bytes. With salt
 * (INSTALL_SALT_LEN bytes) the placeholders are derived; with NULL they are left NULL. Real
 * values are copied into secure buffers and registered with log_forbid(). On failure err says
 * why (never quoting a value). Returns 0 or SLATE_ERR_INVALID_FORMAT / -ENOMEM.
 */
int vault_parse(const void *plain, size_t len, const unsigned char *salt, bool global,
                struct secret_set **ret, struct slate_error *err);
/* The plaintext of s in a new secure buffer (free it with buf_free_secure). */
int vault_serialize(const struct secret_set *s, struct buf **ret);

/* Reads and unseals dirfd/file (a missing file is an empty vault). */
int vault_read_at(const struct install *in, int dirfd, const char *file, const char *purpose,
                  bool global, struct secret_set **ret, struct slate_error *err);
/* Seals s and replaces dirfd/file with it atomically (0600). */
int vault_write_at(const struct install *in, int dirfd, const char *file, const char *purpose,
                   const struct secret_set *s);

/*
 * The vault of workspace (a checked name; the caller has made sure owner may use it), or with
 * workspace NULL the global vault of owner. state_dirfd is slated's state directory.
 */
int vault_read(const struct install *in, struct workspace_store *st, int state_dirfd, uid_t owner,
               const char *workspace, struct secret_set **ret, struct slate_error *err);
/* Stores sec in that vault under its lock; sec is taken over (freed on failure). *ret_replaced
 * says whether a secret of that key was there. -ENOENT when the workspace went away meanwhile. */
int vault_put(const struct install *in, struct workspace_store *st, int state_dirfd, uid_t owner,
              const char *workspace, struct secret *sec, bool *ret_replaced,
              struct slate_error *err);
/* Removes the secret named key from that vault under its lock. -ENOENT when there is none. */
int vault_remove(const struct install *in, struct workspace_store *st, int state_dirfd, uid_t owner,
                 const char *workspace, const char *key, struct slate_error *err);

/*
 * The secrets a workspace's egress may use: owner's global vault merged with the workspace's
 * (secret_set_merge: the workspace's override by key name), placeholders derived unless
 * with_placeholders is false. workspace NULL: the global secrets alone. Returns 0 and a set
 * (perhaps empty) or a negative error, err saying why.
 */
int vault_load_set(const struct install *in, struct workspace_store *st, int state_dirfd,
                   uid_t owner, const char *workspace, bool with_placeholders,
                   struct secret_set **ret, struct slate_error *err);

/* For `slate describe`: the workspace's effective secrets as a JSON array (key, kind, scope,
 * hosts, env, file; no values, no placeholders). in may be NULL (then err says why). */
int vault_describe_json(const struct install *in, struct workspace_store *st, int state_dirfd,
                        uid_t owner, const char *workspace, struct json_object **ret,
                        struct slate_error *err);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The per-installation secrets slated keeps in <state>/install/ (mode 0700):
 *   master.key  32 random bytes (0600) that seal every vault and every host-held SSH key. When
 *               systemd passes a credential named "slate-master-key" (LoadCredentialEncrypted=)
 *               in $CREDENTIALS_DIRECTORY, that is used instead and no file is written.
 *   salt        32 random bytes (0600) that placeholders are derived from; deleting it rotates
 *               every placeholder.
 * Both live in sodium_malloc()ed memory (guard pages, MADV_DONTDUMP) for the daemon's lifetime.
 * A key file open to group or others is refused (SLATE_ERR_KEY_PERMISSIONS), never used.
 */

#include <stddef.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/macro.h"

#define INSTALL_KEY_LEN 32u
#define INSTALL_SALT_LEN 32u

struct install;

/* Opens (creating on first use) <state>/install/ under state_dirfd. credentials_dir is where
 * systemd put the service's credentials (NULL: $CREDENTIALS_DIRECTORY, if set). Returns 0, or
 * a negative error (SLATE_ERR_KEY_PERMISSIONS, SLATE_ERR_SIZE_MISMATCH for an unusable master
 * key) with err (may be NULL) saying which file. */
int install_open(int state_dirfd, const char *credentials_dir, struct install **ret,
                 struct slate_error *err);
void install_free(struct install *in);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct install *, install_free);

/* The directory fd of <state>/install (for the egress CA and other per-install files). */
int install_dirfd(const struct install *in);
/* The 32-byte salt placeholders are derived from. */
const unsigned char *install_salt(const struct install *in);
/* "file" or "systemd-credential": where the master key came from. */
const char *install_master_key_source(const struct install *in);

/*
 * Authenticated encryption under the master key (XChaCha20-Poly1305). purpose names what the
 * bytes are ("vault:<workspace>", "ssh-key:<workspace>") and is authenticated with them, so a
 * sealed blob moved to another purpose or workspace does not open. Sealed format:
 * "SLSEAL1\n" | 24-byte nonce | ciphertext | 16-byte tag.
 * install_unseal's result is a secure buffer: free it with buf_free_secure.
 */
int install_seal(const struct install *in, const char *purpose, const void *plain, size_t len,
                 struct buf **ret);
int install_unseal(const struct install *in, const char *purpose, const void *sealed, size_t len,
                   struct buf **ret);

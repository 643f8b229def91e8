/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * OpenSSH's own tools do what slate must not write by hand: reading private key files of every
 * kind (ssh-keygen) and signing with RSA, ECDSA, DSA and security keys (a private ssh-agent).
 * Every tool runs with a clean environment (no SSH_AUTH_SOCK, DISPLAY or SSH_ASKPASS: the
 * user's own agent is never reached), in a new session without a controlling terminal, with no
 * fd of slated but the pipes it is given. Private bytes travel through pipes and memfds only,
 * never through a named file or argv.
 */

#include <stddef.h>
#include <sys/types.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/macro.h"

/* The largest private key file accepted for import (an RSA-16384 key is about 13 KiB). */
#define OPENSSH_KEY_MAX (32u * 1024u)
#define OPENSSH_PASSPHRASE_MAX 1024u

/*
 * Turns an OpenSSH-loadable private key (OpenSSH format, PEM, PKCS#8; any key type) into an
 * unencrypted OpenSSH-format key: `ssh-keygen -p -N ""` on a memfd, the old passphrase on its
 * stdin, then `ssh-keygen -y` for the public line. *ret_key is a secure buffer; *ret_public is
 * "TYPE BASE64 [COMMENT]". Returns 0; -ENOKEY when the key needs a passphrase and none was
 * given; -EKEYREJECTED when the passphrase is wrong; -EINVAL when ssh-keygen cannot read it
 * (err says what it said, perhaps nothing); -ENOENT when ssh-keygen is not installed.
 */
int openssh_key_normalize(const void *key, size_t len, const char *passphrase, struct buf **ret_key,
                          char **ret_public, struct slate_error *err);

/*
 * A private `ssh-agent` holding one workspace's imported keys. Its socket is agent.sock in a
 * 0700 directory of slated's runtime directory, reachable by slated alone. It runs as
 * `ssh-agent -a agent.sock sh -c 'echo $SSH_AGENT_PID; exec cat'` with the shell's stdin a pipe
 * only slated holds: when slated goes, however it goes, the pipe closes, the shell ends and
 * ssh-agent (which checks its parent every 10 s) removes its socket and exits with its keys.
 */
struct openssh_agent;

/* Starts one in parent_dirfd/name (made 0700; anything left there from before is removed). */
int openssh_agent_start(int parent_dirfd, const char *name, struct openssh_agent **ret,
                        struct slate_error *err);
/* Adds an unencrypted private key (`ssh-add -q -`, the key on its stdin). -EIO when ssh-add
 * refused it, err holding what it said. */
int openssh_agent_add(struct openssh_agent *a, const void *key, size_t len,
                      struct slate_error *err);
/* Connects to it. Returns a blocking, CLOEXEC fd or -errno. */
int openssh_agent_connect(const struct openssh_agent *a);
/* Terminates it (its keys go with it), reaps the shell and removes its directory. NULL is fine. */
void openssh_agent_stop(struct openssh_agent *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct openssh_agent *, openssh_agent_stop);
/* Removes what private agents of an earlier slated left in parent_dirfd (their sockets). */
void openssh_agent_sweep(int parent_dirfd);

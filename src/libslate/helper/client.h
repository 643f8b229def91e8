/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * slated's side of slated-helper (helper/proto.h): a connection, and one function per request.
 * Calls are serialised on the connection (one request, one reply), so any thread may make them.
 * Every function returns >= 0 on success or -errno: the helper's answer, or -ECONNRESET/-EPIPE
 * when the helper is gone, -EPROTO when its reply is malformed.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "storage/storage.h"
#include "util/error.h"
#include "util/macro.h"

struct helper;

/*
 * The slated-helper binary to spawn: beside the running program (/proc/self/exe; a build tree
 * has slated and slated-helper side by side), else SLATE_LIBEXEC_DIR/slated-helper. Returns 0
 * and a malloc'ed path, or -ENOENT when neither is an executable file.
 */
int helper_find_binary(char **ret);

/*
 * Starts binary (helper_find_binary) for the state directory state_dir (absolute, canonical)
 * over a socketpair: the helper serves this process alone and exits when the connection
 * closes (this process exiting included). The helper runs with this process's privileges, so
 * call it before giving any up. log_level and virtiofsd (the virtiofsd it runs for shares: an
 * absolute path) may be NULL; they are passed on as --log-level and --virtiofsd.
 */
int helper_spawn(const char *binary, const char *state_dir, const char *log_level,
                 const char *virtiofsd, struct helper **ret);

/*
 * Connects to a helper listening on the SOCK_SEQPACKET socket at path (slated-helper.socket
 * under systemd; slated --helper-socket). The helper must be root (SO_PEERCRED), or -EPERM.
 * On failure err (may be NULL) says why. When the connection breaks later (the helper
 * restarted), the next call connects again.
 */
int helper_connect(const char *path, struct helper **ret, struct slate_error *err);

/* Closes the connection (a spawned helper then exits). NULL is fine. */
void helper_free(struct helper *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct helper *, helper_free);

/* Describes the helper, for logs: "slated-helper (pid N)" or "slated-helper at PATH". */
const char *helper_describe(const struct helper *h);

/*
 * POOL_MOUNT and POOL_UNMOUNT for state_dir (which must be the helper's own). As
 * storage_privops' pool_mount and pool_unmount: 1 or 0, or -errno with err (may be NULL) saying
 * why (the helper's message).
 */
int helper_pool_mount(struct helper *h, const char *state_dir, struct slate_error *err);
int helper_pool_unmount(struct helper *h, const char *state_dir, struct slate_error *err);

/* Fills *ret with storage_privops that ask h (which must outlive their use). */
void helper_storage_privops(struct helper *h, struct storage_privops *ret);

/*
 * SHARE_SERVE: the helper opens the share at path (absolute; no symlink on the way; owned by
 * uid: vm/virtiofs.h virtiofs_share_open) and starts virtiofsd on it as uid:gid (root's share:
 * read-only only; gid 0: root's only), serving the listening AF_UNIX stream socket listen_fd, with its stderr on log_fd
 * (a regular file or pipe open for writing; -1: none). readonly: a read-only share. Returns 0
 * with virtiofsd's pid and start time (for helper_share_stop), or -errno with err (may be NULL)
 * saying why.
 */
int helper_share_serve(struct helper *h, const char *path, uid_t uid, gid_t gid, bool readonly,
                       int listen_fd, int log_fd, pid_t *ret_pid, uint64_t *ret_start,
                       struct slate_error *err);

/*
 * SHARE_STOP: SIGTERM to the virtiofsd helper_share_serve() started as pid at start time start.
 * Returns 0, -ESRCH when it is gone, -EPERM when pid is not such a virtiofsd.
 */
int helper_share_stop(struct helper *h, pid_t pid, uint64_t start);

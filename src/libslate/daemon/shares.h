/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* A workspace's runtime directory and its shared host folders (daemon/shares.c). */

#include <stddef.h>
#include <sys/types.h>

#include "util/error.h"

struct daemon_ctx;
struct workspace;
struct workspace_share;

/* <runtime_dir>/vm/<name>, made (0700) when missing, into *ret. */
int daemon_runtime_dir(const struct daemon_ctx *d, const char *name, char **ret);
/* Removes <runtime_dir>/vm/<name> and what it holds (the console log, sockets), for a workspace
 * that is deleted; logs what it cannot remove. */
void daemon_runtime_dir_remove(const struct daemon_ctx *d, const char *name);

/* <run_dir>/fs-<tag><suffix>: a share's socket (".sock"), pid file (".pid") or log (".log");
 * NULL without memory. */
char *shares_path(const char *run_dir, const char *tag, const char *suffix);
/*
 * Serves share sh of a workspace on <run_dir>/fs-<tag>.sock: checks the directory again
 * (vm/virtiofs.h says how; expect_uid is the owner recorded at create) and has slated-helper
 * start its virtiofsd. *ret_socket: the socket's path. On failure err (may be NULL) says why.
 */
int shares_serve(const struct daemon_ctx *d, const char *run_dir, const char *tag,
                 const struct workspace_share *sh, uid_t expect_uid, char **ret_socket,
                 struct slate_error *err);
/* Everything that served a workspace's shares: its virtiofsd processes, old read-only binds. */
void shares_release(const struct daemon_ctx *d, const char *name);
/* Mounts each share in the running guest (as root, over the channel). On failure err (may be
 * NULL) says why. */
int shares_mount(struct daemon_ctx *d, const struct workspace *w, struct slate_error *err);

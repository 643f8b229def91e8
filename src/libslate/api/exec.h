/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Exec sessions in a workspace's guest (api/exec.c). */

#include <stddef.h>

#include "api/server.h"
#include "channel/proto.h"

struct daemon_ctx;

/* Opens an "exec" stream to the workspace's guest: *ret_fd speaks exec records. On failure err
 * says why. */
int exec_open(struct daemon_ctx *d, const char *name, int *ret_fd, char *err, size_t errlen);
/*
 * Runs req in the guest with input (may be NULL) as its stdin and collects stdout and stderr
 * (NUL-terminated, truncated to out_len - 1) and the exit status (128+N for signal N), within
 * timeout_ms. Returns 0 or a negative error, with err saying why.
 */
int exec_collect(struct daemon_ctx *d, const char *name, const struct ex_request *req,
                 const char *input, unsigned timeout_ms, char *out, size_t out_len, int *ret_status,
                 char *err, size_t errlen);
/*
 * The proof of a working terminal: waits for the guest agent, then runs a login shell on a PTY
 * that must execute a command and print its output. Retries until timeout_ms. 0 when proven.
 */
int exec_terminal_proof(struct daemon_ctx *d, const char *name, unsigned timeout_ms, char *err,
                        size_t errlen);

/*
 * A domain event of the workspace (description: "paused", "stopped (destroyed)"...): its
 * running exec sessions look at the domain and end, telling their clients why, when it is
 * paused, stopped or quarantined. Does not block: callable from the event thread.
 */
void exec_sessions_kick(const char *workspace, const char *description);

int handle_workspace_exec(struct api_request *req, struct api_reply *reply);
int handle_run(struct api_request *req, struct api_reply *reply);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Exec sessions in a workspace's guest (daemon/exec.c): a client's session bridged to the guest,
 * and slated's own commands there.
 */

#include <stddef.h>
#include <stdint.h>

#include "channel/proto.h"
#include "util/error.h"
#include "util/macro.h"

struct daemon_ctx;

/* Opens an "exec" stream to the workspace's guest: *ret_fd speaks exec records. On failure err
 * (may be NULL) says why. */
int exec_open(struct daemon_ctx *d, const char *name, int *ret_fd, struct slate_error *err);
/*
 * Runs req in the guest with input (may be NULL) as its stdin and collects stdout and stderr
 * (NUL-terminated, truncated to out_len - 1) and the exit status (128+N for signal N), within
 * timeout_ms. Returns 0 or a negative error, with err saying why.
 */
int exec_collect(struct daemon_ctx *d, const char *name, const struct ex_request *req,
                 const char *input, unsigned timeout_ms, char *out, size_t out_len, int *ret_status,
                 struct slate_error *err);
/*
 * The proof of a working terminal: waits for the guest agent, then runs a login shell on a PTY
 * that must execute a command and print its output. Retries until timeout_ms. 0 when proven,
 * else < 0 with err (may be NULL) saying what the last try got.
 */
/*
 * A dialog with a program slated runs in the guest (`slate-guest --probe`): opened with req,
 * fed with exec_dialog_send() (stdin), read a line at a time (stdout, without its newline; at
 * most out_len - 1 bytes, EXEC_DIALOG_BUFFER buffered). exec_dialog_line() fails with -EPIPE
 * once the program exited and its output is used up, -ETIMEDOUT at the deadline (time_mono_ms()).
 */
#define EXEC_DIALOG_BUFFER (4u * 1024 * 1024)
struct exec_dialog;
int exec_dialog_open(struct daemon_ctx *d, const char *name, const struct ex_request *req,
                     struct exec_dialog **ret, struct slate_error *err);
int exec_dialog_send(struct exec_dialog *g, const void *p, size_t len);
int exec_dialog_line(struct exec_dialog *g, int64_t deadline_ms, char *out, size_t out_len,
                     struct slate_error *err);
void exec_dialog_free(struct exec_dialog *g);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct exec_dialog *, exec_dialog_free);

int exec_terminal_proof(struct daemon_ctx *d, const char *name, unsigned timeout_ms,
                        struct slate_error *err);

/*
 * A domain event of the workspace (description: "paused", "stopped (destroyed)"...): its
 * running exec sessions look at the domain and end, telling their clients why, when it is
 * paused, stopped or quarantined. Does not block: callable from the event thread.
 */
void exec_sessions_kick(const char *workspace, const char *description);

/* ---- a client's session ---- */

/* The client's first record (its REQUEST), checked and re-encoded, and what came after it. */
struct exec_first {
	uint8_t *req, *rest;
	size_t req_len, rest_len;
};
void exec_first_done(struct exec_first *f);
/* Reads and checks the client's REQUEST on fd (extra: bytes already read after the upgrade).
 * On failure the client has been sent an ERROR record; returns < 0. */
int exec_first_read(int fd, const char *extra, size_t extra_len, struct exec_first *ret);

/* The session's last record (EXIT or ERROR), kept back by slated when it still has work to do
 * before the client may go (run --rm deletes the workspace first). */
struct exec_held_end {
	uint8_t buf[EX_HEADER_LEN + 1 + CH_MAX_TEXT];
	size_t len;
};

/*
 * Runs first in workspace name's guest, relaying records between the client (fd) and the guest
 * until the command ends, the client goes, or the domain is paused, stopped or quarantined (the
 * client is told why). With hold, the last record is kept there instead of sent. Returns 0 or a
 * negative error (the client was told).
 */
int exec_session(struct daemon_ctx *d, const char *name, int fd, const struct exec_first *first,
                 struct exec_held_end *hold);

/* Records to the client: PROGRESS with text, ERROR with the formatted message. */
void exec_send_progress(int fd, const char *text);
_printf_(2, 3) void exec_send_error(int fd, const char *fmt, ...);

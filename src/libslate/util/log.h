/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Logging: to journald (structured, with CODE_FILE/CODE_LINE and optional WORKSPACE=, DOMAIN=,
 * IMAGE=, MESSAGE_ID=) when the process runs under systemd and journald is there, to stderr
 * otherwise (and when journald refuses a line). Levels are syslog's. Library code logs only
 * at debug level; the top level logs errors once.
 *
 * Secret values are never logged: any byte string registered with log_forbid() is replaced by
 * "[redacted]" in every message before it leaves the process.
 */

#include <stddef.h>
#include <syslog.h>

#include "util/macro.h"

enum log_target {
	LOG_TARGET_AUTO = 0, /* journald if its socket exists and JOURNAL_STREAM names our stderr
	                      * or INVOCATION_ID is set; stderr otherwise */
	LOG_TARGET_STDERR,
	LOG_TARGET_JOURNAL,
};

/* Sets the identifier (program name) and target. Safe to call more than once. */
void log_open(const char *ident, enum log_target target);
/* For tests: the journald socket whose existence LOG_TARGET_AUTO requires (NULL: the real
 * one). Takes effect at the next log_open(). */
void log_set_journal_socket(const char *path);
/* Returns the target in effect (never LOG_TARGET_AUTO after log_open). */
enum log_target log_get_target(void);
void log_set_max_level(int level);
int log_get_max_level(void);
/* Parses "err", "warning", "info", "debug" (or 0..7). Returns the level or -EINVAL. */
int log_level_from_string(const char *s);

/* Registers a secret that must never appear in a log line. Returns 0 or -ENOMEM/-E2BIG.
 * The bytes are copied into guarded memory; log_unforbid() removes them again. */
int log_forbid(const void *secret, size_t len);
void log_unforbid(const void *secret, size_t len);

/* Logs and returns -abs(error) (or 0 when error is 0). workspace may be NULL. */
int log_internal(int level, int error, const char *workspace, const char *file, int line,
                 const char *func, const char *fmt, ...) _printf_(7, 8);

/*
 * MESSAGE_IDs of the security events, so that an administrator (or a SIEM) finds every one with
 * `journalctl MESSAGE_ID=...` whatever the wording of the message. Each was made once with
 * `systemd-id128 new`; never change or reuse one. Pass them to log_event().
 *
 *   SLATE_MESSAGE_LEAK_BLOCKED           the egress proxy blocked a request that carried a
 *                                        placeholder to a host it is not bound to
 *   SLATE_MESSAGE_WORKSPACE_COMPROMISED  a workspace was marked compromised (it must be wiped
 *                                        before it may start again)
 *   SLATE_MESSAGE_CATALOG_REFUSED        a catalog (or an image pulled by it) was refused: bad or
 *                                        missing signature, untrusted key, rollback, expiry,
 *                                        wrong channel, size or hash mismatch
 */
#define SLATE_MESSAGE_LEAK_BLOCKED "9ab7aaa3aa6c403085f813345b9e2362"
#define SLATE_MESSAGE_WORKSPACE_COMPROMISED "8527e2b53ea145059c2245e8bda6052c"
#define SLATE_MESSAGE_CATALOG_REFUSED "528f95a51d6d48ea846875dd755f5bed"

/*
 * Logs an event with journald fields: MESSAGE_ID= (message_id, 32 lowercase hex digits, or NULL
 * for none), WORKSPACE=, DOMAIN= (the libvirt domain) and IMAGE= (an image ID), each left out
 * when NULL. `journalctl -u slated WORKSPACE=dev` then finds the workspace's lines. Without
 * journald the message alone goes to stderr, so say in it what the fields say. The message and
 * the fields are redacted like every line (log_forbid). Returns 0.
 */
int log_event_internal(int level, const char *message_id, const char *workspace, const char *domain,
                       const char *image, const char *file, int line, const char *func,
                       const char *fmt, ...) _printf_(9, 10);
#define log_event(level, message_id, workspace, domain, image, ...)                                \
	log_event_internal((level), (message_id), (workspace), (domain), (image), __FILE__,        \
	                   __LINE__, __func__, __VA_ARGS__)

#define log_full_errno(level, error, ...)                                                          \
	log_internal((level), (error), NULL, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_debug(...) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_ERR, 0, __VA_ARGS__)
#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, (e), __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, (e), __VA_ARGS__)
/* With a WORKSPACE= field. */
#define log_ws(level, ws, ...)                                                                     \
	log_internal((level), 0, (ws), __FILE__, __LINE__, __func__, __VA_ARGS__)

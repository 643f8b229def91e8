/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Logging: to journald (structured, with CODE_FILE/CODE_LINE and optional WORKSPACE=) when the
 * process runs under systemd, to stderr otherwise. Levels are syslog's. Library code logs only
 * at debug level; the top level logs errors once.
 *
 * Secret values are never logged: any byte string registered with log_forbid() is replaced by
 * "[redacted]" in every message before it leaves the process.
 */

#include <stddef.h>
#include <syslog.h>

#include "util/macro.h"

enum log_target {
	LOG_TARGET_AUTO =
	        0, /* journald if JOURNAL_STREAM names our stderr or INVOCATION_ID is set */
	LOG_TARGET_STDERR,
	LOG_TARGET_JOURNAL,
};

/* Sets the identifier (program name) and target. Safe to call more than once. */
void log_open(const char *ident, enum log_target target);
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

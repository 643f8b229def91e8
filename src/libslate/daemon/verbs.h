/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The destructive verbs on a stopped workspace (daemon/verbs.c). */

#include <stdbool.h>

#include "util/error.h"

struct daemon_ctx;

enum daemon_verb {
	DAEMON_RESET,     /* a fresh system disk from the base */
	DAEMON_WIPE_HOME, /* a fresh home; the generated key pair goes, imported keys stay */
	DAEMON_WIPE,      /* both, as one step: ends a compromised workspace's quarantine */
	DAEMON_DELETE,    /* the workspace and everything in its directory */
};

/* "reset", "wipe-home", "wipe", "delete". */
const char *daemon_verb_name(enum daemon_verb v);

/*
 * Runs verb v on workspace name under its lock, refused while its domain runs (-EBUSY) or when
 * libvirt cannot say (SLATE_ERR_LIBVIRT). The SSH agent forgets the keys of a workspace whose
 * ssh/ went. Returns 0, or < 0 with err saying why.
 */
int daemon_verb(struct daemon_ctx *d, const char *name, enum daemon_verb v,
                struct slate_error *err);

/* Reverts workspace name (stopped) to checkpoint id: both disks, or with system_only the
 * system disk alone. -ENOENT: no such checkpoint. */
int daemon_revert(struct daemon_ctx *d, const char *name, const char *id, bool system_only,
                  struct slate_error *err);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Starting and stopping a workspace's virtual machine (daemon/start.c). */

#include <stdbool.h>
#include <stddef.h>

#include "util/error.h"
#include "vm/domain.h"
#include "vm/lifecycle.h"

struct daemon_ctx;

struct daemon_start_opts {
	bool reset_to_base; /* base drift: a fresh system disk from the new base */
	bool as_is;         /* base drift: keep the disk */
	unsigned timeout_s; /* for the boot and the terminal proof; 0: the defaults */
	bool cold;          /* boot, even where a booted snapshot could be restored */
};

struct daemon_started {
	char domain[128];
	bool kvm, resumed, already_running;
	bool restored;     /* from a booted snapshot (daemon/snapshot.h) */
	char snapshot[24]; /* its key, when restored */
	double boot_s, proof_s;
	char disk_io[16];
	char checkpoint[32]; /* the proven-boot checkpoint's id, or "" */
	double checkpoint_pause_ms;
};

/*
 * Starts workspace name: boot (or resume), terminal proof, shares, provisioning, proven-boot
 * checkpoint, reporting progress through progress (may be NULL). gone (may be NULL) says
 * whether whoever asked went away: then a failed start is undone and a succeeded one left
 * running, not paused. Returns 0 with *ret (may be NULL) filled, or < 0 with err saying why: its
 * code is the errno, or SLATE_ERR_COMPROMISED (wipe first), SLATE_ERR_BASE_DRIFT (reset_to_base
 * or as_is needed), SLATE_ERR_SHARE (a shared folder is refused), SLATE_ERR_LIBVIRT.
 */
int daemon_start(struct daemon_ctx *d, const char *name, const struct daemon_start_opts *opts,
                 vm_progress_fn progress, void *userdata, bool (*gone)(void *userdata),
                 struct daemon_started *ret, struct slate_error *err);

struct daemon_stop_opts {
	bool force;         /* power off at once */
	bool suspend;       /* save the memory instead */
	unsigned timeout_s; /* for the guest to power off; 0: the default */
};

struct daemon_stopped {
	enum vm_state state;
	bool was_running, destroyed;
	double stop_s;
};

/* Stops workspace name's domain as opts say (a paused or compromised one is powered off at once
 * whatever they say) and releases its shares. Returns 0 with *ret filled, or < 0 with err saying
 * why (-EALREADY or -ENOTCONN: it was not running). */
int daemon_stop(struct daemon_ctx *d, const char *name, const struct daemon_stop_opts *opts,
                vm_progress_fn progress, void *userdata, struct daemon_stopped *ret,
                struct slate_error *err);

/* Powers the workspace's domain off (if it runs), forgets it and deletes the workspace, under
 * its lock. For `slate run --rm` and for the ephemeral workspaces slated finds at start. On
 * failure err (may be NULL) says why. */
int daemon_destroy_and_delete(struct daemon_ctx *d, const char *name, struct slate_error *err);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Booting and stopping a workspace's domain. These calls block (seconds to minutes): run them
 * on a worker thread, never on an event loop. The domain is persistent while it runs or is
 * suspended, so that `virsh list --all` shows it and managed save works, and is undefined again
 * once it has stopped (doc/vm.md).
 */

#include <libvirt/libvirt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"
#include "vm/xml.h"

/* The line slate-guest prints on the console once the guest is up (see images/test/init). */
#define VM_READY_PREFIX "slate-guest "
#define VM_READY_SUFFIX ": ready"
#define VM_DEFAULT_BOOT_TIMEOUT_S 180
#define VM_DEFAULT_STOP_TIMEOUT_S 30

/* Called at each step ("defining", "booting", ...) with a detail for people. */
typedef void (*vm_progress_fn)(const char *step, const char *detail, void *userdata);

struct vm_boot_result {
	bool resumed; /* restored from a managed save */
	bool already_running;
	bool restored; /* started from a booted snapshot (vm_restore) */
	bool kvm;
	double boot_s; /* from virDomainCreate to the ready line (or to running on resume) */
	char disk_io[16];
};

/*
 * Defines (from template and c) and starts the workspace's domain, then waits up to timeout_s
 * for the ready line on the console log c->console_log. A suspended domain is resumed instead
 * (its saved definition is kept). A leftover definition of an earlier workspace of the same name
 * (another UUID, not running) is removed first. On failure the domain is destroyed and undefined,
* and err (may be NULL) says why, with the console's last lines when the guest did not come up.
 */
int vm_boot(virConnectPtr conn, const char *template_text, const struct vm_config *c,
            unsigned timeout_s, vm_progress_fn progress, void *userdata, struct vm_boot_result *ret,
            struct slate_error *err);

/*
 * Waits for the ready line on the console log of dom (a boot that began at t0, time_mono_s()):
 * 0, or < 0 with err saying why (the guest stopped, or timeout_s passed) and the console's last
 * lines. Leaves dom as it is.
 */
int vm_wait_ready(virDomainPtr dom, const char *console_log, unsigned timeout_s, double t0,
                  struct slate_error *err);

/*
 * Starts the workspace's domain (c: its settings) from the save image at save_path, whose
 * header holds xml, the domain's own XML (vm/savefile.h): restored running, then defined
 * persistent with that XML, as vm_boot leaves a domain. home_bytes (0: leave it) is announced to
 * the guest as vdb's size: the snapshot was taken with a smaller placeholder. paused (may be
 * NULL) is called while the restored domain has not run yet (the caller connects its channel
 * then: the guest finds it at once). There is no ready line after a restore: the guest ran its
 * boot before the snapshot. On failure nothing is left
 * running or defined, and err says why.
 */
int vm_restore(virConnectPtr conn, const struct vm_config *c, const char *save_path,
               const char *xml, uint64_t home_bytes, void (*paused)(void *userdata), void *userdata,
               struct vm_boot_result *ret, struct slate_error *err);

enum vm_stop_mode {
	VM_STOP_SHUTDOWN, /* ACPI power button, then destroy after the timeout */
	VM_STOP_FORCE,    /* destroy now; a suspended workspace loses its saved memory */
	VM_STOP_SUSPEND,  /* managed save: the next start resumes */
};

struct vm_stop_result {
	bool was_running;
	bool destroyed; /* the guest did not power off in time (or --force) */
	double stop_s;
};

/* Stops the workspace's domain as mode says; then undefines it unless it is suspended. On failure
 * err (may be NULL) says why: -ENOTCONN (nothing to suspend), -EALREADY (suspended), or else. */
int vm_stop(virConnectPtr conn, const char *workspace, enum vm_stop_mode mode, unsigned timeout_s,
            vm_progress_fn progress, void *userdata, struct vm_stop_result *ret,
            struct slate_error *err);

/* The last lines (at most max_lines, at most len - 1 bytes) of a console log, control characters
 * dropped. Returns 0 or -errno. */
int vm_console_tail(const char *path, unsigned max_lines, char *buf, size_t len);

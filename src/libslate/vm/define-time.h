/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * How long libvirt takes to define a domain, as `slate doctor` measures it. Where /dev/kvm exists
 * but KVM cannot run guests, libvirt 9 finds its cached QEMU capabilities stale on every lookup
 * ("KVM usable now, not in the cache") and re-probes QEMU, whose KVM probe can hang for ~100 s:
 * every define, and so every start, waits that long. The cure is a libvirtd that does not see
 * /dev/kvm.
 */

#include <stdbool.h>
#include <stddef.h>

/* Above this a define is slow enough to name a cause; SLATE_DOCTOR_DEFINE_WARN_S overrides it
 * in slated (tests). */
#define VM_DEFINE_WARN_S 3.0
/* How long the doctor waits for the define; the define itself goes on and is undone. */
#define VM_DEFINE_WAIT_S 20

/* The throwaway domains' names: this, slated's pid, '-', random hex; never a workspace's. */
#define VM_DEFINE_PREFIX "slated-doctor-"

/*
 * Defines a throwaway domain (VM_DEFINE_PREFIX...) at uri and
 * undefines it. Returns 0 with the define's duration in *ret_s, -ETIMEDOUT when it did not end
 * within wait_s (a thread of its own still undefines it when it does), or -errno with libvirt's
 * message in err.
 */
int vm_define_time(const char *uri, unsigned wait_s, double *ret_s, char *err, size_t len);

/*
 * 1 when libvirtd (pid from /run/libvirtd.pid or /run/virtqemud.pid) sees a KVM device at
 * /dev/kvm in its mount namespace, 0 when it does not (or the host has none), -errno when that
 * cannot be told.
 */
int vm_libvirtd_sees_kvm(void);

/*
 * The doctor's verdict on a define that took secs (finished: it ended; otherwise it ran past
 * the wait). libvirtd_kvm: what vm_libvirtd_sees_kvm() said; kvm_usable: vm_kvm_usable().
 * Writes the detail (duration, and above warn_s the cause and the remedy) and returns true
 * when it is a warning.
 */
bool vm_define_verdict(double secs, bool finished, double warn_s, int libvirtd_kvm,
                       bool kvm_usable, char *detail, size_t len);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Which accelerator guests get. /dev/kvm existing proves nothing (on some hosts it is there but
 * QEMU aborts setting up a vCPU), so KVM counts only when QEMU really runs guest code under it
 * with the CPU model slate's domains use (host-passthrough): a 512-byte boot sector writes to an
 * isa-debug-exit port and QEMU must exit with status 33. The answer is cached for the process.
 */

#include <stdbool.h>
#include <stddef.h>

/*
 * Returns 1 when KVM runs guests here, 0 when guests must use TCG. The first call probes (at most
 * VM_KVM_PROBE_TIMEOUT_S seconds) and logs one line saying which and why; later calls return the
 * cached answer. uri: probing is only meaningful for a local qemu:///system or qemu:///session;
 * any other URI gets KVM when /dev/kvm is usable by the libvirt host (assumed).
 */
#define VM_KVM_PROBE_TIMEOUT_S 10
int vm_kvm_usable(const char *uri);
/* Why the cached answer is what it is (after vm_kvm_usable()), e.g. "QEMU exited with status
 * 134 (aborted) under -accel kvm". Never NULL. */
const char *vm_kvm_reason(void);
/* "kvm" or "tcg". */
const char *vm_accel_name(bool kvm);

/* The disk I/O mode to ask for: "io_uring" until a start showed this QEMU cannot use it, then
 * "native". vm_disk_io_failed() records that. */
const char *vm_disk_io(void);
void vm_disk_io_failed(const char *io);

/* Whether this host can give guests a vhost-vsock device (/dev/vhost-vsock opens read-write);
 * without one the guest channel is a virtio-serial port (doc/guest-channel.md). */
bool vm_vsock_usable(void);

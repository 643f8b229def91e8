/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * How long libvirt takes to define a domain, as `slate doctor` measures it, and why it is slow.
 * libvirt 9 counts KVM as usable when QEMU's user can open /dev/kvm (as libvirtd sees it); when
 * its cached QEMU capabilities say KVM is not (KVM cannot run guests here, or what sits at
 * /dev/kvm is not KVM at all, such as /dev/null bound over it), the cache is stale on every
 * lookup ("KVM usable now, not in the cache") and libvirt re-probes QEMU, whose KVM probe can
 * hang ~100 s: every define, and so every start, waits that long.
 */

#include <stdbool.h>
#include <stddef.h>

#include "vm/qemu-user.h"

/* Above this a define is slow enough to name a cause; SLATE_DOCTOR_DEFINE_WARN_S overrides it
 * in slated (tests). */
#define VM_DEFINE_WARN_S 3.0
/* How long the doctor waits for the define; the define itself goes on and is undone. */
#define VM_DEFINE_WAIT_S 20
/* The throwaway domains' names: this, slated's pid, '-', random hex; never a workspace's. */
#define VM_DEFINE_PREFIX "slated-doctor-"

/*
 * Defines a throwaway domain (VM_DEFINE_PREFIX...) at uri and undefines it. Returns 0 with the
 * define's duration in *ret_s, -ETIMEDOUT when it did not end within wait_s (a thread of its own
 * still undefines it when it does), or -errno with libvirt's message in err. *ret_probes: how
 * many QEMU capability probes (qemu -machine none ... -qmp) libvirtd started meanwhile.
 */
int vm_define_time(const char *uri, unsigned wait_s, double *ret_s, unsigned *ret_probes, char *err,
                   size_t len);

/* What libvirtd finds at /dev/kvm in its own mount namespace. */
enum vm_kvm_view {
	VM_KVM_VIEW_UNKNOWN,  /* no libvirtd pid, or its root cannot be looked at */
	VM_KVM_VIEW_HIDDEN,   /* nothing, or nothing QEMU's user may open (a mode-0000 node) */
	VM_KVM_VIEW_KVM,      /* the KVM device, and QEMU's user may open it */
	VM_KVM_VIEW_STAND_IN, /* something else QEMU's user may open (/dev/null bound over it) */
};

/*
 * Looks at /dev/kvm as libvirtd (pid from /run/libvirtd.pid or /run/virtqemud.pid) sees it, for
 * QEMU's user u (NULL: QEMU runs as root). Returns the view; desc says what is there.
 */
enum vm_kvm_view vm_libvirtd_kvm_view(const struct vm_qemu_user *u, char *desc, size_t len);

struct vm_define_facts {
	double secs;     /* how long the define took, or how long it was waited for */
	bool finished;   /* false: it ran past the wait */
	double warn_s;   /* the threshold */
	unsigned probes; /* QEMU capability probes libvirtd started meanwhile */
	enum vm_kvm_view view;
	const char *view_desc; /* what libvirtd has at /dev/kvm */
	const char *qemu_user; /* NULL: root */
	bool kvm_usable;       /* vm_kvm_usable() */
};

/* The doctor's verdict: writes the detail (duration, and above the threshold the cause and the
 * remedy) and returns true when it is a warning. */
bool vm_define_verdict(const struct vm_define_facts *f, char *detail, size_t len);

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The doctor's verdict on how long libvirt took to define a domain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/macro.h"
#include "vm/define-time.h"

#define KVM_DEV                                                                                    \
	"libvirtd (pid 1) has the KVM device at /dev/kvm (10:232, mode 0660), which libvirt-qemu " \
	"may open"
#define NULL_DEV                                                                                   \
	"libvirtd (pid 1) has a stand-in at /dev/kvm (1:3, mode 0666), which libvirt-qemu may "    \
	"open"
#define NODE_0000                                                                                  \
	"libvirtd (pid 1) has a stand-in at /dev/kvm (1:3, mode 0000), which libvirt-qemu may "    \
	"not "                                                                                     \
	"open"

static void test_verdict(void **state)
{
	static const struct {
		struct vm_define_facts f;
		bool warn;
		const char *has, *lacks;
	} cases[] = {
	        /* Fast: the duration, nothing else. */
	        {{0.03, true, 3, 0, VM_KVM_VIEW_KVM, KVM_DEV, "libvirt-qemu", false},
	         false,
	         "libvirt took 0.030 s to define a throwaway domain",
	         "warn"},
	        {{3.0, true, 3, 2, VM_KVM_VIEW_STAND_IN, NULL_DEV, "libvirt-qemu", false},
	         false,
	         "took 3.000 s",
	         "probe"},
	        /* Slow where QEMU's user may open a /dev/kvm that cannot run guests: the
	         * re-probe, what libvirtd has there, and the remedy. */
	        {{101.5, true, 3, 0, VM_KVM_VIEW_KVM, KVM_DEV, "libvirt-qemu", false},
	         true,
	         "took 101.500 s to define a throwaway domain (warn above 3.0 s), and every "
	         "start waits as long: KVM cannot run guests here, but QEMU's user may open "
	         "libvirtd's /dev/kvm (" KVM_DEV "), so libvirt counts KVM as usable, finds its "
	         "cached QEMU capabilities stale on every lookup and re-probes QEMU",
	         NULL},
	        {{101.5, true, 3, 0, VM_KVM_VIEW_KVM, KVM_DEV, "libvirt-qemu", false},
	         true,
	         "restart libvirtd where libvirt-qemu may not open /dev/kvm: a systemd drop-in "
	         "with InaccessiblePaths=-/dev/kvm for libvirtd.service",
	         NULL},
	        {{101.5, true, 3, 0, VM_KVM_VIEW_KVM, KVM_DEV, "libvirt-qemu", false},
	         true,
	         "a mount namespace with a mode-0000 node bound over /dev/kvm, as .ci/libvirtd "
	         "makes when 'slated --probe-kvm' says KVM is unusable (/dev/null will not do)",
	         NULL},
	        /* /dev/null bound over /dev/kvm is the same trap. */
	        {{20, false, 3, 7, VM_KVM_VIEW_STAND_IN, NULL_DEV, "libvirt-qemu", false},
	         true,
	         "did not define a throwaway domain within 20 s (warn above 3.0 s); libvirtd "
	         "started 7 QEMU capability probes, and every start waits as long: KVM cannot "
	         "run guests here, but QEMU's user may open libvirtd's /dev/kvm (" NULL_DEV ")",
	         NULL},
	        /* Cannot tell what libvirtd sees, but it probes: the likely cause, said as such. */
	        {{9, true, 3, 1, VM_KVM_VIEW_UNKNOWN, "no libvirtd pid file", NULL, false},
	         true,
	         "started 1 QEMU capability probe, and every start waits as long: KVM cannot "
	         "run guests here, but libvirtd may see /dev/kvm (no libvirtd pid file)",
	         NULL},
	        /* KVM works, or QEMU's user may not open /dev/kvm: slow for another reason. */
	        {{9, true, 3, 2, VM_KVM_VIEW_KVM, KVM_DEV, "libvirt-qemu", true},
	         true,
	         "libvirt is re-reading QEMU's capabilities (" KVM_DEV "; see libvirtd's log)",
	         "InaccessiblePaths"},
	        {{9, true, 3, 2, VM_KVM_VIEW_HIDDEN, NODE_0000, "libvirt-qemu", false},
	         true,
	         "started 2 QEMU capability probes, and every start waits as long: libvirt is "
	         "re-reading QEMU's capabilities (" NODE_0000,
	         "InaccessiblePaths"},
	        {{9, true, 3, 0, VM_KVM_VIEW_HIDDEN, NODE_0000, "libvirt-qemu", false},
	         true,
	         "libvirtd answers slowly",
	         "KVM cannot run guests"},
	        {{9, true, 3, 0, VM_KVM_VIEW_UNKNOWN, "", "libvirt-qemu", false},
	         true,
	         "libvirtd answers slowly",
	         "probe"},
	        /* The threshold is the caller's (tests lower it). */
	        {{0.03, true, 0, 0, VM_KVM_VIEW_HIDDEN, "", NULL, true},
	         true,
	         "took 0.030 s to define a throwaway domain (warn above 0.0 s)",
	         NULL},
	};
	char detail[1024];

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		bool w = vm_define_verdict(&cases[i].f, detail, sizeof(detail));
		if (w != cases[i].warn || !strstr(detail, cases[i].has) ||
		    (cases[i].lacks && strstr(detail, cases[i].lacks)))
			fail_msg("case %zu: %s", i, detail);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_verdict),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

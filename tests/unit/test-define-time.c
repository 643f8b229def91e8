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

static void test_verdict(void **state)
{
	static const struct {
		double secs;
		bool finished;
		double warn_s;
		int libvirtd_kvm;
		bool kvm_usable;
		bool warn;
		const char *has, *lacks;
	} cases[] = {
	        /* Fast: the duration, nothing else. */
	        {0.03, true, 3, 1, false, false, "took 0.03 s", "remedy"},
	        {3.0, true, 3, 0, false, false, "took 3.00 s", "BindReadOnlyPaths"},
	        /* Slow where libvirtd sees /dev/kvm that cannot run guests: the re-probe, and the
	         * remedy of hiding it. */
	        {101.5, true, 3, 1, false, true, "took 101.50 s", NULL},
	        {101.5, true, 3, 1, false, true, "libvirtd sees /dev/kvm", NULL},
	        {101.5, true, 3, 1, false, true, "BindReadOnlyPaths=/dev/null:/dev/kvm", NULL},
	        {101.5, true, 3, 1, false, true, "re-probes QEMU on every lookup", NULL},
	        {20, false, 3, 1, false, true, "did not define a throwaway domain within 20 s",
	         NULL},
	        /* Cannot tell what libvirtd sees: the likely cause, said as such. */
	        {9, true, 3, -1, false, true, "libvirtd may see /dev/kvm", NULL},
	        /* KVM works, or libvirtd does not see it: slow for another reason. */
	        {9, true, 3, 1, true, true, "answers slowly", "BindReadOnlyPaths"},
	        {9, true, 3, 0, false, true, "answers slowly", "BindReadOnlyPaths"},
	        /* The threshold is the caller's (tests lower it). */
	        {0.03, true, 0, 1, false, true, "warn above 0.0 s", NULL},
	};
	char detail[1024];

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		bool w = vm_define_verdict(cases[i].secs, cases[i].finished, cases[i].warn_s,
		                           cases[i].libvirtd_kvm, cases[i].kvm_usable, detail,
		                           sizeof(detail));
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

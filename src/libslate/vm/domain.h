/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* What slate needs to know of a workspace's libvirt domain before the VM module lands:
 * its name and whether it runs. */

#include <stddef.h>

#define VM_DOMAIN_PREFIX "slate-"

/* Writes "slate-<workspace>" into buf. Returns 0 or -ENAMETOOLONG. */
int vm_domain_name(const char *workspace, char *buf, size_t len);

/* Returns 1 if the workspace's domain is active (running or paused), 0 if it is not defined or
 * shut off, or a negative error when libvirt cannot be asked (then callers must refuse
 * destructive verbs: unknown is not "stopped"). */
int vm_domain_is_active(const char *uri, const char *workspace);

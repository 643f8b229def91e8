/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A workspace's libvirt domain: its name ("slate-<workspace>"), connections, lookups and
 * state. Every function returns >= 0 or a negative -errno; libvirt's own message for the last
 * failure on this thread is vm_last_error().
 */

#include <libvirt/libvirt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/macro.h"

#define VM_DOMAIN_PREFIX "slate-"

DEFINE_TRIVIAL_CLEANUP_FUNC(virConnectPtr, virConnectClose);
DEFINE_TRIVIAL_CLEANUP_FUNC(virDomainPtr, virDomainFree);
DEFINE_TRIVIAL_CLEANUP_FUNC(virStreamPtr, virStreamFree);

enum vm_state {
	VM_STATE_UNDEFINED, /* no domain: stopped, as far as anyone can tell */
	VM_STATE_STOPPED,   /* defined and shut off */
	VM_STATE_SUSPENDED, /* shut off with a managed save image: the next start resumes it */
	VM_STATE_RUNNING,
	VM_STATE_PAUSED,
};

/* "stopped", "stopped", "suspended", "running", "paused". */
const char *vm_state_name(enum vm_state s);

/* Writes "slate-<workspace>" into buf. Returns 0 or -ENAMETOOLONG. */
int vm_domain_name(const char *workspace, char *buf, size_t len);
/* The workspace a domain name belongs to ("slate-x" -> "x"), or NULL when it is not slate's. */
const char *vm_domain_workspace(const char *domain_name);

/* Opens a connection to uri. -ECONNREFUSED when libvirt cannot be reached. */
int vm_connect(const char *uri, virConnectPtr *ret);
/* libvirt's message for this thread's last error, or "unknown libvirt error". Never NULL. */
const char *vm_last_error(void);

/* Looks up the workspace's domain. -ENOENT when there is none. */
int vm_domain_lookup(virConnectPtr conn, const char *workspace, virDomainPtr *ret);
/* The state of a domain, and of a workspace's domain (VM_STATE_UNDEFINED when none). */
int vm_domain_get_state(virDomainPtr dom, enum vm_state *ret);
int vm_workspace_state(virConnectPtr conn, const char *workspace, enum vm_state *ret);
/* Same, on a connection of its own. */
int vm_workspace_state_uri(const char *uri, const char *workspace, enum vm_state *ret);

/*
 * Returns 1 if the workspace's domain is active (running or paused) or suspended (its memory is
 * saved and refers to the disks), 0 if it is not defined or shut off, or a negative error when
 * libvirt cannot be asked (then callers must refuse destructive verbs: unknown is not "stopped").
 */
int vm_domain_is_active(const char *uri, const char *workspace);

/*
 * Counts the active domains (running or paused; any name, slate's or not) whose live XML names
 * a path below dir (a disk, a channel socket, a kernel): the ones that keep files there open.
 * The first one's name goes to first (may be NULL) when there is one. Returns the count, or a
 * negative error when libvirt at uri cannot be asked.
 */
int vm_domains_using(const char *uri, const char *dir, char *first, size_t first_len);

/*
 * What the active domains (running or paused) whose live XML names a path below dir use: how
 * many (*ret_count) and their memory in MiB (*ret_mib), leaving out those skip (may be NULL)
 * says yes to by name. Returns 0, or a negative error when libvirt at uri cannot be asked.
 */
int vm_domains_usage(const char *uri, const char *dir,
                     bool (*skip)(const char *domain, void *userdata), void *userdata,
                     unsigned *ret_count, uint64_t *ret_mib);

/*
 * Destroys (and undefines) the active domains named name_prefix* whose live XML names a path
 * below dir: what a slated that was killed left of its own domains (another slated's, on its
 * own directories, stay). Logs "removing NAME, <why>" for each. Returns 0 or a negative error.
 */
int vm_domains_destroy_below(const char *uri, const char *dir, const char *name_prefix,
                             const char *why);
/* Whether the workspace's domain runs under KVM ("kvm") or TCG ("tcg"); -ENOENT when it does
 * not run. */
int vm_workspace_accel(const char *uri, const char *workspace, const char **ret);

/*
 * Removes the workspace's domain definition if it is not active; a suspended one (with a managed
 * save image) only when even_suspended is true, and its saved memory with it. Returns 1 when
 * something was removed, 0 when there was nothing (or a suspended domain was kept), -EBUSY when
 * it runs.
 */
int vm_domain_forget(const char *uri, const char *workspace, bool even_suspended);

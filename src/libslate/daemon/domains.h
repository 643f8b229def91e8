/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* slated and the domains (daemon/domains.c). */

#include <stddef.h>

struct daemon_ctx;

/* Starts domain events, probes KVM, picks up running domains, logs orphans, and deletes what an
 * interrupted `slate run --rm` left. Returns 0. */
int daemon_domains_start(struct daemon_ctx *d);
void daemon_domains_stop(struct daemon_ctx *d);
/* Fills detail for the doctor; returns the number of orphaned slate-* domains, or < 0. */
int daemon_check_domains(struct daemon_ctx *d, char *detail, size_t len);
/* Whether QEMU, as the user libvirt runs it as, can search every directory from / down to dir.
 * Returns 0 (detail says as whom), 1 when a directory blocks it (detail: which, whom, the fix),
 * or < 0 when that cannot be told (detail says why). */
int daemon_check_qemu_access(const struct daemon_ctx *d, const char *dir, char *detail, size_t len);

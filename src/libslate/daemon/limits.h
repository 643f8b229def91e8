/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Per-host limits on running workspaces (slate.conf: max-running, memory-budget, when-full,
 * queue-timeout): a start that would go over them is refused with a message naming the limit,
 * or waits for a slot. What runs is what libvirt says runs (the active domains whose disks are
 * under slated's state directory), plus the starts admitted and not yet booted, so two starts
 * that ask at once cannot both take the last slot.
 */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"
#include "vm/lifecycle.h"

struct daemon_ctx;

struct daemon_limits {
	unsigned max_running;       /* 0: no limit */
	uint64_t memory_budget_mib; /* 0: no limit */
	bool queue;                 /* when full: wait for a slot (else refuse) */
	unsigned queue_timeout_s;   /* waiting at most this long; 0: as long as it takes */
	/* Admitted starts not yet ended, by domain name: each counts once, whether its domain
	 * is active in libvirt yet or not. */
	pthread_mutex_t lock;
	pthread_cond_t changed;
	struct daemon_limits_start *starting;
	size_t n_starting, cap_starting;
};

struct daemon_limits_start {
	char domain[128];
	uint64_t mib;
};

/* Sets l up from the settings' text (slate.conf values: max-running "N", memory-budget a size,
 * "auto" (the host's memory less 1 GiB) or "none", when-full "queue"|"refuse", queue-timeout
 * seconds). Returns 0 or -EINVAL with err saying which. */
int daemon_limits_init(struct daemon_limits *l, const char *max_running, const char *memory_budget,
                       const char *when_full, const char *queue_timeout, struct slate_error *err);
void daemon_limits_done(struct daemon_limits *l);

/*
 * Admits the start of domain (what name, a workspace's, says in messages) needing memory_mib,
 * under d->limits (none: admitted at once): when it fits, reserves its slot and returns 0
 * (release it with daemon_limits_release once the start has ended, booted or not). When it does not fit: with when-full = refuse,
 * returns -EBUSY with err naming the limit; with queue, reports "waiting" through progress once
 * and waits until it fits (-ETIMEDOUT after queue-timeout, -ECANCELED when gone() says the
 * caller left). -errno when libvirt cannot be asked.
 */
int daemon_limits_admit(struct daemon_ctx *d, const char *name, const char *domain,
                        uint64_t memory_mib, vm_progress_fn progress, void *userdata,
                        bool (*gone)(void *userdata), struct slate_error *err);
void daemon_limits_release(struct daemon_ctx *d, const char *domain);
/* Wakes queued starts to look again (a domain stopped). */
void daemon_limits_changed(struct daemon_ctx *d);

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Per-host limits on running workspaces: see limits.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/daemon.h"
#include "daemon/limits.h"
#include "util/conf.h"
#include "util/log.h"
#include "util/size.h"
#include "util/time.h"
#include "vm/domain.h"

#define HOST_RESERVE_MIB 1024 /* what memory-budget = auto leaves the host */
#define RECHECK_MS 1000       /* a queued start looks again at least this often */

static uint64_t host_memory_mib(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/meminfo", "re");
	char line[256];
	unsigned long long kib;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
			return kib / 1024;
	return 0;
}

/* Checks value against slate.conf's table (util/conf.c holds each key's bounds); NULL is the
 * default. */
static int check_setting(const char *key, const char *value, struct slate_error *err)
{
	char why[160];

	if (value && conf_check_value(conf_key_find(key), value, why, sizeof(why)) < 0)
		return slate_error_set(err, -EINVAL, "%s = %s: %s", key, value, why);
	return 0;
}

int daemon_limits_init(struct daemon_limits *l, const char *max_running, const char *memory_budget,
                       const char *when_full, const char *queue_timeout, struct slate_error *err)
{
	uint64_t bytes;

	*l = (struct daemon_limits){.queue = true};
	if (check_setting("max-running", max_running, err) < 0 ||
	    check_setting("memory-budget", memory_budget, err) < 0 ||
	    check_setting("when-full", when_full, err) < 0 ||
	    check_setting("queue-timeout", queue_timeout, err) < 0)
		return -EINVAL;
	if (max_running)
		l->max_running = (unsigned)strtoul(max_running, NULL, 10);
	if (memory_budget && strcmp(memory_budget, "none") == 0)
		l->memory_budget_mib = 0;
	else if (memory_budget && strcmp(memory_budget, "auto") != 0 &&
	         size_parse(memory_budget, &bytes) == 0)
		l->memory_budget_mib = bytes >> 20;
	else {
		uint64_t host = host_memory_mib();
		l->memory_budget_mib = host > 2 * HOST_RESERVE_MIB ? host - HOST_RESERVE_MIB : host;
	}
	l->queue = !when_full || strcmp(when_full, "queue") == 0;
	if (queue_timeout)
		l->queue_timeout_s = (unsigned)strtoul(queue_timeout, NULL, 10);
	(void)pthread_mutex_init(&l->lock, NULL);
	{
		pthread_condattr_t a;
		(void)pthread_condattr_init(&a);
		(void)pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
		(void)pthread_cond_init(&l->changed, &a);
		(void)pthread_condattr_destroy(&a);
	}
	return 0;
}

void daemon_limits_done(struct daemon_limits *l)
{
	free(l->starting);
	l->starting = NULL;
	l->n_starting = l->cap_starting = 0;
	(void)pthread_cond_destroy(&l->changed);
	(void)pthread_mutex_destroy(&l->lock);
}

/* A start in flight: counted from the list, not again from libvirt once its domain is active. */
static bool in_flight(const char *domain, void *userdata)
{
	const struct daemon_limits *l = userdata;

	for (size_t i = 0; domain && i < l->n_starting; i++) {
		if (strcmp(l->starting[i].domain, domain) == 0)
			return true;
	}
	return false;
}

/* Whether one more start of mib fits; when not, why in why. < 0: libvirt cannot be asked. */
static int fits(struct daemon_ctx *d, uint64_t mib, char *why, size_t len)
{
	struct daemon_limits *l = d->limits;
	unsigned running;
	uint64_t used;
	char b1[32], b2[32], b3[32];
	int r = vm_domains_usage(d->libvirt_uri, d->state_dir, in_flight, l, &running, &used);

	if (r < 0)
		return r;
	running += (unsigned)l->n_starting;
	for (size_t i = 0; i < l->n_starting; i++)
		used += l->starting[i].mib;
	if (l->max_running && running + 1 > l->max_running) {
		(void)snprintf(why, len,
		               "%u workspace%s run or start, max-running = %u (slate.conf)",
		               running, running == 1 ? "" : "s", l->max_running);
		return 0;
	}
	if (l->memory_budget_mib && used + mib > l->memory_budget_mib) {
		(void)snprintf(why, len,
		               "it needs %s of memory and %s of memory-budget = %s (slate.conf) is "
		               "taken by %u workspace%s",
		               size_format(mib << 20, b1, sizeof(b1)),
		               size_format(used << 20, b2, sizeof(b2)),
		               size_format(l->memory_budget_mib << 20, b3, sizeof(b3)), running,
		               running == 1 ? "" : "s");
		return 0;
	}
	return 1;
}

int daemon_limits_admit(struct daemon_ctx *d, const char *name, const char *domain,
                        uint64_t memory_mib, vm_progress_fn progress, void *userdata,
                        bool (*gone)(void *userdata), struct slate_error *err)
{
	struct daemon_limits *l = d->limits;
	char why[512] = "";
	bool told = false;
	double t0 = time_mono_s();
	int r;

	if (!l || (!l->max_running && !l->memory_budget_mib))
		return 0;
	if (l->memory_budget_mib && memory_mib > l->memory_budget_mib)
		return slate_error_set(err, -E2BIG,
		                       "%s needs %" PRIu64 " MiB of memory, over the whole "
		                       "memory-budget of %" PRIu64 " MiB (slate.conf)",
		                       name, memory_mib, l->memory_budget_mib);
	(void)pthread_mutex_lock(&l->lock);
	for (;;) {
		struct timespec until;

		r = fits(d, memory_mib, why, sizeof(why));
		if (r < 0) {
			(void)pthread_mutex_unlock(&l->lock);
			return slate_error_errno(err, r, "counting the running workspaces");
		}
		if (r > 0)
			break;
		if (!l->queue) {
			(void)pthread_mutex_unlock(&l->lock);
			return slate_error_set(err, -EBUSY,
			                       "no slot: %s; stop a workspace, or set "
			                       "when-full = queue to wait",
			                       why);
		}
		if (!told) {
			char msg[600];
			(void)snprintf(msg, sizeof(msg), "waiting for a slot: %s", why);
			log_notice("%s: %s", name, msg);
			if (progress)
				progress("waiting", msg, userdata);
			told = true;
		}
		if (gone && gone(userdata)) {
			(void)pthread_mutex_unlock(&l->lock);
			return slate_error_set(err, -ECANCELED,
			                       "the caller left while it waited for a slot");
		}
		if (l->queue_timeout_s && time_mono_s() - t0 >= l->queue_timeout_s) {
			(void)pthread_mutex_unlock(&l->lock);
			return slate_error_set(err, -ETIMEDOUT,
			                       "no slot within queue-timeout = %u s: %s",
			                       l->queue_timeout_s, why);
		}
		(void)clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += (long)RECHECK_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		(void)pthread_cond_timedwait(&l->changed, &l->lock, &until);
	}
	if (l->n_starting == l->cap_starting) {
		size_t cap = l->cap_starting ? 2 * l->cap_starting : 8;
		struct daemon_limits_start *n = reallocarray(l->starting, cap, sizeof(*n));
		if (!n) {
			(void)pthread_mutex_unlock(&l->lock);
			return slate_error_errno(err, -ENOMEM, "admitting %s", name);
		}
		l->starting = n;
		l->cap_starting = cap;
	}
	l->starting[l->n_starting].mib = memory_mib;
	(void)snprintf(l->starting[l->n_starting].domain, sizeof(l->starting[0].domain), "%s",
	               domain);
	l->n_starting++;
	(void)pthread_mutex_unlock(&l->lock);
	if (told)
		log_notice("%s: got a slot after %.1f s", name, time_mono_s() - t0);
	return 0;
}

void daemon_limits_release(struct daemon_ctx *d, const char *domain)
{
	struct daemon_limits *l = d->limits;

	if (!l || (!l->max_running && !l->memory_budget_mib))
		return;
	(void)pthread_mutex_lock(&l->lock);
	for (size_t i = 0; i < l->n_starting; i++) {
		if (strcmp(l->starting[i].domain, domain) == 0) {
			l->starting[i] = l->starting[--l->n_starting];
			break;
		}
	}
	(void)pthread_cond_broadcast(&l->changed);
	(void)pthread_mutex_unlock(&l->lock);
}

void daemon_limits_changed(struct daemon_ctx *d)
{
	struct daemon_limits *l = d->limits;

	if (!l || (!l->max_running && !l->memory_budget_mib))
		return;
	(void)pthread_mutex_lock(&l->lock);
	(void)pthread_cond_broadcast(&l->changed);
	(void)pthread_mutex_unlock(&l->lock);
}

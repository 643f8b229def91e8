/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * libvirt domain events for slate's domains (slate-*), so slated notices what happens behind its
 * back: a guest powering off from inside, a crash, `virsh destroy`. libvirt's default event loop
 * runs on a thread of its own; a second thread keeps the connection open (reconnecting after
 * libvirtd restarts). Callbacks run on the event thread: they must not block (hand blocking work
 * to another thread).
 */

#include <stdbool.h>

struct vm_events;

struct vm_event {
	const char *workspace; /* the workspace the domain belongs to */
	const char *domain;
	int event;               /* VIR_DOMAIN_EVENT_* */
	int detail;              /* VIR_DOMAIN_EVENT_*_* */
	const char *description; /* "stopped (guest shut down)", ... */
	bool stopped;            /* the domain is no longer running */
	bool saved;              /* ... because of a managed save */
};

typedef void (*vm_event_fn)(const struct vm_event *ev, void *userdata);

/*
 * Registers libvirt's default event loop (call before any connection that needs events is
 * opened: slated does it first thing) and starts the threads. Returns 0 or -errno.
 */
int vm_events_start(const char *uri, vm_event_fn fn, void *userdata, struct vm_events **ret);
/* Stops the threads and closes the connection. NULL is fine. */
void vm_events_stop(struct vm_events *ev);

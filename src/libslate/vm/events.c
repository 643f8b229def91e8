/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libvirt domain events on the default event loop (events.h). */
#include <errno.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "vm/domain.h"
#include "vm/events.h"

#define RECONNECT_S 2

struct vm_events {
	char *uri;
	vm_event_fn fn;
	void *userdata;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	bool lost; /* the connection closed: reopen it */
	virConnectPtr conn;
	int callback_id;
	pthread_t loop_thread, keeper_thread;
	bool loop_started, keeper_started;
};

static const char *describe(int event, int detail, bool *stopped, bool *saved)
{
	*stopped = false;
	*saved = false;
	switch (event) {
	case VIR_DOMAIN_EVENT_STARTED:
		return detail == VIR_DOMAIN_EVENT_STARTED_RESTORED ? "started (restored)"
		                                                   : "started";
	case VIR_DOMAIN_EVENT_SUSPENDED:
		return "paused";
	case VIR_DOMAIN_EVENT_RESUMED:
		return "resumed";
	case VIR_DOMAIN_EVENT_SHUTDOWN:
		return detail == VIR_DOMAIN_EVENT_SHUTDOWN_GUEST ? "shutting down (from the guest)"
		                                                 : "shutting down";
	case VIR_DOMAIN_EVENT_STOPPED:
		*stopped = true;
		switch (detail) {
		case VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN:
			return "stopped (the guest powered off)";
		case VIR_DOMAIN_EVENT_STOPPED_DESTROYED:
			return "stopped (destroyed)";
		case VIR_DOMAIN_EVENT_STOPPED_CRASHED:
			return "stopped (the guest crashed)";
		case VIR_DOMAIN_EVENT_STOPPED_SAVED:
			*saved = true;
			return "stopped (memory saved: suspended)";
		case VIR_DOMAIN_EVENT_STOPPED_FAILED:
			return "stopped (QEMU failed)";
		default:
			return "stopped";
		}
	case VIR_DOMAIN_EVENT_DEFINED:
		return "defined";
	case VIR_DOMAIN_EVENT_UNDEFINED:
		return "undefined";
	case VIR_DOMAIN_EVENT_CRASHED:
		return "crashed";
	default:
		return NULL;
	}
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque)
{
	struct vm_events *ev = opaque;
	const char *name = virDomainGetName(dom), *ws = vm_domain_workspace(name), *what;
	struct vm_event e;

	if (!ws)
		return 0;
	e = (struct vm_event){.workspace = ws, .domain = name, .event = event, .detail = detail};
	what = describe(event, detail, &e.stopped, &e.saved);
	if (!what)
		return 0;
	e.description = what;
	ev->fn(&e, ev->userdata);
	return 0;
}

static void on_close(virConnectPtr conn, int reason, void *opaque)
{
	struct vm_events *ev = opaque;

	pthread_mutex_lock(&ev->lock);
	ev->lost = true;
	pthread_cond_broadcast(&ev->cond);
	pthread_mutex_unlock(&ev->lock);
}

static void *loop_main(void *p)
{
	struct vm_events *ev = p;

	for (;;) {
		bool stop;
		pthread_mutex_lock(&ev->lock);
		stop = ev->stop;
		pthread_mutex_unlock(&ev->lock);
		if (stop)
			break;
		if (virEventRunDefaultImpl() < 0)
			log_debug("libvirt event loop: %s", vm_last_error());
	}
	return NULL;
}

static void drop_conn(struct vm_events *ev)
{
	if (!ev->conn)
		return;
	if (ev->callback_id >= 0)
		(void)virConnectDomainEventDeregisterAny(ev->conn, ev->callback_id);
	(void)virConnectUnregisterCloseCallback(ev->conn, on_close);
	(void)virConnectClose(ev->conn);
	ev->conn = NULL;
	ev->callback_id = -1;
}

static int open_conn(struct vm_events *ev)
{
	virConnectPtr conn = NULL;
	int id;

	if (vm_connect(ev->uri, &conn) < 0)
		return -ECONNREFUSED;
	(void)virConnectSetKeepAlive(conn, 5, 3);
	id = virConnectDomainEventRegisterAny(conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
	                                      VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), ev, NULL);
	if (id < 0) {
		(void)virConnectClose(conn);
		return -EIO;
	}
	(void)virConnectRegisterCloseCallback(conn, on_close, ev, NULL);
	ev->conn = conn;
	ev->callback_id = id;
	return 0;
}

/* Keeps a connection with the event callback registered; reconnects after libvirtd restarts. */
static void *keeper_main(void *p)
{
	struct vm_events *ev = p;
	bool warned = false;

	pthread_mutex_lock(&ev->lock);
	while (!ev->stop) {
		if (ev->lost || !ev->conn) {
			bool was = ev->conn != NULL;
			ev->lost = false;
			pthread_mutex_unlock(&ev->lock);
			drop_conn(ev);
			if (open_conn(ev) < 0) {
				if (!warned)
					log_warning("domain events: cannot connect to %s (%s); "
					            "retrying every %d s",
					            ev->uri, vm_last_error(), RECONNECT_S);
				warned = true;
			} else {
				if (was || warned)
					log_info("domain events: connected to %s again", ev->uri);
				warned = false;
			}
			pthread_mutex_lock(&ev->lock);
		}
		struct timespec ts;
		(void)clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += RECONNECT_S;
		(void)pthread_cond_timedwait(&ev->cond, &ev->lock, &ts);
	}
	pthread_mutex_unlock(&ev->lock);
	drop_conn(ev);
	return NULL;
}

static void wake_noop(int timer, void *opaque) {}

int vm_events_start(const char *uri, vm_event_fn fn, void *userdata, struct vm_events **ret)
{
	struct vm_events *ev;

	if (virEventRegisterDefaultImpl() < 0)
		return -EIO;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	ev->uri = strdup(uri);
	if (!ev->uri) {
		free(ev);
		return -ENOMEM;
	}
	ev->fn = fn;
	ev->userdata = userdata;
	ev->callback_id = -1;
	pthread_mutex_init(&ev->lock, NULL);
	pthread_cond_init(&ev->cond, NULL);
	/* The first connection is made here, so that events are not missed after return. */
	if (open_conn(ev) < 0)
		log_warning("domain events: cannot connect to %s yet (%s); retrying", uri,
		            vm_last_error());
	if (pthread_create(&ev->loop_thread, NULL, loop_main, ev) != 0) {
		vm_events_stop(ev);
		return -EAGAIN;
	}
	ev->loop_started = true;
	if (pthread_create(&ev->keeper_thread, NULL, keeper_main, ev) != 0) {
		vm_events_stop(ev);
		return -EAGAIN;
	}
	ev->keeper_started = true;
	*ret = ev;
	return 0;
}

void vm_events_stop(struct vm_events *ev)
{
	int t;

	if (!ev)
		return;
	pthread_mutex_lock(&ev->lock);
	ev->stop = true;
	pthread_cond_broadcast(&ev->cond);
	pthread_mutex_unlock(&ev->lock);
	if (ev->keeper_started)
		(void)pthread_join(ev->keeper_thread, NULL);
	else
		drop_conn(ev);
	if (ev->loop_started) {
		/* A timer that fires at once wakes the loop so it sees the flag. */
		t = virEventAddTimeout(0, wake_noop, NULL, NULL);
		(void)pthread_join(ev->loop_thread, NULL);
		if (t >= 0)
			(void)virEventRemoveTimeout(t);
	}
	pthread_mutex_destroy(&ev->lock);
	pthread_cond_destroy(&ev->cond);
	free(ev->uri);
	free(ev);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slated and the domains (daemon/domains.h): picking up running domains when slated starts,
 * tidying what stopped while it was away, domain events, and the doctor's domain checks.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "channel/channels.h"
#include "channel/proto.h"
#include "daemon/browser.h"
#include "daemon/daemon.h"
#include "daemon/domains.h"
#include "daemon/exec.h"
#include "daemon/shares.h"
#include "daemon/start.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "vm/domain.h"
#include "vm/events.h"
#include "vm/kvm.h"
#include "vm/qemu-user.h"
#include "vm/xml.h"
#include "workspace/workspace.h"

/* ---- the daemon's side: events, picking up domains, the doctor's check ---- */

struct forget_job {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
};

/*
 * A domain that stopped is undefined (a suspended one is kept), under the workspace's lock so
 * that a start defining it anew is never undone. Orphans are left alone.
 */
static void *forget_main(void *p)
{
	struct forget_job *j = p;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int lock_fd = -1;

	if (j->d->workspaces && workspace_load(j->d->workspaces, j->name, &w) >= 0 &&
	    workspace_lock(j->d->workspaces, j->name, &lock_fd) >= 0) {
		(void)vm_domain_forget(j->d->libvirt_uri, j->name, false);
		if (vm_domain_is_active(j->d->libvirt_uri, j->name) == 0)
			shares_release(j->d, j->name);
	}
	free(j);
	return NULL;
}

static void on_domain_event(const struct vm_event *ev, void *userdata)
{
	struct daemon_ctx *d = userdata;
	struct forget_job *j;
	pthread_attr_t attr;
	pthread_t t;

	if (ev->event == VIR_DOMAIN_EVENT_DEFINED || ev->event == VIR_DOMAIN_EVENT_UNDEFINED) {
		log_ws(LOG_DEBUG, ev->workspace, "domain %s %s", ev->domain, ev->description);
		return;
	}
	log_ws(ev->stopped ? LOG_NOTICE : LOG_INFO, ev->workspace, "workspace %s: domain %s %s",
	       ev->workspace, ev->domain, ev->description);
	/* Exec sessions look for themselves: a paused domain's streams never end on their own. */
	exec_sessions_kick(ev->workspace, ev->description);
	/* Its streams end: exec sessions tell their clients, `run --rm` deletes. */
	if (ev->stopped && d->channels)
		channels_detach(d->channels, ev->workspace);
	/* Its browser VM serves its guest only: it goes too (a suspend as well). */
	if (ev->stopped && workspace_name_check(ev->workspace) >= 0)
		daemon_browser_stop_async(d, ev->workspace);
	if (!ev->stopped || ev->saved || workspace_name_check(ev->workspace) < 0)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		return;
	j->d = d;
	memcpy(j->name, ev->workspace, strnlen(ev->workspace, WORKSPACE_NAME_MAX));
	(void)pthread_attr_init(&attr);
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, forget_main, j) != 0)
		free(j);
	(void)pthread_attr_destroy(&attr);
}

struct scan_result {
	unsigned running, suspended, stale, orphans;
	char orphan_names[512];
};

/* Connects slated to a running workspace's virtio-serial channel (with vsock, the guest
 * connects instead). */
static void attach_channel(struct daemon_ctx *d, const char *ws)
{
	_cleanup_free_ char *dir = NULL, *sock = NULL;

	if (!d->channels || vm_vsock_usable() || daemon_runtime_dir(d, ws, &dir) < 0 ||
	    !(sock = fs_path_join(dir, "channel.sock")))
		return;
	(void)channels_attach(d->channels, ws, sock);
}

/* Looks at every slate-* domain; with adopt, logs and tidies as slated does when it starts. */
static int scan_domains(struct daemon_ctx *d, bool adopt, struct scan_result *ret)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	struct scan_result res = {0};
	virDomainPtr *doms = NULL;
	int n, r;

	r = vm_connect(d->libvirt_uri, &conn);
	if (r < 0)
		return r;
	n = virConnectListAllDomains(conn, &doms, 0);
	if (n < 0)
		return -EIO;
	for (int i = 0; i < n; i++) {
		_cleanup_(workspace_freep) struct workspace *w = NULL;
		_cleanup_free_ char *xml = NULL;
		const char *dname = virDomainGetName(doms[i]), *ws = vm_domain_workspace(dname);
		struct vm_metadata md;
		enum vm_state st = VM_STATE_STOPPED;
		bool orphan;

		if (!ws)
			goto next;
		(void)vm_domain_get_state(doms[i], &st);
		xml = virDomainGetXMLDesc(doms[i], VIR_DOMAIN_XML_INACTIVE);
		orphan = !xml || vm_xml_metadata(xml, &md) < 0 || !streq(md.workspace, ws) ||
		         !d->workspaces || workspace_load(d->workspaces, ws, &w) < 0 ||
		         strcasecmp(w->uuid, md.uuid) != 0;
		if (orphan) {
			size_t l = strlen(res.orphan_names);
			res.orphans++;
			(void)snprintf(res.orphan_names + l, sizeof(res.orphan_names) - l,
			               "%s%s (%s)", l ? ", " : "", dname, vm_state_name(st));
			if (adopt)
				log_warning(
				        "orphan domain %s (%s): no workspace '%s' owns it; slate "
				        "leaves it alone (virsh destroy/undefine it if it is "
				        "stale)",
				        dname, vm_state_name(st), ws);
			goto next;
		}
		switch (st) {
		case VM_STATE_RUNNING:
		case VM_STATE_PAUSED:
			res.running++;
			if (adopt) {
				log_ws(LOG_INFO, ws, "picked up %s domain %s (%s)",
				       vm_state_name(st), dname, vm_accel_name(md.kvm));
				attach_channel(d, ws);
			}
			break;
		case VM_STATE_SUSPENDED:
			res.suspended++;
			if (adopt)
				log_ws(LOG_INFO, ws, "workspace %s is suspended", ws);
			break;
		default:
			/* It stopped while slated was away: what a stop would have done. */
			res.stale++;
			if (adopt && vm_domain_forget(d->libvirt_uri, ws, false) > 0)
				log_ws(LOG_INFO, ws, "domain %s stopped while slated was away",
				       dname);
		}
	next:
		virDomainFree(doms[i]);
	}
	free(doms);
	*ret = res;
	return 0;
}

/* Read-only share views of domains that stopped while slated was away. */
static void sweep_ro_binds(struct daemon_ctx *d)
{
	_cleanup_free_ char *dir = fs_path_join(d->runtime_dir, "vm");
	_cleanup_(closedirp) DIR *dp = dir ? opendir(dir) : NULL;
	struct dirent *de;

	while (dp && (de = readdir(dp)))
		if (workspace_name_check(de->d_name) >= 0 &&
		    vm_domain_is_active(d->libvirt_uri, de->d_name) == 0)
			shares_release(d, de->d_name);
}

/*
 * Workspaces made by `slate run --rm` live only as long as the run that made them, and no run
 * survives slated: the ones found now were left by a crash, and go.
 */
static void sweep_ephemeral(struct daemon_ctx *d)
{
	struct workspace **list = NULL;
	size_t n = 0;

	if (!d->workspaces || workspace_list(d->workspaces, &list, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct slate_error err = {0};
		if (!list[i]->ephemeral)
			continue;
		if (daemon_destroy_and_delete(d, list[i]->name, &err) < 0)
			log_ws(LOG_WARNING, list[i]->name,
			       "cannot delete %s, left by an interrupted 'slate run --rm': %s",
			       list[i]->name, slate_error_text(&err));
		else
			log_ws(LOG_NOTICE, list[i]->name,
			       "deleted %s, left by an interrupted 'slate run --rm'",
			       list[i]->name);
	}
	for (size_t i = 0; i < n; i++)
		workspace_free(list[i]);
	free(list);
}

/* vsock: which running slate domain has this guest CID (from its live XML). */
static int cid_lookup(unsigned cid, char *workspace, size_t len, void *userdata)
{
	struct daemon_ctx *d = userdata;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	virDomainPtr *doms = NULL;
	int n, r = -ENOENT;

	if (vm_connect(d->libvirt_uri, &conn) < 0)
		return -ECONNREFUSED;
	n = virConnectListAllDomains(conn, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
	for (int i = 0; i < n; i++) {
		const char *ws = vm_domain_workspace(virDomainGetName(doms[i]));
		_cleanup_free_ char *xml = NULL;
		unsigned c;

		if (r == -ENOENT && ws && (xml = virDomainGetXMLDesc(doms[i], 0)) &&
		    vm_xml_vsock_cid(xml, &c) >= 0 && c == cid && workspace_name_check(ws) >= 0 &&
		    strlen(ws) < len) {
			memcpy(workspace, ws, strlen(ws) + 1);
			r = 0;
		}
		virDomainFree(doms[i]);
	}
	free(doms);
	return r;
}

int daemon_domains_start(struct daemon_ctx *d)
{
	if (d->channels && vm_vsock_usable()) {
		int k = channels_listen_vsock(d->channels, cid_lookup, d);
		if (k < 0)
			log_warning("cannot listen on vsock port %d: %s", CH_VSOCK_PORT,
			            slate_strerror(k));
	}
	struct scan_result sr;
	int r;

	r = vm_events_start(d->libvirt_uri, on_domain_event, d, &d->vm_events);
	if (r < 0)
		log_warning("domain events unavailable: %s", slate_strerror(r));
	(void)vm_kvm_usable(d->libvirt_uri);
	r = scan_domains(d, true, &sr);
	if (r < 0)
		return log_warning("cannot list domains at %s: %s", d->libvirt_uri,
		                   vm_last_error()),
		       0;
	log_info("domains: %u running, %u suspended, %u orphaned", sr.running, sr.suspended,
	         sr.orphans);
	sweep_ro_binds(d);
	sweep_ephemeral(d);
	daemon_snapshot_sweep(d);
	daemon_browser_sweep(d);
	return 0;
}

void daemon_domains_stop(struct daemon_ctx *d)
{
	vm_events_stop(d->vm_events);
	d->vm_events = NULL;
}

int daemon_check_qemu_access(const struct daemon_ctx *d, const char *dir, char *detail, size_t len)
{
	struct vm_qemu_user u;
	int r;

	r = vm_qemu_user_load(d->libvirt_uri, NULL, &u);
	if (r < 0) {
		(void)snprintf(detail, len, "cannot tell which user QEMU runs as (%s): %s",
		               VM_QEMU_CONF, slate_strerror(r));
		return r;
	}
	if (r == 0) {
		(void)snprintf(detail, len, "with %s QEMU runs as slated's own user",
		               d->libvirt_uri);
		return 0;
	}
	r = vm_qemu_user_reach(&u, dir, detail, len);
	if (r == 0)
		(void)snprintf(detail, len, "QEMU (user %s) can reach %s", u.name, dir);
	return r;
}

int daemon_check_domains(struct daemon_ctx *d, char *detail, size_t len)
{
	struct scan_result sr;
	int r;

	r = scan_domains(d, false, &sr);
	if (r < 0) {
		(void)snprintf(detail, len, "cannot list domains: %s", slate_strerror(r));
		return r;
	}
	if (sr.orphans)
		(void)snprintf(
		        detail, len,
		        "%u running, %u suspended; %u orphaned (no workspace owns them, slate "
		        "leaves them alone): %s",
		        sr.running, sr.suspended, sr.orphans, sr.orphan_names);
	else
		(void)snprintf(detail, len, "%u running, %u suspended, no orphans; accelerator %s",
		               sr.running, sr.suspended,
		               vm_accel_name(vm_kvm_usable(d->libvirt_uri) > 0));
	return (int)sr.orphans;
}

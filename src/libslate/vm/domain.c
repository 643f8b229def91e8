/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "vm/domain.h"
#include "vm/xml.h"

const char *vm_state_name(enum vm_state s)
{
	switch (s) {
	case VM_STATE_RUNNING:
		return "running";
	case VM_STATE_PAUSED:
		return "paused";
	case VM_STATE_SUSPENDED:
		return "suspended";
	default:
		return "stopped";
	}
}

int vm_domain_name(const char *workspace, char *buf, size_t len)
{
	int n = snprintf(buf, len, VM_DOMAIN_PREFIX "%s", workspace);

	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

const char *vm_domain_workspace(const char *domain_name)
{
	size_t n = strlen(VM_DOMAIN_PREFIX);

	if (!domain_name || strncmp(domain_name, VM_DOMAIN_PREFIX, n) != 0 || !domain_name[n])
		return NULL;
	return domain_name + n;
}

const char *vm_last_error(void)
{
	virErrorPtr e = virGetLastError();

	return e && e->message ? e->message : "unknown libvirt error";
}

/* libvirt prints every error to stderr unless told otherwise; slate reports them itself. */
static void quiet_errors(void *userdata, virErrorPtr e) {}

static void quiet_once(void)
{
	virSetErrorFunc(NULL, quiet_errors);
}

int vm_connect(const char *uri, virConnectPtr *ret)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	virConnectPtr conn;

	(void)pthread_once(&once, quiet_once);
	conn = virConnectOpen(uri);

	if (!conn) {
		log_debug("cannot connect to %s: %s", uri, vm_last_error());
		return -ECONNREFUSED;
	}
	*ret = conn;
	return 0;
}

int vm_domain_lookup(virConnectPtr conn, const char *workspace, virDomainPtr *ret)
{
	char name[128];
	virDomainPtr dom;
	int r;

	r = vm_domain_name(workspace, name, sizeof(name));
	if (r < 0)
		return r;
	dom = virDomainLookupByName(conn, name);
	if (!dom) {
		virErrorPtr e = virGetLastError();
		return e && e->code == VIR_ERR_NO_DOMAIN ? -ENOENT : -EIO;
	}
	*ret = dom;
	return 0;
}

int vm_domain_get_state(virDomainPtr dom, enum vm_state *ret)
{
	int state = 0, reason = 0, saved;

	if (virDomainGetState(dom, &state, &reason, 0) < 0)
		return -EIO;
	switch (state) {
	case VIR_DOMAIN_RUNNING:
	case VIR_DOMAIN_BLOCKED:
	case VIR_DOMAIN_SHUTDOWN: /* still running, shutting down */
		*ret = VM_STATE_RUNNING;
		return 0;
	case VIR_DOMAIN_PAUSED:
	case VIR_DOMAIN_PMSUSPENDED:
		*ret = VM_STATE_PAUSED;
		return 0;
	default:
		saved = virDomainHasManagedSaveImage(dom, 0);
		if (saved < 0)
			return -EIO;
		*ret = saved ? VM_STATE_SUSPENDED : VM_STATE_STOPPED;
		return 0;
	}
}

int vm_workspace_state(virConnectPtr conn, const char *workspace, enum vm_state *ret)
{
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	int r;

	r = vm_domain_lookup(conn, workspace, &dom);
	if (r == -ENOENT) {
		*ret = VM_STATE_UNDEFINED;
		return 0;
	}
	if (r < 0)
		return r;
	return vm_domain_get_state(dom, ret);
}

int vm_workspace_state_uri(const char *uri, const char *workspace, enum vm_state *ret)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	int r;

	r = vm_connect(uri, &conn);
	if (r < 0)
		return r;
	return vm_workspace_state(conn, workspace, ret);
}

int vm_domain_is_active(const char *uri, const char *workspace)
{
	enum vm_state s;
	int r;

	r = vm_workspace_state_uri(uri, workspace, &s);
	if (r < 0)
		return r;
	return s == VM_STATE_RUNNING || s == VM_STATE_PAUSED || s == VM_STATE_SUSPENDED;
}

int vm_workspace_accel(const char *uri, const char *workspace, const char **ret)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	_cleanup_free_ char *xml = NULL;
	struct vm_metadata md;
	int r;

	r = vm_connect(uri, &conn);
	if (r < 0)
		return r;
	r = vm_domain_lookup(conn, workspace, &dom);
	if (r < 0)
		return r;
	if (virDomainIsActive(dom) != 1)
		return -ENOENT;
	xml = virDomainGetXMLDesc(dom, 0);
	if (!xml)
		return -EIO;
	r = vm_xml_metadata(xml, &md);
	if (r < 0)
		return r;
	*ret = md.kvm ? "kvm" : "tcg";
	return 0;
}

int vm_domain_forget(const char *uri, const char *workspace, bool even_suspended)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	int r;

	r = vm_connect(uri, &conn);
	if (r < 0)
		return r;
	r = vm_domain_lookup(conn, workspace, &dom);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	if (virDomainIsActive(dom) == 1)
		return -EBUSY;
	if (virDomainIsPersistent(dom) != 1)
		return 0;
	if (!even_suspended && virDomainHasManagedSaveImage(dom, 0) != 0)
		return 0;
	if (virDomainUndefineFlags(dom, VIR_DOMAIN_UNDEFINE_MANAGED_SAVE |
	                                        VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA |
	                                        VIR_DOMAIN_UNDEFINE_NVRAM) < 0)
		return -EIO;
	return 1;
}

/* Calls fn for each active domain whose live XML names a path below dir (or that cannot be
 * described: it may use anything). Returns the count, or a negative error. */
static int domains_below(const char *uri, const char *dir,
                         void (*fn)(virDomainPtr dom, unsigned i, void *userdata), void *userdata)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	virDomainPtr *doms = NULL;
	char prefix[4096];
	int n, r;
	unsigned count = 0;

	r = snprintf(prefix, sizeof(prefix), "%s/", dir);
	if (r < 0 || (size_t)r >= sizeof(prefix))
		return -ENAMETOOLONG;
	r = vm_connect(uri, &conn);
	if (r < 0)
		return r;
	n = virConnectListAllDomains(conn, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
	if (n < 0)
		return -EIO;
	for (int i = 0; i < n; i++) {
		char *xml = virDomainGetXMLDesc(doms[i], 0);

		if (!xml || strstr(xml, prefix))
			fn(doms[i], count++, userdata);
		free(xml);
		(void)virDomainFree(doms[i]);
	}
	free(doms);
	return (int)count;
}

struct leftover {
	const char *name_prefix, *path_prefix, *why;
};

static void destroy_leftover(virDomainPtr dom, unsigned i, void *userdata)
{
	const struct leftover *l = userdata;
	const char *name = virDomainGetName(dom);
	char *xml;

	(void)i;
	if (!name || strncmp(name, l->name_prefix, strlen(l->name_prefix)) != 0)
		return;
	/* domains_below() also passes the domains it could not describe: not ours to destroy. */
	xml = virDomainGetXMLDesc(dom, 0);
	if (xml && strstr(xml, l->path_prefix)) {
		log_notice("removing %s, %s", name, l->why);
		(void)virDomainDestroy(dom);
		(void)virDomainUndefine(dom);
	}
	free(xml);
}

int vm_domains_destroy_below(const char *uri, const char *dir, const char *name_prefix,
                             const char *why)
{
	char prefix[4096];
	struct leftover l = {.name_prefix = name_prefix, .path_prefix = prefix, .why = why};
	int r = snprintf(prefix, sizeof(prefix), "%s/", dir);

	if (r < 0 || (size_t)r >= sizeof(prefix))
		return -ENAMETOOLONG;
	r = domains_below(uri, dir, destroy_leftover, &l);
	return r < 0 ? r : 0;
}

struct first_name {
	char *buf;
	size_t len;
};

static void note_first(virDomainPtr dom, unsigned i, void *userdata)
{
	struct first_name *f = userdata;

	if (i == 0 && f->buf && f->len > 0)
		(void)snprintf(f->buf, f->len, "%s", virDomainGetName(dom));
}

int vm_domains_using(const char *uri, const char *dir, char *first, size_t first_len)
{
	struct first_name f = {first, first_len};

	return domains_below(uri, dir, note_first, &f);
}

struct usage {
	bool (*skip)(const char *domain, void *userdata);
	void *userdata;
	unsigned count;
	uint64_t mib;
};

static void add_memory(virDomainPtr dom, unsigned i, void *userdata)
{
	struct usage *u = userdata;
	unsigned long kib;

	(void)i;
	if (u->skip && u->skip(virDomainGetName(dom), u->userdata))
		return;
	u->count++;
	kib = virDomainGetMaxMemory(dom);
	/* One that cannot say counts as none: the budget is a guard, not an accountant. */
	if (kib > 0)
		u->mib += (uint64_t)kib / 1024;
}

int vm_domains_usage(const char *uri, const char *dir,
                     bool (*skip)(const char *domain, void *userdata), void *userdata,
                     unsigned *ret_count, uint64_t *ret_mib)
{
	struct usage u = {.skip = skip, .userdata = userdata};
	int n = domains_below(uri, dir, add_memory, &u);

	if (n < 0)
		return n;
	*ret_count = u.count;
	*ret_mib = u.mib;
	return 0;
}

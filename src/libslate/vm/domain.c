/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <stdio.h>

#include "util/log.h"
#include "vm/domain.h"

int vm_domain_name(const char *workspace, char *buf, size_t len)
{
	int n = snprintf(buf, len, VM_DOMAIN_PREFIX "%s", workspace);

	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

int vm_domain_is_active(const char *uri, const char *workspace)
{
	char name[128];
	virConnectPtr conn;
	virDomainPtr dom;
	int r;

	r = vm_domain_name(workspace, name, sizeof(name));
	if (r < 0)
		return r;
	conn = virConnectOpen(uri);
	if (!conn) {
		virErrorPtr e = virGetLastError();
		log_debug("cannot connect to %s: %s", uri, e && e->message ? e->message : "?");
		return -ECONNREFUSED;
	}
	dom = virDomainLookupByName(conn, name);
	if (!dom) {
		virErrorPtr e = virGetLastError();
		r = e && e->code == VIR_ERR_NO_DOMAIN ? 0 : -EIO;
	} else {
		r = virDomainIsActive(dom);
		if (r < 0)
			r = -EIO;
		virDomainFree(dom);
	}
	(void)virConnectClose(conn);
	return r;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The doctor's define measurement (define-time.h says why it matters). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "vm/define-time.h"
#include "vm/domain.h"

#define KVM_MAJOR 10
#define KVM_MINOR 232

/* Shared by the waiting doctor and the thread that defines: the last one to let go frees it. */
struct define_job {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned refs;
	bool done;
	int r;
	double secs;
	char err[256];
	char uri[256];
	char name[64];
};

static double mono_s(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void job_unref(struct define_job *j)
{
	bool last;

	pthread_mutex_lock(&j->lock);
	last = --j->refs == 0;
	pthread_mutex_unlock(&j->lock);
	if (!last)
		return;
	(void)pthread_cond_destroy(&j->cond);
	(void)pthread_mutex_destroy(&j->lock);
	free(j);
}

/*
 * A slated that exits while its define still runs leaves the domain behind; the next doctor
 * undefines those whose slated is gone (the pid is in the name).
 */
static void sweep_leftovers(virConnectPtr conn)
{
	virDomainPtr *doms = NULL;
	int n = virConnectListAllDomains(conn, &doms, VIR_CONNECT_LIST_DOMAINS_INACTIVE);

	for (int i = 0; i < n; i++) {
		const char *name = virDomainGetName(doms[i]);
		size_t k = strlen(VM_DEFINE_PREFIX);
		char *end;
		long pid;

		if (name && strncmp(name, VM_DEFINE_PREFIX, k) == 0) {
			errno = 0;
			pid = strtol(name + k, &end, 10);
			if (!errno && end != name + k && *end == '-' && pid > 0 &&
			    kill((pid_t)pid, 0) < 0 && errno == ESRCH &&
			    virDomainUndefine(doms[i]) == 0)
				log_info("undefined %s, left by a slated that exited", name);
		}
		virDomainFree(doms[i]);
	}
	free(doms);
}

static void *define_main(void *p)
{
	struct define_job *j = p;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	char xml[512], err[256] = "";
	double t0, secs = 0;
	int r;

	(void)snprintf(xml, sizeof(xml),
	               "<domain type='qemu'><name>%s</name>"
	               "<description>slate doctor: a throwaway domain, undefined at once"
	               "</description><memory unit='MiB'>16</memory>"
	               "<os><type>hvm</type></os></domain>",
	               j->name);
	r = vm_connect(j->uri[0] ? j->uri : NULL, &conn);
	if (r < 0)
		(void)snprintf(err, sizeof(err), "cannot connect: %s", vm_last_error());
	else {
		sweep_leftovers(conn);
		t0 = mono_s();
		dom = virDomainDefineXML(conn, xml);
		secs = mono_s() - t0;
		if (!dom) {
			r = -EIO;
			(void)snprintf(err, sizeof(err), "%s", vm_last_error());
		} else if (virDomainUndefine(dom) < 0)
			log_warning("cannot undefine the doctor's throwaway domain %s: %s (virsh "
			            "undefine %s)",
			            j->name, vm_last_error(), j->name);
		else if (secs >= VM_DEFINE_WAIT_S)
			log_info("the doctor's throwaway domain %s took %.1f s to define; undefined",
			         j->name, secs);
	}
	pthread_mutex_lock(&j->lock);
	j->r = r;
	j->secs = secs;
	memcpy(j->err, err, sizeof(err));
	j->done = true;
	(void)pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
	job_unref(j);
	return NULL;
}

int vm_define_time(const char *uri, unsigned wait_s, double *ret_s, char *err, size_t len)
{
	struct define_job *j;
	pthread_condattr_t ca;
	pthread_attr_t attr;
	struct timespec deadline;
	unsigned char rnd[8];
	pthread_t t;
	int r;

	if (uri && strlen(uri) >= sizeof(j->uri))
		return -ENAMETOOLONG;
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return -errno;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	(void)snprintf(j->uri, sizeof(j->uri), "%s", uri ? uri : "");
	/* Not VM_DOMAIN_PREFIX: no workspace, and no orphan in the doctor's domains check. */
	(void)snprintf(j->name, sizeof(j->name), VM_DEFINE_PREFIX "%ld-%02x%02x%02x%02x%02x%02x",
	               (long)getpid(), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
	(void)pthread_mutex_init(&j->lock, NULL);
	(void)pthread_condattr_init(&ca);
	(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	(void)pthread_cond_init(&j->cond, &ca);
	(void)pthread_condattr_destroy(&ca);
	j->refs = 2;
	(void)pthread_attr_init(&attr);
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, define_main, j);
	(void)pthread_attr_destroy(&attr);
	if (r != 0) {
		j->refs = 1;
		job_unref(j);
		return -r;
	}
	(void)clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += wait_s;
	pthread_mutex_lock(&j->lock);
	while (!j->done)
		if (pthread_cond_timedwait(&j->cond, &j->lock, &deadline) == ETIMEDOUT)
			break;
	if (!j->done) {
		r = -ETIMEDOUT;
		(void)snprintf(err, len, "no answer within %u s (%s is undefined when it ends)",
		               wait_s, j->name);
	} else {
		r = j->r;
		*ret_s = j->secs;
		if (r < 0)
			(void)snprintf(err, len, "%s", j->err);
	}
	pthread_mutex_unlock(&j->lock);
	job_unref(j);
	return r;
}

int vm_libvirtd_sees_kvm(void)
{
	static const char *const pidfiles[] = {"/run/libvirtd.pid", "/run/virtqemud.pid"};
	struct stat st;

	if (stat("/dev/kvm", &st) < 0 || !S_ISCHR(st.st_mode))
		return 0;
	for (size_t i = 0; i < ELEMENTSOF(pidfiles); i++) {
		_cleanup_fclose_ FILE *f = fopen(pidfiles[i], "re");
		char path[64];
		long pid;

		if (!f || fscanf(f, "%ld", &pid) != 1 || pid <= 0)
			continue;
		(void)snprintf(path, sizeof(path), "/proc/%ld/root/dev/kvm", pid);
		if (stat(path, &st) < 0)
			return errno == ENOENT ? 0 : -errno;
		return S_ISCHR(st.st_mode) && major(st.st_rdev) == KVM_MAJOR &&
		       minor(st.st_rdev) == KVM_MINOR;
	}
	return -ESRCH;
}

bool vm_define_verdict(double secs, bool finished, double warn_s, int libvirtd_kvm,
                       bool kvm_usable, char *detail, size_t len)
{
	char took[96];

	if (finished)
		(void)snprintf(took, sizeof(took), "libvirt took %.2f s to define a throwaway domain",
		               secs);
	else
		(void)snprintf(took, sizeof(took),
		               "libvirt did not define a throwaway domain within %.0f s", secs);
	if (finished && secs <= warn_s) {
		(void)snprintf(detail, len, "%s", took);
		return false;
	}
	if (libvirtd_kvm != 0 && !kvm_usable)
		(void)snprintf(
		        detail, len,
		        "%s (warn above %.1f s), and every start waits as long: %s /dev/kvm but KVM "
		        "cannot run guests here, so libvirt re-probes QEMU on every lookup (its "
		        "cached capabilities say KVM is unusable) and QEMU's KVM probe can hang "
		        "~100 s; run libvirtd where it does not see /dev/kvm (a systemd drop-in "
		        "with BindReadOnlyPaths=/dev/null:/dev/kvm for libvirtd.service or "
		        "virtqemud.service, or a mount namespace with /dev/null bound over "
		        "/dev/kvm, as .ci/setup does) and restart it",
		        took, warn_s, libvirtd_kvm > 0 ? "libvirtd sees" : "libvirtd may see");
	else
		(void)snprintf(detail, len,
		               "%s (warn above %.1f s), and every start waits as long: libvirtd "
		               "answers slowly (a loaded host, or it is probing QEMU: see its log, "
		               "e.g. journalctl -u libvirtd)",
		               took, warn_s);
	return true;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The doctor's define measurement (define-time.h says why it matters). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include "util/time.h"
#include "vm/define-time.h"
#include "vm/domain.h"

#define KVM_MAJOR 10
#define KVM_MINOR 232
#define MAX_PROBES_SEEN 64

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
		t0 = time_mono_s();
		dom = virDomainDefineXML(conn, xml);
		secs = time_mono_s() - t0;
		if (!dom) {
			r = -EIO;
			(void)snprintf(err, sizeof(err), "%s", vm_last_error());
		} else if (virDomainUndefine(dom) < 0)
			log_warning("cannot undefine the doctor's throwaway domain %s: %s (virsh "
			            "undefine %s)",
			            j->name, vm_last_error(), j->name);
		else if (secs >= VM_DEFINE_WAIT_S)
			log_info(
			        "the doctor's throwaway domain %s took %.1f s to define; undefined",
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

/* Whether a process is one of libvirt's QEMU capability probes ("-machine none ... -qmp"). */
static bool is_caps_probe(const char *pid)
{
	char path[64], cmd[4096];
	_cleanup_close_ int fd = -1;
	ssize_t n;
	bool none = false, qmp = false;

	(void)snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || (n = read(fd, cmd, sizeof(cmd) - 1)) <= 0)
		return false;
	cmd[n] = '\0';
	if (!strstr(cmd, "qemu-system"))
		return false;
	for (char *a = cmd; a < cmd + n; a += strlen(a) + 1) {
		if (streq(a, "-machine") && a + strlen(a) + 1 < cmd + n)
			none = strncmp(a + strlen(a) + 1, "none", 4) == 0;
		if (streq(a, "-qmp"))
			qmp = true;
	}
	return none && qmp;
}

/* Adds the capability probes running now to seen (each pid once). */
static void note_probes(pid_t *seen, size_t *n_seen)
{
	_cleanup_(closedirp) DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d))) {
		pid_t pid;
		bool known = false;

		if (de->d_name[0] < '1' || de->d_name[0] > '9' || !is_caps_probe(de->d_name))
			continue;
		pid = (pid_t)atol(de->d_name);
		for (size_t i = 0; i < *n_seen; i++)
			known = known || seen[i] == pid;
		if (!known && *n_seen < MAX_PROBES_SEEN)
			seen[(*n_seen)++] = pid;
	}
}

int vm_define_time(const char *uri, unsigned wait_s, double *ret_s, unsigned *ret_probes, char *err,
                   size_t len)
{
	struct define_job *j;
	pthread_condattr_t ca;
	pthread_attr_t attr;
	struct timespec deadline, slice;
	unsigned char rnd[6];
	pid_t seen[MAX_PROBES_SEEN];
	size_t n_seen = 0;
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
	/* In slices of 100 ms, looking for the QEMU probes libvirtd starts meanwhile: a probe
	 * lasts seconds where defines are slow. */
	while (!j->done) {
		(void)clock_gettime(CLOCK_MONOTONIC, &slice);
		if (slice.tv_sec > deadline.tv_sec ||
		    (slice.tv_sec == deadline.tv_sec && slice.tv_nsec >= deadline.tv_nsec))
			break;
		slice.tv_nsec += 100 * 1000 * 1000;
		if (slice.tv_nsec >= 1000 * 1000 * 1000) {
			slice.tv_sec++;
			slice.tv_nsec -= 1000 * 1000 * 1000;
		}
		if (pthread_cond_timedwait(&j->cond, &j->lock, &slice) == ETIMEDOUT) {
			pthread_mutex_unlock(&j->lock);
			note_probes(seen, &n_seen);
			pthread_mutex_lock(&j->lock);
		}
	}
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
	*ret_probes = (unsigned)n_seen;
	return r;
}

/* libvirt asks whether QEMU's user may open /dev/kvm for reading and writing (root may). */
static bool openable(const struct vm_qemu_user *u, const struct stat *st)
{
	bool member = false;

	if (!u || u->uid == 0)
		return true;
	if (st->st_uid == u->uid)
		return (st->st_mode & 0600) == 0600;
	for (size_t i = 0; i < u->n_groups; i++)
		member = member || u->groups[i] == st->st_gid;
	if (member)
		return (st->st_mode & 0060) == 0060;
	return (st->st_mode & 0006) == 0006;
}

enum vm_kvm_view vm_libvirtd_kvm_view(const struct vm_qemu_user *u, char *desc, size_t len)
{
	static const char *const pidfiles[] = {"/run/libvirtd.pid", "/run/virtqemud.pid"};
	struct stat st;

	for (size_t i = 0; i < ELEMENTSOF(pidfiles); i++) {
		_cleanup_fclose_ FILE *f = fopen(pidfiles[i], "re");
		char path[64];
		long pid;
		bool kvm, open_ok;

		if (!f || fscanf(f, "%ld", &pid) != 1 || pid <= 0)
			continue;
		(void)snprintf(path, sizeof(path), "/proc/%ld/root/dev/kvm", pid);
		if (stat(path, &st) < 0) {
			if (errno != ENOENT) {
				(void)snprintf(desc, len, "%s: %s", path, strerror(errno));
				return VM_KVM_VIEW_UNKNOWN;
			}
			(void)snprintf(desc, len, "libvirtd (pid %ld) has no /dev/kvm", pid);
			return VM_KVM_VIEW_HIDDEN;
		}
		kvm = S_ISCHR(st.st_mode) && major(st.st_rdev) == KVM_MAJOR &&
		      minor(st.st_rdev) == KVM_MINOR;
		open_ok = openable(u, &st);
		(void)snprintf(desc, len,
		               "libvirtd (pid %ld) has %s at /dev/kvm (%u:%u, mode %04o), which %s "
		               "may %s",
		               pid, kvm ? "the KVM device" : "a stand-in",
		               S_ISCHR(st.st_mode) ? major(st.st_rdev) : 0,
		               S_ISCHR(st.st_mode) ? minor(st.st_rdev) : 0,
		               (unsigned)(st.st_mode & 07777), u ? u->name : "root",
		               open_ok ? "open" : "not open");
		if (!open_ok)
			return VM_KVM_VIEW_HIDDEN;
		return kvm ? VM_KVM_VIEW_KVM : VM_KVM_VIEW_STAND_IN;
	}
	(void)snprintf(desc, len, "no libvirtd pid file");
	return VM_KVM_VIEW_UNKNOWN;
}

bool vm_define_verdict(const struct vm_define_facts *f, char *detail, size_t len)
{
	const char *user = f->qemu_user ? f->qemu_user : "root";
	char took[160], probes[96] = "";

	if (f->finished)
		(void)snprintf(took, sizeof(took),
		               "libvirt took %.3f s to define a throwaway domain", f->secs);
	else
		(void)snprintf(took, sizeof(took),
		               "libvirt did not define a throwaway domain within %.0f s", f->secs);
	if (f->finished && f->secs <= f->warn_s) {
		(void)snprintf(detail, len, "%s", took);
		return false;
	}
	if (f->probes)
		(void)snprintf(probes, sizeof(probes),
		               "; libvirtd started %u QEMU capability probe%s", f->probes,
		               f->probes == 1 ? "" : "s");
	if (!f->kvm_usable && (f->view == VM_KVM_VIEW_KVM || f->view == VM_KVM_VIEW_STAND_IN ||
	                       (f->view == VM_KVM_VIEW_UNKNOWN && f->probes)))
		(void)snprintf(
		        detail, len,
		        "%s (warn above %.1f s)%s, and every start waits as long: KVM cannot run "
		        "guests here, but %s (%s), so libvirt counts KVM as usable, finds its "
		        "cached "
		        "QEMU capabilities stale on every lookup and re-probes QEMU (whose KVM "
		        "probe "
		        "can hang ~100 s); restart libvirtd where %s may not open /dev/kvm: a "
		        "systemd "
		        "drop-in with InaccessiblePaths=-/dev/kvm for libvirtd.service (or "
		        "virtqemud.service), or a mount namespace with a mode-0000 node bound over "
		        "/dev/kvm, as .ci/libvirtd makes when 'slated --probe-kvm' says KVM is "
		        "unusable (/dev/null will not do)",
		        took, f->warn_s, probes,
		        f->view == VM_KVM_VIEW_UNKNOWN ? "libvirtd may see /dev/kvm"
		                                       : "QEMU's user may open libvirtd's /dev/kvm",
		        f->view_desc, user);
	else if (f->probes)
		(void)snprintf(detail, len,
		               "%s (warn above %.1f s)%s, and every start waits as long: libvirt "
		               "is re-reading QEMU's capabilities (%s; see libvirtd's log)",
		               took, f->warn_s, probes, f->view_desc);
	else
		(void)snprintf(detail, len,
		               "%s (warn above %.1f s), and every start waits as long: libvirtd "
		               "answers slowly (a loaded host? see libvirtd's log)",
		               took, f->warn_s);
	return true;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Booting and stopping a workspace's domain (lifecycle.h). */
#include <errno.h>
#include <fcntl.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/error.h"
#include "util/log.h"
#include "util/time.h"
#include "vm/domain.h"
#include "vm/kvm.h"
#include "vm/lifecycle.h"

#define POLL_MS 50
#define CONSOLE_SCAN_MAX (64u * 1024u)
#define UNDEFINE_FLAGS                                                                             \
	(VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA |               \
	 VIR_DOMAIN_UNDEFINE_NVRAM)

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void step(vm_progress_fn progress, void *ud, const char *name, const char *detail)
{
	if (progress)
		progress(name, detail, ud);
}

int vm_console_tail(const char *path, unsigned max_lines, char *buf, size_t len)
{
	_cleanup_close_ int fd = -1;
	char raw[8192];
	struct stat st;
	off_t off;
	ssize_t n;
	size_t o = 0, start;
	unsigned lines = 0;

	if (len == 0)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	off = st.st_size > (off_t)sizeof(raw) ? st.st_size - (off_t)sizeof(raw) : 0;
	n = pread(fd, raw, sizeof(raw), off);
	if (n < 0)
		return -errno;
	/* Walk back over max_lines newlines (a trailing one does not count). */
	start = (size_t)n;
	while (start > 0 && (raw[start - 1] == '\n' || raw[start - 1] == '\r'))
		start--;
	while (start > 0) {
		if (raw[start - 1] == '\n' && ++lines >= max_lines)
			break;
		start--;
	}
	for (size_t i = start; i < (size_t)n && o + 1 < len; i++) {
		unsigned char c = (unsigned char)raw[i];
		if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f))
			buf[o++] = (char)c;
	}
	while (o > 0 && buf[o - 1] == '\n')
		o--;
	buf[o] = '\0';
	return 0;
}

/* 1 when the console log holds the ready line, 0 when not yet, -errno. */
static int console_ready(const char *path)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *text = NULL;
	ssize_t n;
	char *p;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	text = malloc(CONSOLE_SCAN_MAX + 1);
	if (!text)
		return -ENOMEM;
	/* The ready line comes early in a boot; the first 64 KiB hold it. */
	n = pread(fd, text, CONSOLE_SCAN_MAX, 0);
	if (n < 0)
		return -errno;
	text[n] = '\0';
	for (p = text; (p = strstr(p, VM_READY_PREFIX)); p++) {
		char *eol = strpbrk(p, "\r\n");
		char *ready = strstr(p, VM_READY_SUFFIX);
		if (ready && (!eol || ready < eol) && (p == text || p[-1] == '\n'))
			return 1;
	}
	return 0;
}

/* Whether a start failed because QEMU (or the kernel under it) cannot do io_uring. The command
 * line libvirt quotes in its errors names io_uring anyway: look for QEMU's own words. */
static bool io_uring_refused(const char *msg)
{
	static const char *const words[] = {"Unable to use io_uring", "linux io_uring",
	                                    "io_uring is not supported", "io uring"};

	for (size_t i = 0; i < ELEMENTSOF(words); i++)
		if (strcasestr(msg, words[i]))
			return true;
	return false;
}

static void destroy_and_forget(virDomainPtr dom)
{
	(void)virDomainDestroy(dom);
	(void)virDomainUndefineFlags(dom, UNDEFINE_FLAGS);
}

/* Removes an inactive leftover whose UUID is not the workspace's (an earlier workspace of the
 * same name). */
static int drop_stale(virConnectPtr conn, const struct vm_config *c, struct slate_error *err)
{
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	char uuid[VIR_UUID_STRING_BUFLEN];
	int r;

	r = vm_domain_lookup(conn, c->workspace, &dom);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return slate_error_set(err, r, "cannot look up %s: %s", c->domain_name,
		                       vm_last_error());
	if (virDomainGetUUIDString(dom, uuid) < 0)
		return slate_error_set(err, -EIO, "%s: %s", c->domain_name, vm_last_error());
	if (strcasecmp(uuid, c->uuid) == 0)
		return 0;
	if (virDomainIsActive(dom) == 1)
		return slate_error_set(
		        err, -EEXIST,
		        "a domain named %s runs with UUID %s, not this workspace's %s: it is "
		        "not "
		        "this workspace's; slate leaves it alone (virsh destroy it if it is "
		        "stale)",
		        c->domain_name, uuid, c->uuid);
	log_ws(LOG_NOTICE, c->workspace,
	       "removing the stale definition of %s (UUID %s, an earlier workspace of this name)",
	       c->domain_name, uuid);
	if (virDomainUndefineFlags(dom, UNDEFINE_FLAGS) < 0)
		return slate_error_set(err, -EIO, "cannot remove the stale definition of %s: %s",
		                       c->domain_name, vm_last_error());
	return 0;
}

/* drop_stale(), then the state of the workspace's domain. */
static int stale_and_state(virConnectPtr conn, const struct vm_config *c, enum vm_state *ret,
                           struct slate_error *err)
{
	int r = drop_stale(conn, c, err);

	if (r < 0)
		return r;
	r = vm_workspace_state(conn, c->workspace, ret);
	if (r < 0)
		return slate_error_set(err, r, "cannot ask libvirt about %s: %s", c->domain_name,
		                       vm_last_error());
	return 0;
}

static int define(virConnectPtr conn, const char *template_text, const struct vm_config *c,
                  virDomainPtr *ret, struct slate_error *err)
{
	_cleanup_free_ char *xml = NULL;
	virDomainPtr dom;
	int r;

	r = vm_xml_build(template_text, c, &xml);
	if (r < 0)
		return slate_error_set(err, r, "cannot build the domain XML from the template: %s",
		                       r == -EINVAL ? "incomplete settings"
		                                    : "the template is not usable");
	dom = virDomainDefineXMLFlags(conn, xml, VIR_DOMAIN_DEFINE_VALIDATE);
	if (!dom)
		return slate_error_set(err, -EINVAL, "libvirt refused the domain definition: %s",
		                       vm_last_error());
	*ret = dom;
	return 0;
}

int vm_wait_ready(virDomainPtr dom, const char *console_log, unsigned timeout_s, double t0,
                  struct slate_error *err)
{
	char tail[1536] = "";
	unsigned polls = 0;
	int r;

	for (;;) {
		r = console_ready(console_log);
		if (r > 0)
			return 0;
		if (r < 0)
			return slate_error_set(err, r, "cannot read the console log %s: %s",
			                       console_log, strerror(-r));
		/* Asking libvirt costs more than reading a file: every tenth poll. */
		if (++polls % 10 == 0 && virDomainIsActive(dom) != 1) {
			sleep_ms(100);
			if (console_ready(console_log) > 0)
				return 0;
			(void)vm_console_tail(console_log, 15, tail, sizeof(tail));
			return slate_error_set(
			        err, -ECHILD,
			        "the guest stopped before it was ready; the console's last "
			        "lines:\n%s",
			        tail);
		}
		if (time_mono_s() - t0 > timeout_s) {
			(void)vm_console_tail(console_log, 15, tail, sizeof(tail));
			return slate_error_set(err, -ETIMEDOUT,
			                       "the guest did not report ready (\"" VM_READY_PREFIX
			                       "<version>" VM_READY_SUFFIX
			                       "\") within %u s; it was "
			                       "stopped. The console's last lines:\n%s",
			                       timeout_s, tail);
		}
		sleep_ms(POLL_MS);
	}
}

int vm_boot(virConnectPtr conn, const char *template_text, const struct vm_config *c,
            unsigned timeout_s, vm_progress_fn progress, void *userdata, struct vm_boot_result *ret,
            struct slate_error *err)
{
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	struct vm_boot_result res = {.kvm = c->kvm};
	struct vm_config cc = *c;
	enum vm_state state = VM_STATE_UNDEFINED;
	double t0;
	int r;

	if (timeout_s == 0)
		timeout_s = VM_DEFAULT_BOOT_TIMEOUT_S;
	r = stale_and_state(conn, c, &state, err);
	if (r < 0)
		return r;
	if (state == VM_STATE_RUNNING || state == VM_STATE_PAUSED) {
		res.already_running = true;
		*ret = res;
		return 0;
	}

	if (state == VM_STATE_SUSPENDED) {
		/* Its saved memory belongs with its saved definition: keep that. */
		r = vm_domain_lookup(conn, c->workspace, &dom);
		if (r < 0)
			return slate_error_set(err, r, "%s: %s", c->domain_name, vm_last_error());
		step(progress, userdata, "resuming", "restoring the saved memory");
		t0 = time_mono_s();
		if (virDomainCreate(dom) < 0)
			return slate_error_set(
			        err, -EIO,
			        "cannot resume %s from its saved state: %s (slate stop --force "
			        "discards it)",
			        c->domain_name, vm_last_error());
		res.resumed = true;
		res.boot_s = time_mono_s() - t0;
		*ret = res;
		return 0;
	}

	snprintf(res.disk_io, sizeof(res.disk_io), "%s", c->disk_io);
	step(progress, userdata, "defining", "libvirt defines the domain");
	r = define(conn, template_text, &cc, &dom, err);
	if (r < 0)
		return r;
	/* virtlogd truncates it too (append='off'); never read an earlier boot's ready line. */
	(void)unlink(c->console_log);
	step(progress, userdata, "booting", c->kvm ? "KVM" : "TCG (no usable KVM: slower)");
	t0 = time_mono_s();
	if (virDomainCreate(dom) < 0) {
		char first[512];

		(void)snprintf(first, sizeof(first), "%s", vm_last_error());
		if (!streq(cc.disk_io, "io_uring") || !io_uring_refused(first)) {
			(void)virDomainUndefineFlags(dom, UNDEFINE_FLAGS);
			return slate_error_set(err, -EIO, "cannot start %s: %s", c->domain_name,
			                       first);
		}
		/* QEMU or the kernel may refuse io_uring (seccomp, sysctl): once with native. */
		log_ws(LOG_NOTICE, c->workspace, "start with io_uring failed (%s); trying native",
		       first);
		virDomainFree(TAKE_PTR(dom));
		cc.disk_io = "native";
		r = define(conn, template_text, &cc, &dom, err);
		if (r < 0)
			return r;
		t0 = time_mono_s();
		if (virDomainCreate(dom) < 0) {
			(void)slate_error_set(err, -EIO, "cannot start %s: %s", c->domain_name,
			                      vm_last_error());
			(void)virDomainUndefineFlags(dom, UNDEFINE_FLAGS);
			return -EIO;
		}
		vm_disk_io_failed("io_uring");
		snprintf(res.disk_io, sizeof(res.disk_io), "%s", cc.disk_io);
	}
	step(progress, userdata, "waiting", "for the guest's ready line on the console");
	r = vm_wait_ready(dom, c->console_log, timeout_s, t0, err);
	if (r < 0) {
		destroy_and_forget(dom);
		return r;
	}
	res.boot_s = time_mono_s() - t0;
	*ret = res;
	return 0;
}

int vm_restore(virConnectPtr conn, const struct vm_config *c, const char *save_path,
               const char *xml, uint64_t home_bytes, void (*paused)(void *userdata), void *userdata,
               struct vm_boot_result *ret, struct slate_error *err)
{
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL, def = NULL;
	struct vm_boot_result res = {.kvm = c->kvm, .restored = true};
	enum vm_state state = VM_STATE_UNDEFINED;
	double t0, t_restored, t_defined, t_resized;
	int r;

	r = stale_and_state(conn, c, &state, err);
	if (r < 0)
		return r;
	if (state != VM_STATE_UNDEFINED && state != VM_STATE_STOPPED)
		return slate_error_set(err, -EEXIST, "%s is %s: not restoring over it",
		                       c->domain_name, vm_state_name(state));
	/* A stopped definition goes: the restore brings the domain's own. */
	if (state == VM_STATE_STOPPED && vm_domain_lookup(conn, c->workspace, &dom) >= 0) {
		(void)virDomainUndefineFlags(dom, UNDEFINE_FLAGS);
		virDomainFree(TAKE_PTR(dom));
	}
	(void)unlink(c->console_log);
	t0 = time_mono_s();
	/* Paused: the define, the home's size and the caller's channel come before the guest
	 * runs its first instruction. */
	if (virDomainRestoreFlags(conn, save_path, NULL, VIR_DOMAIN_SAVE_PAUSED) < 0)
		return slate_error_set(err, -EIO, "libvirt cannot restore %s from %s: %s",
		                       c->domain_name, save_path, vm_last_error());
	t_restored = time_mono_s();
	r = vm_domain_lookup(conn, c->workspace, &dom);
	if (r < 0) {
		(void)slate_error_set(err, r, "%s is gone after its restore: %s", c->domain_name,
		                      vm_last_error());
		return r;
	}
	/* Persistent, as a booted workspace's domain is: stop, suspend and the sweeps expect it. */
	def = virDomainDefineXMLFlags(conn, xml, 0);
	if (!def) {
		(void)slate_error_set(err, -EIO,
		                      "libvirt refused the restored domain's definition: %s",
		                      vm_last_error());
		destroy_and_forget(dom);
		return -EIO;
	}
	t_defined = time_mono_s();
	if (home_bytes &&
	    virDomainBlockResize(dom, "vdb", home_bytes, VIR_DOMAIN_BLOCK_RESIZE_BYTES) < 0) {
		(void)slate_error_set(err, -EIO, "cannot give the guest its home's size: %s",
		                      vm_last_error());
		destroy_and_forget(dom);
		return -EIO;
	}
	t_resized = time_mono_s();
	if (paused)
		paused(userdata);
	if (virDomainResume(dom) < 0) {
		(void)slate_error_set(err, -EIO, "cannot resume the restored %s: %s",
		                      c->domain_name, vm_last_error());
		destroy_and_forget(dom);
		return -EIO;
	}
	res.boot_s = time_mono_s() - t0;
	log_ws(LOG_DEBUG, c->workspace,
	       "restore of %s: libvirt restore %.0f ms, define %.0f ms, home size %.0f ms, "
	       "resume %.0f ms",
	       c->domain_name, (t_restored - t0) * 1000, (t_defined - t_restored) * 1000,
	       (t_resized - t_defined) * 1000, (time_mono_s() - t_resized) * 1000);
	snprintf(res.disk_io, sizeof(res.disk_io), "%s", c->disk_io);
	*ret = res;
	return 0;
}

/* Powers the domain off at once (a domain already gone is fine), saying why. */
static int destroy_now(virDomainPtr dom, vm_progress_fn progress, void *userdata, const char *why,
                       struct vm_stop_result *res, struct slate_error *err)
{
	step(progress, userdata, "destroying", why);
	if (virDomainDestroy(dom) < 0 && virDomainIsActive(dom) == 1)
		return slate_error_set(err, -EIO, "cannot destroy: %s", vm_last_error());
	res->destroyed = true;
	return 0;
}

/* Waits for the domain to go; says so every few seconds, so that a client (and an API stream's
 * idle timeout) sees the stop is still under way. */
static int wait_inactive(virDomainPtr dom, double deadline, vm_progress_fn progress, void *userdata)
{
	double start = time_mono_s(), next = start + 5;

	for (;;) {
		int a = virDomainIsActive(dom);
		if (a == 0)
			return 0;
		if (a < 0)
			return -EIO;
		if (time_mono_s() >= deadline)
			return -ETIMEDOUT;
		if (time_mono_s() >= next) {
			char d[64];
			(void)snprintf(d, sizeof(d), "for the guest to power off (%.0f s)",
			               time_mono_s() - start);
			step(progress, userdata, "waiting", d);
			next += 5;
		}
		sleep_ms(100);
	}
}

int vm_stop(virConnectPtr conn, const char *workspace, enum vm_stop_mode mode, unsigned timeout_s,
            vm_progress_fn progress, void *userdata, struct vm_stop_result *ret,
            struct slate_error *err)
{
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	struct vm_stop_result res = {0};
	enum vm_state state;
	double t0 = time_mono_s();
	int r;

	r = vm_domain_lookup(conn, workspace, &dom);
	if (r == -ENOENT) {
		*ret = res;
		return 0;
	}
	if (r < 0)
		return slate_error_set(err, r, "cannot ask libvirt: %s", vm_last_error());
	r = vm_domain_get_state(dom, &state);
	if (r < 0)
		return slate_error_set(err, r, "cannot ask libvirt: %s", vm_last_error());
	res.was_running = state == VM_STATE_RUNNING || state == VM_STATE_PAUSED;

	switch (mode) {
	case VM_STOP_SUSPEND:
		if (state == VM_STATE_SUSPENDED)
			break;
		if (!res.was_running)
			return slate_error_set(err, -ENOTCONN,
			                       "it is not running: nothing to suspend");
		step(progress, userdata, "suspending", "saving the guest's memory (managed save)");
		if (virDomainManagedSave(dom, 0) < 0)
			return slate_error_set(err, -EIO, "managed save failed: %s",
			                       vm_last_error());
		res.stop_s = time_mono_s() - t0;
		*ret = res;
		return 0;
	case VM_STOP_FORCE:
		if (res.was_running) {
			r = destroy_now(dom, progress, userdata, "powering off at once", &res, err);
			if (r < 0)
				return r;
		}
		break;
	case VM_STOP_SHUTDOWN:
		if (state == VM_STATE_SUSPENDED)
			return slate_error_set(
			        err, -EALREADY,
			        "it is suspended; 'slate start' resumes it, 'slate stop "
			        "--force' "
			        "discards its saved memory");
		if (!res.was_running)
			break;
		/* A paused CPU never sees the power button: power it off at once. */
		if (state == VM_STATE_PAUSED) {
			r = destroy_now(dom, progress, userdata, "paused: powering off at once",
			                &res, err);
			if (r < 0)
				return r;
			break;
		}
		if (timeout_s == 0)
			timeout_s = VM_DEFAULT_STOP_TIMEOUT_S;
		step(progress, userdata, "shutting-down", "ACPI power button");
		if (virDomainShutdownFlags(dom, VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN) < 0)
			log_ws(LOG_DEBUG, workspace, "ACPI shutdown: %s", vm_last_error());
		r = wait_inactive(dom, t0 + timeout_s, progress, userdata);
		if (r == -ETIMEDOUT) {
			char d[96];
			(void)snprintf(d, sizeof(d), "no power-off within %u s: destroying",
			               timeout_s);
			r = destroy_now(dom, progress, userdata, d, &res, err);
			if (r < 0)
				return r;
		} else if (r < 0) {
			return slate_error_set(err, r, "cannot ask libvirt: %s", vm_last_error());
		}
		break;
	}
	/* Stopped: nothing is kept in libvirt but what a suspended workspace needs. */
	if (virDomainIsPersistent(dom) == 1 && virDomainUndefineFlags(dom, UNDEFINE_FLAGS) < 0)
		log_ws(LOG_WARNING, workspace, "cannot undefine the stopped domain: %s",
		       vm_last_error());
	res.stop_s = time_mono_s() - t0;
	*ret = res;
	return 0;
}

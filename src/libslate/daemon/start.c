/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Starting and stopping a workspace's virtual machine (daemon/start.h): its disks prepared, its
 * shares served, its domain defined and booted, a terminal proven, its shares mounted and the
 * guest provisioned, then the proven-boot checkpoint; and the way back.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "channel/channels.h"
#include "channel/proto.h"
#include "daemon/daemon.h"
#include "daemon/domains.h"
#include "daemon/exec.h"
#include "daemon/limits.h"
#include "daemon/provision.h"
#include "daemon/shares.h"
#include "daemon/snapshot.h"
#include "daemon/start.h"
#include "image/store.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/time.h"
#include "vm/domain.h"
#include "vm/kvm.h"
#include "vm/lifecycle.h"
#include "vm/qemu-user.h"
#include "vm/xml.h"
#include "workspace/workspace.h"

struct boot_paths {
	char *ws_dir, *run_dir, *disk, *home, *kernel, *initrd, *cmdline, *log, *sock;
	char *fs_sock[VM_MAX_SHARES]; /* each share's virtiofsd socket */
	char tags[VM_MAX_SHARES][16];
	struct vm_share shares[VM_MAX_SHARES];
};

static void boot_paths_free(struct boot_paths *p)
{
	free(p->ws_dir);
	free(p->run_dir);
	free(p->disk);
	free(p->home);
	free(p->kernel);
	free(p->initrd);
	free(p->cmdline);
	free(p->log);
	free(p->sock);
	for (size_t i = 0; i < VM_MAX_SHARES; i++)
		free(p->fs_sock[i]);
}

#define PROOF_TIMEOUT_S 120
/* A restored guest's agent is up at once: one that does not answer soon boots cold instead. */
#define RESTORE_IDENTITY_TIMEOUT_S 20

/* What a callee said about its failure r: its message, else r's description. */
static const char *why_failed(const struct slate_error *e, int r)
{
	return e->msg[0] ? e->msg : slate_strerror(r);
}

struct pause_ctx {
	virDomainPtr dom;
	double paused_at, paused_ms;
	bool paused;
};

static int cp_pause(void *userdata)
{
	struct pause_ctx *p = userdata;

	if (virDomainSuspend(p->dom) < 0)
		return -EIO;
	p->paused = true;
	p->paused_at = time_mono_s();
	return 0;
}

static void cp_resume(void *userdata)
{
	struct pause_ctx *p = userdata;

	if (!p->paused)
		return;
	/* A guest left paused is a half-started workspace: try again before giving up. */
	for (int i = 0; virDomainResume(p->dom) < 0; i++) {
		if (i == 2) {
			log_warning("cannot resume %s after its checkpoint: %s",
			            virDomainGetName(p->dom), vm_last_error());
			break;
		}
		(void)usleep(500 * 1000);
	}
	p->paused_ms = (time_mono_s() - p->paused_at) * 1000;
	p->paused = false;
}

/*
 * The proven-boot checkpoint: disk.img and home.img cloned together while the domain is paused
 * (QEMU drains and flushes its disk I/O when it pauses), so the pair is consistent.
 */
static int proven_checkpoint(struct daemon_ctx *d, virConnectPtr conn, const char *name,
                             struct checkpoint_info *cp, double *ret_pause_ms)
{
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	struct pause_ctx pc = {0};
	struct checkpoint_hooks h = {.pause = cp_pause, .resume = cp_resume, .userdata = &pc};
	int r;

	r = vm_domain_lookup(conn, name, &dom);
	if (r < 0)
		return r;
	pc.dom = dom;
	r = workspace_checkpoint_create_hooked(d->workspaces, name, "proven boot", &h, cp);
	cp_resume(&pc);
	*ret_pause_ms = pc.paused_ms;
	return r;
}

/* Where a start reports progress and failure. */
struct start_io {
	vm_progress_fn progress;
	void *userdata;
	bool (*gone)(void *userdata); /* whoever asked went away (may be NULL) */
	struct slate_error *err;
	bool booted; /* this start defined and booted the domain */
};

static void start_progress(const char *step, const char *detail, void *userdata)
{
	struct start_io *s = userdata;

	if (s->progress)
		s->progress(step, detail, s->userdata);
}

/*
 * QEMU's "Permission denied" names a file, not who was denied: the directories were checked
 * before the define, so what is left is the file itself, an ACL or a security module.
 */
static void explain_denied(const struct daemon_ctx *d, char *err, size_t len)
{
	struct vm_qemu_user u;
	size_t l = strlen(err);

	if (!strstr(err, "Permission denied") || vm_qemu_user_load(d->libvirt_uri, NULL, &u) <= 0)
		return;
	(void)snprintf(err + l, len - l,
	               " (QEMU runs as user %s, uid %u, gid %u: that user must be able to open "
	               "the file and search every directory above it)",
	               u.name, (unsigned)u.uid, (unsigned)u.gid);
}

/*
 * Powers off and forgets what a failed start left of the workspace's domain (running, or paused
 * half-way through libvirt's start), over a connection of its own: the start's may be the thing
 * that broke. The caller holds the workspace lock.
 */
static void start_undo(struct daemon_ctx *d, const char *name, const char *why)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	struct slate_error err = {0};
	struct vm_stop_result sr;
	enum vm_state state;
	int r;

	if (vm_connect(d->libvirt_uri, &conn) < 0 || vm_workspace_state(conn, name, &state) < 0) {
		log_ws(LOG_WARNING, name, "cannot ask libvirt what the failed start of %s left: %s",
		       name, vm_last_error());
		return;
	}
	if (state == VM_STATE_RUNNING || state == VM_STATE_PAUSED) {
		log_ws(LOG_NOTICE, name, "start %s failed (%s): powering off the %s domain it left",
		       name, why, state == VM_STATE_PAUSED ? "paused" : "running");
		if (d->channels)
			channels_detach(d->channels, name);
		r = vm_stop(conn, name, VM_STOP_FORCE, VM_DEFAULT_STOP_TIMEOUT_S, NULL, NULL, &sr,
		            &err);
		if (r < 0 && r != -EALREADY && r != -ENOTCONN && r != -ENOENT)
			log_ws(LOG_WARNING, name, "cannot power %s off: %s", name,
			       why_failed(&err, r));
	}
	(void)vm_domain_forget(d->libvirt_uri, name, false);
}

/* One start, from the lock to the proven-boot checkpoint: each step below fills its part. */
struct start_run {
	struct daemon_ctx *d;
	const char *name;
	const struct daemon_start_opts *op;
	struct start_io *s;
	int lock_fd;
	struct workspace *w;
	struct image_info *img;
	virConnectPtr conn;
	enum vm_state state; /* before the start */
	char *template, *origin;
	struct boot_paths p;
	char domain[128];
	struct vm_config c;
	struct vm_boot_result br;
	char *channel_sock;
	double proof_s;
	struct checkpoint_info cp;
	double pause_ms;
	bool admitted; /* holds a slot of the host's limits (daemon/limits.h) */
	bool fresh;    /* the disk was a fresh clone of the base: the guest gets its identity */
	bool snapshot_missing; /* one could have been restored, but there was none */
	bool identity_done;    /* the guest took the workspace's identity (restored) */
	char snapshot[SNAPSHOT_KEY_LEN + 1];
};

static void start_run_done(struct start_run *st)
{
	/* Booted, the domain counts itself; failed, it takes no slot. */
	if (st->admitted) {
		char dom[128];
		(void)vm_domain_name(st->name, dom, sizeof(dom));
		daemon_limits_release(st->d, dom);
	}
	(void)safe_close(st->lock_fd);
	workspace_free(st->w);
	image_info_free(st->img);
	if (st->conn)
		(void)virConnectClose(st->conn);
	free(st->template);
	free(st->origin);
	boot_paths_free(&st->p);
	free(st->channel_sock);
	free(st->cp.note);
}

/* A domain that runs (or is paused) already keeps its disks, shares and virtiofsd. */
static bool start_was_running(const struct start_run *st)
{
	return st->state == VM_STATE_RUNNING || st->state == VM_STATE_PAUSED;
}

static bool start_was_stopped(const struct start_run *st)
{
	return st->state == VM_STATE_UNDEFINED || st->state == VM_STATE_STOPPED;
}

/* Locks the workspace and loads it; a quarantined one may not start. */
static int start_lock_load(struct start_run *st)
{
	const char *name = st->name;
	int r;

	r = workspace_lock(st->d->workspaces, name, &st->lock_fd);
	if (r < 0)
		return slate_error_errno(st->s->err, r, "start %s: cannot lock", name);
	r = workspace_load(st->d->workspaces, name, &st->w);
	if (r < 0)
		return slate_error_set(st->s->err, r, "start %s: %s", name,
		                       r == -ENOENT ? "the workspace is gone" : slate_strerror(r));
	/* Wiped (no disk.img, no home.img): the fresh ones made below end the quarantine. */
	if (workspace_quarantined(st->w))
		return slate_error_set(
		        st->s->err, SLATE_ERR_COMPROMISED,
		        "workspace '%s' is compromised (a placeholder was sent to %s): it may not "
		        "start until its disk and home are wiped: 'slate wipe %s' (or 'slate "
		        "reset' "
		        "and 'slate wipe-home'); settings, secrets and shares are kept",
		        name,
		        st->w->compromised_host ? st->w->compromised_host
		                                : "a host it is not bound to",
		        name);
	return 0;
}

/* Connects to libvirt and asks what state the workspace's domain is in. */
static int start_ask_libvirt(struct start_run *st)
{
	int r;

	r = vm_connect(st->d->libvirt_uri, &st->conn);
	if (r < 0)
		return slate_error_set(st->s->err, SLATE_ERR_LIBVIRT,
		                       "start %s: cannot connect to %s: %s", st->name,
		                       st->d->libvirt_uri, vm_last_error());
	r = vm_workspace_state(st->conn, st->name, &st->state);
	if (r < 0)
		return slate_error_set(st->s->err, SLATE_ERR_LIBVIRT,
		                       "start %s: cannot ask libvirt: %s", st->name,
		                       vm_last_error());
	return 0;
}

static bool start_io_gone(void *userdata)
{
	const struct start_io *s = userdata;

	return s->gone && s->gone(s->userdata);
}

/* A domain that does not run yet takes a slot of the host's limits (max-running,
 * memory-budget), or waits for one, or is refused (daemon/limits.h). */
static int start_admit(struct start_run *st)
{
	char dom[128];
	int r;

	if (start_was_running(st))
		return 0;
	(void)vm_domain_name(st->name, dom, sizeof(dom));
	r = daemon_limits_admit(st->d, st->name, dom, st->w->memory_mib, start_progress, st->s,
	                        start_io_gone, st->s->err);
	if (r < 0)
		return slate_error_wrap(st->s->err, r, "start %s", st->name);
	st->admitted = true;
	return 0;
}

/*
 * Base drift: a stopped workspace whose disk was cloned from an older version of its image is
 * reset (--reset-to-base), kept (--as-is) or refused; a suspended one cannot be reset.
 */
static int start_base_drift(struct start_run *st)
{
	const struct workspace *w = st->w;
	const char *name = st->name;
	bool drift;
	int r;

	r = image_store_get(st->d->storage, w->image_id, &st->img);
	if (r < 0)
		return slate_error_set(
		        st->s->err, r,
		        "start %s: image '%s' is not installed ('slate image ls'): %s", name,
		        w->image_id, slate_strerror(r));
	drift = w->disk_present && st->img->version != w->base_version;
	if (start_was_stopped(st)) {
		if (drift && st->op->reset_to_base) {
			start_progress("resetting",
			               "discarding disk.img for a fresh clone of the base", st->s);
			r = workspace_reset(st->d->workspaces, name);
			if (r < 0)
				return slate_error_set(st->s->err, r, "start %s: reset: %s", name,
				                       slate_strerror(r));
		} else if (drift && !st->op->as_is) {
			return slate_error_set(
			        st->s->err, SLATE_ERR_BASE_DRIFT,
			        "workspace '%s' was cloned from version %lld of image '%s', which "
			        "is "
			        "now at version %lld: start it with --reset-to-base (a fresh "
			        "system "
			        "disk from the new base; home is kept) or --as-is (keep its disk)",
			        name, (long long)w->base_version, w->image_id,
			        (long long)st->img->version);
		} else if (drift) {
			char msg[256];
			(void)snprintf(msg, sizeof(msg),
			               "keeping disk.img from image version %lld (now %lld)",
			               (long long)w->base_version, (long long)st->img->version);
			start_progress("base-drift", msg, st->s);
		}
	} else if (st->op->reset_to_base && st->state == VM_STATE_SUSPENDED) {
		return slate_error_set(
		        st->s->err, -EBUSY,
		        "start %s: it is suspended with memory that uses its current disk; "
		        "'slate stop --force %s' discards that first",
		        name, name);
	}
	return 0;
}

/* A stopped workspace's disks: made when missing (a wiped workspace starts afresh), then the
 * workspace loaded again. */
static int start_prepare_disks(struct start_run *st)
{
	const char *name = st->name;
	bool was_compromised = st->w->compromised;
	char compromised_host[256];
	int r;

	(void)snprintf(compromised_host, sizeof(compromised_host), "%s",
	               st->w->compromised_host ? st->w->compromised_host : "");
	start_progress("preparing", "disk.img and home.img", st->s);
	r = workspace_prepare(st->d->workspaces, name);
	if (r < 0)
		return slate_error_set(st->s->err, r, "start %s: preparing its disks: %s", name,
		                       slate_strerror(r));
	workspace_free(TAKE_PTR(st->w));
	r = workspace_load(st->d->workspaces, name, &st->w);
	if (r < 0)
		return slate_error_set(st->s->err, r, "start %s: %s", name, slate_strerror(r));
	if (was_compromised && !st->w->compromised)
		log_ws(LOG_NOTICE, name,
		       "workspace %s was wiped after a leak to %s: fresh disk and home, "
		       "allowed to start again",
		       name, compromised_host[0] ? compromised_host : "?");
	return 0;
}

/*
 * The domain template and the files the domain is made of: the workspace's disks, the runtime
 * directory with the console log and the channel socket, the image's kernel. Checks first that
 * QEMU can reach the workspace directory.
 */
static int start_boot_paths(struct start_run *st)
{
	struct daemon_ctx *d = st->d;
	struct boot_paths *p = &st->p;
	const char *name = st->name;
	char detail[4096] = "";
	int r;

	r = vm_template_load(NULL, &st->template, &st->origin);
	if (r < 0)
		return slate_error_set(st->s->err, r,
		                       "start %s: cannot read the domain template %s/libvirt-xml/"
		                       "domain.xml: %s",
		                       name, SLATE_SYSCONF_DIR, slate_strerror(r));
	(void)vm_domain_name(name, st->domain, sizeof(st->domain));
	p->ws_dir = workspace_dir_path(d->workspaces, name);
	r = daemon_runtime_dir(d, name, &p->run_dir);
	if (r < 0 || !p->ws_dir)
		return slate_error_errno(st->s->err, r < 0 ? r : -ENOMEM,
		                         "start %s: runtime directory", name);
	r = fs_make_traversable(storage_state_path(d->storage), p->ws_dir);
	if (r < 0)
		log_ws(LOG_WARNING, name, "cannot make %s traversable for QEMU: %s", p->ws_dir,
		       slate_strerror(r));
	/* Above the state directory slated changes nothing: say what blocks QEMU there, before
	 * QEMU says only "Permission denied". A QEMU that runs already has its files open. */
	r = start_was_running(st) ? 0
	                          : daemon_check_qemu_access(d, p->ws_dir, detail, sizeof(detail));
	if (r > 0)
		return slate_error_set(st->s->err, -EACCES, "start %s: %s", name, detail);
	p->disk = fs_path_join(p->ws_dir, "disk.img");
	p->home = fs_path_join(p->ws_dir, "home.img");
	p->log = fs_path_join(p->run_dir, "console.log");
	p->sock = fs_path_join(p->run_dir, "channel.sock");
	if (st->img->kernel_boot) {
		_cleanup_free_ char *idir =
		        fs_path_join(storage_images_path(d->storage), st->img->id);
		p->kernel = idir ? fs_path_join(idir, "vmlinuz") : NULL;
		p->initrd = idir ? fs_path_join(idir, "initrd.img") : NULL;
		p->cmdline = vm_kernel_cmdline(st->img->cmdline);
	}
	if (!p->disk || !p->home || !p->log || !p->sock ||
	    (st->img->kernel_boot && (!p->kernel || !p->initrd || !p->cmdline)))
		return -ENOMEM;
	return 0;
}

/*
 * Each share's virtiofsd, through slated-helper, with its directory checked again. A domain that
 * runs (or is paused) keeps the virtiofsd it has; otherwise what a domain that went left behind
 * goes first. A share refused stops the start, and what was served for it goes.
 */
static int start_serve_shares(struct start_run *st)
{
	const struct workspace *w = st->w;
	struct boot_paths *p = &st->p;
	bool running = start_was_running(st);
	int r;

	if (!running && w->n_shares > 0)
		shares_release(st->d, st->name);
	for (size_t i = 0; i < w->n_shares && i < VM_MAX_SHARES; i++) {
		const struct workspace_share *sh = &w->shares[i];
		uid_t expect = sh->uid != (uid_t)-1 ? sh->uid
		               : w->owner != 0      ? w->owner
		                                    : (uid_t)-1;
		struct slate_error e = {0};

		(void)snprintf(p->tags[i], sizeof(p->tags[i]), "share%zu", i);
		if (running) {
			p->fs_sock[i] = shares_path(p->run_dir, p->tags[i], ".sock");
			r = 0;
		} else
			r = shares_serve(st->d, p->run_dir, p->tags[i], sh, expect, &p->fs_sock[i],
			                 &e);
		if (r >= 0 && !p->fs_sock[i])
			r = -ENOMEM;
		if (r < 0) {
			shares_release(st->d, st->name);
			return slate_error_set(st->s->err,
			                       r == -ELOOP || r == -EPERM || r == -ENOTDIR ||
			                                       r == -ENOENT
			                               ? SLATE_ERR_SHARE
			                               : r,
			                       "start %s: %s", st->name, why_failed(&e, r));
		}
		p->shares[i] = (struct vm_share){
		        .socket = p->fs_sock[i], .tag = p->tags[i], .readonly = sh->readonly};
	}
	return 0;
}

/* The domain's settings: the workspace's, the paths above, and what the host can do. */
static void start_vm_config(struct start_run *st)
{
	const struct workspace *w = st->w;
	const struct boot_paths *p = &st->p;

	st->c = (struct vm_config){
	        .domain_name = st->domain,
	        .uuid = w->uuid,
	        .workspace = st->name,
	        .owner = w->owner,
	        .image_id = w->image_id,
	        .base_version = w->base_version,
	        .mac = w->mac,
	        .memory_mib = w->memory_mib,
	        .cpus = w->cpus,
	        .kvm = vm_kvm_usable(st->d->libvirt_uri) > 0,
	        .disk = p->disk,
	        .disk_format = storage_get_kind(st->d->storage) == STORAGE_QCOW2 ? "qcow2" : NULL,
	        .home = p->home,
	        .disk_io = vm_disk_io(),
	        .kernel = p->kernel,
	        .initrd = p->initrd,
	        .cmdline = p->cmdline,
	        .console_log = p->log,
	        .channel_socket = p->sock,
	        .vsock = vm_vsock_usable(),
	        .shares = p->shares,
	        .n_shares = w->n_shares < VM_MAX_SHARES ? w->n_shares : VM_MAX_SHARES,
	};
}

/* Defines and boots the domain (or resumes it); a failed boot leaves nothing behind. */
static int start_boot(struct start_run *st)
{
	struct daemon_ctx *d = st->d;
	const char *name = st->name;
	struct slate_error e = {0};
	int r;

	log_ws(LOG_DEBUG, name, "starting %s from template %s", st->domain, st->origin);
	r = vm_boot(st->conn, st->template, &st->c, st->op->timeout_s, start_progress, st->s,
	            &st->br, &e);
	st->channel_sock = TAKE_PTR(st->p.sock);
	if (r < 0) {
		/* A failed boot (a libvirt connection lost mid-start, say) leaves nothing behind. */
		if (start_was_stopped(st) && r != -EEXIST) {
			start_undo(d, name, why_failed(&e, r));
			shares_release(d, name);
		}
		explain_denied(d, e.msg, sizeof(e.msg));
		return slate_error_set(st->s->err, r, "start %s: %s", name, why_failed(&e, r));
	}
	st->s->booted = !st->br.already_running && !st->br.resumed;
	st->w->last_used = time(NULL);
	if (st->s->booted)
		st->w->disk_fresh = false;
	r = workspace_save(d->workspaces, st->w);
	if (r < 0)
		log_ws(LOG_WARNING, name, "cannot record last use: %s", slate_strerror(r));
	if (!st->br.already_running)
		log_ws(LOG_INFO, name, "%s %s (%s) in %.1f s",
		       st->br.resumed ? "resumed" : "booted", st->domain, vm_accel_name(st->br.kvm),
		       st->br.boot_s);
	return 0;
}

/* After a restore that failed, disk.img is the snapshot's: a pristine clone of the base again,
 * for the cold boot that follows. */
static int start_repristine(struct start_run *st)
{
	_cleanup_close_ int fd = open(st->p.ws_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r;

	if (fd < 0 || (unlinkat(fd, "disk.img", 0) < 0 && errno != ENOENT))
		return -errno;
	r = workspace_prepare(st->d->workspaces, st->name);
	if (r < 0)
		return slate_error_set(st->s->err, r,
		                       "start %s: a fresh disk after the failed "
		                       "restore: %s",
		                       st->name, slate_strerror(r));
	return 0;
}

/* The restored domain has not run yet: its channel is attached now, so that slated's HELLO
 * waits in the port for the guest's first look. */
static void restore_attach(void *userdata)
{
	struct start_run *st = userdata;

	if (st->d->channels)
		(void)channels_attach(st->d->channels, st->name, st->p.sock);
}

/*
 * A fresh workspace starts from its image's booted snapshot when there is one (daemon/snapshot.h):
 * 1 when restored, 0 when it must boot (why logged once), < 0 on an error that stops the start.
 */
static int start_restore(struct start_run *st)
{
	struct daemon_ctx *d = st->d;
	const char *name = st->name, *why = NULL;
	_cleanup_free_ char *xml = NULL, *save = NULL;
	struct slate_error e = {0};
	struct stat hs;
	int r;

	if (!start_was_stopped(st))
		return 0;
	if (st->op->cold)
		why = "--cold";
	else
		(void)daemon_snapshot_usable(d, st->w, &why);
	if (why) {
		log_ws(LOG_DEBUG, name, "start %s: booting, not restoring: %s", name, why);
		return 0;
	}
	save = fs_path_join(st->p.ws_dir, "restore.sav");
	if (!save || stat(st->p.home, &hs) < 0)
		return -ENOMEM;
	r = daemon_snapshot_prepare(d, st->img, &st->c, st->template, save, &xml, st->snapshot, &e);
	if (r == -ENOENT) {
		log_ws(LOG_DEBUG, name, "start %s: no booted snapshot %s yet: booting", name,
		       st->snapshot);
		st->snapshot_missing = true;
		return 0;
	}
	if (r < 0) {
		log_ws(LOG_NOTICE, name, "start %s: booting cold: %s", name, why_failed(&e, r));
		return 0;
	}
	start_progress("restoring", "the image's booted snapshot", st->s);
	r = vm_restore(st->conn, &st->c, save, xml, (uint64_t)hs.st_size, restore_attach, st,
	               &st->br, &e);
	(void)unlink(save);
	if (r < 0) {
		log_ws(LOG_NOTICE, name, "start %s: booting cold: restoring snapshot %s failed: %s",
		       name, st->snapshot, why_failed(&e, r));
		r = start_repristine(st);
		return r < 0 ? r : 0;
	}
	/* The guest has the snapshot's identity (and no home) until slate-guest takes the
	 * workspace's; one that cannot goes, and the workspace boots instead. (The channel was
	 * attached while the domain was paused: restore_attach.) */
	start_progress("identity", "entropy, clock, home, hostname, machine-id", st->s);
	r = daemon_guest_identity(d, name, RESTORE_IDENTITY_TIMEOUT_S * 1000, &e);
	if (r < 0) {
		log_ws(LOG_NOTICE, name,
		       "start %s: booting cold: the guest restored from snapshot %s "
		       "did not take its identity: %s",
		       name, st->snapshot, why_failed(&e, r));
		start_undo(d, name, "no identity");
		if (d->channels)
			channels_detach(d->channels, name);
		st->br = (struct vm_boot_result){0};
		r = start_repristine(st);
		return r < 0 ? r : 0;
	}
	st->identity_done = true;
	st->channel_sock = TAKE_PTR(st->p.sock);
	st->s->booted = true;
	st->w->last_used = time(NULL);
	st->w->disk_fresh = false;
	r = workspace_save(d->workspaces, st->w);
	if (r < 0)
		log_ws(LOG_WARNING, name, "cannot record last use: %s", slate_strerror(r));
	log_ws(LOG_INFO, name, "restored %s from booted snapshot %s (%s) in %.2f s", st->domain,
	       st->snapshot, vm_accel_name(st->br.kvm), st->br.boot_s);
	return 1;
}

/* The guest is up when a shell on a terminal runs a command, not when it says so. */
static int start_prove(struct start_run *st)
{
	struct daemon_ctx *d = st->d;
	const char *name = st->name;
	unsigned timeout_s = st->op->timeout_s ? st->op->timeout_s : PROOF_TIMEOUT_S;
	struct slate_error e = {0};
	double t0;
	int r;

	if (!st->c.vsock && d->channels)
		(void)channels_attach(d->channels, name, st->channel_sock);
	/* A fresh disk's first cold boot gives the guest its own identity too (a restored guest
	 * took it already); an image whose slate-guest cannot boots without. */
	if (st->fresh && st->s->booted && !st->identity_done) {
		start_progress("identity", "entropy, clock, hostname, machine-id", st->s);
		r = daemon_guest_identity(d, name, timeout_s * 1000, &e);
		if (r < 0)
			log_ws(LOG_WARNING, name, "start %s: no identity for the guest: %s", name,
			       why_failed(&e, r));
		e = (struct slate_error){0};
	}
	start_progress("proving", "a login shell on a terminal runs a command", st->s);
	t0 = time_mono_s();
	r = exec_terminal_proof(d, name, timeout_s * 1000, &e);
	if (r < 0)
		return slate_error_set(
		        st->s->err, r,
		        "start %s: the guest booted but its terminal proof failed: %s; "
		        "it still runs: 'slate console %s' to look, 'slate stop --force "
		        "%s' to stop it",
		        name, why_failed(&e, r), name, name);
	st->proof_s = time_mono_s() - t0;
	return 0;
}

/*
 * After a boot (not a resume): the shares mounted in the guest, the guest provisioned, and the
 * proven-boot checkpoint taken (a start without one still succeeds).
 */
static int start_setup_guest(struct start_run *st)
{
	struct daemon_ctx *d = st->d;
	const char *name = st->name;
	struct slate_error e = {0};
	int r;

	if (st->br.resumed || st->br.already_running)
		return 0;
	if (st->w->n_shares > 0) {
		start_progress("sharing", "mounting the shared host folders", st->s);
		r = shares_mount(d, st->w, &e);
		if (r < 0)
			return slate_error_set(st->s->err, r,
			                       "start %s: mounting its shares in the guest: %s",
			                       name, why_failed(&e, r));
	}
	start_progress("provisioning", "placeholders and the egress CA", st->s);
	r = daemon_provision(d, st->w, &e);
	if (r < 0)
		return slate_error_set(st->s->err, r, "start %s: provisioning the guest: %s", name,
		                       why_failed(&e, r));
	r = proven_checkpoint(d, st->conn, name, &st->cp, &st->pause_ms);
	if (r < 0)
		log_ws(LOG_WARNING, name, "no proven-boot checkpoint of %s: %s", name,
		       slate_strerror(r));
	else
		log_ws(LOG_INFO, name, "proven-boot checkpoint %s of %s (paused %.1f ms)",
		       st->cp.id, name, st->pause_ms);
	return 0;
}

static void start_report(const struct start_run *st, struct daemon_started *ret)
{
	*ret = (struct daemon_started){.kvm = st->c.kvm,
	                               .resumed = st->br.resumed,
	                               .restored = st->br.restored,
	                               .already_running = st->br.already_running,
	                               .boot_s = st->br.boot_s,
	                               .proof_s = st->proof_s,
	                               .checkpoint_pause_ms = st->pause_ms};
	(void)snprintf(ret->domain, sizeof(ret->domain), "%s", st->domain);
	(void)snprintf(ret->disk_io, sizeof(ret->disk_io), "%s", st->br.disk_io);
	(void)snprintf(ret->checkpoint, sizeof(ret->checkpoint), "%s", st->cp.id);
	if (st->br.restored)
		(void)snprintf(ret->snapshot, sizeof(ret->snapshot), "%s", st->snapshot);
}

/* The steps of a start, in order; the workspace stays locked until the last is done. */
static int do_start(struct daemon_ctx *d, const char *name, const struct daemon_start_opts *op,
                    struct start_io *s, struct daemon_started *ret)
{
	_cleanup_(start_run_done) struct start_run st = {
	        .d = d, .name = name, .op = op, .s = s, .lock_fd = -1};
	int r;

	r = start_lock_load(&st);
	if (r >= 0)
		r = start_ask_libvirt(&st);
	if (r >= 0)
		r = start_admit(&st);
	if (r >= 0)
		r = start_base_drift(&st);
	if (r >= 0 && start_was_stopped(&st))
		r = start_prepare_disks(&st);
	if (r >= 0)
		st.fresh = start_was_stopped(&st) && st.w->disk_fresh;
	if (r >= 0)
		r = start_boot_paths(&st);
	if (r >= 0)
		r = start_serve_shares(&st);
	if (r < 0)
		return r;
	start_vm_config(&st);
	r = start_restore(&st);
	if (r == 0)
		r = start_boot(&st);
	if (r >= 0)
		r = start_prove(&st);
	if (r >= 0)
		r = start_setup_guest(&st);
	if (r < 0)
		return r;
	if (st.snapshot_missing && d->boot_snapshots == SNAPSHOT_AUTO)
		daemon_snapshot_make_later(d, st.w->image_id, st.w->memory_mib, st.w->cpus);
	if (ret)
		start_report(&st, ret);
	return 0;
}

/*
 * After a start whose client went away: nobody reads the error or acts on it, so the start must
 * not leave a half state. One that failed after it booted the domain is undone (powered off and
 * forgotten, as if never started); one that succeeded must leave the guest running, not paused
 * (a checkpoint's resume that failed is tried again). A start that failed before it booted left
 * nothing to undo.
 */
static void start_settle_orphan(struct daemon_ctx *d, const char *name, const struct start_io *io,
                                int start_r)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int lock_fd = -1;
	enum vm_state state;

	if (start_r < 0 && !io->booted)
		return;
	if (workspace_lock(d->workspaces, name, &lock_fd) < 0)
		return;
	if (start_r < 0) {
		/* start_undo() asks libvirt over a connection of its own. */
		log_ws(LOG_NOTICE, name, "start %s failed after its client went away", name);
		start_undo(d, name, slate_error_text(io->err));
		shares_release(d, name);
		return;
	}
	/* Paused by the leak detector is paused on purpose. */
	if (vm_connect(d->libvirt_uri, &conn) < 0 || vm_workspace_state(conn, name, &state) < 0 ||
	    state != VM_STATE_PAUSED || workspace_load(d->workspaces, name, &w) < 0 ||
	    workspace_quarantined(w))
		return;
	if (vm_domain_lookup(conn, name, &dom) < 0 || virDomainResume(dom) < 0)
		log_ws(LOG_WARNING, name, "%s is paused after its start and cannot resume: %s",
		       name, vm_last_error());
	else
		log_ws(LOG_NOTICE, name, "resumed %s, found paused after its start", name);
}

int daemon_start(struct daemon_ctx *d, const char *name, const struct daemon_start_opts *opts,
                 vm_progress_fn progress, void *userdata, bool (*gone)(void *userdata),
                 struct daemon_started *ret, struct slate_error *err)
{
	static const struct daemon_start_opts none;
	struct slate_error own = {0};
	struct start_io io = {
	        .progress = progress, .userdata = userdata, .gone = gone, .err = err ? err : &own};
	int r;

	if (workspace_name_check(name) < 0)
		return slate_error_set(err, -EINVAL, "start: invalid workspace name");
	io.err->code = 0;
	io.err->msg[0] = '\0';
	r = do_start(d, name, opts ? opts : &none, &io, ret);
	if (r < 0 && !io.err->msg[0])
		(void)slate_error_errno(io.err, r, "start %s", name);
	/* A start whose client went away must not leave a half state (start_settle_orphan). */
	if (gone && gone(userdata))
		start_settle_orphan(d, name, &io, r);
	return r;
}

int daemon_destroy_and_delete(struct daemon_ctx *d, const char *name, struct slate_error *err)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_close_ int lock_fd = -1;
	struct vm_stop_result sr;
	int r;

	r = workspace_lock(d->workspaces, name, &lock_fd);
	if (r < 0)
		return slate_error_errno(err, r, "cannot lock it");
	if (d->channels)
		channels_detach(d->channels, name);
	r = vm_connect(d->libvirt_uri, &conn);
	if (r < 0)
		return slate_error_set(err, r, "cannot connect to %s: %s", d->libvirt_uri,
		                       vm_last_error());
	r = vm_stop(conn, name, VM_STOP_FORCE, VM_DEFAULT_STOP_TIMEOUT_S, NULL, NULL, &sr, err);
	if (r < 0 && r != -EALREADY && r != -ENOTCONN && r != -ENOENT)
		return r;
	(void)vm_domain_forget(d->libvirt_uri, name, true);
	shares_release(d, name);
	r = workspace_delete(d->workspaces, name);
	if (r < 0)
		return slate_error_errno(err, r, "deleting");
	daemon_runtime_dir_remove(d, name);
	return r;
}

/*
 * An orderly shutdown asked through the guest agent: images without an ACPI daemon (the test
 * image's busybox init) ignore the power button. systemd guests get `systemctl poweroff`; others
 * a sync and an immediate power-off. The command's end is not awaited (the agent goes with the
 * guest); vm_stop's ACPI request and wait follow either way.
 */
static bool guest_poweroff(struct daemon_ctx *d, const char *name)
{
	static const char script[] = "if [ -d /run/systemd/system ]; then systemctl --no-block "
	                             "poweroff; else sync; (sleep 0.2; poweroff -f) & fi";
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	struct slate_error err = {0};
	struct channel_info ci;
	char out[256];
	int status;

	if (!req || !d->channels || channels_info(d->channels, name, &ci) < 0 || !ci.ready)
		return false;
	req->args[req->n_args++] = (struct ex_str){"sh", 2};
	req->args[req->n_args++] = (struct ex_str){"-c", 2};
	req->args[req->n_args++] = (struct ex_str){script, (uint32_t)strlen(script)};
	req->user = (struct ex_str){"root", 4};
	if (exec_collect(d, name, req, NULL, 3000, out, sizeof(out), &status, &err) < 0)
		log_ws(LOG_DEBUG, name, "power-off through the guest agent: %s",
		       slate_error_text(&err));
	return true;
}

int daemon_stop(struct daemon_ctx *d, const char *name, const struct daemon_stop_opts *opts,
                vm_progress_fn progress, void *userdata, struct daemon_stopped *ret,
                struct slate_error *err)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_close_ int lock_fd = -1;
	enum vm_stop_mode mode = opts->force     ? VM_STOP_FORCE
	                         : opts->suspend ? VM_STOP_SUSPEND
	                                         : VM_STOP_SHUTDOWN;
	struct slate_error e = {0};
	struct vm_stop_result sr;
	enum vm_state state;
	bool asked;
	int r;

	r = workspace_lock(d->workspaces, name, &lock_fd);
	if (r < 0)
		return slate_error_errno(err, r, "stop %s: cannot lock", name);
	r = vm_connect(d->libvirt_uri, &conn);
	if (r < 0)
		return slate_error_set(err, SLATE_ERR_LIBVIRT, "stop %s: cannot connect to %s: %s",
		                       name, d->libvirt_uri, vm_last_error());
	/* A paused guest cannot power itself off, and a quarantined one must not run another
	 * instruction: both are powered off at once, whatever was asked. */
	if (mode != VM_STOP_FORCE && vm_workspace_state(conn, name, &state) >= 0 &&
	    workspace_load(d->workspaces, name, &w) >= 0 &&
	    (state == VM_STATE_PAUSED || workspace_quarantined(w))) {
		if (progress)
			progress("destroying",
			         workspace_quarantined(w) ? "compromised: powering off at once"
			                                  : "paused: powering off at once",
			         userdata);
		mode = VM_STOP_FORCE;
	}
	workspace_free(TAKE_PTR(w));
	asked = mode == VM_STOP_SHUTDOWN && guest_poweroff(d, name);
	r = vm_stop(conn, name, mode, opts->timeout_s, progress, userdata, &sr, &e);
	if (r >= 0 && asked)
		sr.was_running = true; /* it went before vm_stop looked */
	if (r >= 0 && mode != VM_STOP_SUSPEND)
		shares_release(d, name);
	if (r < 0)
		return slate_error_set(err, r, "stop %s: %s", name, why_failed(&e, r));
	if (vm_workspace_state(conn, name, &state) < 0)
		state = VM_STATE_STOPPED;
	if (workspace_load(d->workspaces, name, &w) >= 0) {
		w->last_used = time(NULL);
		(void)workspace_save(d->workspaces, w);
	}
	if (sr.was_running)
		log_ws(LOG_INFO, name, "%s %s in %.1f s",
		       mode == VM_STOP_SUSPEND ? "suspended"
		       : sr.destroyed          ? "destroyed"
		                               : "shut down",
		       name, sr.stop_s);
	*ret = (struct daemon_stopped){.state = state,
	                               .was_running = sr.was_running,
	                               .destroyed = sr.destroyed,
	                               .stop_s = sr.stop_s};
	return 0;
}

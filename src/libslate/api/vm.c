/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * /v1/workspaces/:name/{start,stop,console}: a workspace's virtual machine. Blocking libvirt work
 * runs in stream workers; the daemon-side parts (picking up running domains when slated starts,
 * domain events, the doctor's domain check) live here too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api/exec.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "channel/channels.h"
#include "helper/client.h"
#include "image/store.h"
#include "storage/storage.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "vm/domain.h"
#include "vm/events.h"
#include "vm/kvm.h"
#include "vm/lifecycle.h"
#include "vm/qemu-user.h"
#include "vm/virtiofs.h"
#include "vm/xml.h"
#include "workspace/workspace.h"

#define API_ERR_COMPROMISED "compromised"
#define API_ERR_BASE_DRIFT "base_drift"

struct vm_op {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
	uid_t uid;
	bool reset_to_base, as_is;
	bool force, suspend;
	unsigned timeout_s;
};

_printf_(3, 4) static int stream_fail(struct api_stream *s, const char *code, const char *fmt, ...)
{
	char msg[4096];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)api_stream_error(s, code, msg);
	return -EIO;
}

static void progress(const char *step, const char *detail, void *userdata)
{
	struct api_stream *s = userdata;
	struct json_object *o = json_object_new_object();

	if (!o || json_add_string(o, "step", step) < 0 ||
	    json_add_string(o, "detail", detail ? detail : "") < 0) {
		json_object_put(o);
		return;
	}
	/* A client that left does not stop the operation: it finishes, unobserved. */
	(void)api_stream_progress(s, o);
}

static int runtime_dir_for(const struct daemon_ctx *d, const char *name, char **ret)
{
	_cleanup_free_ char *vm = fs_path_join(d->runtime_dir, "vm");
	char *dir;
	int r;

	if (!vm)
		return -ENOMEM;
	r = fs_mkdir_p(vm, 0711);
	if (r < 0)
		return r;
	dir = fs_path_join(vm, name);
	if (!dir)
		return -ENOMEM;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		free(dir);
		return r;
	}
	*ret = dir;
	return 0;
}

/* The kernel command line: the image's, with the root disk named when the image did not. */
static char *make_cmdline(const char *image_cmdline)
{
	const char *base = image_cmdline && *image_cmdline ? image_cmdline : "console=ttyS0";
	char *out = NULL;

	if (strstr(base, "root="))
		return strdup(base);
	if (asprintf(&out, "%s root=/dev/vda rw", base) < 0)
		return NULL;
	return out;
}

/*
 * Shares: one virtiofsd per share, run as the share's owner over the directory opened afresh at
 * every start without following a symlink (vm/virtiofs.h). QEMU reaches it through
 * <run_dir>/fs-<tag>.sock, a socket slated binds and hands over; <run_dir>/fs-<tag>.pid says
 * which process serves it ("<pid> <start time>"), for stopping it when the domain does not come
 * up or is gone. virtiofsd also exits by itself when QEMU disconnects.
 */
static int share_socket(const struct daemon_ctx *d, const char *path, int *ret_fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;
	struct vm_qemu_user u;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	(void)unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	/* Only QEMU's user may connect (slated, as root, needs no mode bits); it reaches the
	 * socket through the workspace's runtime directory, which its group may search. */
	if (vm_qemu_user_load(d->libvirt_uri, NULL, &u) == 1) {
		_cleanup_free_ char *dir = strdup(path);
		char *slash = dir ? strrchr(dir, '/') : NULL;

		if (!slash)
			return -ENOMEM;
		*slash = '\0';
		if (chown(path, u.uid, u.gid) < 0 || chown(dir, 0, u.gid) < 0 ||
		    chmod(dir, 0710) < 0)
			return -errno;
	}
	if (chmod(path, 0600) < 0 || listen(fd, 1) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/* The share's owner's primary group, or the directory's group when the owner has no entry. */
static gid_t owner_gid(uid_t uid, gid_t dir_gid)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res)
		return pw.pw_gid;
	return dir_gid;
}

/* <run_dir>/fs-<tag><suffix>: a share's socket (".sock"), pid file (".pid") or log (".log"). */
static char *share_path(const char *run_dir, const char *tag, const char *suffix)
{
	char name[64];

	(void)snprintf(name, sizeof(name), "fs-%s%s", tag, suffix);
	return fs_path_join(run_dir, name);
}

/*
 * Serves share i of w on its socket: checks the directory again (vm/virtiofs.h says how) and
 * starts its virtiofsd. expect_uid is the owner recorded at create.
 */
static int share_start(const struct daemon_ctx *d, const char *run_dir, const char *tag,
                       const struct workspace_share *sh, uid_t expect_uid, char **ret_socket,
                       char *err, size_t errlen)
{
	_cleanup_free_ char *sock = share_path(run_dir, tag, ".sock"),
	                    *pidfile = share_path(run_dir, tag, ".pid"),
	                    *logfile = share_path(run_dir, tag, ".log");
	_cleanup_close_ int dfd = -1, lfd = -1, logfd = -1;
	char line[64];
	uint64_t start = 0;
	struct stat st;
	pid_t pid = 0;
	int r;

	if (!sock || !pidfile || !logfile)
		return -ENOMEM;
	/* slated-helper starts it (helper/client.h): it walks the path again in the host's mount
	 * namespace and checks the owner, then runs virtiofsd as that owner. */
	if (!d->helper)
		return (void)snprintf(
		               err, errlen,
		               "share %s: shares are served through slated-helper, and there "
		               "is none: %s",
		               sh->host_dir, d->helper_error ? d->helper_error : "not started"),
		       -ENOTCONN;
	/* slated's own walk first: the owner to ask for (records made before shares kept their
	 * owner have none) and a clear error before anything starts; the helper walks it again. */
	r = virtiofs_share_open(sh->host_dir, expect_uid, &dfd, err, errlen);
	if (r < 0)
		return r;
	if (fstat(dfd, &st) < 0)
		return -errno;
	r = share_socket(d, sock, &lfd);
	if (r < 0)
		return (void)snprintf(err, errlen, "share %s: socket %s: %s", sh->host_dir, sock,
		                      slate_strerror(r)),
		       r;
	/* Without a log virtiofsd still runs (its stderr goes to /dev/null). */
	logfd = open(logfile, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	r = helper_share_serve(d->helper, sh->host_dir, st.st_uid, owner_gid(st.st_uid, st.st_gid),
	                       sh->readonly, lfd, logfd, &pid, &start, err, errlen);
	if (r < 0)
		return r;
	(void)snprintf(line, sizeof(line), "%d %llu\n", (int)pid, (unsigned long long)start);
	r = fs_write_atomic_at(AT_FDCWD, pidfile, line, strlen(line), 0600);
	if (r < 0) {
		(void)helper_share_stop(d->helper, pid, start);
		return (void)snprintf(err, errlen, "share %s: %s: %s", sh->host_dir, pidfile,
		                      slate_strerror(r)),
		       r;
	}
	*ret_socket = TAKE_PTR(sock);
	return 0;
}

/* Stops the virtiofsd processes of a workspace that still run, and removes their files. */
static void shares_stop(const struct daemon_ctx *d, const char *name)
{
	_cleanup_free_ char *dir = NULL;
	_cleanup_(closedirp) DIR *dp = NULL;
	struct dirent *de;

	if (asprintf(&dir, "%s/vm/%s", d->runtime_dir, name) < 0 || !(dp = opendir(dir)))
		return;
	while ((de = readdir(dp))) {
		_cleanup_(buf_freep) struct buf *b = NULL;
		unsigned long long start = 0;
		size_t n = strlen(de->d_name);
		int pid = 0;
		char sock[80];

		if (strncmp(de->d_name, "fs-", 3) != 0 || n < 8 || n > 60 ||
		    !streq(de->d_name + n - 4, ".pid"))
			continue;
		if (fs_read_file_at(dirfd(dp), de->d_name, 63, &b) >= 0 && buf_len(b) < 64) {
			char line[64];
			memcpy(line, buf_ptr(b), buf_len(b));
			line[buf_len(b)] = '\0';
			if (sscanf(line, "%d %llu", &pid, &start) == 2 && d->helper &&
			    helper_share_stop(d->helper, pid, start) == 0)
				log_ws(LOG_DEBUG, name, "stopped virtiofsd %d (%.*s)", pid,
				       (int)(n - 7), de->d_name + 3);
		}
		(void)unlinkat(dirfd(dp), de->d_name, 0);
		(void)snprintf(sock, sizeof(sock), "%.*s.sock", (int)(n - 4), de->d_name);
		(void)unlinkat(dirfd(dp), sock, 0);
	}
}

/* Read-only bind mounts of shares made by older slated versions, which served shares through
 * libvirt's virtiofsd: unmounted once their domain is gone. */
static void ro_unbind_all(const struct daemon_ctx *d, const char *name)
{
	_cleanup_free_ char *dir = NULL;
	_cleanup_(closedirp) DIR *dp = NULL;
	struct dirent *de;

	if (asprintf(&dir, "%s/vm/%s/ro", d->runtime_dir, name) < 0 || !(dp = opendir(dir)))
		return;
	while ((de = readdir(dp))) {
		_cleanup_free_ char *mp = NULL;
		if (de->d_name[0] == '.' || !(mp = fs_path_join(dir, de->d_name)))
			continue;
		if (umount2(mp, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
			log_ws(LOG_WARNING, name, "cannot unmount %s: %s", mp, strerror(errno));
		(void)rmdir(mp);
	}
}

/* Everything that served a workspace's shares: its virtiofsd processes, old read-only binds. */
static void shares_release(const struct daemon_ctx *d, const char *name)
{
	shares_stop(d, name);
	ro_unbind_all(d, name);
}

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

static double now_s(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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
	p->paused_at = now_s();
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
	p->paused_ms = (now_s() - p->paused_at) * 1000;
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

/*
 * Mounts each share in the guest (as root, over the channel): share<i> at its guest directory,
 * by default ~/<basename> of the workspace user, "-2", "-3"... added to repeated basenames.
 */
static int mount_shares(struct daemon_ctx *d, const struct workspace *w, char *err, size_t errlen)
{
	static const char script[] =
	        "set -e\n"
	        "u=slate; grep -q '^slate:' /etc/passwd ||\n"
	        "  u=$(awk -F: '$3==1000{print $1; exit}' /etc/passwd); [ -n \"$u\" ] || u=root\n"
	        "home=$(awk -F: -v u=$u '$1==u{print $6}' /etc/passwd)\n"
	        "while [ $# -ge 3 ]; do\n"
	        "  tag=$1 dir=$2 ro=$3; shift 3\n"
	        "  case $dir in '~/'*) dir=$home/${dir#'~/'}; new=1 ;; *) new= ;; esac\n"
	        "  if [ ! -d \"$dir\" ]; then mkdir -p \"$dir\"; [ -z \"$new\" ] || chown $u: "
	        "\"$dir\"; fi\n"
	        "  mount -t virtiofs -o $ro,nodev,nosuid \"$tag\" \"$dir\"\n"
	        "done\n";
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	char tags[VM_MAX_SHARES][16], dirs[VM_MAX_SHARES][300], out[4096];
	int status = -1, r;

	if (!req)
		return -ENOMEM;
	req->args[req->n_args++] = (struct ex_str){"sh", 2};
	req->args[req->n_args++] = (struct ex_str){"-c", 2};
	req->args[req->n_args++] = (struct ex_str){script, (uint32_t)strlen(script)};
	req->args[req->n_args++] = (struct ex_str){"slate-mount", 11};
	req->user = (struct ex_str){"root", 4};
	for (size_t i = 0; i < w->n_shares && i < VM_MAX_SHARES; i++) {
		(void)snprintf(tags[i], sizeof(tags[i]), "share%zu", i);
		workspace_share_guest_dir(w, i, dirs[i], sizeof(dirs[i]));
		req->args[req->n_args++] = (struct ex_str){tags[i], (uint32_t)strlen(tags[i])};
		req->args[req->n_args++] = (struct ex_str){dirs[i], (uint32_t)strlen(dirs[i])};
		req->args[req->n_args++] =
		        w->shares[i].readonly ? (struct ex_str){"ro", 2} : (struct ex_str){"rw", 2};
	}
	r = exec_collect(d, w->name, req, NULL, 60000, out, sizeof(out), &status, err, errlen);
	if (r < 0)
		return r;
	if (status != 0) {
		(void)snprintf(err, errlen, "mount exited %d: %.1024s", status, out);
		return -EIO;
	}
	return 0;
}

/* Where a start reports progress and failure: an API stream, or a `slate run` session. */
struct start_io {
	vm_progress_fn progress;
	void *userdata;
	char *code, *msg;
	size_t code_len, msg_len;
	bool booted; /* this start defined and booted the domain */
};

_printf_(3, 4) static int start_fail(struct start_io *s, const char *code, const char *fmt, ...)
{
	va_list ap;

	(void)snprintf(s->code, s->code_len, "%s", code);
	va_start(ap, fmt);
	(void)vsnprintf(s->msg, s->msg_len, fmt, ap);
	va_end(ap);
	return -EIO;
}

static void start_progress(const char *step, const char *detail, void *userdata)
{
	struct start_io *s = userdata;

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
	struct vm_stop_result sr;
	enum vm_state state;
	char err[1024] = "";
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
		            err, sizeof(err));
		if (r < 0 && r != -EALREADY && r != -ENOTCONN && r != -ENOENT)
			log_ws(LOG_WARNING, name, "cannot power %s off: %s", name, err);
	}
	(void)vm_domain_forget(d->libvirt_uri, name, false);
}

static int do_start(struct vm_op *op, struct start_io *s, struct json_object **ret)
{
	struct daemon_ctx *d = op->d;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_(image_info_freep) struct image_info *img = NULL;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_free_ char *template = NULL, *origin = NULL;
	_cleanup_close_ int lock_fd = -1;
	_cleanup_json_ struct json_object *res = NULL;
	struct boot_paths p = {0};
	struct vm_boot_result br;
	struct vm_config c;
	enum vm_state state;
	char domain[128], errbuf[4096] = "";
	const char *name = op->name;
	_cleanup_free_ char *channel_sock = NULL;
	struct checkpoint_info cp = {0};
	double t0, proof_s, pause_ms = 0;
	bool drift, running;
	int r;

	r = workspace_lock(d->workspaces, name, &lock_fd);
	if (r < 0)
		return start_fail(s, API_ERR_FAILED, "start %s: cannot lock: %s", name,
		                  slate_strerror(r));
	r = workspace_load(d->workspaces, name, &w);
	if (r < 0)
		return start_fail(s, r == -ENOENT ? API_ERR_NOT_FOUND : API_ERR_FAILED,
		                  "start %s: %s", name,
		                  r == -ENOENT ? "the workspace is gone" : slate_strerror(r));
	/* Wiped (no disk.img, no home.img): the fresh ones made below end the quarantine. */
	if (workspace_quarantined(w))
		return start_fail(
		        s, API_ERR_COMPROMISED,
		        "workspace '%s' is compromised (a placeholder was sent to %s): it may not "
		        "start until its disk and home are wiped: 'slate wipe %s' (or 'slate "
		        "reset' "
		        "and 'slate wipe-home'); settings, secrets and shares are kept",
		        name,
		        w->compromised_host ? w->compromised_host : "a host it is not bound to",
		        name);
	r = vm_connect(d->libvirt_uri, &conn);
	if (r < 0)
		return start_fail(s, API_ERR_UNAVAILABLE, "start %s: cannot connect to %s: %s",
		                  name, d->libvirt_uri, vm_last_error());
	r = vm_workspace_state(conn, name, &state);
	if (r < 0)
		return start_fail(s, API_ERR_UNAVAILABLE, "start %s: cannot ask libvirt: %s", name,
		                  vm_last_error());

	r = image_store_get(d->storage, w->image_id, &img);
	if (r < 0)
		return start_fail(s, API_ERR_FAILED,
		                  "start %s: image '%s' is not installed ('slate image ls'): %s",
		                  name, w->image_id, slate_strerror(r));
	drift = w->disk_present && img->version != w->base_version;
	if (state == VM_STATE_UNDEFINED || state == VM_STATE_STOPPED) {
		if (drift && op->reset_to_base) {
			start_progress("resetting",
			               "discarding disk.img for a fresh clone of the base", s);
			r = workspace_reset(d->workspaces, name);
			if (r < 0)
				return start_fail(s, API_ERR_FAILED, "start %s: reset: %s", name,
				                  slate_strerror(r));
		} else if (drift && !op->as_is) {
			return start_fail(
			        s, API_ERR_BASE_DRIFT,
			        "workspace '%s' was cloned from version %lld of image '%s', which "
			        "is "
			        "now at version %lld: start it with --reset-to-base (a fresh "
			        "system "
			        "disk from the new base; home is kept) or --as-is (keep its disk)",
			        name, (long long)w->base_version, w->image_id,
			        (long long)img->version);
		} else if (drift) {
			char msg[256];
			(void)snprintf(msg, sizeof(msg),
			               "keeping disk.img from image version %lld (now %lld)",
			               (long long)w->base_version, (long long)img->version);
			start_progress("base-drift", msg, s);
		}
		start_progress("preparing", "disk.img and home.img", s);
		r = workspace_prepare(d->workspaces, name);
		if (r < 0)
			return start_fail(s, r == -ENOSPC ? API_ERR_NO_SPACE : API_ERR_FAILED,
			                  "start %s: preparing its disks: %s", name,
			                  slate_strerror(r));
		workspace_free(TAKE_PTR(w));
		r = workspace_load(d->workspaces, name, &w);
		if (r < 0)
			return start_fail(s, API_ERR_FAILED, "start %s: %s", name,
			                  slate_strerror(r));
		if (w->compromised) {
			log_ws(LOG_NOTICE, name,
			       "workspace %s was wiped after a leak to %s: fresh disk and home, "
			       "allowed to start again",
			       name, w->compromised_host ? w->compromised_host : "?");
			w->compromised = false;
			w->compromised_at = 0;
			free(w->compromised_host);
			w->compromised_host = NULL;
			r = workspace_save(d->workspaces, w);
			if (r < 0)
				return start_fail(s, API_ERR_FAILED, "start %s: %s", name,
				                  slate_strerror(r));
		}
	} else if (op->reset_to_base && state == VM_STATE_SUSPENDED) {
		return start_fail(
		        s, API_ERR_BUSY,
		        "start %s: it is suspended with memory that uses its current disk; "
		        "'slate stop --force %s' discards that first",
		        name, name);
	}

	r = vm_template_load(NULL, &template, &origin);
	if (r < 0)
		return start_fail(s, API_ERR_FAILED,
		                  "start %s: cannot read the domain template %s/libvirt-xml/"
		                  "domain.xml: %s",
		                  name, SLATE_SYSCONF_DIR, slate_strerror(r));
	(void)vm_domain_name(name, domain, sizeof(domain));
	p.ws_dir = workspace_dir_path(d->workspaces, name);
	r = runtime_dir_for(d, name, &p.run_dir);
	if (r < 0 || !p.ws_dir) {
		boot_paths_free(&p);
		return start_fail(s, API_ERR_FAILED, "start %s: runtime directory: %s", name,
		                  slate_strerror(r < 0 ? r : -ENOMEM));
	}
	r = fs_make_traversable(storage_state_path(d->storage), p.ws_dir);
	if (r < 0)
		log_ws(LOG_WARNING, name, "cannot make %s traversable for QEMU: %s", p.ws_dir,
		       slate_strerror(r));
	/* Above the state directory slated changes nothing: say what blocks QEMU there, before
	 * QEMU says only "Permission denied". A QEMU that runs already has its files open. */
	r = state == VM_STATE_RUNNING || state == VM_STATE_PAUSED
	            ? 0
	            : vm_check_qemu_access(d, p.ws_dir, errbuf, sizeof(errbuf));
	if (r > 0) {
		boot_paths_free(&p);
		log_ws(LOG_WARNING, name, "start %s: %s", name, errbuf);
		return start_fail(s, API_ERR_FAILED, "start %s: %s", name, errbuf);
	}
	errbuf[0] = '\0';
	p.disk = fs_path_join(p.ws_dir, "disk.img");
	p.home = fs_path_join(p.ws_dir, "home.img");
	p.log = fs_path_join(p.run_dir, "console.log");
	p.sock = fs_path_join(p.run_dir, "channel.sock");
	if (img->kernel_boot) {
		_cleanup_free_ char *idir = fs_path_join(storage_images_path(d->storage), img->id);
		p.kernel = idir ? fs_path_join(idir, "vmlinuz") : NULL;
		p.initrd = idir ? fs_path_join(idir, "initrd.img") : NULL;
		p.cmdline = make_cmdline(img->cmdline);
	}
	if (!p.disk || !p.home || !p.log || !p.sock ||
	    (img->kernel_boot && (!p.kernel || !p.initrd || !p.cmdline))) {
		boot_paths_free(&p);
		return -ENOMEM;
	}
	/* A domain that runs (or is paused) keeps the virtiofsd it has; otherwise what a domain
	 * that went left behind goes first. */
	running = state == VM_STATE_RUNNING || state == VM_STATE_PAUSED;
	if (!running && w->n_shares > 0)
		shares_release(d, name);
	for (size_t i = 0; i < w->n_shares && i < VM_MAX_SHARES; i++) {
		const struct workspace_share *sh = &w->shares[i];
		uid_t expect = sh->uid != (uid_t)-1 ? sh->uid
		               : w->owner != 0      ? w->owner
		                                    : (uid_t)-1;

		(void)snprintf(p.tags[i], sizeof(p.tags[i]), "share%zu", i);
		if (running) {
			p.fs_sock[i] = share_path(p.run_dir, p.tags[i], ".sock");
			r = 0;
		} else
			r = share_start(d, p.run_dir, p.tags[i], sh, expect, &p.fs_sock[i], errbuf,
			                sizeof(errbuf));
		if (r >= 0 && !p.fs_sock[i])
			r = -ENOMEM;
		if (r < 0) {
			shares_release(d, name);
			boot_paths_free(&p);
			log_ws(LOG_WARNING, name, "start %s refused: %s", name, errbuf);
			return start_fail(
			        s,
			        r == -ELOOP || r == -EPERM || r == -ENOTDIR || r == -ENOENT
			                ? API_ERR_CONFLICT
			                : API_ERR_FAILED,
			        "start %s: %s", name, errbuf[0] ? errbuf : slate_strerror(r));
		}
		p.shares[i] = (struct vm_share){
		        .socket = p.fs_sock[i], .tag = p.tags[i], .readonly = sh->readonly};
	}
	c = (struct vm_config){
	        .domain_name = domain,
	        .uuid = w->uuid,
	        .workspace = name,
	        .owner = w->owner,
	        .image_id = w->image_id,
	        .base_version = w->base_version,
	        .mac = w->mac,
	        .memory_mib = w->memory_mib,
	        .cpus = w->cpus,
	        .kvm = vm_kvm_usable(d->libvirt_uri) > 0,
	        .disk = p.disk,
	        .home = p.home,
	        .disk_io = vm_disk_io(),
	        .kernel = p.kernel,
	        .initrd = p.initrd,
	        .cmdline = p.cmdline,
	        .console_log = p.log,
	        .channel_socket = p.sock,
	        .vsock = access("/dev/vhost-vsock", R_OK | W_OK) == 0,
	        .shares = p.shares,
	        .n_shares = w->n_shares < VM_MAX_SHARES ? w->n_shares : VM_MAX_SHARES,
	};
	log_ws(LOG_DEBUG, name, "starting %s from template %s", domain, origin);
	r = vm_boot(conn, template, &c, op->timeout_s, start_progress, s, &br, errbuf,
	            sizeof(errbuf));
	channel_sock = TAKE_PTR(p.sock);
	boot_paths_free(&p);
	if (r < 0) {
		/* A failed boot (a libvirt connection lost mid-start, say) leaves nothing behind. */
		if ((state == VM_STATE_UNDEFINED || state == VM_STATE_STOPPED) && r != -EEXIST) {
			start_undo(d, name, errbuf);
			shares_release(d, name);
		}
		explain_denied(d, errbuf, sizeof(errbuf));
		log_ws(LOG_WARNING, name, "start %s failed: %s", name, errbuf);
		return start_fail(s, r == -EEXIST ? API_ERR_CONFLICT : API_ERR_FAILED,
		                  "start %s: %s", name, errbuf);
	}
	s->booted = !br.already_running && !br.resumed;
	w->last_used = time(NULL);
	r = workspace_save(d->workspaces, w);
	if (r < 0)
		log_ws(LOG_WARNING, name, "cannot record last use: %s", slate_strerror(r));
	if (!br.already_running)
		log_ws(LOG_INFO, name, "%s %s (%s) in %.1f s", br.resumed ? "resumed" : "booted",
		       domain, vm_accel_name(br.kvm), br.boot_s);

	/* The guest is up when a shell on a terminal runs a command, not when it says so. */
	if (!c.vsock && d->channels)
		(void)channels_attach(d->channels, name, channel_sock);
	start_progress("proving", "a login shell on a terminal runs a command", s);
	t0 = now_s();
	r = exec_terminal_proof(d, name, (op->timeout_s ? op->timeout_s : PROOF_TIMEOUT_S) * 1000,
	                        errbuf, sizeof(errbuf));
	if (r < 0) {
		free(cp.note);
		log_ws(LOG_WARNING, name, "terminal proof of %s failed: %s", name, errbuf);
		return start_fail(s, API_ERR_FAILED,
		                  "start %s: the guest booted but its terminal proof failed: %s; "
		                  "it still runs: 'slate console %s' to look, 'slate stop --force "
		                  "%s' to stop it",
		                  name, errbuf, name, name);
	}
	proof_s = now_s() - t0;
	if (w->n_shares > 0 && !br.resumed && !br.already_running) {
		start_progress("sharing", "mounting the shared host folders", s);
		r = mount_shares(d, w, errbuf, sizeof(errbuf));
		if (r < 0)
			return start_fail(s, API_ERR_FAILED,
			                  "start %s: mounting its shares in the guest: %s", name,
			                  errbuf);
	}
	if (!br.resumed && !br.already_running) {
		start_progress("provisioning", "placeholders and the egress CA", s);
		r = api_vm_provision(d, w, errbuf, sizeof(errbuf));
		if (r < 0)
			return start_fail(s, API_ERR_FAILED, "start %s: provisioning the guest: %s",
			                  name, errbuf);
		r = proven_checkpoint(d, conn, name, &cp, &pause_ms);
		if (r < 0)
			log_ws(LOG_WARNING, name, "no proven-boot checkpoint of %s: %s", name,
			       slate_strerror(r));
		else
			log_ws(LOG_INFO, name, "proven-boot checkpoint %s of %s (paused %.1f ms)",
			       cp.id, name, pause_ms);
	}
	res = json_object_new_object();
	if (!res || json_add_string(res, "name", name) < 0 ||
	    json_add_string(res, "domain", domain) < 0 ||
	    json_add_string(res, "state", "running") < 0 ||
	    json_add_string(res, "accelerator", vm_accel_name(c.kvm)) < 0 ||
	    json_add_bool(res, "resumed", br.resumed) < 0 ||
	    json_add_bool(res, "already_running", br.already_running) < 0 ||
	    json_add(res, "boot_s", json_object_new_double(br.boot_s)) < 0)
		return -ENOMEM;
	if (br.disk_io[0])
		(void)json_add_string(res, "disk_io", br.disk_io);
	(void)json_add(res, "proof_s", json_object_new_double(proof_s));
	if (cp.id[0]) {
		(void)json_add_string(res, "checkpoint", cp.id);
		(void)json_add(res, "checkpoint_pause_ms", json_object_new_double(pause_ms));
	}
	free(cp.note);
	*ret = TAKE_PTR(res);
	return 0;
}

static void stream_progress(const char *step, const char *detail, void *userdata)
{
	progress(step, detail, userdata);
}

/*
 * After a start whose client went away: nobody reads the error or acts on it, so the start must
 * not leave a half state. One that failed after it booted the domain is undone (powered off and
 * forgotten, as if never started); one that succeeded must leave the guest running, not paused
 * (a checkpoint's resume that failed is tried again). A start that failed before it booted left
 * nothing to undo.
 */
static void start_settle_orphan(struct vm_op *op, const struct start_io *io, int start_r)
{
	struct daemon_ctx *d = op->d;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int lock_fd = -1;
	enum vm_state state;

	if (start_r < 0 && !io->booted)
		return;
	if (workspace_lock(d->workspaces, op->name, &lock_fd) < 0)
		return;
	if (start_r < 0) {
		/* start_undo() asks libvirt over a connection of its own. */
		log_ws(LOG_NOTICE, op->name, "start %s failed after its client went away",
		       op->name);
		start_undo(d, op->name, io->msg);
		shares_release(d, op->name);
		return;
	}
	/* Paused by the leak detector is paused on purpose. */
	if (vm_connect(d->libvirt_uri, &conn) < 0 ||
	    vm_workspace_state(conn, op->name, &state) < 0 || state != VM_STATE_PAUSED ||
	    workspace_load(d->workspaces, op->name, &w) < 0 || workspace_quarantined(w))
		return;
	if (vm_domain_lookup(conn, op->name, &dom) < 0 || virDomainResume(dom) < 0)
		log_ws(LOG_WARNING, op->name, "%s is paused after its start and cannot resume: %s",
		       op->name, vm_last_error());
	else
		log_ws(LOG_NOTICE, op->name, "resumed %s, found paused after its start", op->name);
}

static int start_stream(struct api_stream *s, void *arg)
{
	struct json_object *res = NULL;
	char code[64] = "", msg[4096] = "";
	struct start_io io = {.progress = stream_progress,
	                      .userdata = s,
	                      .code = code,
	                      .code_len = sizeof(code),
	                      .msg = msg,
	                      .msg_len = sizeof(msg)};
	int r = do_start(arg, &io, &res);

	if (api_stream_gone(s))
		start_settle_orphan(arg, &io, r);
	if (r < 0 && msg[0])
		return api_stream_error(s, code[0] ? code : API_ERR_FAILED, msg), -EIO;
	if (r < 0)
		return r;
	return api_stream_result(s, res);
}

int api_vm_start(struct daemon_ctx *d, const char *name, unsigned timeout_s,
                 vm_progress_fn progress_fn, void *userdata, struct json_object **ret, char *code,
                 size_t code_len, char *msg, size_t msg_len)
{
	struct vm_op op = {.d = d, .timeout_s = timeout_s};
	struct json_object *res = NULL;
	struct start_io io = {.progress = progress_fn,
	                      .userdata = userdata,
	                      .code = code,
	                      .code_len = code_len,
	                      .msg = msg,
	                      .msg_len = msg_len};
	int r;

	if (strlen(name) > WORKSPACE_NAME_MAX)
		return -EINVAL;
	memcpy(op.name, name, strlen(name));
	msg[0] = '\0';
	r = do_start(&op, &io, &res);
	if (r < 0 && !msg[0])
		(void)snprintf(msg, msg_len, "start %s: %s", name, slate_strerror(r));
	if (ret)
		*ret = res;
	else
		json_object_put(res);
	return r;
}

int api_vm_destroy_and_delete(struct daemon_ctx *d, const char *name, char *err, size_t errlen)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_close_ int lock_fd = -1;
	struct vm_stop_result sr;
	int r;

	r = workspace_lock(d->workspaces, name, &lock_fd);
	if (r < 0)
		return r;
	if (d->channels)
		channels_detach(d->channels, name);
	r = vm_connect(d->libvirt_uri, &conn);
	if (r < 0) {
		(void)snprintf(err, errlen, "cannot connect to %s: %s", d->libvirt_uri,
		               vm_last_error());
		return r;
	}
	r = vm_stop(conn, name, VM_STOP_FORCE, VM_DEFAULT_STOP_TIMEOUT_S, NULL, NULL, &sr, err,
	            errlen);
	if (r < 0 && r != -EALREADY && r != -ENOTCONN && r != -ENOENT)
		return r;
	(void)vm_domain_forget(d->libvirt_uri, name, true);
	shares_release(d, name);
	r = workspace_delete(d->workspaces, name);
	if (r < 0)
		(void)snprintf(err, errlen, "deleting: %s", slate_strerror(r));
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
	struct channel_info ci;
	char out[256], err[256];
	int status;

	if (!req || !d->channels || channels_info(d->channels, name, &ci) < 0 || !ci.ready)
		return false;
	req->args[req->n_args++] = (struct ex_str){"sh", 2};
	req->args[req->n_args++] = (struct ex_str){"-c", 2};
	req->args[req->n_args++] = (struct ex_str){script, (uint32_t)strlen(script)};
	req->user = (struct ex_str){"root", 4};
	if (exec_collect(d, name, req, NULL, 3000, out, sizeof(out), &status, err, sizeof(err)) < 0)
		log_ws(LOG_DEBUG, name, "power-off through the guest agent: %s", err);
	return true;
}

static int stop_stream(struct api_stream *s, void *arg)
{
	struct vm_op *op = arg;
	struct daemon_ctx *d = op->d;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_close_ int lock_fd = -1;
	_cleanup_json_ struct json_object *res = NULL;
	enum vm_stop_mode mode = op->force     ? VM_STOP_FORCE
	                         : op->suspend ? VM_STOP_SUSPEND
	                                       : VM_STOP_SHUTDOWN;
	struct vm_stop_result sr;
	char errbuf[1024] = "";
	enum vm_state state;
	int r;

	r = workspace_lock(d->workspaces, op->name, &lock_fd);
	if (r < 0)
		return stream_fail(s, API_ERR_FAILED, "stop %s: cannot lock: %s", op->name,
		                   slate_strerror(r));
	r = vm_connect(d->libvirt_uri, &conn);
	if (r < 0)
		return stream_fail(s, API_ERR_UNAVAILABLE, "stop %s: cannot connect to %s: %s",
		                   op->name, d->libvirt_uri, vm_last_error());
	/* A paused guest cannot power itself off, and a quarantined one must not run another
	 * instruction: both are powered off at once, whatever was asked. */
	if (mode != VM_STOP_FORCE && vm_workspace_state(conn, op->name, &state) >= 0 &&
	    workspace_load(d->workspaces, op->name, &w) >= 0 &&
	    (state == VM_STATE_PAUSED || workspace_quarantined(w))) {
		progress("destroying",
		         workspace_quarantined(w) ? "compromised: powering off at once"
		                                  : "paused: powering off at once",
		         s);
		mode = VM_STOP_FORCE;
	}
	workspace_free(TAKE_PTR(w));
	bool asked = mode == VM_STOP_SHUTDOWN && guest_poweroff(d, op->name);
	r = vm_stop(conn, op->name, mode, op->timeout_s, progress, s, &sr, errbuf, sizeof(errbuf));
	if (r >= 0 && asked)
		sr.was_running = true; /* it went before vm_stop looked */
	if (r >= 0 && mode != VM_STOP_SUSPEND)
		shares_release(d, op->name);
	if (r < 0)
		return stream_fail(
		        s, r == -EALREADY || r == -ENOTCONN ? API_ERR_CONFLICT : API_ERR_FAILED,
		        "stop %s: %s", op->name, errbuf);
	if (vm_workspace_state(conn, op->name, &state) < 0)
		state = VM_STATE_STOPPED;
	if (workspace_load(d->workspaces, op->name, &w) >= 0) {
		w->last_used = time(NULL);
		(void)workspace_save(d->workspaces, w);
	}
	if (sr.was_running)
		log_ws(LOG_INFO, op->name, "%s %s in %.1f s",
		       mode == VM_STOP_SUSPEND ? "suspended"
		       : sr.destroyed          ? "destroyed"
		                               : "shut down",
		       op->name, sr.stop_s);
	res = json_object_new_object();
	if (!res || json_add_string(res, "name", op->name) < 0 ||
	    json_add_string(res, "state", vm_state_name(state)) < 0 ||
	    json_add_bool(res, "was_running", sr.was_running) < 0 ||
	    json_add_bool(res, "destroyed", sr.destroyed) < 0 ||
	    json_add(res, "stop_s", json_object_new_double(sr.stop_s)) < 0)
		return -ENOMEM;
	return api_stream_result(s, TAKE_PTR(res));
}

static int op_new(struct api_request *req, struct api_reply *reply, struct vm_op **ret)
{
	struct daemon_ctx *d = req->userdata;
	struct vm_op *op;
	int64_t t;

	if (api_need_workspaces(d, reply) < 0 ||
	    api_load_visible(d, req, req->params[0], NULL, reply) < 0)
		return -EINVAL;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->d = d;
	op->uid = req->caller.uid;
	/* api_load_visible() made sure it is a valid name (at most WORKSPACE_NAME_MAX bytes). */
	memcpy(op->name, req->params[0], strnlen(req->params[0], WORKSPACE_NAME_MAX));
	if (req->body) {
		(void)json_get_bool(req->body, "reset_to_base", &op->reset_to_base);
		(void)json_get_bool(req->body, "as_is", &op->as_is);
		(void)json_get_bool(req->body, "force", &op->force);
		(void)json_get_bool(req->body, "suspend", &op->suspend);
		if (json_get_int64(req->body, "timeout", &t) >= 0) {
			if (t < 1 || t > 3600) {
				free(op);
				return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
				                       "timeout must be 1 to 3600 seconds"),
				       -EINVAL;
			}
			op->timeout_s = (unsigned)t;
		}
	}
	if ((op->reset_to_base && op->as_is) || (op->force && op->suspend)) {
		free(op);
		return api_reply_error(
		               reply, 400, API_ERR_BAD_REQUEST,
		               "reset_to_base and as_is (or force and suspend) exclude each "
		               "other"),
		       -EINVAL;
	}
	*ret = op;
	return 0;
}

int handle_workspace_start(struct api_request *req, struct api_reply *reply)
{
	struct vm_op *op = NULL;
	int r = op_new(req, reply, &op);

	if (r < 0)
		return r;
	return api_reply_stream(reply, start_stream, op, free);
}

int handle_workspace_stop(struct api_request *req, struct api_reply *reply)
{
	struct vm_op *op = NULL;
	int r = op_new(req, reply, &op);

	if (r < 0)
		return r;
	return api_reply_stream(reply, stop_stream, op, free);
}

/* ---- the console: an upgraded connection bridged to the domain's serial console ---- */

#define CONSOLE_PROTOCOL "slate-console"

struct console_job {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
	virStreamPtr st;
	int fd;
};

/* Guest to client: the stream's bytes onto the socket, until either side ends. */
static void *console_out_main(void *p)
{
	struct console_job *j = p;
	char buf[4096];
	int n;

	for (;;) {
		n = virStreamRecv(j->st, buf, sizeof(buf));
		if (n <= 0 || fs_write_all(j->fd, buf, (size_t)n) < 0)
			break;
	}
	/* Wakes the other direction's read. */
	(void)shutdown(j->fd, SHUT_RDWR);
	return NULL;
}

static void console_bridge(int fd, const char *extra, size_t extra_len, void *arg)
{
	struct console_job *j = arg;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	_cleanup_(virStreamFreep) virStreamPtr st = NULL;
	char buf[4096], msg[512];
	pthread_t out;
	ssize_t n;

	if (vm_connect(j->d->libvirt_uri, &conn) < 0 || vm_domain_lookup(conn, j->name, &dom) < 0 ||
	    !(st = virStreamNew(conn, 0)) ||
	    virDomainOpenConsole(dom, NULL, st, VIR_DOMAIN_CONSOLE_FORCE) < 0) {
		(void)snprintf(msg, sizeof(msg), "\r\nslate: cannot open the console of %s: %s\r\n",
		               j->name, vm_last_error());
		(void)fs_write_all(fd, msg, strlen(msg));
		return;
	}
	log_ws(LOG_INFO, j->name, "console of %s attached", j->name);
	j->st = st;
	j->fd = fd;
	if (extra_len > 0 && virStreamSend(st, extra, extra_len) < 0)
		return;
	if (pthread_create(&out, NULL, console_out_main, j) != 0)
		return;
	for (;;) {
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || virStreamSend(st, buf, (size_t)n) < 0)
			break;
	}
	/* Client gone: end the stream, which ends the other direction. */
	(void)virStreamAbort(st);
	(void)shutdown(fd, SHUT_RDWR);
	(void)pthread_join(out, NULL);
	log_ws(LOG_INFO, j->name, "console of %s detached", j->name);
}

int handle_workspace_console(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	struct console_job *j;
	enum vm_state st;
	int r;

	if (api_need_workspaces(d, reply) < 0 ||
	    api_load_visible(d, req, req->params[0], NULL, reply) < 0)
		return -EINVAL;
	r = vm_workspace_state_uri(d->libvirt_uri, req->params[0], &st);
	if (r < 0)
		return api_reply_error(reply, 503, API_ERR_UNAVAILABLE, "console %s: libvirt: %s",
		                       req->params[0], slate_strerror(r));
	if (st != VM_STATE_RUNNING && st != VM_STATE_PAUSED)
		return api_reply_error(reply, 409, API_ERR_CONFLICT,
		                       "console %s: it is %s ('slate start %s' first)",
		                       req->params[0], vm_state_name(st), req->params[0]);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	j->fd = -1;
	memcpy(j->name, req->params[0], strnlen(req->params[0], WORKSPACE_NAME_MAX));
	return api_reply_upgrade(reply, CONSOLE_PROTOCOL, console_bridge, j, free);
}

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

	if (!d->channels || access("/dev/vhost-vsock", R_OK | W_OK) == 0 ||
	    runtime_dir_for(d, ws, &dir) < 0 || !(sock = fs_path_join(dir, "channel.sock")))
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
		char err[1024] = "";
		if (!list[i]->ephemeral)
			continue;
		if (api_vm_destroy_and_delete(d, list[i]->name, err, sizeof(err)) < 0)
			log_ws(LOG_WARNING, list[i]->name,
			       "cannot delete %s, left by an interrupted 'slate run --rm': %s",
			       list[i]->name, err);
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

int vm_daemon_start(struct daemon_ctx *d)
{
	if (d->channels && access("/dev/vhost-vsock", R_OK | W_OK) == 0) {
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
	return 0;
}

void vm_daemon_stop(struct daemon_ctx *d)
{
	vm_events_stop(d->vm_events);
	d->vm_events = NULL;
}

int vm_check_qemu_access(const struct daemon_ctx *d, const char *dir, char *detail, size_t len)
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

int vm_check_domains(struct daemon_ctx *d, char *detail, size_t len)
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

int vm_workspace_json(struct daemon_ctx *d, const char *name, int active, struct json_object *o)
{
	const char *accel = NULL;
	enum vm_state st;

	if (active > 0 && vm_workspace_state_uri(d->libvirt_uri, name, &st) >= 0 &&
	    (st == VM_STATE_SUSPENDED || st == VM_STATE_PAUSED))
		(void)json_add_string(o, "state", vm_state_name(st));
	if (active <= 0 || vm_workspace_accel(d->libvirt_uri, name, &accel) < 0)
		accel = vm_accel_name(vm_kvm_usable(d->libvirt_uri) > 0);
	if (active > 0 && d->channels) {
		struct channel_info ci;
		struct json_object *c;
		if (channels_info(d->channels, name, &ci) >= 0 && (c = json_object_new_object())) {
			(void)json_add_bool(c, "connected", ci.connected);
			(void)json_add_bool(c, "ready", ci.ready);
			(void)json_add_int64(c, "streams", ci.streams);
			(void)json_add_int64(c, "sessions", (int64_t)ci.sessions);
			(void)json_add_int64(c, "errors", (int64_t)ci.errors);
			(void)json_add_int64(c, "bytes_in", (int64_t)ci.bytes_in);
			(void)json_add_int64(c, "bytes_out", (int64_t)ci.bytes_out);
			if (ci.last_error[0])
				(void)json_add_string(c, "last_error", ci.last_error);
			if (ci.last_event[0])
				(void)json_add_string(c, "last_event", ci.last_event);
			(void)json_add(o, "channel", c);
		}
	}
	return json_add_string(o, "accelerator", accel);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A workspace's runtime directory and its shared host folders (daemon/shares.h): one virtiofsd
 * per share, started through slated-helper, and the mounts in the guest.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "channel/proto.h"
#include "daemon/daemon.h"
#include "daemon/exec.h"
#include "daemon/shares.h"
#include "helper/client.h"
#include "storage/rmtree.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "vm/qemu-user.h"
#include "vm/virtiofs.h"
#include "vm/xml.h"
#include "workspace/workspace.h"

int daemon_runtime_dir(const struct daemon_ctx *d, const char *name, char **ret)
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

void daemon_runtime_dir_remove(const struct daemon_ctx *d, const char *name)
{
	_cleanup_free_ char *vm = fs_path_join(d->runtime_dir, "vm");
	_cleanup_close_ int fd = vm ? open(vm, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	int r;

	if (fd < 0)
		return;
	/* Never across a mount: a share's view still mounted there keeps the directory. */
	r = rmtree_at(fd, name);
	if (r < 0 && r != -ENOENT)
		log_ws(LOG_WARNING, name, "cannot remove %s/%s: %s", vm, name, slate_strerror(r));
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
char *shares_path(const char *run_dir, const char *tag, const char *suffix)
{
	char name[64];

	(void)snprintf(name, sizeof(name), "fs-%s%s", tag, suffix);
	return fs_path_join(run_dir, name);
}

/*
 * Serves share i of w on its socket: checks the directory again (vm/virtiofs.h says how) and
 * starts its virtiofsd. expect_uid is the owner recorded at create.
 */
int shares_serve(const struct daemon_ctx *d, const char *run_dir, const char *tag,
                 const struct workspace_share *sh, uid_t expect_uid, char **ret_socket,
                 struct slate_error *err)
{
	_cleanup_free_ char *sock = shares_path(run_dir, tag, ".sock"),
	                    *pidfile = shares_path(run_dir, tag, ".pid"),
	                    *logfile = shares_path(run_dir, tag, ".log");
	_cleanup_close_ int dfd = -1, lfd = -1, logfd = -1;
	char line[64];
	uint64_t start = 0;
	struct stat st;
	pid_t pid = 0;
	int r;

	if (!sock || !pidfile || !logfile)
		return slate_error_errno(err, -ENOMEM, "share %s", sh->host_dir);
	/* slated-helper starts it (helper/client.h): it walks the path again in the host's mount
	 * namespace and checks the owner, then runs virtiofsd as that owner. */
	if (!d->helper)
		return slate_error_set(err, -ENOTCONN,
		                       "share %s: shares are served through slated-helper, and "
		                       "there is none: %s",
		                       sh->host_dir,
		                       d->helper_error ? d->helper_error : "not started");
	/* slated's own walk first: the owner to ask for (records made before shares kept their
	 * owner have none) and a clear error before anything starts; the helper walks it again. */
	r = virtiofs_share_open(sh->host_dir, expect_uid, &dfd, err);
	if (r < 0)
		return r;
	if (fstat(dfd, &st) < 0)
		return slate_error_errno(err, -errno, "share %s", sh->host_dir);
	r = share_socket(d, sock, &lfd);
	if (r < 0)
		return slate_error_errno(err, r, "share %s: socket %s", sh->host_dir, sock);
	/* Without a log virtiofsd still runs (its stderr goes to /dev/null). */
	logfd = open(logfile, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	r = helper_share_serve(d->helper, sh->host_dir, st.st_uid, owner_gid(st.st_uid, st.st_gid),
	                       sh->readonly, lfd, logfd, &pid, &start, err);
	if (r < 0)
		return r;
	(void)snprintf(line, sizeof(line), "%d %llu\n", (int)pid, (unsigned long long)start);
	r = fs_write_atomic_at(AT_FDCWD, pidfile, line, strlen(line), 0600);
	if (r < 0) {
		(void)helper_share_stop(d->helper, pid, start);
		return slate_error_errno(err, r, "share %s: %s", sh->host_dir, pidfile);
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
void shares_release(const struct daemon_ctx *d, const char *name)
{
	shares_stop(d, name);
	ro_unbind_all(d, name);
}

/*
 * Mounts each share in the guest (as root, over the channel): share<i> at its guest directory,
 * by default ~/<basename> of the workspace user, "-2", "-3"... added to repeated basenames.
 */
int shares_mount(struct daemon_ctx *d, const struct workspace *w, struct slate_error *err)
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
		return slate_error_errno(err, -ENOMEM, "mount");
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
	r = exec_collect(d, w->name, req, NULL, 60000, out, sizeof(out), &status, err);
	if (r < 0)
		return r;
	if (status != 0)
		return slate_error_set(err, -EIO, "mount exited %d: %.1024s", status, out);
	return 0;
}

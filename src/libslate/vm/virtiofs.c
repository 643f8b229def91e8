/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/error.h"
#include "util/fs.h"
#include "util/macro.h"
#include "vm/virtiofs.h"

/* virtiofsd's vhost-user socket and the share, as the daemon sees them. */
#define VFS_SOCKET_FD 3
#define VFS_SHARE_DIR "/tmp/share"

int virtiofs_share_open(const char *path, uid_t expect_uid, int *ret_fd, struct slate_error *err)
{
	_cleanup_free_ char *copy = NULL, *walked = NULL;
	_cleanup_close_ int fd = -1;
	char *save = NULL, *comp;
	size_t len = 0;
	struct stat st;

	if (!path || path[0] != '/' || strlen(path) >= 4096)
		return slate_error_set(err, -EINVAL, "%s: not an absolute path",
		                       path ? path : "(null)");
	copy = strdup(path);
	walked = calloc(1, strlen(path) + 2);
	if (!copy || !walked)
		return slate_error_errno(err, -ENOMEM, "share %s", path);
	fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return slate_error_errno(err, -errno, "share %s: /", path);
	for (comp = strtok_r(copy, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
		struct stat lst;
		int next, e;

		walked[len++] = '/';
		memcpy(walked + len, comp, strlen(comp) + 1);
		len += strlen(comp);
		if (streq(comp, ".") || streq(comp, ".."))
			return slate_error_set(err, -EINVAL,
			                       "%s: '%s' is not allowed in a share path", path,
			                       comp);
		next = openat(fd, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
		if (next >= 0) {
			(void)close(fd);
			fd = next;
			continue;
		}
		e = errno;
		/* O_PATH|O_NOFOLLOW|O_DIRECTORY on a symlink fails ENOTDIR: say what it is. */
		if (fstatat(fd, comp, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
			e = ELOOP;
		return slate_error_set(err, -e, "share %s: %s %s", path, walked,
		                       e == ELOOP     ? "is now a symbolic link"
		                       : e == ENOTDIR ? "is no longer a directory"
		                       : e == ENOENT  ? "no longer exists"
		                                      : slate_strerror(-e));
	}
	if (fstat(fd, &st) < 0)
		return slate_error_errno(err, -errno, "share %s", path);
	if (!S_ISDIR(st.st_mode))
		return slate_error_set(err, -ENOTDIR, "share %s is no longer a directory", path);
	if (expect_uid != (uid_t)-1 && st.st_uid != expect_uid)
		return slate_error_set(err, -EPERM,
		                       "share %s now belongs to uid %u, not to uid %u as when it "
		                       "was shared",
		                       path, (unsigned)st.st_uid, (unsigned)expect_uid);
	*ret_fd = TAKE_FD(fd);
	return 0;
}

uint64_t virtiofs_proc_start_time(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	_cleanup_close_ int fd = -1;
	ssize_t n;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: fields resume after the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* Field 3 (state) is the first after ')'; start time is field 22. */
	p++;
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %llu", &start) != 1)
		return 0;
	return start;
}

int virtiofs_kill(pid_t pid, uint64_t start)
{
	pid_t pgid;

	if (pid <= 1 || start == 0 || virtiofs_proc_start_time(pid) != start)
		return -ESRCH;
	/* Its process group holds the daemon and the child its sandbox forked (in a pid namespace
	 * of its own); SIGTERM would wait for a client that never comes. virtiofsd has nothing to
	 * flush: every write went to the host file when the guest made it. */
	pgid = getpgid(pid);
	if (pgid > 1 && kill(-pgid, SIGKILL) == 0)
		return 0;
	return kill(pid, SIGKILL) < 0 ? -errno : 0;
}

/* ---- the child ---- */

/*
 * The seccomp filter virtiofsd runs under, on top of its own:
 * - its set*id calls succeed without effect (see the header): they could only fail in the
 *   namespace, where the guest caller's ids are not mapped;
 * - a mode with the setuid or setgid bit is refused (EPERM) in chmod, fchmod, fchmodat, creat,
 *   open, openat, mknod and mknodat: no share gets a set-id program from a guest, not even one
 *   that runs as the owner (for a share root owns, that would be a setuid-root file).
 * Syscalls of another architecture's table are not looked at: the set*id ones fail in the
 * namespace as they would without the filter, and virtiofsd makes none.
 */
static int install_filter(void)
{
#if defined(__x86_64__)
#define VFS_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define VFS_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
#ifdef VFS_AUDIT_ARCH
#define NOOP(nr)                                                                                   \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1),                                           \
	        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0)
/* If nr: load the low 32 bits of argument arg, refuse when it has S_ISUID or S_ISGID. */
#define NOSETID(nr, arg)                                                                           \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4),                                           \
	        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[arg])),      \
	        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, S_ISUID | S_ISGID, 0, 1),                     \
	        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),                              \
	        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
	struct sock_filter f[] = {
	        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, VFS_AUDIT_ARCH, 1, 0),
	        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	        NOOP(__NR_setresuid),
	        NOOP(__NR_setresgid),
	        NOOP(__NR_setuid),
	        NOOP(__NR_setgid),
	        NOOP(__NR_setreuid),
	        NOOP(__NR_setregid),
	        NOOP(__NR_setfsuid),
	        NOOP(__NR_setfsgid),
	        NOSETID(__NR_fchmod, 1),
	        NOSETID(__NR_fchmodat, 2),
	        NOSETID(__NR_openat, 3),
	        NOSETID(__NR_mknodat, 2),
#ifdef __NR_chmod
	        NOSETID(__NR_chmod, 1),
	        NOSETID(__NR_creat, 1),
	        NOSETID(__NR_open, 2),
	        NOSETID(__NR_mknod, 1),
#endif
#ifdef __NR_fchmodat2
	        NOSETID(__NR_fchmodat2, 2),
#endif
	        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
#undef NOOP
#undef NOSETID
	struct sock_fprog prog = {.len = ELEMENTSOF(f), .filter = f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -errno;
	return 0;
#else
	return -EOPNOTSUPP;
#endif
}

/* Writes s to /proc/<pid>/<name>. */
static int write_proc(pid_t pid, const char *name, const char *s)
{
	char path[64];
	_cleanup_close_ int fd = -1;

	(void)snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return fs_write_all(fd, s, strlen(s));
}

/* The grandchild's failure report: "<errno> <what>" on the status pipe, then exit. */
_noreturn_ static void die(int status_fd, int e, const char *what)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), "%d %s: %s", e, what, strerror(e));

	if (n > 0)
		(void)!write(status_fd, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	_exit(127);
}

/*
 * The capabilities the daemon holds in its user namespace (all of them: it made it) survive the
 * switch to the guest user's id and the exec: kept, made effective and inheritable, then
 * ambient. They reach nothing outside the namespace.
 */
static int keep_caps_ambient(bool ambient)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct c[2];

	if (syscall(SYS_capget, &h, c) < 0)
		return -errno;
	for (size_t i = 0; i < ELEMENTSOF(c); i++)
		c[i].effective = c[i].inheritable = c[i].permitted;
	if (syscall(SYS_capset, &h, c) < 0)
		return -errno;
	for (int cap = 0; ambient && cap <= CAP_LAST_CAP; cap++)
		if ((c[cap / 32].permitted & (1u << (cap % 32))) &&
		    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0)
			return -errno;
	return 0;
}

/*
 * In the grandchild: becomes the guest user (spec->guest_uid), which the namespace maps to the
 * share's owner, in a new user and mount namespace (the parent writes the maps between the two
 * pipe steps), puts the share on VFS_SHARE_DIR and runs virtiofsd.
 */
_noreturn_ static void run_daemon(const struct virtiofs_spec *spec, int sync_rd, int ready_wr,
                                  int status_fd)
{
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
	                          .propagation = MS_PRIVATE};
	const char *bin = spec->binary ? spec->binary : VIRTIOFSD_DEFAULT;
	uid_t u = spec->guest_uid;
	gid_t g = spec->guest_gid;
	char fdarg[32], go;
	int r;

	if (spec->readonly)
		attr.attr_set |= MOUNT_ATTR_RDONLY;
	/* Host root's supplementary groups would stay in force (unmapped) otherwise. */
	if (setgroups(0, NULL) < 0)
		die(status_fd, errno, "setgroups");
	/* fchdir before unshare: the new mount namespace's copy of the share becomes the cwd. */
	if (fchdir(spec->dir_fd) < 0)
		die(status_fd, errno, "fchdir to the share");
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
		die(status_fd, errno, "unshare(user, mount)");
	if (write(ready_wr, "u", 1) != 1 || read(sync_rd, &go, 1) != 1 || go != 'g')
		_exit(127);
	if (setresgid(g, g, g) < 0 || prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 ||
	    setresuid(u, u, u) < 0)
		die(status_fd, errno, "becoming the share's owner");
	r = keep_caps_ambient(false);
	if (r < 0)
		die(status_fd, -r, "keeping the namespace's capabilities");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die(status_fd, errno, "making the mount namespace private");
	/* A small tmpfs of its own holds the mount point; the rest of the host stays as it is,
	 * and virtiofsd's own sandbox pivots into the share. */
	if (mount("slate-virtiofs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
	          "size=64k,mode=0755") < 0)
		die(status_fd, errno, "mounting a tmpfs on /tmp");
	if (mkdir(VFS_SHARE_DIR, 0755) < 0)
		die(status_fd, errno, "mkdir " VFS_SHARE_DIR);
	if (mount(".", VFS_SHARE_DIR, NULL, MS_BIND | MS_REC, NULL) < 0)
		die(status_fd, errno, "bind-mounting the share");
	if (mount_setattr(AT_FDCWD, VFS_SHARE_DIR, AT_RECURSIVE, &attr, sizeof(attr)) < 0)
		die(status_fd, errno, "making the share's mount nosuid, nodev");
	if (chdir("/") < 0)
		die(status_fd, errno, "chdir /");
	if (dup2(spec->listen_fd, VFS_SOCKET_FD) < 0)
		die(status_fd, errno, "dup2");
	r = fcntl(VFS_SOCKET_FD, F_GETFD);
	if (r < 0 || fcntl(VFS_SOCKET_FD, F_SETFD, r & ~FD_CLOEXEC) < 0)
		die(status_fd, errno, "fcntl");
	/* stdin and stdout on /dev/null, stderr on the log: nothing of the caller's stays open
	 * (a pipe held by a daemon that outlives its caller keeps the pipe's reader waiting). */
	r = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (r < 0 || dup2(r, STDIN_FILENO) < 0 || dup2(r, STDOUT_FILENO) < 0 ||
	    dup2(spec->log_fd >= 0 ? spec->log_fd : r, STDERR_FILENO) < 0)
		die(status_fd, errno, "redirecting stdio");
	r = keep_caps_ambient(true);
	if (r < 0)
		die(status_fd, -r, "keeping the namespace's capabilities");
	r = install_filter();
	if (r < 0)
		die(status_fd, -r, "installing the seccomp filter");
	(void)snprintf(fdarg, sizeof(fdarg), "--fd=%d", VFS_SOCKET_FD);
	execl(bin, bin, fdarg, "-o", "source=" VFS_SHARE_DIR, "-o", "sandbox=namespace", "-o",
	      "cache=auto", "-o", "no_xattr", "--rlimit-nofile=0", (char *)NULL);
	die(status_fd, errno, bin);
}

/*
 * The middle process: forks the daemon, writes its user namespace maps, reports its pid (or the
 * reason it failed) on status_fd and exits, so the daemon is nobody's child but init's.
 */
_noreturn_ static void run_middle(const struct virtiofs_spec *spec, int status_fd)
{
	int to_child[2], from_child[2], exec_pipe[2];
	char buf[300], maps[64], c;
	pid_t pid;
	ssize_t n;
	int r;

	(void)setsid();
	if (pipe2(to_child, O_CLOEXEC) < 0 || pipe2(from_child, O_CLOEXEC) < 0 ||
	    pipe2(exec_pipe, O_CLOEXEC) < 0)
		die(status_fd, errno, "pipe");
	pid = fork();
	if (pid < 0)
		die(status_fd, errno, "fork");
	if (pid == 0) {
		(void)close(to_child[1]);
		(void)close(from_child[0]);
		(void)close(exec_pipe[0]);
		(void)close(status_fd);
		run_daemon(spec, to_child[0], from_child[1], exec_pipe[1]);
	}
	(void)close(to_child[0]);
	(void)close(from_child[1]);
	(void)close(exec_pipe[1]);
	if (read(from_child[0], &c, 1) != 1) {
		/* It failed before unsharing: its message is on exec_pipe. */
		n = read(exec_pipe[0], buf, sizeof(buf) - 1);
		if (n > 0)
			(void)!write(status_fd, buf, (size_t)n);
		_exit(1);
	}
	r = write_proc(pid, "setgroups", "deny");
	(void)snprintf(maps, sizeof(maps), "%u %u 1\n", (unsigned)spec->guest_uid,
	               (unsigned)spec->uid);
	if (r >= 0)
		r = write_proc(pid, "uid_map", maps);
	(void)snprintf(maps, sizeof(maps), "%u %u 1\n", (unsigned)spec->guest_gid,
	               (unsigned)spec->gid);
	if (r >= 0)
		r = write_proc(pid, "gid_map", maps);
	if (r < 0) {
		(void)kill(pid, SIGKILL);
		die(status_fd, -r, "writing the user namespace maps");
	}
	if (write(to_child[1], "g", 1) != 1) {
		(void)kill(pid, SIGKILL);
		die(status_fd, EPIPE, "starting virtiofsd");
	}
	/* exec closes exec_pipe's write end (O_CLOEXEC): EOF means it runs virtiofsd now. */
	n = read(exec_pipe[0], buf, sizeof(buf) - 1);
	if (n > 0) {
		(void)!write(status_fd, buf, (size_t)n);
		_exit(1);
	}
	n = snprintf(buf, sizeof(buf), "0 %d", (int)pid);
	(void)!write(status_fd, buf, (size_t)n);
	_exit(0);
}

int virtiofs_spawn(const struct virtiofs_spec *spec, pid_t *ret_pid, uint64_t *ret_start,
                   struct slate_error *err)
{
	int status[2], keep[4], wstatus, e = 0, pid = 0;
	long max_fd = sysconf(_SC_OPEN_MAX);
	struct rlimit rl = {.rlim_cur = 65536, .rlim_max = 65536};
	char buf[300];
	pid_t mid;
	ssize_t n;

	if (!spec || spec->dir_fd < 0 || spec->listen_fd < 0 || spec->uid == (uid_t)-1 ||
	    spec->gid == (gid_t)-1 || spec->guest_uid == (uid_t)-1 || spec->guest_gid == (gid_t)-1)
		return slate_error_set(err, -EINVAL, "virtiofsd: incomplete settings");
	if (pipe2(status, O_CLOEXEC) < 0)
		return slate_error_errno(err, -errno, "virtiofsd: pipe");
	mid = fork();
	if (mid < 0) {
		e = errno;
		(void)close(status[0]);
		(void)close(status[1]);
		return slate_error_errno(err, -e, "virtiofsd: fork");
	}
	if (mid == 0) {
		(void)close(status[0]);
		keep[0] = spec->dir_fd;
		keep[1] = spec->listen_fd;
		keep[2] = spec->log_fd;
		keep[3] = status[1];
		fs_close_fds_except(keep, ELEMENTSOF(keep),
		                    max_fd > 0 && max_fd < 65536 ? (int)max_fd : 65536);
		(void)signal(SIGPIPE, SIG_DFL);
		/* virtiofsd may not raise its own limit in the namespace: room for many files. */
		(void)setrlimit(RLIMIT_NOFILE, &rl);
		run_middle(spec, status[1]);
	}
	(void)close(status[1]);
	n = read(status[0], buf, sizeof(buf) - 1);
	(void)close(status[0]);
	while (waitpid(mid, &wstatus, 0) < 0 && errno == EINTR)
		;
	if (n <= 0)
		return slate_error_set(err, -EIO, "virtiofsd: the launcher died");
	buf[n] = '\0';
	if (sscanf(buf, "%d %d", &e, &pid) == 2 && e == 0 && pid > 1) {
		*ret_pid = pid;
		*ret_start = virtiofs_proc_start_time(pid);
		return 0;
	}
	if (sscanf(buf, "%d", &e) != 1 || e <= 0)
		e = EIO;
	{
		const char *msg = strchr(buf, ' ');
		return slate_error_set(err, -e, "virtiofsd: %s", msg ? msg + 1 : buf);
	}
}

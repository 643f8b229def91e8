/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage/spawn.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/macro.h"

#define SPAWN_OUTPUT_MAX 4096

extern char **environ;

static bool is_executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Looks name up in $PATH, then in the usual system directories. */
static int find_program(const char *name, char **ret)
{
	static const char *const fallback[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
	const char *path = getenv("PATH");
	char buf[4096];

	if (!name || !*name)
		return -EINVAL;
	if (strchr(name, '/')) {
		if (!is_executable(name))
			return -ENOENT;
		*ret = strdup(name);
		return *ret ? 0 : -ENOMEM;
	}
	for (const char *p = path ? path : ""; *p;) {
		size_t n = strcspn(p, ":");

		if (n > 0 &&
		    snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, name) < (int)sizeof(buf) &&
		    is_executable(buf)) {
			*ret = strdup(buf);
			return *ret ? 0 : -ENOMEM;
		}
		p += n;
		if (*p == ':')
			p++;
	}
	for (size_t i = 0; i < ELEMENTSOF(fallback); i++) {
		(void)snprintf(buf, sizeof(buf), "%s/%s", fallback[i], name);
		if (is_executable(buf)) {
			*ret = strdup(buf);
			return *ret ? 0 : -ENOMEM;
		}
	}
	return -ENOENT;
}

static void trim_output(char *s, size_t *len)
{
	while (*len > 0 && (s[*len - 1] == '\n' || s[*len - 1] == ' ' || s[*len - 1] == '\t' ||
	                    s[*len - 1] == '\r'))
		(*len)--;
	s[*len] = '\0';
	/* The message ends up in a JSON reply or a log line: keep it printable. */
	for (size_t i = 0; i < *len; i++)
		if ((unsigned char)s[i] < 0x20 && s[i] != '\n' && s[i] != '\t')
			s[i] = ' ';
}

/*
 * Keeps the start of what the child prints (where tools say what went wrong), drains the rest,
 * reaps it and turns its exit status into the result; *out has room for SPAWN_OUTPUT_MAX + 1
 * bytes and goes to *ret_output (when not NULL) once the program ran.
 */
static int collect(pid_t pid, int rd, const char *prog, size_t max, char **out, char **ret_output)
{
	size_t len = 0;
	int status;

	for (;;) {
		char sink[1024];
		size_t room = max - len;
		ssize_t n = room > 0 ? read(rd, *out + len, room) : read(rd, sink, sizeof(sink));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (n == 0)
			break;
		if (room > 0)
			len += (size_t)n;
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	trim_output(*out, &len);
	log_debug("%s exited with status %d%s%.4096s", prog,
	          WIFEXITED(status) ? WEXITSTATUS(status) : -1, len > 0 ? ": " : "", *out);
	if (ret_output)
		*ret_output = TAKE_PTR(*out);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -EIO;
	return 0;
}

int spawn_run(const char *const *argv, char **ret_output)
{
	return spawn_run_max(argv, SPAWN_OUTPUT_MAX, ret_output);
}

int spawn_run_max(const char *const *argv, size_t max, char **ret_output)
{
	_cleanup_free_ char *prog = NULL, *out = NULL;
	_cleanup_close_ int rd = -1, wr = -1, null = -1;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	pid_t pid;
	int p[2], r;

	if (!argv || !argv[0])
		return -EINVAL;
	r = find_program(argv[0], &prog);
	if (r < 0)
		return r;
	out = malloc(max + 1);
	if (!out)
		return -ENOMEM;
	/* Opened here: a missing /dev/null must not look like a missing program. */
	null = open("/dev/null", O_RDONLY | O_NOCTTY | O_CLOEXEC);
	if (null < 0)
		return -errno;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	rd = p[0];
	wr = p[1];

	r = posix_spawn_file_actions_init(&fa);
	if (r != 0)
		return -r;
	r = posix_spawnattr_init(&attr);
	if (r != 0) {
		(void)posix_spawn_file_actions_destroy(&fa);
		return -r;
	}
	/* The child starts with default signal handling and nothing blocked, whatever we did. */
	(void)sigemptyset(&none);
	(void)sigfillset(&all);
	r = posix_spawn_file_actions_adddup2(&fa, null, STDIN_FILENO);
	if (r == 0)
		r = posix_spawn_file_actions_adddup2(&fa, wr, STDOUT_FILENO);
	if (r == 0)
		r = posix_spawn_file_actions_adddup2(&fa, wr, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
	/* Libraries do not all open with O_CLOEXEC; no fd of the daemon leaks into a tool. */
	if (r == 0)
		r = posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
#endif
	if (r == 0)
		r = posix_spawnattr_setsigmask(&attr, &none);
	if (r == 0)
		r = posix_spawnattr_setsigdefault(&attr, &all);
	if (r == 0)
		r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	if (r == 0)
		r = posix_spawn(&pid, prog, &fa, &attr, (char *const *)argv, environ);
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)posix_spawnattr_destroy(&attr);
	if (r != 0)
		return -r;
	wr = safe_close(wr);
	return collect(pid, rd, prog, max, &out, ret_output);
}

/* ---- confined ----------------------------------------------------------------------------- */

/* Where the confined root is built, inside the child's own mount namespace (bubblewrap's choice):
 * the tmpfs mounted there is never seen outside it. */
#define CONFINE_BASE "/tmp"
#define CONFINE_FILES_MAX 4
#define CONFINE_FD_SCAN_MAX 65536
/* The dynamic linker's list of library paths (libraries in /usr/local/lib are found through it). */
#define LD_CACHE "/etc/ld.so.cache"

/* Linux 5.2; older C libraries lack the names. */
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif

/* What a program and its libraries need, as the host has them: a directory is bound read-only,
 * a symlink (merged /usr: /lib -> usr/lib) is made again. Nothing here holds a secret. */
static const char *const system_dirs[] = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};

enum confine_step {
	STEP_UNSHARE,
	STEP_PRIVATE,
	STEP_TMPFS,
	STEP_SYSTEM_DIR,
	STEP_DEV_NULL,
	STEP_LD_CACHE,
	STEP_FILE,
	STEP_ROOT_RDONLY,
	STEP_PIVOT_ROOT,
	STEP_CAPS,
	STEP_NO_NEW_PRIVS,
	STEP_FDS,
	STEP_EXEC,
};

static const char *const step_names[] = {
        [STEP_UNSHARE] = "unshare(CLONE_NEWNS)",
        [STEP_PRIVATE] = "making the mount namespace private",
        [STEP_TMPFS] = "mounting a tmpfs on " CONFINE_BASE,
        [STEP_SYSTEM_DIR] = "binding a system directory",
        [STEP_DEV_NULL] = "binding /dev/null",
        [STEP_LD_CACHE] = "binding " LD_CACHE,
        [STEP_FILE] = "binding a file",
        [STEP_ROOT_RDONLY] = "making the new root read-only",
        [STEP_PIVOT_ROOT] = "pivot_root",
        [STEP_CAPS] = "dropping capabilities (capset)",
        [STEP_NO_NEW_PRIVS] = "PR_SET_NO_NEW_PRIVS",
        [STEP_FDS] = "setting up stdio",
        [STEP_EXEC] = "execve",
};

/* What the child sends back when it cannot get to execve(). */
struct confine_report {
	int step;
	int index; /* of the system directory or file */
	int err;
};

/* Everything the child needs, prepared before fork(): between fork() and execve() it only makes
 * system calls (the daemon has threads; the child must not take a lock or allocate). */
struct confine_dir {
	const char *name;    /* "usr": relative to the new root */
	char source[16];     /* "/usr" */
	char link[PATH_MAX]; /* the symlink's target; "" for a bind mount */
};

struct confine_file {
	const char *name; /* relative to the new root */
	int tree_fd;      /* a detached bind mount of the file (open_tree) */
	bool writable;
};

struct confine_plan {
	struct confine_dir dirs[ELEMENTSOF(system_dirs)];
	size_t n_dirs;
	struct confine_file files[CONFINE_FILES_MAX];
	size_t n_files;
	bool ld_cache;
	int null_fd, out_fd, err_fd, max_fd;
	const char *prog;
	const char *const *argv;
};

/* The child: builds the root, enters it, drops every capability and runs the program. Reports
 * the step that failed on p->err_fd and exits 127. */
_noreturn_ static void confine_exec(const struct confine_plan *p)
{
	const unsigned long ro = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV;
	struct __user_cap_header_struct caph = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct capd[_LINUX_CAPABILITY_U32S_3] = {{0}};
	struct confine_report rep = {0};
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigset_t none;
	int fd;

	/* Signals stay blocked (the parent blocked them all) until execve(). */
	for (int sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &dfl, NULL);

	rep.step = STEP_UNSHARE;
	if (unshare(CLONE_NEWNS) < 0)
		goto fail;
	/* Nothing mounted from here on may propagate back to the host. */
	rep.step = STEP_PRIVATE;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		goto fail;
	rep.step = STEP_TMPFS;
	if (mount("slate-confined", CONFINE_BASE, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
	          "mode=0755,size=64k") < 0 ||
	    chdir(CONFINE_BASE) < 0)
		goto fail;
	rep.step = STEP_SYSTEM_DIR;
	for (size_t i = 0; i < p->n_dirs; i++) {
		rep.index = (int)i;
		if (p->dirs[i].link[0]) {
			if (symlink(p->dirs[i].link, p->dirs[i].name) < 0)
				goto fail;
		} else if (mkdir(p->dirs[i].name, 0755) < 0 ||
		           mount(p->dirs[i].source, p->dirs[i].name, NULL, MS_BIND | MS_REC, NULL) <
		                   0 ||
		           mount(NULL, p->dirs[i].name, NULL, ro, NULL) < 0)
			goto fail;
	}
	/* QEMU probes its file locks on /dev/null; nothing else of /dev is there. */
	rep.step = STEP_DEV_NULL;
	if (mkdir("dev", 0755) < 0)
		goto fail;
	fd = open("dev/null", O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC, 0666);
	if (fd < 0 || close(fd) < 0 || mount("/dev/null", "dev/null", NULL, MS_BIND, NULL) < 0)
		goto fail;
	rep.step = STEP_LD_CACHE;
	if (p->ld_cache) {
		if (mkdir("etc", 0755) < 0)
			goto fail;
		fd = open(LD_CACHE + 1, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC, 0644);
		if (fd < 0 || close(fd) < 0 ||
		    mount(LD_CACHE, LD_CACHE + 1, NULL, MS_BIND, NULL) < 0 ||
		    mount(NULL, LD_CACHE + 1, NULL, ro | MS_NOEXEC, NULL) < 0)
			goto fail;
	}
	/* Each file is the bind mount the parent cloned from its open fd: not a path that could
	 * have been replaced since the caller checked what it opened. Private, like the rest. */
	rep.step = STEP_FILE;
	for (size_t i = 0; i < p->n_files; i++) {
		rep.index = (int)i;
		fd = open(p->files[i].name, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC,
		          0600);
		if (fd < 0 || close(fd) < 0 ||
		    syscall(SYS_move_mount, p->files[i].tree_fd, "", AT_FDCWD, p->files[i].name,
		            MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
		    mount(NULL, p->files[i].name, NULL, MS_PRIVATE, NULL) < 0 ||
		    mount(NULL, p->files[i].name, NULL,
		          MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC |
		                  (p->files[i].writable ? 0 : MS_RDONLY),
		          NULL) < 0)
			goto fail;
	}
	rep.step = STEP_ROOT_RDONLY;
	if (mount(NULL, ".", NULL, ro | MS_NOEXEC, NULL) < 0)
		goto fail;
	/* The old root goes under the new one and is detached: no path leads back to it. */
	rep.step = STEP_PIVOT_ROOT;
	if (syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		goto fail;
	/* No capability, and none regained by execve() (no_new_privs caps what a root execve()
	 * gets at what the process had): the program cannot mount its way back out. */
	rep.step = STEP_CAPS;
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (syscall(SYS_capset, &caph, capd) < 0)
		goto fail;
	rep.step = STEP_NO_NEW_PRIVS;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		goto fail;
	rep.step = STEP_FDS;
	if (dup2(p->null_fd, STDIN_FILENO) < 0 || dup2(p->out_fd, STDOUT_FILENO) < 0 ||
	    dup2(p->out_fd, STDERR_FILENO) < 0)
		goto fail;
	fs_close_fds_except(&p->err_fd, 1, p->max_fd);
	(void)sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	(void)execve(p->prog, (char *const *)p->argv, environ);
	rep.step = STEP_EXEC;
fail:
	rep.err = errno;
	(void)!write(p->err_fd, &rep, sizeof(rep));
	_exit(127);
}

/* Fills the plan's system directories; ret_visible gets whether real (the program's resolved
 * path) lies under one of them. */
static int plan_system_dirs(struct confine_plan *plan, const char *real, bool *ret_visible)
{
	bool visible = false;

	for (size_t i = 0; i < ELEMENTSOF(system_dirs); i++) {
		struct confine_dir *d = &plan->dirs[plan->n_dirs];
		struct stat st;
		size_t n;

		(void)snprintf(d->source, sizeof(d->source), "/%s", system_dirs[i]);
		if (lstat(d->source, &st) < 0) {
			if (errno == ENOENT)
				continue;
			return -errno;
		}
		if (S_ISLNK(st.st_mode)) {
			ssize_t k = readlink(d->source, d->link, sizeof(d->link) - 1);
			if (k <= 0)
				return k < 0 ? -errno : -EINVAL;
			d->link[k] = '\0';
		} else if (S_ISDIR(st.st_mode)) {
			d->link[0] = '\0';
			n = strlen(d->source);
			if (strneq(real, d->source, n) && real[n] == '/')
				visible = true;
		} else
			continue;
		d->name = system_dirs[i];
		plan->n_dirs++;
	}
	*ret_visible = visible;
	return 0;
}

/* Moves fd to a number of at least 3 (so that the child's dup2() onto 0-2 clobbers none of its
 * own), keeping O_CLOEXEC. */
static int fd_above_stdio(int *fd)
{
	int n;

	if (*fd > STDERR_FILENO)
		return 0;
	n = fcntl(*fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
	if (n < 0)
		return -errno;
	(void)safe_close(*fd);
	*fd = n;
	return 0;
}

static void confine_plan_free(struct confine_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_files; i++)
		(void)safe_close(p->files[i].tree_fd);
	free(p);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(struct confine_plan *, confine_plan_free);

/* The confinement could not be set up: says which step and why in *out, handed to *ret_output. */
static int confine_failed(const char *prog, const char *what, const char *which, int err,
                          char **out, char **ret_output)
{
	(void)snprintf(*out, SPAWN_OUTPUT_MAX + 1, "confining %s: %s%s%s: %s", prog, what,
	               *which ? " " : "", which, strerror(err));
	log_debug("%s", *out);
	if (ret_output)
		*ret_output = TAKE_PTR(*out);
	return err > 0 ? -err : -EIO;
}

static bool file_name_ok(const char *path)
{
	const char *name = path ? path + 1 : NULL;

	if (!path || path[0] != '/' || !*name || strchr(name, '/') || streq(name, ".") ||
	    streq(name, "..") || streq(name, "dev") || streq(name, "etc"))
		return false;
	for (size_t i = 0; i < ELEMENTSOF(system_dirs); i++)
		if (streq(name, system_dirs[i]))
			return false;
	return true;
}

int spawn_run_confined(const char *const *argv, const struct spawn_file *files, size_t n_files,
                       char **ret_output)
{
	_cleanup_free_ char *prog = NULL, *real = NULL, *out = NULL;
	_cleanup_close_ int rd = -1, wr = -1, null = -1, erd = -1, ewr = -1;
	_cleanup_(confine_plan_freep) struct confine_plan *plan = NULL;
	struct confine_report rep;
	sigset_t all, saved;
	bool visible = false;
	long max_fd;
	ssize_t n;
	pid_t pid;
	int p[2], r;

	if (!argv || !argv[0] || (n_files > 0 && !files) || n_files > CONFINE_FILES_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n_files; i++) {
		if (files[i].fd < 0 || !file_name_ok(files[i].path))
			return -EINVAL;
		for (size_t j = 0; j < i; j++)
			if (streq(files[i].path, files[j].path))
				return -EINVAL;
	}
	r = find_program(argv[0], &prog);
	if (r < 0)
		return r;
	real = realpath(prog, NULL);
	if (!real)
		return -errno;
	plan = calloc(1, sizeof(*plan));
	out = malloc(SPAWN_OUTPUT_MAX + 1);
	if (!plan || !out)
		return -ENOMEM;
	r = plan_system_dirs(plan, real, &visible);
	if (r < 0)
		return r;
	if (!visible) {
		(void)snprintf(out, SPAWN_OUTPUT_MAX + 1,
		               "%s is outside the system directories a confined program sees "
		               "(/usr, /bin, /sbin, /lib*)",
		               real);
		if (ret_output)
			*ret_output = TAKE_PTR(out);
		return -ENOTSUP;
	}
	/* Cloned here, in our namespace: a mount made from an fd opened before unshare() belongs to
	 * this namespace, and the child's mount(MS_BIND) of it would be refused. */
	for (size_t i = 0; i < n_files; i++) {
		int t = (int)syscall(SYS_open_tree, files[i].fd, "",
		                     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
		if (t < 0)
			return confine_failed(argv[0], "open_tree", files[i].path, errno, &out,
			                      ret_output);
		plan->files[i].name = files[i].path + 1;
		plan->files[i].tree_fd = t;
		plan->files[i].writable = files[i].writable;
		plan->n_files++;
	}

	null = open("/dev/null", O_RDONLY | O_NOCTTY | O_CLOEXEC);
	if (null < 0)
		return -errno;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	rd = p[0];
	wr = p[1];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	erd = p[0];
	ewr = p[1];
	r = fd_above_stdio(&null);
	if (r >= 0)
		r = fd_above_stdio(&wr);
	if (r >= 0)
		r = fd_above_stdio(&ewr);
	if (r < 0)
		return r;
	max_fd = sysconf(_SC_OPEN_MAX);
	plan->max_fd =
	        max_fd > 0 && max_fd < CONFINE_FD_SCAN_MAX ? (int)max_fd : CONFINE_FD_SCAN_MAX;
	{
		struct stat st;
		plan->ld_cache = stat(LD_CACHE, &st) == 0 && S_ISREG(st.st_mode);
	}
	plan->null_fd = null;
	plan->out_fd = wr;
	plan->err_fd = ewr;
	plan->prog = real;
	plan->argv = argv;

	/* Blocked across fork(): no handler of the daemon's may run in the child. */
	(void)sigfillset(&all);
	(void)pthread_sigmask(SIG_SETMASK, &all, &saved);
	pid = fork();
	if (pid == 0)
		confine_exec(plan);
	r = pid < 0 ? -errno : 0;
	(void)pthread_sigmask(SIG_SETMASK, &saved, NULL);
	if (r < 0)
		return r;
	wr = safe_close(wr);
	ewr = safe_close(ewr);

	/* EOF: the program runs (the report pipe closed on execve). */
	do
		n = read(erd, &rep, sizeof(rep));
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(rep)) {
		const char *what = rep.step >= 0 && rep.step < (int)ELEMENTSOF(step_names)
		                           ? step_names[rep.step]
		                           : "?";
		const char *which = "";

		if (rep.step == STEP_SYSTEM_DIR && rep.index >= 0 &&
		    (size_t)rep.index < plan->n_dirs)
			which = plan->dirs[rep.index].source;
		else if (rep.step == STEP_FILE && rep.index >= 0 && (size_t)rep.index < n_files)
			which = files[rep.index].path;
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return confine_failed(argv[0], what, which, rep.err, &out, ret_output);
	}
	return collect(pid, rd, real, SPAWN_OUTPUT_MAX, &out, ret_output);
}

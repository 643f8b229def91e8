/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/openssh.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/time.h"

#define TOOL_OUTPUT_MAX 4096u
#define TOOL_TIMEOUT_MS 60000u
#define AGENT_START_TIMEOUT_MS 10000u
#define AGENT_SOCKET_NAME "agent.sock"
#define OPENSSH_KEY_HEADER "-----BEGIN OPENSSH PRIVATE KEY-----"

struct openssh_agent {
	pid_t pid;       /* the shell, our child */
	pid_t agent_pid; /* ssh-agent itself (the shell's parent until it execs; then its child) */
	int pidfd;       /* of ssh-agent, or -1 */
	int keep_fd;     /* the pipe the shell's cat reads until slated goes */
	int parent_fd;   /* the directory holding ours */
	int dirfd;       /* ours, 0700, holding agent.sock */
	char name[256];
};

/* Finds argv[0] in the system directories; OpenSSH lives in /usr/bin on every distribution we
 * care about, and $PATH is not consulted (a daemon's environment is not the user's). */
static int find_tool(const char *name, char *buf, size_t len)
{
	static const char *const dirs[] = {"/usr/bin", "/bin", "/usr/local/bin"};

	for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
		struct stat st;

		(void)snprintf(buf, len, "%s/%s", dirs[i], name);
		if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

/*
 * Spawns argv with stdin/stdout/stderr on the given fds (-1: /dev/null), fd3 as fd 3 (-1: none)
 * and cwd_fd as the working directory (-1: "/"), in a new session, with a clean environment
 * plus SSH_AUTH_SOCK=auth_sock when given.
 */
static int spawn_tool(const char *const *argv, int in, int out, int err, int fd3, int cwd_fd,
                      const char *auth_sock, pid_t *ret_pid)
{
	_cleanup_close_ int null = -1;
	char prog[256], sockenv[300];
	const char *envp[] = {"PATH=/usr/bin:/bin", "LC_ALL=C", NULL, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	pid_t pid;
	int r;

	r = find_tool(argv[0], prog, sizeof(prog));
	if (r < 0)
		return r;
	if (auth_sock) {
		(void)snprintf(sockenv, sizeof(sockenv), "SSH_AUTH_SOCK=%s", auth_sock);
		envp[2] = sockenv;
	}
	null = open("/dev/null", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (null < 0)
		return -errno;
	r = posix_spawn_file_actions_init(&fa);
	if (r != 0)
		return -r;
	r = posix_spawnattr_init(&attr);
	if (r != 0) {
		(void)posix_spawn_file_actions_destroy(&fa);
		return -r;
	}
	(void)sigemptyset(&none);
	(void)sigfillset(&all);
	r = posix_spawn_file_actions_adddup2(&fa, in >= 0 ? in : null, STDIN_FILENO);
	if (r == 0)
		r = posix_spawn_file_actions_adddup2(&fa, out >= 0 ? out : null, STDOUT_FILENO);
	if (r == 0)
		r = posix_spawn_file_actions_adddup2(&fa, err >= 0 ? err : null, STDERR_FILENO);
	if (r == 0 && fd3 >= 0)
		r = posix_spawn_file_actions_adddup2(&fa, fd3, 3);
	if (r == 0)
		r = cwd_fd >= 0 ? posix_spawn_file_actions_addfchdir_np(&fa, cwd_fd)
		                : posix_spawn_file_actions_addchdir_np(&fa, "/");
	/* No fd of the daemon (API connections, guest channels, other keys) reaches a tool. */
	if (r == 0)
		r = posix_spawn_file_actions_addclosefrom_np(&fa, fd3 >= 0 ? 4 : 3);
	if (r == 0)
		r = posix_spawnattr_setsigmask(&attr, &none);
	if (r == 0)
		r = posix_spawnattr_setsigdefault(&attr, &all);
	/* A session of its own: no controlling terminal, so passphrases come from stdin only. */
	if (r == 0)
		r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
		                                            POSIX_SPAWN_SETSID);
	if (r == 0)
		r = posix_spawn(&pid, prog, &fa, &attr, (char *const *)argv, (char *const *)envp);
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)posix_spawnattr_destroy(&attr);
	if (r != 0)
		return -r;
	*ret_pid = pid;
	return 0;
}

/* Keeps what tools print printable: it ends up in replies and logs. */
static void tidy(char *s, size_t *len)
{
	while (*len > 0 && (s[*len - 1] == '\n' || s[*len - 1] == '\r' || s[*len - 1] == ' '))
		(*len)--;
	s[*len] = '\0';
	for (size_t i = 0; i < *len; i++)
		if ((unsigned char)s[i] < 0x20 && s[i] != '\n')
			s[i] = ' ';
}

struct tool_result {
	int status; /* exit status, or -1 when it died or was killed */
	char out[TOOL_OUTPUT_MAX + 1];
	char err[TOOL_OUTPUT_MAX + 1];
};

/* Runs a tool to its end: input on its stdin, stdout and stderr kept (the first 4 KiB each). */
static int run_tool(const char *const *argv, const void *input, size_t input_len, int fd3,
                    int cwd_fd, const char *auth_sock, struct tool_result *res)
{
	_cleanup_close_ int in_r = -1, in_w = -1, out_r = -1, out_w = -1, err_r = -1, err_w = -1;
	size_t out_len = 0, err_len = 0;
	int p[2], status, r;
	int64_t deadline;
	pid_t pid;

	*res = (struct tool_result){.status = -1};
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	in_r = p[0], in_w = p[1];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	out_r = p[0], out_w = p[1];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	err_r = p[0], err_w = p[1];
	/* The whole input fits into the pipe, so writing it never waits for the tool. */
	if (input_len >= 65536 && fcntl(in_w, F_SETPIPE_SZ, (int)input_len + 1) < 0)
		return -errno;
	r = spawn_tool(argv, in_r, out_w, err_w, fd3, cwd_fd, auth_sock, &pid);
	if (r < 0)
		return r;
	in_r = safe_close(in_r);
	out_w = safe_close(out_w);
	err_w = safe_close(err_w);
	r = 0;
	if (input_len > 0) {
		(void)fs_set_nonblock(in_w, true);
		ssize_t n = write(in_w, input, input_len);
		if (n != (ssize_t)input_len)
			r = n < 0 ? -errno : -EIO;
	}
	in_w = safe_close(in_w);

	deadline = time_mono_ms() + TOOL_TIMEOUT_MS;
	while (out_r >= 0 || err_r >= 0) {
		struct pollfd pfd[2] = {{.fd = out_r, .events = POLLIN},
		                        {.fd = err_r, .events = POLLIN}};
		int64_t left = deadline - time_mono_ms();
		int pr;

		if (left <= 0) {
			(void)kill(pid, SIGKILL);
			r = -ETIMEDOUT;
			break;
		}
		pr = poll(pfd, 2, (int)left);
		if (pr < 0 && errno != EINTR) {
			r = -errno;
			(void)kill(pid, SIGKILL);
			break;
		}
		for (int i = 0; pr > 0 && i < 2; i++) {
			char *dst = i == 0 ? res->out : res->err;
			size_t *len = i == 0 ? &out_len : &err_len;
			int *fd = i == 0 ? &out_r : &err_r;
			char sink[512];
			ssize_t n;

			if (!pfd[i].revents)
				continue;
			if (*len < TOOL_OUTPUT_MAX)
				n = read(*fd, dst + *len, TOOL_OUTPUT_MAX - *len);
			else
				n = read(*fd, sink, sizeof(sink));
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n <= 0) {
				*fd = safe_close(*fd);
				continue;
			}
			if (*len < TOOL_OUTPUT_MAX)
				*len += (size_t)n;
		}
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	tidy(res->out, &out_len);
	tidy(res->err, &err_len);
	res->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	log_debug("%s exited with status %d%s%s", argv[0], res->status, err_len ? ": " : "",
	          res->err);
	return r;
}

/* A memfd holding data, 0600 (ssh-keygen refuses key files others may read). */
static int memfd_with(const void *data, size_t len)
{
	_cleanup_close_ int fd = memfd_create("slate-ssh-key", MFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0600) < 0)
		return -errno;
	if (len > 0 && fs_write_all(fd, data, len) < 0)
		return -EIO;
	return TAKE_FD(fd);
}

static void memfd_wipe(int *fd)
{
	if (*fd < 0)
		return;
	/* The pages go back to the kernel now rather than when the fd is closed. */
	(void)ftruncate(*fd, 0);
	*fd = safe_close(*fd);
}

/* The last line of what a tool said, for the user. */
static const char *last_line(const char *s)
{
	const char *nl = strrchr(s, '\n');

	return nl ? nl + 1 : s;
}

int openssh_key_normalize(const void *key, size_t len, const char *passphrase, struct buf **ret_key,
                          char **ret_public, struct slate_error *err)
{
	static const char *const change[] = {"ssh-keygen", "-q", "-p",        "-N",
	                                     "",           "-f", "/dev/fd/3", NULL};
	static const char *const public[] = {"ssh-keygen", "-y", "-f", "/dev/fd/3", NULL};
	_cleanup_buf_secure_ struct buf *out = NULL;
	_cleanup_buf_secure_ struct buf *pass = NULL;
	_cleanup_(memfd_wipe) int fd = -1;
	struct tool_result *res = NULL;
	struct stat st;
	uint8_t *p;
	size_t plen = passphrase ? strlen(passphrase) : 0;
	int r;

	if (!key || len == 0 || len > OPENSSH_KEY_MAX || memchr(key, '\0', len))
		return slate_error_set(err, -EINVAL, "empty, over %u KiB, or holding a NUL byte",
		                       OPENSSH_KEY_MAX / 1024);
	if (plen > OPENSSH_PASSPHRASE_MAX || (passphrase && strpbrk(passphrase, "\r\n")))
		return slate_error_set(err, -EINVAL,
		                       "the passphrase is over %u bytes or holds a line break",
		                       OPENSSH_PASSPHRASE_MAX);
	res = calloc(1, sizeof(*res));
	if (!res)
		return slate_error_errno(err, -ENOMEM, "reading the key");
	fd = memfd_with(key, len);
	if (fd < 0) {
		r = slate_error_errno(err, fd, "a memfd for the key");
		goto out;
	}
	/* The old passphrase, one line on stdin; with none, stdin is empty and a protected key
	 * fails to open ("incorrect passphrase"). */
	pass = buf_new_secure(plen + 1);
	if (!pass || buf_put(pass, passphrase ? passphrase : "", plen) < 0 ||
	    buf_put_u8(pass, '\n') < 0) {
		r = slate_error_errno(err, -ENOMEM, "reading the key");
		goto out;
	}
	r = run_tool(change, buf_ptr(pass), passphrase ? buf_len(pass) : 0, fd, -1, NULL, res);
	if (r < 0) {
		(void)slate_error_errno(err, r, "running ssh-keygen");
		goto out;
	}
	if (res->status != 0) {
		if (strstr(res->err, "incorrect passphrase"))
			r = passphrase && *passphrase
			            ? slate_error_set(err, -EKEYREJECTED,
			                              "the passphrase does not open the key")
			            : slate_error_set(err, -ENOKEY,
			                              "the key is protected by a passphrase");
		else
			r = slate_error_set(err, -EINVAL, "%s",
			                    last_line(res->err[0] ? res->err : res->out));
		goto out;
	}
	r = run_tool(public, NULL, 0, fd, -1, NULL, res);
	if (r < 0) {
		(void)slate_error_errno(err, r, "running ssh-keygen");
		goto out;
	}
	if (res->status != 0 || !res->out[0] || strchr(res->out, '\n')) {
		r = slate_error_set(err, -EINVAL, "%s", last_line(res->err));
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		r = slate_error_errno(err, -errno, "the key's memfd");
		goto out;
	}
	if (st.st_size <= 0 || (uint64_t)st.st_size > 2 * OPENSSH_KEY_MAX) {
		r = slate_error_set(err, -EINVAL, "ssh-keygen wrote a key of %lld bytes",
		                    (long long)st.st_size);
		goto out;
	}
	out = buf_new_secure((size_t)st.st_size);
	if (!out || buf_reserve(out, (size_t)st.st_size, &p) < 0) {
		r = slate_error_errno(err, -ENOMEM, "reading the key");
		goto out;
	}
	if (pread(fd, p, (size_t)st.st_size, 0) != st.st_size) {
		r = slate_error_errno(err, -EIO, "reading back the key ssh-keygen wrote");
		goto out;
	}
	if (!strneq((const char *)p, OPENSSH_KEY_HEADER, strlen(OPENSSH_KEY_HEADER))) {
		r = slate_error_set(err, -EINVAL, "ssh-keygen did not write an OpenSSH key");
		goto out;
	}
	*ret_public = strdup(res->out);
	if (!*ret_public) {
		r = slate_error_errno(err, -ENOMEM, "reading the key");
		goto out;
	}
	*ret_key = TAKE_PTR(out);
	r = 0;
out:
	free(res);
	return r;
}

/* ---- the private agent ---- */

static int remove_dir_at(int parent_fd, const char *name)
{
	_cleanup_close_ int fd =
	        openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_(closedirp) DIR *d = NULL;
	struct dirent *de;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	d = fdopendir(fd);
	if (!d)
		return -errno;
	fd = -1;
	while ((de = readdir(d)))
		if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
			(void)unlinkat(dirfd(d), de->d_name, 0);
	if (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

static int agent_signal(const struct openssh_agent *a, int sig)
{
#ifdef SYS_pidfd_send_signal
	if (a->pidfd >= 0)
		return (int)syscall(SYS_pidfd_send_signal, a->pidfd, sig, NULL, 0);
#endif
	return a->agent_pid > 0 ? kill(a->agent_pid, sig) : 0;
}

void openssh_agent_stop(struct openssh_agent *a)
{
	int status;

	if (!a)
		return;
	(void)agent_signal(a, SIGTERM);
	a->keep_fd = safe_close(a->keep_fd); /* the shell's cat sees EOF */
	if (a->pid > 0) {
		(void)kill(a->pid, SIGTERM);
		while (waitpid(a->pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	a->pidfd = safe_close(a->pidfd);
	a->dirfd = safe_close(a->dirfd);
	if (a->parent_fd >= 0)
		(void)remove_dir_at(a->parent_fd, a->name);
	a->parent_fd = safe_close(a->parent_fd);
	free(a);
}

int openssh_agent_start(int parent_dirfd, const char *name, struct openssh_agent **ret,
                        struct slate_error *err)
{
	static const char *const argv[] = {
	        "ssh-agent", "-a", AGENT_SOCKET_NAME, "/bin/sh", "-c",
	        /* $SSH_AGENT_PID is ssh-agent's; cat holds the pipe until slated closes it. */
	        "echo \"$SSH_AGENT_PID\"; exec cat >/dev/null", NULL};
	_cleanup_(openssh_agent_stopp) struct openssh_agent *a = NULL;
	_cleanup_close_ int in_r = -1, out_r = -1, out_w = -1;
	char line[64];
	size_t len = 0;
	int64_t deadline;
	int p[2], r;

	if (!name || !*name || strchr(name, '/') || strlen(name) >= sizeof(a->name))
		return slate_error_set(err, -EINVAL, "invalid name for a private agent");
	a = calloc(1, sizeof(*a));
	if (!a)
		return slate_error_errno(err, -ENOMEM, "starting ssh-agent");
	*a = (struct openssh_agent){.pid = -1, .pidfd = -1, .keep_fd = -1, .dirfd = -1};
	(void)snprintf(a->name, sizeof(a->name), "%s", name);
	a->parent_fd = fcntl(parent_dirfd, F_DUPFD_CLOEXEC, 3);
	if (a->parent_fd < 0)
		return slate_error_errno(err, -errno, "starting ssh-agent");
	r = remove_dir_at(a->parent_fd, name);
	if (r < 0)
		return slate_error_errno(err, r, "removing the old directory of ssh-agent %s",
		                         name);
	if (mkdirat(a->parent_fd, name, 0700) < 0)
		return slate_error_errno(err, -errno, "creating the directory of ssh-agent %s",
		                         name);
	a->dirfd = openat(a->parent_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (a->dirfd < 0)
		return slate_error_errno(err, -errno, "opening the directory of ssh-agent %s",
		                         name);
	if (pipe2(p, O_CLOEXEC) < 0)
		return slate_error_errno(err, -errno, "starting ssh-agent");
	in_r = p[0], a->keep_fd = p[1];
	if (pipe2(p, O_CLOEXEC) < 0)
		return slate_error_errno(err, -errno, "starting ssh-agent");
	out_r = p[0], out_w = p[1];
	r = spawn_tool(argv, in_r, out_w, out_w, -1, a->dirfd, NULL, &a->pid);
	if (r < 0)
		return slate_error_errno(err, r, "starting ssh-agent");
	in_r = safe_close(in_r);
	out_w = safe_close(out_w);

	/* The first line is ssh-agent's pid, printed once its socket is bound. */
	deadline = time_mono_ms() + AGENT_START_TIMEOUT_MS;
	while (len < sizeof(line) - 1 && !memchr(line, '\n', len)) {
		struct pollfd pfd = {.fd = out_r, .events = POLLIN};
		int64_t left = deadline - time_mono_ms();
		ssize_t n;

		if (left <= 0)
			return slate_error_errno(err, -ETIMEDOUT, "waiting for ssh-agent to start");
		if (poll(&pfd, 1, (int)left) < 0) {
			if (errno == EINTR)
				continue;
			return slate_error_errno(err, -errno, "waiting for ssh-agent to start");
		}
		n = read(out_r, line + len, sizeof(line) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	line[len] = '\0';
	{
		char *end;
		long v = strtol(line, &end, 10);

		if (v <= 1 || *end != '\n') {
			tidy(line, &len);
			return slate_error_set(err, -EIO, "ssh-agent did not start: %s",
			                       len ? line : "no output");
		}
		a->agent_pid = (pid_t)v;
	}
	a->pidfd = pidfd_open_(a->agent_pid);
	*ret = TAKE_PTR(a);
	return 0;
}

int openssh_agent_add(struct openssh_agent *a, const void *key, size_t len, struct slate_error *err)
{
	static const char *const argv[] = {"ssh-add", "-q", "-", NULL};
	struct tool_result *res = calloc(1, sizeof(*res));
	int r;

	if (!res)
		return slate_error_errno(err, -ENOMEM, "running ssh-add");
	r = run_tool(argv, key, len, -1, a->dirfd, AGENT_SOCKET_NAME, res);
	if (r < 0)
		(void)slate_error_errno(err, r, "running ssh-add");
	else if (res->status != 0)
		/* What ssh-add said is the whole story: no errno of ours to add. */
		r = slate_error_set(err, -EIO, "%s", last_line(res->err[0] ? res->err : res->out));
	free(res);
	return r;
}

int openssh_agent_connect(const struct openssh_agent *a)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;

	/* The directory by its fd: the socket's path may be longer than sun_path allows. */
	(void)snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", a->dirfd,
	               AGENT_SOCKET_NAME);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return TAKE_FD(fd);
}

void openssh_agent_sweep(int parent_dirfd)
{
	_cleanup_(closedirp) DIR *d = NULL;
	int fd = openat(parent_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;

	if (fd < 0)
		return;
	d = fdopendir(fd);
	if (!d) {
		(void)close(fd);
		return;
	}
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			(void)remove_dir_at(parent_dirfd, de->d_name);
}

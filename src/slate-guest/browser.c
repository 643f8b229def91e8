/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The browser VM's Chromium (issue 24; doc/guest-channel.md, "The browser VM"). The host opens a
 * "browser" stream (or runs slate-guest --browser through an exec session, for tests) and
 * writes text lines:
 *
 *   [ca LEN\n PEM]  [persist HEXKEY\n]  [window WxH\n]  start\n  ...  [stop\n]
 *
 * and the agent answers "ok ready_ms=N" once Chromium's DevTools answer on 127.0.0.1:9223 (or
 * "error TEXT"), "exited STATUS" when Chromium exits by itself, and "stopped ms=N" once it is
 * stopped and its profile closed. One browser at a time.
 *
 * Nothing here blocks the loop for long: the setup (the CA into the NSS database, the encrypted
 * profile disk: cryptsetup, mkfs.ext4, mount) and the teardown (umount, cryptsetup close) run in
 * a forked helper process that reports one line on a pipe; Chromium is a child whose exit
 * exec.c's SIGCHLD handling reports (child_watch()); the readiness probe is a non-blocking HTTP
 * request. The profile key only ever lives in this process's memory (and the helper's, a copy of
 * it) and in the pipe to cryptsetup's stdin: never in argv, the environment or a file.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "browser-req.h"
#include "guest.h"

#define BROWSER_LOG "/run/slate/browser.log"
#define CA_FILE "/run/slate/browser-egress-ca.pem"
#define PROFILE_TMP "/run/slate/browser-profile"
#define PERSIST_DEV "/dev/vdb"
#define PERSIST_NAME "slate-profile"
#define PERSIST_MAPPER "/dev/mapper/" PERSIST_NAME
#define PERSIST_MNT "/var/lib/slate-browser"
#define PERSIST_PROFILE PERSIST_MNT "/profile"
#define CA_NICKNAME "slate-egress"
#define PATH_ENV "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#define READY_TIMEOUT_MS (120 * 1000) /* TCG: Chromium takes 15 s to answer, more when busy */
#define PROBE_EVERY_MS 250
#define TERM_WAIT_MS (10 * 1000) /* SIGTERM, then SIGKILL */
#define OUT_MAX 4096
#define MSG_MAX 256 /* a line of text we send: the channel's text limit */

enum bstate {
	B_REQUEST,  /* reading the request up to "start" */
	B_SETUP,    /* the helper sets up the profile and the CA */
	B_STARTING, /* Chromium runs; DevTools have not answered yet */
	B_READY,    /* "ok" sent */
	B_STOPPING, /* SIGTERM sent, waiting for Chromium's exit */
	B_TEARDOWN, /* the helper closes the profile */
	B_DONE,     /* the last line is queued */
};

struct browser {
	struct stream *s; /* the "browser" stream; NULL with --browser or once it is gone */
	bool stdio;       /* --browser: the request on stdin, the answers on stdout */
	bool in_eof;      /* no more input */
	bool out_gone;    /* nothing can be sent any more */
	bool failed;      /* an "error" line was sent (--browser's exit status) */
	enum bstate state;
	struct browser_req req;
	char line[BROWSER_LINE_MAX + 1];
	size_t line_len;
	bool line_long;
	uint8_t *ca; /* reading req.ca_len bytes of PEM while ca_have < ca_len */
	size_t ca_have;
	char out[OUT_MAX];
	size_t out_len;
	int64_t t_start, t_stop;
	bool stop_wanted;
	/* the helper process */
	pid_t helper;
	int helper_fd;
	char helper_msg[MSG_MAX + 8];
	size_t helper_len;
	/* Chromium */
	pid_t chrome;
	int chrome_status;
	bool chrome_reaped;
	int64_t ready_deadline, probe_at, kill_at;
	int probe_fd;
	bool probe_connected;
	char probe_buf[32];
	size_t probe_len;
};

static struct browser *cur;

/* ---- output ---- */

__attribute__((format(printf, 2, 3))) static void emit(struct browser *b, const char *fmt, ...)
{
	char line[MSG_MAX + 2];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, MSG_MAX + 1, fmt, ap);
	va_end(ap);
	if (n < 0 || b->out_gone)
		return;
	n = (int)strlen(line);
	/* Text crosses to the host: no control characters. */
	for (int i = 0; i < n; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = ' ';
	line[n++] = '\n';
	if (b->out_len + (size_t)n > sizeof(b->out))
		return;
	memcpy(b->out + b->out_len, line, (size_t)n);
	b->out_len += (size_t)n;
}

static void out_flush(struct browser *b)
{
	if (b->out_gone) {
		b->out_len = 0;
		return;
	}
	if (b->stdio) {
		size_t off = 0;
		while (off < b->out_len) {
			ssize_t n = write(STDOUT_FILENO, b->out + off, b->out_len - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				b->out_gone = true;
				break;
			}
			off += (size_t)n;
		}
		b->out_len = 0;
		return;
	}
	struct stream *s = b->s;
	if (!s || s->dead || s->sent_close || s->sent_eof) {
		b->out_gone = true;
		b->out_len = 0;
		return;
	}
	size_t n = b->out_len < s->send_win ? b->out_len : s->send_win;
	if (n == 0 || chan_send(CH_DATA, s->id, b->out, (uint32_t)n, NULL, 0) < 0)
		return;
	s->send_win -= (uint32_t)n;
	memmove(b->out, b->out + n, b->out_len - n);
	b->out_len -= n;
}

/* ---- child processes ---- */

/* In a child: default signals, none blocked (Chromium and the tools must not inherit ours). */
static void child_signals(void)
{
	sigset_t none;

	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)signal(sig, SIG_DFL);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
}

static int become(const struct guest_user *u)
{
	gid_t groups[64];
	int n = user_groups(u, groups, 64);

	if (setgroups((size_t)n, groups) < 0 || setgid(u->gid) < 0 || setuid(u->uid) < 0)
		return -errno;
	return 0;
}

/* The workspace user (slate, uid 1000) who runs Chromium; never root. */
static int chrome_user(struct guest_user *u)
{
	int r = user_lookup(NULL, 0, 1000, u);

	if (r < 0)
		return r;
	return u->uid == 0 ? -EPERM : 0;
}

/* ---- the helper's steps (a forked process; blocking is fine there) ---- */

/* Runs argv (PATH searched) as user u (NULL: root) with in on its stdin; its output's last line
 * goes into msg. Returns its exit status, or -errno when it could not run. */
static int run(const char *const argv[], const struct guest_user *u, const void *in, size_t in_len,
               char *msg, size_t cap)
{
	int in_p[2], out_p[2], status;
	char buf[4096];
	size_t len = 0;
	pid_t pid;

	msg[0] = '\0';
	if (pipe2(in_p, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(out_p, O_CLOEXEC) < 0) {
		int e = errno;
		(void)close(in_p[0]);
		(void)close(in_p[1]);
		return -e;
	}
	pid = fork();
	if (pid < 0) {
		int e = errno;
		(void)close(in_p[0]);
		(void)close(in_p[1]);
		(void)close(out_p[0]);
		(void)close(out_p[1]);
		return -e;
	}
	if (pid == 0) {
		char home[600], user[80];
		const char *env[] = {PATH_ENV, home, user, "LC_ALL=C", NULL};
		extern char **environ;

		child_signals();
		snprintf(home, sizeof(home), "HOME=%s", u ? u->home : "/root");
		snprintf(user, sizeof(user), "USER=%s", u ? u->name : "root");
		if (dup2(in_p[0], 0) < 0 || dup2(out_p[1], 1) < 0 || dup2(out_p[1], 2) < 0)
			_exit(126);
		if (u && become(u) < 0) {
			dprintf(2, "cannot become %s: %s\n", u->name, strerror(errno));
			_exit(126);
		}
		environ = (char **)env;
		execvp(argv[0], (char *const *)argv);
		dprintf(2, "%s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	(void)close(in_p[0]);
	(void)close(out_p[1]);
	for (size_t off = 0; off < in_len;) {
		ssize_t n = write(in_p[1], (const uint8_t *)in + off, in_len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	(void)close(in_p[1]);
	for (;;) {
		ssize_t n;
		if (len == sizeof(buf)) {
			/* Keep the tail: the last line is what is wanted. */
			memmove(buf, buf + sizeof(buf) / 2, sizeof(buf) / 2);
			len = sizeof(buf) / 2;
		}
		n = read(out_p[0], buf + len, sizeof(buf) - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	(void)close(out_p[0]);
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		len--;
	size_t start = len;
	while (start > 0 && buf[start - 1] != '\n')
		start--;
	snprintf(msg, cap, "%.*s", (int)(len - start), buf + start);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

/* "error ..." into msg; returns -1. */
__attribute__((format(printf, 3, 4))) static int step_fail(char *msg, size_t cap, const char *fmt,
                                                           ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
	return -1;
}

static int mkdir_owned(const char *path, mode_t mode, const struct guest_user *u)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	if (u && chown(path, u->uid, u->gid) < 0)
		return -errno;
	return chmod(path, mode) < 0 ? -errno : 0;
}

/* Removes a profile directory left on tmpfs (ours: a fixed path under /run/slate). */
static int remove_tree(const char *path, char *msg, size_t cap)
{
	const char *argv[] = {"rm", "-rf", path, NULL};
	char out[MSG_MAX];
	int r = run(argv, NULL, NULL, 0, out, sizeof(out));

	if (r != 0)
		return step_fail(msg, cap, "cannot remove %s: %s", path,
		                 r < 0 ? strerror(-r) : out);
	return 0;
}

/* Whether the opened profile device holds an ext4 (its superblock's magic). */
static bool has_ext4(const char *dev)
{
	uint8_t magic[2];
	int fd = open(dev, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? pread(fd, magic, 2, 1024 + 56) : -1;

	if (fd >= 0)
		(void)close(fd);
	return n == 2 && magic[0] == 0x53 && magic[1] == 0xef;
}

/* The encrypted profile disk: LUKS2 on /dev/vdb (formatted the first time), opened as
 * /dev/mapper/slate-profile, ext4 inside, mounted at PERSIST_MNT. The key goes on cryptsetup's
 * stdin, as binary bytes. */
static int persist_open(const uint8_t *key, const struct guest_user *u, char *msg, size_t cap)
{
	char keysize[16], out[MSG_MAX];
	int r;

	snprintf(keysize, sizeof(keysize), "%d", BROWSER_KEY_LEN);
	if (access(PERSIST_DEV, F_OK) < 0)
		return step_fail(msg, cap, "persist: no profile disk %s", PERSIST_DEV);
	/* Left open by an agent that died: closed, so that this key is the one checked. */
	if (access(PERSIST_MAPPER, F_OK) == 0) {
		const char *argv[] = {"cryptsetup", "close", PERSIST_NAME, NULL};
		(void)umount2(PERSIST_MNT, MNT_DETACH);
		(void)run(argv, NULL, NULL, 0, out, sizeof(out));
	}
	{
		const char *argv[] = {"cryptsetup", "isLuks", PERSIST_DEV, NULL};
		r = run(argv, NULL, NULL, 0, out, sizeof(out));
	}
	if (r < 0)
		return step_fail(msg, cap, "cannot run cryptsetup: %s", strerror(-r));
	if (r != 0) {
		/* A random key: a slow KDF buys nothing, and TCG makes argon2 very slow. */
		const char *argv[] = {"cryptsetup",
		                      "luksFormat",
		                      "--type",
		                      "luks2",
		                      "--pbkdf",
		                      "pbkdf2",
		                      "--pbkdf-force-iterations",
		                      "1000",
		                      "--batch-mode",
		                      "--key-file",
		                      "-",
		                      "--keyfile-size",
		                      keysize,
		                      PERSIST_DEV,
		                      NULL};
		r = run(argv, NULL, key, BROWSER_KEY_LEN, out, sizeof(out));
		if (r != 0)
			return step_fail(msg, cap, "cryptsetup luksFormat: %s",
			                 r < 0 ? strerror(-r) : out);
		guest_log("browser: formatted %s (LUKS2)", PERSIST_DEV);
	}
	{
		const char *argv[] = {
		        "cryptsetup",     "open",  "--type",    "luks2",      "--key-file", "-",
		        "--keyfile-size", keysize, PERSIST_DEV, PERSIST_NAME, NULL};
		r = run(argv, NULL, key, BROWSER_KEY_LEN, out, sizeof(out));
	}
	if (r != 0)
		return step_fail(msg, cap, "cryptsetup open: %s", r < 0 ? strerror(-r) : out);
	if (!has_ext4(PERSIST_MAPPER)) {
		const char *argv[] = {"mkfs.ext4",     "-q",           "-L",
		                      "slate-profile", PERSIST_MAPPER, NULL};
		r = run(argv, NULL, NULL, 0, out, sizeof(out));
		if (r != 0)
			return step_fail(msg, cap, "mkfs.ext4: %s", r < 0 ? strerror(-r) : out);
	}
	if ((mkdir("/var/lib", 0755) < 0 && errno != EEXIST) ||
	    (mkdir(PERSIST_MNT, 0755) < 0 && errno != EEXIST))
		return step_fail(msg, cap, "mkdir %s: %s", PERSIST_MNT, strerror(errno));
	if (mount(PERSIST_MAPPER, PERSIST_MNT, "ext4", MS_NOSUID | MS_NODEV, NULL) < 0)
		return step_fail(msg, cap, "mount %s: %s", PERSIST_MAPPER, strerror(errno));
	r = mkdir_owned(PERSIST_MNT, 0755, u);
	if (r == 0)
		r = mkdir_owned(PERSIST_PROFILE, 0700, u);
	if (r < 0)
		return step_fail(msg, cap, "mkdir %s: %s", PERSIST_PROFILE, strerror(-r));
	return 0;
}

/* The egress CA into the NSS database Chromium reads ($HOME/.pki/nssdb), as the user. */
static int ca_install(const uint8_t *pem, size_t len, const struct guest_user *u, char *msg,
                      size_t cap)
{
	char pki[600], db[620], sqldb[630], cert9[640], out[MSG_MAX];
	int r;

	snprintf(pki, sizeof(pki), "%s/.pki", u->home);
	snprintf(db, sizeof(db), "%s/nssdb", pki);
	snprintf(sqldb, sizeof(sqldb), "sql:%s", db);
	snprintf(cert9, sizeof(cert9), "%s/cert9.db", db);
	r = mkdir_owned(pki, 0700, u);
	if (r == 0)
		r = mkdir_owned(db, 0700, u);
	if (r < 0)
		return step_fail(msg, cap, "mkdir %s: %s", db, strerror(-r));
	r = write_atomic(CA_FILE, pem, len, 0644, 0, 0);
	if (r < 0)
		return step_fail(msg, cap, "cannot write %s: %s", CA_FILE, strerror(-r));
	if (access(cert9, F_OK) < 0) {
		const char *argv[] = {"certutil", "-N", "-d", sqldb, "--empty-password", NULL};
		r = run(argv, u, NULL, 0, out, sizeof(out));
		if (r != 0)
			return step_fail(msg, cap, "certutil -N: %s", r < 0 ? strerror(-r) : out);
	}
	{
		/* Another CA under the name (an earlier session's) is replaced. */
		const char *argv[] = {"certutil", "-D", "-d", sqldb, "-n", CA_NICKNAME, NULL};
		(void)run(argv, u, NULL, 0, out, sizeof(out));
	}
	{
		const char *argv[] = {"certutil", "-A",        "-d", sqldb,   "-t", "C,,",
		                      "-n",       CA_NICKNAME, "-i", CA_FILE, NULL};
		r = run(argv, u, NULL, 0, out, sizeof(out));
	}
	if (r != 0)
		return step_fail(msg, cap, "certutil -A: %s", r < 0 ? strerror(-r) : out);
	return 0;
}

static int setup_steps(struct browser *b, char *msg, size_t cap)
{
	struct guest_user u;
	int r = chrome_user(&u);

	if (r < 0)
		return step_fail(msg, cap, "no unprivileged user (uid 1000) to run Chromium as");
	if (mkdir("/run/slate", 0755) < 0 && errno != EEXIST)
		return step_fail(msg, cap, "mkdir /run/slate: %s", strerror(errno));
	if (b->req.persist) {
		if (persist_open(b->req.key, &u, msg, cap) < 0)
			return -1;
	} else {
		if (remove_tree(PROFILE_TMP, msg, cap) < 0)
			return -1;
		r = mkdir_owned(PROFILE_TMP, 0700, &u);
		if (r < 0)
			return step_fail(msg, cap, "mkdir %s: %s", PROFILE_TMP, strerror(-r));
	}
	if (b->ca && ca_install(b->ca, b->req.ca_len, &u, msg, cap) < 0)
		return -1;
	return 0;
}

static int teardown_steps(struct browser *b, char *msg, size_t cap)
{
	char out[MSG_MAX];

	sync();
	(void)unlink(CA_FILE);
	if (!b->req.persist)
		return remove_tree(PROFILE_TMP, msg, cap);
	if (access(PERSIST_MAPPER, F_OK) < 0)
		return 0;
	/* Chromium's children are gone (killed with its process group), so EBUSY is brief. */
	for (int i = 0; umount(PERSIST_MNT) < 0 && errno != EINVAL; i++) {
		if (errno != EBUSY || i == 20)
			return step_fail(msg, cap, "umount %s: %s", PERSIST_MNT, strerror(errno));
		(void)usleep(100 * 1000);
	}
	const char *argv[] = {"cryptsetup", "close", PERSIST_NAME, NULL};
	int r = run(argv, NULL, NULL, 0, out, sizeof(out));
	if (r != 0)
		return step_fail(msg, cap, "cryptsetup close: %s", r < 0 ? strerror(-r) : out);
	return 0;
}

/* Forks the helper for the setup (teardown false) or the teardown; it writes "ok" or the error
 * text on a pipe and exits. */
static int helper_start(struct browser *b, bool teardown)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int e = errno;
		(void)close(p[0]);
		(void)close(p[1]);
		return -e;
	}
	if (pid == 0) {
		char msg[MSG_MAX];
		int r;

		/* SIGPIPE stays ignored: a tool that exits without reading its stdin (the key)
		 * makes the write fail, not the helper die. */
		(void)close(p[0]);
		msg[0] = '\0';
		r = teardown ? teardown_steps(b, msg, sizeof(msg))
		             : setup_steps(b, msg, sizeof(msg));
		explicit_bzero(b->req.key, sizeof(b->req.key));
		if (r == 0)
			snprintf(msg, sizeof(msg), "ok");
		(void)!write(p[1], msg, strlen(msg));
		_exit(r == 0 ? 0 : 1);
	}
	(void)close(p[1]);
	b->helper = pid;
	b->helper_fd = p[0];
	b->helper_len = 0;
	/* The helper has its copy; this process needs the key no more. */
	explicit_bzero(b->req.key, sizeof(b->req.key));
	return 0;
}

/* ---- Chromium ---- */

static void chrome_exited(void *ctx, int status);

static int chrome_start(struct browser *b)
{
	char port[48], window[48], profile[300];
	struct guest_user u;
	pid_t pid;
	int r = chrome_user(&u);

	if (r < 0)
		return r;
	snprintf(port, sizeof(port), "--remote-debugging-port=%d", devtools_port);
	snprintf(window, sizeof(window), "--window-size=%u,%u", b->req.width, b->req.height);
	snprintf(profile, sizeof(profile), "--user-data-dir=%s",
	         b->req.persist ? PERSIST_PROFILE : PROFILE_TMP);
	/* No --no-sandbox: as uid 1000 Chromium's own (namespace) sandbox works in this guest, whose
	 * kernel has USER_NS and SECCOMP_FILTER (tests/integration/browser-guest.sh checks that a
	 * renderer runs under seccomp-bpf in a PID namespace of its own). */
	const char *argv[] = {
	        "chromium-headless-shell", port, "--remote-debugging-address=127.0.0.1", profile,
	        /* slate-guest's own 3128 listener: the workspace's egress proxy on the host (the
	         * browser VM has no NIC). Loopback (DevTools) is never proxied. */
	        "--proxy-server=http://127.0.0.1:3128", window, "--no-first-run",
	        "--no-default-browser-check", "--disable-background-networking",
	        "--disable-component-update", "--disable-sync", "--metrics-recording-only",
	        "--password-store=basic", "about:blank", NULL};
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		char home[600], user[80], logname[80];
		const char *env[] = {PATH_ENV, home, user, logname, "SHELL=/bin/sh", NULL};
		extern char **environ;
		int log, null;

		child_signals();
		(void)setsid();
		log = open(BROWSER_LOG, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
		null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (log < 0 || null < 0 || dup2(null, 0) < 0 || dup2(log, 1) < 0 ||
		    dup2(log, 2) < 0)
			_exit(126);
		if (become(&u) < 0) {
			dprintf(2, "slate-guest: cannot become %s: %s\n", u.name, strerror(errno));
			_exit(126);
		}
		if (chdir(u.home) < 0)
			(void)chdir("/");
		snprintf(home, sizeof(home), "HOME=%s", u.home);
		snprintf(user, sizeof(user), "USER=%s", u.name);
		snprintf(logname, sizeof(logname), "LOGNAME=%s", u.name);
		environ = (char **)env;
		execvp(argv[0], (char *const *)argv);
		dprintf(2, "slate-guest: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	r = child_watch(pid, chrome_exited, b);
	if (r < 0) {
		(void)kill(-pid, SIGKILL);
		return r;
	}
	b->chrome = pid;
	b->chrome_reaped = false;
	return 0;
}

static void status_text(int status, char *buf, size_t cap)
{
	if (WIFEXITED(status))
		snprintf(buf, cap, "code=%d", WEXITSTATUS(status));
	else
		snprintf(buf, cap, "signal=%d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void probe_close(struct browser *b)
{
	if (b->probe_fd >= 0)
		(void)close(b->probe_fd);
	b->probe_fd = -1;
	b->probe_connected = false;
	b->probe_len = 0;
}

static void teardown_begin(struct browser *b)
{
	int r;

	probe_close(b);
	b->state = B_TEARDOWN;
	r = helper_start(b, true);
	if (r < 0) {
		emit(b, "error cannot start the teardown: %s", strerror(-r));
		b->failed = true;
		b->state = B_DONE;
	}
}

static void chrome_exited(void *ctx, int status)
{
	struct browser *b = ctx;
	char st[32];

	b->chrome_reaped = true;
	b->chrome_status = status;
	/* What it left behind (renderers, zygote) goes too: the profile is unmounted next. */
	(void)kill(-b->chrome, SIGKILL);
	status_text(status, st, sizeof(st));
	if (b->state == B_STARTING && !b->stop_wanted) {
		emit(b, "error chromium exited (%s) before DevTools answered; see %s", st,
		     BROWSER_LOG);
		b->failed = true;
		b->stop_wanted = true;
	} else if (b->state == B_READY && !b->stop_wanted) {
		emit(b, "exited %s", st);
		b->stop_wanted = true;
	}
	if (!b->t_stop)
		b->t_stop = now_ms();
	teardown_begin(b);
}

/* ---- the stop ---- */

static void stop_begin(struct browser *b)
{
	if (b->stop_wanted && b->state != B_REQUEST)
		return;
	b->stop_wanted = true;
	b->t_stop = now_ms();
	switch (b->state) {
	case B_REQUEST:
		/* Nothing started: nothing to stop. */
		b->state = B_DONE;
		break;
	case B_SETUP:
		/* The helper's end moves on (helper_done). */
		break;
	case B_STARTING:
	case B_READY:
		/* Chromium flushes its cookies on SIGTERM. */
		(void)kill(b->chrome, SIGTERM);
		b->kill_at = b->t_stop + TERM_WAIT_MS;
		b->state = B_STOPPING;
		probe_close(b);
		break;
	default:
		break;
	}
}

/* ---- the helper's answer ---- */

static void helper_done(struct browser *b)
{
	bool ok = b->helper_len == 2 && memcmp(b->helper_msg, "ok", 2) == 0;

	(void)close(b->helper_fd);
	b->helper_fd = -1;
	b->helper = 0; /* reaped by exec.c, as any child nobody watches */
	b->helper_msg[b->helper_len] = '\0';
	if (b->state == B_SETUP) {
		if (!ok) {
			emit(b, "error %s", b->helper_len ? b->helper_msg : "setup failed");
			b->failed = true;
			/* Whatever the setup opened is closed again. */
			teardown_begin(b);
			b->stop_wanted = true;
			return;
		}
		if (b->stop_wanted) {
			teardown_begin(b);
			return;
		}
		int r = chrome_start(b);
		if (r < 0) {
			emit(b, "error cannot start chromium: %s", strerror(-r));
			b->failed = true;
			b->stop_wanted = true;
			teardown_begin(b);
			return;
		}
		b->state = B_STARTING;
		b->ready_deadline = b->t_start + READY_TIMEOUT_MS;
		b->probe_at = now_ms() + PROBE_EVERY_MS;
		return;
	}
	/* The teardown. */
	if (!ok) {
		emit(b, "error %s", b->helper_len ? b->helper_msg : "teardown failed");
		b->failed = true;
	} else if (!b->failed || b->chrome) {
		emit(b, "stopped ms=%lld", (long long)(now_ms() - b->t_stop));
	}
	b->state = B_DONE;
}

static void helper_event(void *ctx, short revents)
{
	struct browser *b = ctx;
	ssize_t n;

	(void)revents;
	if (b->helper_fd < 0)
		return;
	n = read(b->helper_fd, b->helper_msg + b->helper_len, MSG_MAX - b->helper_len);
	if (n > 0 && b->helper_len + (size_t)n < MSG_MAX) {
		b->helper_len += (size_t)n;
		return;
	}
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n > 0)
		b->helper_len += (size_t)n;
	helper_done(b);
}

/* ---- readiness: GET /json/version on DevTools' port ---- */

static void probe_start(struct browser *b)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)devtools_port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		(void)close(fd);
		return;
	}
	b->probe_fd = fd;
	b->probe_connected = false;
	b->probe_len = 0;
}

static void probe_event(void *ctx, short revents)
{
	/* HTTP/1.1: DevTools refuse 1.0 ("Cannot handle request with protocol"). */
	static const char req[] =
	        "GET /json/version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
	struct browser *b = ctx;
	ssize_t n;

	if (b->probe_fd < 0 || b->state != B_STARTING)
		return;
	if (!b->probe_connected) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(b->probe_fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err ||
		    !(revents & POLLOUT) ||
		    send(b->probe_fd, req, sizeof(req) - 1, MSG_NOSIGNAL) !=
		            (ssize_t)sizeof(req) - 1) {
			probe_close(b);
			return;
		}
		b->probe_connected = true;
		return;
	}
	n = read(b->probe_fd, b->probe_buf + b->probe_len, sizeof(b->probe_buf) - b->probe_len);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n > 0)
		b->probe_len += (size_t)n;
	if (n > 0 && b->probe_len < 12)
		return;
	/* "HTTP/1.1 200 OK": DevTools serve. Anything else: again later. */
	if (b->probe_len >= 12 && memcmp(b->probe_buf, "HTTP/1.", 7) == 0 &&
	    memcmp(b->probe_buf + 8, " 200", 4) == 0) {
		probe_close(b);
		b->state = B_READY;
		emit(b, "ok ready_ms=%lld", (long long)(now_ms() - b->t_start));
		return;
	}
	probe_close(b);
}

/* ---- input ---- */

static void request_error(struct browser *b, const char *why)
{
	emit(b, "error %s", why);
	b->failed = true;
	stop_begin(b);
}

static void start(struct browser *b)
{
	int r;

	/* It mounts, formats and switches users: root's work (and never a test's on a host). */
	if (geteuid() != 0) {
		request_error(b, "must run as root");
		return;
	}
	b->t_start = now_ms();
	b->state = B_SETUP;
	r = helper_start(b, false);
	if (r < 0) {
		emit(b, "error cannot start the setup: %s", strerror(-r));
		b->failed = true;
		b->state = B_DONE;
	}
}

static void handle_line(struct browser *b, const char *line, size_t n)
{
	const char *why = NULL;
	int kind;

	if (b->stop_wanted)
		return;
	kind = browser_req_line(&b->req, line, n, &why);
	if (kind < 0) {
		request_error(b, why);
		return;
	}
	switch (kind) {
	case BL_CA:
		b->ca = malloc(b->req.ca_len);
		if (!b->ca) {
			request_error(b, "out of memory");
			return;
		}
		b->ca_have = 0;
		break;
	case BL_START:
		start(b);
		break;
	case BL_STOP:
		stop_begin(b);
		break;
	default:
		break;
	}
}

static void feed(struct browser *b, const uint8_t *p, size_t n)
{
	while (n > 0 && !b->stop_wanted && b->state != B_DONE) {
		if (b->ca && b->ca_have < b->req.ca_len) {
			size_t k = b->req.ca_len - b->ca_have < n ? b->req.ca_len - b->ca_have : n;
			memcpy(b->ca + b->ca_have, p, k);
			b->ca_have += k;
			p += k;
			n -= k;
			if (b->ca_have == b->req.ca_len && !browser_ca_valid(b->ca, b->ca_have))
				request_error(b, "ca: not a PEM certificate");
			continue;
		}
		const uint8_t *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) : n;
		if (b->line_len + k > BROWSER_LINE_MAX) {
			b->line_long = true;
			b->line_len = 0;
		} else if (!b->line_long) {
			memcpy(b->line + b->line_len, p, k);
			b->line_len += k;
		}
		p += k;
		n -= k;
		if (!nl)
			break;
		p++;
		n--;
		if (b->line_long) {
			b->line_long = false;
			request_error(b, "line too long");
		} else if (b->line_len > 0) {
			/* Empty lines are skipped: the newline a writer puts after the PEM. */
			handle_line(b, b->line, b->line_len);
		}
		explicit_bzero(b->line, sizeof(b->line));
		b->line_len = 0;
	}
}

static void input_eof(struct browser *b)
{
	b->in_eof = true;
	if (b->state == B_REQUEST && !b->stop_wanted && (b->line_len || b->ca))
		emit(b, "error the request ended before start");
	stop_begin(b);
}

/* ---- life ---- */

static struct browser *browser_new(void)
{
	struct browser *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	browser_req_init(&b->req);
	b->helper_fd = -1;
	b->probe_fd = -1;
	b->state = B_REQUEST;
	return b;
}

static void browser_free(struct browser *b)
{
	probe_close(b);
	if (b->helper_fd >= 0)
		(void)close(b->helper_fd);
	free(b->ca);
	explicit_bzero(b, sizeof(*b));
	free(b);
	if (cur == b)
		cur = NULL;
}

int browser_open(struct stream *s)
{
	if (cur)
		return -EBUSY;
	cur = browser_new();
	if (!cur)
		return -ENOMEM;
	cur->s = s;
	s->browser = cur;
	return 0;
}

void browser_data(struct stream *s, const uint8_t *p, size_t n)
{
	struct browser *b = s->browser;

	feed(b, p, n);
	/* Lines are handled as they come: nothing stays buffered but the CA (allocated apart). */
	stream_grant(s, CH_INITIAL_WINDOW - s->recv_win);
}

void browser_eof(struct stream *s)
{
	input_eof(s->browser);
}

void browser_abort(struct stream *s)
{
	struct browser *b = s->browser;

	s->browser = NULL;
	if (!b)
		return;
	b->s = NULL;
	b->out_gone = true;
	input_eof(b);
}

/* Done once the last line is out and nothing of ours runs any more. */
static bool browser_finished(const struct browser *b)
{
	return b->state == B_DONE && b->helper_fd < 0 && (b->out_gone || b->out_len == 0);
}

void browser_advance(void)
{
	struct browser *b = cur;

	if (!b)
		return;
	out_flush(b);
	if (!browser_finished(b))
		return;
	if (b->s) {
		struct stream *s = b->s;
		if (!s->sent_eof && !s->sent_close) {
			(void)chan_send(CH_EOF, s->id, NULL, 0, NULL, 0);
			s->sent_eof = true;
		}
		stream_close(s);
		s->browser = NULL;
		b->s = NULL;
	}
	if (!b->stdio)
		browser_free(b);
}

void browser_poll(void)
{
	struct browser *b = cur;

	if (!b)
		return;
	if (b->helper_fd >= 0)
		poll_add(b->helper_fd, POLLIN, helper_event, b);
	if (b->probe_fd >= 0)
		poll_add(b->probe_fd, b->probe_connected ? POLLIN : POLLOUT, probe_event, b);
}

void browser_timers(int64_t now, int64_t *next)
{
	struct browser *b = cur;

	if (!b)
		return;
	if (b->state == B_STARTING) {
		if (now >= b->ready_deadline) {
			emit(b, "error DevTools did not answer on 127.0.0.1:%d within %d s; see %s",
			     devtools_port, READY_TIMEOUT_MS / 1000, BROWSER_LOG);
			b->failed = true;
			stop_begin(b);
			return;
		}
		deadline_min(next, b->ready_deadline);
		if (b->probe_fd < 0) {
			if (now >= b->probe_at) {
				probe_start(b);
				b->probe_at = now + PROBE_EVERY_MS;
			}
			deadline_min(next, b->probe_at);
		}
	}
	if (b->state == B_STOPPING && !b->chrome_reaped) {
		if (now >= b->kill_at) {
			(void)kill(-b->chrome, SIGKILL);
			(void)kill(b->chrome, SIGKILL);
			b->kill_at = now + TERM_WAIT_MS;
		}
		deadline_min(next, b->kill_at);
	}
}

/* ---- slate-guest --browser ---- */

static void stdin_event(void *ctx, short revents)
{
	struct browser *b = ctx;
	uint8_t buf[4096];
	ssize_t n;

	(void)revents;
	n = read(STDIN_FILENO, buf, sizeof(buf));
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		input_eof(b);
		return;
	}
	feed(b, buf, (size_t)n);
	/* It may have held the key's line. */
	explicit_bzero(buf, (size_t)n);
}

int browser_main(void)
{
	struct browser *b;

	/* It mounts, formats and runs Chromium as uid 1000: never on the host. */
	if (!chan_in_guest()) {
		fprintf(stderr, "slate-guest: --browser runs only inside a slate guest\n");
		return 1;
	}
	if (geteuid() != 0) {
		printf("error must run as root\n");
		return 1;
	}
	(void)signal(SIGPIPE, SIG_IGN);
	exec_init();
	b = cur = browser_new();
	if (!b) {
		printf("error out of memory\n");
		return 1;
	}
	b->stdio = true;
	while (!browser_finished(b)) {
		int64_t now = now_ms(), next = now + 60 * 1000;
		int r;

		exec_timers(now, &next);
		browser_timers(now, &next);
		out_flush(b);
		if (browser_finished(b))
			break;
		poll_reset();
		exec_poll_sigchld();
		if (!b->in_eof && !b->stop_wanted)
			poll_add(STDIN_FILENO, POLLIN, stdin_event, b);
		browser_poll();
		r = poll_run(next);
		if (r < 0) {
			fprintf(stderr, "slate-guest: poll: %s\n", strerror(-r));
			return 1;
		}
	}
	int status = b->failed ? 1 : 0;
	browser_free(b);
	return status;
}

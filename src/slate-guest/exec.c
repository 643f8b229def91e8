/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Exec sessions (doc/guest-channel.md, "Exec sessions"): one per "exec" stream. The stream's
 * bytes are records; the first is the REQUEST, which starts the command in a new session with a
 * clean environment, on three pipes or on a PTY. Output is read only as far as the host's window
 * allows (that is the backpressure on the command); stdin is taken only as far as the command
 * reads it (window is granted back as it drains). EXIT goes after all output, then CLOSE.
 */

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "guest.h"

/* What one session may hold: the largest REQUEST with its header. The window the host has,
 * the bytes not yet parsed and the stdin not yet written together stay within it. */
#define EXEC_BUDGET (EX_HEADER_LEN + EX_MAX_REQUEST)
#define HANGUP_KILL_MS 1000 /* SIGHUP, then SIGKILL this much later */
#define PTY_GRACE_MS 100    /* after the command exits, how long its PTY may stay open */
#define READS_PER_WAKEUP 4
#define SAFE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct exec {
	struct stream *s;
	struct exec *prev, *next;
	struct gbuf rx; /* stream bytes not yet parsed into records */
	struct gbuf in; /* stdin not yet written to the command */
	bool started;
	bool stdin_eof;  /* STDIN_EOF arrived */
	bool stdin_gone; /* the command's stdin is closed: STDIN is dropped */
	bool pty;
	bool hup; /* the PTY reported a hangup */
	bool exited;
	bool out_eof, err_eof;
	bool finishing; /* EXIT or ERROR is queued: nothing follows */
	int wstatus;
	pid_t pid;                 /* also the process group; 0 when none (any more) */
	int in_fd, out_fd, err_fd; /* with a PTY, in_fd and out_fd are both the master */
	uint8_t veof;
	int64_t timeout_at, grace_at;
	uint8_t ctl[EX_HEADER_LEN + CH_MAX_TEXT + EX_HEADER_LEN + 5]; /* STARTED / EXIT / ERROR */
	size_t ctl_len;
};

/* A command whose session ended first: SIGKILLed at kill_at, reaped whenever it exits. */
struct orphan {
	pid_t pid;
	int64_t kill_at;
	bool killed, reaped;
};

static struct exec *execs;
static struct orphan *orphans;
static size_t n_orphans, cap_orphans;
static int sigchld_fd = -1;

/* Stages of starting a command that the child reports through the exec-error pipe. */
enum { STAGE_SETUP = 1, STAGE_USER, STAGE_CWD, STAGE_EXEC };
struct child_report {
	int stage, err;
};

/* ---- helpers ---- */

static void close_fd(int *fd)
{
	if (*fd >= 0)
		(void)close(*fd);
	*fd = -1;
}

static void ctl_add(struct exec *e, uint8_t type, const void *p, size_t n)
{
	if (e->ctl_len + EX_HEADER_LEN + n > sizeof(e->ctl))
		return;
	ex_record_header(e->ctl + e->ctl_len, type, (uint32_t)n);
	memcpy(e->ctl + e->ctl_len + EX_HEADER_LEN, p, n);
	e->ctl_len += EX_HEADER_LEN + n;
}

static bool can_send_output(const struct exec *e)
{
	return e->ctl_len == 0 && !e->finishing && e->s->send_win > EX_HEADER_LEN &&
	       outq_bytes < OUTQ_HIGH;
}

static void orphan_add(pid_t pid, bool reaped)
{
	if (n_orphans == cap_orphans) {
		size_t cap = cap_orphans ? 2 * cap_orphans : 16;
		struct orphan *o = realloc(orphans, cap * sizeof(*o));
		if (!o) {
			(void)kill(-pid, SIGKILL);
			return;
		}
		orphans = o;
		cap_orphans = cap;
	}
	orphans[n_orphans++] =
	        (struct orphan){.pid = pid, .kill_at = now_ms() + HANGUP_KILL_MS, .reaped = reaped};
}

/* The session is over for the command: its process group gets SIGHUP now and SIGKILL a second
 * later; the child is reaped whenever it exits. */
static void exec_hangup(struct exec *e)
{
	if (e->pid > 0) {
		/* After the leader is reaped, only signal a group that still has members. */
		if (!e->exited || kill(-e->pid, 0) == 0) {
			(void)kill(-e->pid, SIGHUP);
			(void)kill(-e->pid, SIGCONT);
			orphan_add(e->pid, e->exited);
		}
		e->pid = 0;
	}
	if (e->in_fd != e->out_fd)
		close_fd(&e->in_fd);
	e->in_fd = -1;
	close_fd(&e->out_fd);
	close_fd(&e->err_fd);
	e->out_eof = e->err_eof = true;
	e->stdin_gone = true;
	e->timeout_at = e->grace_at = 0;
}

static void exec_free(struct exec *e)
{
	exec_hangup(e);
	gbuf_free(&e->rx);
	gbuf_free(&e->in);
	if (e->prev)
		e->prev->next = e->next;
	else
		execs = e->next;
	if (e->next)
		e->next->prev = e->prev;
	e->s->exec = NULL;
	free(e);
}

/* The session failed: ERROR (after what is queued), then CLOSE; the command is hung up. */
static void exec_fail(struct exec *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void exec_fail(struct exec *e, const char *fmt, ...)
{
	char msg[CH_MAX_TEXT + 1];
	va_list ap;
	int n;

	if (e->finishing)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	for (int i = 0; i < n; i++)
		if ((uint8_t)msg[i] < 0x20 || msg[i] == 0x7f)
			msg[i] = '?';
	if (n == 0)
		n = snprintf(msg, sizeof(msg), "failed");
	ctl_add(e, EX_ERROR, msg, (size_t)n);
	e->finishing = true;
	exec_hangup(e);
}

static void exec_grant(struct exec *e)
{
	size_t used = e->rx.len + e->in.len + e->s->recv_win;

	if (!e->finishing && used < EXEC_BUDGET)
		stream_grant(e->s, EXEC_BUDGET - used);
}

static void stdin_drop(struct exec *e)
{
	e->stdin_gone = true;
	e->in.off = e->in.len = 0;
	if (!e->pty)
		close_fd(&e->in_fd);
}

static void stdin_flush(struct exec *e)
{
	/* EPIPE: the command closed its stdin; EIO: the terminal is gone. */
	if (e->in_fd >= 0 && !e->stdin_gone && gbuf_write(&e->in, e->in_fd) < 0)
		stdin_drop(e);
	if (!e->pty && e->stdin_eof && e->in.len == 0)
		close_fd(&e->in_fd);
}

/* ---- starting the command ---- */

struct spawn {
	char **argv;
	char **envp;
	const char *path; /* NULL: search argv[0] in PATH */
	const char *cwd;
	bool cwd_default;
	bool switch_user;
	uid_t uid;
	gid_t gid;
	gid_t groups[64];
	int n_groups;
	int slave, in_r, out_w, err_w; /* -1 when not used */
	int report_fd;
};

static void __attribute__((noreturn)) child_fail(const struct spawn *sp, int stage, int err)
{
	struct child_report rep = {stage, err};

	(void)!write(sp->report_fd, &rep, sizeof(rep));
	_exit(126);
}

static void __attribute__((noreturn)) child_run(const struct spawn *sp)
{
	extern char **environ;
	sigset_t none;
	int err;

	/* Default dispositions: SIGPIPE is ignored here, and an init that started us in the
	 * background of a non-interactive shell leaves SIGINT and SIGQUIT ignored too. */
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)signal(sig, SIG_DFL);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	if (setsid() < 0)
		child_fail(sp, STAGE_SETUP, errno);
	if (sp->slave >= 0) {
		if (ioctl(sp->slave, TIOCSCTTY, 0) < 0 || dup2(sp->slave, 0) < 0 ||
		    dup2(sp->slave, 1) < 0 || dup2(sp->slave, 2) < 0)
			child_fail(sp, STAGE_SETUP, errno);
		if (sp->slave > 2)
			(void)close(sp->slave);
	} else if (dup2(sp->in_r, 0) < 0 || dup2(sp->out_w, 1) < 0 || dup2(sp->err_w, 2) < 0) {
		child_fail(sp, STAGE_SETUP, errno);
	}
	if (sp->switch_user && (setgroups((size_t)sp->n_groups, sp->groups) < 0 ||
	                        setgid(sp->gid) < 0 || setuid(sp->uid) < 0))
		child_fail(sp, STAGE_USER, errno);
	if (chdir(sp->cwd) < 0 && (!sp->cwd_default || chdir("/") < 0))
		child_fail(sp, STAGE_CWD, errno);
	environ = sp->envp;
	if (sp->path)
		execv(sp->path, sp->argv);
	else
		execvp(sp->argv[0], sp->argv);
	err = errno;
	/* As a shell would: the reason on the command's stderr, 127 for not found, else 126. */
	dprintf(2, "slate-guest: %s: %s\n", sp->path ? sp->path : sp->argv[0], strerror(err));
	{
		struct child_report rep = {STAGE_EXEC, err};
		(void)!write(sp->report_fd, &rep, sizeof(rep));
	}
	_exit(err == ENOENT ? 127 : 126);
}

static char *str_dup(const struct ex_str *s)
{
	char *p = malloc((size_t)s->len + 1);
	if (p) {
		memcpy(p, s->p, s->len);
		p[s->len] = '\0';
	}
	return p;
}

#define PROV_ENV_MAX 128

/*
 * The environment every session starts with beyond the basics: the egress proxy and the SSH
 * agent this agent serves, then the NAME=VALUE lines provisioning wrote (placeholders). Fills
 * out with heap strings; returns how many.
 */
static size_t provisioned_env(char **out, size_t max)
{
	static const char *const fixed[] = {
	        "SSH_AUTH_SOCK=/run/slate/ssh-agent.sock",
	        "http_proxy=http://127.0.0.1:3128",
	        "https_proxy=http://127.0.0.1:3128",
	        "HTTP_PROXY=http://127.0.0.1:3128",
	        "HTTPS_PROXY=http://127.0.0.1:3128",
	        "no_proxy=localhost,127.0.0.1,::1",
	        "NO_PROXY=localhost,127.0.0.1,::1",
	        /* Runtimes with trust stores of their own take the system bundle, which holds
	         * the egress CA once provisioning ran. */
	        "NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
	        "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
	        "PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
	};
	char line[4096];
	size_t n = 0;
	FILE *f;

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) && n < max; i++)
		if ((out[n] = strdup(fixed[i])))
			n++;
	f = fopen(PROVISION_ENV_FILE, "re");
	if (!f)
		return n;
	while (n < max && fgets(line, sizeof(line), f)) {
		size_t len = strcspn(line, "\n");
		line[len] = '\0';
		if (len == 0 || line[0] == '=' || !strchr(line, '='))
			continue;
		if ((out[n] = strdup(line)))
			n++;
	}
	fclose(f);
	return n;
}

/* Sets NAME=value (entry, owned) in env, replacing an entry of the same name. */
static void env_put(char **env, size_t *n, char *entry)
{
	size_t name_len = strcspn(entry, "=");

	for (size_t i = 0; i < *n; i++) {
		if (strncmp(env[i], entry, name_len) == 0 && env[i][name_len] == '=') {
			free(env[i]);
			env[i] = entry;
			return;
		}
	}
	env[(*n)++] = entry;
}

static char *env_fmt(const char *name, const char *value)
{
	size_t n = strlen(name) + strlen(value) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s=%s", name, value);
	return p;
}

static void strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Finds the user the command runs as. Returns 0 or an error already reported with exec_fail. */
static int resolve_user(struct exec *e, const struct ex_request *req, struct guest_user *u)
{
	uid_t euid = geteuid();
	int r;

	if (req->user.len) {
		r = user_lookup(req->user.p, req->user.len, 0, u);
		if (r < 0) {
			exec_fail(e, "unknown user %.*s", (int)req->user.len, req->user.p);
			return r;
		}
	} else if (euid == 0) {
		/* The workspace user when the image has one, else root. */
		(void)user_default(u);
	} else if (user_lookup(NULL, 0, euid, u) < 0) {
		*u = (struct guest_user){.name = "nobody", .home = "/", .shell = "/bin/sh"};
		u->uid = euid;
		u->gid = getegid();
	}
	if (euid != 0 && u->uid != euid) {
		exec_fail(e, "cannot run as %s: slate-guest is not root", u->name);
		return -EPERM;
	}
	return 0;
}

static int open_pty(struct exec *e, const struct ex_request *req, int *ret_slave)
{
	char name[128];
	struct winsize ws = {.ws_row = req->rows, .ws_col = req->cols};
	struct termios t;
	int m, sl;

	m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return -errno;
	if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof(name)) != 0) {
		int err = errno;
		(void)close(m);
		return -err;
	}
	sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (sl < 0) {
		int err = errno;
		(void)close(m);
		return -err;
	}
	if (ws.ws_row && ws.ws_col)
		(void)ioctl(m, TIOCSWINSZ, &ws);
	e->veof = 4; /* ^D */
	if (tcgetattr(sl, &t) == 0 && t.c_cc[VEOF] != _POSIX_VDISABLE)
		e->veof = t.c_cc[VEOF];
	(void)fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	e->in_fd = e->out_fd = m;
	e->err_eof = true; /* the terminal carries stderr too */
	*ret_slave = sl;
	return 0;
}

static int open_pipes(struct exec *e, struct spawn *sp)
{
	int in[2], out[2], err[2];

	if (pipe2(in, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(out, O_CLOEXEC) < 0) {
		int r = -errno;
		(void)close(in[0]);
		(void)close(in[1]);
		return r;
	}
	if (pipe2(err, O_CLOEXEC) < 0) {
		int r = -errno;
		(void)close(in[0]);
		(void)close(in[1]);
		(void)close(out[0]);
		(void)close(out[1]);
		return r;
	}
	/* A bigger stdout pipe: fewer wakeups when the command writes a lot. Best effort. */
	(void)fcntl(out[1], F_SETPIPE_SZ, 1024 * 1024);
	sp->in_r = in[0];
	sp->out_w = out[1];
	sp->err_w = err[1];
	e->in_fd = in[1];
	e->out_fd = out[0];
	e->err_fd = err[0];
	(void)fcntl(e->in_fd, F_SETFL, O_NONBLOCK);
	(void)fcntl(e->out_fd, F_SETFL, O_NONBLOCK);
	(void)fcntl(e->err_fd, F_SETFL, O_NONBLOCK);
	return 0;
}

static void exec_start(struct exec *e, const uint8_t *payload, size_t len)
{
	static struct ex_request req; /* 80 KiB: not on the stack */
	struct spawn sp = {.slave = -1, .in_r = -1, .out_w = -1, .err_w = -1, .report_fd = -1};
	struct guest_user u;
	struct child_report rep = {0, 0};
	char **argv = NULL, **envp = NULL, *cwd = NULL, *login_argv0 = NULL, *prov[PROV_ENV_MAX];
	size_t n_argv = 0, n_env = 0, n_prov = 0;
	bool term = false;
	int report[2] = {-1, -1};
	pid_t pid;
	int r;

	e->started = true;
	if (ex_request_parse(payload, len, &req) < 0) {
		exec_fail(e, "malformed REQUEST");
		return;
	}
	if (resolve_user(e, &req, &u) < 0)
		return;
	sp.switch_user = geteuid() == 0;
	sp.uid = u.uid;
	sp.gid = u.gid;
	sp.n_groups = user_groups(&u, sp.groups, (int)(sizeof(sp.groups) / sizeof(sp.groups[0])));

	/* argv: the login shell as "-sh", or the arguments. */
	argv = calloc((size_t)req.n_args + 2, sizeof(*argv));
	n_prov = provisioned_env(prov, sizeof(prov) / sizeof(prov[0]));
	envp = calloc((size_t)req.n_env + 8 + n_prov, sizeof(*envp));
	if (!argv || !envp)
		goto oom;
	if (req.login) {
		const char *base = strrchr(u.shell, '/');
		base = base ? base + 1 : u.shell;
		login_argv0 = malloc(strlen(base) + 2);
		if (!login_argv0)
			goto oom;
		snprintf(login_argv0, strlen(base) + 2, "-%s", base);
		argv[n_argv++] = login_argv0;
		login_argv0 = NULL;
		sp.path = u.shell;
	} else {
		for (uint32_t i = 0; i < req.n_args; i++) {
			argv[n_argv] = str_dup(&req.args[i]);
			if (!argv[n_argv])
				goto oom;
			n_argv++;
		}
	}
	/* A clean environment, then the request's entries. */
	envp[n_env++] = env_fmt("PATH", SAFE_PATH);
	envp[n_env++] = env_fmt("HOME", u.home);
	envp[n_env++] = env_fmt("USER", u.name);
	envp[n_env++] = env_fmt("LOGNAME", u.name);
	envp[n_env++] = env_fmt("SHELL", u.shell);
	for (size_t i = 0; i < n_env; i++)
		if (!envp[i])
			goto oom;
	/* What provisioning set up (the proxy, the agent, placeholders), then the request's. */
	for (size_t i = 0; i < n_prov; i++) {
		env_put(envp, &n_env, prov[i]);
		prov[i] = NULL;
	}
	for (uint32_t i = 0; i < req.n_env; i++) {
		char *entry = str_dup(&req.env[i]);
		if (!entry)
			goto oom;
		if (strncmp(entry, "TERM=", 5) == 0)
			term = true;
		env_put(envp, &n_env, entry);
	}
	if (req.tty && !term) {
		char *entry = env_fmt("TERM", "xterm-256color");
		if (!entry)
			goto oom;
		env_put(envp, &n_env, entry);
	}
	if (req.cwd.len) {
		cwd = str_dup(&req.cwd);
		if (!cwd)
			goto oom;
		sp.cwd = cwd;
	} else {
		sp.cwd = u.home;
		sp.cwd_default = true;
	}
	sp.argv = argv;
	sp.envp = envp;

	e->pty = req.tty;
	r = req.tty ? open_pty(e, &req, &sp.slave) : open_pipes(e, &sp);
	if (r < 0) {
		exec_fail(e, "cannot create the %s: %s", req.tty ? "terminal" : "pipes",
		          strerror(-r));
		goto out;
	}
	if (pipe2(report, O_CLOEXEC) < 0) {
		exec_fail(e, "pipe: %s", strerror(errno));
		goto out;
	}
	sp.report_fd = report[1];
	pid = fork();
	if (pid < 0) {
		exec_fail(e, "fork: %s", strerror(errno));
		goto out;
	}
	if (pid == 0)
		child_run(&sp);
	close_fd(&report[1]);
	close_fd(&sp.slave);
	close_fd(&sp.in_r);
	close_fd(&sp.out_w);
	close_fd(&sp.err_w);
	e->pid = pid;
	/* The report pipe closes at exec (O_CLOEXEC) or carries why the child could not get
	 * there: this read waits for one or the other, which takes microseconds. */
	for (;;) {
		ssize_t n = read(report[0], &rep, sizeof(rep));
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(rep))
			rep.stage = 0;
		break;
	}
	switch (rep.stage) {
	case STAGE_SETUP:
		exec_fail(e, "cannot set up the command's session: %s", strerror(rep.err));
		goto out;
	case STAGE_USER:
		exec_fail(e, "cannot switch to user %s: %s", u.name, strerror(rep.err));
		goto out;
	case STAGE_CWD:
		exec_fail(e, "cannot change to directory %s: %s", sp.cwd, strerror(rep.err));
		goto out;
	default:
		/* Started; a failed exec shows as exit status 127 or 126 with the reason on
		 * stderr, as from a shell. */
		break;
	}
	{
		uint8_t b[4];
		ch_put_u32(b, (uint32_t)pid);
		ctl_add(e, EX_STARTED, b, 4);
	}
	if (req.timeout_s)
		e->timeout_at = now_ms() + (int64_t)req.timeout_s * 1000;
	goto out;
oom:
	exec_fail(e, "out of memory");
out:
	close_fd(&report[0]);
	close_fd(&report[1]);
	close_fd(&sp.slave);
	close_fd(&sp.in_r);
	close_fd(&sp.out_w);
	close_fd(&sp.err_w);
	strv_free(argv, n_argv);
	strv_free(envp, n_env);
	for (size_t i = 0; i < n_prov; i++)
		free(prov[i]);
	free(cwd);
	free(login_argv0);
}

/* ---- records from the host ---- */

static void exec_stdin(struct exec *e, const uint8_t *p, size_t n)
{
	if (e->stdin_gone || n == 0)
		return;
	if (e->in.len == 0 && e->in_fd >= 0) {
		/* Straight to the command when its stdin has room: no copy. */
		ssize_t w = write(e->in_fd, p, n);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		} else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			stdin_drop(e);
			return;
		}
	}
	gbuf_append(&e->in, p, n);
}

static void exec_records(struct exec *e)
{
	while (!e->finishing) {
		struct ex_record rec;
		int n = ex_record_decode(gbuf_data(&e->rx), e->rx.len, &rec);

		if (n == 0)
			break;
		if (n < 0) {
			exec_fail(e, "malformed record from the client");
			return;
		}
		if (!e->started) {
			if (rec.type != EX_REQUEST) {
				exec_fail(e, "the first record must be a REQUEST");
				return;
			}
			exec_start(e, rec.payload, rec.len);
			gbuf_consume(&e->rx, (size_t)n);
			continue;
		}
		switch (rec.type) {
		case EX_STDIN:
			if (e->stdin_eof) {
				exec_fail(e, "STDIN after STDIN_EOF");
				return;
			}
			exec_stdin(e, rec.payload, rec.len);
			break;
		case EX_STDIN_EOF:
			if (e->stdin_eof) {
				exec_fail(e, "STDIN_EOF twice");
				return;
			}
			e->stdin_eof = true;
			if (e->pty && !e->stdin_gone)
				gbuf_append(&e->in, &e->veof, 1);
			break;
		case EX_RESIZE:
			if (e->pty && e->out_fd >= 0) {
				struct winsize ws = {.ws_row = ch_get_u16(rec.payload),
				                     .ws_col = ch_get_u16(rec.payload + 2)};
				/* The kernel sends SIGWINCH to the foreground process group. */
				(void)ioctl(e->out_fd, TIOCSWINSZ, &ws);
			}
			break;
		case EX_SIGNAL:
			if (e->pid > 0 && !e->exited)
				(void)kill(-e->pid, (int)ch_get_u32(rec.payload));
			break;
		default:
			exec_fail(e, "record type %u is not for the guest", rec.type);
			return;
		}
		gbuf_consume(&e->rx, (size_t)n);
	}
	if (!e->finishing) {
		stdin_flush(e);
		exec_grant(e);
	}
}

int exec_open(struct stream *s)
{
	struct exec *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	if (gbuf_init(&e->rx, EXEC_BUDGET) < 0 || gbuf_init(&e->in, EXEC_BUDGET) < 0) {
		gbuf_free(&e->rx);
		free(e);
		return -ENOMEM;
	}
	e->s = s;
	e->in_fd = e->out_fd = e->err_fd = -1;
	e->next = execs;
	if (execs)
		execs->prev = e;
	execs = e;
	s->exec = e;
	return 0;
}

void exec_data(struct stream *s, const uint8_t *p, size_t n)
{
	struct exec *e = s->exec;

	if (e->finishing)
		return;
	if (n > e->rx.cap - e->rx.len) {
		/* The window accounting keeps this from happening. */
		exec_fail(e, "client data beyond the session's buffer");
		return;
	}
	gbuf_append(&e->rx, p, n);
	exec_records(e);
}

void exec_eof(struct stream *s)
{
	struct exec *e = s->exec;

	if (!e->finishing && (!e->started || e->rx.len > 0))
		exec_fail(e, "the client ended the stream %s",
		          e->started ? "inside a record" : "before the REQUEST");
}

void exec_abort(struct stream *s)
{
	if (s->exec)
		exec_free(s->exec);
}

/* ---- output ---- */

/* Reads what the window allows from fd into STDOUT/STDERR records. Returns true at EOF. */
static bool read_output(struct exec *e, int fd, uint8_t type)
{
	for (int i = 0; i < READS_PER_WAKEUP && can_send_output(e); i++) {
		size_t max = stream_read_room(e->s, type);
		ssize_t n = stream_read_data(e->s, fd, type, max);
		if (n > 0) {
			if ((size_t)n < max)
				break;
			continue;
		}
		if (n == -EAGAIN || n == -EWOULDBLOCK || n == -EINTR)
			break;
		if (n < 0 && n != -EIO)
			guest_log("exec: reading the command's output: %s", strerror((int)-n));
		/* 0: end of file; EIO: a PTY whose last slave closed. */
		return true;
	}
	return false;
}

/* The terminal's output is over. The master stays open until the session ends: closing it
 * hangs the terminal up, and a command that closed its terminal but has not exited yet would
 * die of that SIGHUP instead of reporting its own status. */
static void pty_eof(struct exec *e)
{
	e->out_eof = true;
	e->grace_at = 0;
	stdin_drop(e);
}

static void pipe_event(struct exec *e, int *fd, bool *eof, uint8_t type)
{
	if (read_output(e, *fd, type)) {
		close_fd(fd);
		*eof = true;
	}
}

static void out_event(void *ctx, short revents)
{
	struct stream *s = ctx;

	if (!s->dead && s->exec && s->exec->out_fd >= 0)
		pipe_event(s->exec, &s->exec->out_fd, &s->exec->out_eof, EX_STDOUT);
}

static void err_event(void *ctx, short revents)
{
	struct stream *s = ctx;

	if (!s->dead && s->exec && s->exec->err_fd >= 0)
		pipe_event(s->exec, &s->exec->err_fd, &s->exec->err_eof, EX_STDERR);
}

static void in_event(void *ctx, short revents)
{
	struct stream *s = ctx;

	if (s->dead || !s->exec)
		return;
	stdin_flush(s->exec);
	exec_grant(s->exec);
}

static void pty_event(void *ctx, short revents)
{
	struct stream *s = ctx;
	struct exec *e;

	if (s->dead || !s->exec || s->exec->out_fd < 0)
		return;
	e = s->exec;
	if (revents & POLLOUT) {
		stdin_flush(e);
		exec_grant(e);
	}
	if (e->out_eof)
		return;
	if ((revents & (POLLIN | POLLHUP | POLLERR)) && can_send_output(e)) {
		if (read_output(e, e->out_fd, EX_STDOUT))
			pty_eof(e);
	} else if (revents & (POLLHUP | POLLERR)) {
		/* The terminal hung up and its output must wait for window: stop polling for
		 * stdin (it would report the hangup again and again). */
		e->hup = true;
		stdin_drop(e);
	}
}

void exec_poll(struct stream *s)
{
	struct exec *e = s->exec;
	bool out = can_send_output(e);

	if (e->finishing)
		return;
	if (e->pty) {
		short ev = 0;
		if (!e->out_eof && out)
			ev |= POLLIN;
		if (e->in.len && !e->stdin_gone && !e->hup)
			ev |= POLLOUT;
		if (ev)
			poll_add(e->out_fd, ev, pty_event, s);
		return;
	}
	if (out && e->out_fd >= 0)
		poll_add(e->out_fd, POLLIN, out_event, s);
	if (out && e->err_fd >= 0)
		poll_add(e->err_fd, POLLIN, err_event, s);
	if (e->in_fd >= 0 && e->in.len)
		poll_add(e->in_fd, POLLOUT, in_event, s);
}

void exec_advance(struct stream *s)
{
	struct exec *e = s->exec;

	if (e->started && e->exited && !e->finishing) {
		if (e->pty && !e->out_eof && !e->grace_at)
			e->grace_at = now_ms() + PTY_GRACE_MS;
		if (e->out_eof && e->err_eof) {
			uint8_t b[5];
			if (WIFSIGNALED(e->wstatus)) {
				b[0] = 1;
				ch_put_u32(b + 1, (uint32_t)WTERMSIG(e->wstatus));
			} else {
				b[0] = 0;
				ch_put_u32(b + 1, (uint32_t)WEXITSTATUS(e->wstatus));
			}
			ctl_add(e, EX_EXIT, b, sizeof(b));
			e->finishing = true;
			e->pid = 0; /* reaped: nothing to hang up */
		}
	}
	/* Records may span DATA frames: send what the window allows. */
	if (e->ctl_len && s->send_win > 0 && outq_bytes < OUTQ_HIGH) {
		size_t n = e->ctl_len < s->send_win ? e->ctl_len : s->send_win;
		if (chan_send(CH_DATA, s->id, e->ctl, (uint32_t)n, NULL, 0) == 0) {
			s->send_win -= (uint32_t)n;
			memmove(e->ctl, e->ctl + n, e->ctl_len - n);
			e->ctl_len -= n;
		}
	}
	if (e->finishing && e->ctl_len == 0) {
		stream_close(s);
		exec_free(e);
	}
}

/* ---- children and timers ---- */

/* Children of other parts (browser.c's Chromium): their owners hear of their exit. */
static struct {
	pid_t pid;
	void (*fn)(void *ctx, int status);
	void *ctx;
} watches[4];

int child_watch(pid_t pid, void (*fn)(void *ctx, int status), void *ctx)
{
	for (size_t i = 0; i < sizeof(watches) / sizeof(watches[0]); i++) {
		if (watches[i].pid == 0) {
			watches[i].pid = pid;
			watches[i].fn = fn;
			watches[i].ctx = ctx;
			return 0;
		}
	}
	return -ENOSPC;
}

void child_unwatch(pid_t pid)
{
	for (size_t i = 0; i < sizeof(watches) / sizeof(watches[0]); i++)
		if (watches[i].pid == pid)
			watches[i].pid = 0;
}

static bool watch_reaped(pid_t pid, int status)
{
	for (size_t i = 0; i < sizeof(watches) / sizeof(watches[0]); i++) {
		if (watches[i].pid == pid) {
			watches[i].pid = 0;
			watches[i].fn(watches[i].ctx, status);
			return true;
		}
	}
	return false;
}

static void reap(void)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct exec *e;
		if (watch_reaped(pid, status))
			continue;
		for (e = execs; e; e = e->next)
			if (e->pid == pid && !e->exited)
				break;
		if (e) {
			e->exited = true;
			e->wstatus = status;
			e->timeout_at = 0;
			/* Nobody reads a terminal whose command is gone. */
			if (e->pty)
				stdin_drop(e);
			continue;
		}
		for (size_t i = 0; i < n_orphans; i++) {
			if (orphans[i].pid == pid && !orphans[i].reaped) {
				orphans[i].reaped = true;
				break;
			}
		}
	}
}

static void sigchld_event(void *ctx, short revents)
{
	struct signalfd_siginfo si;

	(void)ctx;
	while (read(sigchld_fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		;
	reap();
}

void exec_poll_sigchld(void)
{
	poll_add(sigchld_fd, POLLIN, sigchld_event, NULL);
}

void exec_init(void)
{
	sigset_t mask;

	/* Commands' orphaned children come to us, and are reaped, instead of going to init. */
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	(void)sigprocmask(SIG_BLOCK, &mask, NULL);
	sigchld_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigchld_fd < 0) {
		guest_log("signalfd: %s", strerror(errno));
		exit(EXIT_FAILURE);
	}
}

void exec_timers(int64_t now, int64_t *next)
{
	for (struct exec *e = execs; e; e = e->next) {
		if (e->timeout_at && now >= e->timeout_at) {
			if (e->pid > 0 && !e->exited)
				(void)kill(-e->pid, SIGKILL);
			e->timeout_at = 0;
		}
		deadline_min(next, e->timeout_at);
		if (e->grace_at && now >= e->grace_at && !e->out_eof) {
			/* The command is gone but something keeps its terminal open: take what is
			 * there and finish, unless the host's window holds the output back. */
			if (can_send_output(e)) {
				(void)read_output(e, e->out_fd, EX_STDOUT);
				pty_eof(e);
			} else {
				e->grace_at = now + PTY_GRACE_MS / 2;
			}
		}
		deadline_min(next, e->grace_at);
	}
	for (size_t i = 0; i < n_orphans;) {
		struct orphan *o = &orphans[i];
		if (!o->killed && now >= o->kill_at) {
			(void)kill(-o->pid, SIGKILL);
			o->killed = true;
		}
		if (o->killed && o->reaped) {
			orphans[i] = orphans[--n_orphans];
			continue;
		}
		if (!o->killed)
			deadline_min(next, o->kill_at);
		i++;
	}
}

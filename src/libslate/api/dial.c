/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api/client.h"
#include "api/dial.h"
#include "util/fs.h"
#include "util/macro.h"

#define SCHEME "ssh://"
/* ssh's own default is the TCP timeout (minutes): a host that drops packets must not hang us. */
#define SSH_CONNECT_TIMEOUT "ConnectTimeout=15"
/* How long a closed connection's ssh gets to pass the end of input on and exit by itself. */
#define SSH_EXIT_WAIT_MS 2000
#define BRIDGE_BUF (256 * 1024)

_printf_(3, 4) static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		(void)vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* bad() for a failed call: errno, saved before formatting can change it. Returns -errno. */
_printf_(3, 4) static int bad_errno(char *err, size_t errlen, const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		(void)vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -e;
}

/* What a user name or host name may hold: nothing a shell, ssh's option parser or
 * ssh_config's %-tokens would read as more than a name. */
static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

static bool all_name_chars(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!name_char(p[i]))
			return false;
	return true;
}

static int parse_port(const char *p, unsigned *ret, char *err, size_t errlen)
{
	unsigned v = 0;
	size_t n = strlen(p);

	if (n == 0 || n > 5 || strspn(p, "0123456789") != n)
		return bad(err, errlen, "the port must be a number from 1 to 65535");
	for (size_t i = 0; i < n; i++)
		v = v * 10 + (unsigned)(p[i] - '0');
	if (v < 1 || v > 65535)
		return bad(err, errlen, "the port must be a number from 1 to 65535");
	*ret = v;
	return 0;
}

int api_endpoint_parse_host(const char *url, struct api_endpoint *ret, char *err, size_t errlen)
{
	struct api_endpoint ep = {.ssh = true};
	const char *p, *at, *colon;
	size_t n;

	if (!url || strncmp(url, SCHEME, strlen(SCHEME)) != 0)
		return bad(err, errlen,
		           "only ssh://[USER@]HOST[:PORT] is supported (use --socket for a "
		           "local socket)");
	p = url + strlen(SCHEME);
	for (const char *q = p; *q; q++)
		if ((unsigned char)*q <= ' ' || (unsigned char)*q >= 0x7f)
			return bad(err, errlen, "it holds a space or a control character");
	if (strpbrk(p, "/?#"))
		return bad(err, errlen,
		           "nothing may follow HOST[:PORT] (no path, query or fragment)");
	at = strchr(p, '@');
	if (at) {
		n = (size_t)(at - p);
		if (strchr(at + 1, '@'))
			return bad(err, errlen, "more than one '@'");
		if (memchr(p, ':', n))
			return bad(err, errlen,
			           "no password in the URL: ssh asks for it, or uses a key or an "
			           "agent");
		if (n == 0)
			return bad(err, errlen, "the user name before '@' is empty");
		if (n > API_SSH_USER_MAX || !all_name_chars(p, n) || p[0] == '-')
			return bad(
			        err, errlen,
			        "the user name must be up to %d letters, digits, '.', '_' or '-', "
			        "not starting with '-'",
			        API_SSH_USER_MAX);
		memcpy(ep.user, p, n);
		p = at + 1;
	}
	if (*p == '[') {
		const char *close = strchr(p, ']');
		unsigned char a[16];

		if (!close)
			return bad(err, errlen, "'[' without ']' around an IPv6 address");
		n = (size_t)(close - p - 1);
		if (n == 0 || n >= INET6_ADDRSTRLEN)
			return bad(err, errlen, "no IPv6 address in the brackets");
		memcpy(ep.host, p + 1, n);
		if (inet_pton(AF_INET6, ep.host, a) != 1)
			return bad(err, errlen, "'%s' in brackets is not an IPv6 address", ep.host);
		p = close + 1;
		if (*p && *p != ':')
			return bad(err, errlen, "only ':PORT' may follow the ']'");
		colon = *p ? p : NULL;
	} else {
		colon = strchr(p, ':');
		n = colon ? (size_t)(colon - p) : strlen(p);
		if (colon && strchr(colon + 1, ':'))
			return bad(err, errlen, "an IPv6 address goes in brackets: ssh://[::1]:22");
		if (n == 0)
			return bad(err, errlen, "no HOST");
		if (n > API_SSH_HOST_MAX || !all_name_chars(p, n) || p[0] == '-')
			return bad(err, errlen,
			           "HOST must be a name or an address of letters, digits, '.', '_' "
			           "or '-', not starting with '-'");
		memcpy(ep.host, p, n);
	}
	if (colon && parse_port(colon + 1, &ep.port, err, errlen) < 0)
		return -EINVAL;
	*ret = ep;
	return 0;
}

int api_endpoint_unix(const char *path, struct api_endpoint *ret)
{
	struct api_endpoint ep = {0};

	if (strlen(path) >= sizeof(ep.socket))
		return -ENAMETOOLONG;
	memcpy(ep.socket, path, strlen(path) + 1);
	*ret = ep;
	return 0;
}

const char *api_endpoint_name(const struct api_endpoint *ep, char *buf, size_t len)
{
	bool v6 = strchr(ep->host, ':') != NULL;
	char port[16] = "";

	if (!ep->ssh) {
		(void)snprintf(buf, len, "%s", ep->socket);
		return buf;
	}
	if (ep->port)
		(void)snprintf(port, sizeof(port), ":%u", ep->port);
	(void)snprintf(buf, len, SCHEME "%s%s%s%s%s%s", ep->user, *ep->user ? "@" : "",
	               v6 ? "[" : "", ep->host, v6 ? "]" : "", port);
	return buf;
}

static int dial_unix(const struct api_endpoint *ep, struct api_conn *ret, char *err, size_t errlen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;

	memcpy(sa.sun_path, ep->socket, strlen(ep->socket) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return bad_errno(err, errlen, "socket: %m");
	if (connect(fd, (const struct sockaddr *)&sa, sizeof(sa)) < 0) {
		char why[1024];
		int r = api_socket_explain(ep->socket, strerror(errno), why, sizeof(why));
		(void)snprintf(err, errlen, "%s", why);
		return r;
	}
	*ret = (struct api_conn){.fd = TAKE_FD(fd)};
	return 0;
}

/* The child's side of dial_ssh(): never returns. */
_noreturn_ static void ssh_child(int fd, int errfd, pid_t parent, char **argv)
{
	static const int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGWINCH};
	sigset_t none;
	int e;

	/* A session of its own, as Docker's ssh helper does: the terminal's ^C is the command's
	 * (exec passes it on), and ssh can never stop the terminal by asking it for a password. */
	(void)setsid();
	(void)prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(127);
	for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
		(void)signal(sigs[i], SIG_DFL);
	(void)sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	if (fd <= STDOUT_FILENO) {
		fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		if (fd < 0)
			goto fail;
	}
	if (dup2(fd, STDIN_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0)
		goto fail;
	execvp(argv[0], argv);
fail:
	e = errno;
	(void)!write(errfd, &e, sizeof(e));
	_exit(127);
}

int api_ssh_start(const struct api_endpoint *ep, int fd, pid_t *ret_pid, char *err, size_t errlen)
{
	_cleanup_free_ char *script = NULL;
	_cleanup_close_ int errr = -1, errw = -1;
	char port[16], *argv[24];
	size_t n = 0;
	pid_t pid, self = getpid();
	int ep2[2], e = 0;
	ssize_t k;

	if (ep->ssh_command) {
		if (asprintf(&script, "exec %s \"$@\"", ep->ssh_command) < 0)
			return bad(err, errlen, "out of memory"), -ENOMEM;
		argv[n++] = (char *)"/bin/sh";
		argv[n++] = (char *)"-c";
		argv[n++] = script;
		argv[n++] = (char *)"slate-ssh";
	} else {
		argv[n++] = (char *)"ssh";
	}
	/* -T: no terminal on the remote side; the bytes are the API's, not a login's. */
	argv[n++] = (char *)"-T";
	argv[n++] = (char *)"-o";
	argv[n++] = (char *)SSH_CONNECT_TIMEOUT;
	if (*ep->user) {
		argv[n++] = (char *)"-l";
		argv[n++] = (char *)ep->user;
	}
	if (ep->port) {
		(void)snprintf(port, sizeof(port), "%u", ep->port);
		argv[n++] = (char *)"-p";
		argv[n++] = port;
	}
	argv[n++] = (char *)"--";
	argv[n++] = (char *)ep->host;
	argv[n++] = (char *)"slate";
	argv[n++] = (char *)"system";
	argv[n++] = (char *)"dial-stdio";
	argv[n] = NULL;

	if (pipe2(ep2, O_CLOEXEC) < 0)
		return bad_errno(err, errlen, "pipe: %m");
	errr = ep2[0];
	errw = ep2[1];
	pid = fork();
	if (pid < 0)
		return bad_errno(err, errlen, "fork: %m");
	if (pid == 0)
		ssh_child(fd, errw, self, argv);
	errw = safe_close(errw);
	do
		k = read(errr, &e, sizeof(e));
	while (k < 0 && errno == EINTR);
	if (k == sizeof(e)) {
		(void)waitpid(pid, NULL, 0);
		return bad(err, errlen, "cannot run %s: %s (install OpenSSH's client%s)", argv[0],
		           strerror(e), ep->ssh_command ? ", or fix SLATE_SSH" : ""),
		       -e;
	}
	*ret_pid = pid;
	return 0;
}

static int dial_ssh(const struct api_endpoint *ep, struct api_conn *ret, char *err, size_t errlen)
{
	_cleanup_close_ int mine = -1, theirs = -1;
	int sv[2], r;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return bad_errno(err, errlen, "socketpair: %m");
	mine = sv[0];
	theirs = sv[1];
	r = api_ssh_start(ep, theirs, &pid, err, errlen);
	if (r < 0)
		return r;
	*ret = (struct api_conn){.fd = TAKE_FD(mine), .pid = pid};
	return 0;
}

int api_dial(const struct api_endpoint *ep, struct api_conn *ret, char *err, size_t errlen)
{
	return ep->ssh ? dial_ssh(ep, ret, err, errlen) : dial_unix(ep, ret, err, errlen);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Waits up to ms for pid, then ends it. Returns its wait status. */
static int reap(pid_t pid, long ms)
{
	long waited = 0, step = 1;
	int status = 0;
	pid_t r;

	for (;;) {
		r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return status;
		if (r < 0 && errno != EINTR)
			return 0; /* not ours to reap (someone else did) */
		if (waited >= ms)
			break;
		sleep_ms(step);
		waited += step;
		step = step * 2 > 50 ? 50 : step * 2;
	}
	(void)kill(pid, SIGTERM);
	for (waited = 0; waited < 2000; waited += 10) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return status;
		sleep_ms(10);
	}
	(void)kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

int api_conn_close(struct api_conn *c)
{
	int status = 0;

	if (c->fd >= 0)
		(void)close(c->fd);
	c->fd = -1;
	if (c->pid > 0)
		status = reap(c->pid, SSH_EXIT_WAIT_MS);
	c->pid = 0;
	return status;
}

void api_ssh_status_explain(const struct api_endpoint *ep, int status, char *buf, size_t len)
{
	char name[512];

	(void)api_endpoint_name(ep, name, sizeof(name));
	if (WIFSIGNALED(status))
		(void)snprintf(buf, len, "cannot reach slated on %s: ssh was killed by signal %d",
		               name, WTERMSIG(status));
	else if (WEXITSTATUS(status) == 255)
		(void)snprintf(buf, len,
		               "cannot reach slated on %s: ssh exited 255: it could not connect or "
		               "log in (ssh's own message is above)",
		               name);
	else if (WEXITSTATUS(status) == 127)
		(void)snprintf(buf, len,
		               "cannot reach slated on %s: ssh exited 127: the remote host has no "
		               "'slate' command on its PATH%s",
		               name, ep->ssh_command ? " (or SLATE_SSH names no command)" : "");
	else if (WEXITSTATUS(status) != 0)
		(void)snprintf(
		        buf, len,
		        "cannot reach slated on %s: ssh exited %d: 'slate system dial-stdio' "
		        "failed on the remote host (its message is above)",
		        name, WEXITSTATUS(status));
	else
		(void)snprintf(buf, len,
		               "cannot reach slated on %s: the remote 'slate system dial-stdio' "
		               "ended without an answer from slated",
		               name);
}

int api_conn_fail(const struct api_endpoint *ep, struct api_conn *c, const char *detail, char *buf,
                  size_t len)
{
	int status;

	if (!ep->ssh) {
		(void)api_conn_close(c);
		return api_socket_explain(ep->socket, detail, buf, len);
	}
	status = api_conn_close(c);
	api_ssh_status_explain(ep, status, buf, len);
	return -ECONNREFUSED;
}

/* One direction of api_bridge(): from -> buf -> to. */
struct pump {
	int from, to;
	uint8_t *buf;
	size_t off, len;
	bool eof;
};

/* Reads what from has. Returns 0, or -errno. */
static int pump_read(struct pump *p)
{
	ssize_t k = read(p->from, p->buf, BRIDGE_BUF);

	if (k < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (k == 0)
		p->eof = true;
	p->off = 0;
	p->len = (size_t)k;
	return 0;
}

static int pump_write(struct pump *p)
{
	ssize_t k = write(p->to, p->buf + p->off, p->len);

	if (k < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	p->off += (size_t)k;
	p->len -= (size_t)k;
	return 0;
}

int api_bridge(int in, int out, int sock)
{
	_cleanup_free_ uint8_t *b0 = malloc(BRIDGE_BUF), *b1 = malloc(BRIDGE_BUF);
	struct pump up = {.from = in, .to = sock, .buf = b0};
	struct pump down = {.from = sock, .to = out, .buf = b1};
	bool shut = false;
	int r = 0;

	if (!b0 || !b1)
		return -ENOMEM;
	(void)signal(SIGPIPE, SIG_IGN);
	if (fs_set_nonblock(in, true) < 0 || fs_set_nonblock(out, true) < 0 ||
	    fs_set_nonblock(sock, true) < 0)
		return -errno;
	/* Done once slated closed the connection and all it sent is out. */
	while (!(down.eof && down.len == 0)) {
		struct pollfd pfd[4];
		nfds_t n = 0;
		int iu = -1, id = -1, ou = -1, od = -1;

		if (up.eof && up.len == 0 && !shut) {
			/* The client is done sending: slated sees the end, answers and closes. */
			(void)shutdown(sock, SHUT_WR);
			shut = true;
		}
		if (!up.eof && up.len == 0) {
			iu = (int)n;
			pfd[n++] = (struct pollfd){.fd = in, .events = POLLIN};
		}
		if (up.len) {
			ou = (int)n;
			pfd[n++] = (struct pollfd){.fd = sock, .events = POLLOUT};
		}
		if (!down.eof && down.len == 0) {
			id = (int)n;
			pfd[n++] = (struct pollfd){.fd = sock, .events = POLLIN};
		}
		if (down.len) {
			od = (int)n;
			pfd[n++] = (struct pollfd){.fd = out, .events = POLLOUT};
		}
		if (poll(pfd, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (iu >= 0 && pfd[iu].revents)
			r = pump_read(&up);
		if (r == 0 && ou >= 0 && pfd[ou].revents && pump_write(&up) < 0) {
			/* slated stopped reading: what it still sends goes on to out. */
			up.eof = shut = true;
			up.len = 0;
		}
		if (r == 0 && id >= 0 && pfd[id].revents)
			r = pump_read(&down);
		if (r == 0 && od >= 0 && pfd[od].revents)
			r = pump_write(&down);
		if (r < 0)
			break;
	}
	return r;
}

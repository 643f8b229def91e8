/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate exec, shell and run: a command in a workspace's guest over an API connection upgraded to
 * "slate-exec", which carries the exec records of doc/guest-channel.md both ways.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "channel/proto.h"
#include "slate.h"
#include "util/fs.h"
#include "util/json.h"
#include "workspace/workspace.h"

#define EXEC_PROTOCOL "slate-exec"
#define EXIT_FAILED 1
/* Sessions slated ended while the command ran (doc/slate.1, EXIT STATUS): above the 128+N of a
 * signal and below ssh's 255, so a command's own status rarely looks like one. */
#define EXIT_PAUSED 250
#define EXIT_COMPROMISED 251
#define EXIT_STOPPED 252
#define EXIT_UNRESPONSIVE 253
#define OUT_CAP (512u * 1024)
#define IN_CAP (EX_HEADER_LEN + EX_MAX_RECORD + 64 * 1024)

static struct termios saved_tio;
static bool tio_saved;
static int sig_pipe[2] = {-1, -1};

static void restore_tty(void)
{
	if (tio_saved)
		(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
	tio_saved = false;
}

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;

	(void)!write(sig_pipe[1], &b, 1);
	errno = saved;
}

struct session {
	const char *what;
	int sock;
	int in_fd, out_fd, err_fd; /* the command's stdin (-1: none), stdout and stderr here */
	bool command_ended;        /* status is the command's own (EX_EXIT), not slate's */
	bool tty, stdin_open, progress;
	uint8_t *out; /* records to slated */
	size_t out_len;
	uint8_t *in; /* bytes from slated, not yet a whole record */
	size_t in_len;
	bool done;
	unsigned signals;    /* signals passed on so far */
	unsigned interrupts; /* of which SIGINT */
	int status;          /* our exit status once done */
};

static int queue(struct session *s, uint8_t type, const void *p, uint32_t len)
{
	if (OUT_CAP - s->out_len < EX_HEADER_LEN + (size_t)len)
		return -ENOBUFS;
	ex_record_header(s->out + s->out_len, type, len);
	if (len)
		memcpy(s->out + s->out_len + EX_HEADER_LEN, p, len);
	s->out_len += EX_HEADER_LEN + len;
	return 0;
}

static void window_size(uint16_t *rows, uint16_t *cols)
{
	struct winsize ws;

	*rows = 24;
	*cols = 80;
	if ((ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 ||
	     ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0) &&
	    ws.ws_row > 0 && ws.ws_col > 0) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	}
}

/* One record from slated. */
static int handle_record(struct session *s, const struct ex_record *r)
{
	switch (r->type) {
	case EX_STARTED:
		return 0;
	case EX_STDOUT:
	case EX_STDERR:
		if (fs_write_all(r->type == EX_STDOUT ? s->out_fd : s->err_fd, r->payload, r->len) <
		    0) {
			/* Whoever reads the output is gone (a closed pipe, a full disk): the
			 * session ends, and the guest hangs up on the command. */
			restore_tty();
			fprintf(stderr, "slate: %s: writing the command's %s: %s\n", s->what,
			        r->type == EX_STDOUT ? "output" : "errors", strerror(errno));
			s->status = EXIT_FAILED;
			s->done = true;
		}
		return 0;
	case EX_PROGRESS:
		if (s->progress)
			fprintf(stderr, "slate: %.*s\n", (int)r->len, (const char *)r->payload);
		return 0;
	case EX_EXIT: {
		uint32_t v = ch_get_u32(r->payload + 1);
		s->status = r->payload[0] == 0 ? (int)(v & 0xff) : 128 + (int)(v & 0x7f);
		s->command_ended = true;
		s->done = true;
		return 0;
	}
	case EX_ERROR:
		restore_tty();
		fprintf(stderr, "slate: %s: %.*s\n", s->what, (int)r->len,
		        (const char *)r->payload);
		s->status = EXIT_FAILED;
		s->done = true;
		return 0;
	case EX_ENDED:
		/* slated gave up on the session: the text says why (and what to do). */
		restore_tty();
		fprintf(stderr, "slate: %s: %.*s\n", s->what, (int)r->len - 1,
		        (const char *)r->payload + 1);
		switch (r->payload[0]) {
		case EX_END_PAUSED:
			s->status = EXIT_PAUSED;
			break;
		case EX_END_COMPROMISED:
			s->status = EXIT_COMPROMISED;
			break;
		case EX_END_STOPPED:
			s->status = EXIT_STOPPED;
			break;
		default:
			s->status = EXIT_UNRESPONSIVE;
			break;
		}
		s->done = true;
		return 0;
	default:
		return -EPROTO;
	}
}

static int drain_input(struct session *s)
{
	size_t off = 0;
	struct ex_record r;
	int n;

	while (!s->done && (n = ex_record_decode(s->in + off, s->in_len - off, &r)) > 0) {
		int k = handle_record(s, &r);
		if (k < 0)
			return k;
		off += (size_t)n;
	}
	if (!s->done && n < 0)
		return n;
	memmove(s->in, s->in + off, s->in_len - off);
	s->in_len -= off;
	return 0;
}

/*
 * Whether a signal ends the client rather than only being passed on: SIGTERM and SIGHUP always
 * (whoever sends them wants us gone, and a hung-up terminal reads nothing more); SIGINT the
 * second time (the first Ctrl-C is the command's; a second means it did not help); any other
 * the third time (slated or the guest is stuck).
 */
static bool client_leaves(struct session *s, int sig)
{
	s->signals++;
	if (sig == SIGTERM || sig == SIGHUP)
		return true;
	if (sig == SIGINT)
		return ++s->interrupts > 1;
	return s->signals > 2;
}

/* Ends the client at once, as a shell's 128+N: one try at sending what is queued (the signal
 * itself, so the command gets it if the guest answers); closing the connection ends the
 * session, and the guest hangs up on the command. */
static int leave(struct session *s, int sig)
{
	(void)!write(s->sock, s->out, s->out_len);
	restore_tty();
	if (sig == SIGINT)
		fprintf(stderr, "slate: %s: interrupted again; leaving the command\n", s->what);
	else if (sig != SIGTERM && sig != SIGHUP)
		fprintf(stderr,
		        "slate: %s: signal %d sent 3 times without the command ending; "
		        "leaving it\n",
		        s->what, sig);
	return 128 + sig;
}

/* Runs the session until EXIT or ERROR. Returns the exit status for the command line. */
static int session_loop(struct session *s)
{
	static const int fwd[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH};
	struct sigaction sa = {.sa_handler = on_signal};
	struct pollfd p[3];

	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return slate_fail(s->what, "pipe: %s", strerror(errno));
	(void)sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < ELEMENTSOF(fwd); i++) {
		struct sigaction old;
		/* Under nohup a hang-up must neither end us nor reach the command. */
		if (fwd[i] == SIGHUP && sigaction(SIGHUP, NULL, &old) == 0 &&
		    old.sa_handler == SIG_IGN)
			continue;
		(void)sigaction(fwd[i], &sa, NULL);
	}
	(void)signal(SIGPIPE, SIG_IGN);

	/* Non-blocking: a big write must never block while slated waits for us to read. */
	(void)fs_set_nonblock(s->sock, true);
	while (!s->done) {
		nfds_t n = 0;
		bool want_stdin = s->stdin_open && s->out_len + EX_HEADER_LEN + 65536 <= OUT_CAP;

		p[n++] = (struct pollfd){.fd = s->sock,
		                         .events = (short)(POLLIN | (s->out_len ? POLLOUT : 0))};
		p[n++] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
		p[n++] = (struct pollfd){.fd = want_stdin ? s->in_fd : -1, .events = POLLIN};
		if (poll(p, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			return slate_fail(s->what, "poll: %s", strerror(errno));
		}
		if (p[1].revents & POLLIN) {
			unsigned char sig;
			while (read(sig_pipe[0], &sig, 1) == 1) {
				uint8_t b[4];
				if (sig == SIGWINCH) {
					uint16_t rows, cols;
					if (!s->tty)
						continue;
					window_size(&rows, &cols);
					ch_put_u16(b, rows);
					ch_put_u16(b + 2, cols);
					(void)queue(s, EX_RESIZE, b, 4);
				} else {
					ch_put_u32(b, sig);
					(void)queue(s, EX_SIGNAL, b, 4);
					if (client_leaves(s, sig))
						return leave(s, sig);
				}
			}
		}
		if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
			uint8_t buf[65536];
			ssize_t k = read(s->in_fd, buf, sizeof(buf));
			if (k > 0)
				(void)queue(s, EX_STDIN, buf, (uint32_t)k);
			else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
				s->stdin_open = false;
				(void)queue(s, EX_STDIN_EOF, NULL, 0);
			}
		}
		if (p[0].revents & POLLOUT && s->out_len) {
			ssize_t k = write(s->sock, s->out, s->out_len);
			if (k > 0) {
				memmove(s->out, s->out + k, s->out_len - (size_t)k);
				s->out_len -= (size_t)k;
			} else if (k < 0 && errno != EINTR && errno != EAGAIN) {
				restore_tty();
				return slate_fail(s->what, "connection to slated lost: %s",
				                  strerror(errno));
			}
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t k = read(s->sock, s->in + s->in_len, IN_CAP - s->in_len);
			if (k < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (k <= 0) {
				restore_tty();
				return slate_fail(s->what,
				                  "connection to slated lost before the command "
				                  "ended%s%s",
				                  k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
			}
			s->in_len += (size_t)k;
			int r = drain_input(s);
			if (r < 0) {
				restore_tty();
				return slate_fail(s->what, "malformed reply from slated: %s",
				                  strerror(-r));
			}
		}
	}
	restore_tty();
	return s->status;
}

/* Connects, sends the REQUEST and runs the session, the command's stdin read from in_fd (when
 * o->interactive), its stdout and stderr written to out_fd and err_fd. */
static int exec_session_fds(struct slate_ctx *ctx, const char *what, const char *path,
                            struct json_object *body, const struct exec_opts *o, int in_fd,
                            int out_fd, int err_fd, bool *ret_ended)
{
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	_cleanup_free_ uint8_t *out = malloc(OUT_CAP), *in = malloc(IN_CAP);
	struct api_conn conn = API_CONN_NULL;
	char term[256];
	const char *t = getenv("TERM");
	int sock;
	long n;
	int status;

	if (!req || !out || !in)
		return slate_fail(what, "out of memory");
	if ((size_t)o->argc > EX_MAX_ARGS)
		return slate_usage_error(ctx, "%s: at most %d arguments", what, EX_MAX_ARGS);
	for (int i = 0; i < o->argc; i++) {
		size_t l = strlen(o->argv[i]);
		if (l > EX_MAX_FIELD)
			return slate_usage_error(ctx, "%s: argument %d is over %u bytes", what,
			                         i + 1, EX_MAX_FIELD);
		req->args[req->n_args++] = (struct ex_str){o->argv[i], (uint32_t)l};
	}
	req->login = o->login;
	req->tty = o->tty;
	req->timeout_s = o->timeout_s;
	if (o->user)
		req->user = (struct ex_str){o->user, (uint32_t)strlen(o->user)};
	if (o->workdir)
		req->cwd = (struct ex_str){o->workdir, (uint32_t)strlen(o->workdir)};
	if (o->tty) {
		window_size(&req->rows, &req->cols);
		if (t && *t && strlen(t) < 200 && !strchr(t, '\n')) {
			(void)snprintf(term, sizeof(term), "TERM=%s", t);
			req->env[req->n_env++] = (struct ex_str){term, (uint32_t)strlen(term)};
		}
	}
	n = ex_request_encode(req, out, OUT_CAP);
	if (n < 0)
		return slate_usage_error(ctx, "%s: the command line is too long (over %u bytes)",
		                         what, EX_MAX_REQUEST);

	struct session s = {.what = what,
	                    .in_fd = in_fd,
	                    .out_fd = out_fd,
	                    .err_fd = err_fd,
	                    .tty = o->tty,
	                    .stdin_open = o->interactive,
	                    .progress = isatty(STDERR_FILENO) == 1,
	                    .out = out,
	                    .out_len = (size_t)n,
	                    .in = in};
	if (!o->interactive)
		(void)queue(&s, EX_STDIN_EOF, NULL, 0);

	s.in_len = IN_CAP;
	sock = slate_upgrade(ctx, &conn, what, path, EXEC_PROTOCOL, body, (char *)in, &s.in_len);
	if (sock < 0)
		return EXIT_FAILED;
	s.sock = sock;
	if (o->tty && o->interactive && isatty(STDIN_FILENO) &&
	    tcgetattr(STDIN_FILENO, &saved_tio) == 0) {
		struct termios raw = saved_tio;
		cfmakeraw(&raw);
		tio_saved = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
		(void)atexit(restore_tty);
	}
	if (drain_input(&s) < 0)
		status = slate_fail(what, "malformed reply from slated");
	else
		status = session_loop(&s);
	(void)api_conn_close(&conn);
	if (ret_ended)
		*ret_ended = s.command_ended;
	return status;
}

int slate_exec_fds(struct slate_ctx *ctx, const char *what, const char *name,
                   const struct exec_opts *o, int in_fd, int out_fd, int err_fd, bool *ret_ended)
{
	char path[128 + WORKSPACE_NAME_MAX];

	if (workspace_name_check(name) < 0)
		return slate_usage_error(ctx, "%s: invalid name '%s': %s", what, name,
		                         WORKSPACE_NAME_RULE);
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/exec", name);
	return exec_session_fds(ctx, what, path, NULL, o, in_fd, out_fd, err_fd, ret_ended);
}

enum {
	OPT_TIMEOUT = 2000,
	OPT_USER,
	OPT_WORKDIR,
	OPT_RM,
	OPT_NAME,
	OPT_IMAGE,
	OPT_SHARE,
	OPT_EGRESS,
	OPT_ALLOW,
	OPT_DENY
};

/* Options shared by exec and run; returns 1 when handled, 0 if not, < 0 on bad usage. */
static int exec_option(struct slate_ctx *ctx, int c, struct exec_opts *o)
{
	char *end;
	unsigned long v;

	switch (c) {
	case 'i':
		o->interactive = true;
		return 1;
	case 't':
		o->tty = true;
		return 1;
	case OPT_TIMEOUT:
		errno = 0;
		v = strtoul(optarg, &end, 10);
		if (errno || end == optarg || *end || v == 0 || v > 7 * 24 * 3600)
			return slate_usage_error(ctx, "%s: --timeout %s: seconds, 1 to 604800",
			                         ctx->command, optarg),
			       -1;
		o->timeout_s = (uint32_t)v;
		return 1;
	case OPT_USER:
		o->user = optarg;
		return 1;
	case OPT_WORKDIR:
		if (optarg[0] != '/')
			return slate_usage_error(ctx, "%s: --workdir must be absolute",
			                         ctx->command),
			       -1;
		o->workdir = optarg;
		return 1;
	default:
		return 0;
	}
}

#define EXEC_COMMON_LONGOPTS                                                                       \
	{"interactive", no_argument, NULL, 'i'}, {"tty", no_argument, NULL, 't'},                  \
	        {"timeout", required_argument, NULL, OPT_TIMEOUT},                                 \
	        {"user", required_argument, NULL, OPT_USER},                                       \
	{                                                                                          \
		"workdir", required_argument, NULL, OPT_WORKDIR                                    \
	}

int cmd_exec(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {SLATE_COMMON_OPTS, EXEC_COMMON_LONGOPTS, {}};
	struct exec_opts o = {0};
	const char *name = NULL;
	int c, r;

	opterr = 0;
	/* Options before or after NAME; the command starts at "--" or its first word. */
	while ((c = slate_getopt_name(argc, argv, "+hit", longopts, NULL, &name)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		r = exec_option(ctx, c, &o);
		if (r < 0)
			return EXIT_USAGE;
		if (r > 0)
			continue;
		if (c == 'h' || c == OPT_HELP) {
			printf("Usage: slate exec NAME [-i] [-t] [--timeout S] [--user USER] "
			       "[--workdir DIR] -- CMD [ARG]...\n"
			       "Run CMD in the running workspace NAME. Its stdout and stderr "
			       "stream "
			       "back separately and its exit status is slate's (128+N when a "
			       "signal "
			       "N killed it).\n\n"
			       "  -i, --interactive  forward stdin (otherwise the command reads "
			       "end of "
			       "file)\n"
			       "  -t, --tty          run it on a pseudo-terminal of the terminal's "
			       "size\n"
			       "  --timeout S        kill the command after S seconds\n"
			       "  --user USER        root or the workspace user (the default)\n"
			       "  --workdir DIR      where it runs (default: the user's home)\n"
			       "Ctrl-C, SIGTERM and SIGHUP are passed on to the command; a "
			       "second Ctrl-C, SIGTERM or SIGHUP also ends slate at once "
			       "(130, 143, 129). When the workspace is paused (250), quarantined "
			       "after a leak (251), stopped (252) or its guest stops answering "
			       "(253), slate says so and exits with that status.\n");
			return 0;
		}
		return slate_usage_error(ctx, "exec: unknown option '%s'", argv[optind - 1]);
	}
	if (ctx->json)
		return slate_usage_error(ctx, "exec: --json makes no sense for a command's output");
	if (!name)
		return slate_usage_error(ctx, "exec: give a workspace NAME and a command");
	if (workspace_name_check(name) < 0)
		return slate_usage_error(ctx, "exec: invalid name '%s': %s", name,
		                         WORKSPACE_NAME_RULE);
	if (optind >= argc)
		return slate_usage_error(ctx, "exec: give a command after the workspace NAME");
	o.argv = argv + optind;
	o.argc = argc - optind;
	return slate_exec_fds(ctx, "exec", name, &o, STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO,
	                      NULL);
}

int cmd_shell(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS, {"user", required_argument, NULL, OPT_USER}, {}};
	struct exec_opts o = {.interactive = true, .tty = true, .login = true};
	const char *name = NULL;
	int c;

	opterr = 0;
	while ((c = slate_getopt_name(argc, argv, "+h", longopts, NULL, &name)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == OPT_USER) {
			o.user = optarg;
			continue;
		}
		if (c == 'h' || c == OPT_HELP) {
			printf("Usage: slate shell NAME [--user USER]\n"
			       "An interactive login shell on a pseudo-terminal in the running "
			       "workspace NAME; window size changes follow. Exit the shell to "
			       "leave. SIGTERM or SIGHUP end slate at once (143, 129); a paused "
			       "(250), quarantined (251), stopped (252) or unanswering (253) "
			       "workspace ends it with that status.\n");
			return 0;
		}
		return slate_usage_error(ctx, "shell: unknown option '%s'", argv[optind - 1]);
	}
	if (ctx->json)
		return slate_usage_error(ctx, "shell: --json makes no sense for a shell");
	if (!name || optind < argc)
		return slate_usage_error(ctx, "shell: give exactly one workspace NAME");
	return slate_exec_fds(ctx, "shell", name, &o, STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO,
	                      NULL);
}

int cmd_run(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        EXEC_COMMON_LONGOPTS,
	        {"rm", no_argument, NULL, OPT_RM},
	        {"name", required_argument, NULL, OPT_NAME},
	        {"image", required_argument, NULL, OPT_IMAGE},
	        {"share", required_argument, NULL, OPT_SHARE},
	        {"egress", required_argument, NULL, OPT_EGRESS},
	        {"allow", required_argument, NULL, OPT_ALLOW},
	        {"deny", required_argument, NULL, OPT_DENY},
	        {},
	};
	_cleanup_json_ struct json_object *body = json_object_new_object();
	struct json_object *create = json_object_new_object(), *shares = json_object_new_array();
	/* --egress, --allow, --deny: a new workspace's egress policy, as for 'slate create'. */
	_cleanup_json_ struct json_object *egress = json_object_new_object();
	int opt_index = 0;
	struct exec_opts o = {0};
	bool rm = false;
	int c, r;

	if (!body || !create || !shares || json_add(body, "create", create) < 0 ||
	    json_add(create, "shares", shares) < 0 || !egress)
		return slate_fail("run", "out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hit", longopts, &opt_index)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		r = exec_option(ctx, c, &o);
		if (r < 0)
			return EXIT_USAGE;
		if (r > 0)
			continue;
		switch (c) {
		case OPT_RM:
			rm = true;
			break;
		case OPT_NAME:
			if (workspace_name_check(optarg) < 0)
				return slate_usage_error(ctx, "run: invalid name '%s': %s", optarg,
				                         WORKSPACE_NAME_RULE);
			(void)json_add_string(create, "name", optarg);
			break;
		case OPT_IMAGE:
			(void)json_add_string(create, "image", optarg);
			break;
		case OPT_SHARE:
			r = slate_parse_share(ctx, optarg, shares);
			if (r != 0)
				return r;
			break;
		case OPT_EGRESS:
		case OPT_ALLOW:
		case OPT_DENY:
			/* The option's own name: "egress", "allow" or "deny". */
			r = slate_egress_option(ctx, longopts[opt_index].name, optarg, egress);
			if (r != 0)
				return r;
			break;
		case 'h':
		case OPT_HELP:
			printf("Usage: slate run [--rm] [--name NAME] [--image ID] "
			       "[--share HOSTDIR[:GUESTDIR][:ro]]... [--egress allow-all|deny-all] "
			       "[--allow HOST]... [--deny HOST]... [-i] [-t] [--timeout S] "
			       "[--user USER] [--workdir DIR] -- CMD [ARG]...\n"
			       "Create the workspace NAME unless it exists (default: a new, unique "
			       "name), start it unless it runs, and run CMD in it; CMD's exit "
			       "status "
			       "is slate's. Progress goes to stderr when it is a terminal.\n\n"
			       "  --rm               delete the workspace when the command ends, "
			       "the "
			       "VM stops, or this client goes away -- whatever happens\n"
			       "  --name NAME        the workspace to use or create\n"
			       "  --image ID         the image a new workspace is cloned from\n"
			       "  --share SPEC       a host directory for a new workspace (as in "
			       "'slate create')\n"
			       "  --egress allow-all|deny-all, --allow HOST, --deny HOST\n"
			       "                     a new workspace's egress policy (as in 'slate "
			       "create')\n"
			       "  -i, -t, --timeout, --user, --workdir   as in 'slate exec'\n");
			return 0;
		default:
			return slate_usage_error(ctx, "run: unknown option '%s'", argv[optind - 1]);
		}
	}
	if (ctx->json)
		return slate_usage_error(ctx, "run: --json makes no sense for a command's output");
	if (argc - optind < 1)
		return slate_usage_error(ctx, "run: give a command (after --)");
	(void)json_add_bool(body, "rm", rm);
	/* Members only when an egress option was given: slate_egress_option adds them. */
	if (json_object_object_length(egress) > 0 &&
	    json_add(create, "egress", json_object_get(egress)) < 0)
		return slate_fail("run", "out of memory");
	o.argv = argv + optind;
	o.argc = argc - optind;
	return exec_session_fds(ctx, "run", "/v1/run", body, &o, STDIN_FILENO, STDOUT_FILENO,
	                        STDERR_FILENO, NULL);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * slate-guest: the in-guest agent. It is the only slate code inside a guest, so it stays small,
 * static and libc-only. It serves the guest channel (doc/guest-channel.md): exec sessions the host
 * opens, and the local proxy and SSH agent connections it forwards to the host. One process, one
 * poll() loop; the parts are in chan.c, exec.c and fwd.c.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "guest.h"

void guest_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	/* One write per line: the console interleaves whole lines only. */
	fprintf(stderr, "slate-guest: %s\n", line);
	fflush(stderr);
}

int64_t now_ms(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- bounded buffers ---- */

int gbuf_init(struct gbuf *b, size_t cap)
{
	/* Large enough to be mmap()ed by malloc: pages are only committed once touched. */
	b->p = malloc(cap);
	if (!b->p)
		return -ENOMEM;
	b->off = b->len = 0;
	b->cap = cap;
	return 0;
}

void gbuf_free(struct gbuf *b)
{
	free(b->p);
	b->p = NULL;
	b->off = b->len = b->cap = 0;
}

void gbuf_append(struct gbuf *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	if (b->off + b->len + n > b->cap) {
		memmove(b->p, b->p + b->off, b->len);
		b->off = 0;
	}
	memcpy(b->p + b->off + b->len, p, n);
	b->len += n;
}

void gbuf_consume(struct gbuf *b, size_t n)
{
	b->off += n;
	b->len -= n;
	if (b->len == 0)
		b->off = 0;
}

int gbuf_write(struct gbuf *b, int fd)
{
	while (b->len > 0) {
		ssize_t n = write(fd, gbuf_data(b), b->len);
		if (n > 0)
			gbuf_consume(b, (size_t)n);
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		else
			return n < 0 ? -errno : -EIO;
	}
	return 0;
}

/* ---- the poll table ---- */

/* The channel, the SIGCHLD fd, three listeners, the browser's two and up to three fds per
 * stream. */
#define MAX_POLL (8 + 3 * 2 * CH_MAX_STREAMS)

static struct pollfd pfds[MAX_POLL];
static struct {
	poll_fn fn;
	void *ctx;
} slots[MAX_POLL];
static unsigned n_pfds;

void poll_add(int fd, short events, poll_fn fn, void *ctx)
{
	if (fd < 0 || n_pfds >= MAX_POLL)
		return;
	pfds[n_pfds].fd = fd;
	pfds[n_pfds].events = events;
	pfds[n_pfds].revents = 0;
	slots[n_pfds].fn = fn;
	slots[n_pfds].ctx = ctx;
	n_pfds++;
}

void poll_reset(void)
{
	n_pfds = 0;
}

int poll_run(int64_t next)
{
	int64_t now = now_ms();
	int timeout = next <= now ? 0 : (int)(next - now < INT_MAX ? next - now : INT_MAX);
	int n = poll(pfds, n_pfds, timeout);

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (unsigned i = 0; i < n_pfds && n > 0; i++) {
		if (!pfds[i].revents)
			continue;
		n--;
		slots[i].fn(slots[i].ctx, pfds[i].revents);
	}
	return 0;
}

/* 1..65535, or 0 for "none" where allowed. */
static int parse_port(const char *s, bool none_ok, int *ret)
{
	uint64_t v;

	if (none_ok && strcmp(s, "none") == 0) {
		*ret = 0;
		return 0;
	}
	if (!parse_dec(s, 65535, &v) || v < 1)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: slate-guest [OPTION]...\n"
	        "The slate in-guest agent: serves the guest channel (exec sessions, the egress\n"
	        "proxy and SSH agent forwarding).\n"
	        "\n"
	        "  --channel PATH       the channel: a unix socket to connect to or a device\n"
	        "                       (default: vsock CID 2 port %d, else the virtio-serial\n"
	        "                       port %s)\n"
	        "  --proxy-port PORT    forward 127.0.0.1:PORT to the host's egress proxy\n"
	        "                       (default: 3128; none: off)\n"
	        "  --cdp-port PORT      forward 127.0.0.1:PORT to the workspace's browser VM\n"
	        "                       (DevTools; default: 9222; none: off)\n"
	        "  --agent-socket PATH  forward connections to this unix socket to the host's SSH\n"
	        "                       agent (default: /run/slate/ssh-agent.sock; none: off)\n"
	        "  --once               print the ready line and exit instead of staying up\n"
	        "  --provision          write the host's provisioning request (stdin) and exit\n"
	        "  --probe              answer the host's residue probe (stdin, doc/residue.md)\n"
	        "                       and exit\n"
	        "  --identity           after a snapshot restore: read \"identity NAME SEC\n"
	        "                       NSEC SEEDHEX\" (stdin); seed the kernel RNG, set the\n"
	        "                       clock, mount /dev/vdb at uid 1000's home if nothing\n"
	        "                       is mounted there, set the hostname (/etc/hostname,\n"
	        "                       /etc/hosts), write a new /etc/machine-id; print ok\n"
	        "  --version            print the version and exit\n"
	        "  --help               print this help and exit\n",
	        CH_VSOCK_PORT, CH_SERIAL_NAME);
}

/* The host and the test harness wait for this exact line on the console. */
static int announce_ready(void)
{
	if (printf("slate-guest %s: ready\n", PACKAGE_VERSION) < 0 || fflush(stdout) == EOF)
		return -EIO;
	return 0;
}

/* Commands get pipes and ptys dup()ed onto 0, 1 and 2: those must never be ours by accident. */
static void keep_std_fds_open(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int n = open("/dev/null", O_RDWR);
		if (n >= 0 && n != fd) {
			(void)dup2(n, fd);
			(void)close(n);
		}
	}
}

int main(int argc, char *argv[])
{
	enum {
		OPT_ONCE = 0x100,
		OPT_VERSION,
		OPT_HELP,
		OPT_CHANNEL,
		OPT_PROXY,
		OPT_AGENT,
		OPT_PROVISION,
		OPT_PROBE,
		OPT_IDENTITY,
		OPT_CDP,
		OPT_DEVTOOLS,
		OPT_BROWSER
	};
	static const struct option options[] = {
	        {"channel", required_argument, NULL, OPT_CHANNEL},
	        {"proxy-port", required_argument, NULL, OPT_PROXY},
	        {"agent-socket", required_argument, NULL, OPT_AGENT},
	        {"once", no_argument, NULL, OPT_ONCE},
	        {"provision", no_argument, NULL, OPT_PROVISION},
	        {"probe", no_argument, NULL, OPT_PROBE},
	        {"identity", no_argument, NULL, OPT_IDENTITY},
	        {"cdp-port", required_argument, NULL, OPT_CDP},
	        /* Hidden: the browser VM's side (doc/guest-channel.md), and the tests' port. */
	        {"browser", no_argument, NULL, OPT_BROWSER},
	        {"devtools-port", required_argument, NULL, OPT_DEVTOOLS},
	        {"version", no_argument, NULL, OPT_VERSION},
	        {"help", no_argument, NULL, OPT_HELP},
	        {0},
	};
	const char *channel = NULL, *agent = "/run/slate/ssh-agent.sock";
	int proxy_port = 3128, cdp_port = 9222;
	bool once = false, browser = false;
	int c, r;

	while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
		switch (c) {
		case OPT_CHANNEL:
			channel = optarg;
			break;
		case OPT_PROXY:
			if (parse_port(optarg, true, &proxy_port) < 0) {
				fprintf(stderr,
				        "slate-guest: --proxy-port takes 1..65535 or none\n");
				return 2;
			}
			break;
		case OPT_CDP:
			if (parse_port(optarg, true, &cdp_port) < 0) {
				fprintf(stderr, "slate-guest: --cdp-port takes 1..65535 or none\n");
				return 2;
			}
			break;
		case OPT_DEVTOOLS:
			if (parse_port(optarg, false, &devtools_port) < 0) {
				fprintf(stderr, "slate-guest: --devtools-port takes 1..65535\n");
				return 2;
			}
			break;
		case OPT_BROWSER:
			browser = true;
			break;
		case OPT_AGENT:
			agent = strcmp(optarg, "none") == 0 ? NULL : optarg;
			break;
		case OPT_ONCE:
			once = true;
			break;
		case OPT_PROVISION:
			return provision_main();
		case OPT_PROBE:
			return probe_main();
		case OPT_IDENTITY:
			return identity_main();
		case OPT_VERSION:
			printf("slate-guest %s\n", PACKAGE_VERSION);
			return fflush(stdout) == EOF ? EXIT_FAILURE : EXIT_SUCCESS;
		case OPT_HELP:
			usage(stdout);
			return EXIT_SUCCESS;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "slate-guest: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (browser)
		return browser_main();
	if (agent && strlen(agent) >= 108) {
		fprintf(stderr, "slate-guest: --agent-socket path too long\n");
		return 2;
	}

	if (!once) {
		keep_std_fds_open();
		/* Writes to a closed channel, connection or pipe fail with EPIPE instead. */
		(void)signal(SIGPIPE, SIG_IGN);
		exec_init();
		(void)fwd_init(proxy_port, cdp_port, agent);
		chan_init(channel);
	}
	r = announce_ready();
	if (r < 0) {
		fprintf(stderr, "slate-guest: cannot write the ready line: %s\n", strerror(-r));
		return EXIT_FAILURE;
	}
	if (once)
		return EXIT_SUCCESS;

	for (;;) {
		int64_t now, next;

		/* Sessions move on (exits, windows), timers fire, sessions move on again. */
		streams_advance();
		now = now_ms();
		next = now + 60 * 1000;
		chan_timers(now, &next);
		exec_timers(now, &next);
		fwd_timers(now, &next);
		browser_timers(now, &next);
		streams_advance();
		chan_flush();

		poll_reset();
		chan_poll();
		exec_poll_sigchld();
		fwd_poll_listeners();
		streams_poll();

		r = poll_run(next);
		if (r < 0) {
			guest_log("poll: %s", strerror(-r));
			return EXIT_FAILURE;
		}
	}
}

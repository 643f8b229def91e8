/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slated-helper: the few privileged acts slated asks for (doc/helper.md), for one state
 * directory fixed here. All logic lives in libslate (helper/server.c); this file picks the
 * socket to serve: one slated spawned it with (--fd), one of its own (--listen), or systemd's
 * (slated-helper.socket).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "helper/proto.h"
#include "helper/server.h"
#include "util/log.h"
#include "util/macro.h"
#include "version.h"
#include "vm/virtiofs.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: slated-helper --state-dir DIR [--fd N | --listen PATH] [OPTION]...\n"
	        "Mounts slated's storage pool and starts virtiofsd for shares, on slated's "
	        "behalf.\n"
	        "Run by slated (--fd) or by systemd (slated-helper.socket); see slated(8).\n\n"
	        "      --state-dir DIR     the only state directory whose pool it mounts\n"
	        "                          (absolute and canonical)\n"
	        "      --fd N              serve the connected socket N (slated's socketpair) and\n"
	        "                          exit when it closes\n"
	        "      --listen PATH       make a socket at PATH (mode 0600) and serve it\n"
	        "                          (without either: the socket systemd passes)\n"
	        "      --virtiofsd PATH    the virtiofsd to run for shares (default %s)\n"
	        "      --log-level LEVEL   err, warning, notice, info or debug (default info)\n"
	        "  -h, --help              this help\n"
	        "  -V, --version           print the version\n",
	        VIRTIOFSD_DEFAULT);
}

struct options {
	const char *state_dir;
	const char *listen;
	const char *virtiofsd;
	int fd;
};

static int parse_fd(const char *s)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(s, &end, 10);
	if (errno || end == s || *end || n < 3 || n > INT_MAX)
		return -EINVAL;
	return (int)n;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	enum { OPT_STATE = 256, OPT_FD, OPT_LISTEN, OPT_VIRTIOFSD, OPT_LOG };
	static const struct option longopts[] = {
	        {"state-dir", required_argument, NULL, OPT_STATE},
	        {"fd", required_argument, NULL, OPT_FD},
	        {"listen", required_argument, NULL, OPT_LISTEN},
	        {"virtiofsd", required_argument, NULL, OPT_VIRTIOFSD},
	        {"log-level", required_argument, NULL, OPT_LOG},
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {},
	};
	int c, r;

	while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) >= 0) {
		switch (c) {
		case OPT_STATE:
			o->state_dir = optarg;
			break;
		case OPT_FD:
			o->fd = parse_fd(optarg);
			if (o->fd < 0) {
				log_error("--fd %s: a file descriptor number, 3 or more", optarg);
				return -EINVAL;
			}
			break;
		case OPT_LISTEN:
			o->listen = optarg;
			break;
		case OPT_VIRTIOFSD:
			o->virtiofsd = optarg;
			break;
		case OPT_LOG:
			r = log_level_from_string(optarg);
			if (r < 0) {
				log_error("unknown log level '%s'", optarg);
				return -EINVAL;
			}
			log_set_max_level(r);
			break;
		case 'h':
			usage(stdout);
			exit(EXIT_SUCCESS);
		case 'V':
			printf("slated-helper %s (protocol version %d)\n", SLATE_VERSION,
			       HELPER_VERSION);
			exit(EXIT_SUCCESS);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	if (!o->state_dir) {
		log_error("--state-dir is required: the state directory whose pool to mount");
		return -EINVAL;
	}
	if (o->fd >= 0 && o->listen) {
		log_error("--fd and --listen exclude each other");
		return -EINVAL;
	}
	if (o->virtiofsd && !helper_path_ok(o->virtiofsd)) {
		log_error("--virtiofsd %s: an absolute, plain path", o->virtiofsd);
		return -EINVAL;
	}
	return 0;
}

/* The state directory is fixed for the helper's life: absolute, and its own canonical name,
 * since it goes into mount(2) and is compared with what requests name byte for byte. */
static int check_state_dir(const char *dir)
{
	_cleanup_free_ char *real = NULL;

	if (!helper_path_ok(dir))
		return log_error_errno(-EINVAL, "--state-dir %s: an absolute, plain path", dir);
	real = realpath(dir, NULL);
	if (!real)
		return log_error_errno(-errno, "--state-dir %s", dir);
	if (!streq(real, dir))
		return log_error_errno(-EINVAL, "--state-dir %s: not canonical, use %s", dir, real);
	return 0;
}

static int listen_on(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;
	mode_t old;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return log_error_errno(-ENAMETOOLONG, "--listen %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_error_errno(-errno, "socket");
	(void)unlink(path);
	/* Root only, from the moment it exists. */
	old = umask(0177);
	r = RET_NERRNO(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
	(void)umask(old);
	if (r < 0)
		return log_error_errno(r, "cannot bind %s", path);
	if (listen(fd, 16) < 0)
		return log_error_errno(-errno, "cannot listen on %s", path);
	return TAKE_FD(fd);
}

/* Nothing slated (or systemd) left open besides the socket reaches virtiofsd or stays open. */
static void close_others(int keep)
{
	for (int fd = 3; fd < keep; fd++)
		(void)close(fd);
	(void)close_range((unsigned)keep + 1, ~0u, 0);
}

int main(int argc, char **argv)
{
	struct options o = {.fd = -1};
	struct helper_server s;
	int r, type = 0;
	socklen_t len = sizeof(type);

	log_open("slated-helper", LOG_TARGET_AUTO);
	if (parse_args(argc, argv, &o) < 0)
		return 2;
	(void)umask(0077);
	(void)signal(SIGPIPE, SIG_IGN);
	if (check_state_dir(o.state_dir) < 0)
		return EXIT_FAILURE;
	s = (struct helper_server){.state_dir = o.state_dir, .virtiofsd = o.virtiofsd};

	if (o.fd >= 0) {
		/* slated's end of a socketpair: one connection, this helper's whole life. */
		if (getsockopt(o.fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
		    type != SOCK_SEQPACKET) {
			log_error("--fd %d is not a SOCK_SEQPACKET socket", o.fd);
			return EXIT_FAILURE;
		}
		(void)fcntl(o.fd, F_SETFD, FD_CLOEXEC);
		close_others(o.fd);
		log_debug("serving slated on fd %d for %s", o.fd, o.state_dir);
		r = helper_serve_conn(&s, o.fd);
		if (r < 0 && r != -EPERM)
			return log_error_errno(r, "serving fd %d", o.fd), EXIT_FAILURE;
		return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
	}

	if (o.listen) {
		o.fd = listen_on(o.listen);
		if (o.fd < 0)
			return EXIT_FAILURE;
	} else {
		r = sd_listen_fds(1);
		if (r != 1 ||
		    sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
			log_error("expected one listening unix SOCK_SEQPACKET socket from systemd "
			          "(slated-helper.socket), or --fd or --listen");
			return EXIT_FAILURE;
		}
		o.fd = SD_LISTEN_FDS_START;
		(void)fcntl(o.fd, F_SETFD, FD_CLOEXEC);
	}
	close_others(o.fd);
	log_info("slated-helper %s serving %s for the state directory %s", SLATE_VERSION,
	         o.listen ? o.listen : "the socket systemd passed", o.state_dir);
	(void)sd_notify(0, "READY=1");
	r = helper_serve_listen(&s, o.fd, -1);
	if (r < 0)
		return log_error_errno(r, "serving"), EXIT_FAILURE;
	return EXIT_SUCCESS;
}

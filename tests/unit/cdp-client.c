/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The CDP client (browser/cdp.h) as a program, for tests/unit/cdp-chromium.test: dials
 * 127.0.0.1:PORT over TCP (slated dials through the guest channel instead), and
 *   cdp-client PORT version              prints /json/version's Browser
 *   cdp-client PORT navigate URL         prints the page's title once it loaded
 *   cdp-client PORT screenshot FILE      writes a PNG of the first page
 *   cdp-client PORT view SOCKET          serves the first page on VNC at SOCKET (browser-view.h)
 *                                        and prints "ok WxH"; SIGTERM stops it
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "browser/cdp.h"
#include "daemon/browser-view.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

#define TIMEOUT_MS 60000

static int tcp_dial(void *ud, int *ret_fd, struct slate_error *err)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(*(unsigned short *)ud)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return slate_error_errno(err, -errno, "socket");
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int r = -errno;
		close(fd);
		return slate_error_errno(err, r, "connect 127.0.0.1:%u", *(unsigned short *)ud);
	}
	*ret_fd = fd;
	return 0;
}

int main(int argc, char **argv)
{
	struct slate_error err = {0};
	unsigned short port;
	int r = -EINVAL;

	if (argc < 3 || atoi(argv[1]) <= 0 || atoi(argv[1]) > 65535) {
		fprintf(stderr, "usage: %s PORT version|navigate URL|screenshot FILE\n", argv[0]);
		return 2;
	}
	port = (unsigned short)atoi(argv[1]);
	if (strcmp(argv[2], "version") == 0) {
		_cleanup_json_ struct json_object *v = NULL;
		const char *b = "?";
		r = cdp_version(tcp_dial, &port, &v, TIMEOUT_MS, &err);
		if (r >= 0) {
			(void)json_get_string(v, "Browser", &b);
			printf("%s\n", b);
		}
	} else if (strcmp(argv[2], "navigate") == 0 && argc == 4) {
		_cleanup_free_ char *title = NULL;
		r = cdp_navigate(tcp_dial, &port, argv[3], &title, TIMEOUT_MS, &err);
		if (r >= 0)
			printf("%s\n", title);
	} else if (strcmp(argv[2], "screenshot") == 0 && argc == 4) {
		_cleanup_free_ uint8_t *png = NULL;
		size_t len = 0;
		r = cdp_screenshot(tcp_dial, &port, &png, &len, TIMEOUT_MS, &err);
		if (r >= 0) {
			FILE *f = fopen(argv[3], "we");
			if (!f || fwrite(png, 1, len, f) != len || fclose(f) != 0) {
				fprintf(stderr, "writing %s: %s\n", argv[3], strerror(errno));
				return 1;
			}
		}
	} else if (strcmp(argv[2], "view") == 0 && argc == 4) {
		struct browser_view *v = NULL;
		sigset_t set;
		unsigned w, h;
		int sig;

		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGINT);
		(void)sigprocmask(SIG_BLOCK, &set, NULL);
		r = browser_view_start(tcp_dial, &port, argv[3], getuid(), &v, &err);
		if (r >= 0) {
			browser_view_size(v, &w, &h);
			printf("ok %ux%u\n", w, h);
			fflush(stdout);
			(void)sigwait(&set, &sig);
			printf("%s\n", browser_view_alive(v) ? "stopping" : "stopping a dead view");
			browser_view_stop(v);
		}
	} else {
		fprintf(stderr, "unknown command %s\n", argv[2]);
		return 2;
	}
	if (r < 0) {
		fprintf(stderr, "%s: %s\n", argv[2], slate_error_text(&err));
		return 1;
	}
	return 0;
}

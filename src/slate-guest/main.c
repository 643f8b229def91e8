/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * slate-guest: the in-guest agent. It is the only slate code inside a guest, so it stays small,
 * static and libc-only. For now it announces readiness on the console; the guest channel follows.
 */

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f, "Usage: slate-guest [OPTION]...\n"
	           "The slate in-guest agent.\n"
	           "\n"
	           "  --once       print the ready line and exit instead of staying up\n"
	           "  --version    print the version and exit\n"
	           "  --help       print this help and exit\n");
}

/* The host and the test harness wait for this exact line on the console. */
static int announce_ready(void)
{
	if (printf("slate-guest %s: ready\n", PACKAGE_VERSION) < 0 || fflush(stdout) == EOF)
		return -EIO;
	return 0;
}

int main(int argc, char *argv[])
{
	enum { OPT_ONCE = 0x100, OPT_VERSION, OPT_HELP };
	static const struct option options[] = {
	        {"once", no_argument, NULL, OPT_ONCE},
	        {"version", no_argument, NULL, OPT_VERSION},
	        {"help", no_argument, NULL, OPT_HELP},
	        {0},
	};
	bool once = false;
	int c;

	while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
		switch (c) {
		case OPT_ONCE:
			once = true;
			break;
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

	int r = announce_ready();
	if (r < 0) {
		fprintf(stderr, "slate-guest: cannot write the ready line: %s\n", strerror(-r));
		return EXIT_FAILURE;
	}
	if (once)
		return EXIT_SUCCESS;

	/* Nothing to serve yet: stay up until a signal ends us. */
	for (;;)
		(void)pause();
}

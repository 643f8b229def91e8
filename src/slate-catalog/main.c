/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate-catalog: the publisher's tool for image catalogs (keygen, sign, verify).
 * The catalog format and its verifier arrive with the image-catalog work (doc/catalog.md);
 * until then this program only knows its own name and version.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "version.h"

static void usage(FILE *f)
{
	fprintf(f, "Usage: slate-catalog COMMAND [ARG]...\n"
	           "Publisher's tool for slate image catalogs.\n\n"
	           "Commands (see slate-catalog(1)):\n"
	           "  keygen SECRET_KEY PUBLIC_KEY\n"
	           "  sign --key SECRET_KEY [--channel NAME] CATALOG\n"
	           "  verify --trusted PUBKEY_OR_DIR [--channel NAME] CATALOG [SIG]\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {},
	};
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hV", longopts, NULL)) >= 0) {
		switch (c) {
		case 'h':
			usage(stdout);
			return EXIT_SUCCESS;
		case 'V':
			printf("slate-catalog %s\n", SLATE_VERSION);
			return EXIT_SUCCESS;
		default:
			fprintf(stderr, "slate-catalog: unknown option '%s'\n", argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	fprintf(stderr,
	        "slate-catalog: %s: not available in slate %s yet (catalog signing is "
	        "tracked by the image-catalog work)\n",
	        argv[optind], SLATE_VERSION);
	return 1;
}

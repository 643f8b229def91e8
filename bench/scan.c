/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bench/scan: the leak scanner's automaton over a file, as the proxy feeds it (64 KiB pieces,
 * the state carried across), for bench/tripwire-scan. Placeholders: ten, shaped like a
 * workspace's (github, anthropic, openai, an aws key id, secret and 700-byte session token,
 * four generic), drawn from a fixed seed.
 *
 *   bench/scan patterns raw|tripwire OUT    writes the patterns, one per line (grep -F -f)
 *   bench/scan scan raw|tripwire FILE       scans FILE: prints bytes, matches, seconds, MB/s
 *
 * raw: the placeholders alone (what the proxy scanned for before encoded forms);
 * tripwire: with their encoded forms (proxy/tripwire.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy/scan.h"
#include "proxy/tripwire.h"

#define N_PH 10
#define PIECE (64u << 10)

static char phs[N_PH][800];
static const char *php[N_PH];

static void make_placeholders(void)
{
	static const char *const pfx[N_PH] = {"ghp_slate",     "sk-ant-api03-slate",
	                                      "sk-proj-slate", "AKIASLATE",
	                                      "slate",         "slate",
	                                      "slt_",          "slt_",
	                                      "slt_",          "slt_"};
	static const size_t len[N_PH] = {40, 108, 164, 20, 40, 700, 36, 36, 36, 36};
	const char *al = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	unsigned seed = 7;

	for (int i = 0; i < N_PH; i++) {
		size_t p = strlen(pfx[i]);
		memcpy(phs[i], pfx[i], p);
		for (size_t j = p; j < len[i]; j++) {
			seed = seed * 1103515245u + 12345u;
			phs[i][j] = al[(seed >> 16) % (i == 3 ? 26 : 62)];
		}
		phs[i][len[i]] = '\0';
		php[i] = phs[i];
	}
}

static int count_fn(size_t pattern, size_t end, void *userdata)
{
	(void)pattern;
	(void)end;
	(*(unsigned long *)userdata)++;
	return 0;
}

int main(int argc, char **argv)
{
	struct tripwire *t = NULL;
	struct scan *raw = NULL;
	const struct scan *s;
	bool use_raw;

	if (argc != 4 || (strcmp(argv[1], "patterns") && strcmp(argv[1], "scan")) ||
	    (strcmp(argv[2], "raw") && strcmp(argv[2], "tripwire"))) {
		fprintf(stderr, "usage: bench/scan patterns|scan raw|tripwire FILE\n");
		return 2;
	}
	use_raw = strcmp(argv[2], "raw") == 0;
	make_placeholders();
	if (use_raw) {
		size_t lens[N_PH];
		for (int i = 0; i < N_PH; i++)
			lens[i] = strlen(php[i]);
		if (scan_new(php, lens, N_PH, &raw) < 0)
			return 1;
		s = raw;
	} else {
		if (tripwire_new(php, N_PH, &t) < 0)
			return 1;
		s = tripwire_scan(t);
	}
	if (strcmp(argv[1], "patterns") == 0) {
		FILE *f = fopen(argv[3], "w");
		if (!f)
			return 1;
		if (use_raw)
			for (int i = 0; i < N_PH; i++)
				fprintf(f, "%s\n", php[i]);
		else
			for (size_t i = 0; i < tripwire_n_pats(t); i++)
				fprintf(f, "%s\n", tripwire_pat(t, i)->form);
		return fclose(f) == 0 ? 0 : 1;
	}
	{
		int fd = open(argv[3], O_RDONLY | O_CLOEXEC);
		static unsigned char buf[PIECE];
		unsigned long matches = 0, bytes = 0;
		uint32_t st = SCAN_START;
		struct timespec a, b;
		double secs = 0;
		ssize_t n;

		if (fd < 0)
			return perror(argv[3]), 1;
		while ((n = read(fd, buf, sizeof(buf))) > 0) {
			clock_gettime(CLOCK_MONOTONIC, &a);
			(void)scan_feed(s, &st, buf, (size_t)n, count_fn, &matches);
			clock_gettime(CLOCK_MONOTONIC, &b);
			secs += (double)(b.tv_sec - a.tv_sec) +
			        (double)(b.tv_nsec - a.tv_nsec) / 1e9;
			bytes += (unsigned long)n;
		}
		printf("%s %lu bytes %lu matches %.3f s %.0f MB/s (%zu patterns, stride %zu)\n",
		       argv[2], bytes, matches, secs, (double)bytes / secs / 1e6,
		       use_raw ? (size_t)N_PH : tripwire_n_pats(t), scan_stride(s));
		close(fd);
	}
	scan_free(raw);
	tripwire_unref(t);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Replays a fuzz target's corpus without libFuzzer, so that every input that once crashed a
 * target stays a unit test. Linked with one fuzz-*.c; the corpus directory is the first
 * argument, else $FUZZ_CORPUS_DIR, else the target's corpus in the source tree: the program
 * test-fuzz-corpus-NAME replays FUZZ_CORPUS_ROOT/fuzz-NAME.
 */

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* libFuzzer's default -max_len is far below this; a larger file is a mistake in the corpus. */
#define REPLAY_MAX (16u * 1024u * 1024u)

static int compare_names(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int only_files(const struct dirent *de)
{
	return de->d_name[0] != '.';
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : getenv("FUZZ_CORPUS_DIR");
	_cleanup_close_ int dfd = -1;
	struct dirent **names = NULL;
	int n, failed = 0, replayed = 0;

#ifdef FUZZ_CORPUS_ROOT
	char own[4096];
	const char *base = strrchr(argv[0], '/'), *name;

	base = base ? base + 1 : argv[0];
	name = strstr(base, "test-fuzz-corpus-");
	if (!dir && name &&
	    snprintf(own, sizeof(own), "%s/fuzz-%s", FUZZ_CORPUS_ROOT,
	             name + strlen("test-fuzz-corpus-")) < (int)sizeof(own))
		dir = own;
#endif
	if (!dir) {
		fprintf(stderr, "usage: %s CORPUS-DIR\n", argv[0]);
		return 2;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(stderr, "%s: %m\n", dir);
		return 1;
	}
	/* Sorted, so a failure names the same file on every run. */
	n = scandirat(dfd, ".", &names, only_files, compare_names);
	if (n < 0) {
		fprintf(stderr, "%s: %m\n", dir);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct buf *b = NULL;
		int r = fs_read_file_at(dfd, names[i]->d_name, REPLAY_MAX, &b);

		if (r < 0) {
			fprintf(stderr, "FAIL %s: cannot read (%s)\n", names[i]->d_name,
			        slate_strerror(r));
			failed++;
		} else {
			/* An exact-size copy, so ASan sees any read past the input. */
			size_t len = buf_len(b);
			uint8_t *copy = malloc(len ? len : 1);
			if (!copy)
				abort();
			if (len > 0)
				memcpy(copy, buf_ptr(b), len);
			(void)LLVMFuzzerTestOneInput(copy, len);
			free(copy);
			buf_free(b);
			printf("ok %s (%zu bytes)\n", names[i]->d_name, len);
			replayed++;
		}
		free(names[i]);
	}
	free(names);
	if (replayed == 0 && failed == 0) {
		fprintf(stderr, "%s: empty corpus\n", dir);
		return 1;
	}
	printf("%d inputs replayed from %s\n", replayed, dir);
	return failed ? 1 : 0;
}

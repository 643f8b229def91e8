/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A scratch directory for a unit test, $TMPDIR/STEM.XXXXXX (/tmp when TMPDIR is unset or
 * empty), shared by the tests that make one in their cmocka setup.
 */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct test_tmpdir {
	char path[256];
	int fd;
};

/* Makes the directory, its name in path (size bytes); 0, or -1 when it could not. */
static inline int test_mkdtemp(char *path, size_t size, const char *stem)
{
	const char *base = getenv("TMPDIR");
	int n = snprintf(path, size, "%s/%s.XXXXXX", base && *base ? base : "/tmp", stem);

	if (n < 0 || (size_t)n >= size)
		return -1;
	return mkdtemp(path) ? 0 : -1;
}

/* Removes the tree at path (rm -rf); 0, or -1 when it could not. */
static inline int test_rmtree(const char *path)
{
	char cmd[300];

	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	return system(cmd) == 0 ? 0 : -1;
}

/* A new directory, open (fd) for the *at() calls; NULL when it could not be made. */
static inline struct test_tmpdir *test_tmpdir_new(const char *stem)
{
	struct test_tmpdir *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	if (test_mkdtemp(t->path, sizeof(t->path), stem) < 0) {
		free(t);
		return NULL;
	}
	t->fd = open(t->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->fd < 0) {
		(void)rmdir(t->path);
		free(t);
		return NULL;
	}
	return t;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Times the workspace verbs that have no API yet (checkpoints are made after proven boots) on a
 * state directory the caller mounted (bench/workspace-ops makes loop-mounted btrfs and XFS):
 *
 *   checkpoint  workspace_checkpoint_create() of a used pair (disk.img + home.img with data of
 *               their own), against `cp --reflink=always` of the same two files;
 *   rm          workspace_delete() of a workspace holding 5 checkpoints, against `rm -rf` of a
 *               directory tree with the same files (reflinked from the workspace).
 *
 * Usage: workspace-ops STATE-DIR BASE-IMAGE LABEL [RUNS]. Prints, per figure, one line in the
 * format of bench/run with the median of RUNS samples (± standard deviation), and appends it to
 * $BENCH_RESULTS (default bench/results.txt). Every sample starts after a syncfs(), so no run
 * pays for the previous one's writeback.
 */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "image/store.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/macro.h"
#include "workspace/workspace.h"

#define MIB (1024ull * 1024ull)

extern char **environ;

static double now_ms(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void stats(double *v, int n, double *ret_median, double *ret_sd)
{
	double mean = 0, var = 0;

	for (int i = 0; i < n; i++)
		mean += v[i];
	mean /= n;
	for (int i = 0; i < n; i++)
		var += (v[i] - mean) * (v[i] - mean);
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	*ret_median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*ret_sd = n > 1 ? sqrt(var / (n - 1)) : 0;
}

static void report(const char *name, double *ours, double *peer, int n)
{
	const char *results = getenv("BENCH_RESULTS");
	double om, os, pm, ps;
	char line[512], date[16];
	time_t t = time(NULL);
	FILE *f;

	stats(ours, n, &om, &os);
	stats(peer, n, &pm, &ps);
	(void)snprintf(line, sizeof(line),
	               "%s: ours %.2f ms (±%.2f), peer %.2f ms (±%.2f), ratio ours/peer %.2f", name,
	               om, os, pm, ps, om / pm);
	printf("%s\n", line);
	(void)strftime(date, sizeof(date), "%Y-%m-%d", gmtime(&t));
	f = fopen(results ? results : "bench/results.txt", "ae");
	if (f) {
		fprintf(f, "%s %s (median of %d)\n", date, line, n);
		fclose(f);
	}
}

/* Runs argv (no shell), returns the wall time in ms, or exits on failure. */
static double run_timed(const char *const argv[])
{
	double t0 = now_ms(), t1;
	pid_t pid;
	int status;

	if (posix_spawnp(&pid, argv[0], NULL, NULL, (char *const *)argv, environ) != 0 ||
	    waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "workspace-ops: %s failed\n", argv[0]);
		exit(1);
	}
	t1 = now_ms();
	return t1 - t0;
}

static void check(int r, const char *what)
{
	if (r < 0) {
		fprintf(stderr, "workspace-ops: %s: %s\n", what, slate_strerror(r));
		exit(1);
	}
}

/* Writes len bytes of pseudo-random data at off of path: the pair's own extents after a boot. */
static void scribble(const char *path, uint64_t off, uint64_t len)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	static uint8_t buf[MIB];
	uint32_t x = 2463534242u;

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	for (size_t i = 0; i < sizeof(buf); i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		buf[i] = (uint8_t)x;
	}
	for (uint64_t o = 0; o < len; o += sizeof(buf))
		if (pwrite(fd, buf, sizeof(buf), (off_t)(off + o)) != (ssize_t)sizeof(buf)) {
			perror(path);
			exit(1);
		}
	(void)fsync(fd);
}

/* A workspace the way a few sessions leave it: 128 MiB of its own data in each image. */
static void make_used(struct workspace_store *st, const char *name)
{
	struct workspace_create_args a = {.name = name, .owner = 0, .image_id = "base"};
	_cleanup_free_ char *dir = NULL, *disk = NULL, *home = NULL;

	check(workspace_create(st, &a, NULL), "workspace_create");
	dir = workspace_dir_path(st, name);
	disk = dir ? fs_path_join(dir, "disk.img") : NULL;
	home = dir ? fs_path_join(dir, "home.img") : NULL;
	if (!disk || !home)
		exit(1);
	for (int i = 0; i < 8; i++) {
		scribble(disk, (uint64_t)i * 512 * MIB + 32 * MIB, 16 * MIB);
		scribble(home, (uint64_t)i * 1024 * MIB + 16 * MIB, 16 * MIB);
	}
}

int main(int argc, char **argv)
{
	struct storage_config cfg = {0};
	_cleanup_(storage_closep) struct storage *s = NULL;
	_cleanup_(workspace_store_freep) struct workspace_store *st = NULL;
	_cleanup_close_ int state_fd = -1;
	_cleanup_free_ char *ws_dir = NULL, *peer = NULL, *name = NULL;
	const char *label;
	double *ours, *theirs;
	int runs;

	if (argc < 4) {
		fprintf(stderr, "usage: %s STATE-DIR BASE-IMAGE LABEL [RUNS]\n", argv[0]);
		return 2;
	}
	label = argv[3];
	runs = argc > 4 ? atoi(argv[4]) : 10;
	if (runs < 1 || runs > 1000)
		return 2;
	ours = calloc((size_t)runs, sizeof(*ours));
	theirs = calloc((size_t)runs, sizeof(*theirs));
	if (!ours || !theirs)
		return 1;

	(void)mkdir(argv[1], 0700);
	state_fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (state_fd < 0) {
		perror(argv[1]);
		return 1;
	}
	check(storage_open(state_fd, argv[1], &cfg, &s, NULL), "storage_open");
	check(image_store_import(s, "base", argv[2], NULL, NULL, NULL, false, NULL, NULL, NULL),
	      "image_store_import");
	check(workspace_store_open(s, NULL, &st), "workspace_store_open");
	peer = fs_path_join(argv[1], "peer");
	if (!peer)
		return 1;

	/* Checkpoint of the pair, against cp --reflink=always of the two files. */
	make_used(st, "ops");
	ws_dir = workspace_dir_path(st, "ops");
	if (!ws_dir)
		return 1;
	for (int i = 0; i < runs; i++) {
		_cleanup_free_ char *disk = fs_path_join(ws_dir, "disk.img");
		_cleanup_free_ char *home = fs_path_join(ws_dir, "home.img");
		const char *cp[] = {"cp", "--reflink=always", disk, home, peer, NULL};
		const char *rm[] = {"rm", "-rf", peer, NULL};
		double t0;

		(void)run_timed(rm);
		if (mkdir(peer, 0700) < 0)
			return 1;
		(void)syncfs(state_fd);
		t0 = now_ms();
		check(workspace_checkpoint_create(st, "ops", NULL, NULL), "checkpoint");
		ours[i] = now_ms() - t0;
		(void)syncfs(state_fd);
		theirs[i] = run_timed(cp);
	}
	{
		char n[128];
		(void)snprintf(n, sizeof(n), "workspace-checkpoint-%s", label);
		report(n, ours, theirs, runs);
	}
	check(workspace_delete(st, "ops"), "workspace_delete");

	/*
	 * rm of a workspace with 5 checkpoints, against rm -rf of the same tree (the workspace's
	 * files reflinked into plain directories).
	 */
	for (int i = 0; i < runs; i++) {
		_cleanup_free_ char *script = NULL;
		const char *rm[] = {"rm", "-rf", peer, NULL};
		const char *sh[] = {"sh", "-ec", NULL, NULL};
		double t0;

		free(name);
		if (asprintf(&name, "rm%d", i) < 0)
			return 1;
		make_used(st, name);
		for (int k = 0; k < WORKSPACE_CHECKPOINTS_KEEP; k++)
			check(workspace_checkpoint_create(st, name, NULL, NULL), "checkpoint");
		free(ws_dir);
		ws_dir = workspace_dir_path(st, name);
		if (!ws_dir)
			return 1;
		(void)run_timed(rm);
		if (asprintf(&script,
		             "mkdir -p %1$s/checkpoints && cp --reflink=always %2$s/disk.img "
		             "%2$s/home.img %2$s/workspace.json %1$s/ && for c in "
		             "%2$s/checkpoints/*; "
		             "do cp -r --reflink=always $c %1$s/checkpoints/; done",
		             peer, ws_dir) < 0)
			return 1;
		sh[2] = script;
		(void)run_timed(sh);
		(void)syncfs(state_fd);
		t0 = now_ms();
		check(workspace_delete(st, name), "workspace_delete");
		ours[i] = now_ms() - t0;
		(void)syncfs(state_fd);
		theirs[i] = run_timed(rm);
	}
	{
		char n[128];
		(void)snprintf(n, sizeof(n), "workspace-rm-5-checkpoints-%s", label);
		report(n, ours, theirs, runs);
	}
	free(ours);
	free(theirs);
	return 0;
}

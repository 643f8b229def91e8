/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Workspaces on real filesystems, one test group per storage backend: a loop-mounted btrfs, an
 * XFS with reflink=1, an ext4 (no reflinks) where storage picks the loop-backed btrfs pool, and
 * an ext4 with storage = qcow2. Each filesystem is made in the fixture from a sparse file in
 * /tmp, inside a private mount namespace, and always unmounted at the end (pools first). Needs
 * root (mount); skipped (77) otherwise. Covers the verbs, the layout, checkpoints, ENOSPC on a
 * full filesystem, a kill -9 at every crash point, and the residue probes of doc/security.md from
 * the host side. qcow2's disk.img is read and written through the format (qemu-io, qemu-img
 * convert), never as raw bytes.
 */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>

#include "image/store.h"
#include "storage/storage.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "workspace/crash.h"
#include "workspace/mac.h"
#include "workspace/workspace.h"

#define MIB (1024ull * 1024ull)
#define BASE_SIZE (64 * MIB)
#define SMALL_HOME (256 * MIB)
#define MARKER "SLATE-RESIDUE-MARKER .env AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY\n"

/* ---- filesystems ---- */

struct fsys {
	const char *type;
	char img[128];
	char mnt[128];
	bool mounted;
};

static struct fsys *all_fs[8];
static char base_path[128];
static struct fsys *cur_fs;
static enum storage_mode cur_mode;
static enum storage_kind cur_kind;
static unsigned state_seq;

static int sh(const char *fmt, ...) _printf_(1, 2);
static int sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int r;

	va_start(ap, fmt);
	(void)vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	r = system(cmd);
	return r == 0 ? 0 : -1;
}

static void fs_destroy(struct fsys *f)
{
	if (!f)
		return;
	if (f->mounted) {
		/* -R: a pool mounted in a state directory on it goes first. */
		if (sh("umount -R %s 2>/dev/null", f->mnt) < 0)
			(void)sh("umount -R -l %s", f->mnt);
		f->mounted = false;
	}
	if (f->mnt[0])
		(void)rmdir(f->mnt);
	if (f->img[0])
		(void)unlink(f->img);
	f->mnt[0] = f->img[0] = '\0';
}

static void cleanup_all(void)
{
	for (size_t i = 0; i < ELEMENTSOF(all_fs); i++)
		if (all_fs[i]) {
			fs_destroy(all_fs[i]);
			free(all_fs[i]);
			all_fs[i] = NULL;
		}
	if (base_path[0])
		(void)unlink(base_path);
}

static void on_signal(int sig)
{
	cleanup_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Makes a sparse image of size bytes, mkfs (type "btrfs", "xfs" or "ext4"), loop-mounts it. */
static struct fsys *fs_make(const char *type, uint64_t size)
{
	struct fsys *f = calloc(1, sizeof(*f));
	int fd;

	if (!f)
		return NULL;
	f->type = type;
	snprintf(f->img, sizeof(f->img), "/tmp/slate-test-ws-%s-XXXXXX", type);
	fd = mkstemp(f->img);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
		if (fd >= 0)
			close(fd);
		f->img[0] = '\0';
		free(f);
		return NULL;
	}
	close(fd);
	for (size_t i = 0; i < ELEMENTSOF(all_fs); i++)
		if (!all_fs[i]) {
			all_fs[i] = f;
			break;
		}
	snprintf(f->mnt, sizeof(f->mnt), "/tmp/slate-test-ws-mnt-XXXXXX");
	if (!mkdtemp(f->mnt)) {
		f->mnt[0] = '\0';
		return NULL;
	}
	if (streq(type, "btrfs")) {
		if (sh("mkfs.btrfs -q -f %s >/dev/null 2>&1", f->img) < 0)
			return NULL;
	} else if (streq(type, "ext4")) {
		if (sh("mkfs.ext4 -q -F %s >/dev/null 2>&1", f->img) < 0)
			return NULL;
	} else if (sh("mkfs.xfs -q -f -m reflink=1 %s >/dev/null 2>&1", f->img) < 0) {
		return NULL;
	}
	if (sh("mount -o loop %s %s", f->img, f->mnt) < 0)
		return NULL;
	f->mounted = true;
	return f;
}

static void fs_release(struct fsys *f)
{
	for (size_t i = 0; i < ELEMENTSOF(all_fs); i++)
		if (all_fs[i] == f) {
			fs_destroy(f);
			free(f);
			all_fs[i] = NULL;
		}
}

/* ---- the base image: 64 MiB, sparse, data in a few places ---- */

static const struct {
	uint64_t off, len;
} base_extents[] = {{0, 1 * MIB}, {8 * MIB, 2 * MIB}, {33 * MIB, 512 * 1024}, {63 * MIB, MIB}};

static void base_fill(uint8_t *p, size_t len, uint64_t off)
{
	for (size_t i = 0; i < len; i += 64) {
		char line[65];
		int k;

		memset(line, '.', sizeof(line));
		k = snprintf(line, sizeof(line), "SLATE-BASE offset=%016" PRIx64 " ", off + i);
		line[k] = '.';
		line[63] = '\n';
		memcpy(p + i, line, len - i < 64 ? len - i : 64);
	}
}

static int make_base(void)
{
	int fd;

	snprintf(base_path, sizeof(base_path), "/tmp/slate-test-ws-base-XXXXXX");
	fd = mkstemp(base_path);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)BASE_SIZE) < 0)
		return -1;
	for (size_t i = 0; i < ELEMENTSOF(base_extents); i++) {
		uint8_t *p = malloc(base_extents[i].len);
		if (!p)
			return -1;
		base_fill(p, base_extents[i].len, base_extents[i].off);
		if (pwrite(fd, p, base_extents[i].len, (off_t)base_extents[i].off) !=
		    (ssize_t)base_extents[i].len)
			return -1;
		free(p);
	}
	close(fd);
	return 0;
}

/* ---- per-test context ---- */

struct ctx {
	struct fsys *fs;
	char state_dir[256];
	int state_fd;
	struct storage *s;
	enum storage_kind kind;
	struct workspace_store *st;
	int64_t base_version;
};

#define POOL_SIZE (2048 * MIB)

/*
 * A state directory on f with the base imported, opened in mode; the backend storage picked must
 * be want (the pool on ext4 in auto mode is detection at work).
 */
static int ctx_open(struct fsys *f, enum storage_mode mode, enum storage_kind want,
                    uint64_t pool_size, struct ctx **ret)
{
	struct ctx *c = calloc(1, sizeof(*c));
	struct storage_config cfg = {.mode = mode, .pool_size = pool_size};
	struct image_info *info = NULL;
	int r;

	if (!c)
		return -1;
	c->fs = f;
	snprintf(c->state_dir, sizeof(c->state_dir), "%s/t%u", f->mnt, state_seq++);
	if (mkdir(c->state_dir, 0700) < 0)
		return -1;
	c->state_fd = open(c->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->state_fd < 0)
		return -1;
	r = storage_open(c->state_fd, c->state_dir, &cfg, &c->s, NULL);
	if (r < 0) {
		print_error("storage_open(%s): %s\n", c->state_dir, slate_strerror(r));
		return -1;
	}
	c->kind = storage_get_kind(c->s);
	if (c->kind != want) {
		print_error("%s: storage picked %s, not %s\n", c->state_dir,
		            storage_kind_name(c->kind), storage_kind_name(want));
		return -1;
	}
	r = image_store_import(c->s, "base", base_path, NULL, NULL, NULL, false, NULL, NULL, &info);
	if (r < 0) {
		print_error("image_store_import: %s\n", slate_strerror(r));
		return -1;
	}
	c->base_version = info->version;
	image_info_free(info);
	r = workspace_store_open(c->s, NULL, &c->st);
	if (r < 0) {
		print_error("workspace_store_open: %s\n", slate_strerror(r));
		return -1;
	}
	*ret = c;
	return 0;
}

static void ctx_close(struct ctx *c)
{
	if (!c)
		return;
	workspace_store_free(c->st);
	storage_close(c->s);
	if (c->state_fd >= 0)
		close(c->state_fd);
	/* storage_close() leaves a pool mounted (running VMs): one pool per test is enough. */
	if (c->kind == STORAGE_POOL) {
		(void)sh("umount %s/pool", c->state_dir);
		(void)sh("rm -rf %s", c->state_dir);
	}
	free(c);
}

static int setup_ctx(void **state)
{
	struct ctx *c = NULL;

	if (ctx_open(cur_fs, cur_mode, cur_kind, POOL_SIZE, &c) < 0)
		return -1;
	*state = c;
	return 0;
}

static int teardown_ctx(void **state)
{
	ctx_close(*state);
	return 0;
}

/* Closes and reopens the store: the sweep a restarted daemon runs. */
static void reopen(struct ctx *c)
{
	workspace_store_free(c->st);
	c->st = NULL;
	assert_int_equal(workspace_store_open(c->s, NULL, &c->st), 0);
}

/* ---- file helpers ---- */

static char *wpath(struct ctx *c, const char *name, const char *file)
{
	char *dir = workspace_dir_path(c->st, name), *p;

	assert_non_null(dir);
	p = file ? fs_path_join(dir, file) : strdup(dir);
	free(dir);
	assert_non_null(p);
	return p;
}

static bool wexists(struct ctx *c, const char *name, const char *file)
{
	_cleanup_free_ char *p = wpath(c, name, file);
	struct stat st;
	return lstat(p, &st) == 0;
}

/* Runs argv (no shell), its output thrown away; true when it exits 0. */
static bool run_argv(const char *const argv[])
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (null >= 0) {
			(void)dup2(null, STDOUT_FILENO);
			(void)dup2(null, STDERR_FILENO);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* disk.img of a qcow2 workspace is an overlay: its guest-visible bytes go through the format. */
static bool through_format(struct ctx *c, const char *file)
{
	return c->kind == STORAGE_QCOW2 && streq(file, "disk.img");
}

/* Writes len bytes at off of the qcow2 image path, the bytes repeating pattern (plen bytes). */
static void qcow2_write(const char *path, uint64_t off, uint64_t len, const void *pattern,
                        size_t plen)
{
	char tmp[] = "/tmp/slate-test-ws-pat-XXXXXX", cmd[256];
	_cleanup_close_ int fd = mkstemp(tmp);
	const char *argv[] = {"qemu-io", "-f", "qcow2", "-c", cmd, path, NULL};

	assert_true(fd >= 0);
	assert_int_equal(write(fd, pattern, plen), (ssize_t)plen);
	snprintf(cmd, sizeof(cmd), "write -q -s %s %" PRIu64 " %" PRIu64, tmp, off, len);
	if (!run_argv(argv))
		fail_msg("qemu-io %s: %s failed", path, cmd);
	(void)unlink(tmp);
}

/*
 * The guest-visible bytes of the qcow2 image path, as a raw temporary file (unlinked, open fd
 * returned). The overlay is read past the page cache (-T none), so its bytes come from the
 * blocks the host filesystem gave it.
 */
static int qcow2_raw(const char *path)
{
	char tmp[] = "/tmp/slate-test-ws-raw-XXXXXX";
	int fd = mkstemp(tmp);
	const char *argv[] = {"qemu-img", "convert", "-T", "none", "-f", "qcow2",
	                      "-O",       "raw",     path, tmp,    NULL};

	assert_true(fd >= 0);
	if (!run_argv(argv))
		fail_msg("qemu-img convert %s failed", path);
	(void)unlink(tmp);
	return fd;
}

static void write_file_at(const char *path, uint64_t off, const void *data, size_t len)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, data, len, (off_t)off), (ssize_t)len);
	assert_int_equal(fsync(fd), 0);
}

static void wwrite(struct ctx *c, const char *name, const char *file, uint64_t off,
                   const char *text)
{
	_cleanup_free_ char *p = wpath(c, name, file);

	if (through_format(c, file))
		qcow2_write(p, off, strlen(text), text, strlen(text));
	else
		write_file_at(p, off, text, strlen(text));
}

/* Reads len guest-visible bytes at off of a workspace image; false when it is not there. */
static bool wread(struct ctx *c, const char *name, const char *file, uint64_t off, void *buf,
                  size_t len)
{
	_cleanup_free_ char *p = wpath(c, name, file);
	_cleanup_close_ int fd = -1;

	if (access(p, F_OK) < 0)
		return false;
	fd = through_format(c, file) ? qcow2_raw(p) : open(p, O_RDONLY | O_CLOEXEC);
	return fd >= 0 && pread(fd, buf, len, (off_t)off) == (ssize_t)len;
}

/* True when file holds text at off. */
static bool wholds(struct ctx *c, const char *name, const char *file, uint64_t off,
                   const char *text)
{
	char buf[256];
	size_t n = strlen(text);

	assert_true(n < sizeof(buf));
	return wread(c, name, file, off, buf, n) && memcmp(buf, text, n) == 0;
}

/* Counts occurrences of needle in the whole file, reading every byte (holes included). */
static unsigned scan_file(const char *path, const char *needle)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t nl = strlen(needle), chunk = 4 * MIB, keep = nl - 1, have = 0;
	uint8_t *buf = malloc(chunk + nl);
	unsigned hits = 0;

	assert_true(fd >= 0);
	assert_non_null(buf);
	for (;;) {
		ssize_t n = read(fd, buf + have, chunk);
		assert_true(n >= 0);
		if (n == 0)
			break;
		have += (size_t)n;
		for (uint8_t *p = buf; (p = memmem(p, have - (size_t)(p - buf), needle, nl)); p++)
			hits++;
		if (have > keep) {
			memmove(buf, buf + have - keep, keep);
			have = keep;
		}
	}
	free(buf);
	return hits;
}

static bool is_ext4(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t magic[2];

	if (fd < 0 || pread(fd, magic, 2, 1080) != 2)
		return false;
	return magic[0] == 0x53 && magic[1] == 0xef;
}

static uint64_t physical_bytes(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/* The extents of path (up to 64), via FIEMAP. */
static unsigned fiemap(const char *path, struct fiemap_extent *ret, unsigned max)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct fiemap *fm = calloc(1, sizeof(*fm) + max * sizeof(struct fiemap_extent));
	unsigned n;

	assert_true(fd >= 0);
	assert_non_null(fm);
	fm->fm_length = FIEMAP_MAX_OFFSET;
	fm->fm_flags = FIEMAP_FLAG_SYNC;
	fm->fm_extent_count = max;
	assert_int_equal(ioctl(fd, FS_IOC_FIEMAP, fm), 0);
	n = fm->fm_mapped_extents;
	memcpy(ret, fm->fm_extents, n * sizeof(*ret));
	free(fm);
	return n;
}

static char *image_disk_path(struct ctx *c)
{
	char *p = NULL;
	assert_true(asprintf(&p, "%s/base/disk.img", storage_images_path(c->s)) > 0);
	return p;
}

static void create_ws(struct ctx *c, const char *name, uint64_t home_size)
{
	struct workspace_create_args a = {
	        .name = name, .owner = 1000, .image_id = "base", .home_size = home_size};
	int r = workspace_create(c->st, &a, NULL);
	if (r < 0)
		fail_msg("workspace_create(%s): %s", name, slate_strerror(r));
}

static size_t n_workspaces(struct ctx *c)
{
	struct workspace **l = NULL;
	size_t n = 0;

	assert_int_equal(workspace_list(c->st, &l, &n), 0);
	workspace_list_free(l, n);
	return n;
}

static bool mac_reserved(struct ctx *c, const char *mac, const char *name)
{
	struct mac_entry *e = NULL;
	size_t n = 0;
	bool found = false;

	assert_int_equal(mac_list(storage_workspaces_fd(c->s), &e, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (streq(e[i].mac, mac) && (!name || streq(e[i].name, name)))
			found = true;
	mac_list_free(e, n);
	return found;
}

static bool is_leftover(const char *n)
{
	return strneq(n, ".tmp-", 5) || strneq(n, ".del-", 5) || strneq(n, ".#", 2);
}

/* No temporary or half-deleted entry in dir. */
static void assert_no_leftovers(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (is_leftover(de->d_name))
			fail_msg("leftover %s/%s", dir, de->d_name);
	closedir(d);
}

/* ---- home templates ---- */

static char *templates_dir(struct ctx *c)
{
	char *p = fs_path_join(storage_workspaces_path(c->s), ".home-templates");

	assert_non_null(p);
	return p;
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && streq(s + n - k, suffix);
}

/* The path of the template for homes of size bytes; NULL when there is none, a failure when
 * there are several. */
static char *template_path(struct ctx *c, uint64_t size)
{
	_cleanup_free_ char *dir = templates_dir(c);
	char suffix[32], *found = NULL;
	struct dirent *de;
	DIR *d;

	d = opendir(dir);
	if (!d)
		return NULL;
	snprintf(suffix, sizeof(suffix), "-%" PRIu64 ".img", size);
	while ((de = readdir(d))) {
		if (!strneq(de->d_name, "home-", 5) || !has_suffix(de->d_name, suffix))
			continue;
		if (found)
			fail_msg("two templates for %" PRIu64 " bytes: %s and %s", size, found,
			         de->d_name);
		found = fs_path_join(dir, de->d_name);
	}
	closedir(d);
	return found;
}

/* After a sweep the templates' directory holds complete templates only. */
static void assert_templates_clean(struct ctx *c)
{
	_cleanup_free_ char *dir = templates_dir(c);
	struct dirent *de;
	DIR *d;

	d = opendir(dir);
	if (!d) {
		assert_int_equal(errno, ENOENT);
		return;
	}
	while ((de = readdir(d))) {
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (!strneq(de->d_name, "home-", 5) || !has_suffix(de->d_name, ".img"))
			fail_msg("leftover %s/%s", dir, de->d_name);
	}
	closedir(d);
}

/* e2fsck -fn: a consistent ext4 that e2fsck would not touch. */
static bool fsck_clean(const char *path)
{
	const char *argv[] = {"e2fsck", "-fn", path, NULL};
	return run_argv(argv);
}

/*
 * b has exactly a's written extents, shared: a reflink clone nobody wrote to yet. (Unwritten
 * extents read as zeros, like holes; FICLONE leaves them out.)
 */
static bool same_extents(const char *a, const char *b)
{
	struct fiemap_extent fa[64], fb[64];
	unsigned na = fiemap(a, fa, 64), nb = fiemap(b, fb, 64), i = 0, j = 0;

	for (;; i++, j++) {
		while (i < na && (fa[i].fe_flags & FIEMAP_EXTENT_UNWRITTEN))
			i++;
		while (j < nb && (fb[j].fe_flags & FIEMAP_EXTENT_UNWRITTEN))
			j++;
		if (i == na || j == nb)
			return i == na && j == nb && j > 0;
		if (fa[i].fe_logical != fb[j].fe_logical ||
		    fa[i].fe_physical != fb[j].fe_physical || fa[i].fe_length != fb[j].fe_length ||
		    !(fb[j].fe_flags & FIEMAP_EXTENT_SHARED))
			return false;
	}
}

/*
 * The invariants a sweep must restore: no temporary objects anywhere, every listed workspace
 * loads and has exactly the images its state says, no pending journal, complete checkpoints
 * only, and a MAC registry that is exactly the set of the workspaces' MACs.
 */
static void assert_consistent(struct ctx *c)
{
	struct workspace **l = NULL;
	struct mac_entry *e = NULL;
	size_t n = 0, ne = 0;

	assert_no_leftovers(storage_workspaces_path(c->s));
	assert_templates_clean(c);
	assert_int_equal(workspace_list(c->st, &l, &n), 0);
	for (size_t i = 0; i < n; i++) {
		struct workspace *w = l[i], *w2 = NULL;
		_cleanup_free_ char *dir = wpath(c, w->name, NULL);
		_cleanup_free_ char *cps = wpath(c, w->name, "checkpoints");
		DIR *d;
		struct dirent *de;

		assert_int_equal(workspace_load(c->st, w->name, &w2), 0);
		workspace_free(w2);
		assert_no_leftovers(dir);
		assert_int_equal(wexists(c, w->name, "disk.img"), w->disk_present);
		assert_int_equal(wexists(c, w->name, "home.img"), w->home_present);
		assert_false(wexists(c, w->name, "revert.json"));
		assert_false(wexists(c, w->name, "wipe-home.json"));
		assert_true(wexists(c, w->name, "workspace.json"));
		d = opendir(cps);
		while (d && (de = readdir(d))) {
			char f[512];
			struct stat st;

			if (streq(de->d_name, ".") || streq(de->d_name, ".."))
				continue;
			if (is_leftover(de->d_name))
				fail_msg("leftover %s/%s", cps, de->d_name);
			for (int k = 0; k < 3; k++) {
				static const char *const files[] = {"disk.img", "home.img",
				                                    "meta.json"};
				snprintf(f, sizeof(f), "%s/%s/%s", cps, de->d_name, files[k]);
				if (stat(f, &st) < 0)
					fail_msg("incomplete checkpoint: %s missing", f);
			}
		}
		if (d)
			closedir(d);
		if (!mac_reserved(c, w->mac, w->name))
			fail_msg("%s: MAC %s not reserved", w->name, w->mac);
	}
	assert_int_equal(mac_list(storage_workspaces_fd(c->s), &e, &ne), 0);
	if (ne != n)
		fail_msg("%zu MAC reservations for %zu workspaces", ne, n);
	mac_list_free(e, ne);
	workspace_list_free(l, n);
}

/* ---- names (no filesystem needed) ---- */

static void test_name_check(void **state)
{
	static const struct {
		const char *name;
		int want;
	} cases[] = {
	        {"a", 0},
	        {"0", 0},
	        {"web-1", 0},
	        {"a-", 0},
	        {"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123", 0},
	        {"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234", -EINVAL},
	        {"", -EINVAL},
	        {NULL, -EINVAL},
	        {"-a", -EINVAL},
	        {"A", -EINVAL},
	        {"webApp", -EINVAL},
	        {"a_b", -EINVAL},
	        {"a.b", -EINVAL},
	        {".", -EINVAL},
	        {"..", -EINVAL},
	        {".tmp-a", -EINVAL},
	        {"a/b", -EINVAL},
	        {"/a", -EINVAL},
	        {" a", -EINVAL},
	        {"a ", -EINVAL},
	        {"a\n", -EINVAL},
	        {"\xc3\xa9t\xc3\xa9", -EINVAL},
	};

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		if (workspace_name_check(cases[i].name) != cases[i].want)
			fail_msg("workspace_name_check(\"%s\") != %d",
			         cases[i].name ? cases[i].name : "NULL", cases[i].want);
}

/* ---- create ---- */

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void test_create_layout(void **state)
{
	struct ctx *c = *state;
	struct workspace_share shares[] = {{(char *)"/srv/src", (char *)"/work", false, 1234},
	                                   {(char *)"/srv/data", NULL, true, (uid_t)-1}};
	struct workspace_create_args a = {.name = "alpha",
	                                  .owner = 1234,
	                                  .image_id = "base",
	                                  .shares = shares,
	                                  .n_shares = ELEMENTSOF(shares)};
	struct workspace *w = NULL, *l = NULL;
	_cleanup_free_ char *disk = wpath(c, "alpha", "disk.img");
	_cleanup_free_ char *home = wpath(c, "alpha", "home.img");
	_cleanup_free_ char *base = image_disk_path(c);
	struct fiemap_extent fb[64], fw[64];
	unsigned nb, nw;
	struct workspace_usage u;
	struct stat st;
	double t0, t1;
	int64_t before = time(NULL);

	t0 = now_ms();
	assert_int_equal(workspace_create(c->st, &a, &w), 0);
	t1 = now_ms();
	print_message("create on %s (64 GiB home): %.1f ms\n", c->fs->type, t1 - t0);

	/* The returned state is what was written. */
	assert_int_equal(workspace_load(c->st, "alpha", &l), 0);
	assert_string_equal(l->name, "alpha");
	assert_int_equal(l->owner, 1234);
	assert_string_equal(l->uuid, w->uuid);
	assert_int_equal(strlen(l->uuid), 36);
	assert_int_equal(l->uuid[14], '4');
	assert_true(strchr("89ab", l->uuid[19]) != NULL);
	assert_string_equal(l->image_id, "base");
	assert_int_equal(l->base_version, c->base_version);
	assert_int_equal(l->memory_mib, WORKSPACE_DEFAULT_MEMORY_MIB);
	assert_int_equal(l->cpus, WORKSPACE_DEFAULT_CPUS);
	assert_int_equal(l->home_size, WORKSPACE_DEFAULT_HOME_SIZE);
	assert_int_equal(l->n_shares, 2);
	assert_string_equal(l->shares[0].host_dir, "/srv/src");
	assert_string_equal(l->shares[0].guest_dir, "/work");
	assert_false(l->shares[0].readonly);
	assert_string_equal(l->shares[1].host_dir, "/srv/data");
	assert_null(l->shares[1].guest_dir);
	assert_true(l->shares[1].readonly);
	/* The owner recorded at create comes back; a share without one stays "unknown". */
	assert_int_equal(l->shares[0].uid, 1234);
	assert_int_equal(l->shares[1].uid, (uid_t)-1);
	assert_string_equal(l->mac, w->mac);
	assert_int_equal(mac_check(l->mac), 0);
	assert_true(mac_reserved(c, l->mac, "alpha"));
	assert_true(l->created >= before && l->created <= time(NULL));
	assert_int_equal(l->last_used, l->created);
	assert_false(l->compromised);
	assert_null(l->compromised_host);
	assert_true(l->disk_present);
	assert_true(l->home_present);

	/* Layout. */
	assert_true(wexists(c, "alpha", "workspace.json"));
	assert_true(wexists(c, "alpha", "checkpoints"));
	assert_true(wexists(c, "alpha", "ssh"));
	assert_no_leftovers(storage_workspaces_path(c->s));
	{
		_cleanup_free_ char *dir = wpath(c, "alpha", NULL);
		assert_no_leftovers(dir);
	}

	assert_int_equal(stat(disk, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	if (c->kind == STORAGE_QCOW2) {
		/* disk.img: an overlay on the base (absolute path), metadata only. */
		_cleanup_free_ char *cmd = NULL, *want = NULL;
		char out[8192];
		size_t n;
		FILE *p;

		assert_true(asprintf(&cmd, "qemu-img info -U --output=json %s", disk) > 0);
		p = popen(cmd, "r");
		assert_non_null(p);
		n = fread(out, 1, sizeof(out) - 1, p);
		out[n] = '\0';
		assert_int_equal(pclose(p), 0);
		assert_non_null(strstr(out, "\"format\": \"qcow2\""));
		assert_true(asprintf(&want, "\"backing-filename\": \"%s\"", base) > 0);
		if (!strstr(out, want))
			fail_msg("%s: no %s in %s", disk, want, out);
		assert_non_null(strstr(out, "\"virtual-size\": 67108864,"));
		assert_true(physical_bytes(disk) < MIB);
		(void)fb, (void)fw, (void)nb, (void)nw;
	} else {
		/* disk.img: the base's bytes, sharing its extents. */
		assert_int_equal(st.st_size, BASE_SIZE);
		nb = fiemap(base, fb, 64);
		nw = fiemap(disk, fw, 64);
		assert_true(nb > 0);
		assert_int_equal(nb, nw);
		for (unsigned i = 0; i < nb; i++) {
			assert_int_equal(fb[i].fe_logical, fw[i].fe_logical);
			assert_int_equal(fb[i].fe_physical, fw[i].fe_physical);
			assert_true(fw[i].fe_flags & FIEMAP_EXTENT_SHARED);
		}
	}

	/* home.img: ext4, 64 GiB logical, a few MiB physical. */
	assert_true(is_ext4(home));
	assert_int_equal(stat(home, &st), 0);
	assert_int_equal((uint64_t)st.st_size, WORKSPACE_DEFAULT_HOME_SIZE);
	print_message("home.img physical on %s: %.1f MiB\n", c->fs->type,
	              (double)physical_bytes(home) / (double)MIB);
	assert_true(physical_bytes(home) < 16 * MIB);

	assert_int_equal(workspace_usage(c->st, "alpha", &u), 0);
	/* For qcow2, the logical size is the overlay's virtual size. */
	assert_int_equal(u.disk.logical, BASE_SIZE);
	if (c->kind != STORAGE_QCOW2)
		assert_true(u.disk.shared > 0);
	assert_int_equal(u.home.logical, WORKSPACE_DEFAULT_HOME_SIZE);
	assert_int_equal(u.n_checkpoints, 0);

	workspace_free(w);
	workspace_free(l);
	assert_consistent(c);
}

/* The skeleton home inside the ext4 image home belongs to uid 1000, with a private .ssh. */
static void assert_skeleton(const char *home)
{
	char cmd[512], line[512];
	bool root_ok = false, ssh_ok = false, profile_ok = false, bashrc_ok = false;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "debugfs -R 'ls -l /' %s 2>/dev/null", home);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		unsigned ino, mode, uid, gid;
		char name[256];
		if (sscanf(line, " %u %o (%*u) %u %u %*s %*s %*s %255s", &ino, &mode, &uid, &gid,
		           name) != 5)
			continue;
		if (streq(name, ".") && uid == 1000 && gid == 1000)
			root_ok = true;
		if (streq(name, ".ssh") && mode == 040700 && uid == 1000 && gid == 1000)
			ssh_ok = true;
		if (streq(name, ".profile") && uid == 1000)
			profile_ok = true;
		if (streq(name, ".bashrc") && mode == 0100644 && uid == 1000 && gid == 1000)
			bashrc_ok = true;
	}
	pclose(p);
	if (!root_ok || !ssh_ok || !profile_ok || !bashrc_ok)
		fail_msg("%s: skeleton root %d .ssh %d .profile %d .bashrc %d", home, root_ok,
		         ssh_ok, profile_ok, bashrc_ok);
}

static void test_home_skeleton(void **state)
{
	struct ctx *c = *state;
	_cleanup_free_ char *home = NULL;

	create_ws(c, "skel", SMALL_HOME);
	home = wpath(c, "skel", "home.img");
	assert_skeleton(home);
}

/* Reads len bytes at off of path; false when it is not there. */
static bool file_holds(const char *path, uint64_t off, const char *text)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	char buf[256];
	size_t n = strlen(text);

	return fd >= 0 && pread(fd, buf, n, (off_t)off) == (ssize_t)n && memcmp(buf, text, n) == 0;
}

/*
 * Where storage reflinks, the first home of a size makes the store's template for it and every
 * home after it (create, prepare after wipe-home) is a clone of that template: made once, reused,
 * never listed, swept when stale, damaged or no longer needed. qcow2 runs mke2fs every time.
 */
static void test_home_template(void **state)
{
	struct ctx *c = *state;
	_cleanup_free_ char *dir = templates_dir(c), *tpl = NULL, *again = NULL, *remade = NULL;
	_cleanup_free_ char *h1 = NULL, *h2 = NULL, *h3 = NULL, *stale = NULL, *tmp = NULL;
	_cleanup_free_ char *skel = NULL, *dflt = NULL;
	struct stat st1, st2;
	double t0, t1, t2;

	t0 = now_ms();
	create_ws(c, "tpl-a", SMALL_HOME);
	t1 = now_ms();
	create_ws(c, "tpl-b", SMALL_HOME);
	t2 = now_ms();
	print_message("create on %s (%s): %.1f ms the first of its home size, %.1f ms the next\n",
	              c->fs->type, storage_kind_name(c->kind), t1 - t0, t2 - t1);
	h1 = wpath(c, "tpl-a", "home.img");
	h2 = wpath(c, "tpl-b", "home.img");
	assert_true(fsck_clean(h1));
	assert_true(fsck_clean(h2));
	assert_skeleton(h2);
	tpl = template_path(c, SMALL_HOME);
	if (c->kind == STORAGE_QCOW2) {
		assert_null(tpl);
		assert_int_equal(access(dir, F_OK), -1);
		return;
	}

	/* One template, made once; both homes are clones of it. */
	assert_non_null(tpl);
	assert_int_equal(stat(tpl, &st1), 0);
	assert_true(S_ISREG(st1.st_mode));
	assert_int_equal(st1.st_mode & 0777, 0600);
	assert_int_equal((uint64_t)st1.st_size, SMALL_HOME);
	assert_true(fsck_clean(tpl));
	assert_true(same_extents(tpl, h1));
	assert_true(same_extents(tpl, h2));
	/* A guest's writes stay in its own home. */
	wwrite(c, "tpl-a", "home.img", 100 * MIB, "written by tpl-a");
	assert_false(wholds(c, "tpl-b", "home.img", 100 * MIB, "written by tpl-a"));
	assert_false(file_holds(tpl, 100 * MIB, "written by tpl-a"));

	/* Not a workspace; the sweep keeps it (a workspace has its size) and drops the rest. */
	assert_int_equal(n_workspaces(c), 2);
	stale = fs_path_join(dir, "home-0000000000000000-268435456.img");
	tmp = fs_path_join(dir, ".tmp-abcdef-home-0000000000000000-268435456.img");
	skel = fs_path_join(dir, ".tmp-skel-abcdef");
	assert_int_equal(fs_write_atomic_at(AT_FDCWD, stale, "x", 1, 0600), 0);
	assert_int_equal(fs_write_atomic_at(AT_FDCWD, tmp, "x", 1, 0600), 0);
	assert_int_equal(mkdir(skel, 0755), 0);
	reopen(c);
	assert_int_equal(access(stale, F_OK), -1);
	assert_int_equal(access(tmp, F_OK), -1);
	assert_int_equal(access(skel, F_OK), -1);
	again = template_path(c, SMALL_HOME);
	assert_non_null(again);
	assert_string_equal(again, tpl);
	assert_int_equal(stat(again, &st2), 0);
	assert_int_equal(st2.st_ino, st1.st_ino);
	assert_int_equal(st2.st_mtim.tv_sec, st1.st_mtim.tv_sec);
	assert_int_equal(st2.st_mtim.tv_nsec, st1.st_mtim.tv_nsec);
	assert_consistent(c);

	/* wipe-home and the prepare after it take the same path. */
	assert_int_equal(workspace_wipe_home(c->st, "tpl-a"), 0);
	assert_int_equal(workspace_prepare(c->st, "tpl-a"), 0);
	assert_true(same_extents(tpl, h1));
	assert_false(wholds(c, "tpl-a", "home.img", 100 * MIB, "written by tpl-a"));

	/* A damaged template is made again, never cloned. */
	write_file_at(tpl, 1080, "\0\0", 2);
	create_ws(c, "tpl-c", SMALL_HOME);
	h3 = wpath(c, "tpl-c", "home.img");
	remade = template_path(c, SMALL_HOME);
	assert_non_null(remade);
	assert_true(is_ext4(remade));
	assert_true(same_extents(remade, h3));
	assert_true(fsck_clean(h3));
	assert_consistent(c);

	/* Once no workspace has its size it goes at the next sweep; the default size's stays. */
	create_ws(c, "tpl-d", 0);
	assert_int_equal(workspace_delete(c->st, "tpl-a"), 0);
	assert_int_equal(workspace_delete(c->st, "tpl-b"), 0);
	assert_int_equal(workspace_delete(c->st, "tpl-c"), 0);
	assert_int_equal(workspace_delete(c->st, "tpl-d"), 0);
	reopen(c);
	assert_null(template_path(c, SMALL_HOME));
	dflt = template_path(c, WORKSPACE_DEFAULT_HOME_SIZE);
	assert_non_null(dflt);
	assert_consistent(c);
}

static void test_create_duplicate(void **state)
{
	struct ctx *c = *state;
	struct workspace_create_args a = {.name = "dup", .owner = 1000, .image_id = "base"};
	struct workspace *w = NULL, *w2 = NULL, *again = NULL;

	assert_int_equal(workspace_create(c->st, &a, &w), 0);
	wwrite(c, "dup", "disk.img", 4096, "keep me");
	assert_int_equal(workspace_create(c->st, &a, &w2), -EEXIST);
	assert_null(w2);
	assert_int_equal(workspace_load(c->st, "dup", &again), 0);
	assert_string_equal(again->uuid, w->uuid);
	assert_true(wholds(c, "dup", "disk.img", 4096, "keep me"));
	assert_int_equal(n_workspaces(c), 1);
	workspace_free(w);
	workspace_free(again);
	assert_consistent(c);
}

static void test_create_invalid(void **state)
{
	static const char *const bad[] = {
	        "",
	        "-a",
	        "A",
	        "a_b",
	        "a.b",
	        "..",
	        ".",
	        "a/b",
	        " a",
	        "a\t",
	        ".tmp",
	        ".del-x",
	        "ab"
	        "cdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij12345"};
	struct ctx *c = *state;
	struct workspace_share rel = {(char *)"relative/dir", NULL, false, 0};

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		struct workspace_create_args a = {
		        .name = bad[i], .owner = 1000, .image_id = "base"};
		struct workspace *w = NULL;
		if (workspace_create(c->st, &a, &w) != -EINVAL)
			fail_msg("create(\"%s\") was not refused with EINVAL", bad[i]);
		assert_null(w);
	}
	{
		struct workspace_create_args a = {.name = NULL, .owner = 1000, .image_id = "base"};
		assert_int_equal(workspace_create(c->st, &a, NULL), -EINVAL);
	}
	{
		struct workspace_create_args a = {.name = "ok",
		                                  .owner = 1000,
		                                  .image_id = "base",
		                                  .shares = &rel,
		                                  .n_shares = 1};
		assert_int_equal(workspace_create(c->st, &a, NULL), -EINVAL);
	}
	{
		struct workspace_create_args a = {
		        .name = "ok", .owner = 1000, .image_id = "base", .home_size = 4096};
		assert_int_equal(workspace_create(c->st, &a, NULL), -EINVAL);
	}
	{
		struct workspace_create_args a = {.name = "ok", .owner = 1000, .image_id = "../x"};
		assert_int_equal(workspace_create(c->st, &a, NULL), -EINVAL);
	}
	assert_int_equal(n_workspaces(c), 0);
	assert_consistent(c);
}

static void test_create_missing_image(void **state)
{
	struct ctx *c = *state;
	struct workspace_create_args a = {.name = "orphan", .owner = 1000, .image_id = "nosuch"};
	struct workspace *w = NULL;

	assert_int_equal(workspace_create(c->st, &a, &w), -ENOENT);
	assert_null(w);
	assert_int_equal(n_workspaces(c), 0);
	assert_false(wexists(c, "orphan", NULL));
	assert_consistent(c);
}

static void test_list_sorted(void **state)
{
	static const char *const names[] = {"c", "a", "b2", "b10", "z-1", "0x"};
	static const char *const sorted[] = {"0x", "a", "b10", "b2", "c", "z-1"};
	struct ctx *c = *state;
	struct workspace **l = NULL;
	size_t n = 0;

	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		create_ws(c, names[i], SMALL_HOME);
	assert_int_equal(workspace_list(c->st, &l, &n), 0);
	assert_int_equal(n, ELEMENTSOF(sorted));
	for (size_t i = 0; i < n; i++)
		assert_string_equal(l[i]->name, sorted[i]);
	/* All MACs differ. */
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			assert_string_not_equal(l[i]->mac, l[j]->mac);
	workspace_list_free(l, n);
	{
		struct workspace *w = NULL;
		assert_int_equal(workspace_load(c->st, "nosuch", &w), -ENOENT);
		assert_null(w);
	}
	assert_consistent(c);
}

static void test_save(void **state)
{
	struct ctx *c = *state;
	struct workspace *w = NULL, *l = NULL;

	create_ws(c, "sv", SMALL_HOME);
	assert_int_equal(workspace_load(c->st, "sv", &w), 0);
	w->compromised = true;
	w->compromised_at = 1234567890;
	w->compromised_host = strdup("evil.example");
	w->last_used = 42;
	assert_int_equal(workspace_save(c->st, w), 0);
	assert_int_equal(workspace_load(c->st, "sv", &l), 0);
	assert_true(l->compromised);
	assert_int_equal(l->compromised_at, 1234567890);
	assert_string_equal(l->compromised_host, "evil.example");
	assert_int_equal(l->last_used, 42);
	workspace_free(l);
	/* Saving a workspace that does not exist does not create it. */
	free(w->name);
	w->name = strdup("ghost");
	assert_int_equal(workspace_save(c->st, w), -ENOENT);
	assert_false(wexists(c, "ghost", NULL));
	workspace_free(w);
}

/* The quarantine: marked once (the first host kept), held while either disk is there, ended only
 * by the prepare that makes both anew. */
static void test_compromised(void **state)
{
	struct ctx *c = *state;
	struct workspace *w = NULL;

	create_ws(c, "cm", SMALL_HOME);
	assert_int_equal(workspace_mark_compromised(c->st, "cm", "evil.example"), 1);
	assert_int_equal(workspace_mark_compromised(c->st, "cm", "other.example"), 0);
	assert_int_equal(workspace_mark_compromised(c->st, "nosuch", "x"), -ENOENT);
	assert_int_equal(workspace_load(c->st, "cm", &w), 0);
	assert_true(w->compromised);
	assert_true(w->compromised_at > 0);
	assert_string_equal(w->compromised_host, "evil.example");
	assert_true(workspace_quarantined(w));
	workspace_free(TAKE_PTR(w));
	/* A prepare with both disks there, or with only the system disk made anew, keeps it. */
	assert_int_equal(workspace_prepare(c->st, "cm"), 0);
	assert_int_equal(workspace_reset(c->st, "cm"), 0);
	assert_int_equal(workspace_prepare(c->st, "cm"), 0);
	assert_int_equal(workspace_load(c->st, "cm", &w), 0);
	assert_true(workspace_quarantined(w));
	workspace_free(TAKE_PTR(w));
	/* Wiped: still marked, no longer quarantined; the fresh pair clears it. */
	assert_int_equal(workspace_wipe(c->st, "cm"), 0);
	assert_int_equal(workspace_load(c->st, "cm", &w), 0);
	assert_true(w->compromised);
	assert_false(workspace_quarantined(w));
	workspace_free(TAKE_PTR(w));
	assert_int_equal(workspace_prepare(c->st, "cm"), 0);
	assert_int_equal(workspace_load(c->st, "cm", &w), 0);
	assert_false(w->compromised);
	assert_int_equal(w->compromised_at, 0);
	assert_null(w->compromised_host);
	assert_true(w->disk_present && w->home_present);
	workspace_free(w);
	assert_consistent(c);
}

/* A tampered workspace.json is refused, not half-read. */
static void test_state_strict(void **state)
{
	static const char *const edits[][2] = {
	        {"\"formatVersion\":1", "\"formatVersion\":2"},
	        {"\"cpus\":2", "\"cpus\":-2"},
	        {"\"cpus\":2", "\"cpus\":\"2\""},
	        {"\"homePresent\":true", "\"homePresent\":true,\"extra\":1"},
	        {"\"name\":\"strict\"", "\"name\":\"other\""},
	        {"\"image\":\"base\"", "\"image\":\"../base\""},
	};
	struct ctx *c = *state;
	_cleanup_free_ char *dir = NULL;
	_cleanup_buf_ struct buf *orig = NULL;
	_cleanup_close_ int fd = -1;

	create_ws(c, "strict", SMALL_HOME);
	dir = wpath(c, "strict", NULL);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fs_read_file_at(fd, "workspace.json", 1 << 20, &orig), 0);
	for (size_t i = 0; i < ELEMENTSOF(edits); i++) {
		_cleanup_free_ char *text = buf_dup_string(orig), *out = NULL;
		struct workspace *w = NULL;
		char *at = strstr(text, edits[i][0]);
		int r;

		if (!at)
			fail_msg("no %s in %s", edits[i][0], text);
		*at = '\0';
		assert_true(asprintf(&out, "%s%s%s", text, edits[i][1], at + strlen(edits[i][0])) >
		            0);
		assert_int_equal(fs_write_atomic_at(fd, "workspace.json", out, strlen(out), 0600),
		                 0);
		r = workspace_load(c->st, "strict", &w);
		if (r >= 0 || r == -ENOENT)
			fail_msg("edit %zu (%s) accepted: %d", i, edits[i][1], r);
		assert_null(w);
	}
	assert_int_equal(
	        fs_write_atomic_at(fd, "workspace.json", buf_ptr(orig), buf_len(orig), 0600), 0);
}

/* ---- reset, prepare, wipe-home ---- */

static void test_reset_prepare(void **state)
{
	struct ctx *c = *state;
	struct workspace *w = NULL;
	uint8_t got[4096], want[4096];

	create_ws(c, "rp", SMALL_HOME);
	wwrite(c, "rp", "disk.img", 0, "guest changed the disk");
	wwrite(c, "rp", "home.img", 100 * MIB, "my homework");

	assert_int_equal(workspace_reset(c->st, "rp"), 0);
	assert_false(wexists(c, "rp", "disk.img"));
	assert_int_equal(workspace_load(c->st, "rp", &w), 0);
	assert_false(w->disk_present);
	assert_true(w->home_present);
	workspace_free(w);
	assert_true(wholds(c, "rp", "home.img", 100 * MIB, "my homework"));
	assert_consistent(c);
	/* Twice is fine. */
	assert_int_equal(workspace_reset(c->st, "rp"), 0);

	assert_int_equal(workspace_prepare(c->st, "rp"), 0);
	assert_int_equal(workspace_load(c->st, "rp", &w), 0);
	assert_true(w->disk_present);
	assert_int_equal(w->base_version, c->base_version);
	workspace_free(w);
	assert_true(wread(c, "rp", "disk.img", 0, got, sizeof(got)));
	base_fill(want, sizeof(want), 0);
	assert_memory_equal(got, want, sizeof(got));
	assert_true(wholds(c, "rp", "home.img", 100 * MIB, "my homework"));
	/* Nothing to do: nothing changes. */
	assert_int_equal(workspace_prepare(c->st, "rp"), 0);
	assert_int_equal(workspace_reset(c->st, "nosuch"), -ENOENT);
	assert_int_equal(workspace_prepare(c->st, "nosuch"), -ENOENT);
	assert_consistent(c);
}

static void test_wipe_home(void **state)
{
	struct ctx *c = *state;
	struct workspace *w = NULL;
	_cleanup_free_ char *key = NULL, *home = NULL;

	create_ws(c, "wh", SMALL_HOME);
	key = wpath(c, "wh", "ssh/id_ed25519");
	assert_int_equal(fs_write_atomic_at(AT_FDCWD, key, "KEY", 3, 0600), 0);
	wwrite(c, "wh", "home.img", 100 * MIB, "my homework");
	wwrite(c, "wh", "disk.img", 0, "disk stays");

	assert_int_equal(workspace_wipe_home(c->st, "wh"), 0);
	assert_false(wexists(c, "wh", "home.img"));
	assert_false(wexists(c, "wh", "ssh"));
	assert_true(wholds(c, "wh", "disk.img", 0, "disk stays"));
	assert_int_equal(workspace_load(c->st, "wh", &w), 0);
	assert_false(w->home_present);
	assert_true(w->disk_present);
	workspace_free(w);
	assert_consistent(c);

	assert_int_equal(workspace_prepare(c->st, "wh"), 0);
	home = wpath(c, "wh", "home.img");
	assert_true(is_ext4(home));
	assert_false(wholds(c, "wh", "home.img", 100 * MIB, "my homework"));
	assert_true(wexists(c, "wh", "ssh"));
	assert_false(wexists(c, "wh", "ssh/id_ed25519"));
	assert_true(wholds(c, "wh", "disk.img", 0, "disk stays"));
	assert_int_equal(workspace_load(c->st, "wh", &w), 0);
	assert_true(w->home_present);
	workspace_free(w);
	assert_int_equal(workspace_wipe_home(c->st, "nosuch"), -ENOENT);
	assert_consistent(c);
}

/* ---- delete ---- */

static void test_delete(void **state)
{
	struct ctx *c = *state;
	struct workspace *w = NULL;
	char mac[MAC_STRLEN + 1];

	create_ws(c, "gone", SMALL_HOME);
	create_ws(c, "stays", SMALL_HOME);
	assert_int_equal(workspace_checkpoint_create(c->st, "gone", NULL, NULL), 0);
	assert_int_equal(workspace_load(c->st, "gone", &w), 0);
	memcpy(mac, w->mac, sizeof(mac));
	workspace_free(w);
	assert_true(mac_reserved(c, mac, "gone"));

	assert_int_equal(workspace_delete(c->st, "gone"), 0);
	assert_false(wexists(c, "gone", NULL));
	assert_int_equal(workspace_load(c->st, "gone", &w), -ENOENT);
	assert_false(mac_reserved(c, mac, NULL));
	assert_int_equal(n_workspaces(c), 1);
	assert_int_equal(workspace_delete(c->st, "gone"), -ENOENT);
	assert_int_equal(workspace_delete(c->st, "Bad"), -EINVAL);
	assert_consistent(c);

	/* The name can be used again, with a new identity. */
	create_ws(c, "gone", SMALL_HOME);
	assert_int_equal(n_workspaces(c), 2);
	assert_consistent(c);
}

/* ---- locks ---- */

static void test_lock(void **state)
{
	struct ctx *c = *state;
	_cleanup_close_ int fd = -1;
	char lockfile[512];
	pid_t pid;
	int status;

	create_ws(c, "lk", SMALL_HOME);
	assert_int_equal(workspace_lock(c->st, "lk", &fd), 0);
	snprintf(lockfile, sizeof(lockfile), "%s/.locks/lk.lock", storage_workspaces_path(c->s));

	/* Another process cannot take it while it is held... */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int f = open(lockfile, O_RDONLY | O_CLOEXEC);
		_exit(f >= 0 && flock(f, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* ...and deleting the workspace does not break it. */
	assert_int_equal(workspace_delete(c->st, "lk"), 0);
	assert_int_equal(access(lockfile, F_OK), 0);

	/* A waiter gets it once it is released. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int f = -1;
		/* The inherited descriptor shares the parent's lock: drop it first. */
		close(fd);
		_exit(workspace_lock(c->st, "lk", &f) == 0 ? 0 : 1);
	}
	usleep(100 * 1000);
	assert_int_equal(waitpid(pid, &status, WNOHANG), 0); /* still waiting */
	fd = safe_close(fd);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(workspace_lock(c->st, "../x", &fd), -EINVAL);
}

/* ---- checkpoints ---- */

static void test_checkpoints(void **state)
{
	struct ctx *c = *state;
	struct checkpoint_info *l = NULL, info;
	struct workspace_usage u;
	char ids[7][32];
	size_t n = 0;

	create_ws(c, "cp", SMALL_HOME);
	for (int i = 0; i < 7; i++) {
		char text[32], note[32];
		snprintf(text, sizeof(text), "generation %d", i);
		snprintf(note, sizeof(note), "note %d", i);
		wwrite(c, "cp", "disk.img", 12 * MIB, text);
		wwrite(c, "cp", "home.img", 200 * MIB, text);
		assert_int_equal(
		        workspace_checkpoint_create(c->st, "cp", i == 3 ? NULL : note, &info), 0);
		memcpy(ids[i], info.id, sizeof(ids[i]));
		if (i == 3)
			assert_null(info.note);
		else
			assert_string_equal(info.note, note);
		free(info.note);
		if (i > 0 && strcmp(ids[i - 1], ids[i]) >= 0)
			fail_msg("ids do not grow: %s then %s", ids[i - 1], ids[i]);
	}
	assert_int_equal(workspace_checkpoint_list(c->st, "cp", &l, &n), 0);
	assert_int_equal(n, WORKSPACE_CHECKPOINTS_KEEP);
	for (size_t i = 0; i < n; i++) {
		int gen = 6 - (int)i;
		char note[32];
		assert_string_equal(l[i].id, ids[gen]);
		if (gen == 3) {
			assert_null(l[i].note);
		} else {
			snprintf(note, sizeof(note), "note %d", gen);
			assert_string_equal(l[i].note, note);
		}
		assert_true(l[i].created > 0);
	}
	checkpoint_info_list_free(l, n);
	assert_int_equal(workspace_usage(c->st, "cp", &u), 0);
	assert_int_equal(u.n_checkpoints, WORKSPACE_CHECKPOINTS_KEEP);
	assert_int_equal(u.checkpoints.logical,
	                 WORKSPACE_CHECKPOINTS_KEEP * (BASE_SIZE + SMALL_HOME));

	/* Revert brings back both images as they were. */
	wwrite(c, "cp", "disk.img", 12 * MIB, "after everything");
	wwrite(c, "cp", "home.img", 200 * MIB, "after everything");
	assert_int_equal(workspace_checkpoint_revert(c->st, "cp", ids[2], false), 0);
	assert_true(wholds(c, "cp", "disk.img", 12 * MIB, "generation 2"));
	assert_true(wholds(c, "cp", "home.img", 200 * MIB, "generation 2"));
	assert_int_equal(workspace_checkpoint_revert(c->st, "cp", ids[6], false), 0);
	assert_true(wholds(c, "cp", "disk.img", 12 * MIB, "generation 6"));
	assert_true(wholds(c, "cp", "home.img", 200 * MIB, "generation 6"));
	/* The checkpoint itself is untouched by writes after a revert. */
	wwrite(c, "cp", "disk.img", 12 * MIB, "scribble");
	assert_int_equal(workspace_checkpoint_revert(c->st, "cp", ids[6], false), 0);
	assert_true(wholds(c, "cp", "disk.img", 12 * MIB, "generation 6"));
	/* --system-only: the system disk goes back, home keeps what was written since. */
	wwrite(c, "cp", "disk.img", 12 * MIB, "system later");
	wwrite(c, "cp", "home.img", 200 * MIB, "home later");
	assert_int_equal(workspace_checkpoint_revert(c->st, "cp", ids[4], true), 0);
	assert_true(wholds(c, "cp", "disk.img", 12 * MIB, "generation 4"));
	assert_true(wholds(c, "cp", "home.img", 200 * MIB, "home later"));
	/* Each checkpoint holds something of its own (its generation's writes). */
	assert_int_equal(workspace_checkpoint_list(c->st, "cp", &l, &n), 0);
	for (size_t i = 0; i < n; i++)
		assert_true(l[i].held > 0);
	checkpoint_info_list_free(l, n);

	assert_int_equal(workspace_checkpoint_revert(c->st, "cp", ids[0], false),
	                 -ENOENT); /* pruned */
	assert_int_equal(workspace_checkpoint_revert(c->st, "cp", "../x", false), -EINVAL);
	assert_int_equal(workspace_checkpoint_revert(c->st, "cp", "", false), -EINVAL);
	assert_int_equal(workspace_checkpoint_revert(c->st, "nosuch", ids[6], false), -ENOENT);
	assert_int_equal(workspace_checkpoint_list(c->st, "nosuch", &l, &n), -ENOENT);

	/* Nothing to checkpoint after a reset. */
	assert_int_equal(workspace_reset(c->st, "cp"), 0);
	assert_int_equal(workspace_checkpoint_create(c->st, "cp", NULL, NULL), -ENOENT);
	/* A revert restores a reset disk too. */
	assert_int_equal(workspace_checkpoint_revert(c->st, "cp", ids[5], false), 0);
	assert_true(wholds(c, "cp", "disk.img", 12 * MIB, "generation 5"));
	assert_consistent(c);
}

/* ---- crash safety ---- */

enum verb { V_CREATE, V_RESET, V_WIPE, V_WIPE_ALL, V_PREPARE, V_DELETE, V_CHECKPOINT, V_REVERT };
enum outcome { OLD, NEW };

static const struct crash_case {
	const char *point;
	enum verb verb;
	enum outcome want;
} crash_cases[] = {
        {"create:after-mkdir", V_CREATE, OLD},
        {"create:after-clone", V_CREATE, OLD},
        {"create:after-home", V_CREATE, OLD},
        {"create:after-mac", V_CREATE, OLD},
        {"create:after-state", V_CREATE, OLD},
        {"create:after-rename", V_CREATE, NEW},
        /* A create that has to make the home template first (none for qcow2). */
        {"home-template:after-mke2fs", V_CREATE, OLD},
        {"home-template:after-rename", V_CREATE, OLD},
        {"reset:after-save", V_RESET, NEW},
        {"reset:after-unlink", V_RESET, NEW},
        {"wipe-home:after-journal", V_WIPE, NEW},
        {"wipe-home:after-unlink-home", V_WIPE, NEW},
        {"wipe-home:after-rename-ssh", V_WIPE, NEW},
        {"wipe-home:after-remove-ssh", V_WIPE, NEW},
        {"wipe-home:after-save", V_WIPE, NEW},
        /* slate wipe: reset and wipe-home as one step, never the disk without the home. */
        {"wipe:after-journal", V_WIPE_ALL, NEW},
        {"wipe:after-save-disk", V_WIPE_ALL, NEW},
        {"wipe:after-unlink-disk", V_WIPE_ALL, NEW},
        {"wipe-home:after-unlink-home", V_WIPE_ALL, NEW},
        {"wipe-home:after-remove-ssh", V_WIPE_ALL, NEW},
        {"wipe-home:after-save", V_WIPE_ALL, NEW},
        {"prepare:after-clone-disk", V_PREPARE, OLD},
        {"prepare:after-rename-disk", V_PREPARE, OLD},
        {"prepare:after-home", V_PREPARE, OLD},
        {"prepare:after-rename-home", V_PREPARE, OLD},
        {"prepare:after-save", V_PREPARE, NEW},
        {"delete:after-rename", V_DELETE, NEW},
        {"delete:after-mac", V_DELETE, NEW},
        {"delete:after-remove", V_DELETE, NEW},
        {"checkpoint:after-clone-disk", V_CHECKPOINT, OLD},
        {"checkpoint:after-clone-home", V_CHECKPOINT, OLD},
        {"checkpoint:after-meta", V_CHECKPOINT, OLD},
        {"checkpoint:after-rename", V_CHECKPOINT, NEW},
        {"checkpoint:after-prune-rename", V_CHECKPOINT, NEW},
        {"checkpoint:after-prune", V_CHECKPOINT, NEW},
        {"revert:after-journal", V_REVERT, NEW},
        {"revert:after-clone-disk", V_REVERT, NEW},
        {"revert:after-clone-home", V_REVERT, NEW},
        {"revert:after-rename-disk", V_REVERT, NEW},
        {"revert:after-rename-home", V_REVERT, NEW},
        {"revert:after-save", V_REVERT, NEW},
        {"revert:after-done", V_REVERT, NEW},
};

#define DISK_OFF (20 * MIB)
#define HOME_OFF (150 * MIB)

static int run_verb(struct ctx *c, const struct crash_case *k, const char *name, const char *cp)
{
	struct workspace_create_args a = {
	        .name = name, .owner = 1000, .image_id = "base", .home_size = SMALL_HOME};

	switch (k->verb) {
	case V_CREATE:
		return workspace_create(c->st, &a, NULL);
	case V_RESET:
		return workspace_reset(c->st, name);
	case V_WIPE:
		return workspace_wipe_home(c->st, name);
	case V_WIPE_ALL:
		return workspace_wipe(c->st, name);
	case V_PREPARE:
		return workspace_prepare(c->st, name);
	case V_DELETE:
		return workspace_delete(c->st, name);
	case V_CHECKPOINT:
		return workspace_checkpoint_create(c->st, name, "crash", NULL);
	case V_REVERT:
		return workspace_checkpoint_revert(c->st, name, cp, false);
	}
	return -EINVAL;
}

static void newest_checkpoint(struct ctx *c, const char *name, char ret[32], size_t *ret_n)
{
	struct checkpoint_info *l = NULL;
	size_t n = 0;

	assert_int_equal(workspace_checkpoint_list(c->st, name, &l, &n), 0);
	if (n > 0)
		memcpy(ret, l[0].id, 32);
	else
		ret[0] = '\0';
	*ret_n = n;
	checkpoint_info_list_free(l, n);
}

static void crash_one(struct ctx *c, size_t i)
{
	const struct crash_case *k = &crash_cases[i];
	char name[16], cp[32] = "", newest[32] = "", mac[MAC_STRLEN + 1] = "";
	size_t n_cp = 0;
	struct workspace *w = NULL;
	pid_t pid;
	int status;

	snprintf(name, sizeof(name), "k%zu", i);
	if (strneq(k->point, "home-template:", 14)) {
		_cleanup_free_ char *dir = templates_dir(c);

		if (c->kind == STORAGE_QCOW2)
			return; /* no templates there */
		/* A home of its size exists, so that the sweep keeps a complete template... */
		create_ws(c, "keeper", SMALL_HOME);
		/* ...and the crashing create must make one: none left by an earlier case. */
		assert_int_equal(sh("rm -rf %s", dir), 0);
	}
	if (k->verb != V_CREATE) {
		create_ws(c, name, SMALL_HOME);
		wwrite(c, name, "disk.img", DISK_OFF, "disk before");
		wwrite(c, name, "home.img", HOME_OFF, "home before");
		assert_int_equal(workspace_load(c->st, name, &w), 0);
		memcpy(mac, w->mac, sizeof(mac));
		workspace_free(TAKE_PTR(w));
	}
	if (k->verb == V_WIPE || k->verb == V_WIPE_ALL) {
		_cleanup_free_ char *key = wpath(c, name, "ssh/id_ed25519");
		assert_int_equal(fs_write_atomic_at(AT_FDCWD, key, "KEY", 3, 0600), 0);
	}
	if (k->verb == V_PREPARE) {
		/* Compromised and wiped: the prepare that makes the fresh pair ends the quarantine. */
		assert_int_equal(workspace_mark_compromised(c->st, name, "evil.example"), 1);
		assert_int_equal(workspace_reset(c->st, name), 0);
		assert_int_equal(workspace_wipe_home(c->st, name), 0);
	}
	if (k->verb == V_CHECKPOINT) {
		/* Full, so that the new one prunes the oldest. */
		for (int j = 0; j < WORKSPACE_CHECKPOINTS_KEEP; j++)
			assert_int_equal(workspace_checkpoint_create(c->st, name, NULL, NULL), 0);
		newest_checkpoint(c, name, newest, &n_cp);
	}
	if (k->verb == V_REVERT) {
		struct checkpoint_info info;
		wwrite(c, name, "disk.img", DISK_OFF, "disk at the checkpoint");
		wwrite(c, name, "home.img", HOME_OFF, "home at the checkpoint");
		assert_int_equal(workspace_checkpoint_create(c->st, name, NULL, &info), 0);
		memcpy(cp, info.id, sizeof(cp));
		free(info.note);
		wwrite(c, name, "disk.img", DISK_OFF, "disk after the checkpoint");
		wwrite(c, name, "home.img", HOME_OFF, "home after the checkpoint");
	}

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv(CRASH_POINT_ENV, k->point, 1);
		crash_point_reload();
		/* Reaching the end means the point was never passed. */
		_exit(run_verb(c, k, name, cp) < 0 ? 3 : 4);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("%s: the child was not killed at the point (status 0x%x)", k->point,
		         (unsigned)status);

	/* A restarted daemon. */
	reopen(c);
	assert_consistent(c);

	switch (k->verb) {
	case V_CREATE:
		if (strneq(k->point, "home-template:", 14)) {
			/* Never half a template under its name: complete, or not there. */
			_cleanup_free_ char *tpl = template_path(c, SMALL_HOME);

			assert_int_equal(tpl != NULL,
			                 streq(k->point, "home-template:after-rename"));
			if (tpl)
				assert_true(fsck_clean(tpl));
			/* The next create makes it or uses it. */
			create_ws(c, name, SMALL_HOME);
			free(tpl);
			tpl = template_path(c, SMALL_HOME);
			assert_non_null(tpl);
			_cleanup_free_ char *home = wpath(c, name, "home.img");
			assert_true(same_extents(tpl, home));
			assert_true(fsck_clean(home));
			assert_int_equal(workspace_delete(c->st, name), 0);
			assert_int_equal(workspace_delete(c->st, "keeper"), 0);
		}
		if (k->want == OLD) {
			assert_int_equal(workspace_load(c->st, name, &w), -ENOENT);
		} else {
			assert_int_equal(workspace_load(c->st, name, &w), 0);
			assert_true(w->disk_present && w->home_present);
			_cleanup_free_ char *home = wpath(c, name, "home.img");
			assert_true(is_ext4(home));
			workspace_free(TAKE_PTR(w));
		}
		break;
	case V_RESET:
		assert_int_equal(workspace_load(c->st, name, &w), 0);
		assert_false(w->disk_present);
		assert_true(w->home_present);
		assert_true(wholds(c, name, "home.img", HOME_OFF, "home before"));
		workspace_free(TAKE_PTR(w));
		break;
	case V_WIPE:
		assert_int_equal(workspace_load(c->st, name, &w), 0);
		assert_false(w->home_present);
		assert_false(wexists(c, name, "ssh/id_ed25519"));
		assert_false(wexists(c, name, "ssh"));
		assert_true(w->disk_present);
		assert_true(wholds(c, name, "disk.img", DISK_OFF, "disk before"));
		workspace_free(TAKE_PTR(w));
		break;
	case V_WIPE_ALL:
		assert_int_equal(workspace_load(c->st, name, &w), 0);
		assert_false(w->home_present);
		assert_false(w->disk_present);
		assert_false(wexists(c, name, "disk.img"));
		assert_false(wexists(c, name, "home.img"));
		assert_false(wexists(c, name, "ssh"));
		assert_false(wexists(c, name, "wipe-home.json"));
		workspace_free(TAKE_PTR(w));
		break;
	case V_PREPARE:
		assert_int_equal(workspace_load(c->st, name, &w), 0);
		assert_int_equal(w->disk_present, k->want == NEW);
		assert_int_equal(w->home_present, k->want == NEW);
		/* The mark goes with the write that records the fresh pair, never before it. */
		assert_int_equal(w->compromised, k->want == OLD);
		assert_false(workspace_quarantined(w));
		workspace_free(TAKE_PTR(w));
		/* Either way, the next prepare finishes the job. */
		assert_int_equal(workspace_prepare(c->st, name), 0);
		assert_int_equal(workspace_load(c->st, name, &w), 0);
		assert_false(w->compromised);
		workspace_free(TAKE_PTR(w));
		assert_consistent(c);
		break;
	case V_DELETE:
		assert_int_equal(workspace_load(c->st, name, &w), -ENOENT);
		assert_false(wexists(c, name, NULL));
		assert_false(mac_reserved(c, mac, NULL));
		break;
	case V_CHECKPOINT: {
		char now[32];
		size_t n_now;

		newest_checkpoint(c, name, now, &n_now);
		assert_int_equal(n_now, WORKSPACE_CHECKPOINTS_KEEP);
		if (k->want == OLD)
			assert_string_equal(now, newest);
		else
			assert_string_not_equal(now, newest);
		assert_true(wholds(c, name, "home.img", HOME_OFF, "home before"));
		assert_true(wholds(c, name, "disk.img", DISK_OFF, "disk before"));
		break;
	}
	case V_REVERT:
		assert_true(wholds(c, name, "disk.img", DISK_OFF, "disk at the checkpoint"));
		assert_true(wholds(c, name, "home.img", HOME_OFF, "home at the checkpoint"));
		assert_int_equal(workspace_load(c->st, name, &w), 0);
		assert_true(w->disk_present && w->home_present);
		workspace_free(TAKE_PTR(w));
		break;
	}
	/* Keep the filesystem small for the next case. */
	if (k->verb != V_DELETE && (k->verb != V_CREATE || k->want == NEW))
		assert_int_equal(workspace_delete(c->st, name), 0);
	assert_consistent(c);
}

static void test_crash_points(void **state)
{
	struct ctx *c = *state;
	const char *only = getenv("SLATE_TEST_CRASH_ONLY");

	for (size_t i = 0; i < ELEMENTSOF(crash_cases); i++) {
		if (only && !streq(only, crash_cases[i].point))
			continue;
		print_message("crash point %s\n", crash_cases[i].point);
		crash_one(c, i);
	}
}

/* A crash point that is not armed, or another one, changes nothing. */
static void test_crash_point_disarmed(void **state)
{
	struct ctx *c = *state;

	setenv(CRASH_POINT_ENV, "no-such-point", 1);
	crash_point_reload();
	create_ws(c, "calm", SMALL_HOME);
	assert_int_equal(workspace_delete(c->st, "calm"), 0);
	unsetenv(CRASH_POINT_ENV);
	crash_point_reload();
}

/* ---- residue ---- */

/* Fills len bytes at off with the marker; through the format for a qcow2 image. */
static void fill_with_marker(const char *path, uint64_t off, uint64_t len, bool qcow2)
{
	_cleanup_close_ int fd = -1;
	size_t ml = strlen(MARKER), chunk = MIB;
	uint8_t *buf;

	if (qcow2) {
		qcow2_write(path, off, len, MARKER, ml);
		return;
	}
	fd = open(path, O_WRONLY | O_CLOEXEC);
	buf = malloc(chunk);
	assert_true(fd >= 0);
	assert_non_null(buf);
	for (size_t i = 0; i < chunk; i++)
		buf[i] = (uint8_t)MARKER[i % ml];
	for (uint64_t o = off; o < off + len; o += chunk)
		assert_int_equal(pwrite(fd, buf, chunk, (off_t)o), (ssize_t)chunk);
	assert_int_equal(fsync(fd), 0);
	free(buf);
}

#define REGION (64 * 1024)
#define PROBE (4 * 1024)

/*
 * The partial-write probe: for each sampled 64 KiB-aligned region, write 4 KiB at its start and
 * require the other 60 KiB to read back exactly as before the write (and as the base's bytes at
 * the same offset, when base_fd >= 0), never anything foreign. Reads after the writes bypass the
 * page cache so the bytes come from the filesystem's blocks.
 */
static void probe(const char *path, int base_fd, unsigned stride)
{
	_cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC);
	struct stat st;
	uint64_t n_regions, n_probed = 0;
	uint8_t *before, *after, *basebuf, pattern[PROBE];

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	n_regions = (uint64_t)st.st_size / REGION;
	before = malloc((size_t)(n_regions / stride + 1) * REGION);
	after = malloc(REGION);
	basebuf = malloc(REGION);
	assert_non_null(before);
	assert_non_null(after);
	assert_non_null(basebuf);
	memset(pattern, 0xa5, sizeof(pattern));

	for (uint64_t r = 0, k = 0; r < n_regions; r += stride, k++) {
		uint8_t *b = before + k * REGION;
		assert_int_equal(pread(fd, b, REGION, (off_t)(r * REGION)), REGION);
		if (memmem(b, REGION, "SLATE-RESIDUE-MARKER", 20))
			fail_msg("%s: marker before the probe at %" PRIu64, path, r * REGION);
		if (base_fd >= 0) {
			assert_int_equal(pread(base_fd, basebuf, REGION, (off_t)(r * REGION)),
			                 REGION);
			if (memcmp(b, basebuf, REGION) != 0)
				fail_msg("%s: region %" PRIu64 " differs from the base", path, r);
		}
	}
	for (uint64_t r = 0; r < n_regions; r += stride)
		assert_int_equal(pwrite(fd, pattern, PROBE, (off_t)(r * REGION)), PROBE);
	assert_int_equal(fsync(fd), 0);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	for (uint64_t r = 0, k = 0; r < n_regions; r += stride, k++) {
		uint8_t *b = before + k * REGION;
		assert_int_equal(pread(fd, after, REGION, (off_t)(r * REGION)), REGION);
		assert_memory_equal(after, pattern, PROBE);
		if (memcmp(after + PROBE, b + PROBE, REGION - PROBE) != 0)
			fail_msg("%s: region at %" PRIu64 " shows bytes never written there", path,
			         r * REGION);
		n_probed++;
	}
	print_message("probe %s: %" PRIu64 " regions of %" PRIu64 ", all clean\n",
	              strrchr(path, '/') + 1, n_probed, n_regions);
	free(before);
	free(after);
	free(basebuf);
}

/*
 * The partial-write probe through qcow2: each 4 KiB write into a fresh 64 KiB region makes
 * qcow2 allocate a 64 KiB cluster from the host filesystem and fill the rest from the backing
 * file. Every guest-visible byte never written must still be the base's, never what the host's
 * blocks held before.
 */
static void probe_qcow2(const char *path, int base_fd)
{
	struct stat st;
	uint64_t n_regions;
	uint8_t *got = malloc(REGION), *want = malloc(REGION), pattern[PROBE];
	const char **argv;
	char **cmds;
	size_t k = 0;
	int raw;

	assert_non_null(got);
	assert_non_null(want);
	assert_int_equal(fstat(base_fd, &st), 0);
	n_regions = (uint64_t)st.st_size / REGION;
	memset(pattern, 0xa5, sizeof(pattern));

	/* Before: exactly the base. */
	raw = qcow2_raw(path);
	for (uint64_t r = 0; r < n_regions; r++) {
		assert_int_equal(pread(raw, got, REGION, (off_t)(r * REGION)), REGION);
		assert_int_equal(pread(base_fd, want, REGION, (off_t)(r * REGION)), REGION);
		if (memcmp(got, want, REGION) != 0)
			fail_msg("%s: region %" PRIu64 " differs from the base", path, r);
	}
	close(raw);

	/* One qemu-io run writes 4 KiB at the start of every region. */
	argv = calloc(2 * n_regions + 5, sizeof(*argv));
	cmds = calloc(n_regions, sizeof(*cmds));
	assert_non_null(argv);
	assert_non_null(cmds);
	argv[k++] = "qemu-io";
	argv[k++] = "-f";
	argv[k++] = "qcow2";
	for (uint64_t r = 0; r < n_regions; r++) {
		assert_true(asprintf(&cmds[r], "write -q -P 0xa5 %" PRIu64 " %d", r * REGION,
		                     PROBE) > 0);
		argv[k++] = "-c";
		argv[k++] = cmds[r];
	}
	argv[k++] = path;
	argv[k] = NULL;
	if (!run_argv(argv))
		fail_msg("qemu-io probe writes into %s failed", path);
	{
		_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	}

	raw = qcow2_raw(path);
	for (uint64_t r = 0; r < n_regions; r++) {
		assert_int_equal(pread(raw, got, REGION, (off_t)(r * REGION)), REGION);
		assert_int_equal(pread(base_fd, want, REGION, (off_t)(r * REGION)), REGION);
		assert_memory_equal(got, pattern, PROBE);
		if (memcmp(got + PROBE, want + PROBE, REGION - PROBE) != 0)
			fail_msg("%s: region at %" PRIu64 " shows bytes never written there", path,
			         r * REGION);
	}
	close(raw);
	print_message("probe %s (qcow2, through the format): %" PRIu64 " regions, all clean\n",
	              strrchr(path, '/') + 1, n_regions);
	for (uint64_t r = 0; r < n_regions; r++)
		free(cmds[r]);
	free(cmds);
	free(argv);
	free(got);
	free(want);
}

static void test_residue(void **state)
{
	struct ctx *c = *state;
	_cleanup_free_ char *a_disk = NULL, *a_home = NULL, *b_disk = NULL, *b_home = NULL;
	_cleanup_free_ char *basep = image_disk_path(c);
	_cleanup_close_ int base_fd = -1;

	/* A: full of secrets, in both images and in a checkpoint. */
	create_ws(c, "tenant-a", SMALL_HOME);
	a_disk = wpath(c, "tenant-a", "disk.img");
	a_home = wpath(c, "tenant-a", "home.img");
	fill_with_marker(a_disk, 0, BASE_SIZE, through_format(c, "disk.img"));
	fill_with_marker(a_home, 0, 64 * MIB, false);
	fill_with_marker(a_home, 128 * MIB, 32 * MIB, false);
	assert_int_equal(workspace_checkpoint_create(c->st, "tenant-a", NULL, NULL), 0);
	fill_with_marker(a_home, 200 * MIB, 32 * MIB, false);
	assert_true(scan_file(a_disk, "SLATE-RESIDUE-MARKER") > 0);
	assert_int_equal(workspace_delete(c->st, "tenant-a"), 0);
	assert_int_equal(syncfs(c->state_fd), 0);

	/* B, right after: nothing of A in any byte. */
	create_ws(c, "tenant-b", SMALL_HOME);
	b_disk = wpath(c, "tenant-b", "disk.img");
	b_home = wpath(c, "tenant-b", "home.img");
	assert_int_equal(scan_file(b_disk, "SLATE-RESIDUE-MARKER"), 0);
	assert_int_equal(scan_file(b_home, "SLATE-RESIDUE-MARKER"), 0);

	base_fd = open(basep, O_RDONLY | O_CLOEXEC);
	assert_true(base_fd >= 0);
	if (through_format(c, "disk.img")) {
		_cleanup_close_ int raw = qcow2_raw(b_disk);
		char p[64];

		/* The raw overlay (scanned above) and what the guest sees of it. */
		snprintf(p, sizeof(p), "/proc/self/fd/%d", raw);
		assert_int_equal(scan_file(p, "SLATE-RESIDUE-MARKER"), 0);
		probe_qcow2(b_disk, base_fd);
	} else {
		probe(b_disk, base_fd, 1);
	}
	probe(b_home, -1, 8);
	assert_int_equal(scan_file(b_disk, "SLATE-RESIDUE-MARKER"), 0);
	assert_int_equal(scan_file(b_home, "SLATE-RESIDUE-MARKER"), 0);
}

/* ---- ENOSPC ---- */

static void fill_fs(int dirfd)
{
	_cleanup_close_ int fd = -1;
	off_t off = 0;

	fd = openat(dirfd, "filler", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	for (off_t step = 64 * (off_t)MIB; step >= 4096; step /= 2)
		while (fallocate(fd, 0, off, step) == 0)
			off += step;
	/* Whatever fallocate could not take, small writes can. */
	for (int i = 0; i < 4096; i++) {
		char b[4096] = {0};
		if (pwrite(fd, b, sizeof(b), off) != (ssize_t)sizeof(b))
			break;
		off += (off_t)sizeof(b);
	}
	(void)fsync(fd);
}

/*
 * A small filesystem that fills up: create fails with ENOSPC and leaves nothing. For the pool,
 * the pool itself (320 MiB) is what fills up, not the ext4 under it.
 */
static void enospc_on(const char *type, enum storage_mode mode, enum storage_kind kind)
{
	struct fsys *f = fs_make(type, (kind == STORAGE_POOL ? 1024 : 320) * MIB);
	struct ctx *c = NULL;
	struct workspace_create_args a = {.name = "full", .owner = 1000, .image_id = "base"};
	struct workspace *w = NULL;
	_cleanup_close_ int fill_fd = -1;
	int r;

	assert_non_null(f);
	assert_int_equal(ctx_open(f, mode, kind, 320 * MIB, &c), 0);
	/* The directory holding images/ and workspaces/: the state directory, or the pool. */
	fill_fd = openat(storage_workspaces_fd(c->s), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fill_fd >= 0);
	fill_fs(fill_fd);

	r = workspace_create(c->st, &a, &w);
	print_message("create on a full %s (%s): %s\n", type, storage_kind_name(kind),
	              slate_strerror(r));
	assert_int_equal(r, -ENOSPC);
	assert_null(w);
	assert_int_equal(n_workspaces(c), 0);
	assert_no_leftovers(storage_workspaces_path(c->s));
	assert_consistent(c);

	/* With room again, it works. */
	assert_int_equal(unlinkat(fill_fd, "filler", 0), 0);
	assert_int_equal(syncfs(fill_fd), 0);
	assert_int_equal(workspace_create(c->st, &a, &w), 0);
	workspace_free(w);
	assert_consistent(c);
	fill_fd = safe_close(fill_fd); /* it keeps the pool busy */
	ctx_close(c);
	fs_release(f);
}

static void test_enospc_btrfs(void **state)
{
	(void)state;
	enospc_on("btrfs", STORAGE_MODE_AUTO, STORAGE_BTRFS);
}

static void test_enospc_xfs(void **state)
{
	(void)state;
	enospc_on("xfs", STORAGE_MODE_AUTO, STORAGE_REFLINK);
}

static void test_enospc_pool(void **state)
{
	(void)state;
	enospc_on("ext4", STORAGE_MODE_AUTO, STORAGE_POOL);
}

static void test_enospc_qcow2(void **state)
{
	(void)state;
	enospc_on("ext4", STORAGE_MODE_QCOW2, STORAGE_QCOW2);
}

/* ---- groups ---- */

static int group_setup(const char *type, uint64_t size, enum storage_mode mode,
                       enum storage_kind kind)
{
	cur_mode = mode;
	cur_kind = kind;
	cur_fs = fs_make(type, size);
	return cur_fs ? 0 : -1;
}

static int setup_btrfs(void **state)
{
	(void)state;
	return group_setup("btrfs", 1024 * MIB, STORAGE_MODE_AUTO, STORAGE_BTRFS);
}

static int setup_xfs(void **state)
{
	(void)state;
	return group_setup("xfs", 1024 * MIB, STORAGE_MODE_AUTO, STORAGE_REFLINK);
}

/* ext4 has no reflinks: auto mode must settle on the loop-backed pool (one per test). */
static int setup_pool(void **state)
{
	(void)state;
	return group_setup("ext4", 4096 * MIB, STORAGE_MODE_AUTO, STORAGE_POOL);
}

static int setup_qcow2(void **state)
{
	(void)state;
	return group_setup("ext4", 2048 * MIB, STORAGE_MODE_QCOW2, STORAGE_QCOW2);
}

static int group_teardown(void **state)
{
	(void)state;
	fs_release(cur_fs);
	cur_fs = NULL;
	return 0;
}

#define FS_TESTS                                                                                   \
	cmocka_unit_test_setup_teardown(test_create_layout, setup_ctx, teardown_ctx),              \
	        cmocka_unit_test_setup_teardown(test_home_skeleton, setup_ctx, teardown_ctx),      \
	        cmocka_unit_test_setup_teardown(test_home_template, setup_ctx, teardown_ctx),      \
	        cmocka_unit_test_setup_teardown(test_create_duplicate, setup_ctx, teardown_ctx),   \
	        cmocka_unit_test_setup_teardown(test_create_invalid, setup_ctx, teardown_ctx),     \
	        cmocka_unit_test_setup_teardown(test_create_missing_image, setup_ctx,              \
	                                        teardown_ctx),                                     \
	        cmocka_unit_test_setup_teardown(test_list_sorted, setup_ctx, teardown_ctx),        \
	        cmocka_unit_test_setup_teardown(test_save, setup_ctx, teardown_ctx),               \
	        cmocka_unit_test_setup_teardown(test_compromised, setup_ctx, teardown_ctx),        \
	        cmocka_unit_test_setup_teardown(test_state_strict, setup_ctx, teardown_ctx),       \
	        cmocka_unit_test_setup_teardown(test_reset_prepare, setup_ctx, teardown_ctx),      \
	        cmocka_unit_test_setup_teardown(test_wipe_home, setup_ctx, teardown_ctx),          \
	        cmocka_unit_test_setup_teardown(test_delete, setup_ctx, teardown_ctx),             \
	        cmocka_unit_test_setup_teardown(test_lock, setup_ctx, teardown_ctx),               \
	        cmocka_unit_test_setup_teardown(test_checkpoints, setup_ctx, teardown_ctx),        \
	        cmocka_unit_test_setup_teardown(test_crash_points, setup_ctx, teardown_ctx),       \
	        cmocka_unit_test_setup_teardown(test_crash_point_disarmed, setup_ctx,              \
	                                        teardown_ctx),                                     \
	        cmocka_unit_test_setup_teardown(test_residue, setup_ctx, teardown_ctx)

/* SLATE_TEST_GROUPS="pool qcow2" runs only those groups (all when unset). */
static bool group_wanted(const char *name)
{
	const char *want = getenv("SLATE_TEST_GROUPS");
	size_t n = strlen(name);

	if (!want || !*want)
		return true;
	for (const char *p = want; (p = strstr(p, name)); p += n)
		if ((p == want || p[-1] == ' ' || p[-1] == ',') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == ','))
			return true;
	return false;
}

int main(void)
{
	const struct CMUnitTest plain[] = {
	        cmocka_unit_test(test_name_check),
	};
	const struct CMUnitTest fs_tests[] = {FS_TESTS};
	const struct CMUnitTest enospc[] = {
	        cmocka_unit_test(test_enospc_btrfs),
	        cmocka_unit_test(test_enospc_xfs),
	        cmocka_unit_test(test_enospc_pool),
	        cmocka_unit_test(test_enospc_qcow2),
	};
	struct fsys *probe_fs;
	int fails = 0;

	fails += cmocka_run_group_tests_name("names", plain, NULL, NULL);
	if (geteuid() != 0) {
		printf("SKIP: the filesystem tests need root (loop mounts)\n");
		return fails ? 1 : 77;
	}
	/* Whatever stays mounted after a crash (pools included) goes with the namespace. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		printf("SKIP: no private mount namespace: %s\n", strerror(errno));
		return fails ? 1 : 77;
	}
	atexit(cleanup_all);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (make_base() < 0) {
		printf("cannot make the base image in /tmp\n");
		return 1;
	}
	/* Loop mounts may be missing (a container without /dev/loop*): that is a skip. */
	probe_fs = fs_make("btrfs", 300 * MIB);
	if (!probe_fs) {
		printf("SKIP: cannot make and loop-mount a btrfs filesystem here\n");
		cleanup_all();
		return fails ? 1 : 77;
	}
	fs_release(probe_fs);

	if (group_wanted("btrfs"))
		fails +=
		        cmocka_run_group_tests_name("btrfs", fs_tests, setup_btrfs, group_teardown);
	if (group_wanted("xfs"))
		fails += cmocka_run_group_tests_name("xfs", fs_tests, setup_xfs, group_teardown);
	if (group_wanted("pool"))
		fails += cmocka_run_group_tests_name("pool", fs_tests, setup_pool, group_teardown);
	if (group_wanted("qcow2"))
		fails +=
		        cmocka_run_group_tests_name("qcow2", fs_tests, setup_qcow2, group_teardown);
	if (group_wanted("enospc"))
		fails += cmocka_run_group_tests_name("enospc", enospc, NULL, NULL);
	cleanup_all();
	return fails ? 1 : 0;
}

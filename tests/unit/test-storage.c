/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Storage backends on real filesystems: a loop-mounted btrfs, an XFS with reflink=1 and an ext4
 * (no reflinks: the pool and qcow2 backends), each made in the fixture from a sparse file under
 * $TMPDIR (or /tmp). Needs root and loop devices; skipped (77) with the reason otherwise. The
 * whole binary runs in a private mount namespace, so that every mount it makes (and, through
 * autoclear, every loop device) goes away with it even if it crashes; the group teardown
 * unmounts explicitly as well.
 *
 * SLATE_STORAGE_BENCH=1 adds a timing run: a clone of a 4 GiB file holding 1 GiB of data on
 * btrfs and XFS against cp --sparse=always.
 */

#include <btrfsutil.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>

#include <cmocka.h>

#include "storage/loop.h"
#include "storage/spawn.h"
#include "storage/storage.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)
#define POOL_SIZE GIB
#define MARKER "SLATE-RESIDUE-MARKER AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY\n"
#define MARKER_PREFIX "SLATE-RESIDUE-MARKER"

#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif

/* ---- fixture filesystems ---- */

struct fsys {
	const char *type; /* "btrfs", "xfs", "ext4" */
	char img[256];
	char mnt[256];
	bool mounted;
	const char *why; /* why it is missing */
};

static char base_dir[200];
static struct fsys fs_btrfs = {.type = "btrfs"}, fs_xfs = {.type = "xfs"},
                   fs_ext4 = {.type = "ext4"};

static int run(const char *const *argv, char **out)
{
	return spawn_run(argv, out);
}

static int fs_make(struct fsys *f, uint64_t size)
{
	_cleanup_close_ int fd = -1, loop = -1;
	_cleanup_free_ char *dev = NULL, *out = NULL;
	int r;

	(void)snprintf(f->img, sizeof(f->img), "%.200s/%.8s.img", base_dir, f->type);
	(void)snprintf(f->mnt, sizeof(f->mnt), "%.200s/%.8s", base_dir, f->type);
	fd = open(f->img, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		return -errno;
	if (streq(f->type, "btrfs")) {
		const char *argv[] = {"mkfs.btrfs", "-q", f->img, NULL};
		r = run(argv, &out);
	} else if (streq(f->type, "xfs")) {
		const char *argv[] = {"mkfs.xfs", "-q", "-m", "reflink=1", f->img, NULL};
		r = run(argv, &out);
	} else {
		const char *argv[] = {"mkfs.ext4", "-q", "-F", f->img, NULL};
		r = run(argv, &out);
	}
	if (r < 0) {
		f->why = r == -ENOENT ? "mkfs is not installed" : "mkfs failed";
		fprintf(stderr, "mkfs %s: %s\n", f->type, out ? out : strerror(-r));
		return r;
	}
	if (mkdir(f->mnt, 0755) < 0)
		return -errno;
	r = loop_attach(fd, f->img, 0, &loop, &dev);
	if (r < 0) {
		f->why = "cannot attach a loop device";
		return r;
	}
	if (mount(dev, f->mnt, f->type, 0, NULL) < 0) {
		f->why = "cannot mount";
		return -errno;
	}
	f->mounted = true;
	return 0;
}

/* Unmounts everything below dir first (pools in state dirs), then dir itself. */
static void umount_below(const char *dir)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096], mnts[32][PATH_MAX];
	size_t n = 0, len = strlen(dir);

	if (!f)
		return;
	while (n < ELEMENTSOF(mnts) && fgets(line, sizeof(line), f)) {
		char mp[PATH_MAX];

		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strneq(mp, dir, len) &&
		    (mp[len] == '/' || mp[len] == '\0'))
			(void)snprintf(mnts[n++], PATH_MAX, "%s", mp);
	}
	/* Deepest (last mounted) first. */
	while (n-- > 0)
		if (umount2(mnts[n], 0) < 0)
			(void)umount2(mnts[n], MNT_DETACH);
}

static void fs_destroy(struct fsys *f)
{
	if (f->mounted) {
		umount_below(f->mnt);
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
	fs_destroy(&fs_btrfs);
	fs_destroy(&fs_xfs);
	fs_destroy(&fs_ext4);
	if (base_dir[0]) {
		umount_below(base_dir);
		(void)rmdir(base_dir);
		base_dir[0] = '\0';
	}
}

static void on_signal(int sig)
{
	cleanup_all();
	(void)signal(sig, SIG_DFL);
	(void)raise(sig);
}

/*
 * Makes the three fixture filesystems. A missing one (its mkfs not installed, say) only skips
 * its tests, with the reason printed; none at all skips the binary (77).
 */
static int fixtures_setup(void)
{
	const char *tmp = getenv("TMPDIR");

	(void)snprintf(base_dir, sizeof(base_dir), "%.160s/test-storage.XXXXXX",
	               tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base_dir))
		return 1;
	/* Sparse: 8 GiB each costs what is written. Big enough for the benchmark's copies. */
	if (fs_make(&fs_btrfs, 8 * GIB) < 0)
		fprintf(stderr, "no btrfs fixture: %s\n", fs_btrfs.why ? fs_btrfs.why : "?");
	if (fs_make(&fs_xfs, 8 * GIB) < 0)
		fprintf(stderr, "no xfs fixture: %s\n", fs_xfs.why ? fs_xfs.why : "?");
	if (fs_make(&fs_ext4, 4 * GIB) < 0)
		fprintf(stderr, "no ext4 fixture: %s\n", fs_ext4.why ? fs_ext4.why : "?");
	if (!fs_btrfs.mounted && !fs_xfs.mounted && !fs_ext4.mounted) {
		printf("SKIP: no fixture filesystem could be made and loop-mounted here (%s)\n",
		       fs_btrfs.why ? fs_btrfs.why : "?");
		return 77;
	}
	return 0;
}

static int group_teardown(void **state)
{
	cleanup_all();
	return 0;
}

/* ---- backends ---- */

struct backend {
	const char *name;
	struct fsys *fs;
	enum storage_mode mode;
	enum storage_kind kind;
	char state[512];
	int state_fd;
	struct storage *s;
};

static struct backend backends[] = {
        {.name = "btrfs", .fs = &fs_btrfs, .mode = STORAGE_MODE_AUTO, .kind = STORAGE_BTRFS},
        {.name = "reflink", .fs = &fs_xfs, .mode = STORAGE_MODE_AUTO, .kind = STORAGE_REFLINK},
        {.name = "pool", .fs = &fs_ext4, .mode = STORAGE_MODE_AUTO, .kind = STORAGE_POOL},
        {.name = "qcow2", .fs = &fs_ext4, .mode = STORAGE_MODE_QCOW2, .kind = STORAGE_QCOW2},
        {.name = "pool-forced", .fs = &fs_xfs, .mode = STORAGE_MODE_POOL, .kind = STORAGE_POOL},
};

static bool subvolumes(const struct backend *b)
{
	return b->kind == STORAGE_BTRFS || b->kind == STORAGE_POOL;
}

static int backend_setup(void **state)
{
	struct backend *b = *state;
	struct storage_config cfg = {.mode = b->mode, .pool_size = POOL_SIZE};
	struct slate_error err = {0};
	int r;

	b->s = NULL;
	b->state_fd = -1;
	if (!b->fs->mounted)
		return 0; /* the test skips */
	(void)snprintf(b->state, sizeof(b->state), "%.256s/state-%.32s", b->fs->mnt, b->name);
	if (mkdir(b->state, 0700) < 0 && errno != EEXIST)
		return -1;
	b->state_fd = open(b->state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (b->state_fd < 0)
		return -1;
	r = storage_open(b->state_fd, b->state, &cfg, &b->s, &err);
	if (r < 0) {
		fprintf(stderr, "storage_open(%s): %s\n", b->state, slate_error_text(&err));
		return -1;
	}
	return 0;
}

static int backend_teardown(void **state)
{
	struct backend *b = *state;

	storage_close(b->s);
	b->s = NULL;
	b->state_fd = safe_close(b->state_fd);
	return 0;
}

#define NEED_BACKEND(b)                                                                            \
	do {                                                                                       \
		if (!(b)->s) {                                                                     \
			fprintf(stderr, "skipped: no %s filesystem (%s)\n", (b)->fs->type,         \
			        (b)->fs->why ? (b)->fs->why : "?");                                \
			skip();                                                                    \
		}                                                                                  \
	} while (0)

/* ---- helpers ---- */

static void write_file(int dir_fd, const char *name, const void *p, size_t n)
{
	_cleanup_close_ int fd =
	        openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(fs_write_all(fd, p, n), 0);
	assert_int_equal(fsync(fd), 0);
}

/* A file of size bytes with pseudo-random data in [a, b) ranges given as MiB pairs. */
static void make_patterned(int dir_fd, const char *name, uint64_t size, const unsigned *mib,
                           size_t n_mib, uint32_t seed)
{
	_cleanup_close_ int fd =
	        openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	_cleanup_free_ uint32_t *buf = malloc(MIB);

	assert_true(fd >= 0);
	assert_non_null(buf);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	for (size_t i = 0; i + 1 < n_mib; i += 2)
		for (unsigned m = mib[i]; m < mib[i + 1]; m++) {
			uint32_t x = seed ^ (m * 2654435761u);
			for (size_t j = 0; j < MIB / 4; j++) {
				x ^= x << 13;
				x ^= x >> 17;
				x ^= x << 5;
				buf[j] = x;
			}
			assert_int_equal(pwrite(fd, buf, MIB, (off_t)m * (off_t)MIB), (ssize_t)MIB);
		}
	assert_int_equal(fsync(fd), 0);
}

static bool files_equal(int a_dir, const char *a, int b_dir, const char *b)
{
	_cleanup_close_ int fa = openat(a_dir, a, O_RDONLY | O_CLOEXEC),
	                    fb = openat(b_dir, b, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ uint8_t *x = malloc(MIB), *y = malloc(MIB);

	if (fa < 0 || fb < 0 || !x || !y)
		return false;
	for (;;) {
		ssize_t n = read(fa, x, MIB), m = read(fb, y, MIB);
		if (n != m || n < 0)
			return false;
		if (n == 0)
			return true;
		if (memcmp(x, y, (size_t)n) != 0)
			return false;
	}
}

static uint64_t free_bytes(int fd)
{
	struct statvfs v;

	assert_int_equal(syncfs(fd), 0);
	assert_int_equal(fstatvfs(fd, &v), 0);
	return (uint64_t)v.f_bfree * v.f_frsize;
}

static uint64_t mount_id_at(int dir_fd, const char *name)
{
	struct statx stx;

	assert_int_equal(statx(dir_fd, name, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx), 0);
	assert_true(stx.stx_mask & STATX_MNT_ID);
	return stx.stx_mnt_id;
}

static bool is_mount_root(const char *path)
{
	struct statx stx;

	assert_int_equal(statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx), 0);
	return (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
	       (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

static bool exists_at(int dir_fd, const char *name)
{
	struct stat st;

	return fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static int open_dir_at(int dir_fd, const char *name)
{
	return openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* ---- tests ---- */

static void test_kind(void **state)
{
	struct backend *b = *state;
	_cleanup_free_ char *root = NULL, *img = NULL, *ws = NULL;
	struct statfs sfs;
	struct stat st;

	NEED_BACKEND(b);
	assert_int_equal(storage_get_kind(b->s), b->kind);
	assert_string_equal(storage_kind_name(b->kind), b->kind == STORAGE_BTRFS     ? "btrfs"
	                                                : b->kind == STORAGE_REFLINK ? "reflink"
	                                                : b->kind == STORAGE_POOL    ? "pool"
	                                                                             : "qcow2");
	assert_string_equal(storage_state_path(b->s), b->state);
	root = b->kind == STORAGE_POOL ? fs_path_join(b->state, "pool") : strdup(b->state);
	img = fs_path_join(root, "images");
	ws = fs_path_join(root, "workspaces");
	assert_string_equal(storage_images_path(b->s), img);
	assert_string_equal(storage_workspaces_path(b->s), ws);

	/* The fds are the directories the paths name, on the filesystem the kind promises. */
	assert_int_equal(fstat(storage_images_fd(b->s), &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0711);
	assert_int_equal(fstatfs(storage_workspaces_fd(b->s), &sfs), 0);
	if (subvolumes(b))
		assert_true((unsigned long)sfs.f_type == BTRFS_SUPER_MAGIC);
	else if (b->kind == STORAGE_REFLINK)
		assert_true((unsigned long)sfs.f_type == XFS_SUPER_MAGIC);
	else
		assert_true((unsigned long)sfs.f_type == EXT4_SUPER_MAGIC);

	if (b->kind == STORAGE_POOL) {
		/* Sparse: a 1 GiB pool costs a few MiB of the host filesystem. */
		assert_int_equal(fstatat(b->state_fd, "pool.img", &st, 0), 0);
		assert_int_equal((uint64_t)st.st_size, POOL_SIZE);
		assert_true((uint64_t)st.st_blocks * 512 < 64 * MIB);
		assert_true(is_mount_root(root));
	}
	if (b->mode == STORAGE_MODE_POOL) {
		/* Once there is a pool, auto mode keeps it even where reflinks work. */
		struct storage_config cfg = {.mode = STORAGE_MODE_AUTO};
		struct storage *s2 = NULL;

		assert_int_equal(storage_open(b->state_fd, b->state, &cfg, &s2, NULL), 0);
		assert_int_equal(storage_get_kind(s2), STORAGE_POOL);
		assert_string_equal(storage_images_path(s2), img);
		storage_close(s2);
	}
}

static void test_dirs(void **state)
{
	struct backend *b = *state;
	int ws;
	_cleanup_close_ int d = -1;
	struct stat st;

	NEED_BACKEND(b);
	ws = storage_workspaces_fd(b->s);
	umask(022);
	assert_int_equal(storage_create_dir(b->s, ws, "d1"), 0);
	assert_int_equal(storage_create_dir(b->s, ws, "d1"), -EEXIST);
	assert_int_equal(fstatat(ws, "d1", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	/* A subvolume's root directory is inode 256. */
	if (subvolumes(b))
		assert_int_equal(st.st_ino, 256);
	else
		assert_int_not_equal(st.st_ino, 256);

	d = open_dir_at(ws, "d1");
	assert_true(d >= 0);
	write_file(d, "disk.img", "x", 1);
	assert_int_equal(mkdirat(d, "sub", 0700), 0);
	write_file(d, "sub/file", "y", 1);
	d = safe_close(d);

	/* An O_PATH parent fd works as well as a real one. */
	{
		_cleanup_close_ int p = openat(ws, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
		assert_int_equal(storage_delete_dir(b->s, p, "d1"), 0);
	}
	assert_false(exists_at(ws, "d1"));
	assert_int_equal(storage_delete_dir(b->s, ws, "d1"), -ENOENT);

	write_file(ws, "plain-file", "z", 1);
	assert_int_equal(storage_delete_dir(b->s, ws, "plain-file"), -ENOTDIR);
	assert_int_equal(unlinkat(ws, "plain-file", 0), 0);

	static const char *const bad[] = {"", ".", "..", "a/b", "/abs"};
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		assert_int_equal(storage_create_dir(b->s, ws, bad[i]), -EINVAL);
		assert_int_equal(storage_delete_dir(b->s, ws, bad[i]), -EINVAL);
	}
	assert_int_equal(storage_create_dir(b->s, ws, NULL), -EINVAL);
}

/*
 * Deleting a tree: nested subvolumes and a read-only snapshot go (btrfs), symlinks are removed
 * and not followed, and a mount point anywhere in the tree stops everything before anything is
 * deleted.
 */
static void test_delete_tree(void **state)
{
	struct backend *b = *state;
	_cleanup_free_ char *t = NULL, *mnt = NULL, *outside = NULL, *keep = NULL;
	_cleanup_close_ int ws = -1, td = -1, plain = -1, out = -1;
	struct stat st;

	NEED_BACKEND(b);
	ws = openat(storage_workspaces_fd(b->s), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(ws >= 0);
	t = fs_path_join(storage_workspaces_path(b->s), "t");
	mnt = fs_path_join(t, "plain/mnt");
	outside = fs_path_join(b->state, "outside");
	keep = fs_path_join(outside, "keep.txt");

	assert_int_equal(mkdir(outside, 0700), 0);
	out = open_dir_at(AT_FDCWD, outside);
	write_file(out, "keep.txt", "keep", 4);

	assert_int_equal(storage_create_dir(b->s, ws, "t"), 0);
	td = open_dir_at(ws, "t");
	assert_true(td >= 0);
	write_file(td, "disk.img", "disk", 4);
	assert_int_equal(mkdirat(td, "plain", 0700), 0);
	plain = open_dir_at(td, "plain");
	write_file(plain, "f", "f", 1);
	assert_int_equal(symlinkat(outside, td, "link-dir"), 0);
	assert_int_equal(symlinkat(keep, plain, "link-file"), 0);
	assert_int_equal(symlinkat("/", td, "link-root"), 0);
	if (subvolumes(b)) {
		_cleanup_close_ int nested = -1;

		/* checkpoints/1 as a subvolume in a plain dir, one nested deeper, a snapshot. */
		assert_int_equal(storage_create_dir(b->s, td, "nested"), 0);
		nested = open_dir_at(td, "nested");
		write_file(nested, "home.img", "home", 4);
		assert_int_equal(storage_create_dir(b->s, nested, "deeper"), 0);
		assert_int_equal(storage_create_dir(b->s, plain, "sv"), 0);
		assert_int_equal(btrfs_util_create_snapshot_fd2(
		                         nested, td, "snap-ro",
		                         BTRFS_UTIL_CREATE_SNAPSHOT_READ_ONLY, NULL, NULL),
		                 BTRFS_UTIL_OK);
	}

	/* A mount point inside: refused, and nothing at all deleted. */
	assert_int_equal(mkdirat(plain, "mnt", 0700), 0);
	assert_int_equal(mount("tmpfs", mnt, "tmpfs", 0, "size=1m"), 0);
	{
		_cleanup_close_ int m = open_dir_at(AT_FDCWD, mnt);
		write_file(m, "on-tmpfs", "t", 1);
	}
	assert_int_equal(storage_delete_dir(b->s, ws, "t"), -EBUSY);
	assert_true(exists_at(td, "disk.img"));
	assert_true(exists_at(plain, "f"));
	assert_true(exists_at(plain, "mnt/on-tmpfs"));
	if (subvolumes(b))
		assert_true(exists_at(td, "snap-ro/home.img"));
	/* The mount point itself is refused too. */
	assert_int_equal(storage_delete_dir(b->s, plain, "mnt"), -EBUSY);
	assert_int_equal(umount2(mnt, 0), 0);

	plain = safe_close(plain);
	td = safe_close(td);
	assert_int_equal(storage_delete_dir(b->s, ws, "t"), 0);
	assert_false(exists_at(ws, "t"));
	/* The links went, not what they pointed at. */
	assert_int_equal(stat(keep, &st), 0);
	assert_int_equal(stat("/", &st), 0);
	assert_int_equal(unlink(keep), 0);
	assert_int_equal(rmdir(outside), 0);
}

static void qemu_img_info(const char *path, struct json_object **ret)
{
	const char *argv[] = {"qemu-img", "info", "--output=json", "-U", path, NULL};
	_cleanup_free_ char *out = NULL;

	assert_int_equal(run(argv, &out), 0);
	assert_non_null(out);
	assert_int_equal(json_parse_object(out, strlen(out), 1 << 20, ret), 0);
}

static const char *json_str(struct json_object *o, const char *key)
{
	const char *v = NULL;

	if (json_get_string(o, key, &v) < 0)
		return "(missing)";
	return v;
}

/* Clones share extents and take no data space; qcow2 overlays point at their base. */
static void test_clone(void **state)
{
	static const unsigned data[] = {0, 8, 16, 24};
	struct backend *b = *state;
	_cleanup_free_ char *base_path = NULL, *disk_path = NULL, *ckpt_path = NULL;
	_cleanup_close_ int c = -1;
	struct storage_usage u;
	uint64_t before, after;
	int img;
	struct stat st;

	NEED_BACKEND(b);
	img = storage_images_fd(b->s);
	make_patterned(img, "base.img", 32 * MIB, data, ELEMENTSOF(data), 1);
	base_path = fs_path_join(storage_images_path(b->s), "base.img");
	assert_int_equal(storage_create_dir(b->s, storage_workspaces_fd(b->s), "c"), 0);
	c = open_dir_at(storage_workspaces_fd(b->s), "c");
	assert_true(c >= 0);
	{
		_cleanup_free_ char *cdir = fs_path_join(storage_workspaces_path(b->s), "c");
		disk_path = fs_path_join(cdir, "disk.img");
		ckpt_path = fs_path_join(cdir, "disk.ckpt");
	}

	umask(077);
	before = free_bytes(c);
	assert_int_equal(storage_clone_file(b->s, img, "base.img", base_path, c, "disk.img", 0640),
	                 0);
	after = free_bytes(c);
	assert_int_equal(fstatat(c, "disk.img", &st, 0), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(storage_clone_file(b->s, img, "base.img", base_path, c, "disk.img", 0640),
	                 -EEXIST);

	if (b->kind == STORAGE_QCOW2) {
		_cleanup_json_ struct json_object *o = NULL;
		int64_t vsize = 0;

		qemu_img_info(disk_path, &o);
		assert_string_equal(json_str(o, "format"), "qcow2");
		assert_string_equal(json_str(o, "backing-filename"), base_path);
		assert_string_equal(json_str(o, "backing-filename-format"), "raw");
		assert_int_equal(json_get_int64(o, "virtual-size", &vsize), 0);
		assert_int_equal(vsize, 32 * MIB);
		assert_true(st.st_size < (off_t)MIB); /* only qcow2 metadata */

		/* Without a path, the absolute one is worked out from the fd. */
		assert_int_equal(
		        storage_clone_file(b->s, img, "base.img", NULL, c, "disk2.img", 0600), 0);
		{
			_cleanup_json_ struct json_object *o2 = NULL;
			_cleanup_free_ char *p2 =
			        fs_path_join(storage_workspaces_path(b->s), "c/disk2.img");
			qemu_img_info(p2, &o2);
			assert_string_equal(json_str(o2, "backing-filename"), base_path);
		}

		/* A checkpoint is a plain (sparse) copy of the overlay, same backing file. */
		assert_int_equal(storage_clone_plain(b->s, c, "disk.img", c, "disk.ckpt", 0600), 0);
		{
			_cleanup_json_ struct json_object *o3 = NULL;
			qemu_img_info(ckpt_path, &o3);
			assert_string_equal(json_str(o3, "format"), "qcow2");
			assert_string_equal(json_str(o3, "backing-filename"), base_path);
		}
		assert_true(files_equal(c, "disk.img", c, "disk.ckpt"));
	} else {
		uint64_t base_phys;

		/* No data blocks were spent: a copy would have taken 16 MiB. */
		assert_true(before - after < 4 * MIB);
		assert_true(files_equal(img, "base.img", c, "disk.img"));
		assert_int_equal(storage_file_usage(c, "disk.img", &u), 0);
		assert_int_equal(u.logical, 32 * MIB);
		assert_true(u.physical >= 16 * MIB);
		assert_true(u.shared >= 16 * MIB);
		assert_true(u.shared == u.physical);
		assert_int_equal(storage_file_usage(img, "base.img", &u), 0);
		assert_true(u.shared >= 16 * MIB);
		base_phys = u.physical;

		/* Writing into the clone unshares only what was written; the base is untouched. */
		{
			_cleanup_close_ int fd = openat(c, "disk.img", O_WRONLY | O_CLOEXEC);
			char junk[65536];

			memset(junk, 0x5a, sizeof(junk));
			assert_int_equal(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
			assert_int_equal(fsync(fd), 0);
		}
		assert_int_equal(storage_file_usage(c, "disk.img", &u), 0);
		assert_true(u.shared >= 16 * MIB - 1 * MIB);
		assert_true(u.shared < u.physical);
		assert_int_equal(storage_file_usage(img, "base.img", &u), 0);
		assert_int_equal(u.physical, base_phys);

		/* A checkpoint clone shares too. */
		assert_int_equal(storage_clone_plain(b->s, c, "disk.img", c, "disk.ckpt", 0600), 0);
		assert_int_equal(storage_file_usage(c, "disk.ckpt", &u), 0);
		assert_true(u.shared == u.physical);
		assert_true(files_equal(c, "disk.img", c, "disk.ckpt"));

		/* Never a byte copy: from another filesystem, the clone is refused, nothing left. */
		{
			_cleanup_close_ int other = open_dir_at(AT_FDCWD, base_dir);
			write_file(other, "elsewhere.img", "data", 4);
			int r = storage_clone_file(b->s, other, "elsewhere.img", NULL, c, "x.img",
			                           0600);
			assert_true(r == -EXDEV || r == -EOPNOTSUPP);
			assert_false(exists_at(c, "x.img"));
			r = storage_clone_plain(b->s, other, "elsewhere.img", c, "x.img", 0600);
			assert_true(r == -EXDEV || r == -EOPNOTSUPP);
			assert_false(exists_at(c, "x.img"));
			assert_int_equal(unlinkat(other, "elsewhere.img", 0), 0);
		}
	}
	assert_int_equal(storage_clone_file(b->s, img, "missing.img", NULL, c, "y.img", 0600),
	                 -ENOENT);
	assert_false(exists_at(c, "y.img"));

	c = safe_close(c);
	assert_int_equal(storage_delete_dir(b->s, storage_workspaces_fd(b->s), "c"), 0);
	assert_int_equal(unlinkat(img, "base.img", 0), 0);
}

static void test_usage(void **state)
{
	static const unsigned data[] = {4, 5};
	struct backend *b = *state;
	struct storage_usage u;
	int ws;

	NEED_BACKEND(b);
	ws = storage_workspaces_fd(b->s);
	make_patterned(ws, "sparse.img", 64 * MIB, data, ELEMENTSOF(data), 7);
	assert_int_equal(storage_file_usage(ws, "sparse.img", &u), 0);
	assert_int_equal(u.logical, 64 * MIB);
	assert_true(u.physical >= MIB && u.physical < 2 * MIB);
	assert_int_equal(u.shared, 0);
	assert_int_equal(storage_file_usage(ws, "missing", &u), -ENOENT);
	assert_int_equal(storage_file_usage(ws, ".", &u), -EINVAL);
	assert_int_equal(unlinkat(ws, "sparse.img", 0), 0);
}

/* Returns how often MARKER_PREFIX appears in fd's data (holes skipped), up to max. */
static unsigned count_marker_max(int fd, unsigned max)
{
	_cleanup_free_ char *buf = malloc(4 * MIB + 64);
	size_t keep = 0, plen = strlen(MARKER_PREFIX);
	unsigned hits = 0;
	off_t off = 0;

	assert_non_null(buf);
	for (;;) {
		off_t data = lseek(fd, off, SEEK_DATA);
		ssize_t n;
		size_t len;

		if (data < 0)
			break; /* ENXIO: only a hole left */
		if (data > off) {
			off = data;
			keep = 0;
		}
		n = pread(fd, buf + keep, 4 * MIB, off);
		assert_true(n >= 0);
		if (n == 0)
			break;
		off += n;
		len = keep + (size_t)n;
		for (char *p = buf; (p = memmem(p, len - (size_t)(p - buf), MARKER_PREFIX, plen));
		     p++)
			if (++hits >= max)
				return hits;
		/* Keep a tail so a marker split between reads is still found once. */
		keep = len < plen - 1 ? len : plen - 1;
		memmove(buf, buf + len - keep, keep);
	}
	return hits;
}

static unsigned count_marker(int fd)
{
	return count_marker_max(fd, UINT_MAX);
}

/*
 * The partial-write probe of doc/security.md ("Residue") at the file level: 4 KiB written at the start of every
 * 64 KiB region of a fresh file must leave the other 60 KiB reading as what the file held
 * before (zeros for a new file, the base for a clone), never as someone's deleted data.
 */
static void probe_partial_writes(int dir_fd, const char *name, uint64_t size, uint8_t fill)
{
	_cleanup_close_ int fd = openat(dir_fd, name, O_RDWR | O_CLOEXEC);
	_cleanup_free_ uint8_t *buf = malloc(64 * 1024);
	uint8_t w[4096], expect[60 * 1024];

	assert_true(fd >= 0);
	assert_non_null(buf);
	memset(w, 0xa5, sizeof(w));
	memset(expect, fill, sizeof(expect));
	for (uint64_t off = 0; off < size; off += 64 * 1024)
		assert_int_equal(pwrite(fd, w, sizeof(w), (off_t)off), (ssize_t)sizeof(w));
	assert_int_equal(fsync(fd), 0);
	/* Read from the disk, not from what we just wrote into the page cache. */
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	for (uint64_t off = 0; off < size; off += 64 * 1024) {
		assert_int_equal(pread(fd, buf, 64 * 1024, (off_t)off), 64 * 1024);
		assert_memory_equal(buf, w, sizeof(w));
		if (memcmp(buf + sizeof(w), expect, sizeof(expect)) == 0)
			continue;
		for (size_t i = sizeof(w); i < 64 * 1024; i++)
			if (buf[i] != fill)
				fail_msg("%s: byte %" PRIu64 " is 0x%02x, expected 0x%02x", name,
				         off + i, buf[i], fill);
	}
	assert_int_equal(count_marker(fd), 0);
}

static void test_residue(void **state)
{
	struct backend *b = *state;
	const uint64_t size = 32 * MIB;
	_cleanup_free_ char *marker = malloc(MIB);
	_cleanup_close_ int d = -1;
	size_t mlen = strlen(MARKER);
	int ws = -1, img;

	NEED_BACKEND(b);
	assert_non_null(marker);
	ws = storage_workspaces_fd(b->s);
	img = storage_images_fd(b->s);
	for (size_t i = 0; i < MIB; i++)
		marker[i] = MARKER[i % mlen];

	/* A workspace full of secrets, deleted. */
	assert_int_equal(storage_create_dir(b->s, ws, "r1"), 0);
	d = open_dir_at(ws, "r1");
	{
		_cleanup_close_ int fd = openat(d, "disk.img", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		for (uint64_t off = 0; off < size; off += MIB)
			assert_int_equal(pwrite(fd, marker, MIB, (off_t)off), (ssize_t)MIB);
		assert_int_equal(fsync(fd), 0);
		assert_true(count_marker_max(fd, 1) > 0);
	}
	d = safe_close(d);
	assert_int_equal(storage_delete_dir(b->s, ws, "r1"), 0);
	assert_int_equal(syncfs(ws), 0);

	/* A base image for clones, filled with 0x11. */
	{
		_cleanup_close_ int fd =
		        openat(img, "res-base.img", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		_cleanup_free_ uint8_t *ones = malloc(MIB);
		assert_true(fd >= 0);
		memset(ones, 0x11, MIB);
		for (uint64_t off = 0; off < size; off += MIB)
			assert_int_equal(pwrite(fd, ones, MIB, (off_t)off), (ssize_t)MIB);
		assert_int_equal(fsync(fd), 0);
	}

	/* The next workspace: a sparse file, a preallocated one, a clone. */
	assert_int_equal(storage_create_dir(b->s, ws, "r2"), 0);
	d = open_dir_at(ws, "r2");
	{
		_cleanup_close_ int fd =
		        openat(d, "home.img", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, (off_t)size), 0);
	}
	probe_partial_writes(d, "home.img", size, 0);
	{
		_cleanup_close_ int fd =
		        openat(d, "prealloc.img", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		assert_int_equal(fallocate(fd, 0, 0, (off_t)size), 0);
	}
	probe_partial_writes(d, "prealloc.img", size, 0);
	{
		_cleanup_free_ char *src = fs_path_join(storage_images_path(b->s), "res-base.img");
		assert_int_equal(
		        storage_clone_file(b->s, img, "res-base.img", src, d, "disk.img", 0600), 0);
	}
	if (b->kind == STORAGE_QCOW2) {
		/* The overlay file itself holds no foreign bytes either. */
		_cleanup_close_ int fd = openat(d, "disk.img", O_RDONLY | O_CLOEXEC);
		assert_int_equal(count_marker(fd), 0);
	} else {
		probe_partial_writes(d, "disk.img", size, 0x11);
	}

	/* For information: does the raw backing store still hold the deleted bytes? */
	if (b->kind == STORAGE_POOL) {
		_cleanup_close_ int fd = openat(b->state_fd, "pool.img", O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		fprintf(stderr, "  %s: marker copies left in the raw pool.img: %u\n", b->name,
		        count_marker(fd));
	}

	d = safe_close(d);
	assert_int_equal(storage_delete_dir(b->s, ws, "r2"), 0);
	assert_int_equal(unlinkat(img, "res-base.img", 0), 0);
}

/* ---- the pool's life: create, daemon restart, reboot; and failures ---- */

static void test_pool_lifecycle(void **state)
{
	struct storage_config cfg = {.mode = STORAGE_MODE_AUTO, .pool_size = POOL_SIZE};
	_cleanup_free_ char *dir = NULL, *mnt = NULL;
	_cleanup_close_ int sfd = -1;
	struct storage *s = NULL;
	uint64_t id1, id2, id3;

	if (!fs_ext4.mounted) {
		fprintf(stderr, "skipped: no ext4 filesystem (%s)\n", fs_ext4.why);
		skip();
	}
	dir = fs_path_join(fs_ext4.mnt, "pool-life");
	mnt = fs_path_join(dir, "pool");
	assert_int_equal(mkdir(dir, 0700), 0);
	sfd = open_dir_at(AT_FDCWD, dir);

	assert_int_equal(storage_open(sfd, dir, &cfg, &s, NULL), 0);
	assert_int_equal(storage_get_kind(s), STORAGE_POOL);
	assert_int_equal(storage_create_dir(s, storage_workspaces_fd(s), "w"), 0);
	write_file(storage_workspaces_fd(s), "w/hello", "hello", 5);
	id1 = mount_id_at(sfd, "pool");
	storage_close(s);
	s = NULL;

	/* A daemon restart: the pool is still mounted and is used as it is. */
	assert_true(is_mount_root(mnt));
	assert_int_equal(storage_open(sfd, dir, &cfg, &s, NULL), 0);
	id2 = mount_id_at(sfd, "pool");
	assert_true(id1 == id2);
	assert_true(exists_at(storage_workspaces_fd(s), "w/hello"));
	storage_close(s);
	s = NULL;

	/* A reboot: nothing mounted, pool.img still there. It comes back with its contents. */
	assert_int_equal(umount2(mnt, 0), 0);
	assert_false(is_mount_root(mnt));
	assert_int_equal(storage_open(sfd, dir, &cfg, &s, NULL), 0);
	assert_true(is_mount_root(mnt));
	id3 = mount_id_at(sfd, "pool");
	assert_true(id3 != id2 || is_mount_root(mnt)); /* ids are reused: only say it is mounted */
	assert_true(exists_at(storage_workspaces_fd(s), "w/hello"));
	assert_int_equal(storage_delete_dir(s, storage_workspaces_fd(s), "w"), 0);
	storage_close(s);

	/* Something else mounted there is not mistaken for the pool. */
	assert_int_equal(umount2(mnt, 0), 0);
	assert_int_equal(mount("tmpfs", mnt, "tmpfs", 0, "size=1m"), 0);
	{
		struct slate_error err = {0};
		s = NULL;
		assert_true(storage_open(sfd, dir, &cfg, &s, &err) < 0);
		assert_null(s);
		assert_true(err.msg[0] != '\0');
		assert_non_null(strstr(err.msg, "not of a btrfs pool"));
	}
	assert_int_equal(umount2(mnt, 0), 0);
}

/* Runs storage_open() in a child with an empty /dev: no /dev/loop-control. */
static void test_pool_no_loop(void **state)
{
	struct storage_config cfg = {.mode = STORAGE_MODE_AUTO, .pool_size = POOL_SIZE};
	_cleanup_free_ char *dir = NULL;
	char msg[1024] = "";
	int p[2], status;
	ssize_t n;
	pid_t pid;

	if (!fs_ext4.mounted)
		skip();
	dir = fs_path_join(fs_ext4.mnt, "pool-noloop");
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct slate_error err = {0};
		struct storage *s = NULL;
		int fd, r;

		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("tmpfs", "/dev", "tmpfs", 0, "size=1m") < 0 ||
		    mknod("/dev/null", S_IFCHR | 0666, makedev(1, 3)) < 0)
			_exit(2);
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = storage_open(fd, dir, &cfg, &s, &err);
		(void)fs_write_all(p[1], err.msg, strlen(err.msg));
		_exit(r == -ENOENT && !s ? 0 : 1);
	}
	(void)close(p[1]);
	n = read(p[0], msg, sizeof(msg) - 1);
	(void)close(p[0]);
	msg[n > 0 ? n : 0] = '\0';
	assert_int_equal(waitpid(pid, &status, 0), pid);
	fprintf(stderr, "  no loop devices: \"%s\"\n", msg);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_non_null(strstr(msg, "/dev/loop-control"));
	assert_non_null(strstr(msg, "pool.img"));
}

static void test_pool_errors(void **state)
{
	_cleanup_free_ char *bad1 = NULL, *bad2 = NULL;
	_cleanup_close_ int fd1 = -1, fd2 = -1;
	struct storage *s = NULL;

	if (!fs_ext4.mounted)
		skip();
	/* pool.img that cannot be opened as a file. */
	bad1 = fs_path_join(fs_ext4.mnt, "pool-bad1");
	assert_int_equal(mkdir(bad1, 0700), 0);
	fd1 = open_dir_at(AT_FDCWD, bad1);
	assert_int_equal(mkdirat(fd1, "pool.img", 0700), 0);
	{
		struct storage_config cfg = {.pool_size = POOL_SIZE};
		struct slate_error err = {0};
		int r = storage_open(fd1, bad1, &cfg, &s, &err);

		assert_int_equal(r, -EISDIR);
		assert_null(s);
		assert_true(err.msg[0] != '\0');
		fprintf(stderr, "  pool.img a directory: \"%s\"\n", err.msg);
		assert_non_null(strstr(err.msg, "pool.img"));
	}

	/* A pool too small for mkfs.btrfs: the message says so, nothing is left behind. */
	bad2 = fs_path_join(fs_ext4.mnt, "pool-bad2");
	assert_int_equal(mkdir(bad2, 0700), 0);
	fd2 = open_dir_at(AT_FDCWD, bad2);
	{
		struct storage_config cfg = {.mode = STORAGE_MODE_POOL, .pool_size = 8 * MIB};
		struct slate_error err = {0};
		int r = storage_open(fd2, bad2, &cfg, &s, &err);

		assert_true(r < 0);
		assert_null(s);
		assert_true(err.msg[0] != '\0');
		fprintf(stderr, "  pool too small: \"%s\"\n", err.msg);
		assert_non_null(strstr(err.msg, "mkfs.btrfs"));
		assert_false(exists_at(fd2, "pool.img"));
		assert_false(exists_at(fd2, ".pool.img.tmp"));
	}

	/* The path must name the fd. */
	{
		struct storage_config cfg = {.mode = STORAGE_MODE_QCOW2};
		struct slate_error err = {0};
		assert_int_equal(storage_open(fd1, bad2, &cfg, &s, &err), -EINVAL);
		assert_true(err.msg[0] != '\0');
	}
	assert_int_equal(storage_open(-1, bad1, NULL, &s, NULL), -EBADF);
	assert_int_equal(storage_open(fd1, NULL, NULL, &s, NULL), -EINVAL);
	assert_null(s);
}

/* ---- timings (SLATE_STORAGE_BENCH=1) ---- */

static double now(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bench_one(struct backend *b)
{
	_cleanup_free_ char *src = NULL, *dst = NULL;
	unsigned ranges[2 * 256];
	double t0, t_clone, t_cp;
	int img = storage_images_fd(b->s), ws = storage_workspaces_fd(b->s);

	/* 4 GiB logical, 1 GiB of data: 4 MiB every 16 MiB. */
	for (unsigned i = 0; i < 256; i++) {
		ranges[2 * i] = i * 16;
		ranges[2 * i + 1] = i * 16 + 4;
	}
	make_patterned(img, "bench.img", 4 * GIB, ranges, ELEMENTSOF(ranges), 3);
	src = fs_path_join(storage_images_path(b->s), "bench.img");
	dst = fs_path_join(storage_workspaces_path(b->s), "bench-cp.img");
	assert_int_equal(syncfs(img), 0);

	t0 = now();
	assert_int_equal(
	        storage_clone_file(b->s, img, "bench.img", src, ws, "bench-clone.img", 0600), 0);
	assert_int_equal(syncfs(ws), 0);
	t_clone = now() - t0;

	t0 = now();
	{
		const char *argv[] = {"cp", "--sparse=always", "--reflink=never", src, dst, NULL};
		assert_int_equal(run(argv, NULL), 0);
	}
	assert_int_equal(syncfs(ws), 0);
	t_cp = now() - t0;
	fprintf(stderr,
	        "  %-8s 4 GiB file, 1 GiB data: storage_clone_file %.4f s, cp --sparse=always "
	        "%.2f s (%.0fx)\n",
	        b->name, t_clone, t_cp, t_cp / (t_clone > 0 ? t_clone : 1e-6));
	assert_int_equal(unlinkat(ws, "bench-clone.img", 0), 0);
	assert_int_equal(unlinkat(ws, "bench-cp.img", 0), 0);
	assert_int_equal(unlinkat(img, "bench.img", 0), 0);
}

static void test_bench(void **state)
{
	struct backend *b = *state;

	NEED_BACKEND(b);
	bench_one(b);
}

#define PER_BACKEND(i)                                                                             \
	cmocka_unit_test_prestate_setup_teardown(test_kind, backend_setup, backend_teardown,       \
	                                         &backends[i]),                                    \
	        cmocka_unit_test_prestate_setup_teardown(test_dirs, backend_setup,                 \
	                                                 backend_teardown, &backends[i]),          \
	        cmocka_unit_test_prestate_setup_teardown(test_delete_tree, backend_setup,          \
	                                                 backend_teardown, &backends[i]),          \
	        cmocka_unit_test_prestate_setup_teardown(test_clone, backend_setup,                \
	                                                 backend_teardown, &backends[i]),          \
	        cmocka_unit_test_prestate_setup_teardown(test_usage, backend_setup,                \
	                                                 backend_teardown, &backends[i]),          \
	        cmocka_unit_test_prestate_setup_teardown(test_residue, backend_setup,              \
	                                                 backend_teardown, &backends[i])

int main(void)
{
	const struct CMUnitTest tests[] = {
	        PER_BACKEND(0),
	        PER_BACKEND(1),
	        PER_BACKEND(2),
	        PER_BACKEND(3),
	        PER_BACKEND(4),
	        cmocka_unit_test(test_pool_lifecycle),
	        cmocka_unit_test(test_pool_no_loop),
	        cmocka_unit_test(test_pool_errors),
	};
	const struct CMUnitTest bench[] = {
	        cmocka_unit_test_prestate_setup_teardown(test_bench, backend_setup,
	                                                 backend_teardown, &backends[0]),
	        cmocka_unit_test_prestate_setup_teardown(test_bench, backend_setup,
	                                                 backend_teardown, &backends[1]),
	};
	const char *e = getenv("SLATE_STORAGE_BENCH");
	int fails;

	log_open("test-storage", LOG_TARGET_STDERR);
	if (getenv("SLATE_DEBUG"))
		log_set_max_level(LOG_DEBUG);
	if (geteuid() != 0) {
		printf("SKIP: the storage tests need root (loop devices, mount)\n");
		return 77;
	}
	if (access("/dev/loop-control", F_OK) < 0) {
		printf("SKIP: no /dev/loop-control (no loop devices here)\n");
		return 77;
	}
	atexit(cleanup_all);
	(void)signal(SIGINT, on_signal);
	(void)signal(SIGTERM, on_signal);
	(void)signal(SIGHUP, on_signal);
	(void)signal(SIGPIPE, on_signal);
	/* Every mount made here dies with this process, even on a crash. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fprintf(stderr, "no private mount namespace (%s): relying on the teardown\n",
		        strerror(errno));
	fails = fixtures_setup();
	if (fails != 0) {
		cleanup_all();
		return fails;
	}
	if (e && streq(e, "1"))
		fails = cmocka_run_group_tests_name("bench", bench, NULL, group_teardown);
	else
		fails = cmocka_run_group_tests_name("storage", tests, NULL, group_teardown);
	return fails ? 1 : 0;
}

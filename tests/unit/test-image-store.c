/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The image store on a real loop-mounted btrfs made in the fixture: imports from the same
 * filesystem (reflink) and from another one (sparse copy, holes kept), hashes checked against
 * an independent sha256-1m (python3's hashlib; doc/catalog.md), read-only files, duplicates, replacement, the sweep, the staging API the catalog
 * uses. Needs root (mount); skipped (77) otherwise. Runs in a private mount namespace so nothing
 * stays mounted even after a crash.
 *
 * SLATE_STORAGE_BENCH=1 times the import of a 4 GiB image holding 1 GiB of data, by reflink
 * and by sparse copy, against sha256sum alone.
 */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "image/store.h"
#include "image/verify.h"
#include "storage/loop.h"
#include "storage/spawn.h"
#include "storage/storage.h"
#include "util/fs.h"
#include "util/log.h"

#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

static char base_dir[200];   /* on $TMPDIR: another filesystem than the store */
static char img_path[256];   /* the btrfs image */
static char mnt_path[256];   /* where it is mounted */
static char state_path[300]; /* the state directory on it */
static bool mounted;
static struct storage *store;
static int src_fd = -1;   /* <mnt>/src: sources on the store's filesystem */
static int other_fd = -1; /* base_dir: sources on another filesystem */

static void cleanup_all(void)
{
	storage_close(store);
	store = NULL;
	src_fd = safe_close(src_fd);
	other_fd = safe_close(other_fd);
	if (mounted) {
		if (umount2(mnt_path, 0) < 0)
			(void)umount2(mnt_path, MNT_DETACH);
		mounted = false;
	}
	if (mnt_path[0])
		(void)rmdir(mnt_path);
	if (img_path[0])
		(void)unlink(img_path);
	if (base_dir[0]) {
		DIR *d = opendir(base_dir);
		struct dirent *de;

		/* Only the flat source files the tests made. */
		while (d && (de = readdir(d)))
			if (de->d_name[0] != '.')
				(void)unlinkat(dirfd(d), de->d_name, 0);
		if (d)
			(void)closedir(d);
		(void)rmdir(base_dir);
	}
	mnt_path[0] = img_path[0] = base_dir[0] = '\0';
}

static void on_signal(int sig)
{
	cleanup_all();
	(void)signal(sig, SIG_DFL);
	(void)raise(sig);
}

static int group_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	_cleanup_close_ int fd = -1, loop = -1, sfd = -1;
	_cleanup_free_ char *dev = NULL, *out = NULL;
	struct slate_error err = {0};
	const char *argv[] = {"mkfs.btrfs", "-q", img_path, NULL};
	int r;

	(void)snprintf(base_dir, sizeof(base_dir), "%.160s/test-image-store.XXXXXX",
	               tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base_dir))
		return -1;
	(void)snprintf(img_path, sizeof(img_path), "%s.btrfs.img", base_dir);
	(void)snprintf(mnt_path, sizeof(mnt_path), "%s.mnt", base_dir);
	fd = open(img_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)(8 * GIB)) < 0)
		return -1;
	r = spawn_run(argv, &out);
	if (r < 0) {
		fprintf(stderr, "mkfs.btrfs: %s\n", out ? out : strerror(-r));
		return -1;
	}
	if (mkdir(mnt_path, 0755) < 0 || loop_attach(fd, img_path, 0, &loop, &dev) < 0 ||
	    mount(dev, mnt_path, "btrfs", 0, NULL) < 0)
		return -1;
	mounted = true;

	(void)snprintf(state_path, sizeof(state_path), "%s/state", mnt_path);
	if (mkdir(state_path, 0700) < 0)
		return -1;
	sfd = open(state_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0 || storage_open(sfd, state_path, NULL, &store, &err) < 0) {
		fprintf(stderr, "storage_open: %s\n", slate_error_text(&err));
		return -1;
	}
	src_fd = openat(AT_FDCWD, mnt_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (src_fd < 0 || mkdirat(src_fd, "src", 0700) < 0)
		return -1;
	(void)close(src_fd);
	src_fd = openat(AT_FDCWD, mnt_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	{
		int s = openat(src_fd, "src", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		(void)close(src_fd);
		src_fd = s;
	}
	other_fd = open(base_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return src_fd >= 0 && other_fd >= 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	cleanup_all();
	return 0;
}

/* ---- helpers ---- */

static char *src_path(const char *name)
{
	char *p = NULL;

	assert_true(asprintf(&p, "%s/src/%s", mnt_path, name) > 0);
	return p;
}

static char *other_path(const char *name)
{
	return fs_path_join(base_dir, name);
}

/* A file of size bytes: pseudo-random data in the [a, b) MiB ranges, explicit zeros written in
 * the zeros[] MiB ranges (data to the filesystem, holes to a sparse copy), holes elsewhere. */
static void make_image(int dir_fd, const char *name, uint64_t size, const unsigned *data,
                       size_t n_data, const unsigned *zeros, size_t n_zeros, uint32_t seed)
{
	_cleanup_close_ int fd =
	        openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	_cleanup_free_ uint32_t *buf = malloc(MIB);

	assert_true(fd >= 0);
	assert_non_null(buf);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	for (size_t i = 0; i + 1 < n_data; i += 2)
		for (unsigned m = data[i]; m < data[i + 1]; m++) {
			uint32_t x = seed ^ (m * 2654435761u) ^ 0x9e3779b9u;
			for (size_t j = 0; j < MIB / 4; j++) {
				x ^= x << 13;
				x ^= x >> 17;
				x ^= x << 5;
				buf[j] = x;
			}
			assert_int_equal(pwrite(fd, buf, MIB, (off_t)m * (off_t)MIB), (ssize_t)MIB);
		}
	memset(buf, 0, MIB);
	for (size_t i = 0; i + 1 < n_zeros; i += 2)
		for (unsigned m = zeros[i]; m < zeros[i + 1]; m++)
			assert_int_equal(pwrite(fd, buf, MIB, (off_t)m * (off_t)MIB), (ssize_t)MIB);
	assert_int_equal(fsync(fd), 0);
}

static void sha256sum(const char *path, char out[65])
{
	const char *argv[] = {"sha256sum", path, NULL};
	_cleanup_free_ char *o = NULL;

	assert_int_equal(spawn_run(argv, &o), 0);
	assert_non_null(o);
	assert_true(strlen(o) > 64);
	memcpy(out, o, 64);
	out[64] = '\0';
}

#define DIGEST_LEN (VERIFY_DIGEST_STRLEN + 1)

/* sha256-1m as doc/catalog.md defines it, computed by python3 reading every byte. */
static void digest_ref(const char *path, char out[DIGEST_LEN])
{
	static const char prog[] =
	        "import hashlib,struct,sys\n"
	        "f=open(sys.argv[1],'rb'); n=0; hs=[]\n"
	        "while True:\n"
	        "    b=f.read(1<<20)\n"
	        "    if not b: break\n"
	        "    n+=len(b); hs.append(hashlib.sha256(b).digest())\n"
	        "o=hashlib.sha256(b'slate-sha256-1m\\0'+struct.pack('<Q',n)+b''.join(hs))\n"
	        "print('sha256-1m:'+o.hexdigest())\n";
	const char *argv[] = {"python3", "-c", prog, path, NULL};
	_cleanup_free_ char *o = NULL;

	assert_int_equal(spawn_run(argv, &o), 0);
	assert_non_null(o);
	assert_true(strlen(o) >= VERIFY_DIGEST_STRLEN);
	memcpy(out, o, VERIFY_DIGEST_STRLEN);
	out[VERIFY_DIGEST_STRLEN] = '\0';
	assert_true(verify_digest_string_ok(out));
}

static bool exists_at(int dir_fd, const char *name)
{
	struct stat st;

	return fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static unsigned mode_at(int dir_fd, const char *name)
{
	struct stat st;

	assert_int_equal(fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW), 0);
	return st.st_mode & 07777;
}

/* No .tmp-* or .del-* left in images/. */
static unsigned leftovers(void)
{
	_cleanup_close_ int fd =
	        openat(storage_images_fd(store), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fdopendir(fd);
	struct dirent *de;
	unsigned n = 0;

	assert_non_null(d);
	fd = -1;
	while ((de = readdir(d)))
		if (strneq(de->d_name, ".tmp-", 5) || strneq(de->d_name, ".del-", 5))
			n++;
	(void)closedir(d);
	return n;
}

static bool files_equal(const char *a, int b_dir, const char *b)
{
	_cleanup_close_ int fa = open(a, O_RDONLY | O_CLOEXEC),
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

struct progress {
	unsigned calls;
	uint64_t last_done, total;
	bool monotonic;
};

static void on_progress(uint64_t done, uint64_t total, void *ud)
{
	struct progress *p = ud;

	if (done < p->last_done)
		p->monotonic = false;
	p->calls++;
	p->last_done = done;
	p->total = total;
}

static void remove_image(const char *id)
{
	assert_int_equal(image_store_remove(store, id), 0);
}

/* ---- tests ---- */

static void test_id_check(void **state)
{
	static const char *const good[] = {
	        "a",
	        "0",
	        "debian-12",
	        "debian-12.5",
	        "ubuntu_24.04",
	        "a.b-c_d",
	        "0123456789012345678901234567890123456789012345678901234567890123", /* 64 */
	};
	static const char *const bad[] = {
	        "",
	        ".",
	        "..",
	        ".hidden",
	        "-dash",
	        "_under",
	        "Debian",
	        "a..b",
	        "a/b",
	        "a b",
	        "é",
	        "tab\t",
	        "01234567890123456789012345678901234567890123456789012345678901234", /* 65 */
	};

	for (size_t i = 0; i < ELEMENTSOF(good); i++)
		if (image_id_check(good[i]) != 0)
			fail_msg("refused good id \"%s\"", good[i]);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++)
		if (image_id_check(bad[i]) != -EINVAL)
			fail_msg("accepted bad id \"%s\"", bad[i]);
	assert_int_equal(image_id_check(NULL), -EINVAL);

	/* Every entry point refuses them before touching the filesystem. */
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		struct image_info *info = NULL;
		int fd = -1;
		char *name = NULL;

		assert_int_equal(image_store_import(store, bad[i], "/nonexistent", NULL, NULL, NULL,
		                                    false, NULL, NULL, &info),
		                 -EINVAL);
		assert_int_equal(image_store_get(store, bad[i], &info), -EINVAL);
		assert_int_equal(image_store_open_dir(store, bad[i], &fd), -EINVAL);
		assert_int_equal(image_store_remove(store, bad[i]), -EINVAL);
		assert_int_equal(image_store_stage_dir(store, bad[i], &fd, &name), -EINVAL);
		assert_null(info);
		assert_null(name);
	}
	assert_int_equal(leftovers(), 0);
}

/* Same filesystem: the disk is a reflink of the source, hashed by reading it. */
static void test_import_reflink(void **state)
{
	static const unsigned data[] = {0, 4, 20, 24, 60, 64};
	_cleanup_(image_info_freep) struct image_info *info = NULL, *got = NULL;
	_cleanup_free_ char *src = src_path("same.raw");
	_cleanup_close_ int dir = -1;
	struct progress p = {.monotonic = true};
	struct storage_usage u;
	char sum[DIGEST_LEN];

	make_image(src_fd, "same.raw", 64 * MIB, data, ELEMENTSOF(data), NULL, 0, 1);
	digest_ref(src, sum);
	assert_int_equal(image_store_import(store, "same", src, NULL, NULL, "console=ttyS0", false,
	                                    on_progress, &p, &info),
	                 0);
	assert_string_equal(info->id, "same");
	assert_int_equal(info->version, 1);
	assert_true(info->local);
	assert_string_equal(info->sha256, sum);
	assert_int_equal(info->size, 64 * MIB);
	assert_false(info->kernel_boot);
	assert_null(info->cmdline); /* a command line without a kernel means nothing */
	assert_true(info->installed > 0);

	/* Progress: several calls, in order, the last one at the end. */
	assert_true(p.calls >= 4);
	assert_true(p.monotonic);
	assert_int_equal(p.last_done, 64 * MIB);
	assert_int_equal(p.total, 64 * MIB);

	assert_int_equal(image_store_open_dir(store, "same", &dir), 0);
	assert_int_equal(storage_file_usage(dir, "disk.img", &u), 0);
	assert_true(u.shared >= 12 * MIB); /* every data extent is the source's */
	assert_true(files_equal(src, dir, "disk.img"));

	/* Read-only, durable metadata that reads back the same. */
	assert_int_equal(mode_at(dir, "disk.img"), 0444);
	assert_int_equal(mode_at(dir, "image.json"), 0444);
	assert_int_equal(mode_at(storage_images_fd(store), "same"), 0755);
	assert_false(exists_at(dir, "vmlinuz"));
	assert_int_equal(image_store_get(store, "same", &got), 0);
	assert_string_equal(got->sha256, sum);
	assert_int_equal(got->version, 1);
	assert_int_equal(got->size, 64 * MIB);
	assert_true(got->local);
	assert_int_equal(got->installed, info->installed);
	assert_int_equal(leftovers(), 0);

	dir = safe_close(dir);
	remove_image("same");
	assert_int_equal(unlinkat(src_fd, "same.raw", 0), 0);
}

/* Another filesystem: a sparse copy; holes and written zeros both end up as holes. */
static void test_import_copy(void **state)
{
	static const unsigned data[] = {0, 2, 100, 104, 255, 256};
	static const unsigned zeros[] = {10, 30}; /* 20 MiB of zeros written out */
	_cleanup_(image_info_freep) struct image_info *info = NULL;
	_cleanup_free_ char *src = other_path("other.raw");
	_cleanup_close_ int dir = -1;
	struct progress p = {.monotonic = true};
	struct storage_usage u;
	struct stat st;
	char sum[DIGEST_LEN];

	make_image(other_fd, "other.raw", 256 * MIB, data, ELEMENTSOF(data), zeros,
	           ELEMENTSOF(zeros), 2);
	assert_int_equal(fstatat(other_fd, "other.raw", &st, 0), 0);
	assert_true((uint64_t)st.st_blocks * 512 >= 27 * MIB); /* the source is not that sparse */
	digest_ref(src, sum);

	assert_int_equal(image_store_import(store, "other", src, NULL, NULL, NULL, false,
	                                    on_progress, &p, &info),
	                 0);
	assert_string_equal(info->sha256, sum);
	assert_int_equal(info->size, 256 * MIB);
	assert_int_equal(p.last_done, 256 * MIB);
	assert_true(p.monotonic);

	assert_int_equal(image_store_open_dir(store, "other", &dir), 0);
	assert_int_equal(storage_file_usage(dir, "disk.img", &u), 0);
	assert_int_equal(u.logical, 256 * MIB);
	/* 7 MiB of data: physical << logical, and the written zeros were not copied. */
	assert_true(u.physical >= 7 * MIB);
	assert_true(u.physical <= 8 * MIB);
	assert_int_equal(u.shared, 0);
	assert_true(files_equal(src, dir, "disk.img"));
	{
		char again[DIGEST_LEN];
		_cleanup_free_ char *installed = NULL;

		assert_true(asprintf(&installed, "%s/other/disk.img", storage_images_path(store)) >
		            0);
		digest_ref(installed, again);
		assert_string_equal(again, sum);
	}
	dir = safe_close(dir);
	remove_image("other");
	assert_int_equal(unlinkat(other_fd, "other.raw", 0), 0);
}

static void test_import_kernel(void **state)
{
	static const unsigned data[] = {0, 1};
	_cleanup_(image_info_freep) struct image_info *info = NULL;
	_cleanup_free_ char *disk = other_path("k.raw"), *kernel = other_path("vmlinuz-x"),
	                    *initrd = other_path("initrd-x");
	_cleanup_close_ int dir = -1;
	_cleanup_close_ int k = openat(other_fd, "vmlinuz-x", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	_cleanup_close_ int i = openat(other_fd, "initrd-x", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	make_image(other_fd, "k.raw", 8 * MIB, data, ELEMENTSOF(data), NULL, 0, 3);
	assert_true(k >= 0 && i >= 0);
	assert_int_equal(fs_write_all(k, "MZkernel", 8), 0);
	assert_int_equal(fs_write_all(i, "initrd", 6), 0);

	/* Both or neither. */
	assert_int_equal(
	        image_store_import(store, "k", disk, kernel, NULL, NULL, false, NULL, NULL, &info),
	        -EINVAL);
	assert_int_equal(
	        image_store_import(store, "k", disk, NULL, initrd, NULL, false, NULL, NULL, &info),
	        -EINVAL);
	assert_null(info);
	assert_int_equal(image_store_get(store, "k", &info), -ENOENT);

	assert_int_equal(image_store_import(store, "k", disk, kernel, initrd,
	                                    "console=ttyS0 root=/dev/vda", false, NULL, NULL,
	                                    &info),
	                 0);
	assert_true(info->kernel_boot);
	assert_string_equal(info->cmdline, "console=ttyS0 root=/dev/vda");
	assert_int_equal(image_store_open_dir(store, "k", &dir), 0);
	assert_int_equal(mode_at(dir, "vmlinuz"), 0444);
	assert_int_equal(mode_at(dir, "initrd.img"), 0444);
	assert_true(files_equal(kernel, dir, "vmlinuz"));
	assert_true(files_equal(initrd, dir, "initrd.img"));
	{
		_cleanup_(image_info_freep) struct image_info *got = NULL;
		assert_int_equal(image_store_get(store, "k", &got), 0);
		assert_true(got->kernel_boot);
		assert_string_equal(got->cmdline, "console=ttyS0 root=/dev/vda");
	}
	assert_int_equal(leftovers(), 0);
	dir = safe_close(dir);
	remove_image("k");
	(void)unlinkat(other_fd, "k.raw", 0);
	(void)unlinkat(other_fd, "vmlinuz-x", 0);
	(void)unlinkat(other_fd, "initrd-x", 0);
}

/* A second import of an id is refused; a replacement bumps the version, atomically. */
static void test_duplicate_and_replace(void **state)
{
	static const unsigned data1[] = {0, 2};
	static const unsigned data2[] = {1, 3};
	_cleanup_(image_info_freep) struct image_info *v1 = NULL, *v2 = NULL, *v3 = NULL,
	                                              *none = NULL;
	_cleanup_free_ char *a = other_path("a.raw"), *b = other_path("b.raw");
	_cleanup_close_ int old_dir = -1, ws = -1;
	char sum_a[DIGEST_LEN], sum_b[DIGEST_LEN];

	make_image(other_fd, "a.raw", 4 * MIB, data1, ELEMENTSOF(data1), NULL, 0, 10);
	make_image(other_fd, "b.raw", 4 * MIB, data2, ELEMENTSOF(data2), NULL, 0, 11);
	digest_ref(a, sum_a);
	digest_ref(b, sum_b);

	assert_int_equal(
	        image_store_import(store, "dup", a, NULL, NULL, NULL, false, NULL, NULL, &v1), 0);
	assert_int_equal(v1->version, 1);
	assert_int_equal(
	        image_store_import(store, "dup", b, NULL, NULL, NULL, false, NULL, NULL, &none),
	        -EEXIST);
	assert_null(none);
	assert_int_equal(leftovers(), 0);

	/* A workspace cloned from version 1 keeps its bytes when the base is replaced. */
	ws = storage_workspaces_fd(store);
	assert_int_equal(image_store_open_dir(store, "dup", &old_dir), 0);
	assert_int_equal(
	        storage_clone_file(store, old_dir, "disk.img", NULL, ws, "dup-ws.img", 0600), 0);

	assert_int_equal(
	        image_store_import(store, "dup", b, NULL, NULL, NULL, true, NULL, NULL, &v2), 0);
	assert_int_equal(v2->version, 2);
	assert_string_equal(v2->sha256, sum_b);
	assert_int_equal(
	        image_store_import(store, "dup", a, NULL, NULL, NULL, true, NULL, NULL, &v3), 0);
	assert_int_equal(v3->version, 3);
	assert_string_equal(v3->sha256, sum_a);
	assert_int_equal(leftovers(), 0);
	assert_true(files_equal(a, ws, "dup-ws.img"));
	{
		_cleanup_close_ int d = -1;
		assert_int_equal(image_store_open_dir(store, "dup", &d), 0);
		assert_true(files_equal(a, d, "disk.img"));
	}
	assert_int_equal(unlinkat(ws, "dup-ws.img", 0), 0);
	remove_image("dup");
	(void)unlinkat(other_fd, "a.raw", 0);
	(void)unlinkat(other_fd, "b.raw", 0);
}

static void make_leftover(const char *name)
{
	int images = storage_images_fd(store);
	_cleanup_close_ int d = -1;

	assert_int_equal(mkdirat(images, name, 0700), 0);
	d = openat(images, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(d >= 0);
	{
		_cleanup_close_ int f = openat(d, "disk.img", O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
		assert_true(f >= 0);
		assert_int_equal(ftruncate(f, 1 << 20), 0);
	}
	assert_int_equal(mkdirat(d, "sub", 0700), 0);
}

static void test_sweep(void **state)
{
	static const unsigned data[] = {0, 1};
	int images = storage_images_fd(store);
	_cleanup_(image_info_freep) struct image_info *info = NULL;
	_cleanup_free_ char *src = other_path("keep.raw"), *staged = NULL;
	_cleanup_close_ int busy = -1;

	make_image(other_fd, "keep.raw", 2 * MIB, data, ELEMENTSOF(data), NULL, 0, 4);
	assert_int_equal(
	        image_store_import(store, "keep", src, NULL, NULL, NULL, false, NULL, NULL, &info),
	        0);
	make_leftover(".tmp-keep-aaaaaa");
	make_leftover(".del-gone-bbbbbb");
	{
		_cleanup_close_ int f =
		        openat(images, ".tmp-file-cccccc", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		assert_true(f >= 0);
	}
	/* An install in progress (its staging dir held open) is left alone. */
	assert_int_equal(image_store_stage_dir(store, "busy", &busy, &staged), 0);
	assert_true(strneq(staged, ".tmp-busy-", 10));
	assert_int_equal(leftovers(), 4);

	assert_int_equal(image_store_sweep(store), 3);
	assert_int_equal(leftovers(), 1);
	assert_true(exists_at(images, staged));
	assert_true(exists_at(images, "keep/disk.img"));
	assert_true(exists_at(images, ".lock") || true);
	assert_int_equal(image_store_sweep(store), 0);

	/* Once its owner is gone (a crash), the sweep takes it. */
	busy = safe_close(busy);
	assert_int_equal(image_store_sweep(store), 1);
	assert_int_equal(leftovers(), 0);

	remove_image("keep");
	(void)unlinkat(other_fd, "keep.raw", 0);
}

static void test_list_and_remove(void **state)
{
	static const unsigned data[] = {0, 1};
	static const char *const ids[] = {"zeta", "alpha", "mid.1"};
	_cleanup_free_ char *src = other_path("l.raw");
	struct image_info **list = NULL;
	size_t n = 0;
	int fd = -1;

	make_image(other_fd, "l.raw", MIB, data, ELEMENTSOF(data), NULL, 0, 5);
	for (size_t i = 0; i < ELEMENTSOF(ids); i++)
		assert_int_equal(image_store_import(store, ids[i], src, NULL, NULL, NULL, false,
		                                    NULL, NULL, NULL),
		                 0);
	/* Junk in images/ is not an image. */
	assert_int_equal(mkdirat(storage_images_fd(store), "NotAnId", 0700), 0);
	assert_int_equal(mkdirat(storage_images_fd(store), "no-json", 0700), 0);

	assert_int_equal(image_store_list(store, &list, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(list[0]->id, "alpha");
	assert_string_equal(list[1]->id, "mid.1");
	assert_string_equal(list[2]->id, "zeta");
	image_info_list_free(list, n);

	assert_int_equal(image_store_remove(store, "mid.1"), 0);
	assert_int_equal(image_store_remove(store, "mid.1"), -ENOENT);
	assert_int_equal(image_store_open_dir(store, "mid.1", &fd), -ENOENT);
	{
		struct image_info *i = NULL;
		assert_int_equal(image_store_get(store, "mid.1", &i), -ENOENT);
		assert_null(i);
	}
	assert_int_equal(image_store_list(store, &list, &n), 0);
	assert_int_equal(n, 2);
	image_info_list_free(list, n);
	assert_int_equal(leftovers(), 0);

	remove_image("alpha");
	remove_image("zeta");
	assert_int_equal(unlinkat(storage_images_fd(store), "NotAnId", AT_REMOVEDIR), 0);
	assert_int_equal(unlinkat(storage_images_fd(store), "no-json", AT_REMOVEDIR), 0);
	assert_int_equal(image_store_list(store, &list, &n), 0);
	assert_int_equal(n, 0);
	image_info_list_free(list, n);
	(void)unlinkat(other_fd, "l.raw", 0);
}

/* The catalog's way in: stage, write the files, install with the verified metadata. */
static void test_stage_and_install(void **state)
{
	static const char sha[] =
	        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	_cleanup_(image_info_freep) struct image_info *got = NULL, *ret = NULL;
	_cleanup_free_ char *name = NULL, *name2 = NULL, *name3 = NULL;
	_cleanup_close_ int d = -1, d2 = -1, d3 = -1;
	struct image_info info = {
	        .id = (char *)"cat",
	        .sha256 = (char *)sha,
	        .description = (char *)"Debian 12 from the catalog",
	        .cmdline = (char *)"ignored without a kernel",
	};

	assert_int_equal(image_store_stage_dir(store, "cat", &d, &name), 0);
	{
		_cleanup_close_ int f = openat(d, "disk.img", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		assert_true(f >= 0);
		assert_int_equal(ftruncate(f, 16 * MIB), 0);
	}
	assert_int_equal(image_store_install_dir(store, name, &info, false, &ret), 0);
	assert_int_equal(ret->version, 1);
	assert_false(ret->local);
	assert_int_equal(ret->size, 16 * MIB);
	assert_null(ret->cmdline);
	assert_int_equal(image_store_get(store, "cat", &got), 0);
	assert_string_equal(got->description, "Debian 12 from the catalog");
	assert_string_equal(got->sha256, sha);
	assert_false(got->local);
	assert_false(exists_at(storage_images_fd(store), name));

	/* Missing disk.img: refused, staging gone. */
	assert_int_equal(image_store_stage_dir(store, "cat2", &d2, &name2), 0);
	assert_int_equal(image_store_install_dir(store, name2, &info, false, NULL), -ENOENT);
	assert_false(exists_at(storage_images_fd(store), name2));
	/* A kernel without an initrd, and a bad hash: refused. */
	assert_int_equal(image_store_stage_dir(store, "cat3", &d3, &name3), 0);
	{
		_cleanup_close_ int f =
		        openat(d3, "disk.img", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		_cleanup_close_ int k = openat(d3, "vmlinuz", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		assert_true(f >= 0 && k >= 0);
		assert_int_equal(ftruncate(f, MIB), 0);
	}
	info.id = (char *)"cat3";
	assert_int_equal(image_store_install_dir(store, name3, &info, false, NULL), -EINVAL);
	assert_false(exists_at(storage_images_fd(store), name3));
	assert_int_equal(image_store_get(store, "cat3", &got), -ENOENT);
	info.sha256 = (char *)"not-a-hash";
	assert_int_equal(image_store_install_dir(store, ".tmp-cat3-xxxxxx", &info, false, NULL),
	                 -EINVAL);
	assert_int_equal(image_store_install_dir(store, "cat", &info, false, NULL), -EINVAL);
	assert_int_equal(image_store_abort_dir(store, "keep"), -EINVAL);
	assert_int_equal(leftovers(), 0);
	remove_image("cat");
}

/* A sha256-1m digest goes to image.json as "digest" (a plain SHA-256 as "sha256", above). */
static void test_install_digest(void **state)
{
	static const char digest[] =
	        "sha256-1m:"
	        "30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58";
	_cleanup_(image_info_freep) struct image_info *got = NULL;
	_cleanup_free_ char *name = NULL;
	_cleanup_close_ int d = -1, dfd = -1;
	_cleanup_buf_ struct buf *json = NULL;
	struct image_info info = {.id = (char *)"dig", .sha256 = (char *)digest};

	assert_int_equal(image_store_stage_dir(store, "dig", &d, &name), 0);
	{
		_cleanup_close_ int f = openat(d, "disk.img", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		assert_true(f >= 0);
		assert_int_equal(ftruncate(f, MIB), 0);
	}
	assert_int_equal(image_store_install_dir(store, name, &info, false, NULL), 0);
	assert_int_equal(image_store_get(store, "dig", &got), 0);
	assert_string_equal(got->sha256, digest);
	assert_int_equal(image_store_open_dir(store, "dig", &dfd), 0);
	assert_int_equal(fs_read_file_at(dfd, "image.json", 65536, &json), 0);
	assert_non_null(memmem(buf_ptr(json), buf_len(json), "\"digest\"", 8));
	assert_null(memmem(buf_ptr(json), buf_len(json), "\"sha256\"", 8));
	remove_image("dig");
}

static void test_import_errors(void **state)
{
	_cleanup_free_ char *missing = other_path("missing.raw"), *empty = other_path("empty.raw");
	struct image_info *info = NULL;
	_cleanup_close_ int e = openat(other_fd, "empty.raw", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	assert_true(e >= 0);
	assert_int_equal(
	        image_store_import(store, "e", missing, NULL, NULL, NULL, false, NULL, NULL, &info),
	        -ENOENT);
	assert_int_equal(image_store_import(store, "e", base_dir, NULL, NULL, NULL, false, NULL,
	                                    NULL, &info),
	                 -EISDIR);
	assert_int_equal(
	        image_store_import(store, "e", empty, NULL, NULL, NULL, false, NULL, NULL, &info),
	        -EINVAL);
	assert_int_equal(image_store_import(store, "e", "/dev/null", NULL, NULL, NULL, false, NULL,
	                                    NULL, &info),
	                 -EINVAL);
	assert_int_equal(
	        image_store_import(store, "e", NULL, NULL, NULL, NULL, false, NULL, NULL, &info),
	        -EINVAL);
	assert_null(info);
	assert_int_equal(image_store_get(store, "e", &info), -ENOENT);
	assert_int_equal(leftovers(), 0);
	(void)unlinkat(other_fd, "empty.raw", 0);
}

/* ---- timings ---- */

static double now(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_bench(void **state)
{
	unsigned ranges[2 * 256];
	_cleanup_free_ char *same = src_path("bench.raw"), *other = other_path("bench.raw");
	char sum[65];
	double t0, t_same, t_other, t_sum;

	for (unsigned i = 0; i < 256; i++) {
		ranges[2 * i] = i * 16;
		ranges[2 * i + 1] = i * 16 + 4;
	}
	make_image(src_fd, "bench.raw", 4 * GIB, ranges, ELEMENTSOF(ranges), NULL, 0, 9);
	make_image(other_fd, "bench.raw", 4 * GIB, ranges, ELEMENTSOF(ranges), NULL, 0, 9);

	t0 = now();
	sha256sum(other, sum);
	t_sum = now() - t0;
	t0 = now();
	assert_int_equal(image_store_import(store, "bench-same", same, NULL, NULL, NULL, false,
	                                    NULL, NULL, NULL),
	                 0);
	t_same = now() - t0;
	t0 = now();
	assert_int_equal(image_store_import(store, "bench-other", other, NULL, NULL, NULL, false,
	                                    NULL, NULL, NULL),
	                 0);
	t_other = now() - t0;
	fprintf(stderr,
	        "  import of a 4 GiB image with 1 GiB data: same fs (reflink + hash) %.2f s, other "
	        "fs (sparse copy + hash) %.2f s; sha256sum alone %.2f s\n",
	        t_same, t_other, t_sum);
	remove_image("bench-same");
	remove_image("bench-other");
	(void)unlinkat(src_fd, "bench.raw", 0);
	(void)unlinkat(other_fd, "bench.raw", 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_id_check),
	        cmocka_unit_test(test_import_reflink),
	        cmocka_unit_test(test_import_copy),
	        cmocka_unit_test(test_import_kernel),
	        cmocka_unit_test(test_duplicate_and_replace),
	        cmocka_unit_test(test_sweep),
	        cmocka_unit_test(test_list_and_remove),
	        cmocka_unit_test(test_stage_and_install),
	        cmocka_unit_test(test_install_digest),
	        cmocka_unit_test(test_import_errors),
	};
	const struct CMUnitTest bench[] = {
	        cmocka_unit_test(test_bench),
	};
	const char *e = getenv("SLATE_STORAGE_BENCH");

	log_open("test-image-store", LOG_TARGET_STDERR);
	if (getenv("SLATE_DEBUG"))
		log_set_max_level(LOG_DEBUG);
	if (geteuid() != 0) {
		printf("SKIP: the image store tests need root (a loop-mounted btrfs)\n");
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
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fprintf(stderr, "no private mount namespace (%s): relying on the teardown\n",
		        strerror(errno));
	if (e && streq(e, "1"))
		return cmocka_run_group_tests_name("bench", bench, group_setup, group_teardown) ? 1
		                                                                                : 0;
	return cmocka_run_group_tests_name("image-store", tests, group_setup, group_teardown) ? 1
	                                                                                      : 0;
}

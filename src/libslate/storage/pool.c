/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "storage/internal.h"
#include "storage/loop.h"
#include "storage/pool.h"
#include "storage/spawn.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/macro.h"

#define POOL_LOCK ".pool.lock"
#define POOL_TMP ".pool.img.tmp"
#define POOL_LABEL "slate-pool"

/* Returns 1 if <state>/pool is the root of a mount, 0 if it is a plain directory. */
static int pool_is_mounted(int state_fd)
{
	const unsigned mask = STATX_TYPE | STATX_INO | STATX_MNT_ID;
	struct statx a, b;

	if (statx(state_fd, "", AT_EMPTY_PATH, mask, &a) < 0)
		return -errno;
	if (statx(state_fd, POOL_MOUNT, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, mask, &b) < 0)
		return -errno;
	if (!S_ISDIR(b.stx_mode))
		return -ENOTDIR;
	if (b.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
		return !!(b.stx_attributes & STATX_ATTR_MOUNT_ROOT);
	if ((a.stx_mask & STATX_MNT_ID) && (b.stx_mask & STATX_MNT_ID))
		return a.stx_mnt_id != b.stx_mnt_id;
	return a.stx_dev_major != b.stx_dev_major || a.stx_dev_minor != b.stx_dev_minor;
}

/* The block device behind a mounted single-device btrfs, e.g. "/dev/loop3". */
static int btrfs_device_path(int fd, char **ret)
{
	struct btrfs_ioctl_fs_info_args fi;

	memset(&fi, 0, sizeof(fi));
	if (ioctl(fd, BTRFS_IOC_FS_INFO, &fi) < 0)
		return -errno;
	if (fi.num_devices != 1)
		return -EMEDIUMTYPE;
	for (__u64 id = 1; id <= fi.max_id; id++) {
		struct btrfs_ioctl_dev_info_args di;

		memset(&di, 0, sizeof(di));
		di.devid = id;
		if (ioctl(fd, BTRFS_IOC_DEV_INFO, &di) < 0) {
			if (errno == ENODEV)
				continue;
			return -errno;
		}
		di.path[sizeof(di.path) - 1] = '\0';
		*ret = strdup((const char *)di.path);
		return *ret ? 0 : -ENOMEM;
	}
	return -ENODEV;
}

/* <state>/pool is mounted: reuse it if it is our pool.img, refuse anything else. */
static int check_mounted_pool(int state_fd, const char *state_path, struct slate_error *err)
{
	_cleanup_free_ char *dev = NULL;
	_cleanup_close_ int fd = -1;
	struct statfs sfs;
	struct stat st;
	int r;

	fd = openat(state_fd, POOL_MOUNT, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return slate_error_errno(err, -errno, "cannot open %s/%s", state_path, POOL_MOUNT);
	if (fstatfs(fd, &sfs) < 0)
		return -errno;
	if ((unsigned long)sfs.f_type != BTRFS_SUPER_MAGIC)
		return slate_error_set(
		        err, -EMEDIUMTYPE,
		        "%s/%s is a mount point, but not of a btrfs pool: unmount it", state_path,
		        POOL_MOUNT);
	if (fstatat(state_fd, POOL_IMAGE, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return slate_error_errno(err, -errno, "%s/%s is mounted, but %s/%s", state_path,
		                         POOL_MOUNT, state_path, POOL_IMAGE);
	r = btrfs_device_path(fd, &dev);
	if (r < 0)
		return slate_error_errno(err, r, "cannot tell which device is mounted on %s/%s",
		                         state_path, POOL_MOUNT);
	r = loop_backed_by(dev, st.st_dev, st.st_ino);
	if (r < 0)
		return slate_error_errno(err, r, "cannot query %s", dev);
	if (r == 0)
		return slate_error_set(
		        err, -EMEDIUMTYPE,
		        "%s/%s is a mount of %s, which is not backed by %s/%s: unmount it",
		        state_path, POOL_MOUNT, dev, state_path, POOL_IMAGE);
	log_debug("pool %s/%s is still mounted from %s, reusing it", state_path, POOL_IMAGE, dev);
	return 0;
}

/* Makes pool.img under a temporary name, so that a crash never leaves a half-made pool. */
static int pool_create(int state_fd, const char *state_path, uint64_t size, struct slate_error *err)
{
	_cleanup_free_ char *tmp_path = NULL, *output = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	if (size > INT64_MAX)
		return slate_error_set(err, -EFBIG, "pool size %llu is too large",
		                       (unsigned long long)size);
	tmp_path = fs_path_join(state_path, POOL_TMP);
	if (!tmp_path)
		return -ENOMEM;
	(void)unlinkat(state_fd, POOL_TMP, 0);
	fd = openat(state_fd, POOL_TMP, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return slate_error_errno(err, -errno, "cannot create the pool file %s", tmp_path);
	if (ftruncate(fd, (off_t)size) < 0) {
		r = slate_error_errno(err, -errno, "cannot make %s %llu bytes large", tmp_path,
		                      (unsigned long long)size);
		goto fail;
	}
	{
		const char *argv[] = {"mkfs.btrfs", "-q", "-L", POOL_LABEL, tmp_path, NULL};

		r = spawn_run(argv, &output);
	}
	if (r == -ENOENT) {
		r = slate_error_set(
		        err, r,
		        "mkfs.btrfs is not installed, so no btrfs pool can be made in %s "
		        "(install btrfs-progs, or set storage = qcow2)",
		        state_path);
		goto fail;
	}
	if (r < 0) {
		r = slate_error_set(err, r, "mkfs.btrfs %s failed: %s", tmp_path,
		                    output && *output ? output : strerror(-r));
		goto fail;
	}
	if (fsync(fd) < 0) {
		r = -errno;
		goto fail;
	}
	if (renameat(state_fd, POOL_TMP, state_fd, POOL_IMAGE) < 0) {
		r = slate_error_errno(err, -errno, "cannot rename %s to %s", tmp_path, POOL_IMAGE);
		goto fail;
	}
	r = fs_fsync_dir(state_fd);
	if (r < 0)
		return r;
	log_debug("created the pool %s/%s (%llu bytes, sparse)", state_path, POOL_IMAGE,
	          (unsigned long long)size);
	return 0;

fail:
	(void)unlinkat(state_fd, POOL_TMP, 0);
	return r;
}

/*
 * Attaches pool.img and mounts it on <state>/pool. The mount point is named by an O_PATH fd
 * opened without following a symlink (through /proc/self/fd), so a <state>/pool swapped for a
 * symlink between the check and the mount cannot send the mount elsewhere.
 */
static int pool_attach_and_mount(int state_fd, const char *state_path, struct slate_error *err)
{
	_cleanup_free_ char *img_path = NULL, *mnt_path = NULL, *dev = NULL;
	_cleanup_close_ int img = -1, loop = -1, mnt = -1;
	const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	char target[sizeof("/proc/self/fd/") + 3 * sizeof(int)];
	struct stat st;
	int r;

	img_path = fs_path_join(state_path, POOL_IMAGE);
	mnt_path = fs_path_join(state_path, POOL_MOUNT);
	if (!img_path || !mnt_path)
		return -ENOMEM;
	img = openat(state_fd, POOL_IMAGE, O_RDWR | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (img < 0)
		return slate_error_errno(err, -errno, "cannot open the pool file %s", img_path);
	if (fstat(img, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return slate_error_set(err, -EINVAL, "%s is not a regular file", img_path);
	mnt = openat(state_fd, POOL_MOUNT, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (mnt < 0)
		return slate_error_errno(err, -errno, "cannot open %s", mnt_path);
	(void)snprintf(target, sizeof(target), "/proc/self/fd/%d", mnt);

	/* btrfs uses 4 KiB sectors: a 4 KiB loop device lets direct I/O through to the file. */
	r = loop_attach(img, img_path, 4096, &loop, &dev);
	if (r == -ENOENT)
		return slate_error_set(
		        err, r,
		        "cannot attach %s to a loop device: there is no /dev/loop-control "
		        "(load the loop module; in a container, loop devices are usually "
		        "not available: set storage = qcow2)",
		        img_path);
	if (r == -EPERM || r == -EACCES)
		return slate_error_set(err, r,
		                       "cannot attach %s to a loop device: %s (this needs "
		                       "CAP_SYS_ADMIN; in a container, set storage = qcow2)",
		                       img_path, strerror(-r));
	if (r < 0)
		return slate_error_errno(err, r, "cannot attach %s to a loop device", img_path);

	/*
	 * Freed blocks are punched out of pool.img, so the host gets its space back (discard).
	 * user_subvol_rm_allowed: slated deletes workspace subvolumes without CAP_SYS_ADMIN (it
	 * has CAP_DAC_OVERRIDE, which the kernel's permission check on the subvolume then wants).
	 */
	if (mount(dev, target, "btrfs", flags, "discard=async,user_subvol_rm_allowed") < 0) {
		if (errno != EINVAL ||
		    mount(dev, target, "btrfs", flags, "user_subvol_rm_allowed") < 0)
			return slate_error_set(err, -errno, "cannot mount %s (%s) on %s: %s%s", dev,
			                       img_path, mnt_path, strerror(errno),
			                       errno == EPERM ? " (this needs CAP_SYS_ADMIN)" : "");
	}
	/* From here on the mount holds the loop device; autoclear detaches it at unmount. */
	log_debug("mounted %s (%s) on %s", dev, img_path, mnt_path);
	return 0;
}

int pool_mount_here(int state_fd, const char *state_path, struct slate_error *err)
{
	int r;

	if (state_fd < 0 || !state_path || state_path[0] != '/')
		return -EINVAL;
	r = pool_is_mounted(state_fd);
	if (r < 0)
		return slate_error_errno(err, r, "cannot inspect %s/%s", state_path, POOL_MOUNT);
	if (r > 0) {
		r = check_mounted_pool(state_fd, state_path, err);
		return r < 0 ? r : 0;
	}
	r = pool_attach_and_mount(state_fd, state_path, err);
	return r < 0 ? r : 1;
}

int pool_unmount_here(int state_fd, const char *state_path, struct slate_error *err)
{
	_cleanup_free_ char *mnt_path = NULL;
	int r;

	if (state_fd < 0 || !state_path || state_path[0] != '/')
		return -EINVAL;
	mnt_path = fs_path_join(state_path, POOL_MOUNT);
	if (!mnt_path)
		return -ENOMEM;
	r = pool_is_mounted(state_fd);
	if (r == -ENOENT)
		return 0;
	if (r <= 0)
		return r;
	r = check_mounted_pool(state_fd, state_path, err);
	if (r < 0)
		return r;
	if (umount2(mnt_path, UMOUNT_NOFOLLOW) < 0)
		return slate_error_errno(err, -errno, "cannot unmount %s", mnt_path);
	log_debug("unmounted the pool %s", mnt_path);
	return 1;
}

/* The privileged step, done by this process or by whoever privops names. */
static int do_mount(const struct storage_privops *privops, int state_fd, const char *state_path,
                    struct slate_error *err)
{
	if (privops && privops->pool_mount)
		return privops->pool_mount(privops->userdata, state_path, err);
	return pool_mount_here(state_fd, state_path, err);
}

int pool_open(int state_fd, const char *state_path, uint64_t size,
              const struct storage_privops *privops, int *ret_fd, enum pool_how *ret_how,
              struct slate_error *err)
{
	_cleanup_close_ int lock = -1, fd = -1;
	bool created = false;
	struct statfs sfs;
	struct stat st;
	int r;

	if (size == 0)
		size = POOL_DEFAULT_SIZE;
	/* Two daemons (or a daemon and a test) must not both create or mount the pool. */
	lock = openat(state_fd, POOL_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC,
	              0600);
	if (lock < 0)
		return slate_error_errno(err, -errno, "cannot create %s/%s", state_path, POOL_LOCK);
	while (flock(lock, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;

	if (mkdirat(state_fd, POOL_MOUNT, 0711) < 0 && errno != EEXIST)
		return slate_error_errno(err, -errno, "cannot create %s/%s", state_path,
		                         POOL_MOUNT);
	if (fstatat(state_fd, POOL_MOUNT, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return slate_error_set(err, -ENOTDIR, "%s/%s is not a directory", state_path,
		                       POOL_MOUNT);

	/* Making pool.img needs no privilege (mkfs.btrfs on a file); only the mount does. */
	r = pool_is_mounted(state_fd);
	if (r < 0)
		return slate_error_errno(err, r, "cannot inspect %s/%s", state_path, POOL_MOUNT);
	if (r == 0 && fstatat(state_fd, POOL_IMAGE, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			return slate_error_errno(err, -errno, "cannot inspect %s/%s", state_path,
			                         POOL_IMAGE);
		r = pool_create(state_fd, state_path, size, err);
		if (r < 0)
			return r;
		created = true;
	}
	r = do_mount(privops, state_fd, state_path, err);
	if (r < 0)
		return r;

	fd = openat(state_fd, POOL_MOUNT, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return slate_error_errno(err, -errno, "cannot open %s/%s", state_path, POOL_MOUNT);
	if (fstatfs(fd, &sfs) < 0)
		return -errno;
	if ((unsigned long)sfs.f_type != BTRFS_SUPER_MAGIC)
		return slate_error_set(err, -EMEDIUMTYPE, "%s/%s is not the mounted btrfs pool",
		                       state_path, POOL_MOUNT);
	/* Others may traverse (qemu runs as its own user), not list. */
	if (fchmod(fd, 0711) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	if (ret_how)
		*ret_how = created ? POOL_CREATED : r > 0 ? POOL_ATTACHED : POOL_REUSED;
	return 0;
}

int pool_unmount(int state_fd, const char *state_path, const struct storage_privops *privops,
                 struct slate_error *err)
{
	_cleanup_close_ int lock = -1;
	int r;

	/* Not while another slated (or a test) is mounting it. */
	lock = openat(state_fd, POOL_LOCK, O_RDWR | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (lock < 0)
		return errno == ENOENT ? 0 : -errno; /* never a pool here */
	while (flock(lock, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	r = pool_is_mounted(state_fd);
	if (r == -ENOENT)
		return 0;
	if (r <= 0)
		return r;
	if (privops && privops->pool_unmount)
		return privops->pool_unmount(privops->userdata, state_path, err);
	return pool_unmount_here(state_fd, state_path, err);
}

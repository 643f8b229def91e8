/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <btrfsutil.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "storage/subvol.h"
#include "util/log.h"
#include "util/macro.h"

/* The root directory of every btrfs subvolume has this inode number. */
#define BTRFS_SUBVOL_ROOT_INO 256

/* libbtrfsutil reports its own codes and leaves the system's reason in errno. */
static int btrfs_error(enum btrfs_util_error e, const char *what)
{
	int r = errno > 0 ? -errno : -EIO;

	if (e == BTRFS_UTIL_ERROR_NOT_BTRFS)
		r = -ENOTTY;
	else if (e == BTRFS_UTIL_ERROR_NO_MEMORY)
		r = -ENOMEM;
	log_debug("%s: %s (%s)", what, btrfs_util_strerror(e), strerror(-r));
	return r;
}

/* libbtrfsutil issues ioctls on the parent: it needs a real fd, not an O_PATH one. */
static int reopen_dir(int fd)
{
	int r = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return r < 0 ? -errno : r;
}

int subvol_probe(int dir_fd)
{
	_cleanup_close_ int fd = -1;
	struct statfs sfs;
	char name[64];
	unsigned rnd = 0;
	int r;

	if (fstatfs(dir_fd, &sfs) < 0)
		return -errno;
	if ((unsigned long)sfs.f_type != BTRFS_SUPER_MAGIC)
		return 0;
	(void)getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK);
	(void)snprintf(name, sizeof(name), ".slate-subvol-probe.%d.%08x", (int)getpid(), rnd);
	r = subvol_create(dir_fd, name, 0700);
	if (r < 0) {
		log_debug("btrfs, but cannot create a subvolume: %s", strerror(-r));
		return r == -EPERM || r == -EACCES || r == -ENOTTY || r == -EOPNOTSUPP ? 0 : r;
	}
	r = subvol_delete(dir_fd, name, false);
	if (r < 0) {
		/* Without privilege an empty subvolume still goes with rmdir (kernel 4.18+). */
		fd = reopen_dir(dir_fd);
		if (fd >= 0 && unlinkat(fd, name, AT_REMOVEDIR) == 0)
			return 1;
		log_debug("cannot remove the probe subvolume %s: %s", name, strerror(-r));
		return 0;
	}
	return 1;
}

int subvol_create(int parent_fd, const char *name, mode_t mode)
{
	_cleanup_close_ int pfd = -1, fd = -1;
	enum btrfs_util_error e;

	pfd = reopen_dir(parent_fd);
	if (pfd < 0)
		return pfd;
	errno = 0;
	e = btrfs_util_create_subvolume_fd(pfd, name, 0, NULL, NULL);
	if (e != BTRFS_UTIL_OK)
		return btrfs_error(e, name);
	/* The kernel makes the subvolume root 0755 whatever we want. */
	fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchmod(fd, mode) < 0) {
		int r = -errno;
		(void)subvol_delete(pfd, name, false);
		return r;
	}
	return 0;
}

int subvol_delete(int parent_fd, const char *name, bool recursive)
{
	_cleanup_close_ int pfd = -1;
	enum btrfs_util_error e;

	pfd = reopen_dir(parent_fd);
	if (pfd < 0)
		return pfd;
	errno = 0;
	e = btrfs_util_delete_subvolume_fd(pfd, name,
	                                   recursive ? BTRFS_UTIL_DELETE_SUBVOLUME_RECURSIVE : 0);
	if (e != BTRFS_UTIL_OK)
		return btrfs_error(e, name);
	return 0;
}

bool subvol_is_root_fd(int fd)
{
	struct statfs sfs;
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_ino != BTRFS_SUBVOL_ROOT_INO)
		return false;
	return fstatfs(fd, &sfs) == 0 && (unsigned long)sfs.f_type == BTRFS_SUPER_MAGIC;
}

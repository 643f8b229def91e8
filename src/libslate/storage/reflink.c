/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "storage/reflink.h"
#include "util/fs.h"
#include "util/macro.h"

#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif
#ifndef BCACHEFS_SUPER_MAGIC
#define BCACHEFS_SUPER_MAGIC 0xca451a4e
#endif

int reflink_clone_at(int src_dirfd, const char *src, int dst_dirfd, const char *dst, unsigned mode)
{
	_cleanup_close_ int in = -1, out = -1;

	in = openat(src_dirfd, src, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (in < 0)
		return -errno;
	out = openat(dst_dirfd, dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, mode);
	if (out < 0)
		return -errno;
	/* The mode asked for, not what the umask leaves of it. */
	if (fchmod(out, mode) < 0) {
		int r = -errno;
		(void)unlinkat(dst_dirfd, dst, 0);
		return r;
	}
	if (ioctl(out, FICLONE, in) < 0) {
		int r = -errno;
		(void)unlinkat(dst_dirfd, dst, 0);
		/* Filesystems without reflinks answer EINVAL or ENOTTY as often as EOPNOTSUPP. */
		if (r == -EINVAL || r == -ENOTTY)
			r = -EOPNOTSUPP;
		return r;
	}
	return 0;
}

int reflink_supported_at(int dirfd)
{
	char a[64], b[64];
	_cleanup_close_ int fd = -1;
	int r;

	(void)snprintf(a, sizeof(a), ".reflink-probe.%d.a", (int)getpid());
	(void)snprintf(b, sizeof(b), ".reflink-probe.%d.b", (int)getpid());
	fd = openat(dirfd, a, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = fs_write_all(fd, "slate reflink probe\n", 20);
	if (r >= 0)
		r = RET_NERRNO(fsync(fd));
	if (r >= 0) {
		r = reflink_clone_at(dirfd, a, dirfd, b, 0600);
		if (r >= 0)
			r = 1;
		else if (r == -EOPNOTSUPP || r == -EXDEV)
			r = 0;
	}
	(void)unlinkat(dirfd, b, 0);
	(void)unlinkat(dirfd, a, 0);
	return r;
}

const char *reflink_fs_name(int fd)
{
	struct statfs sfs;

	if (fstatfs(fd, &sfs) < 0)
		return "unknown";
	switch ((unsigned long)sfs.f_type) {
	case BTRFS_SUPER_MAGIC:
		return "btrfs";
	case XFS_SUPER_MAGIC:
		return "xfs";
	case EXT4_SUPER_MAGIC:
		return "ext4";
	case TMPFS_MAGIC:
		return "tmpfs";
	case OVERLAYFS_SUPER_MAGIC:
		return "overlayfs";
	case BCACHEFS_SUPER_MAGIC:
		return "bcachefs";
	default:
		return "other";
	}
}

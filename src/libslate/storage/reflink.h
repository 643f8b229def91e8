/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Copy-on-write clones of whole files (FICLONE: btrfs, XFS with reflink=1, bcachefs...). */

/*
 * Clones src (relative to src_dirfd) to a new file dst (relative to dst_dirfd, created with
 * mode, refused if it exists). The two must be on one filesystem. Returns 0, -EOPNOTSUPP when
 * the filesystem cannot reflink, -EXDEV across filesystems, or another -errno. On failure no
 * dst is left behind.
 */
int reflink_clone_at(int src_dirfd, const char *src, int dst_dirfd, const char *dst, unsigned mode);

/* Returns 1 if files in dirfd can be reflinked, 0 if not, -errno when it cannot tell. Leaves
 * nothing behind. */
int reflink_supported_at(int dirfd);

/* Returns a short name for the filesystem type holding fd ("btrfs", "xfs", "ext4"...). */
const char *reflink_fs_name(int fd);

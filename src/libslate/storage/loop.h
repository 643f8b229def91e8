/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Loop devices for the pool (and for tests that need a real filesystem in a file). */

#include <stdbool.h>
#include <sys/types.h>

/*
 * Attaches the regular file open as file_fd (read-write) to a free loop device: LOOP_CTL_GET_FREE
 * on /dev/loop-control, then LOOP_CONFIGURE with LO_FLAGS_AUTOCLEAR (so the device detaches
 * itself when its last user goes: after the unmount, or when *ret_fd is closed before anything
 * was mounted) and direct I/O where the backing filesystem allows it. block_size is the
 * device's logical block size (0: the kernel's default, 512). name (may be NULL) is shown by
 * losetup. Returns the open loop device in *ret_fd and its path ("/dev/loopN") in
 * *ret_path; -ENOENT when there is no /dev/loop-control, -EPERM/-EACCES without the privilege.
 */
int loop_attach(int file_fd, const char *name, unsigned block_size, int *ret_fd, char **ret_path);

/*
 * Returns 1 if the block device at dev_path is a loop device whose backing file is the inode
 * (dev, ino), 0 if it is not (another file, not a loop device, nothing attached), or -errno.
 */
int loop_backed_by(const char *dev_path, dev_t dev, ino_t ino);

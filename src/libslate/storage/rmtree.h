/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Deletes directory name in parent_fd and everything below it. The whole tree is checked first
 * and nothing is deleted when a mount point is found in it (-EBUSY): the walk never crosses into
 * another mount, never follows a symlink (links themselves are removed). btrfs subvolumes met on
 * the way (read-only snapshots included) go with a subvolume delete, their own nested
 * subvolumes with them. -ENOTDIR when name is not a directory, -ENOENT when it is missing.
 */
int rmtree_at(int parent_fd, const char *name);

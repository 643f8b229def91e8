/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* btrfs subvolumes through libbtrfsutil. */

#include <stdbool.h>
#include <sys/types.h>

/* Returns 1 if dir_fd is on btrfs and a subvolume can be created (and removed) in it, 0 if
 * not, -errno when it cannot tell. Leaves nothing behind. */
int subvol_probe(int dir_fd);
/* Creates subvolume name in parent_fd (any fd of the directory, O_PATH too) with mode. */
int subvol_create(int parent_fd, const char *name, mode_t mode);
/* Deletes subvolume name in parent_fd and every subvolume below it (needs CAP_SYS_ADMIN, or
 * user_subvol_rm_allowed for one without children). */
int subvol_delete(int parent_fd, const char *name, bool recursive);
/* Returns true if fd (open with O_NOFOLLOW) is the root of a btrfs subvolume. */
bool subvol_is_root_fd(int fd);

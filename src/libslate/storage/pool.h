/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The loop-backed btrfs pool: <state>/pool.img (sparse, created once with mkfs.btrfs) mounted on
 * <state>/pool through a loop device with autoclear, as LXD/Incus do for their default pool.
 */

#include <stdint.h>

#include "storage/storage.h"

#define POOL_IMAGE "pool.img"
#define POOL_MOUNT "pool"
#define POOL_DEFAULT_SIZE (64ull << 30)

enum pool_how {
	POOL_CREATED,  /* pool.img was made and mounted */
	POOL_ATTACHED, /* pool.img existed (after a reboot) and was attached and mounted again */
	POOL_REUSED,   /* pool.img was still mounted on <state>/pool (a daemon restart) */
};

/*
 * Makes sure the pool of the state directory state_fd (at state_path, absolute) is mounted:
 * reuses the mount, re-attaches pool.img, or creates pool.img with logical size size. Making
 * pool.img needs no privilege; attaching and mounting it are done by privops (slated's helper),
 * or by this process when privops is NULL. Returns an O_RDONLY|O_DIRECTORY fd of the mounted
 * pool's root in *ret_fd and how it got there in *ret_how (may be NULL). On failure err (may be
 * NULL) says why.
 */
int pool_open(int state_fd, const char *state_path, uint64_t size,
              const struct storage_privops *privops, int *ret_fd, enum pool_how *ret_how,
              struct slate_error *err);

/*
 * Unmounts <state>/pool if it is this state directory's pool (the loop device then detaches
 * itself), through privops when non-NULL. Plain umount(2): a pool something still has files
 * open in stays mounted. Callers first make sure no domain uses it (vm_domains_using), since a
 * QEMU in another mount namespace does not keep the host's mount busy. Returns 1 when it
 * unmounted the pool, 0 when it was not mounted, -EBUSY when it is in use, -EMEDIUMTYPE when
 * something else is mounted there (err says what), or another -errno.
 */
int pool_unmount(int state_fd, const char *state_path, const struct storage_privops *privops,
                 struct slate_error *err);

/*
 * The privileged halves, for whoever holds CAP_SYS_ADMIN and /dev/loop-control (slated-helper,
 * or pool_open() itself without privops). The caller serialises them with <state>/.pool.lock
 * (pool_open() and pool_unmount() hold it while they ask). state_fd is the state directory,
 * state_path its absolute path.
 *
 * pool_mount_here(): when <state>/pool is mounted already, checks that it is a btrfs whose
 * device is a loop device backed by <state>/pool.img and returns 0; otherwise attaches
 * pool.img (which must exist: a regular file, not a symlink) to a loop device with autoclear
 * and mounts it on <state>/pool (nosuid, nodev, noexec, discard=async when the kernel has it,
 * user_subvol_rm_allowed) and returns 1.
 *
 * pool_unmount_here(): the same check, then umount2(UMOUNT_NOFOLLOW). Returns 1 when it
 * unmounted the pool, 0 when none was mounted, or as pool_unmount().
 */
int pool_mount_here(int state_fd, const char *state_path, struct slate_error *err);
int pool_unmount_here(int state_fd, const char *state_path, struct slate_error *err);

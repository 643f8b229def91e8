/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The loop-backed btrfs pool: <state>/pool.img (sparse, created once with mkfs.btrfs) mounted on
 * <state>/pool through a loop device with autoclear, as LXD/Incus do for their default pool.
 */

#include <stdint.h>

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
 * reuses the mount, re-attaches pool.img, or creates pool.img with logical size size. Returns
 * an O_RDONLY|O_DIRECTORY fd of the mounted pool's root in *ret_fd and how it got there in
 * *ret_how (may be NULL). On failure *err (when err is non-NULL) gets a message saying why.
 */
int pool_open(int state_fd, const char *state_path, uint64_t size, int *ret_fd,
              enum pool_how *ret_how, char **err);

/*
 * Unmounts <state>/pool if it is this state directory's pool (the loop device then detaches
 * itself). Plain umount(2): a pool something still has files open in stays mounted. Callers
 * first make sure no domain uses it (vm_domains_using), since a QEMU in another mount namespace
 * does not keep the host's mount busy. Returns 1 when it unmounted the pool, 0 when it was not
 * mounted, -EBUSY when it is in use, -EMEDIUMTYPE when something else is mounted there (*err
 * says what), or another -errno.
 */
int pool_unmount(int state_fd, const char *state_path, char **err);

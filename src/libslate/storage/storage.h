/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Where workspace and image bytes live, and how they are cloned. One backend per state
 * directory, chosen by trying (never by the filesystem's name), shown by `slate describe`/
 * `slate doctor` and logged once:
 *
 *   btrfs   the state directory is on btrfs: each workspace directory is a subvolume,
 *           images are FICLONEd, delete is a subvolume delete.
 *   reflink FICLONE works (XFS reflink=1, bcachefs...): plain directories, FICLONEd images.
 *   pool    neither: a sparse btrfs pool file <state>/pool.img, loop-mounted on <state>/pool,
 *           holding images/ and workspaces/ (as LXD/Incus's default loop pool). Re-attached
 *           after a reboot or a daemon restart.
 *   qcow2   only when configured (storage = qcow2): disk.img is a qcow2 overlay whose backing
 *           file is the base image (qemu-img), still copy-on-write.
 *
 * Images and workspaces always sit on one filesystem so that clones are reflinks. In auto mode
 * a state directory that already has a pool.img keeps using its pool (doc/storage.md).
 * Everything returns >= 0 on success, -errno or a slate_err on failure; outputs untouched on
 * failure.
 */

#include <stdint.h>
#include <sys/types.h>

#include "util/error.h"
#include "util/macro.h"

enum storage_kind {
	STORAGE_BTRFS,
	STORAGE_REFLINK,
	STORAGE_POOL,
	STORAGE_QCOW2,
};

enum storage_mode {
	STORAGE_MODE_AUTO = 0, /* btrfs, else reflink, else pool */
	STORAGE_MODE_QCOW2,    /* configured explicitly */
	STORAGE_MODE_POOL,     /* force the loop pool even where reflinks work (tests) */
};

/*
 * The pool's two privileged steps (loop device and mount(2), which need CAP_SYS_ADMIN and
 * /dev/loop-control), when someone else does them: slated has slated-helper do them
 * (helper/client.h), so that slated itself needs neither. Both are called with the pool's lock
 * held. pool_mount returns 1 when it attached and mounted <state_path>/pool.img, 0 when the
 * pool was mounted already (and checked), or -errno; pool_unmount returns 1 when it unmounted
 * the pool, 0 when none was mounted, or -errno (-EBUSY: in use). Either says in err (may be
 * NULL) why it failed.
 */
struct storage_privops {
	int (*pool_mount)(void *userdata, const char *state_path, struct slate_error *err);
	int (*pool_unmount)(void *userdata, const char *state_path, struct slate_error *err);
	void *userdata;
};

struct storage_config {
	enum storage_mode mode;
	uint64_t
	        pool_size; /* logical size of pool.img when it must be created; 0: default 64 GiB */
	/* Who mounts and unmounts the pool; NULL: this process (tests, tools run as root). */
	const struct storage_privops *privops;
};

struct storage;

/* Returns "btrfs", "reflink", "pool" or "qcow2". */
const char *storage_kind_name(enum storage_kind k);

/*
 * Opens the storage of the state directory state_dirfd (path state_dir, for messages and
 * mounts): probes, creates or re-attaches the pool when needed, and makes the images/ and
 * workspaces/ directories. A host that cannot loop-mount gets a clear error naming why: on
 * failure err (may be NULL; untouched on success) names the path and the cause (e.g. "cannot
 * attach /var/lib/slate/pool.img to a loop device: there is no /dev/loop-control ...").
 */
int storage_open(int state_dirfd, const char *state_dir, const struct storage_config *cfg,
                 struct storage **ret, struct slate_error *err);
/*
 * Unmounts the loop-backed pool of the state directory state_dirfd (state_dir: absolute and
 * canonical) when it is mounted and nothing has files open in it, through privops (NULL: this
 * process does it). Callers make sure first that
 * no domain uses it (vm_domains_using): QEMU may run in a mount namespace of libvirt's, where
 * its open files do not keep the host's mount busy. Returns 1 when it unmounted the pool, 0
 * when none was mounted, -EBUSY when something still uses it, or another error (err, when
 * non-NULL, says why then, as for storage_open()).
 */
int storage_pool_unmount(int state_dirfd, const char *state_dir,
                         const struct storage_privops *privops, struct slate_error *err);
/* Closes fds. Never unmounts the pool (storage_pool_unmount() does). NULL is fine. */
void storage_close(struct storage *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct storage *, storage_close);

enum storage_kind storage_get_kind(const struct storage *s);
/* Directory fds (owned by s) of images/ and workspaces/ on the clone-capable filesystem. */
int storage_images_fd(const struct storage *s);
int storage_workspaces_fd(const struct storage *s);
/* Their paths (for libvirt's domain XML and messages). */
const char *storage_images_path(const struct storage *s);
const char *storage_workspaces_path(const struct storage *s);
/* The state directory, absolute and canonical (pool.img lives there for the pool). */
const char *storage_state_path(const struct storage *s);

/*
 * Creates directory name in parent_fd: a btrfs subvolume on btrfs/pool, a plain directory
 * otherwise (mode 0700). -EEXIST if present.
 */
int storage_create_dir(struct storage *s, int parent_fd, const char *name);
/*
 * Deletes directory name in parent_fd and everything below it (nested subvolumes included).
 * Never follows symlinks, never crosses into another filesystem.
 */
int storage_delete_dir(struct storage *s, int parent_fd, const char *name);
/*
 * Makes dst (in dst_fd, must not exist) a copy-on-write clone of src (in src_fd): FICLONE,
 * or for qcow2 an overlay with src_path as its backing file. Never a byte copy. No dst left on
 * failure. mode applies to dst.
 */
int storage_clone_file(struct storage *s, int src_fd, const char *src, const char *src_path,
                       int dst_fd, const char *dst, mode_t mode);
/*
 * Clones a file for a checkpoint or a revert: FICLONE where available; for qcow2, a sparse copy
 * of the overlay (its backing file stays the base).
 */
int storage_clone_plain(struct storage *s, int src_fd, const char *src, int dst_fd, const char *dst,
                        mode_t mode);

struct storage_usage {
	uint64_t logical;  /* st_size */
	uint64_t physical; /* st_blocks * 512 */
	uint64_t shared;   /* bytes in extents shared with another file (FIEMAP_EXTENT_SHARED) */
};
/* Usage of one file (FIEMAP-based shared estimate). */
int storage_file_usage(int dir_fd, const char *name, struct storage_usage *ret);

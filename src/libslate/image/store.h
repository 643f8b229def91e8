/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The local image store: <images>/<id>/ on the storage's clone-capable filesystem, holding
 * disk.img (raw), optionally vmlinuz + initrd.img for direct kernel boot, and image.json.
 * Image files are read-only (0444) once installed. An image is installed atomically: built in
 * <images>/.tmp-<id>-XXXXXX and renamed into place; a crash leaves no half image (the store's
 * sweep removes .tmp-* leftovers).
 *
 * `slate image import` registers a local raw image the administrator trusts (marked
 * "local": true, unsigned); the catalog code installs verified catalog images through
 * image_store_install_dir().
 */

#include <stdbool.h>
#include <stdint.h>

#include "storage/storage.h"
#include "util/macro.h"

#define IMAGE_ID_MAX 64

struct image_info {
	char *id;
	int64_t version; /* bumped on every change of the base (re-import, postinstall) */
	bool local;      /* imported by the administrator, not from a signed catalog */
	/* The digest of disk.img as installed: "sha256-1m:<hex>" (image/verify.h; image.json's
	 * "digest"), or 64 hex digits, the plain SHA-256 (image.json's "sha256": images installed
	 * before the block digest, and installers that still give one). */
	char *sha256;
	uint64_t size;     /* logical size of disk.img */
	bool kernel_boot;  /* direct kernel boot with vmlinuz/initrd.img */
	char *cmdline;     /* kernel command line (kernel_boot only), may be NULL */
	int64_t installed; /* unix time */
	char *description; /* may be NULL */
};

void image_info_free(struct image_info *i);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct image_info *, image_info_free);

/* Returns 0 if id matches [a-z0-9][a-z0-9._-]{0,63} (no "..", not "." alone), else -EINVAL. */
int image_id_check(const char *id);

/* Removes leftovers of interrupted installs. */
int image_store_sweep(struct storage *s);

/*
 * Imports disk_path (a raw image) as image id: FICLONE when it is on the same filesystem,
 * else a sparse copy (holes stay holes), its sha256-1m digest computed while copying (holes are
 * not read); kernel/initrd (both or neither)
 * for direct kernel boot. -EEXIST when id is installed and replace is false; with replace the
 * new image gets version old+1. progress (may be NULL) is called with bytes done/total.
 */
int image_store_import(struct storage *s, const char *id, const char *disk_path,
                       const char *kernel_path, const char *initrd_path, const char *cmdline,
                       bool replace, void (*progress)(uint64_t done, uint64_t total, void *ud),
                       void *ud, struct image_info **ret);

/*
 * Whether path may be imported as a base image: -EPERM when it resolves (symbolic links
 * followed) to a file inside the workspaces directory or anywhere in the state directory other
 * than the image store: a workspace's disk or home, a checkpoint, a staging file. A base image
 * is never made from a disk a tenant used (doc/security.md, "Residue"). 0 otherwise, also when path
 * cannot be resolved (the import then fails on it with its own error).
 */
int image_store_source_check(struct storage *s, const char *path);

/* Loads image id's metadata. -ENOENT when not installed. */
int image_store_get(struct storage *s, const char *id, struct image_info **ret);
/* All installed images, sorted by id. */
int image_store_list(struct storage *s, struct image_info ***ret, size_t *ret_n);
void image_info_list_free(struct image_info **list, size_t n);
/* Opens <images>/<id> as a directory fd (O_RDONLY|O_DIRECTORY|O_CLOEXEC). */
int image_store_open_dir(struct storage *s, const char *id, int *ret_fd);
/* Removes image id (workspaces cloned from it keep their own extents). */
int image_store_remove(struct storage *s, const char *id);

/*
 * Installing files someone else fetched (the catalog code): image_store_stage_dir() makes an
 * empty staging directory <images>/.tmp-<id>-XXXXXX on the clone-capable filesystem and returns
 * an fd of it (O_RDONLY|O_DIRECTORY, holding a lock that keeps image_store_sweep() away while
 * open) and its name. The caller writes disk.img (and vmlinuz + initrd.img) into it, then calls
 * image_store_install_dir() or image_store_abort_dir(), and closes the fd.
 */
int image_store_stage_dir(struct storage *s, const char *id, int *ret_fd, char **ret_name);
/*
 * Installs the staging directory name (from image_store_stage_dir()) as image info->id:
 * disk.img must be there, vmlinuz/initrd.img both or neither; writes image.json from info (id,
 * local, sha256 (either digest form), cmdline, description are taken from it; version, size, kernel_boot and
 * installed are set here: version is 1, or the replaced image's + 1), makes every file 0444,
 * fsyncs, and renames it into place. -EEXIST when id is installed and replace is false. The
 * staging directory is gone afterwards, installed or removed, whatever the result. *ret (may be
 * NULL) gets the installed image's metadata.
 */
int image_store_install_dir(struct storage *s, const char *name, const struct image_info *info,
                            bool replace, struct image_info **ret);
/* Removes a staging directory that will not be installed. */
int image_store_abort_dir(struct storage *s, const char *name);

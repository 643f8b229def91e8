/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/internal.h"
#include "storage/pool.h"
#include "storage/qcow2.h"
#include "storage/reflink.h"
#include "storage/rmtree.h"
#include "storage/sparse.h"
#include "storage/storage.h"
#include "storage/subvol.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/macro.h"

#define IMAGES_DIR "images"
#define WORKSPACES_DIR "workspaces"

const char *storage_kind_name(enum storage_kind k)
{
	switch (k) {
	case STORAGE_BTRFS:
		return "btrfs";
	case STORAGE_REFLINK:
		return "reflink";
	case STORAGE_POOL:
		return "pool";
	case STORAGE_QCOW2:
		return "qcow2";
	}
	return "unknown";
}

void storage_close(struct storage *s)
{
	if (!s)
		return;
	(void)safe_close(s->state_fd);
	(void)safe_close(s->images_fd);
	(void)safe_close(s->workspaces_fd);
	free(s->state_path);
	free(s->root_path);
	free(s->images_path);
	free(s->workspaces_path);
	free(s);
}

int storage_pool_unmount(int state_dirfd, const char *state_dir,
                         const struct storage_privops *privops, struct slate_error *err)
{
	return pool_unmount(state_dirfd, state_dir, privops, err);
}

static bool name_ok(const char *name)
{
	return name && *name && !strchr(name, '/') && !streq(name, ".") && !streq(name, "..");
}

/* Makes dir name in root_fd (mode 0711: qemu, running as its own user, must traverse it). */
static int open_top_dir(int root_fd, const char *root_path, const char *name, int *ret_fd,
                        struct slate_error *err)
{
	int fd;

	if (mkdirat(root_fd, name, 0711) < 0 && errno != EEXIST)
		return slate_error_errno(err, -errno, "cannot create %s/%s", root_path, name);
	fd = openat(root_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return slate_error_errno(err, -errno, "cannot open %s/%s", root_path, name);
	/* Whatever the umask was when it was made. */
	if (fchmod(fd, 0711) < 0) {
		int r = -errno;
		(void)close(fd);
		return slate_error_errno(err, r, "cannot chmod %s/%s", root_path, name);
	}
	*ret_fd = fd;
	return 0;
}

static int mount_id(int fd, uint64_t *ret)
{
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) < 0)
		return -errno;
	if (!(stx.stx_mask & STATX_MNT_ID))
		return -EOPNOTSUPP;
	*ret = stx.stx_mnt_id;
	return 0;
}

/* Chooses the backend by trying, in the order the header gives. */
static int probe_kind(struct storage *s, const struct storage_config *cfg, struct slate_error *err)
{
	struct stat st;
	int r;

	if (cfg->mode == STORAGE_MODE_QCOW2)
		return STORAGE_QCOW2;
	if (cfg->mode == STORAGE_MODE_POOL)
		return STORAGE_POOL;
	if (cfg->mode != STORAGE_MODE_AUTO)
		return slate_error_set(err, -EINVAL, "unknown storage mode %d", (int)cfg->mode);

	/* A pool made before (forced, or on another filesystem) holds the images: keep it. */
	if (fstatat(s->state_fd, POOL_IMAGE, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		log_debug("%s/%s exists: using the pool", s->state_path, POOL_IMAGE);
		return STORAGE_POOL;
	}
	r = subvol_probe(s->state_fd);
	if (r > 0)
		return STORAGE_BTRFS;
	if (r < 0)
		log_debug("probing btrfs subvolumes in %s: %s", s->state_path, strerror(-r));
	r = reflink_supported_at(s->state_fd);
	if (r < 0)
		return slate_error_errno(err, r, "cannot write in %s", s->state_path);
	if (r > 0)
		return STORAGE_REFLINK;
	return STORAGE_POOL;
}

static int do_open(int state_dirfd, const char *state_dir, const struct storage_config *cfg,
                   struct storage **ret, struct slate_error *err)
{
	_cleanup_(storage_closep) struct storage *s = NULL;
	_cleanup_close_ int root_fd = -1;
	enum pool_how how = POOL_REUSED;
	struct stat a, b;
	uint64_t ia, ib;
	int r, kind;

	if (state_dirfd < 0 && state_dirfd != AT_FDCWD)
		return -EBADF;
	if (!state_dir || !*state_dir)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->state_fd = s->images_fd = s->workspaces_fd = -1;

	s->state_fd = openat(state_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->state_fd < 0)
		return slate_error_errno(err, -errno, "cannot open %s", state_dir);
	s->state_path = realpath(state_dir, NULL);
	if (!s->state_path)
		return slate_error_errno(err, -errno, "cannot resolve %s", state_dir);
	/* Paths go into mount(2), qcow2 headers and domain XML: they must name the same dir. */
	if (fstat(s->state_fd, &a) < 0 || stat(s->state_path, &b) < 0)
		return -errno;
	if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return slate_error_set(err, -EINVAL, "%s is not the directory that was opened",
		                       state_dir);

	kind = probe_kind(s, cfg, err);
	if (kind < 0)
		return kind;
	s->kind = (enum storage_kind)kind;

	if (s->kind == STORAGE_POOL) {
		r = pool_open(s->state_fd, s->state_path, cfg->pool_size, cfg->privops, &root_fd,
		              &how, err);
		if (r < 0)
			return r;
		s->root_path = fs_path_join(s->state_path, POOL_MOUNT);
	} else {
		root_fd = openat(s->state_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (root_fd < 0)
			return -errno;
		s->root_path = strdup(s->state_path);
	}
	if (!s->root_path)
		return -ENOMEM;
	s->images_path = fs_path_join(s->root_path, IMAGES_DIR);
	s->workspaces_path = fs_path_join(s->root_path, WORKSPACES_DIR);
	if (!s->images_path || !s->workspaces_path)
		return -ENOMEM;
	r = open_top_dir(root_fd, s->root_path, IMAGES_DIR, &s->images_fd, err);
	if (r < 0)
		return r;
	r = open_top_dir(root_fd, s->root_path, WORKSPACES_DIR, &s->workspaces_fd, err);
	if (r < 0)
		return r;
	/* A clone cannot cross a mount, not even a bind mount of the same filesystem. */
	if (mount_id(s->images_fd, &ia) >= 0 && mount_id(s->workspaces_fd, &ib) >= 0 && ia != ib)
		return slate_error_set(
		        err, -EXDEV,
		        "%s and %s are on different mounts: clones need one filesystem",
		        s->images_path, s->workspaces_path);

	switch (s->kind) {
	case STORAGE_BTRFS:
		log_info("storage: btrfs subvolumes in %s", s->root_path);
		break;
	case STORAGE_REFLINK:
		log_info("storage: reflink clones on %s in %s", reflink_fs_name(root_fd),
		         s->root_path);
		break;
	case STORAGE_QCOW2:
		log_info("storage: qcow2 overlays in %s", s->root_path);
		break;
	case STORAGE_POOL:
		log_info("storage: btrfs pool %s/%s %s on %s", s->state_path, POOL_IMAGE,
		         how == POOL_CREATED    ? "created and mounted"
		         : how == POOL_ATTACHED ? "attached and mounted again"
		                                : "still mounted, reused",
		         s->root_path);
		break;
	}
	*ret = TAKE_PTR(s);
	return 0;
}

int storage_open(int state_dirfd, const char *state_dir, const struct storage_config *cfg,
                 struct storage **ret, struct slate_error *err)
{
	static const struct storage_config defaults = {.mode = STORAGE_MODE_AUTO};
	struct slate_error own = {0};
	int r;

	if (!ret)
		return -EINVAL;
	r = do_open(state_dirfd, state_dir, cfg ? cfg : &defaults, ret, &own);
	if (r < 0 && !own.msg[0])
		(void)slate_error_errno(&own, r, "cannot open the storage in %s",
		                        state_dir ? state_dir : "(null)");
	if (r < 0 && err)
		*err = own;
	return r;
}

enum storage_kind storage_get_kind(const struct storage *s)
{
	return s->kind;
}

int storage_images_fd(const struct storage *s)
{
	return s->images_fd;
}

int storage_workspaces_fd(const struct storage *s)
{
	return s->workspaces_fd;
}

const char *storage_images_path(const struct storage *s)
{
	return s->images_path;
}

const char *storage_workspaces_path(const struct storage *s)
{
	return s->workspaces_path;
}

const char *storage_state_path(const struct storage *s)
{
	return s->state_path;
}

int storage_create_dir(struct storage *s, int parent_fd, const char *name)
{
	_cleanup_close_ int fd = -1;

	if (!s || !name_ok(name))
		return -EINVAL;
	if (s->kind == STORAGE_BTRFS || s->kind == STORAGE_POOL)
		return subvol_create(parent_fd, name, 0700);
	if (mkdirat(parent_fd, name, 0700) < 0)
		return -errno;
	/* The umask must not decide who may enter a workspace. */
	fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchmod(fd, 0700) < 0) {
		int r = -errno;
		(void)unlinkat(parent_fd, name, AT_REMOVEDIR);
		return r;
	}
	return 0;
}

int storage_delete_dir(struct storage *s, int parent_fd, const char *name)
{
	if (!s || !name_ok(name))
		return -EINVAL;
	return rmtree_at(parent_fd, name);
}

int storage_clone_file(struct storage *s, int src_fd, const char *src, const char *src_path,
                       int dst_fd, const char *dst, mode_t mode)
{
	_cleanup_free_ char *dir = NULL, *abs = NULL;
	struct stat st;

	if (!s || !src || !*src || !name_ok(dst))
		return -EINVAL;
	if (s->kind != STORAGE_QCOW2)
		return reflink_clone_at(src_fd, src, dst_fd, dst, mode);

	/* A missing base is -ENOENT, not whatever qemu-img makes of it. */
	if (fstatat(src_fd, src, &st, 0) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	/* The overlay records its backing file by path: it must be absolute. */
	if (!src_path || src_path[0] != '/') {
		int r = qcow2_fd_path(src_fd, &dir);
		if (r < 0)
			return r;
		abs = fs_path_join(dir, src_path ? src_path : src);
		if (!abs)
			return -ENOMEM;
		src_path = abs;
	}
	return qcow2_create_overlay(src_path, dst_fd, dst, mode);
}

int storage_clone_plain(struct storage *s, int src_fd, const char *src, int dst_fd, const char *dst,
                        mode_t mode)
{
	_cleanup_close_ int in = -1, out = -1;
	struct stat st;
	int r;

	if (!s || !src || !*src || !name_ok(dst))
		return -EINVAL;
	r = reflink_clone_at(src_fd, src, dst_fd, dst, mode);
	if (r >= 0 || s->kind != STORAGE_QCOW2 || (r != -EOPNOTSUPP && r != -EXDEV))
		return r;

	/* qcow2 on a filesystem without reflinks: a sparse copy of the overlay. */
	in = openat(src_fd, src, O_RDONLY | O_NOCTTY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	if (fstat(in, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	out = openat(dst_fd, dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC,
	             mode);
	if (out < 0)
		return -errno;
	r = RET_NERRNO(fchmod(out, mode));
	if (r >= 0)
		r = sparse_copy(in, out, (uint64_t)st.st_size, NULL, NULL);
	if (r >= 0)
		r = RET_NERRNO(fsync(out));
	if (r < 0)
		(void)unlinkat(dst_fd, dst, 0);
	return r;
}

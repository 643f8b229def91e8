/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "storage/rmtree.h"
#include "storage/subvol.h"
#include "util/log.h"
#include "util/macro.h"

#define RMTREE_DEPTH_MAX 128
#define BTRFS_SUBVOL_ROOT_INO 256

static int stat_entry(int dfd, const char *name, struct statx *ret)
{
	unsigned mask = STATX_TYPE | STATX_INO | STATX_MNT_ID;

	if (statx(dfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, mask, ret) < 0)
		return -errno;
	return 0;
}

/*
 * Returns 1 when the directory entry (already statx'ed as stx, found in the directory whose
 * statx is parent) is the root of another mount. Subvolumes of the same btrfs mount have their
 * own st_dev without being mounts, so st_dev alone cannot tell when the mount id is unknown.
 */
static int crosses_mount(int dfd, const char *name, const struct statx *parent,
                         const struct statx *stx)
{
	struct statfs sfs;
	_cleanup_close_ int fd = -1;

	if ((stx->stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
	    (stx->stx_attributes & STATX_ATTR_MOUNT_ROOT))
		return 1;
	if ((parent->stx_mask & STATX_MNT_ID) && (stx->stx_mask & STATX_MNT_ID))
		return parent->stx_mnt_id != stx->stx_mnt_id;
	if (parent->stx_dev_major == stx->stx_dev_major &&
	    parent->stx_dev_minor == stx->stx_dev_minor)
		return 0;
	if (stx->stx_ino != BTRFS_SUBVOL_ROOT_INO)
		return 1;
	fd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstatfs(fd, &sfs) < 0)
		return -errno;
	return (unsigned long)sfs.f_type == BTRFS_SUPER_MAGIC ? 0 : 1;
}

struct names {
	char **v;
	size_t n, cap;
};

static void names_free(struct names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

/* Reads every name in the directory fd (besides . and ..) before anything is removed. */
static int list_dir(int fd, struct names *ret)
{
	struct names l = {0};
	struct dirent *de;
	DIR *d;
	int dfd, r = 0;

	dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	d = fdopendir(dfd);
	if (!d) {
		r = -errno;
		(void)close(dfd);
		return r;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			r = errno ? -errno : 0;
			break;
		}
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (l.n == l.cap) {
			size_t cap = l.cap ? l.cap * 2 : 16;
			char **v = realloc(l.v, cap * sizeof(*v));
			if (!v) {
				r = -ENOMEM;
				break;
			}
			l.v = v;
			l.cap = cap;
		}
		l.v[l.n] = strdup(de->d_name);
		if (!l.v[l.n]) {
			r = -ENOMEM;
			break;
		}
		l.n++;
	}
	(void)closedir(d);
	if (r < 0) {
		names_free(&l);
		return r;
	}
	*ret = l;
	return 0;
}

/* Opens the directory entry that statx described, refusing anything that changed since. */
static int open_checked(int dfd, const char *name, const struct statx *stx)
{
	struct stat st;
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_ino != stx->stx_ino) {
		(void)close(fd);
		return -EAGAIN;
	}
	return fd;
}

/* First pass: refuses the tree if a mount point is anywhere in it. Touches nothing. */
static int check_tree(int fd, const struct statx *self, unsigned depth)
{
	struct names l = {0};
	int r;

	if (depth > RMTREE_DEPTH_MAX)
		return -ELOOP;
	r = list_dir(fd, &l);
	if (r < 0)
		return r;
	for (size_t i = 0; i < l.n && r >= 0; i++) {
		_cleanup_close_ int sub = -1;
		struct statx stx;

		r = stat_entry(fd, l.v[i], &stx);
		if (r == -ENOENT) {
			r = 0;
			continue;
		}
		if (r < 0 || !S_ISDIR(stx.stx_mode))
			continue;
		r = crosses_mount(fd, l.v[i], self, &stx);
		if (r > 0) {
			log_debug("refusing to delete a tree with a mount point in it: %s", l.v[i]);
			r = -EBUSY;
			break;
		}
		if (r < 0)
			break;
		sub = open_checked(fd, l.v[i], &stx);
		if (sub < 0) {
			r = sub;
			break;
		}
		r = check_tree(sub, &stx, depth + 1);
	}
	names_free(&l);
	return r < 0 ? r : 0;
}

static int remove_entry(int dfd, const char *name, const struct statx *parent, unsigned depth);

static int empty_dir(int fd, const struct statx *self, unsigned depth)
{
	struct names l = {0};
	int r;

	r = list_dir(fd, &l);
	if (r < 0)
		return r;
	for (size_t i = 0; i < l.n && r >= 0; i++)
		r = remove_entry(fd, l.v[i], self, depth + 1);
	names_free(&l);
	return r < 0 ? r : 0;
}

static int remove_dir(int dfd, const char *name, const struct statx *stx, unsigned depth)
{
	_cleanup_close_ int fd = -1;
	bool subvol;
	int r;

	if (depth > RMTREE_DEPTH_MAX)
		return -ELOOP;
	fd = open_checked(dfd, name, stx);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	subvol = subvol_is_root_fd(fd);
	if (subvol) {
		/* One ioctl takes the subvolume, read-only snapshots and nested ones included. */
		r = subvol_delete(dfd, name, true);
		if (r >= 0 || (r != -EPERM && r != -EACCES))
			return r;
		log_debug("no privilege for a recursive subvolume delete of %s, emptying it", name);
	}
	r = empty_dir(fd, stx, depth);
	if (r < 0)
		return r;
	fd = safe_close(fd);
	if (subvol && subvol_delete(dfd, name, false) >= 0)
		return 0;
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static int remove_entry(int dfd, const char *name, const struct statx *parent, unsigned depth)
{
	struct statx stx;
	int r;

	r = stat_entry(dfd, name, &stx);
	if (r == -ENOENT)
		return 0; /* someone else (a concurrent sweep) got there first */
	if (r < 0)
		return r;
	if (!S_ISDIR(stx.stx_mode)) {
		if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
			return -errno;
		return 0;
	}
	r = crosses_mount(dfd, name, parent, &stx);
	if (r < 0)
		return r;
	if (r > 0)
		return -EBUSY; /* mounted after check_tree() looked */
	return remove_dir(dfd, name, &stx, depth);
}

int rmtree_at(int parent_fd, const char *name)
{
	_cleanup_close_ int pfd = -1, fd = -1;
	struct statx pstx, stx;
	int r;

	if (!name || !*name || strchr(name, '/') || streq(name, ".") || streq(name, ".."))
		return -EINVAL;
	pfd = openat(parent_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		return -errno;
	if (statx(pfd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_INO | STATX_MNT_ID, &pstx) < 0)
		return -errno;
	r = stat_entry(pfd, name, &stx);
	if (r < 0)
		return r;
	if (!S_ISDIR(stx.stx_mode))
		return -ENOTDIR;
	r = crosses_mount(pfd, name, &pstx, &stx);
	if (r < 0)
		return r;
	if (r > 0)
		return -EBUSY;
	fd = open_checked(pfd, name, &stx);
	if (fd < 0)
		return fd;
	r = check_tree(fd, &stx, 0);
	if (r < 0)
		return r;
	fd = safe_close(fd);
	return remove_dir(pfd, name, &stx, 0);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/storage.h"
#include "util/macro.h"

#define FIEMAP_BATCH 256

/* Bytes of fd in extents that another file shares too (a clone's base, a checkpoint). */
static int shared_bytes(int fd, uint64_t size, uint64_t *ret)
{
	_cleanup_free_ struct fiemap *fm = NULL;
	uint64_t start = 0, shared = 0;

	fm = malloc(sizeof(*fm) + FIEMAP_BATCH * sizeof(struct fiemap_extent));
	if (!fm)
		return -ENOMEM;
	while (start < size) {
		bool last = false;

		memset(fm, 0, sizeof(*fm));
		fm->fm_start = start;
		fm->fm_length = FIEMAP_MAX_OFFSET - start;
		fm->fm_extent_count = FIEMAP_BATCH;
		if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0) {
			/* No FIEMAP (tmpfs, some network filesystems): nothing known to be shared. */
			if (errno == EOPNOTSUPP || errno == ENOTTY)
				break;
			return -errno;
		}
		if (fm->fm_mapped_extents == 0)
			break;
		for (unsigned i = 0; i < fm->fm_mapped_extents; i++) {
			const struct fiemap_extent *e = &fm->fm_extents[i];

			if (e->fe_flags & FIEMAP_EXTENT_SHARED)
				shared += e->fe_length;
			if (e->fe_flags & FIEMAP_EXTENT_LAST)
				last = true;
		}
		if (last)
			break;
		const struct fiemap_extent *e = &fm->fm_extents[fm->fm_mapped_extents - 1];
		if (e->fe_logical + e->fe_length <= start)
			break; /* no progress: do not loop forever on a confused filesystem */
		start = e->fe_logical + e->fe_length;
	}
	*ret = shared;
	return 0;
}

int storage_file_usage(int dir_fd, const char *name, struct storage_usage *ret)
{
	_cleanup_close_ int fd = -1;
	uint64_t shared = 0;
	struct stat st;
	int r;

	if (!name || !*name || !ret)
		return -EINVAL;
	fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	r = shared_bytes(fd, (uint64_t)st.st_size, &shared);
	if (r < 0)
		return r;
	ret->logical = (uint64_t)st.st_size;
	ret->physical = (uint64_t)st.st_blocks * 512;
	/* Extents can reach past EOF (preallocation); never report more than is allocated. */
	ret->shared = shared < ret->physical ? shared : ret->physical;
	return 0;
}

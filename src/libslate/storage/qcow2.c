/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/qcow2.h"
#include "storage/spawn.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/macro.h"

int qcow2_fd_path(int fd, char **ret)
{
	char proc[sizeof("/proc/self/fd/") + 3 * sizeof(int)];
	char buf[PATH_MAX];
	ssize_t n;

	if (fd == AT_FDCWD) {
		if (!getcwd(buf, sizeof(buf)))
			return -errno;
		n = (ssize_t)strlen(buf);
	} else {
		(void)snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		n = readlink(proc, buf, sizeof(buf) - 1);
		if (n < 0)
			return -errno;
		buf[n] = '\0';
	}
	if (n == 0 || buf[0] != '/' || strstr(buf, " (deleted)"))
		return -ENOENT;
	*ret = strdup(buf);
	return *ret ? 0 : -ENOMEM;
}

int qcow2_create_overlay(const char *backing_path, int dst_fd, const char *dst, mode_t mode)
{
	_cleanup_free_ char *dir = NULL, *path = NULL, *output = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	if (!backing_path || backing_path[0] != '/' || !dst || !*dst || strchr(dst, '/'))
		return -EINVAL;
	r = qcow2_fd_path(dst_fd, &dir);
	if (r < 0)
		return r;
	path = fs_path_join(dir, dst);
	if (!path)
		return -ENOMEM;

	/* Made here first: "must not exist" and the mode hold whatever qemu-img does. */
	fd = openat(dst_fd, dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, mode) < 0) {
		r = -errno;
		goto fail;
	}
	{
		const char *argv[] = {"qemu-img", "create", "-q",         "-f", "qcow2", "-F",
		                      "raw",      "-b",     backing_path, path, NULL};

		r = spawn_run(argv, &output);
	}
	if (r < 0) {
		log_debug("qemu-img create %s (backing %s): %s", path, backing_path,
		          output ? output : strerror(-r));
		goto fail;
	}
	if (fsync(fd) < 0) {
		r = -errno;
		goto fail;
	}
	return 0;

fail:
	(void)unlinkat(dst_fd, dst, 0);
	return r;
}

/*
 * The virtual size of the qcow2 image file in dirfd (header: magic "QFI\xfb", then the
 * big-endian size at byte 24), so that ls/describe show what the guest sees, not the overlay's.
 */
int qcow2_virtual_size(int dirfd, const char *file, uint64_t *ret)
{
	_cleanup_close_ int fd = -1;
	uint8_t h[32];
	uint64_t size = 0;

	fd = openat(dirfd, file, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) || memcmp(h, "QFI\xfb", 4) != 0)
		return -EINVAL;
	for (int i = 24; i < 32; i++)
		size = size << 8 | h[i];
	*ret = size;
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "storage/loop.h"
#include "util/log.h"
#include "util/macro.h"

#define LOOP_ATTEMPTS 32

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	(void)nanosleep(&ts, NULL);
}

/* Opens /dev/loopN, waiting a little for a node the kernel has only just created. */
static int open_loop_node(const char *path)
{
	for (int i = 0; i < 50; i++) {
		int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
		if (fd >= 0)
			return fd;
		if (errno != ENOENT)
			return -errno;
		sleep_ms(10);
	}
	return -ENOENT;
}

/* Kernels before 5.8 have no LOOP_CONFIGURE: LOOP_SET_FD, then the flags. */
static int configure_legacy(int loop_fd, int file_fd, const struct loop_info64 *info)
{
	struct loop_info64 li = *info;

	if (ioctl(loop_fd, LOOP_SET_FD, file_fd) < 0)
		return -errno;
	li.lo_flags &= LO_FLAGS_AUTOCLEAR; /* direct I/O is an optimisation we can do without */
	if (ioctl(loop_fd, LOOP_SET_STATUS64, &li) < 0) {
		int r = -errno;
		(void)ioctl(loop_fd, LOOP_CLR_FD, 0);
		return r;
	}
	return 0;
}

static int configure(int loop_fd, int file_fd, const char *name, unsigned block_size)
{
	struct loop_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.fd = (__u32)file_fd;
	cfg.block_size = block_size;
	cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
	if (name)
		(void)snprintf((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name), "%s",
		               name);
	if (ioctl(loop_fd, LOOP_CONFIGURE, &cfg) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOTTY)
		return -errno;
	/* Direct I/O needs the backing filesystem's block alignment: try without it. */
	cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
	if (ioctl(loop_fd, LOOP_CONFIGURE, &cfg) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOTTY)
		return -errno;
	return configure_legacy(loop_fd, file_fd, &cfg.info);
}

int loop_attach(int file_fd, const char *name, unsigned block_size, int *ret_fd, char **ret_path)
{
	_cleanup_close_ int ctl = -1;
	struct stat st;
	int r = -EBUSY;

	if (file_fd < 0 || !ret_fd || !ret_path)
		return -EINVAL;
	if (fstat(file_fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (ctl < 0)
		return -errno;

	/* Another process may take the device we were offered before we configure it: retry. */
	for (int attempt = 0; attempt < LOOP_ATTEMPTS; attempt++) {
		_cleanup_close_ int fd = -1;
		char path[sizeof("/dev/loop") + 3 * sizeof(int)];
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);

		if (n < 0)
			return -errno;
		(void)snprintf(path, sizeof(path), "/dev/loop%d", n);
		fd = open_loop_node(path);
		if (fd < 0)
			return fd;
		r = configure(fd, file_fd, name, block_size);
		if (r == -EBUSY) {
			log_debug("%s was taken before we could configure it, trying another",
			          path);
			continue;
		}
		if (r < 0)
			return r;
		*ret_path = strdup(path);
		if (!*ret_path)
			return -ENOMEM; /* closing fd detaches the device again (autoclear) */
		*ret_fd = TAKE_FD(fd);
		log_debug("attached %s to %s", name ? name : "(file)", path);
		return 0;
	}
	return r;
}

int loop_backed_by(const char *dev_path, dev_t dev, ino_t ino)
{
	_cleanup_close_ int fd = -1;
	struct loop_info64 info;
	struct stat st;

	if (!dev_path)
		return -EINVAL;
	fd = open(dev_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errno == ENOENT || errno == ENXIO ? 0 : -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISBLK(st.st_mode))
		return 0;
	memset(&info, 0, sizeof(info));
	if (ioctl(fd, LOOP_GET_STATUS64, &info) < 0)
		return errno == ENXIO || errno == ENOTTY || errno == EINVAL ? 0 : -errno;
	/* The kernel encodes the backing file's device in its "huge" format: decode it. */
	unsigned long long d = info.lo_device;
	unsigned maj = (unsigned)((d & 0xfff00ULL) >> 8);
	unsigned min = (unsigned)((d & 0xffULL) | ((d >> 12) & 0xfff00ULL));

	return maj == major(dev) && min == minor(dev) && info.lo_inode == (unsigned long long)ino;
}

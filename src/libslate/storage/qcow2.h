/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The qcow2 fallback: overlays whose backing file is the base image (qemu-img). */

#include <stdint.h>
#include <sys/types.h>

/*
 * Creates dst (in dst_fd, must not exist) with mode as a qcow2 overlay of the raw image at the
 * absolute path backing_path: qemu-img create -f qcow2 -F raw -b backing_path. No dst is left
 * on failure. -EIO when qemu-img fails (its message is logged at debug level), -ENOENT when
 * qemu-img is not installed.
 */
int qcow2_create_overlay(const char *backing_path, int dst_fd, const char *dst, mode_t mode);

/* Returns the absolute path of the directory open as fd (from /proc/self/fd), newly allocated. */
int qcow2_fd_path(int fd, char **ret);
/* The guest-visible size of the qcow2 image file in dirfd (AT_FDCWD: a path), from its header. */
int qcow2_virtual_size(int dirfd, const char *file, uint64_t *ret);

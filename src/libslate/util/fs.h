/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

#include <stdbool.h>

/*
 * File helpers. Everything takes a directory fd (AT_FDCWD works) and opens with O_CLOEXEC.
 * All return >= 0 on success and -errno on failure; output parameters are untouched on failure.
 */

#include <stddef.h>
#include <sys/types.h>

#include "util/buf.h"

/* Opens path as a directory (O_DIRECTORY|O_CLOEXEC|O_PATH unless writable is wanted). */
int fs_open_dir_at(int dirfd, const char *path, int *ret_fd);
/* Creates path and its missing parents with mode (existing directories are fine). */
int fs_mkdir_p(const char *path, mode_t mode);
/* The entry names of dirfd (all but "." and ".."; an O_PATH fd is fine), unsorted; free with
 * fs_names_free(). */
int fs_list_names_at(int dirfd, char ***ret, size_t *ret_n);
void fs_names_free(char **names, size_t n);
/* fsync() the directory. */
int fs_fsync_dir(int dirfd);
/*
 * Atomically replaces dirfd/name with data: writes a temporary file in the same directory
 * (O_TMPFILE when the filesystem has it, a random ".#name.XXXXXX" otherwise), fsyncs it,
 * renames it over name and fsyncs the directory. A crash leaves the old or the new contents.
 */
int fs_write_atomic_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode);
/* Reads a whole regular file into a new buffer; -EFBIG when it is larger than max. */
int fs_read_file_at(int dirfd, const char *name, size_t max, struct buf **ret);
/*
 * Takes an exclusive flock on dirfd/name (created 0600 if missing) without waiting.
 * Returns the held fd in *ret_fd, or -EWOULDBLOCK when another process holds it.
 */
int fs_lock_at(int dirfd, const char *name, int *ret_fd);
/* Returns 1 if path is an existing directory, 0 if not present, -errno otherwise. */
int fs_is_dir(const char *path);
/* Joins a and b with exactly one '/'. Returns a new string or NULL. */
char *fs_path_join(const char *a, const char *b);
/* Writes all n bytes to fd (retrying on EINTR and short writes). */
int fs_write_all(int fd, const void *p, size_t n);
/* Sets or clears O_NONBLOCK. Returns 0 or -errno. */
int fs_set_nonblock(int fd, bool on);
/*
 * Copies bytes both ways between two connected blocking stream sockets until each side has
 * ended (its EOF is passed on with shutdown(SHUT_WR)) or one fails. Returns 0 or -errno.
 */
int fs_relay(int a, int b);

/*
 * In a child between fork and exec: closes every fd from 3 up except the n in keep (at most 8;
 * negative ones are ignored), with close_range(2) where the kernel has it, else one by one below
 * max_fd (which the parent reads before forking: sysconf is not async-signal-safe). Allocates
 * nothing.
 */
void fs_close_fds_except(const int *keep, size_t n, int max_fd);
/* Adds the search bit for others (o+x, g+x) to every directory from dir up to top (dir must be
 * top or below it; nothing above top is touched): QEMU, running as its own user, must reach
 * images under slated's state directory without being able to list it. 0, -EINVAL, -errno. */
int fs_make_traversable(const char *top, const char *dir);

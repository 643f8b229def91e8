/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Running the few external tools storage needs (mkfs.btrfs, qemu-img): no shell, argv only. */

#include <stdbool.h>
#include <stddef.h>

/*
 * Runs argv[0] with argv: looked up in $PATH and then in /usr/sbin, /sbin, /usr/bin and /bin (a
 * daemon's PATH often lacks the sbin directories); stdin is /dev/null, stdout and stderr are
 * captured together (the first 4 KiB are kept) and every other fd is closed in the child.
 * Returns 0 when the program exits 0, -ENOENT when it is not installed, -EIO when it exits
 * non-zero or dies, or another -errno. When ret_output is non-NULL and the program ran (whatever
 * its exit status), *ret_output gets what it printed, trimmed (caller frees).
 */
int spawn_run(const char *const *argv, char **ret_output);
/* As spawn_run(), keeping up to max bytes of the output (a tool whose output is its answer). */
int spawn_run_max(const char *const *argv, size_t max, char **ret_output);

/* A file a confined program sees: fd, already open, bind-mounted at path in its root. */
struct spawn_file {
	int fd;
	const char *path; /* absolute, one component: "/disk.qcow2" */
	bool writable;    /* else read-only */
};

/*
 * As spawn_run(), but for a program that reads untrusted input which may name files (qemu-img on
 * a downloaded image): it runs in a mount namespace of its own whose root is an empty read-only
 * tmpfs holding only the system's program directories as the host has them (/usr, and /bin,
 * /sbin, /lib* as the same symlinks or as read-only binds), /etc/ld.so.cache, /dev/null, and
 * files[] (bind mounts of their open fds, never of a path, so that the file checked is the file
 * used; not named /dev, /etc or a system directory). No other host
 * file (state, keys, /dev, /proc, /home) can be opened by any name. It starts with no
 * capabilities and no_new_privs. The program must resolve to a path under those directories.
 * Returns as spawn_run(), and -ENOTSUP when the program lies outside them; when the confinement
 * cannot be set up (no mount namespaces: RestrictNamespaces= or a container without
 * CAP_SYS_ADMIN) it fails with that step's -errno and *ret_output says which step; the program
 * is never run unconfined.
 */
int spawn_run_confined(const char *const *argv, const struct spawn_file *files, size_t n_files,
                       char **ret_output);

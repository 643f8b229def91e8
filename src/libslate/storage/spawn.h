/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Running the few external tools storage needs (mkfs.btrfs, qemu-img): no shell, argv only. */

/*
 * Runs argv[0] with argv: looked up in $PATH and then in /usr/sbin, /sbin, /usr/bin and /bin (a
 * daemon's PATH often lacks the sbin directories); stdin is /dev/null, stdout and stderr are
 * captured together (the first 4 KiB are kept) and every other fd is closed in the child.
 * Returns 0 when the program exits 0, -ENOENT when it is not installed, -EIO when it exits
 * non-zero or dies, or another -errno. When ret_output is non-NULL and the program ran (whatever
 * its exit status), *ret_output gets what it printed, trimmed (caller frees).
 */
int spawn_run(const char *const *argv, char **ret_output);

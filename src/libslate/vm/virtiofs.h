/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Shared host folders, served without host root (doc/security.md, "Shares").
 *
 * A share's host path is checked when the workspace is created and again at every start, here:
 * virtiofs_share_open() walks it one component at a time with O_PATH|O_NOFOLLOW|O_DIRECTORY, so
 * a component swapped for a symlink after create is refused by name, and checks that the
 * directory still belongs to the uid recorded at create. Everything after that uses the open
 * directory, never the path again.
 *
 * virtiofs_spawn() then runs QEMU's virtiofsd over that directory as the share's owner: in a user
 * namespace that maps only the owner's uid and gid, to the guest workspace user's ids (so the
 * owner's files are the workspace user's in the guest), with the namespace's capabilities kept
 * (ambient) so virtiofsd's own sandbox and pivot_root work, and a private mount namespace whose
 * view of the share is a bind mount of the open directory (nosuid, nodev, and read-only for a
 * read-only share, made before virtiofsd runs). A file guest root creates belongs to the
 * owner; chown to any other uid fails (unmapped); mknod of a device fails (CAP_MKNOD in a user
 * namespace does not reach devices); a seccomp filter refuses setuid and setgid mode bits.
 * virtiofsd switches its effective ids to the guest caller's before creating a file; those ids
 * are unmapped, so the filter also turns its set*id calls into no-ops that succeed (they could
 * only fail, never gain anything: the namespace is the boundary, the filter only keeps creation
 * working).
 *
 * QEMU reaches the daemon on a listening unix socket made by the caller and handed over as an
 * fd; libvirt is told the socket's path (<source socket=.../>), so neither libvirt nor QEMU ever
 * sees the share's path or needs the host's mount namespace for it.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/error.h"

#define VIRTIOFSD_DEFAULT "/usr/lib/qemu/virtiofsd"
/* The workspace user's ids in slate's images (slate-guest's "slate", or uid 1000): the owner's
 * files appear as theirs in the guest, so the workspace user reads and writes them as usual. */
#define VIRTIOFS_GUEST_UID 1000
#define VIRTIOFS_GUEST_GID 1000

/*
 * Opens the directory at path (absolute, no "." or ".." components) without following any
 * symlink, and checks it is a directory owned by expect_uid (any owner when expect_uid is
 * (uid_t)-1). Returns 0 and an O_PATH fd in *ret_fd, or -errno with a message naming the
 * component in err (may be NULL): -ELOOP (a symlink), -ENOTDIR, -ENOENT, -EPERM (owner changed),
 * -EINVAL.
 */
int virtiofs_share_open(const char *path, uid_t expect_uid, int *ret_fd, struct slate_error *err);

struct virtiofs_spec {
	int dir_fd;         /* the share, from virtiofs_share_open() */
	int listen_fd;      /* a listening AF_UNIX SOCK_STREAM socket QEMU will connect to */
	uid_t uid;          /* the share's owner: virtiofsd runs as this uid ... */
	gid_t gid;          /* ... and this gid, and nothing else */
	uid_t guest_uid;    /* ... which the guest sees as this uid (VIRTIOFS_GUEST_UID) ... */
	gid_t guest_gid;    /* ... and this gid */
	bool readonly;      /* the bind mount virtiofsd serves is read-only */
	const char *binary; /* virtiofsd; NULL: VIRTIOFSD_DEFAULT */
	int log_fd;         /* virtiofsd's stderr, or -1 for /dev/null */
};

/*
 * Starts virtiofsd as described above, detached (it is not a child of the caller once this
 * returns; it exits by itself when QEMU disconnects). Returns 0 with its pid and its start time
 * (field 22 of /proc/PID/stat, for virtiofs_kill) once virtiofsd has been exec'd, or -errno with
 * the reason in err (may be NULL).
 */
int virtiofs_spawn(const struct virtiofs_spec *spec, pid_t *ret_pid, uint64_t *ret_start,
                   struct slate_error *err);

/* Kills (SIGKILL, with its process group) the virtiofsd started as pid at start time start, if it still runs:
 * 0, or -ESRCH when that process is gone (or the pid now belongs to another process). */
int virtiofs_kill(pid_t pid, uint64_t start);

/* Field 22 of /proc/PID/stat (start time in clock ticks since boot), or 0. */
uint64_t virtiofs_proc_start_time(pid_t pid);

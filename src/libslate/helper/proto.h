/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The wire format between slated and slated-helper (doc/helper.md has the table).
 *
 * slated runs outside the host's mount namespace and devices; the few acts that need them
 * (attach and mount the loop-backed pool, start virtiofsd for a share as its owner) are asked of
 * slated-helper, a small root process in the host's mount namespace, over a unix SOCK_SEQPACKET
 * socket. As with OpenSSH's monitor and bubblewrap, the requests are narrow and of a fixed
 * layout: one struct helper_request per message, file descriptors (only where the operation
 * takes them) as SCM_RIGHTS, one struct helper_reply back. There is nothing to parse beyond the
 * fixed fields; each one is checked (helper_request_check) before anything is done, and a
 * request that fails any check is answered with -EINVAL or -EPERM and a message, and never
 * acted upon.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HELPER_MAGIC 0x534c4850u /* "SLHP" */
#define HELPER_VERSION 1
#define HELPER_PATH_MAX 4096
#define HELPER_MESSAGE_MAX 1024
/* The most fds any request carries (SHARE_SERVE: the listening socket and a log). */
#define HELPER_FDS_MAX 2

enum helper_op {
	/* path: the state directory (must be the helper's own). -> value: 1 attached, 0 reused */
	HELPER_POOL_MOUNT = 1,
	/* path: the state directory. -> value: 1 unmounted, 0 none was mounted */
	HELPER_POOL_UNMOUNT = 2,
	/* path: the share; uid, gid: its owner; flags: HELPER_SHARE_READONLY; fds: a listening
	 * AF_UNIX stream socket [, a log fd]. -> value: virtiofsd's pid, start: its start time */
	HELPER_SHARE_SERVE = 3,
	/* pid, start: a virtiofsd SHARE_SERVE started. -> 0, or -ESRCH when it is gone */
	HELPER_SHARE_STOP = 4,
};

/* SHARE_SERVE: the share is served read-only. No other flag bit is defined. */
#define HELPER_SHARE_READONLY 0x1u

/* Fixed layout, no padding: the same bytes on both sides of the socket. */
struct helper_request {
	uint32_t magic;   /* HELPER_MAGIC */
	uint16_t version; /* HELPER_VERSION */
	uint16_t op;      /* enum helper_op */
	uint32_t flags;
	uint32_t uid;
	uint32_t gid;
	int32_t pid;
	uint64_t start;             /* a process's start time (field 22 of /proc/PID/stat) */
	char path[HELPER_PATH_MAX]; /* NUL-terminated; zero-filled after the NUL */
};
_Static_assert(sizeof(struct helper_request) == 32 + HELPER_PATH_MAX, "helper_request layout");

struct helper_reply {
	uint32_t magic;
	uint16_t version;
	uint16_t op;    /* the request's */
	int32_t status; /* 0 or -errno */
	int32_t value;  /* per operation, see enum helper_op */
	uint64_t start;
	char message[HELPER_MESSAGE_MAX]; /* NUL-terminated; why, when status < 0 */
};
_Static_assert(sizeof(struct helper_reply) == 24 + HELPER_MESSAGE_MAX, "helper_reply layout");

/* What a received fd is, as far as the checks care (filled by the receiver with fstat and
 * getsockopt; kept apart so the checks stay a pure function). */
struct helper_fd_info {
	bool is_socket;
	int domain;     /* SO_DOMAIN, sockets only */
	int type;       /* SO_TYPE */
	bool listening; /* SO_ACCEPTCONN */
	bool writable;  /* O_WRONLY or O_RDWR */
	mode_t mode;    /* st_mode's type bits */
};

/* The name of an op ("POOL_MOUNT"), or NULL for an unknown one. */
const char *helper_op_name(unsigned op);

/*
 * Checks a request of len bytes as received, with n_fds fds described by fds, against the
 * helper's state directory state_dir (absolute, canonical). Returns 0 when it may be acted
 * upon, else -EINVAL (malformed: size, magic, version, op, string, path, flags, fields the op
 * does not use, fds) or -EPERM (well-formed but not allowed: another state directory, a share
 * of root's that is not read-only, gid 0 for another owner, a share inside the state
 * directory, pid 1), with the reason in why.
 */
int helper_request_check(const void *msg, size_t len, const struct helper_fd_info *fds,
                         size_t n_fds, const char *state_dir, char *why, size_t why_len);

/*
 * Whether path is absolute, not "/" itself, shorter than HELPER_PATH_MAX, without ".", ".." or
 * empty ("//", a trailing "/") components, and without control characters (bytes below 0x20
 * and 0x7f).
 */
bool helper_path_ok(const char *path);

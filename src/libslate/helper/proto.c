/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "helper/proto.h"
#include "util/macro.h"

static const char *const op_names[] = {
        [HELPER_POOL_MOUNT] = "POOL_MOUNT",
        [HELPER_POOL_UNMOUNT] = "POOL_UNMOUNT",
        [HELPER_SHARE_SERVE] = "SHARE_SERVE",
        [HELPER_SHARE_STOP] = "SHARE_STOP",
};

const char *helper_op_name(unsigned op)
{
	return op < ELEMENTSOF(op_names) ? op_names[op] : NULL;
}

bool helper_path_ok(const char *path)
{
	const char *c = path;

	if (!path || path[0] != '/' || path[1] == '\0' ||
	    strnlen(path, HELPER_PATH_MAX) >= HELPER_PATH_MAX)
		return false;
	for (; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return false;
	/* Each component after a '/': not empty, not "." or "..". */
	for (c = path; *c; c++) {
		if (*c != '/')
			continue;
		if (c[1] == '/' || c[1] == '\0')
			return false;
		if (c[1] == '.' && (c[2] == '/' || c[2] == '\0'))
			return false;
		if (c[1] == '.' && c[2] == '.' && (c[3] == '/' || c[3] == '\0'))
			return false;
	}
	return true;
}

static int refuse(int r, char *why, size_t len, const char *fmt, ...) _printf_(4, 5);
static int refuse(int r, char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (why && len) {
		va_start(ap, fmt);
		(void)vsnprintf(why, len, fmt, ap);
		va_end(ap);
	}
	return r;
}

/* The string field must end with a NUL, and everything after that NUL must be zero too, so the
 * same request always has the same bytes (and nothing rides along unseen). */
static bool string_field_ok(const char *f, size_t size)
{
	const char *nul = memchr(f, '\0', size);

	if (!nul)
		return false;
	for (const char *c = nul; c < f + size; c++)
		if (*c)
			return false;
	return true;
}

/* Whether path is dir or below it (both absolute, neither ending in '/'). */
static bool path_below(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strneq(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

static int check_pool(const struct helper_request *q, size_t n_fds, const char *state_dir,
                      char *why, size_t len)
{
	const char *name = helper_op_name(q->op);

	if (n_fds != 0)
		return refuse(-EINVAL, why, len, "%s takes no file descriptor, got %zu", name,
		              n_fds);
	if (q->flags || q->uid || q->gid || q->pid || q->start)
		return refuse(-EINVAL, why, len,
		              "%s takes only a path: flags, uid, gid, pid and start must be 0",
		              name);
	if (!streq(q->path, state_dir))
		return refuse(-EPERM, why, len,
		              "%s: this helper serves the state directory %s, not %s", name,
		              state_dir, q->path);
	return 0;
}

static int check_share_serve(const struct helper_request *q, const struct helper_fd_info *fds,
                             size_t n_fds, const char *state_dir, char *why, size_t len)
{
	if (q->flags & ~HELPER_SHARE_READONLY)
		return refuse(-EINVAL, why, len, "SHARE_SERVE: unknown flag bits 0x%x",
		              q->flags & ~HELPER_SHARE_READONLY);
	if (q->pid || q->start)
		return refuse(-EINVAL, why, len, "SHARE_SERVE: pid and start must be 0");
	if (n_fds < 1 || n_fds > 2)
		return refuse(
		        -EINVAL, why, len,
		        "SHARE_SERVE takes a listening socket and an optional log fd, got %zu "
		        "fds",
		        n_fds);
	if (!fds[0].is_socket || fds[0].domain != AF_UNIX || fds[0].type != SOCK_STREAM ||
	    !fds[0].listening)
		return refuse(
		        -EINVAL, why, len,
		        "SHARE_SERVE: the first fd must be a listening AF_UNIX stream socket");
	if (n_fds == 2 && (fds[1].is_socket || !(S_ISREG(fds[1].mode) || S_ISFIFO(fds[1].mode)) ||
	                   !fds[1].writable))
		return refuse(-EINVAL, why, len,
		              "SHARE_SERVE: the log fd must be a regular file or a pipe open for "
		              "writing");
	if (q->uid == (uint32_t)-1 || q->gid == (uint32_t)-1)
		return refuse(-EPERM, why, len, "SHARE_SERVE: uid and gid -1 serve no share");
	/*
	 * A share root owns is served read-only: writable, it would give whoever holds the socket
	 * root's write access to that tree, past slated's read-only view of the system
	 * (ProtectSystem=strict). gid 0 goes with uid 0 only.
	 */
	if (q->uid == 0 && !(q->flags & HELPER_SHARE_READONLY))
		return refuse(-EPERM, why, len,
		              "SHARE_SERVE: uid 0 may own only a read-only share");
	if (q->gid == 0 && q->uid != 0)
		return refuse(-EPERM, why, len, "SHARE_SERVE: gid 0 serves only root's share");
	if (path_below(q->path, state_dir))
		return refuse(-EPERM, why, len, "SHARE_SERVE: %s is slated's own state (%s)",
		              q->path, state_dir);
	return 0;
}

static int check_share_stop(const struct helper_request *q, size_t n_fds, char *why, size_t len)
{
	if (n_fds != 0)
		return refuse(-EINVAL, why, len, "SHARE_STOP takes no file descriptor, got %zu",
		              n_fds);
	if (q->flags || q->uid || q->gid || q->path[0])
		return refuse(
		        -EINVAL, why, len,
		        "SHARE_STOP takes only pid and start: flags, uid, gid and path must be "
		        "empty");
	if (q->pid <= 1)
		return refuse(-EPERM, why, len, "SHARE_STOP: pid %d is not a virtiofsd",
		              (int)q->pid);
	if (q->start == 0)
		return refuse(-EINVAL, why, len, "SHARE_STOP: no start time");
	return 0;
}

int helper_request_check(const void *msg, size_t len, const struct helper_fd_info *fds,
                         size_t n_fds, const char *state_dir, char *why, size_t why_len)
{
	struct helper_request copy;
	const struct helper_request *q = &copy;
	const char *name;

	if (!msg || len != sizeof(*q))
		return refuse(-EINVAL, why, why_len, "a request is %zu bytes, not %zu", sizeof(*q),
		              len);
	/* The bytes may sit anywhere (a fuzzer's buffer, a message at an odd offset): the fields
	 * are read from an aligned copy. */
	memcpy(&copy, msg, sizeof(copy));
	if (q->magic != HELPER_MAGIC)
		return refuse(-EINVAL, why, why_len, "bad magic 0x%08x", q->magic);
	if (q->version != HELPER_VERSION)
		return refuse(-EINVAL, why, why_len, "protocol version %u, this helper speaks %u",
		              q->version, HELPER_VERSION);
	name = helper_op_name(q->op);
	if (!name)
		return refuse(-EINVAL, why, why_len, "unknown op %u", q->op);
	if (n_fds > HELPER_FDS_MAX || (n_fds && !fds))
		return refuse(-EINVAL, why, why_len, "%s: too many file descriptors", name);
	if (!string_field_ok(q->path, sizeof(q->path)))
		return refuse(-EINVAL, why, why_len, "%s: path is not a NUL-terminated string",
		              name);
	if (q->op != HELPER_SHARE_STOP && !helper_path_ok(q->path))
		return refuse(-EINVAL, why, why_len,
		              "%s: path must be absolute and plain (no '.', '..', '//', trailing "
		              "'/' or control characters)",
		              name);

	switch (q->op) {
	case HELPER_POOL_MOUNT:
	case HELPER_POOL_UNMOUNT:
		return check_pool(q, n_fds, state_dir, why, why_len);
	case HELPER_SHARE_SERVE:
		return check_share_serve(q, fds, n_fds, state_dir, why, why_len);
	case HELPER_SHARE_STOP:
		return check_share_stop(q, n_fds, why, why_len);
	}
	return refuse(-EINVAL, why, why_len, "unknown op %u", q->op);
}

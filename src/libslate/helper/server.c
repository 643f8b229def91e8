/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helper/proto.h"
#include "helper/server.h"
#include "storage/pool.h"
#include "util/error.h"
#include "util/log.h"
#include "util/macro.h"
#include "vm/virtiofs.h"

/* Room for more fds than any request may carry, so that a request with too many is seen (and
 * refused) rather than cut short by the kernel. */
#define RECV_FDS_MAX 8
#define CONNECTIONS_MAX 16

static void reply_set(struct helper_reply *reply, int status, const char *fmt, ...) _printf_(3, 4);
static void reply_set(struct helper_reply *reply, int status, const char *fmt, ...)
{
	va_list ap;

	reply->status = status;
	if (!fmt)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(reply->message, sizeof(reply->message), fmt, ap);
	va_end(ap);
}

/* The reply for a failure r that err may say more about. */
static void reply_err(struct helper_reply *reply, int r, const struct slate_error *err)
{
	reply_set(reply, r, "%s", err->msg[0] ? err->msg : slate_strerror(r));
}

/* Opens the state directory and checks that its path still names it, canonically. */
static int open_state_dir(const struct helper_server *s, struct helper_reply *reply)
{
	_cleanup_free_ char *real = realpath(s->state_dir, NULL);
	int fd;

	if (!real || !streq(real, s->state_dir)) {
		reply_set(reply, real ? -EINVAL : -errno, "the state directory %s %s", s->state_dir,
		          real ? "is not canonical (a symlink on the way?)" : "cannot be resolved");
		return -1;
	}
	fd = open(s->state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		reply_set(reply, -errno, "cannot open %s: %s", s->state_dir, strerror(errno));
	return fd;
}

/* pool.img is slated's own file: root's, written by nobody else, one name. A file anyone else
 * could write (or a hard link to some other file) is not mounted. */
static int check_pool_image(int state_fd, const char *state_dir, struct helper_reply *reply)
{
	struct stat st;

	if (fstatat(state_fd, POOL_IMAGE, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0
		                       : (reply_set(reply, -errno, "%s/%s: %s", state_dir,
		                                    POOL_IMAGE, strerror(errno)),
		                          -errno);
	if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) || st.st_nlink != 1) {
		reply_set(
		        reply, -EPERM,
		        "%s/%s must be a regular file of root's, written by nobody else, with one "
		        "link",
		        state_dir, POOL_IMAGE);
		return -EPERM;
	}
	return 0;
}

static void do_pool(const struct helper_server *s, const struct helper_request *q,
                    struct helper_reply *reply)
{
	_cleanup_close_ int state_fd = -1;
	struct slate_error err = {0};
	int r;

	state_fd = open_state_dir(s, reply);
	if (state_fd < 0)
		return;
	if (q->op == HELPER_POOL_MOUNT) {
		if (check_pool_image(state_fd, s->state_dir, reply) < 0)
			return;
		r = pool_mount_here(state_fd, s->state_dir, &err);
	} else
		r = pool_unmount_here(state_fd, s->state_dir, &err);
	if (r < 0)
		return reply_err(reply, r, &err);
	reply->value = r;
	reply_set(reply, 0,
	          q->op == HELPER_POOL_MOUNT ? (r ? "attached and mounted %s/pool.img on %s/pool"
	                                          : "%s/pool is mounted already (%s)")
	          : r                        ? "unmounted the pool of %s (%s/pool)"
	                                     : "no pool is mounted in %s (%s/pool)",
	          s->state_dir, s->state_dir);
}

static void do_share_serve(const struct helper_server *s, const struct helper_request *q,
                           const int *fds, size_t n_fds, struct helper_reply *reply)
{
	_cleanup_close_ int dir_fd = -1;
	struct virtiofs_spec spec = {0};
	struct slate_error err = {0};
	uint64_t start = 0;
	pid_t pid = 0;
	int r;

	r = virtiofs_share_open(q->path, (uid_t)q->uid, &dir_fd, &err);
	if (r < 0)
		return reply_err(reply, r, &err);
	spec = (struct virtiofs_spec){
	        .dir_fd = dir_fd,
	        .listen_fd = fds[0],
	        .uid = (uid_t)q->uid,
	        .gid = (gid_t)q->gid,
	        /* The guest's view of the owner is slate's, fixed here, never a request's. */
	        .guest_uid = VIRTIOFS_GUEST_UID,
	        .guest_gid = VIRTIOFS_GUEST_GID,
	        .readonly = q->flags & HELPER_SHARE_READONLY,
	        .binary = s->virtiofsd,
	        .log_fd = n_fds > 1 ? fds[1] : -1,
	};
	r = virtiofs_spawn(&spec, &pid, &start, &err);
	if (r < 0)
		return reply_err(reply, r, &err);
	reply->value = (int32_t)pid;
	reply->start = start;
	reply_set(reply, 0, "virtiofsd %d serves %s as %u:%u%s", (int)pid, q->path,
	          (unsigned)q->uid, (unsigned)q->gid, spec.readonly ? ", read-only" : "");
}

/* Reads the comm of pid from /proc. Returns 0, or -ESRCH when it is gone. */
static int proc_comm(pid_t pid, char *comm, size_t len)
{
	char path[64];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	(void)snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, comm, len - 1);
	if (n <= 0)
		return -ESRCH;
	comm[n] = '\0';
	comm[strcspn(comm, "\n")] = '\0';
	return 0;
}

/* Whether pid runs in another user namespace than this process: virtiofs_spawn() always starts
 * virtiofsd in one of its own. Readable here: the helper (root) owns those namespaces. */
static int proc_other_userns(pid_t pid)
{
	char path[64], theirs[64], ours[64];
	ssize_t a, b;

	(void)snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	a = readlink(path, theirs, sizeof(theirs) - 1);
	if (a < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	b = readlink("/proc/self/ns/user", ours, sizeof(ours) - 1);
	if (b < 0)
		return -errno;
	theirs[a] = ours[b] = '\0';
	return !streq(theirs, ours);
}

/*
 * SHARE_STOP kills only what SHARE_SERVE starts: a process named after the virtiofsd binary
 * (its comm, as exec made it), in a user namespace of its own, in a process group other than
 * the helper's (virtiofs_kill() kills the group), at the given start time. The helper has
 * CAP_KILL; slated has not, and must not get a way to kill anyone through it.
 */
static void do_share_stop(const struct helper_server *s, const struct helper_request *q,
                          struct helper_reply *reply)
{
	const char *bin = s->virtiofsd ? s->virtiofsd : VIRTIOFSD_DEFAULT;
	const char *base = strrchr(bin, '/') ? strrchr(bin, '/') + 1 : bin;
	char comm[64] = "", want[16];
	int r;

	/* The kernel keeps 15 bytes of the name. */
	memcpy(want, base, strnlen(base, sizeof(want) - 1));
	want[strnlen(base, sizeof(want) - 1)] = '\0';
	r = proc_comm((pid_t)q->pid, comm, sizeof(comm));
	if (r >= 0)
		r = proc_other_userns((pid_t)q->pid);
	if (r < 0)
		return reply_set(reply, r, "process %d: %s", (int)q->pid,
		                 r == -ESRCH ? "gone" : strerror(-r));
	if (!streq(comm, want) || r == 0)
		return reply_set(reply, -EPERM,
		                 "process %d (%s%s) is not a virtiofsd this helper started",
		                 (int)q->pid, comm, r == 0 ? ", in the host's user namespace" : "");
	/* virtiofs_kill() kills the process group (virtiofsd and its sandbox): never ours. */
	if (getpgid((pid_t)q->pid) == getpgid(0))
		return reply_set(reply, -EPERM, "process %d is in the helper's own process group",
		                 (int)q->pid);
	r = virtiofs_kill((pid_t)q->pid, q->start);
	if (r < 0)
		return reply_set(reply, r, "virtiofsd %d: %s", (int)q->pid,
		                 r == -ESRCH ? "gone (or another process now)" : strerror(-r));
	reply_set(reply, 0, "stopped virtiofsd %d", (int)q->pid);
}

static void fd_info(int fd, struct helper_fd_info *ret)
{
	struct stat st;
	socklen_t sl;
	int v, fl;

	memset(ret, 0, sizeof(*ret));
	if (fstat(fd, &st) < 0)
		return;
	ret->mode = st.st_mode & S_IFMT;
	fl = fcntl(fd, F_GETFL);
	ret->writable = fl >= 0 && ((fl & O_ACCMODE) == O_WRONLY || (fl & O_ACCMODE) == O_RDWR);
	if (!S_ISSOCK(st.st_mode))
		return;
	ret->is_socket = true;
	sl = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &sl) == 0)
		ret->domain = v;
	sl = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &sl) == 0)
		ret->type = v;
	sl = sizeof(v);
	ret->listening = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &sl) == 0 && v;
}

void helper_handle(const struct helper_server *s, const void *msg, size_t len, const int *fds,
                   size_t n_fds, struct helper_reply *reply)
{
	struct helper_fd_info info[HELPER_FDS_MAX];
	const struct helper_request *q = msg;
	char why[HELPER_MESSAGE_MAX];
	int r;

	memset(reply, 0, sizeof(*reply));
	reply->magic = HELPER_MAGIC;
	reply->version = HELPER_VERSION;
	if (msg && len >= offsetof(struct helper_request, flags))
		reply->op = q->op;
	for (size_t i = 0; i < n_fds && i < HELPER_FDS_MAX; i++)
		fd_info(fds[i], &info[i]);
	r = helper_request_check(msg, len, info, n_fds, s->state_dir, why, sizeof(why));
	if (r < 0) {
		log_warning("refused a request: %s", why);
		return reply_set(reply, r, "refused: %s", why);
	}
	switch (q->op) {
	case HELPER_POOL_MOUNT:
	case HELPER_POOL_UNMOUNT:
		do_pool(s, q, reply);
		break;
	case HELPER_SHARE_SERVE:
		do_share_serve(s, q, fds, n_fds, reply);
		break;
	case HELPER_SHARE_STOP:
		do_share_stop(s, q, reply);
		break;
	}
	if (reply->status < 0)
		log_warning("%s: %s", helper_op_name(q->op), reply->message);
	else
		log_info("%s: %s", helper_op_name(q->op), reply->message);
}

int helper_peer_is_root(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	return cred.uid == 0 ? 0 : -EPERM;
}

static int send_reply(int fd, const struct helper_reply *reply)
{
	ssize_t n = send(fd, reply, sizeof(*reply), MSG_NOSIGNAL);

	if (n < 0)
		return -errno;
	return (size_t)n == sizeof(*reply) ? 0 : -EIO;
}

/* The one answer a peer that is not root gets, whatever it sends. */
static int refuse_peer(int fd)
{
	struct helper_reply reply = {.magic = HELPER_MAGIC, .version = HELPER_VERSION};
	struct ucred cred = {0};
	socklen_t len = sizeof(cred);

	(void)getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
	log_warning("refused a connection from uid %u (pid %d): only root may use the helper",
	            (unsigned)cred.uid, (int)cred.pid);
	reply_set(&reply, -EPERM, "refused: only root may use slated-helper");
	return send_reply(fd, &reply);
}

int helper_serve_one(const struct helper_server *s, int fd)
{
	union {
		struct helper_request q;
		char bytes[sizeof(struct helper_request)];
	} buf;
	union {
		struct cmsghdr align;
		char bytes[CMSG_SPACE(sizeof(int) * RECV_FDS_MAX)];
	} control;
	struct iovec iov = {.iov_base = &buf, .iov_len = sizeof(buf)};
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = &control,
	                    .msg_controllen = sizeof(control)};
	struct helper_reply reply;
	int fds[RECV_FDS_MAX];
	size_t n_fds = 0;
	bool bad_control = false;
	ssize_t n;
	int r;

	memset(&buf, 0, sizeof(buf));
	/* MSG_TRUNC: the real length of a message longer than a request, so it can be refused. */
	do
		n = recvmsg(fd, &mh, MSG_TRUNC | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			bad_control = true;
			continue;
		}
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int f;

			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (n_fds < RECV_FDS_MAX)
				fds[n_fds++] = f;
			else
				(void)close(f);
		}
	}
	if (n == 0 && n_fds == 0 && !bad_control)
		return 0; /* end of file: the peer closed its end */

	if (bad_control || (mh.msg_flags & MSG_CTRUNC)) {
		memset(&reply, 0, sizeof(reply));
		reply.magic = HELPER_MAGIC;
		reply.version = HELPER_VERSION;
		reply_set(&reply, -EINVAL, "refused: %s",
		          bad_control ? "only SCM_RIGHTS may come with a request"
		                      : "too many file descriptors");
		log_warning("refused a request: %s", reply.message + strlen("refused: "));
	} else
		helper_handle(s, &buf, (size_t)n, fds, n_fds, &reply);
	for (size_t i = 0; i < n_fds; i++)
		(void)close(fds[i]);
	r = send_reply(fd, &reply);
	return r < 0 ? r : 1;
}

int helper_serve_conn(const struct helper_server *s, int fd)
{
	int r = helper_peer_is_root(fd);

	if (r == -EPERM) {
		(void)refuse_peer(fd);
		return r;
	}
	if (r < 0)
		return r;
	for (;;) {
		r = helper_serve_one(s, fd);
		if (r <= 0)
			return r;
	}
}

int helper_serve_listen(const struct helper_server *s, int listen_fd, int stop_fd)
{
	struct pollfd p[CONNECTIONS_MAX + 2];
	int conns[CONNECTIONS_MAX], keep[CONNECTIONS_MAX];
	size_t n_conns = 0, k;
	int r = 0;

	for (;;) {
		size_t n = 0;

		p[n++] = (struct pollfd){.fd = stop_fd, .events = POLLIN};
		/* A full table stops accepting until a connection ends. */
		p[n++] = (struct pollfd){.fd = n_conns < CONNECTIONS_MAX ? listen_fd : -1,
		                         .events = POLLIN};
		for (size_t i = 0; i < n_conns; i++)
			p[n++] = (struct pollfd){.fd = conns[i], .events = POLLIN};
		if (poll(p, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (p[0].revents)
			break;
		k = 0;
		for (size_t i = 2; i < n; i++) {
			if (p[i].revents && helper_serve_one(s, p[i].fd) <= 0) {
				(void)close(p[i].fd);
				continue;
			}
			keep[k++] = p[i].fd;
		}
		if (p[1].revents & POLLIN) {
			int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0 && helper_peer_is_root(c) < 0) {
				(void)refuse_peer(c);
				(void)close(c);
			} else if (c >= 0)
				keep[k++] = c;
		}
		memcpy(conns, keep, k * sizeof(int));
		n_conns = k;
	}
	for (size_t i = 0; i < n_conns; i++)
		(void)close(conns[i]);
	return r;
}

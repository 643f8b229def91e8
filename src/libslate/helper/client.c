/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helper/client.h"
#include "helper/proto.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/macro.h"

#ifndef SLATE_LIBEXEC_DIR
#define SLATE_LIBEXEC_DIR "/usr/libexec/slate"
#endif
#define HELPER_BINARY "slated-helper"
/* The fd a spawned helper finds its end of the socketpair on. */
#define HELPER_CHILD_FD 3
/*
 * How long a reply may take. Mounting a large pool takes seconds; a helper that has not
 * answered in this time is not coming (a socket-activated helper.service that failed to start
 * leaves the connection waiting in the listening socket's backlog forever).
 */
#define HELPER_REPLY_TIMEOUT_S 120

struct helper {
	pthread_mutex_t lock;
	int fd;     /* -1 while not connected (path mode reconnects) */
	char *path; /* the socket of a helper of its own, or NULL for a spawned one */
	pid_t pid;  /* the spawned helper, or 0 */
	char desc[PATH_MAX + 32];
};

static int set_reply_timeout(int fd)
{
	struct timeval tv = {.tv_sec = HELPER_REPLY_TIMEOUT_S};

	return RET_NERRNO(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
}

static bool is_executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int helper_find_binary(char **ret)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		char *slash;

		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			_cleanup_free_ char *p = NULL;

			*slash = '\0';
			p = fs_path_join(self, HELPER_BINARY);
			if (!p)
				return -ENOMEM;
			if (is_executable(p)) {
				*ret = TAKE_PTR(p);
				return 0;
			}
		}
	}
	if (is_executable(SLATE_LIBEXEC_DIR "/" HELPER_BINARY)) {
		*ret = strdup(SLATE_LIBEXEC_DIR "/" HELPER_BINARY);
		return *ret ? 0 : -ENOMEM;
	}
	return -ENOENT;
}

static struct helper *helper_new(void)
{
	struct helper *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	(void)pthread_mutex_init(&h->lock, NULL);
	h->fd = -1;
	return h;
}

void helper_free(struct helper *h)
{
	if (!h)
		return;
	(void)safe_close(h->fd);
	/* A spawned helper exits at end of file; reap it unless it is no child of ours any more
	 * (slated detached after spawning it). */
	if (h->pid > 0)
		(void)waitpid(h->pid, NULL, 0);
	(void)pthread_mutex_destroy(&h->lock);
	free(h->path);
	free(h);
}

const char *helper_describe(const struct helper *h)
{
	return h ? h->desc : "no slated-helper";
}

int helper_spawn(const char *binary, const char *state_dir, const char *log_level,
                 const char *virtiofsd, struct helper **ret)
{
	const char *argv[10];
	size_t n = 0;

	_cleanup_(helper_freep) struct helper *h = NULL;
	int sv[2];
	pid_t pid;

	if (!binary || !state_dir || !ret)
		return -EINVAL;
	h = helper_new();
	if (!h)
		return -ENOMEM;
	argv[n++] = binary;
	argv[n++] = "--state-dir";
	argv[n++] = state_dir;
	argv[n++] = "--fd=" STRINGIFY(HELPER_CHILD_FD);
	if (log_level) {
		argv[n++] = "--log-level";
		argv[n++] = log_level;
	}
	if (virtiofsd) {
		argv[n++] = "--virtiofsd";
		argv[n++] = virtiofsd;
	}
	argv[n] = NULL;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int r = -errno;
		(void)close(sv[0]);
		(void)close(sv[1]);
		return r;
	}
	if (pid == 0) {
		sigset_t none;

		/* Signals slated blocks for sigwait must reach the helper as usual. */
		sigemptyset(&none);
		(void)sigprocmask(SIG_SETMASK, &none, NULL);
		/* Its own process group: a Ctrl-C meant for a slated in the foreground must not end
		 * the helper first (slated still unmounts the pool on its way out). */
		(void)setpgid(0, 0);
		if (dup2(sv[1], HELPER_CHILD_FD) < 0)
			_exit(127);
		(void)execv(binary, (char *const *)argv);
		_exit(127);
	}
	(void)close(sv[1]);
	h->fd = sv[0];
	(void)set_reply_timeout(h->fd);
	h->pid = pid;
	(void)snprintf(h->desc, sizeof(h->desc), "slated-helper (pid %d)", (int)pid);
	*ret = TAKE_PTR(h);
	return 0;
}

static int connect_path(const char *path, int *ret_fd, struct slate_error *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return slate_error_errno(err, -ENAMETOOLONG, "cannot connect to %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return slate_error_errno(err, -errno, "cannot connect to %s", path);
	r = set_reply_timeout(fd);
	if (r < 0)
		return slate_error_errno(err, r, "cannot connect to %s", path);
	/* Whoever listens there is about to mount things for us: it must be root. */
	{
		struct ucred cred;
		socklen_t len = sizeof(cred);

		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
			return slate_error_errno(err, -errno, "cannot connect to %s", path);
		if (cred.uid != 0)
			return slate_error_set(
			        err, -EPERM,
			        "%s is served by uid %u, not root: not a slated-helper", path,
			        (unsigned)cred.uid);
	}
	r = fd;
	fd = -1;
	*ret_fd = r;
	return 0;
}

int helper_connect(const char *path, struct helper **ret, struct slate_error *err)
{
	_cleanup_(helper_freep) struct helper *h = NULL;
	int r;

	if (!path || !ret)
		return slate_error_errno(err, -EINVAL, "cannot connect to a slated-helper");
	h = helper_new();
	if (!h)
		return slate_error_errno(err, -ENOMEM, "cannot connect to %s", path);
	h->path = strdup(path);
	if (!h->path)
		return slate_error_errno(err, -ENOMEM, "cannot connect to %s", path);
	r = connect_path(path, &h->fd, err);
	if (r < 0)
		return r;
	(void)snprintf(h->desc, sizeof(h->desc), "slated-helper at %s", path);
	*ret = TAKE_PTR(h);
	return 0;
}

static int send_request(int fd, const struct helper_request *q, const int *fds, size_t n_fds)
{
	union {
		struct cmsghdr align;
		char bytes[CMSG_SPACE(sizeof(int) * HELPER_FDS_MAX)];
	} control;
	struct iovec iov = {.iov_base = (void *)q, .iov_len = sizeof(*q)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	if (n_fds > HELPER_FDS_MAX)
		return -EINVAL;
	if (n_fds > 0) {
		struct cmsghdr *c;

		memset(&control, 0, sizeof(control));
		mh.msg_control = &control;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	do
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == sizeof(*q) ? 0 : -EIO;
}

static int recv_reply(int fd, unsigned op, struct helper_reply *reply)
{
	ssize_t n;

	do
		n = recv(fd, reply, sizeof(*reply), MSG_TRUNC);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -ETIMEDOUT;
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	if ((size_t)n != sizeof(*reply) || reply->magic != HELPER_MAGIC ||
	    reply->version != HELPER_VERSION || reply->op != op || reply->status > 0)
		return -EPROTO;
	reply->message[sizeof(reply->message) - 1] = '\0';
	return 0;
}

static bool is_disconnect(int r)
{
	return r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN || r == -ECONNREFUSED ||
	       r == -ENOENT;
}

/* One request, one reply. A helper of its own (path) that went away is connected again, and
 * the request sent again, only when it cannot have been received. */
static int call(struct helper *h, struct helper_request *q, const int *fds, size_t n_fds,
                struct helper_reply *reply)
{
	struct slate_error cerr = {0};
	int r;

	if (!h)
		return -ENOTCONN;
	q->magic = HELPER_MAGIC;
	q->version = HELPER_VERSION;
	pthread_mutex_lock(&h->lock);
	for (int attempt = 0;; attempt++) {
		if (h->fd < 0) {
			r = h->path ? connect_path(h->path, &h->fd, &cerr) : -ECONNRESET;
			if (r < 0)
				break;
		}
		r = send_request(h->fd, q, fds, n_fds);
		if (r >= 0 || !h->path || attempt > 0 || !is_disconnect(r))
			break;
		h->fd = safe_close(h->fd);
	}
	if (r >= 0)
		r = recv_reply(h->fd, q->op, reply);
	/* A late or garbled reply would answer the next request: start afresh. */
	if (r < 0 && h->fd >= 0 && (is_disconnect(r) || r == -EPROTO || r == -ETIMEDOUT))
		h->fd = safe_close(h->fd);
	pthread_mutex_unlock(&h->lock);
	if (r < 0 && cerr.msg[0]) {
		/* Connecting again failed: that says it all ("... not a slated-helper"). */
		memset(reply, 0, sizeof(*reply));
		reply->status = r;
		(void)snprintf(reply->message, sizeof(reply->message), "%.1000s", cerr.msg);
	} else if (r < 0) {
		memset(reply, 0, sizeof(*reply));
		reply->status = r;
		(void)snprintf(reply->message, sizeof(reply->message), "%.900s: %s",
		               helper_describe(h),
		               r == -ECONNRESET || r == -EPIPE ? "gone (exited?)"
		               : r == -EPROTO                  ? "malformed reply"
		               : r == -ETIMEDOUT
		                       ? "no answer within " STRINGIFY(HELPER_REPLY_TIMEOUT_S) " s"
		                       : slate_strerror(r));
	}
	return r < 0 ? r : reply->status;
}

static int set_path(struct helper_request *q, const char *path)
{
	if (!path || strlen(path) >= sizeof(q->path))
		return -ENAMETOOLONG;
	memcpy(q->path, path, strlen(path) + 1);
	return 0;
}

static int pool_call(struct helper *h, unsigned op, const char *state_dir, struct slate_error *err)
{
	struct helper_request q = {.op = (uint16_t)op};
	struct helper_reply reply;
	int r;

	r = set_path(&q, state_dir);
	if (r < 0)
		return slate_error_errno(err, r, "%s", state_dir ? state_dir : "(null)");
	r = call(h, &q, NULL, 0, &reply);
	if (r < 0)
		return slate_error_set(err, r, "%s", reply.message);
	return reply.value > 0 ? 1 : 0;
}

int helper_pool_mount(struct helper *h, const char *state_dir, struct slate_error *err)
{
	return pool_call(h, HELPER_POOL_MOUNT, state_dir, err);
}

int helper_pool_unmount(struct helper *h, const char *state_dir, struct slate_error *err)
{
	return pool_call(h, HELPER_POOL_UNMOUNT, state_dir, err);
}

static int privops_mount(void *userdata, const char *state_path, struct slate_error *err)
{
	return helper_pool_mount(userdata, state_path, err);
}

static int privops_unmount(void *userdata, const char *state_path, struct slate_error *err)
{
	return helper_pool_unmount(userdata, state_path, err);
}

void helper_storage_privops(struct helper *h, struct storage_privops *ret)
{
	*ret = (struct storage_privops){
	        .pool_mount = privops_mount, .pool_unmount = privops_unmount, .userdata = h};
}

int helper_share_serve(struct helper *h, const char *path, uid_t uid, gid_t gid, bool readonly,
                       int listen_fd, int log_fd, pid_t *ret_pid, uint64_t *ret_start,
                       struct slate_error *err)
{
	struct helper_request q = {.op = HELPER_SHARE_SERVE,
	                           .uid = (uint32_t)uid,
	                           .gid = (uint32_t)gid,
	                           .flags = readonly ? HELPER_SHARE_READONLY : 0};
	int fds[2] = {listen_fd, log_fd};
	struct helper_reply reply;
	int r;

	r = set_path(&q, path);
	if (r < 0)
		return slate_error_set(err, r, "share path too long");
	r = call(h, &q, fds, log_fd >= 0 ? 2 : 1, &reply);
	if (r < 0)
		return slate_error_set(err, r, "%s", reply.message);
	if (reply.value <= 1)
		return slate_error_set(err, -EPROTO, "%s: no virtiofsd pid in its reply",
		                       helper_describe(h));
	*ret_pid = (pid_t)reply.value;
	*ret_start = reply.start;
	return 0;
}

int helper_share_stop(struct helper *h, pid_t pid, uint64_t start)
{
	struct helper_request q = {.op = HELPER_SHARE_STOP, .pid = (int32_t)pid, .start = start};
	struct helper_reply reply;
	int r = call(h, &q, NULL, 0, &reply);

	if (r < 0 && r != -ESRCH)
		log_debug("SHARE_STOP %d: %s", (int)pid, reply.message);
	return r;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * slated-helper (helper/): every kind of malformed request is refused with the right error and
 * has no effect (nothing mounted, nothing spawned, nothing killed); a peer that is not root is
 * refused; well-formed pool requests mount and unmount a real loop-backed btrfs pool; the client
 * functions drive the real slated-helper binary; storage_open() mounts its pool through it.
 *
 * The request handler runs in a thread of this test over a socketpair (helper_serve_conn), as
 * the real helper runs it. virtiofs_spawn() is wrapped at link time there: the test sees what
 * the helper would start without starting virtiofsd; the real binary (under the bounding set
 * slated-helper.service gives it) starts and stops a real one. Needs root and loop devices
 * (skipped with 77 otherwise). The binary runs in a private mount namespace, so nothing it
 * mounts outlives it.
 */

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "helper/client.h"
#include "helper/proto.h"
#include "helper/server.h"
#include "storage/pool.h"
#include "storage/spawn.h"
#include "storage/storage.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/macro.h"
#include "vm/virtiofs.h"

#define MIB (1024ull * 1024ull)
#define NOBODY 65534

/* ---- wrapped: what the helper would start or kill ---- */

static unsigned n_share_open, n_spawn, n_kill;
static struct virtiofs_spec last_spec;
static pid_t last_kill_pid;
static uint64_t last_kill_start;

int __real_virtiofs_share_open(const char *path, uid_t expect_uid, int *ret_fd,
                               struct slate_error *err);
int __wrap_virtiofs_share_open(const char *path, uid_t expect_uid, int *ret_fd,
                               struct slate_error *err);
int __wrap_virtiofs_share_open(const char *path, uid_t expect_uid, int *ret_fd,
                               struct slate_error *err)
{
	n_share_open++;
	return __real_virtiofs_share_open(path, expect_uid, ret_fd, err);
}

int __wrap_virtiofs_spawn(const struct virtiofs_spec *spec, pid_t *ret_pid, uint64_t *ret_start,
                          struct slate_error *err);
int __wrap_virtiofs_spawn(const struct virtiofs_spec *spec, pid_t *ret_pid, uint64_t *ret_start,
                          struct slate_error *err)
{
	(void)err;
	n_spawn++;
	last_spec = *spec;
	*ret_pid = 4242;
	*ret_start = 777;
	return 0;
}

int __real_virtiofs_kill(pid_t pid, uint64_t start);
int __wrap_virtiofs_kill(pid_t pid, uint64_t start);
int __wrap_virtiofs_kill(pid_t pid, uint64_t start)
{
	n_kill++;
	last_kill_pid = pid;
	last_kill_start = start;
	return __real_virtiofs_kill(pid, start);
}

/* ---- fixture: a state directory with a pool.img, a helper thread ---- */

static char base[512], state[PATH_MAX], share[PATH_MAX];
static struct helper_server srv;
static int conn = -1; /* the test's end */
static pthread_t thread;
static bool thread_running;

static void *serve(void *p)
{
	int fd = (int)(intptr_t)p;

	(void)helper_serve_conn(&srv, fd);
	(void)close(fd);
	return NULL;
}

static void start_server(void)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	conn = sv[0];
	assert_int_equal(pthread_create(&thread, NULL, serve, (void *)(intptr_t)sv[1]), 0);
	thread_running = true;
}

static void stop_server(void)
{
	if (conn >= 0)
		conn = safe_close(conn);
	if (thread_running)
		(void)pthread_join(thread, NULL);
	thread_running = false;
}

static int make_pool_image(const char *dir)
{
	_cleanup_free_ char *img = fs_path_join(dir, POOL_IMAGE), *out = NULL;
	_cleanup_close_ int fd = -1;
	const char *argv[] = {"mkfs.btrfs", "-q", img, NULL};
	int r;

	fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)(256 * MIB)) < 0)
		return -errno;
	r = spawn_run(argv, &out);
	if (r < 0)
		fprintf(stderr, "mkfs.btrfs: %s\n", out ? out : strerror(-r));
	return r;
}

static int group_setup(void **unused)
{
	char tmpl[PATH_MAX];
	const char *tmp = getenv("TMPDIR");
	char *real;

	(void)unused;
	(void)snprintf(tmpl, sizeof(tmpl), "%s/test-helper.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(tmpl))
		return -1;
	real = realpath(tmpl, NULL);
	if (!real)
		return -1;
	(void)snprintf(base, sizeof(base), "%.500s", real);
	free(real);
	(void)snprintf(state, sizeof(state), "%s/state", base);
	(void)snprintf(share, sizeof(share), "%s/share", base);
	if (mkdir(state, 0700) < 0 || mkdir(share, 0755) < 0 || chown(share, NOBODY, NOBODY) < 0)
		return -1;
	{
		char pool[PATH_MAX + 8];
		(void)snprintf(pool, sizeof(pool), "%s/pool", state);
		if (mkdir(pool, 0711) < 0)
			return -1;
	}
	if (make_pool_image(state) < 0)
		return -1;
	srv = (struct helper_server){.state_dir = state};
	return 0;
}

static void umount_below(const char *dir)
{
	for (int i = 0; i < 8; i++) {
		_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
		char line[4096], mp[PATH_MAX], last[PATH_MAX] = "";
		size_t len = strlen(dir);

		if (!f)
			return;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 &&
			    strneq(mp, dir, len) && (mp[len] == '/' || mp[len] == '\0'))
				memcpy(last, mp, sizeof(last));
		if (!last[0])
			return;
		(void)umount2(last, MNT_DETACH);
	}
}

static int group_teardown(void **unused)
{
	(void)unused;
	stop_server();
	if (base[0]) {
		const char *argv[] = {"rm", "-rf", "--one-file-system", base, NULL};
		umount_below(base);
		(void)spawn_run(argv, NULL);
	}
	return 0;
}

static int each_setup(void **unused)
{
	(void)unused;
	n_share_open = n_spawn = n_kill = 0;
	start_server();
	return 0;
}

static int each_teardown(void **unused)
{
	(void)unused;
	stop_server();
	umount_below(state);
	return 0;
}

/* ---- talking to the helper by hand ---- */

static struct helper_request base_request(unsigned op)
{
	struct helper_request q;

	memset(&q, 0, sizeof(q));
	q.magic = HELPER_MAGIC;
	q.version = HELPER_VERSION;
	q.op = (uint16_t)op;
	return q;
}

static void set_path(struct helper_request *q, const char *p)
{
	memset(q->path, 0, sizeof(q->path));
	memcpy(q->path, p, strlen(p));
}

/* Sends len bytes of msg with n fds; returns the reply's status (its message in *msg_out). */
static int exchange(const void *msg, size_t len, const int *fds, size_t n_fds,
                    struct helper_reply *reply)
{
	union {
		struct cmsghdr align;
		char bytes[CMSG_SPACE(sizeof(int) * 16)];
	} control;
	/* A request longer than the struct (the "too long" cases) is sent from a buffer that has
	 * the bytes: the struct, then zeros. */
	static char buf[sizeof(struct helper_request) + 256];
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	assert_true(len <= sizeof(buf));
	memset(buf, 0, sizeof(buf));
	memcpy(buf, msg, len < sizeof(struct helper_request) ? len : sizeof(struct helper_request));

	if (n_fds) {
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
	assert_true(sendmsg(conn, &mh, MSG_NOSIGNAL) == (ssize_t)len);
	n = recv(conn, reply, sizeof(*reply), 0);
	assert_int_equal(n, sizeof(*reply));
	assert_int_equal(reply->magic, HELPER_MAGIC);
	assert_int_equal(reply->version, HELPER_VERSION);
	reply->message[sizeof(reply->message) - 1] = '\0';
	return reply->status;
}

static int request(struct helper_request *q, const int *fds, size_t n_fds,
                   struct helper_reply *reply)
{
	return exchange(q, sizeof(*q), fds, n_fds, reply);
}

static bool pool_mounted(void)
{
	char p[PATH_MAX + 8];
	struct statx stx;

	(void)snprintf(p, sizeof(p), "%s/pool", state);
	if (statx(AT_FDCWD, p, AT_SYMLINK_NOFOLLOW, STATX_TYPE, &stx) < 0)
		return false;
	return (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
	       (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* ---- malformed requests: refused, no effect ---- */

enum fdkind {
	FD_NONE,
	FD_LISTEN_UNIX,    /* what SHARE_SERVE wants */
	FD_PIPE,           /* not a socket */
	FD_UNIX_CONNECTED, /* a stream socket, not listening */
	FD_UNIX_DGRAM,     /* a datagram socket */
	FD_TCP_LISTEN,     /* listening, but not AF_UNIX */
	FD_LOG_READONLY,   /* a log fd open for reading only */
	FD_LOG_FILE,       /* a good log fd */
};

static int make_fd(enum fdkind k)
{
	int sv[2], fd = -1;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct sockaddr_in in = {.sin_family = AF_INET};

	switch (k) {
	case FD_NONE:
		return -1;
	case FD_LISTEN_UNIX:
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		/* autobind: an abstract address of its own */
		assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa_family_t)), 0);
		assert_int_equal(listen(fd, 1), 0);
		return fd;
	case FD_PIPE:
		assert_int_equal(pipe2(sv, O_CLOEXEC), 0);
		(void)close(sv[0]);
		return sv[1];
	case FD_UNIX_CONNECTED:
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		(void)close(sv[1]);
		return sv[0];
	case FD_UNIX_DGRAM:
		return socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	case FD_TCP_LISTEN:
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(bind(fd, (struct sockaddr *)&in, sizeof(in)), 0);
		assert_int_equal(listen(fd, 1), 0);
		return fd;
	case FD_LOG_READONLY:
		return open("/dev/null", O_RDONLY | O_CLOEXEC);
	case FD_LOG_FILE: {
		char p[PATH_MAX + 8];
		(void)snprintf(p, sizeof(p), "%s/log", base);
		return open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	}
	}
	return -1;
}

struct bad {
	const char *name;
	unsigned op;
	const char *path; /* NULL: the state directory */
	void (*mutate)(struct helper_request *q);
	size_t len; /* 0: sizeof(struct helper_request) */
	enum fdkind fds[3];
	int status;
	const char *says;
};

static void m_magic(struct helper_request *q)
{
	q->magic = 0x12345678;
}
static void m_version(struct helper_request *q)
{
	q->version = HELPER_VERSION + 1;
}
static void m_op0(struct helper_request *q)
{
	q->op = 0;
}
static void m_op99(struct helper_request *q)
{
	q->op = 99;
}
static void m_unterminated(struct helper_request *q)
{
	memset(q->path, 'a', sizeof(q->path));
	q->path[0] = '/';
}
static void m_trailing_bytes(struct helper_request *q)
{
	q->path[sizeof(q->path) - 1] = 'x';
}
static void m_flags(struct helper_request *q)
{
	q->flags = 0x1;
}
static void m_uid(struct helper_request *q)
{
	q->uid = 1000;
}
static void m_start(struct helper_request *q)
{
	q->start = 1;
}
static void m_owner(struct helper_request *q)
{
	q->uid = NOBODY;
	q->gid = NOBODY;
}
static void m_owner_flags(struct helper_request *q)
{
	m_owner(q);
	q->flags = 0x2;
}
static void m_owner_pid(struct helper_request *q)
{
	m_owner(q);
	q->pid = 5;
}
static void m_uid0(struct helper_request *q)
{
	q->uid = 0;
	q->gid = NOBODY;
}
static void m_gid0(struct helper_request *q)
{
	q->uid = NOBODY;
	q->gid = 0;
}
static void m_uid_minus1(struct helper_request *q)
{
	q->uid = (uint32_t)-1;
	q->gid = NOBODY;
}
static void m_pid1(struct helper_request *q)
{
	memset(q->path, 0, sizeof(q->path));
	q->pid = 1;
	q->start = 1;
}
static void m_pid0(struct helper_request *q)
{
	memset(q->path, 0, sizeof(q->path));
	q->pid = 0;
	q->start = 1;
}
static void m_nostart(struct helper_request *q)
{
	memset(q->path, 0, sizeof(q->path));
	q->pid = 1234;
}
static void m_stop_path(struct helper_request *q)
{
	q->pid = 1234;
	q->start = 1;
}
static void m_stop_ok(struct helper_request *q)
{
	memset(q->path, 0, sizeof(q->path));
	q->pid = 1234;
	q->start = 1;
}

#define SS HELPER_SHARE_SERVE
#define PM HELPER_POOL_MOUNT
#define PU HELPER_POOL_UNMOUNT
#define ST HELPER_SHARE_STOP
#define SHARE "@share" /* replaced by the share directory */
#define EINV (-EINVAL)
#define EPRM (-EPERM)

static const struct bad bad_requests[] = {
        {"short message", PM, NULL, NULL, 10, {0}, EINV, "bytes"},
        {"long message", PM, NULL, NULL, sizeof(struct helper_request) + 16, {0}, EINV, "bytes"},
        {"bad magic", PM, NULL, m_magic, 0, {0}, EINV, "magic"},
        {"bad version", PM, NULL, m_version, 0, {0}, EINV, "version"},
        {"op 0", PM, NULL, m_op0, 0, {0}, EINV, "unknown op"},
        {"op 99", PM, NULL, m_op99, 0, {0}, EINV, "unknown op"},
        {"unterminated path", PM, NULL, m_unterminated, 0, {0}, EINV, "NUL-terminated"},
        {"bytes after the NUL", PM, NULL, m_trailing_bytes, 0, {0}, EINV, "NUL-terminated"},
        {"relative path", PM, "tmp/state", NULL, 0, {0}, EINV, "absolute and plain"},
        {"empty path", PM, "", NULL, 0, {0}, EINV, "absolute and plain"},
        {"path /", PM, "/", NULL, 0, {0}, EINV, "absolute and plain"},
        {"..", PM, "/tmp/../etc", NULL, 0, {0}, EINV, "absolute and plain"},
        {"trailing ..", PM, "/tmp/..", NULL, 0, {0}, EINV, "absolute and plain"},
        {".", PM, "/tmp/./x", NULL, 0, {0}, EINV, "absolute and plain"},
        {"//", PM, "/tmp//x", NULL, 0, {0}, EINV, "absolute and plain"},
        {"trailing /", PM, "/tmp/x/", NULL, 0, {0}, EINV, "absolute and plain"},
        {"newline", PM, "/tmp/x\ny", NULL, 0, {0}, EINV, "absolute and plain"},
        {"escape", PM, "/tmp/x\033y", NULL, 0, {0}, EINV, "absolute and plain"},
        {"DEL", PM, "/tmp/x\177y", NULL, 0, {0}, EINV, "absolute and plain"},
        {"other state dir", PM, "/var/lib/slate", NULL, 0, {0}, EPRM, "serves the state"},
        {"pool inside the state dir", PM, "@state/pool", NULL, 0, {0}, EPRM, "serves the state"},
        {"unmount another", PU, "/tmp", NULL, 0, {0}, EPRM, "serves the state"},
        {"pool with an fd", PM, NULL, NULL, 0, {FD_PIPE}, EINV, "no file descriptor"},
        {"pool with flags", PM, NULL, m_flags, 0, {0}, EINV, "must be 0"},
        {"pool with a uid", PM, NULL, m_uid, 0, {0}, EINV, "must be 0"},
        {"pool with a start", PU, NULL, m_start, 0, {0}, EINV, "must be 0"},
        {"share without an fd", SS, SHARE, m_owner, 0, {0}, EINV, "listening socket"},
        {"share with 3 fds",
         SS,
         SHARE,
         m_owner,
         0,
         {FD_LISTEN_UNIX, FD_LOG_FILE, FD_LOG_FILE},
         EINV,
         "too many"},
        {"share fd a pipe", SS, SHARE, m_owner, 0, {FD_PIPE}, EINV, "listening AF_UNIX"},
        {"share fd not listening",
         SS,
         SHARE,
         m_owner,
         0,
         {FD_UNIX_CONNECTED},
         EINV,
         "listening AF_UNIX"},
        {"share fd a datagram socket",
         SS,
         SHARE,
         m_owner,
         0,
         {FD_UNIX_DGRAM},
         EINV,
         "listening AF_UNIX"},
        {"share fd AF_INET", SS, SHARE, m_owner, 0, {FD_TCP_LISTEN}, EINV, "listening AF_UNIX"},
        {"share log fd read-only",
         SS,
         SHARE,
         m_owner,
         0,
         {FD_LISTEN_UNIX, FD_LOG_READONLY},
         EINV,
         "log fd"},
        {"share log fd a socket",
         SS,
         SHARE,
         m_owner,
         0,
         {FD_LISTEN_UNIX, FD_LISTEN_UNIX},
         EINV,
         "log fd"},
        {"share unknown flags", SS, SHARE, m_owner_flags, 0, {FD_LISTEN_UNIX}, EINV, "flag bits"},
        {"share with a pid", SS, SHARE, m_owner_pid, 0, {FD_LISTEN_UNIX}, EINV, "must be 0"},
        {"share uid 0 writable",
         SS,
         SHARE,
         m_uid0,
         0,
         {FD_LISTEN_UNIX},
         EPRM,
         "uid 0 may own only a read-only share"},
        {"share gid 0", SS, SHARE, m_gid0, 0, {FD_LISTEN_UNIX}, EPRM, "gid 0 serves only root"},
        {"share uid -1", SS, SHARE, m_uid_minus1, 0, {FD_LISTEN_UNIX}, EPRM, "-1 serve no"},
        {"share relative", SS, "home/u", m_owner, 0, {FD_LISTEN_UNIX}, EINV, "absolute"},
        {"share ..", SS, "/home/u/../../etc", m_owner, 0, {FD_LISTEN_UNIX}, EINV, "absolute"},
        {"share in the state dir",
         SS,
         "@state/pool/workspaces",
         m_owner,
         0,
         {FD_LISTEN_UNIX},
         EPRM,
         "slated's own state"},
        {"share the state dir",
         SS,
         "@state",
         m_owner,
         0,
         {FD_LISTEN_UNIX},
         EPRM,
         "slated's own state"},
        {"stop pid 1", ST, "", m_pid1, 0, {0}, EPRM, "not a virtiofsd"},
        {"stop pid 0", ST, "", m_pid0, 0, {0}, EPRM, "not a virtiofsd"},
        {"stop without a start", ST, "", m_nostart, 0, {0}, EINV, "start time"},
        {"stop with a path", ST, "/tmp", m_stop_path, 0, {0}, EINV, "path must be empty"},
        {"stop with an fd", ST, "", m_stop_ok, 0, {FD_PIPE}, EINV, "no file descriptor"},
};

static void expand(const char *p, char *out, size_t len)
{
	if (!p)
		(void)snprintf(out, len, "%s", state);
	else if (streq(p, SHARE))
		(void)snprintf(out, len, "%s", share);
	else if (strneq(p, "@state", 6))
		(void)snprintf(out, len, "%s%s", state, p + 6);
	else
		(void)snprintf(out, len, "%s", p);
}

static void test_malformed(void **unused)
{
	(void)unused;
	for (size_t i = 0; i < ELEMENTSOF(bad_requests); i++) {
		const struct bad *b = &bad_requests[i];
		struct helper_request q = base_request(b->op);
		struct helper_reply reply;
		char path[PATH_MAX];
		int fds[3];
		size_t n_fds = 0;
		int r;

		expand(b->path, path, sizeof(path));
		set_path(&q, path);
		if (b->mutate)
			b->mutate(&q);
		for (size_t k = 0; k < ELEMENTSOF(b->fds) && b->fds[k] != FD_NONE; k++)
			fds[n_fds++] = make_fd(b->fds[k]);
		r = exchange(&q, b->len ? b->len : sizeof(q), fds, n_fds, &reply);
		for (size_t k = 0; k < n_fds; k++)
			(void)close(fds[k]);
		fprintf(stderr, "  %-28s -> %d %s\n", b->name, r, reply.message);
		if (r != b->status || !strstr(reply.message, b->says) ||
		    !strstr(reply.message, "refused"))
			fail_msg("%s: got %d \"%s\", want %d and \"%s\"", b->name, r, reply.message,
			         b->status, b->says);
		/* No effect: nothing mounted, nothing opened, started or killed. */
		assert_false(pool_mounted());
		assert_int_equal(n_share_open, 0);
		assert_int_equal(n_spawn, 0);
		assert_int_equal(n_kill, 0);
	}
}

/* More fds than any request may carry: the kernel cuts them short, the helper refuses. */
static void test_too_many_fds(void **unused)
{
	struct helper_request q = base_request(HELPER_POOL_MOUNT);
	struct helper_reply reply;
	int fds[12];

	(void)unused;
	set_path(&q, state);
	for (size_t i = 0; i < ELEMENTSOF(fds); i++)
		fds[i] = make_fd(FD_PIPE);
	assert_int_equal(exchange(&q, sizeof(q), fds, ELEMENTSOF(fds), &reply), -EINVAL);
	assert_non_null(strstr(reply.message, "too many file descriptors"));
	for (size_t i = 0; i < ELEMENTSOF(fds); i++)
		(void)close(fds[i]);
	assert_false(pool_mounted());
}

/* A zero-length message reads as end of file: the helper hangs up, having done nothing. */
static void test_empty_message(void **unused)
{
	char c;

	(void)unused;
	assert_int_equal(send(conn, "", 0, MSG_NOSIGNAL), 0);
	assert_int_equal(recv(conn, &c, 1, 0), 0);
	assert_false(pool_mounted());
}

/* A peer that is not root gets one refusal, whatever it sends, and is disconnected. */
struct listener {
	int lfd, stop;
};

static void *serve_listen(void *p)
{
	struct listener *l = p;

	(void)helper_serve_listen(&srv, l->lfd, l->stop);
	return NULL;
}

/*
 * In a child as uid nobody: connect, read the one reply, then try a well-formed POOL_MOUNT.
 * Exits 0 when the reply was -EPERM and the request went nowhere (end of file, or the
 * connection reset). The reply is read first: a request the helper never reads makes the
 * kernel reset the connection when the helper closes it, and the reset would then be reported
 * before the reply.
 */
static int as_nobody(const char *sock)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct helper_request q = base_request(HELPER_POOL_MOUNT);
	struct helper_reply reply;
	int fd;

	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	if (setresgid(NOBODY, NOBODY, NOBODY) < 0 || setgroups(0, NULL) < 0 ||
	    setresuid(NOBODY, NOBODY, NOBODY) < 0)
		return 10;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 11;
	/* A helper that serves us waits for a request instead of refusing: do not wait forever. */
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){.tv_sec = 10},
	                 sizeof(struct timeval));
	if (recv(fd, &reply, sizeof(reply), 0) != sizeof(reply))
		return 12;
	reply.message[sizeof(reply.message) - 1] = '\0';
	fprintf(stderr, "  as uid %d: %d %s\n", NOBODY, reply.status, reply.message);
	if (reply.status != -EPERM || !strstr(reply.message, "only root"))
		return 13;
	set_path(&q, state);
	(void)send(fd, &q, sizeof(q), MSG_NOSIGNAL); /* the helper has hung up: EPIPE */
	if (recv(fd, &reply, sizeof(reply), 0) > 0)
		return 14;
	return 0;
}

static void test_peer_not_root(void **unused)
{
	char sock[PATH_MAX + 16];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct listener l;
	pthread_t t;
	int stop[2], status = -1;
	pid_t pid;

	(void)unused;
	stop_server(); /* a listening socket instead of the socketpair */
	(void)snprintf(sock, sizeof(sock), "%s/helper.sock", base);
	assert_true(strlen(sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	l.lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(l.lfd >= 0);
	(void)unlink(sock);
	assert_int_equal(bind(l.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* Open to everyone here, so that only the helper's own check stands in the way. */
	assert_int_equal(chmod(sock, 0666), 0);
	assert_int_equal(chmod(base, 0755), 0);
	assert_int_equal(listen(l.lfd, 4), 0);
	assert_int_equal(pipe2(stop, O_CLOEXEC), 0);
	l.stop = stop[0];
	assert_int_equal(pthread_create(&t, NULL, serve_listen, &l), 0);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(as_nobody(sock));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_false(pool_mounted());

	/* Root on the same socket is served. */
	{
		_cleanup_(helper_freep) struct helper *h = NULL;
		struct slate_error err = {0};

		assert_int_equal(helper_connect(sock, &h, &err), 0);
		assert_int_equal(helper_pool_mount(h, state, &err), 1);
		assert_true(pool_mounted());
		assert_int_equal(helper_pool_unmount(h, state, &err), 1);
		assert_false(pool_mounted());
	}
	assert_int_equal(write(stop[1], "x", 1), 1);
	assert_int_equal(pthread_join(t, NULL), 0);
	(void)close(stop[0]);
	(void)close(stop[1]);
	(void)close(l.lfd);
	(void)unlink(sock);
}

/* ---- well-formed pool requests on a real loop-backed btrfs ---- */

static bool mount_has_option(const char *mp, const char *opt)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/mounts", "re");
	char line[4096], dev[256], dir[PATH_MAX], type[64], opts[2048];

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%255s %4095s %63s %2047s", dev, dir, type, opts) == 4 &&
		    streq(dir, mp)) {
			char *save = NULL;
			for (char *o = strtok_r(opts, ",", &save); o;
			     o = strtok_r(NULL, ",", &save))
				if (streq(o, opt))
					return true;
		}
	return false;
}

static void test_pool_mount(void **unused)
{
	struct helper_request q = base_request(HELPER_POOL_MOUNT);
	struct helper_reply reply;
	char mp[PATH_MAX + 8];
	struct statvfs sv;
	struct statfs sfs;

	(void)unused;
	(void)snprintf(mp, sizeof(mp), "%s/pool", state);
	set_path(&q, state);
	assert_int_equal(request(&q, NULL, 0, &reply), 0);
	fprintf(stderr, "  POOL_MOUNT: %s\n", reply.message);
	assert_int_equal(reply.value, 1);
	assert_true(pool_mounted());
	assert_int_equal(statfs(mp, &sfs), 0);
	assert_true((unsigned long)sfs.f_type == BTRFS_SUPER_MAGIC);
	assert_int_equal(statvfs(mp, &sv), 0);
	assert_true(sv.f_flag & ST_NOSUID);
	assert_true(sv.f_flag & ST_NODEV);
	assert_true(sv.f_flag & ST_NOEXEC);
	/* slated deletes subvolumes without CAP_SYS_ADMIN. */
	assert_true(mount_has_option(mp, "user_subvol_rm_allowed"));

	/* Again: the mount is checked and kept. */
	assert_int_equal(request(&q, NULL, 0, &reply), 0);
	assert_int_equal(reply.value, 0);

	q.op = HELPER_POOL_UNMOUNT;
	assert_int_equal(request(&q, NULL, 0, &reply), 0);
	assert_int_equal(reply.value, 1);
	assert_false(pool_mounted());
	assert_int_equal(request(&q, NULL, 0, &reply), 0);
	assert_int_equal(reply.value, 0);
}

/* Swaps pool.img (or the pool directory) for something else, asks for POOL_MOUNT, puts it back. */
static void test_pool_refusals(void **unused)
{
	struct helper_request q = base_request(HELPER_POOL_MOUNT);
	struct helper_reply reply;
	char img[PATH_MAX + 16], moved[PATH_MAX + 16], link2[PATH_MAX + 16], pool[PATH_MAX + 8],
	        elsewhere[PATH_MAX + 16];
	int fd;

	(void)unused;
	(void)snprintf(img, sizeof(img), "%s/pool.img", state);
	(void)snprintf(moved, sizeof(moved), "%s/real.img", base);
	(void)snprintf(link2, sizeof(link2), "%s/link.img", base);
	(void)snprintf(pool, sizeof(pool), "%s/pool", state);
	(void)snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", base);
	set_path(&q, state);

	/* pool.img a symlink to the real image. */
	assert_int_equal(rename(img, moved), 0);
	assert_int_equal(symlink(moved, img), 0);
	assert_int_equal(request(&q, NULL, 0, &reply), -EPERM);
	fprintf(stderr, "  pool.img a symlink: %s\n", reply.message);
	assert_false(pool_mounted());
	assert_int_equal(unlink(img), 0);
	assert_int_equal(rename(moved, img), 0);

	/* pool.img with a second name. */
	assert_int_equal(link(img, link2), 0);
	assert_int_equal(request(&q, NULL, 0, &reply), -EPERM);
	fprintf(stderr, "  pool.img with two links: %s\n", reply.message);
	assert_false(pool_mounted());
	assert_int_equal(unlink(link2), 0);

	/* pool.img others may write. */
	assert_int_equal(chmod(img, 0666), 0);
	assert_int_equal(request(&q, NULL, 0, &reply), -EPERM);
	assert_false(pool_mounted());
	assert_int_equal(chmod(img, 0600), 0);

	/* pool.img not root's. */
	assert_int_equal(chown(img, NOBODY, NOBODY), 0);
	assert_int_equal(request(&q, NULL, 0, &reply), -EPERM);
	assert_false(pool_mounted());
	assert_int_equal(chown(img, 0, 0), 0);

	/* The mount point a symlink to another directory: nothing is mounted there. */
	assert_int_equal(mkdir(elsewhere, 0700), 0);
	assert_int_equal(rmdir(pool), 0);
	assert_int_equal(symlink(elsewhere, pool), 0);
	assert_true(request(&q, NULL, 0, &reply) < 0);
	fprintf(stderr, "  pool a symlink: %d %s\n", reply.status, reply.message);
	{
		struct statx stx;
		assert_int_equal(statx(AT_FDCWD, elsewhere, 0, STATX_TYPE, &stx), 0);
		assert_false((stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
		             (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT));
	}
	assert_int_equal(unlink(pool), 0);
	assert_int_equal(rmdir(elsewhere), 0);
	assert_int_equal(mkdir(pool, 0711), 0);

	/* Put back as it was, it mounts again. */
	fd = open(img, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	(void)close(fd);
	assert_int_equal(request(&q, NULL, 0, &reply), 0);
	assert_true(pool_mounted());
	q.op = HELPER_POOL_UNMOUNT;
	assert_int_equal(request(&q, NULL, 0, &reply), 0);
	assert_false(pool_mounted());
}

/* ---- shares: what reaches virtiofs_spawn, and what SHARE_STOP will kill ---- */

static void test_share_serve(void **unused)
{
	struct helper_request q = base_request(HELPER_SHARE_SERVE);
	struct helper_reply reply;
	int fds[2];
	int r;

	(void)unused;
	n_spawn = 0;
	set_path(&q, share);
	q.uid = NOBODY;
	q.gid = NOBODY;
	q.flags = HELPER_SHARE_READONLY;
	fds[0] = make_fd(FD_LISTEN_UNIX);
	fds[1] = make_fd(FD_LOG_FILE);
	r = request(&q, fds, 2, &reply);
	fprintf(stderr, "  SHARE_SERVE: %d %s\n", r, reply.message);
	assert_int_equal(n_share_open, 1);
	assert_int_equal(r, 0);
	assert_int_equal(n_spawn, 1);
	assert_int_equal(reply.value, 4242);
	assert_int_equal(reply.start, 777);
	assert_int_equal(last_spec.uid, NOBODY);
	assert_int_equal(last_spec.gid, NOBODY);
	assert_true(last_spec.readonly);
	assert_true(last_spec.listen_fd >= 0);
	assert_true(last_spec.log_fd >= 0);
	assert_int_equal(last_spec.guest_uid, VIRTIOFS_GUEST_UID);
	assert_int_equal(last_spec.guest_gid, VIRTIOFS_GUEST_GID);

	/* A share of root's, read-only: served as root. */
	{
		char rootshare[PATH_MAX + 16];

		(void)snprintf(rootshare, sizeof(rootshare), "%s/rootshare", base);
		assert_true(mkdir(rootshare, 0755) == 0 || errno == EEXIST);
		set_path(&q, rootshare);
		q.uid = 0;
		q.gid = 0;
		q.flags = HELPER_SHARE_READONLY;
		assert_int_equal(request(&q, fds, 1, &reply), 0);
		assert_int_equal(n_spawn, 2);
		assert_int_equal(last_spec.uid, 0);
		assert_true(last_spec.readonly);
		n_spawn = 1;
		set_path(&q, share);
	}

	/* Another owner than the share's: refused by the walk, nothing started. */
	q.uid = 1000;
	q.gid = 1000;
	assert_int_equal(request(&q, fds, 1, &reply), -EPERM);
	fprintf(stderr, "  SHARE_SERVE as uid 1000: %s\n", reply.message);
	assert_int_equal(n_spawn, 1);
	/* A symlink on the way: refused, nothing started. */
	{
		char link[PATH_MAX + 16];

		(void)snprintf(link, sizeof(link), "%s/link", base);
		assert_int_equal(symlink(share, link), 0);
		set_path(&q, link);
		q.uid = NOBODY;
		q.gid = NOBODY;
		assert_int_equal(request(&q, fds, 1, &reply), -ELOOP);
		fprintf(stderr, "  SHARE_SERVE through a symlink: %s\n", reply.message);
		assert_int_equal(n_spawn, 1);
		assert_int_equal(unlink(link), 0);
	}
	(void)close(fds[0]);
	(void)close(fds[1]);
}

/* A child that names itself comm and runs as uid until killed, in a process group of its own
 * unless own_group is false (then in the test's, which the helper thread shares), and in a user
 * namespace of its own when userns (as virtiofs_spawn() starts virtiofsd). */
static pid_t victim(const char *comm, uid_t uid, bool own_group, bool userns)
{
	int p[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (own_group)
			(void)setpgid(0, 0);
		(void)prctl(PR_SET_NAME, comm, 0, 0, 0);
		if (uid != 0 && (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0))
			_exit(1);
		if (userns && unshare(CLONE_NEWUSER) < 0)
			_exit(1);
		(void)!write(p[1], "r", 1);
		for (;;)
			pause();
	}
	(void)close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	(void)close(p[0]);
	return pid;
}

static bool alive(pid_t pid)
{
	return waitpid(pid, NULL, WNOHANG) == 0;
}

static void test_share_stop(void **unused)
{
	struct helper_request q = base_request(HELPER_SHARE_STOP);
	struct helper_reply reply;
	pid_t a, b, c, d;

	(void)unused;
	/* Not named virtiofsd. */
	a = victim("sleeper", NOBODY, true, true);
	q.pid = a;
	q.start = virtiofs_proc_start_time(a);
	assert_int_equal(request(&q, NULL, 0, &reply), -EPERM);
	fprintf(stderr, "  SHARE_STOP of a sleeper: %s\n", reply.message);
	/* Named virtiofsd, but in the host's user namespace, as no virtiofsd the helper starts. */
	b = victim("virtiofsd", NOBODY, true, false);
	q.pid = b;
	q.start = virtiofs_proc_start_time(b);
	assert_int_equal(request(&q, NULL, 0, &reply), -EPERM);
	fprintf(stderr, "  SHARE_STOP of a virtiofsd in the host's namespace: %s\n", reply.message);
	/* Named virtiofsd, someone else's, but in the helper's own process group: killing the
	 * group would kill the helper (and here the test and make). */
	c = victim("virtiofsd", NOBODY, false, true);
	q.pid = c;
	q.start = virtiofs_proc_start_time(c);
	assert_int_equal(request(&q, NULL, 0, &reply), -EPERM);
	fprintf(stderr, "  SHARE_STOP in the helper's group: %s\n", reply.message);
	assert_int_equal(n_kill, 0);
	assert_true(alive(a));
	assert_true(alive(b));
	assert_true(alive(c));
	/* Named virtiofsd, someone else's, a group of its own, but another start time: the pid
	 * may have been reused. */
	d = victim("virtiofsd", NOBODY, true, true);
	q.pid = d;
	q.start = virtiofs_proc_start_time(d) + 1;
	assert_int_equal(request(&q, NULL, 0, &reply), -ESRCH);
	assert_true(alive(d));
	/* The right start time: stopped. */
	q.start = virtiofs_proc_start_time(d);
	assert_int_equal(request(&q, NULL, 0, &reply), 0);
	fprintf(stderr, "  SHARE_STOP of nobody's virtiofsd: %s\n", reply.message);
	assert_int_equal(n_kill, 2);
	assert_int_equal(last_kill_pid, d);
	{
		int status = 0;

		assert_int_equal(waitpid(d, &status, 0), d);
		assert_true(WIFSIGNALED(status));
	}
	{
		const pid_t v[] = {a, b, c};

		for (size_t i = 0; i < ELEMENTSOF(v); i++) {
			(void)kill(v[i], SIGKILL);
			(void)waitpid(v[i], NULL, 0);
		}
	}
}

/* ---- the real binary, through the client functions; storage through it ---- */

/* The real uid of pid, from /proc. */
static int proc_uid(pid_t pid, uid_t *ret)
{
	char path[64], line[256];
	_cleanup_fclose_ FILE *f = NULL;
	unsigned long u;

	(void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid:\t%lu", &u) == 1) {
			*ret = (uid_t)u;
			return 0;
		}
	return -ESRCH;
}

static void test_binary(void **unused)
{
	_cleanup_(helper_freep) struct helper *h = NULL;
	struct slate_error err = {0}, why = {0};
	struct storage_config cfg = {.mode = STORAGE_MODE_POOL};
	struct storage_privops ops;
	struct storage *s = NULL;
	_cleanup_close_ int sfd = -1;
	pid_t pid = 0;
	uint64_t start = 0;
	char wrapper[PATH_MAX];

	(void)unused;
	stop_server();
	/* The helper with the bounding set slated-helper.service gives it, when setpriv is here. */
	(void)snprintf(wrapper, sizeof(wrapper), "%s/helper-wrapper", base);
	{
		_cleanup_fclose_ FILE *f = fopen(wrapper, "we");

		assert_non_null(f);
		fprintf(f, "#!/bin/sh\n");
		if (access("/usr/bin/setpriv", X_OK) == 0)
			fprintf(f, "exec setpriv --bounding-set -all,+sys_admin,+dac_read_search,"
			           "+setuid,+setgid,+setfcap,+kill --inh-caps -all -- ");
		else
			fprintf(f, "exec ");
		fprintf(f, "'%s/slated-helper' \"$@\"\n", TEST_BUILDDIR);
	}
	assert_int_equal(chmod(wrapper, 0700), 0);
	assert_int_equal(helper_spawn(wrapper, state, "debug", NULL, &h), 0);
	fprintf(stderr, "  %s\n", helper_describe(h));
	/* Another state directory is refused, with the helper's message. */
	assert_int_equal(helper_pool_mount(h, "/var/lib/slate", &err), -EPERM);
	assert_true(err.msg[0] != '\0');
	fprintf(stderr, "  POOL_MOUNT /var/lib/slate: %s\n", err.msg);
	assert_int_equal(helper_share_stop(h, 1, 1), -EPERM);
	{
		_cleanup_close_ int lfd = make_fd(FD_LISTEN_UNIX);

		assert_int_equal(helper_share_serve(h, state, NOBODY, NOBODY, false, lfd, -1, &pid,
		                                    &start, &why),
		                 -EPERM);
		fprintf(stderr, "  SHARE_SERVE of the state directory: %s\n", why.msg);
		assert_non_null(strstr(why.msg, "slated's own state"));
	}
	/* storage_open() mounts its pool through the helper, and unmounts it through it. */
	helper_storage_privops(h, &ops);
	cfg.privops = &ops;
	sfd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(sfd >= 0);
	assert_int_equal(storage_open(sfd, state, &cfg, &s, &err), 0);
	assert_int_equal(storage_get_kind(s), STORAGE_POOL);
	assert_true(pool_mounted());
	storage_close(s);
	assert_int_equal(storage_pool_unmount(sfd, state, &ops, &err), 1);
	assert_false(pool_mounted());
	assert_int_equal(storage_pool_unmount(sfd, state, &ops, &err), 0);

	/* A real virtiofsd for the share, as its owner, and stopped again. */
	if (access(VIRTIOFSD_DEFAULT, X_OK) < 0) {
		fprintf(stderr, "  no %s: the real share not tried\n", VIRTIOFSD_DEFAULT);
		return;
	}
	{
		_cleanup_close_ int lfd = make_fd(FD_LISTEN_UNIX);
		uid_t uid = 0;

		assert_int_equal(helper_share_serve(h, share, NOBODY, NOBODY, true, lfd, -1, &pid,
		                                    &start, &why),
		                 0);
		fprintf(stderr, "  virtiofsd %d (start %llu) serves %s\n", (int)pid,
		        (unsigned long long)start, share);
		assert_true(pid > 1 && start > 0);
		assert_int_equal(proc_uid(pid, &uid), 0);
		assert_int_equal(uid, NOBODY);
		assert_int_equal(helper_share_stop(h, pid, start), 0);
		for (int i = 0; i < 100 && kill(pid, 0) == 0; i++)
			(void)usleep(20000);
		assert_int_equal(kill(pid, 0), -1);
		assert_int_equal(helper_share_stop(h, pid, start), -ESRCH);
	}
	/* Root's share, read-only: mapping root into virtiofsd's namespace needs CAP_SETFCAP. */
	{
		_cleanup_close_ int lfd = make_fd(FD_LISTEN_UNIX);
		char rootshare[PATH_MAX + 16];

		(void)snprintf(rootshare, sizeof(rootshare), "%s/rootshare", base);
		assert_true(mkdir(rootshare, 0755) == 0 || errno == EEXIST);
		assert_int_equal(
		        helper_share_serve(h, rootshare, 0, 0, false, lfd, -1, &pid, &start, &why),
		        -EPERM);
		assert_int_equal(
		        helper_share_serve(h, rootshare, 0, 0, true, lfd, -1, &pid, &start, &why),
		        0);
		fprintf(stderr, "  virtiofsd %d serves root's %s read-only\n", (int)pid, rootshare);
		assert_int_equal(helper_share_stop(h, pid, start), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_malformed, each_setup, each_teardown),
	        cmocka_unit_test_setup_teardown(test_too_many_fds, each_setup, each_teardown),
	        cmocka_unit_test_setup_teardown(test_empty_message, each_setup, each_teardown),
	        cmocka_unit_test_setup_teardown(test_peer_not_root, each_setup, each_teardown),
	        cmocka_unit_test_setup_teardown(test_pool_mount, each_setup, each_teardown),
	        cmocka_unit_test_setup_teardown(test_pool_refusals, each_setup, each_teardown),
	        cmocka_unit_test_setup_teardown(test_share_serve, each_setup, each_teardown),
	        cmocka_unit_test_setup_teardown(test_share_stop, each_setup, each_teardown),
	        cmocka_unit_test_setup_teardown(test_binary, each_setup, each_teardown),
	};

	log_open("test-helper", LOG_TARGET_STDERR);
	if (getenv("SLATE_DEBUG"))
		log_set_max_level(LOG_DEBUG);
	else
		log_set_max_level(LOG_ERR);
	if (geteuid() != 0) {
		printf("SKIP: the helper tests need root (loop devices, mount, other uids)\n");
		return 77;
	}
	if (access("/dev/loop-control", F_OK) < 0) {
		printf("SKIP: no /dev/loop-control (no loop devices here)\n");
		return 77;
	}
	(void)signal(SIGPIPE, SIG_IGN);
	/* Every mount made here dies with this process, even on a crash. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fprintf(stderr, "no private mount namespace (%s): relying on the teardown\n",
		        strerror(errno));
	return cmocka_run_group_tests_name("helper", tests, group_setup, group_teardown);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Shares served without host root (vm/virtiofs.h): the path walk that refuses a component
 * swapped for a symbolic link and a directory that changed owner, and (as root, with QEMU's
 * virtiofsd installed) a real virtiofsd started as the share's owner in a user namespace of its
 * own, then killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/macro.h"
#include "vm/virtiofs.h"

static char top[64];

static int setup(void **state)
{
	(void)state;
	(void)snprintf(top, sizeof(top), "/tmp/slate-vfs-XXXXXX");
	if (!mkdtemp(top))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	return system(cmd) == 0 ? 0 : -1;
}

static char *at(const char *rel)
{
	static char buf[4][256];
	static int i;
	char *b = buf[i++ % 4];
	(void)snprintf(b, 256, "%s/%s", top, rel);
	return b;
}

static void test_walk(void **state)
{
	struct slate_error err = {0};
	int fd = -1, r;
	struct stat st;

	(void)state;
	assert_int_equal(mkdir(at("a"), 0755), 0);
	assert_int_equal(mkdir(at("a/b"), 0755), 0);
	assert_int_equal(mkdir(at("t"), 0755), 0);
	assert_int_equal(stat(at("a/b"), &st), 0);

	r = virtiofs_share_open(at("a/b"), st.st_uid, &fd, &err);
	assert_int_equal(r, 0);
	assert_true(fd >= 0);
	assert_int_equal(fcntl(fd, F_GETFL) & O_PATH, O_PATH);
	(void)close(fd);
	/* Any owner when none was recorded. */
	assert_int_equal(virtiofs_share_open(at("a/b"), (uid_t)-1, &fd, &err), 0);
	(void)close(fd);

	/* The last component a symlink: refused by name. */
	assert_int_equal(rename(at("a/b"), at("a/b.real")), 0);
	assert_int_equal(symlink(at("t"), at("a/b")), 0);
	fd = -1;
	r = virtiofs_share_open(at("a/b"), st.st_uid, &fd, &err);
	assert_int_equal(r, -ELOOP);
	assert_int_equal(fd, -1);
	assert_non_null(strstr(err.msg, "is now a symbolic link"));
	assert_non_null(strstr(err.msg, at("a/b")));
	assert_int_equal(unlink(at("a/b")), 0);
	assert_int_equal(rename(at("a/b.real"), at("a/b")), 0);

	/* A parent component a symlink (with a b inside its target): refused, naming the parent. */
	assert_int_equal(mkdir(at("t/b"), 0755), 0);
	assert_int_equal(rename(at("a"), at("a.real")), 0);
	assert_int_equal(symlink(at("t"), at("a")), 0);
	r = virtiofs_share_open(at("a/b"), st.st_uid, &fd, &err);
	assert_int_equal(r, -ELOOP);
	assert_non_null(strstr(err.msg, "is now a symbolic link"));
	assert_null(strstr(err.msg, "a/b is now"));
	assert_int_equal(unlink(at("a")), 0);
	assert_int_equal(rename(at("a.real"), at("a")), 0);

	/* A file where the directory was; a missing one; another owner; "..". */
	assert_int_equal(rmdir(at("a/b")), 0);
	fd = open(at("a/b"), O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	(void)close(fd);
	assert_int_equal(virtiofs_share_open(at("a/b"), st.st_uid, &fd, &err), -ENOTDIR);
	assert_non_null(strstr(err.msg, "no longer a directory"));
	assert_int_equal(unlink(at("a/b")), 0);
	assert_int_equal(virtiofs_share_open(at("a/b"), st.st_uid, &fd, &err), -ENOENT);
	assert_int_equal(mkdir(at("a/b"), 0755), 0);
	assert_int_equal(virtiofs_share_open(at("a/b"), st.st_uid + 1, &fd, &err), -EPERM);
	assert_non_null(strstr(err.msg, "now belongs to uid"));
	assert_int_equal(virtiofs_share_open(at("a/../a/b"), st.st_uid, &fd, &err), -EINVAL);
	assert_int_equal(virtiofs_share_open("relative", st.st_uid, &fd, &err), -EINVAL);
}

static void test_start_time_and_kill(void **state)
{
	(void)state;
	assert_true(virtiofs_proc_start_time(getpid()) > 0);
	assert_int_equal(virtiofs_proc_start_time(0x7ffffff0), 0);
	/* Not the recorded process: nothing is killed. */
	assert_int_equal(virtiofs_kill(getpid(), virtiofs_proc_start_time(getpid()) + 1), -ESRCH);
	assert_int_equal(virtiofs_kill(1, 1), -ESRCH);
}

/* Field NAME's third value in /proc/PID/status ("Uid:" -> effective uid as the host sees it). */
static long status_field(pid_t pid, const char *name)
{
	char path[64], line[256];
	long a, b, c = -1;
	FILE *f;

	(void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, name, strlen(name)) == 0 &&
		    sscanf(line + strlen(name), "%ld %ld %ld", &a, &b, &c) == 3)
			break;
	(void)fclose(f);
	return c;
}

static void test_spawn(void **state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct virtiofs_spec spec;
	struct slate_error err = {0};
	char self_ns[64], its_ns[64], path[64];
	int dfd = -1, lfd, r;
	uint64_t start = 0;
	pid_t pid = 0;
	ssize_t n;

	(void)state;
	if (geteuid() != 0 || access(VIRTIOFSD_DEFAULT, X_OK) != 0) {
		skip();
		return;
	}
	assert_int_equal(mkdir(at("owned"), 0755), 0);
	assert_int_equal(chown(at("owned"), 65534, 65534), 0);
	assert_int_equal(virtiofs_share_open(at("owned"), 65534, &dfd, &err), 0);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	(void)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/vfs.sock", top);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	spec = (struct virtiofs_spec){.dir_fd = dfd,
	                              .listen_fd = lfd,
	                              .uid = 65534,
	                              .gid = 65534,
	                              .guest_uid = VIRTIOFS_GUEST_UID,
	                              .guest_gid = VIRTIOFS_GUEST_GID,
	                              .readonly = true,
	                              .log_fd = -1};
	r = virtiofs_spawn(&spec, &pid, &start, &err);
	if (r < 0)
		fail_msg("virtiofs_spawn: %s", err.msg);
	assert_true(pid > 1);
	assert_int_equal(start, virtiofs_proc_start_time(pid));
	/* The owner, not root, and not in our user namespace. */
	assert_int_equal(status_field(pid, "Uid:"), 65534);
	assert_int_equal(status_field(pid, "Gid:"), 65534);
	(void)snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	n = readlink(path, its_ns, sizeof(its_ns) - 1);
	assert_true(n > 0);
	its_ns[n] = '\0';
	n = readlink("/proc/self/ns/user", self_ns, sizeof(self_ns) - 1);
	assert_true(n > 0);
	self_ns[n] = '\0';
	assert_string_not_equal(its_ns, self_ns);
	/* Not our child: it was handed to init. */
	assert_int_equal(kill(pid, 0), 0);
	assert_int_equal(virtiofs_kill(pid, start), 0);
	for (int i = 0; i < 100 && virtiofs_proc_start_time(pid) == start; i++)
		(void)usleep(20000);
	assert_int_not_equal(virtiofs_proc_start_time(pid), start);
	(void)close(lfd);
	(void)close(dfd);

	/* A binary that is not there: the reason comes back, nothing runs. */
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(virtiofs_share_open(at("owned"), 65534, &dfd, &err), 0);
	spec.dir_fd = dfd;
	spec.listen_fd = lfd;
	spec.binary = "/nonexistent/virtiofsd";
	r = virtiofs_spawn(&spec, &pid, &start, &err);
	assert_int_equal(r, -ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent/virtiofsd"));
	(void)close(lfd);
	(void)close(dfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_walk),
	        cmocka_unit_test(test_start_time_and_kill),
	        cmocka_unit_test(test_spawn),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

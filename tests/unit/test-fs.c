/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "scratch.h"
#include "util/buf.h"
#include "util/fs.h"

/*
 * This binary is linked with -Wl,--wrap=openat so a test can pretend the filesystem has no
 * O_TMPFILE and drive fs_write_atomic_at() down its named-temporary path.
 */
int __real_openat(int dirfd, const char *path, int flags, ...);
int __wrap_openat(int dirfd, const char *path, int flags, ...);

static bool no_tmpfile;
static unsigned tmpfile_refused;

int __wrap_openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;

	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (no_tmpfile && (flags & O_TMPFILE) == O_TMPFILE) {
		tmpfile_refused++;
		errno = EOPNOTSUPP;
		return -1;
	}
	return __real_openat(dirfd, path, flags, mode);
}

static int setup_tmpdir(void **state)
{
	struct test_tmpdir *t = test_tmpdir_new("test-fs");

	if (!t)
		return -1;
	no_tmpfile = false;
	tmpfile_refused = 0;
	*state = t;
	return 0;
}

static int rm_rf_at(int parent, const char *name)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *de;

	if (fd < 0)
		return unlinkat(parent, name, 0);
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	while ((de = readdir(d)))
		if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
			(void)rm_rf_at(dirfd(d), de->d_name);
	closedir(d);
	return unlinkat(parent, name, AT_REMOVEDIR);
}

static int teardown_tmpdir(void **state)
{
	struct test_tmpdir *t = *state;

	close(t->fd);
	(void)rm_rf_at(AT_FDCWD, t->path);
	free(t);
	return 0;
}

/* Returns the number of entries in dirfd (subdirectory sub when not NULL) other than . and ..,
 * and fails the test when any of them looks like a temporary file. */
static int count_entries(int dirfd, const char *sub)
{
	int fd = openat(dirfd, sub ? sub : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	int n = 0;
	DIR *d;

	assert_true(fd >= 0);
	d = fdopendir(fd);
	assert_non_null(d);
	while ((de = readdir(d))) {
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (strneq(de->d_name, ".#", 2))
			fail_msg("temporary file left behind: %s", de->d_name);
		n++;
	}
	closedir(d);
	return n;
}

static void assert_file(int dirfd, const char *name, const char *content, mode_t mode)
{
	_cleanup_buf_ struct buf *b = NULL;
	struct stat st;

	assert_int_equal(fs_read_file_at(dirfd, name, 1 << 20, &b), 0);
	assert_int_equal(buf_len(b), strlen(content));
	assert_memory_equal(buf_ptr(b), content, strlen(content));
	assert_int_equal(fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISREG(st.st_mode));
	if ((st.st_mode & 07777) != mode)
		fail_msg("%s: mode %04o, want %04o", name, st.st_mode & 07777, mode);
}

static void test_write_atomic(void **state)
{
	struct test_tmpdir *t = *state;
	static const struct {
		const char *content;
		mode_t mode;
		mode_t umask;
	} steps[] = {
	        {"first version\n", 0644, 022},
	        {"second, longer version\n", 0600, 022},
	        {"", 0640, 077}, /* the umask does not decide the mode */
	        {"x", 0444, 0},
	};

	for (int tmpfile = 1; tmpfile >= 0; tmpfile--) {
		no_tmpfile = !tmpfile;
		for (size_t i = 0; i < ELEMENTSOF(steps); i++) {
			mode_t old = umask(steps[i].umask);
			int r = fs_write_atomic_at(t->fd, "state.json", steps[i].content,
			                           strlen(steps[i].content), steps[i].mode);
			umask(old);
			if (r != 0)
				fail_msg("O_TMPFILE %d, step %zu: %d", tmpfile, i, r);
			assert_file(t->fd, "state.json", steps[i].content, steps[i].mode);
			assert_int_equal(count_entries(t->fd, NULL), 1);
		}
	}
	/* The wrapper really was in the way, so both paths ran. */
	assert_int_equal(tmpfile_refused, ELEMENTSOF(steps));
}

static void test_write_atomic_subdir_and_cwd(void **state)
{
	struct test_tmpdir *t = *state;
	_cleanup_close_ int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	assert_int_equal(mkdirat(t->fd, "sub", 0755), 0);
	assert_int_equal(fs_write_atomic_at(t->fd, "sub/meta.json", "{}", 2, 0600), 0);
	assert_file(t->fd, "sub/meta.json", "{}", 0600);
	assert_int_equal(count_entries(t->fd, "sub"), 1);
	assert_int_equal(fs_write_atomic_at(t->fd, "sub/", "{}", 2, 0600), -EISDIR);

	assert_true(cwd >= 0);
	assert_int_equal(fchdir(t->fd), 0);
	assert_int_equal(fs_write_atomic_at(AT_FDCWD, "cwd-file", "abc", 3, 0600), 0);
	assert_int_equal(fchdir(cwd), 0);
	assert_file(t->fd, "cwd-file", "abc", 0600);
	assert_int_equal(count_entries(t->fd, NULL), 2);
}

/* The rename fails (a directory is in the way): an error, the old state, no temporary file. */
static void test_write_atomic_failure_cleans_up(void **state)
{
	struct test_tmpdir *t = *state;

	assert_int_equal(mkdirat(t->fd, "in-the-way", 0755), 0);
	assert_int_equal(mkdirat(t->fd, "in-the-way/child", 0755), 0);
	for (int tmpfile = 1; tmpfile >= 0; tmpfile--) {
		no_tmpfile = !tmpfile;
		int r = fs_write_atomic_at(t->fd, "in-the-way", "data", 4, 0600);
		if (r != -EISDIR)
			fail_msg("O_TMPFILE %d: got %d, want -EISDIR", tmpfile, r);
		assert_int_equal(count_entries(t->fd, NULL), 1);
		assert_int_equal(count_entries(t->fd, "in-the-way"), 1);
	}
	assert_int_equal(fs_write_atomic_at(t->fd, "missing-dir/x", "d", 1, 0600), -ENOENT);
	assert_int_equal(fs_write_atomic_at(t->fd, "", "d", 1, 0600), -EINVAL);
	assert_int_equal(fs_write_atomic_at(t->fd, "x", NULL, 1, 0600), -EINVAL);
	assert_int_equal(count_entries(t->fd, NULL), 1);
}

/* Temporary names stay within NAME_MAX even for the longest target names. */
static void test_write_atomic_long_name(void **state)
{
	struct test_tmpdir *t = *state;
	char name[256];

	memset(name, 'n', 255);
	name[255] = '\0';
	for (int tmpfile = 1; tmpfile >= 0; tmpfile--) {
		no_tmpfile = !tmpfile;
		assert_int_equal(fs_write_atomic_at(t->fd, name, "v", 1, 0600), 0);
		assert_file(t->fd, name, "v", 0600);
	}
	assert_int_equal(count_entries(t->fd, NULL), 1);
}

static void test_read_file(void **state)
{
	struct test_tmpdir *t = *state;
	_cleanup_buf_ struct buf *b = NULL;
	struct buf *untouched = (struct buf *)state;
	static char big[100000];

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	assert_int_equal(fs_write_atomic_at(t->fd, "big", big, sizeof(big), 0600), 0);
	assert_int_equal(fs_write_atomic_at(t->fd, "empty", "", 0, 0600), 0);

	assert_int_equal(fs_read_file_at(t->fd, "big", sizeof(big), &b), 0);
	assert_int_equal(buf_len(b), sizeof(big));
	assert_memory_equal(buf_ptr(b), big, sizeof(big));
	assert_int_equal(buf_max(b), sizeof(big));

	assert_int_equal(fs_read_file_at(t->fd, "big", sizeof(big) - 1, &untouched), -EFBIG);
	assert_int_equal(fs_read_file_at(t->fd, "missing", 10, &untouched), -ENOENT);
	assert_int_equal(fs_read_file_at(t->fd, ".", 10, &untouched), -EISDIR);
	assert_int_equal(fs_read_file_at(AT_FDCWD, "/dev/null", 10, &untouched), -EBADFD);
	assert_int_equal(fs_read_file_at(t->fd, "", 10, &untouched), -EINVAL);
	assert_ptr_equal(untouched, (struct buf *)state);

	buf_free(b);
	b = NULL;
	assert_int_equal(fs_read_file_at(t->fd, "empty", 0, &b), 0);
	assert_int_equal(buf_len(b), 0);
}

static bool fd_is_cloexec(int fd)
{
	int flags = fcntl(fd, F_GETFD);
	return flags >= 0 && (flags & FD_CLOEXEC);
}

/* Forks a child that tries the same lock; returns its fs_lock_at() result. */
static int lock_in_child(int dirfd, const char *name)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = -1, r = fs_lock_at(dirfd, name, &fd);
		_exit(r == 0 ? 0 : r == -EWOULDBLOCK ? 1 : 2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	switch (WEXITSTATUS(status)) {
	case 0:
		return 0;
	case 1:
		return -EWOULDBLOCK;
	default:
		return -EIO;
	}
}

static void test_lock(void **state)
{
	struct test_tmpdir *t = *state;
	int fd = -1, fd2 = -42, dfd = -1;
	struct stat st;

	assert_int_equal(fs_lock_at(t->fd, "lock", &fd), 0);
	assert_true(fd >= 0);
	assert_true(fd_is_cloexec(fd));
	assert_int_equal(fstatat(t->fd, "lock", &st, 0), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	assert_int_equal(lock_in_child(t->fd, "lock"), -EWOULDBLOCK);
	/* flock() locks belong to the open file: a second open in this process conflicts too. */
	assert_int_equal(fs_lock_at(t->fd, "lock", &fd2), -EWOULDBLOCK);
	assert_int_equal(fd2, -42);

	close(fd);
	assert_int_equal(lock_in_child(t->fd, "lock"), 0);

	/* Locking a directory itself, as workspaces do. */
	assert_int_equal(fs_lock_at(t->fd, ".", &dfd), 0);
	assert_int_equal(lock_in_child(t->fd, "."), -EWOULDBLOCK);
	close(dfd);

	assert_int_equal(symlinkat("lock", t->fd, "link"), 0);
	assert_int_equal(fs_lock_at(t->fd, "link", &fd2), -ELOOP);
	assert_int_equal(fs_lock_at(t->fd, "", &fd2), -EINVAL);
}

static void test_open_dir_and_fsync(void **state)
{
	struct test_tmpdir *t = *state;
	int fd = -1, bad = -42;

	assert_int_equal(mkdirat(t->fd, "d", 0755), 0);
	assert_int_equal(fs_open_dir_at(t->fd, "d", &fd), 0);
	assert_true(fd_is_cloexec(fd));
	assert_true(fcntl(fd, F_GETFL) & O_PATH);
	/* An O_PATH directory fd is good for *at() calls and for fs_fsync_dir(). */
	assert_int_equal(fs_fsync_dir(fd), 0);
	assert_int_equal(fs_write_atomic_at(fd, "f", "x", 1, 0600), 0);
	assert_file(t->fd, "d/f", "x", 0600);
	close(fd);

	assert_int_equal(fs_fsync_dir(t->fd), 0);
	assert_int_equal(fs_fsync_dir(AT_FDCWD), 0);
	assert_int_equal(fs_open_dir_at(t->fd, "d/f", &bad), -ENOTDIR);
	assert_int_equal(fs_open_dir_at(t->fd, "nope", &bad), -ENOENT);
	assert_int_equal(bad, -42);
}

static void test_mkdir_p_and_is_dir(void **state)
{
	struct test_tmpdir *t = *state;
	_cleanup_free_ char *deep = fs_path_join(t->path, "a/b//c/");
	_cleanup_free_ char *file = fs_path_join(t->path, "a/file");
	_cleanup_free_ char *through = fs_path_join(t->path, "a/file/x");
	_cleanup_free_ char *missing = fs_path_join(t->path, "nope");
	struct stat st;

	assert_int_equal(fs_mkdir_p(deep, 0750), 0);
	assert_int_equal(fs_mkdir_p(deep, 0750), 0); /* existing is fine */
	assert_int_equal(fs_is_dir(deep), 1);
	assert_int_equal(fstatat(t->fd, "a/b/c", &st, 0), 0);
	assert_true(S_ISDIR(st.st_mode));

	assert_int_equal(fs_write_atomic_at(t->fd, "a/file", "", 0, 0600), 0);
	assert_int_equal(fs_mkdir_p(file, 0750), -ENOTDIR);
	assert_int_equal(fs_mkdir_p(through, 0750), -ENOTDIR);
	assert_int_equal(fs_mkdir_p("", 0750), -EINVAL);
	assert_int_equal(fs_mkdir_p("/", 0750), 0);

	assert_int_equal(fs_is_dir(t->path), 1);
	assert_int_equal(fs_is_dir(missing), 0);
	assert_int_equal(fs_is_dir(file), -ENOTDIR);
	assert_int_equal(fs_is_dir(through), -ENOTDIR);
}

static void test_path_join(void **state)
{
	static const struct {
		const char *a, *b, *expect;
	} cases[] = {
	        {"a", "b", "a/b"},
	        {"a/", "b", "a/b"},
	        {"a//", "//b", "a/b"},
	        {"/", "b", "/b"},
	        {"/var/lib", "x/y", "/var/lib/x/y"},
	        {"a", "", "a/"},
	        {"", "b", "/b"},
	        {"a", "b/", "a/b/"},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		_cleanup_free_ char *s = fs_path_join(cases[i].a, cases[i].b);
		assert_non_null(s);
		if (!streq(s, cases[i].expect))
			fail_msg("join(\"%s\", \"%s\") = \"%s\", want \"%s\"", cases[i].a,
			         cases[i].b, s, cases[i].expect);
	}
	assert_null(fs_path_join(NULL, "b"));
}

static void test_write_all(void **state)
{
	static char data[256 * 1024];
	int p[2];
	pid_t pid;
	int status;

	memset(data, 'w', sizeof(data));
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	/* More than a pipe holds, so the writer sees short writes while the child drains it. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c[4096];
		size_t total = 0;
		ssize_t n;

		close(p[1]);
		while ((n = read(p[0], c, sizeof(c))) > 0)
			total += (size_t)n;
		_exit(total == sizeof(data) ? 0 : 1);
	}
	close(p[0]);
	assert_int_equal(fs_write_all(p[1], data, sizeof(data)), 0);
	close(p[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	assert_int_equal(fs_write_all(-1, "x", 1), -EBADF);
	assert_int_equal(fs_write_all(-1, "x", 0), 0);
}

/* The fds to keep stay open, every other one from 3 up closes; 0-2 are never touched. */
static void test_close_fds_except(void **state)
{
	int fds[6], status = 0;
	pid_t pid;

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(fds); i++) {
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		assert_true(fds[i] >= 3);
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Unsorted, with a duplicate and a negative one. */
		const int keep[] = {fds[4], fds[1], -1, fds[4], 1};
		int bad = 0;

		fs_close_fds_except(keep, ELEMENTSOF(keep), 1024);
		for (size_t i = 0; i < ELEMENTSOF(fds); i++) {
			bool open_now = fcntl(fds[i], F_GETFD) >= 0;
			bad += open_now != (i == 1 || i == 4);
		}
		bad += fcntl(0, F_GETFD) < 0 || fcntl(1, F_GETFD) < 0 || fcntl(2, F_GETFD) < 0;
		_exit(bad);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	for (size_t i = 0; i < ELEMENTSOF(fds); i++)
		(void)close(fds[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_write_atomic, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_write_atomic_subdir_and_cwd, setup_tmpdir,
	                                        teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_write_atomic_failure_cleans_up, setup_tmpdir,
	                                        teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_write_atomic_long_name, setup_tmpdir,
	                                        teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_read_file, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_lock, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_open_dir_and_fsync, setup_tmpdir,
	                                        teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_mkdir_p_and_is_dir, setup_tmpdir,
	                                        teardown_tmpdir),
	        cmocka_unit_test(test_path_join),
	        cmocka_unit_test(test_write_all),
	        cmocka_unit_test(test_close_fds_except),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

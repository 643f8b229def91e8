/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * spawn_run_confined() (storage/spawn.h; doc/security.md, "Catalog"), the confinement qemu-img runs in when it
 * converts a catalog's qcow2 disk. A shell run confined finds its two files (one read-only, one
 * written through), /dev/null and the system's program directories, and nothing else: no /etc,
 * /var, /proc, /tmp, not the directory its files came from; it can create nothing and mount
 * nothing (no capabilities). The real qemu-img, run confined on a qcow2 whose external data file
 * names a host file full of a marker (the header check skipped), cannot open it, while the same
 * command unconfined copies the marker (the image is a real attack). A process that may not make
 * mount namespaces gets an error naming the step, and the program never runs. No mount leaks
 * into the test's namespace. Needs root (mount namespaces): exit 77 otherwise.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "scratch.h"
#include "storage/spawn.h"
#include "util/macro.h"

#define MARKER "SLATE-SPAWN-HOST-MARKER"

static char tmpdir[256];

static char *path_in(const char *name)
{
	char *p = NULL;

	assert_true(asprintf(&p, "%s/%s", tmpdir, name) > 0);
	return p;
}

static int open_file(const char *name, const char *content, int flags)
{
	_cleanup_free_ char *p = path_in(name);
	int fd = open(p, flags | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	if (content)
		assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	return fd;
}

static bool file_contains(const char *path, const char *needle)
{
	_cleanup_free_ char *buf = NULL;
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	buf = calloc(1, (size_t)st.st_size + 1);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	return memmem(buf, (size_t)st.st_size, needle, strlen(needle)) != NULL;
}

static bool mounts_leaked(void)
{
	return file_contains("/proc/self/mountinfo", "slate-confined");
}

static void test_sees_only_its_files(void **state)
{
	_cleanup_close_ int in = open_file("in", "source", O_RDWR);
	_cleanup_close_ int out = open_file("out", NULL, O_RDWR);
	_cleanup_free_ char *script = NULL, *output = NULL, *in_path = path_in("in");
	_cleanup_free_ char *out_path = path_in("out");
	const struct spawn_file files[] = {{in, "/in", false}, {out, "/out", true}};
	int r;

	(void)state;
	/* Each check says what failed. */
	assert_true(
	        asprintf(&script,
	                 "bad() { echo \"$*\"; exit 1; }; "
	                 "test \"$(cat /in)\" = source || bad cannot read /in; "
	                 "(echo x >/in) 2>/dev/null && bad wrote to the read-only /in; "
	                 "echo written >/out || bad cannot write /out; "
	                 "for e in $(ls -A /); do case $e in "
	                 "bin|dev|etc|in|lib|lib32|lib64|libx32|out|sbin|usr) ;; "
	                 "*) bad \"/$e is there\" ;; esac; done; "
	                 "for p in /etc/passwd /etc/shadow /var /home /root /proc /sys /tmp /run "
	                 "/boot /srv /mnt /opt /work '%s'; do "
	                 "test -e \"$p\" && bad \"$p is there\"; done; "
	                 "test -c /dev/null || bad no /dev/null; "
	                 "test \"$(ls -A /dev)\" = null || bad /dev has more than null; "
	                 "test \"$(ls -A /etc)\" = \"$(ls -A /etc 2>/dev/null | grep -x "
	                 "ld.so.cache)\" "
	                 "|| bad /etc has more than ld.so.cache; "
	                 "mkdir /new 2>/dev/null && bad made a directory in the root; "
	                 "(echo x >/new) 2>/dev/null && bad made a file in the root; "
	                 "if command -v mount >/dev/null; then "
	                 "mount -t tmpfs t /dev 2>/dev/null && bad mounted a tmpfs on /dev; fi; "
	                 "test -x /usr/bin/env || bad no /usr/bin/env; "
	                 "echo done",
	                 tmpdir) > 0);
	{
		const char *argv[] = {"sh", "-c", script, NULL};
		r = spawn_run_confined(argv, files, ELEMENTSOF(files), &output);
	}
	if (r != 0)
		fail_msg("confined sh: %d: %s", r, output ? output : "");
	assert_string_equal(output, "done");
	assert_true(file_contains(out_path, "written\n"));
	assert_true(file_contains(in_path, "source"));
	assert_false(mounts_leaked());
}

static void test_exit_status_and_output(void **state)
{
	_cleanup_free_ char *output = NULL;
	const char *argv[] = {"sh", "-c", "echo oops; exit 3", NULL};

	(void)state;
	assert_int_equal(spawn_run_confined(argv, NULL, 0, &output), -EIO);
	assert_string_equal(output, "oops");
}

/* qemu-img follows an external data file name; confined, there is nothing to follow. */
static void test_qemu_img_data_file(void **state)
{
	_cleanup_free_ char *marker = path_in("host.marker"), *qcow2 = path_in("evil.qcow2");
	_cleanup_free_ char *opt = NULL, *output = NULL, *plain_dst = path_in("plain.raw");
	_cleanup_free_ char *confined_dst = path_in("confined.raw");
	_cleanup_close_ int src = -1, dst = -1, m = -1;
	int r;

	(void)state;
	assert_true(asprintf(&opt, "data_file=%s,data_file_raw=on", marker) > 0);
	{
		const char *argv[] = {"qemu-img", "create", "-q",  "-f", "qcow2",
		                      "-o",       opt,      qcow2, "1M", NULL};
		r = spawn_run(argv, &output);
		if (r == -ENOENT)
			skip();
		if (r < 0)
			fail_msg("qemu-img create: %s", output ? output : "");
	}
	/* The host file: its secret is there before the image arrives (create emptied it). */
	m = open(marker, O_WRONLY | O_TRUNC | O_CLOEXEC);
	assert_true(m >= 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(write(m, MARKER "\n", sizeof(MARKER)), (ssize_t)sizeof(MARKER));

	/* Unconfined (and unchecked): the marker is copied. The image is a real attack. */
	{
		_cleanup_free_ char *spec = NULL;
		const char *argv[] = {"qemu-img", "convert", "-q",      "-O",
		                      "raw",      NULL,      plain_dst, NULL};

		assert_true(asprintf(&spec,
		                     "json:{\"driver\":\"qcow2\",\"backing\":null,\"file\":{"
		                     "\"driver\":\"file\",\"filename\":\"%s\"}}",
		                     qcow2) > 0);
		argv[5] = spec;
		free(output);
		output = NULL;
		r = spawn_run(argv, &output);
		if (r < 0)
			fail_msg("qemu-img convert unconfined: %s", output ? output : "");
		assert_true(file_contains(plain_dst, MARKER));
	}
	/* Confined: the same conversion cannot open the data file. */
	src = open(qcow2, O_RDONLY | O_CLOEXEC);
	dst = open(confined_dst, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(src >= 0 && dst >= 0);
	{
		const struct spawn_file files[] = {{src, "/disk.qcow2", false},
		                                   {dst, "/disk.img", true}};
		const char *argv[] = {"qemu-img",
		                      "convert",
		                      "-q",
		                      "-O",
		                      "raw",
		                      "json:{\"driver\":\"qcow2\",\"backing\":null,\"file\":{"
		                      "\"driver\":\"file\",\"filename\":\"/disk.qcow2\"}}",
		                      "/disk.img",
		                      NULL};

		free(output);
		output = NULL;
		r = spawn_run_confined(argv, files, ELEMENTSOF(files), &output);
	}
	assert_int_equal(r, -EIO);
	assert_non_null(output);
	if (!strstr(output, "Could not open") || !strstr(output, marker))
		fail_msg("unexpected qemu-img output: %s", output);
	assert_false(file_contains(confined_dst, MARKER));
	assert_false(mounts_leaked());
}

static void test_program_outside_system_dirs(void **state)
{
	_cleanup_free_ char *output = NULL, *prog = path_in("tool");
	_cleanup_close_ int fd = open(prog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	const char *argv[] = {prog, NULL};

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "#!/bin/sh\nexit 0\n", 17), 17);
	fd = safe_close(fd);
	assert_int_equal(spawn_run_confined(argv, NULL, 0, &output), -ENOTSUP);
	assert_non_null(strstr(output, "outside the system directories"));
}

static void test_invalid(void **state)
{
	_cleanup_close_ int fd = open_file("x", "x", O_RDWR);
	const char *argv[] = {"true", NULL};
	const char *missing[] = {"slate-no-such-program", NULL};
	static const char *const bad[] = {"x", "/", "/a/b", "/usr", "/lib64", "/dev", "/..", "/."};

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		const struct spawn_file f = {fd, bad[i], false};
		assert_int_equal(spawn_run_confined(argv, &f, 1, NULL), -EINVAL);
	}
	{
		const struct spawn_file f[] = {{fd, "/a", false}, {fd, "/a", true}};
		assert_int_equal(spawn_run_confined(argv, f, 2, NULL), -EINVAL);
	}
	{
		const struct spawn_file f = {-1, "/a", false};
		assert_int_equal(spawn_run_confined(argv, &f, 1, NULL), -EINVAL);
	}
	{
		const struct spawn_file f[5] = {{fd, "/a", false},
		                                {fd, "/b", false},
		                                {fd, "/c", false},
		                                {fd, "/d", false},
		                                {fd, "/e", false}};
		assert_int_equal(spawn_run_confined(argv, f, 5, NULL), -EINVAL);
	}
	assert_int_equal(spawn_run_confined(NULL, NULL, 0, NULL), -EINVAL);
	assert_int_equal(spawn_run_confined(argv, NULL, 1, NULL), -EINVAL);
	assert_int_equal(spawn_run_confined(missing, NULL, 0, NULL), -ENOENT);
}

/* Without CAP_SYS_ADMIN (as under a unit that forbids mount namespaces): an error naming the
 * step, and the program does not run. In a child, which gives its capabilities up. */
static void test_no_namespace_no_run(void **state)
{
	_cleanup_free_ char *ran = path_in("ran");
	pid_t pid;
	int status;

	(void)state;
	(void)unlink(ran);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
		struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3] = {{0}};
		_cleanup_free_ char *script = NULL, *output = NULL;
		_cleanup_close_ int fd = open_file("x", "x", O_RDWR);
		const struct spawn_file f = {fd, "/x", false};
		int r;

		/* Keep CAP_DAC_OVERRIDE so the test directory stays reachable; drop the rest. */
		d[0].effective = d[0].permitted = 1u << CAP_DAC_OVERRIDE;
		if (syscall(SYS_capset, &h, d) < 0)
			_exit(90);
		if (asprintf(&script, "touch '%s'", ran) < 0)
			_exit(91);
		{
			const char *argv[] = {"sh", "-c", script, NULL};

			r = spawn_run_confined(argv, NULL, 0, &output);
			if (r != -EPERM || !output ||
			    !strstr(output, "confining sh: unshare(CLONE_NEWNS): Operation not "
			                    "permitted"))
				_exit(92);
			free(output);
			output = NULL;
			/* With a file, the clone of its mount is refused first. */
			r = spawn_run_confined(argv, &f, 1, &output);
			if (r != -EPERM || !output || !strstr(output, "open_tree /x"))
				_exit(93);
		}
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(access(ran, F_OK), -1);
}

static int setup(void **state)
{
	(void)state;
	return test_mkdtemp(tmpdir, sizeof(tmpdir), "spawn");
}

static int teardown(void **state)
{
	(void)state;
	return test_rmtree(tmpdir);
}

/* Mount namespaces need root (CAP_SYS_ADMIN); a container may refuse them even so. */
static bool namespaces_work(void)
{
	pid_t pid = fork();
	int status;

	if (pid == 0)
		_exit(unshare(CLONE_NEWNS) == 0 ? 0 : 1);
	return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_sees_only_its_files),
	        cmocka_unit_test(test_exit_status_and_output),
	        cmocka_unit_test(test_qemu_img_data_file),
	        cmocka_unit_test(test_program_outside_system_dirs),
	        cmocka_unit_test(test_invalid),
	        cmocka_unit_test(test_no_namespace_no_run),
	};

	if (geteuid() != 0) {
		printf("SKIP: spawn_run_confined() needs root (mount namespaces)\n");
		return 77;
	}
	if (!namespaces_work()) {
		printf("SKIP: this process may not make mount namespaces\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Which user QEMU runs as (qemu.conf) and whether it can reach a directory. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/macro.h"
#include "vm/qemu-user.h"

static char tmp[64];

static int load(const char *conf, struct vm_qemu_user *u)
{
	char path[128];
	FILE *f;

	(void)snprintf(path, sizeof(path), "%s/qemu.conf", tmp);
	f = fopen(path, "we");
	assert_non_null(f);
	fputs(conf, f);
	fclose(f);
	return vm_qemu_user_load("qemu:///system", path, u);
}

static void test_load(void **state)
{
	struct vm_qemu_user u;

	/* libvirt's own syntax; commented lines are the defaults, not settings. */
	assert_int_equal(load("# comment\n#user = \"libvirt-qemu\"\nuser = \"+65534\"\n"
	                      "  group=\"+65534\"  # nobody\n",
	                      &u),
	                 1);
	assert_int_equal(u.uid, 65534);
	assert_int_equal(u.gid, 65534);
	assert_true(u.n_groups >= 1);
	assert_int_equal(u.groups[0], 65534);
	assert_int_equal(load("user = \"root\"\ngroup = \"root\"\n", &u), 1);
	assert_int_equal(u.uid, 0);
	assert_int_equal(u.gid, 0);
	assert_string_equal(u.name, "root");
	assert_int_equal(load("user = \"no-such-user-slate\"\n", &u), -ENOENT);
	assert_int_equal(load("user = \"+0\"\ngroup = \"no-such-group-slate\"\n", &u), -ENOENT);
	assert_int_equal(load("user = root\n", &u), -EINVAL);
	assert_int_equal(load("user = \"\"\n", &u), -EINVAL);
	/* Only qemu:///system runs QEMU as another user. */
	assert_int_equal(vm_qemu_user_load("qemu:///session", "/nonexistent", &u), 0);
	assert_int_equal(vm_qemu_user_load("test:///default", "/nonexistent", &u), 0);
}

static void test_reach(void **state)
{
	struct vm_qemu_user nobody = {.name = "nobody", .uid = 65534, .gid = 65534};
	char a[128], b[128], link[128], msg[1024], want[256];

	nobody.groups[0] = 65534;
	nobody.n_groups = 1;
	(void)snprintf(a, sizeof(a), "%s/a", tmp);
	(void)snprintf(b, sizeof(b), "%s/a/b", tmp);
	(void)snprintf(link, sizeof(link), "%s/link", tmp);
	assert_int_equal(mkdir(a, 0700), 0);
	assert_int_equal(mkdir(b, 0755), 0);
	assert_int_equal(symlink("a/b", link), 0);

	/* A 0700 directory above: which one, which user, and the fix. */
	assert_int_equal(vm_qemu_user_reach(&nobody, b, msg, sizeof(msg)), 1);
	(void)snprintf(want, sizeof(want), "cannot search %s (", a);
	assert_non_null(strstr(msg, want));
	assert_non_null(strstr(msg, "user nobody (uid 65534"));
	assert_non_null(strstr(msg, "mode 0700"));
	(void)snprintf(want, sizeof(want), "'chmod o+x %s'", a);
	assert_non_null(strstr(msg, want));
	/* Through a symbolic link, the real directories are what count. */
	assert_int_equal(vm_qemu_user_reach(&nobody, link, msg, sizeof(msg)), 1);
	assert_int_equal(chmod(a, 0711), 0);
	assert_int_equal(vm_qemu_user_reach(&nobody, b, msg, sizeof(msg)), 0);
	assert_int_equal(vm_qemu_user_reach(&nobody, link, msg, sizeof(msg)), 0);
	assert_int_equal(vm_qemu_user_reach(&nobody, "/", msg, sizeof(msg)), 0);
	assert_true(vm_qemu_user_reach(&nobody, "/nonexistent-slate", msg, sizeof(msg)) == -ENOENT);

	if (geteuid() == 0) {
		/* The owner gets the owner bits only, a member the group bits only (as the
		 * kernel decides), whatever the others may. */
		assert_int_equal(chown(a, 65534, 0), 0);
		assert_int_equal(chmod(a, 0011), 0);
		assert_int_equal(vm_qemu_user_reach(&nobody, b, msg, sizeof(msg)), 1);
		assert_non_null(strstr(msg, "'chmod u+x "));
		assert_int_equal(chown(a, 0, 65534), 0);
		assert_int_equal(chmod(a, 0701), 0);
		assert_int_equal(vm_qemu_user_reach(&nobody, b, msg, sizeof(msg)), 1);
		assert_non_null(strstr(msg, "'chmod g+x "));
		assert_int_equal(chmod(a, 0710), 0);
		assert_int_equal(vm_qemu_user_reach(&nobody, b, msg, sizeof(msg)), 0);
		/* A supplementary group counts too. */
		assert_int_equal(chown(a, 0, 4242), 0);
		assert_int_equal(vm_qemu_user_reach(&nobody, b, msg, sizeof(msg)), 1);
		nobody.groups[nobody.n_groups++] = 4242;
		assert_int_equal(vm_qemu_user_reach(&nobody, b, msg, sizeof(msg)), 0);
	}
	(void)unlink(link);
	(void)rmdir(b);
	(void)rmdir(a);
}

static int setup(void **state)
{
	(void)snprintf(tmp, sizeof(tmp), "/tmp/test-qemu-user.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	/* mkdtemp makes it 0700: nobody must get through to what is below. */
	return chmod(tmp, 0755);
}

static int teardown(void **state)
{
	char path[128];

	(void)snprintf(path, sizeof(path), "%s/qemu.conf", tmp);
	(void)unlink(path);
	return rmdir(tmp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_load),
	        cmocka_unit_test(test_reach),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}

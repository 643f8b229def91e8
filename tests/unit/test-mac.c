/* SPDX-License-Identifier: GPL-2.0-or-later */

/* The MAC registry: unique reservations, freeing, persistence, concurrency, corrupt files. */

#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "scratch.h"
#include "util/error.h"
#include "util/fs.h"
#include "workspace/mac.h"

static int setup_tmpdir(void **state)
{
	*state = test_tmpdir_new("test-mac");
	return *state ? 0 : -1;
}

static int teardown_tmpdir(void **state)
{
	struct test_tmpdir *t = *state;
	DIR *d = fdopendir(dup(t->fd));
	struct dirent *de;

	/* Flat: the registry, its lock and maybe a temporary file. */
	while (d && (de = readdir(d)))
		if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
			(void)unlinkat(t->fd, de->d_name, 0);
	if (d)
		closedir(d);
	close(t->fd);
	(void)rmdir(t->path);
	free(t);
	return 0;
}

static void test_mac_check(void **state)
{
	static const struct {
		const char *mac;
		int want;
	} cases[] = {
	        {"52:54:00:00:00:00", 0},
	        {"52:54:00:ab:cd:ef", 0},
	        {"52:54:00:AB:cd:ef", -EINVAL}, /* lowercase only: one spelling per address */
	        {"52:54:01:ab:cd:ef", -EINVAL},
	        {"52:54:00:ab:cd:e", -EINVAL},
	        {"52:54:00:ab:cd:eff", -EINVAL},
	        {"52:54:00:ab-cd:ef", -EINVAL},
	        {"52:54:00:ab:cd:eg", -EINVAL},
	        {"", -EINVAL},
	        {NULL, -EINVAL},
	};

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		if (mac_check(cases[i].mac) != cases[i].want)
			fail_msg("mac_check(%s) != %d", cases[i].mac ? cases[i].mac : "NULL",
			         cases[i].want);
}

static void assert_registry_unique(const struct mac_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(mac_check(e[i].mac), 0);
		if (i > 0 && strcmp(e[i - 1].mac, e[i].mac) >= 0)
			fail_msg("registry not sorted/unique at %zu: %s %s", i, e[i - 1].mac,
			         e[i].mac);
	}
}

#define N_RESERVE 400

static void test_reserve_unique(void **state)
{
	struct test_tmpdir *t = *state;
	char(*macs)[MAC_STRLEN + 1] = calloc(N_RESERVE, sizeof(*macs));
	struct mac_entry *e = NULL;
	size_t n = 0;

	assert_non_null(macs);
	for (int i = 0; i < N_RESERVE; i++) {
		char name[32];
		uint8_t first;

		snprintf(name, sizeof(name), "ws-%d", i);
		assert_int_equal(mac_reserve(t->fd, name, macs[i]), 0);
		assert_int_equal(mac_check(macs[i]), 0);
		/* Locally administered, unicast. */
		first = (uint8_t)strtoul(macs[i], NULL, 16);
		assert_true(first & 0x02);
		assert_false(first & 0x01);
	}
	assert_int_equal(mac_list(t->fd, &e, &n), 0);
	assert_int_equal(n, N_RESERVE);
	assert_registry_unique(e, n);
	/* Every handed-out address is in the registry under its own name. */
	for (int i = 0; i < N_RESERVE; i++) {
		char name[32];
		bool found = false;

		snprintf(name, sizeof(name), "ws-%d", i);
		for (size_t j = 0; j < n; j++)
			if (streq(e[j].mac, macs[i])) {
				assert_string_equal(e[j].name, name);
				found = true;
			}
		assert_true(found);
	}
	mac_list_free(e, n);
	free(macs);
}

static void test_reserve_bad_name(void **state)
{
	struct test_tmpdir *t = *state;
	char mac[MAC_STRLEN + 1] = "untouched";

	assert_int_equal(mac_reserve(t->fd, "Bad_Name", mac), -EINVAL);
	assert_int_equal(mac_reserve(t->fd, "", mac), -EINVAL);
	assert_string_equal(mac, "untouched");
	assert_int_equal(faccessat(t->fd, MAC_REGISTRY_FILE, F_OK, 0), -1);
}

static void test_release(void **state)
{
	struct test_tmpdir *t = *state;
	char a[MAC_STRLEN + 1], b[MAC_STRLEN + 1];
	struct mac_entry *e = NULL;
	size_t n = 0;

	assert_int_equal(mac_reserve(t->fd, "alpha", a), 0);
	assert_int_equal(mac_reserve(t->fd, "beta", b), 0);
	assert_string_not_equal(a, b);

	/* Only its holder frees it. */
	assert_int_equal(mac_release(t->fd, a, "beta"), 0);
	assert_int_equal(mac_release(t->fd, a, "alpha"), 1);
	assert_int_equal(mac_release(t->fd, a, "alpha"), 0);
	assert_int_equal(mac_release(t->fd, "52:54:00:zz:00:00", NULL), -EINVAL);

	assert_int_equal(mac_list(t->fd, &e, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(e[0].mac, b);
	assert_string_equal(e[0].name, "beta");
	mac_list_free(e, n);

	/* NULL frees whoever holds it. */
	assert_int_equal(mac_release(t->fd, b, NULL), 1);
	assert_int_equal(mac_list(t->fd, &e, &n), 0);
	assert_int_equal(n, 0);
	mac_list_free(e, n);
}

static void test_claim(void **state)
{
	struct test_tmpdir *t = *state;
	const char *m = "52:54:00:01:02:03";
	char other[MAC_STRLEN + 1];

	assert_int_equal(mac_claim(t->fd, m, "alpha"), 0);
	assert_int_equal(mac_claim(t->fd, m, "alpha"), 0);
	assert_int_equal(mac_claim(t->fd, m, "beta"), -EADDRINUSE);
	assert_int_equal(mac_claim(t->fd, "00:11:22:33:44:55", "beta"), -EINVAL);
	/* A claimed address is never handed out again. */
	for (int i = 0; i < 200; i++) {
		assert_int_equal(mac_reserve(t->fd, "gamma", other), 0);
		assert_string_not_equal(other, m);
	}
}

static void test_persistence(void **state)
{
	struct test_tmpdir *t = *state;
	char a[MAC_STRLEN + 1];
	struct mac_entry *e = NULL;
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int fd2 = -1;
	struct stat st;
	size_t n = 0;

	assert_int_equal(mac_reserve(t->fd, "persist", a), 0);
	/* A new directory fd (as a restarted daemon would have) sees the same registry. */
	fd2 = open(t->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd2 >= 0);
	assert_int_equal(mac_list(fd2, &e, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(e[0].mac, a);
	assert_string_equal(e[0].name, "persist");
	mac_list_free(e, n);

	assert_int_equal(fs_read_file_at(t->fd, MAC_REGISTRY_FILE, 1 << 20, &b), 0);
	text = buf_dup_string(b);
	assert_non_null(text);
	assert_non_null(strstr(text, "\"formatVersion\":1"));
	assert_non_null(strstr(text, a));
	assert_int_equal(fstatat(t->fd, MAC_REGISTRY_FILE, &st, 0), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
}

static int keep_even(const char *mac, const char *name, void *ud)
{
	(void)mac;
	(*(int *)ud)++;
	return (name[strlen(name) - 1] - '0') % 2 == 0;
}

static void test_sweep(void **state)
{
	struct test_tmpdir *t = *state;
	char m[MAC_STRLEN + 1];
	struct mac_entry *e = NULL;
	size_t n = 0;
	int calls = 0;

	for (int i = 0; i < 10; i++) {
		char name[16];
		snprintf(name, sizeof(name), "w%d", i);
		assert_int_equal(mac_reserve(t->fd, name, m), 0);
	}
	assert_int_equal(mac_sweep(t->fd, keep_even, &calls), 5);
	assert_int_equal(calls, 10);
	assert_int_equal(mac_list(t->fd, &e, &n), 0);
	assert_int_equal(n, 5);
	for (size_t i = 0; i < n; i++)
		assert_int_equal((e[i].name[1] - '0') % 2, 0);
	mac_list_free(e, n);
	/* Nothing to free: nothing rewritten, 0 returned. */
	calls = 0;
	assert_int_equal(mac_sweep(t->fd, keep_even, &calls), 0);
	assert_int_equal(calls, 5);
}

#define N_CHILDREN 6
#define N_PER_CHILD 40

/* Processes reserving at the same time never get the same address. */
static void test_concurrent(void **state)
{
	struct test_tmpdir *t = *state;
	int pipes[N_CHILDREN][2];
	pid_t pids[N_CHILDREN];
	char(*got)[MAC_STRLEN + 1] = calloc(N_CHILDREN * N_PER_CHILD, sizeof(*got));
	struct mac_entry *e = NULL;
	size_t n = 0, k = 0;

	assert_non_null(got);
	for (int c = 0; c < N_CHILDREN; c++) {
		assert_int_equal(pipe2(pipes[c], O_CLOEXEC), 0);
		pids[c] = fork();
		assert_true(pids[c] >= 0);
		if (pids[c] == 0) {
			close(pipes[c][0]);
			for (int i = 0; i < N_PER_CHILD; i++) {
				char name[32], mac[MAC_STRLEN + 1];
				snprintf(name, sizeof(name), "c%d-%d", c, i);
				if (mac_reserve(t->fd, name, mac) < 0)
					_exit(1);
				if (write(pipes[c][1], mac, MAC_STRLEN) != MAC_STRLEN)
					_exit(2);
			}
			_exit(0);
		}
		close(pipes[c][1]);
	}
	for (int c = 0; c < N_CHILDREN; c++) {
		int status;
		for (int i = 0; i < N_PER_CHILD; i++) {
			char *m = got[k++];
			size_t have = 0;
			while (have < MAC_STRLEN) {
				ssize_t r = read(pipes[c][0], m + have, MAC_STRLEN - have);
				assert_true(r > 0);
				have += (size_t)r;
			}
			m[MAC_STRLEN] = '\0';
		}
		close(pipes[c][0]);
		assert_int_equal(waitpid(pids[c], &status, 0), pids[c]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	for (size_t i = 0; i < k; i++)
		for (size_t j = i + 1; j < k; j++)
			if (streq(got[i], got[j]))
				fail_msg("%s handed out twice", got[i]);
	assert_int_equal(mac_list(t->fd, &e, &n), 0);
	assert_int_equal(n, N_CHILDREN * N_PER_CHILD);
	assert_registry_unique(e, n);
	mac_list_free(e, n);
	free(got);
}

static void write_registry(int dirfd, const char *text)
{
	assert_int_equal(fs_write_atomic_at(dirfd, MAC_REGISTRY_FILE, text, strlen(text), 0600), 0);
}

/* A registry that does not parse is an error every time, and it is left as it was. */
static void test_corrupt(void **state)
{
	static const struct {
		const char *what, *text;
		int want;
	} cases[] = {
	        {"not json", "garbage\n", SLATE_ERR_INVALID_FORMAT},
	        {"empty", "", SLATE_ERR_INVALID_FORMAT},
	        {"truncated", "{\"formatVersion\":1,\"macs\":{\"52:54:00:00:00:01\":\"a\"",
	         SLATE_ERR_INVALID_FORMAT},
	        {"array", "[]", SLATE_ERR_INVALID_FORMAT},
	        {"no macs", "{\"formatVersion\":1}", SLATE_ERR_INVALID_FORMAT},
	        {"no version", "{\"macs\":{}}", SLATE_ERR_INVALID_FORMAT},
	        {"version 2", "{\"formatVersion\":2,\"macs\":{}}", SLATE_ERR_INVALID_FORMAT},
	        {"extra member", "{\"formatVersion\":1,\"macs\":{},\"x\":1}",
	         SLATE_ERR_INVALID_FORMAT},
	        {"bad mac", "{\"formatVersion\":1,\"macs\":{\"52:54:00:zz:00:01\":\"a\"}}",
	         SLATE_ERR_INVALID_FORMAT},
	        {"upper mac", "{\"formatVersion\":1,\"macs\":{\"52:54:00:AA:00:01\":\"a\"}}",
	         SLATE_ERR_INVALID_FORMAT},
	        {"foreign prefix", "{\"formatVersion\":1,\"macs\":{\"02:00:00:00:00:01\":\"a\"}}",
	         SLATE_ERR_INVALID_FORMAT},
	        {"bad name", "{\"formatVersion\":1,\"macs\":{\"52:54:00:00:00:01\":\"../x\"}}",
	         SLATE_ERR_INVALID_FORMAT},
	        {"name not string", "{\"formatVersion\":1,\"macs\":{\"52:54:00:00:00:01\":1}}",
	         SLATE_ERR_INVALID_FORMAT},
	        {"trailing bytes", "{\"formatVersion\":1,\"macs\":{}}x", SLATE_ERR_INVALID_FORMAT},
	};
	struct test_tmpdir *t = *state;

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		char mac[MAC_STRLEN + 1] = "untouched";
		struct mac_entry *e = NULL;
		size_t n = 0;
		_cleanup_buf_ struct buf *b = NULL;
		int r;

		write_registry(t->fd, cases[i].text);
		r = mac_reserve(t->fd, "alpha", mac);
		if (r != cases[i].want)
			fail_msg("%s: mac_reserve = %d (%s), want %d", cases[i].what, r,
			         slate_strerror(r), cases[i].want);
		assert_string_equal(mac, "untouched");
		assert_int_equal(mac_list(t->fd, &e, &n), cases[i].want);
		assert_int_equal(mac_release(t->fd, "52:54:00:00:00:01", NULL), cases[i].want);
		assert_int_equal(mac_claim(t->fd, "52:54:00:00:00:02", "b"), cases[i].want);
		/* Never silently replaced by an empty registry. */
		assert_int_equal(fs_read_file_at(t->fd, MAC_REGISTRY_FILE, 1 << 20, &b), 0);
		assert_int_equal(buf_len(b), strlen(cases[i].text));
		assert_memory_equal(buf_ptr(b), cases[i].text, buf_len(b));
	}
}

static void test_too_large(void **state)
{
	struct test_tmpdir *t = *state;
	_cleanup_close_ int fd = -1;
	char mac[MAC_STRLEN + 1];

	fd = openat(t->fd, MAC_REGISTRY_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)MAC_REGISTRY_MAX_SIZE + 1), 0);
	assert_int_equal(mac_reserve(t->fd, "alpha", mac), SLATE_ERR_TOO_LARGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_mac_check),
	        cmocka_unit_test_setup_teardown(test_reserve_unique, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_reserve_bad_name, setup_tmpdir,
	                                        teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_release, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_claim, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_persistence, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_sweep, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_concurrent, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_corrupt, setup_tmpdir, teardown_tmpdir),
	        cmocka_unit_test_setup_teardown(test_too_large, setup_tmpdir, teardown_tmpdir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

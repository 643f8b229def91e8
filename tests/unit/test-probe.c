/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate probe's parts that need no guest (doc/residue.md): the parser of slate-guest --probe's
 * lines (hostile input), and storage/residue's classification of a disk's regions on real files:
 * a sparse raw file, and a qcow2 overlay over a raw base made and written by the real qemu-img
 * and qemu-io. What needs a guest is tests/integration/probe.sh's.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/probe.h"
#include "scratch.h"
#include "storage/residue.h"

#define R RESIDUE_REGION

static struct test_tmpdir *tmp_new(void)
{
	struct test_tmpdir *t = test_tmpdir_new("test-probe");

	if (!t)
		abort();
	return t;
}

static void tmp_done(struct test_tmpdir *t)
{
	assert_int_equal(test_rmtree(t->path), 0);
	close(t->fd);
	free(t);
}

static int parse(const char *s, struct probe_line *l)
{
	return probe_parse_guest_line(s, strlen(s), l);
}

static void test_parse_good(void **state)
{
	struct probe_line l;

	(void)state;
	assert_int_equal(parse("SLATE-PROBE 1", &l), 0);
	assert_int_equal(l.kind, PL_HEADER);
	assert_int_equal(parse("device vda 4294967296 1", &l), 0);
	assert_int_equal(l.kind, PL_DEVICE);
	assert_string_equal(l.dev, "vda");
	assert_true(l.a == 4294967296ULL && l.b == 1);
	assert_int_equal(parse("fs vda 0 4294967296 ext4 /home/slate", &l), 0);
	assert_int_equal(l.kind, PL_FS);
	assert_string_equal(l.text, "ext4 /home/slate");
	assert_int_equal(parse("free vdb 1048576 3145728", &l), 0);
	assert_true(l.kind == PL_FREE && l.a == 1048576 && l.b == 3145728);
	assert_int_equal(parse("ready", &l), 0);
	assert_int_equal(l.kind, PL_READY);
	assert_int_equal(parse("write vda 1048576 clean", &l), 0);
	assert_true(l.kind == PL_WRITE && l.clean && l.a == 1048576);
	assert_int_equal(parse("write vdb 1114112 foreign 61440 4096 15 534c415445", &l), 0);
	assert_true(l.kind == PL_WRITE && !l.clean && l.bytes == 61440 && l.first == 4096 &&
	            l.markers == 15 && l.sample_len == 5);
	assert_memory_equal(l.sample, "SLATE", 5);
	assert_int_equal(parse("compare vda 1245184 differs 3 12288 0 0 00", &l), 0);
	assert_true(l.kind == PL_COMPARE && l.blocks == 3 && l.bytes == 12288);
	assert_int_equal(parse("refused vda 1310720 not free in the guest's file system", &l), 0);
	assert_true(l.kind == PL_REFUSED && l.a == 1310720);
	assert_string_equal(l.text, "not free in the guest's file system");
	assert_int_equal(parse("error - cannot open /dev/vda", &l), 0);
	assert_true(l.kind == PL_ERROR && l.dev[0] == '\0');
	assert_int_equal(parse("error vdb cannot hash: no AF_ALG", &l), 0);
	assert_string_equal(l.dev, "vdb");
	assert_int_equal(parse("done vda 256 255 812", &l), 0);
	assert_true(l.kind == PL_DONE && l.a == 256 && l.b == 255 && l.ms == 812);
	assert_int_equal(parse("end", &l), 0);
	assert_int_equal(l.kind, PL_END);
}

static void test_parse_bad(void **state)
{
	static const char *const bad[] = {
	        "",
	        "SLATE-PROBE 2",
	        "SLATE-PROBE 1 x",
	        "device VDA 1 1",
	        "device vda 01 1",
	        "device vda 18446744073709551616 1",
	        "device vda -1 1",
	        "device  vda 1 1",
	        "device vda 1 1 ",
	        " ready",
	        "ready now",
	        "free vda 1 0",
	        "free vda 18446744073709551615 2",
	        "write vda 1048577 clean",
	        "write vda 1048576 dirty",
	        "write vda 1048576 clean extra",
	        "write vda 0 foreign 1 65536 0 00",
	        "write vda 0 foreign 65537 0 0 00",
	        "write vda 0 foreign 1 0 0 0",
	        "write vda 0 foreign 1 0 0 zz",
	        "write vda 0 foreign 1 0 0 " /* 33 bytes of sample */
	        "000000000000000000000000000000000000000000000000000000000000000000",
	        "compare vda 0 differs 0 1 0 0 00",
	        "compare vda 0 differs 17 1 0 0 00",
	        "compare vda 0 foreign 1 0 0 00",
	        "refused vda 65536",
	        "refused vda x why",
	        "error vda bell\a",
	        "error vda \xc3\xa9",
	        "done vda 1 1",
	        "fs vda 0 1",
	        "unknown vda",
	        "end\r",
	};
	struct probe_line l;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse(bad[i], &l) == 0)
			fail_msg("accepted \"%s\"", bad[i]);
	/* A NUL inside, and a line over the limit. */
	assert_int_equal(probe_parse_guest_line("end\0", 4, &l), -EPROTO);
	{
		char big[PROBE_LINE_MAX + 20];
		memset(big, 'a', sizeof(big));
		memcpy(big, "error vda ", 10);
		assert_int_equal(probe_parse_guest_line(big, sizeof(big), &l), -EPROTO);
	}
}

/* A sparse raw file: a hole reads as zeros, anything written is the guest's. */
static void test_raw(void **state)
{
	struct test_tmpdir *t = tmp_new();
	char path[300];
	struct residue_map *m = NULL;
	struct slate_error err = {0};
	enum residue_class c;
	uint8_t block[4096];
	int fd;

	(void)state;
	(void)snprintf(path, sizeof(path), "%s/disk.img", t->path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 16 * R), 0);
	memset(block, 0x5a, sizeof(block));
	assert_int_equal(pwrite(fd, block, sizeof(block), 3 * R + 8192), (ssize_t)sizeof(block));
	assert_int_equal(fsync(fd), 0);
	close(fd);

	assert_int_equal(residue_map_open(path, NULL, false, &m, &err), 0);
	assert_true(residue_map_size(m) == 16 * R);
	assert_int_equal(residue_map_classify(m, 0, &c), 0);
	assert_int_equal(c, RESIDUE_HOLE);
	assert_int_equal(residue_map_classify(m, 3 * R, &c), 0);
	assert_int_equal(c, RESIDUE_WRITTEN);
	assert_int_equal(residue_map_classify(m, 15 * R, &c), 0);
	assert_int_equal(c, RESIDUE_HOLE);
	/* Misaligned, or past the end. */
	assert_int_equal(residue_map_classify(m, 4096, &c), -EINVAL);
	assert_int_equal(residue_map_classify(m, 16 * R, &c), -EINVAL);
	residue_map_free(m);

	/* A link in the workspace directory is not followed. */
	{
		char link[320];
		(void)snprintf(link, sizeof(link), "%s/link.img", t->path);
		assert_int_equal(symlink(path, link), 0);
		assert_true(residue_map_open(link, NULL, false, &m, &err) < 0);
		assert_non_null(strstr(err.msg, "link.img"));
	}
	tmp_done(t);
}

static bool run(const char *cmd)
{
	return system(cmd) == 0;
}

/* A qcow2 overlay over a raw base, made and written by the real qemu-img and qemu-io: a cluster
 * the overlay never allocated over a hole of the base is a hole, over data of the base is the
 * base's (with its digests), a cluster the guest wrote is written. */
static void test_qcow2(void **state)
{
	struct test_tmpdir *t = tmp_new();
	char base[300], ov[300], cmd[1024];
	struct residue_map *m = NULL;
	struct slate_error err = {0};
	enum residue_class c;
	uint8_t dg[RESIDUE_BLOCKS][32], want[32], block[4096];
	int fd;

	(void)state;
	if (!run("command -v qemu-img >/dev/null && command -v qemu-io >/dev/null")) {
		tmp_done(t);
		skip();
	}
	(void)snprintf(base, sizeof(base), "%s/base.img", t->path);
	(void)snprintf(ov, sizeof(ov), "%s/disk.img", t->path);
	fd = open(base, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 32 * R), 0);
	memset(block, 0x42, sizeof(block));
	for (int i = 0; i < RESIDUE_BLOCKS; i++)
		assert_int_equal(pwrite(fd, block, sizeof(block), 5 * R + i * 4096),
		                 (ssize_t)sizeof(block));
	close(fd);
	(void)snprintf(cmd, sizeof(cmd),
	               "qemu-img create -q -f qcow2 -F raw -b '%s' '%s' && "
	               "qemu-io -f qcow2 -c 'write -q -P 0x11 %d 4096' '%s'",
	               base, ov, 9 * R, ov);
	assert_true(run(cmd));

	assert_int_equal(residue_map_open(ov, base, true, &m, &err), 0);
	assert_true(residue_map_size(m) == 32 * R);
	assert_int_equal(residue_map_classify(m, 0, &c), 0);
	assert_int_equal(c, RESIDUE_HOLE);
	assert_int_equal(residue_map_classify(m, 5 * R, &c), 0);
	assert_int_equal(c, RESIDUE_BASE);
	assert_int_equal(residue_map_classify(m, 9 * R, &c), 0);
	assert_int_equal(c, RESIDUE_WRITTEN);
	assert_int_equal(residue_map_base_digests(m, 5 * R, dg), 0);
	crypto_hash_sha256(want, block, sizeof(block));
	assert_memory_equal(dg[0], want, 32);
	assert_memory_equal(dg[RESIDUE_BLOCKS - 1], want, 32);
	residue_map_free(m);

	/* Without a base (drift): the base's data is nobody's to vouch for. */
	assert_int_equal(residue_map_open(ov, NULL, true, &m, &err), 0);
	assert_int_equal(residue_map_classify(m, 5 * R, &c), 0);
	assert_int_equal(c, RESIDUE_WRITTEN);
	residue_map_free(m);
	tmp_done(t);
}

/* qemu-img map output that is not a map of one disk is refused. */
static void test_qemu_map(void **state)
{
	static const char *const bad[] = {
	        "[]",
	        "{}",
	        "[{\"start\":0,\"length\":65536,\"depth\":0,\"zero\":true}]",
	        "[{\"start\":4096,\"length\":65536,\"depth\":0,\"zero\":true,\"data\":false}]",
	        "[{\"start\":0,\"length\":0,\"depth\":0,\"zero\":true,\"data\":false}]",
	        "[{\"start\":0,\"length\":65536,\"depth\":0,\"zero\":true,\"data\":false},"
	        "{\"start\":0,\"length\":65536,\"depth\":0,\"zero\":true,\"data\":false}]",
	};
	struct test_tmpdir *t = tmp_new();
	char ov[300], cmd[600];
	struct residue_map *m = NULL;
	struct slate_error err = {0};

	(void)state;
	if (!run("command -v qemu-img >/dev/null")) {
		tmp_done(t);
		skip();
	}
	(void)snprintf(ov, sizeof(ov), "%s/disk.img", t->path);
	(void)snprintf(cmd, sizeof(cmd), "qemu-img create -q -f qcow2 '%s' 1M", ov);
	assert_true(run(cmd));
	assert_int_equal(residue_map_open(ov, NULL, true, &m, &err), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (residue_map_parse_qemu_map(m, bad[i], strlen(bad[i])) == 0)
			fail_msg("accepted %s", bad[i]);
	residue_map_free(m);
	tmp_done(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse_good), cmocka_unit_test(test_parse_bad),
	        cmocka_unit_test(test_raw),        cmocka_unit_test(test_qcow2),
	        cmocka_unit_test(test_qemu_map),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

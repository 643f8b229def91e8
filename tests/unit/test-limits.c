/* SPDX-License-Identifier: GPL-2.0-or-later */
/* daemon/limits: slate.conf's per-host limits as daemon_limits_init reads them, admission
 * without limits (nothing asked of libvirt), and the count of starts in flight against
 * libvirt's own test driver (a node file with a running slate domain); the waiting and refusing
 * against real QEMU domains are tests/integration/concurrent.sh's. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/daemon.h"
#include "daemon/limits.h"

static void test_settings(void **state)
{
	static const struct {
		const char *max, *budget, *when, *timeout;
		int r;
		unsigned max_running;
		uint64_t budget_mib; /* UINT64_MAX: auto (the host's memory less 1 GiB) */
		bool queue;
		unsigned timeout_s;
		const char *msg; /* in the error */
	} cases[] = {
	        {NULL, NULL, NULL, NULL, 0, 0, UINT64_MAX, true, 0, NULL},
	        {"2", "none", "refuse", "30", 0, 2, 0, false, 30, NULL},
	        {"0", "4G", "queue", "0", 0, 0, 4096, true, 0, NULL},
	        {"8", "512M", NULL, NULL, 0, 8, 512, true, 0, NULL},
	        {"-1", NULL, NULL, NULL, -EINVAL, 0, 0, false, 0, "max-running = -1"},
	        {"two", NULL, NULL, NULL, -EINVAL, 0, 0, false, 0, "a number from 0 to 100000"},
	        {"100001", NULL, NULL, NULL, -EINVAL, 0, 0, false, 0, "max-running"},
	        {NULL, "12", NULL, NULL, -EINVAL, 0, 0, false, 0, "at least 64.0 MiB"},
	        {NULL, "lots", NULL, NULL, -EINVAL, 0, 0, false, 0, "memory-budget = lots"},
	        {NULL, NULL, "wait", NULL, -EINVAL, 0, 0, false, 0, "one of queue|refuse"},
	        {NULL, NULL, NULL, "1h", -EINVAL, 0, 0, false, 0, "queue-timeout = 1h"},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct daemon_limits l;
		struct slate_error err = {0};
		int r = daemon_limits_init(&l, cases[i].max, cases[i].budget, cases[i].when,
		                           cases[i].timeout, &err);

		assert_int_equal(r, cases[i].r);
		if (r < 0) {
			assert_non_null(strstr(err.msg, cases[i].msg));
			continue;
		}
		assert_int_equal(l.max_running, cases[i].max_running);
		if (cases[i].budget_mib == UINT64_MAX)
			assert_true(l.memory_budget_mib > 0);
		else
			assert_int_equal(l.memory_budget_mib, cases[i].budget_mib);
		assert_int_equal(l.queue, cases[i].queue);
		assert_int_equal(l.queue_timeout_s, cases[i].timeout_s);
		daemon_limits_done(&l);
	}
}

/* With no limit set, admission asks nothing (the libvirt URI is one that cannot answer). */
static void test_no_limits(void **state)
{
	struct daemon_limits l;
	struct daemon_ctx d = {
	        .libvirt_uri = "test:///nowhere", .state_dir = "/nonexistent", .limits = &l};
	(void)state;

	assert_int_equal(daemon_limits_init(&l, "0", "none", "refuse", NULL, NULL), 0);
	assert_int_equal(
	        daemon_limits_admit(&d, "ws", "slate-ws", 1u << 20, NULL, NULL, NULL, NULL), 0);
	daemon_limits_release(&d, "slate-ws");
	d.limits = NULL;
	assert_int_equal(
	        daemon_limits_admit(&d, "ws", "slate-ws", 1u << 20, NULL, NULL, NULL, NULL), 0);
	daemon_limits_done(&l);
}

/* A workspace bigger than the whole budget is refused before anything is counted. */
static void test_over_budget(void **state)
{
	struct daemon_limits l;
	struct daemon_ctx d = {
	        .libvirt_uri = "test:///nowhere", .state_dir = "/nonexistent", .limits = &l};
	struct slate_error err = {0};
	(void)state;

	assert_int_equal(daemon_limits_init(&l, NULL, "1G", "queue", NULL, NULL), 0);
	assert_int_equal(daemon_limits_admit(&d, "big", "slate-big", 2048, NULL, NULL, NULL, &err),
	                 -E2BIG);
	assert_non_null(strstr(err.msg, "big needs 2048 MiB"));
	daemon_limits_done(&l);
}

/*
 * A start whose domain is already active (defined and booting, its start not yet ended) counts
 * once, not once from libvirt and once as in flight: with max-running = 2 and one such start,
 * a second start fits. libvirt's test driver runs the domain slate-a from a node file, its disk
 * below the state directory; slate-other's disk is elsewhere and does not count.
 */
static void test_in_flight_counted_once(void **state)
{
	char dir[] = "/tmp/test-limits.XXXXXX", node[256], uri[300];
	struct daemon_limits l;
	struct daemon_ctx d = {.limits = &l};
	struct slate_error err = {0};
	FILE *f;
	(void)state;

	assert_non_null(mkdtemp(dir));
	(void)snprintf(node, sizeof(node), "%s/node.xml", dir);
	(void)snprintf(uri, sizeof(uri), "test://%s", node);
	f = fopen(node, "w");
	assert_non_null(f);
	fprintf(f,
	        "<node>\n"
	        "<domain type='test'><name>slate-a</name><memory unit='MiB'>1024</memory>"
	        "<os><type>hvm</type></os><devices><disk type='file' device='disk'>"
	        "<source file='%s/state/workspaces/a/disk.img'/><target dev='vda'/></disk>"
	        "</devices></domain>\n"
	        "<domain type='test'><name>slate-other</name><memory unit='MiB'>1024</memory>"
	        "<os><type>hvm</type></os><devices><disk type='file' device='disk'>"
	        "<source file='/elsewhere/disk.img'/><target dev='vda'/></disk>"
	        "</devices></domain>\n"
	        "</node>\n",
	        dir);
	assert_int_equal(fclose(f), 0);
	(void)snprintf(node + strlen(dir) + 1, sizeof(node) - strlen(dir) - 1, "state");
	d.libvirt_uri = uri;
	d.state_dir = node;

	assert_int_equal(daemon_limits_init(&l, "2", "none", "refuse", NULL, NULL), 0);
	/* slate-a's start is in flight and its domain runs: 1 of 2. */
	assert_int_equal(daemon_limits_admit(&d, "a", "slate-a", 1024, NULL, NULL, NULL, &err), 0);
	/* b fits: 2 of 2 (it was refused while slate-a counted twice). */
	assert_int_equal(daemon_limits_admit(&d, "b", "slate-b", 1024, NULL, NULL, NULL, &err), 0);
	/* c does not: 3 of 2. */
	assert_int_equal(daemon_limits_admit(&d, "c", "slate-c", 1024, NULL, NULL, NULL, &err),
	                 -EBUSY);
	assert_non_null(strstr(err.msg, "2 workspaces run or start, max-running = 2"));
	/* a's start ended (booted): its running domain still counts, b's start too. */
	daemon_limits_release(&d, "slate-a");
	assert_int_equal(daemon_limits_admit(&d, "c", "slate-c", 1024, NULL, NULL, NULL, &err),
	                 -EBUSY);
	/* b's start ended without a domain: c fits. */
	daemon_limits_release(&d, "slate-b");
	assert_int_equal(daemon_limits_admit(&d, "c", "slate-c", 1024, NULL, NULL, NULL, &err), 0);
	daemon_limits_done(&l);

	/* The memory budget the same way: 3 GiB, slate-a's 1 GiB running and in flight. */
	assert_int_equal(daemon_limits_init(&l, "0", "3G", "refuse", NULL, NULL), 0);
	assert_int_equal(daemon_limits_admit(&d, "a", "slate-a", 1024, NULL, NULL, NULL, &err), 0);
	assert_int_equal(daemon_limits_admit(&d, "b", "slate-b", 2048, NULL, NULL, NULL, &err), 0);
	assert_int_equal(daemon_limits_admit(&d, "c", "slate-c", 1024, NULL, NULL, NULL, &err),
	                 -EBUSY);
	daemon_limits_done(&l);

	(void)snprintf(node, sizeof(node), "%s/node.xml", dir);
	assert_int_equal(unlink(node), 0);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_settings),
	        cmocka_unit_test(test_no_limits),
	        cmocka_unit_test(test_over_budget),
	        cmocka_unit_test(test_in_flight_counted_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

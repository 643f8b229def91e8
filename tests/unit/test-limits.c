/* SPDX-License-Identifier: GPL-2.0-or-later */
/* daemon/limits: slate.conf's per-host limits as daemon_limits_init reads them, and admission
 * without limits (nothing asked of libvirt); the waiting and refusing against real domains are
 * tests/integration/concurrent.sh's. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
	assert_int_equal(daemon_limits_admit(&d, "ws", 1u << 20, NULL, NULL, NULL, NULL), 0);
	daemon_limits_release(&d, 1u << 20);
	d.limits = NULL;
	assert_int_equal(daemon_limits_admit(&d, "ws", 1u << 20, NULL, NULL, NULL, NULL), 0);
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
	assert_int_equal(daemon_limits_admit(&d, "big", 2048, NULL, NULL, NULL, &err), -E2BIG);
	assert_non_null(strstr(err.msg, "big needs 2048 MiB"));
	daemon_limits_done(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_settings),
	        cmocka_unit_test(test_no_limits),
	        cmocka_unit_test(test_over_budget),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

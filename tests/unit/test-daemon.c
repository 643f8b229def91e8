/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The daemon's workspace operations (daemon/) on a real store (qcow2 mode in a temporary state
 * directory, a small base image imported): create with its egress policy and what a failure
 * leaves (nothing), the egress policy's serialised read-modify-write, the refusals of start that
 * come before libvirt is asked (an unknown or invalid name, a quarantined workspace), and the
 * one table that turns a library error code into the API's code and status. What needs a domain
 * (boot, stop, run, exec) is tested against libvirt and QEMU by tests/integration.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/protocol.h"
#include "daemon/create.h"
#include "daemon/daemon.h"
#include "daemon/egress.h"
#include "daemon/start.h"
#include "daemon/verbs.h"
#include "image/store.h"
#include "proxy/policy.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/fs.h"
#include "workspace/workspace.h"

#define MIB (1024ull * 1024ull)

struct ctx {
	char dir[64];
	int state_fd;
	struct storage *s;
	struct daemon_ctx d;
};

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));
	struct storage_config cfg = {.mode = STORAGE_MODE_QCOW2};
	char base[128];
	int fd;

	if (!c)
		return -1;
	snprintf(c->dir, sizeof(c->dir), "/var/tmp/slate-test-daemon-XXXXXX");
	if (!mkdtemp(c->dir))
		return -1;
	c->state_fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(base, sizeof(base), "%s/base.img", c->dir);
	fd = open(base, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (c->state_fd < 0 || fd < 0 || ftruncate(fd, (off_t)(16 * MIB)) < 0 ||
	    pwrite(fd, "base", 4, 0) != 4)
		return -1;
	close(fd);
	if (storage_open(c->state_fd, c->dir, &cfg, &c->s, NULL) < 0 ||
	    image_store_import(c->s, "base", base, NULL, NULL, NULL, false, NULL, NULL, NULL) < 0 ||
	    workspace_store_open(c->s, NULL, &c->d.workspaces) < 0)
		return -1;
	(void)unlink(base);
	c->d.storage = c->s;
	c->d.state_dir = c->dir;
	c->d.runtime_dir = c->dir;
	c->d.state_dirfd = c->state_fd;
	/* Nothing here may reach libvirt: a URI that cannot connect says so if something tries. */
	c->d.libvirt_uri = "qemu+unix:///system?socket=/nonexistent/slate-test-daemon";
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;
	char cmd[128];

	workspace_store_free(c->d.workspaces);
	storage_close(c->s);
	close(c->state_fd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", c->dir);
	if (system(cmd) != 0)
		return -1;
	free(c);
	return 0;
}

static struct daemon_create_spec spec_for(const char *name, const char *image)
{
	return (struct daemon_create_spec){
	        .args = {.name = name, .owner = 1000, .image_id = image, .home_size = 64 * MIB}};
}

static bool ws_exists(struct ctx *c, const char *name)
{
	struct workspace *w = NULL;
	int r = workspace_load(c->d.workspaces, name, &w);

	workspace_free(w);
	return r == 0;
}

static void test_create(void **state)
{
	struct ctx *c = *state;
	struct daemon_create_spec spec = spec_for("ws1", "base");
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL, *got = NULL;
	struct slate_error err = {0};
	struct workspace *w = NULL;
	int fd;

	assert_int_equal(egress_policy_new(&p), 0);
	assert_int_equal(egress_policy_apply(p, "deny-all", NULL), 0);
	assert_int_equal(egress_policy_apply(p, "allow", "api.github.com"), 0);
	spec.egress = p;
	assert_int_equal(daemon_create(&c->d, &spec, &w, NULL, &err), 0);
	assert_string_equal(w->name, "ws1");
	assert_int_equal(w->owner, 1000);
	workspace_free(w);
	/* Its egress policy went with it. */
	assert_int_equal(daemon_ws_dirfd(&c->d, "ws1", &fd), 0);
	assert_int_equal(egress_policy_load_at(fd, &got), 0);
	close(fd);
	assert_true(egress_policy_allows_host(got, "api.github.com", NULL));
	assert_false(egress_policy_allows_host(got, "example.com", NULL));

	/* The name taken, the image missing: said, nothing made. */
	assert_int_equal(daemon_create(&c->d, &spec, NULL, NULL, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "ws1 exists already"));
	spec = spec_for("ws2", "nosuch");
	assert_int_equal(daemon_create(&c->d, &spec, NULL, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "image 'nosuch' is not installed"));
	assert_false(ws_exists(c, "ws2"));
	/* A key pair asked for with no agent to make it: refused before anything exists. */
	spec = spec_for("ws3", "base");
	spec.generate_ssh_key = true;
	assert_int_equal(daemon_create(&c->d, &spec, NULL, NULL, &err), -ENOTCONN);
	assert_false(ws_exists(c, "ws3"));
}

struct update_job {
	struct ctx *c;
	int i;
	int r;
};

static void *update_main(void *p)
{
	struct update_job *j = p;
	char host[64];

	for (int k = 0; k < 10 && j->r >= 0; k++) {
		struct egress_policy *pol = NULL;
		snprintf(host, sizeof(host), "h%d-%d.example", j->i, k);
		j->r = daemon_egress_update(&j->c->d, "ws1", "allow", host, &pol);
		egress_policy_free(pol);
	}
	return NULL;
}

static void test_egress_update(void **state)
{
	struct ctx *c = *state;
	struct daemon_create_spec spec = spec_for("ws1", "base");
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	struct update_job jobs[4];
	pthread_t t[4];
	char host[64];

	assert_int_equal(daemon_create(&c->d, &spec, NULL, NULL, NULL), 0);
	assert_int_equal(daemon_egress_update(&c->d, "ws1", "deny-all", NULL, &p), 0);
	egress_policy_free(TAKE_PTR(p));
	assert_int_equal(daemon_egress_update(&c->d, "ws1", "allow", "not a host", &p), -EINVAL);
	assert_int_equal(daemon_egress_update(&c->d, "ws1", "sideways", NULL, &p), -EINVAL);
	assert_int_equal(daemon_egress_update(&c->d, "../etc", "allow-all", NULL, &p), -EINVAL);
	/* Four writers at once: every rule of every one is kept (none read a stale file). */
	for (int i = 0; i < 4; i++) {
		jobs[i] = (struct update_job){.c = c, .i = i};
		assert_int_equal(pthread_create(&t[i], NULL, update_main, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(jobs[i].r, 0);
	}
	assert_int_equal(daemon_egress_update(&c->d, "ws1", "deny", "blocked.example", &p), 0);
	for (int i = 0; i < 4; i++)
		for (int k = 0; k < 10; k++) {
			snprintf(host, sizeof(host), "h%d-%d.example", i, k);
			assert_true(egress_policy_allows_host(p, host, NULL));
		}
	assert_false(egress_policy_allows_host(p, "blocked.example", NULL));
}

static void test_start_refusals(void **state)
{
	struct ctx *c = *state;
	struct daemon_create_spec spec = spec_for("ws1", "base");
	struct slate_error err = {0};
	int lock_fd = -1;

	assert_int_equal(daemon_start(&c->d, "Bad/Name", NULL, NULL, NULL, NULL, NULL, &err),
	                 -EINVAL);
	assert_int_equal(daemon_start(&c->d, "nosuch", NULL, NULL, NULL, NULL, NULL, &err),
	                 -ENOENT);
	assert_non_null(strstr(err.msg, "start nosuch: the workspace is gone"));
	assert_string_equal(api_error_code(err.code, NULL), API_ERR_NOT_FOUND);
	/* Quarantined: refused with what to do, before libvirt is asked anything. */
	assert_int_equal(daemon_create(&c->d, &spec, NULL, NULL, NULL), 0);
	assert_int_equal(workspace_prepare(c->d.workspaces, "ws1"), 0);
	assert_int_equal(workspace_lock(c->d.workspaces, "ws1", &lock_fd), 0);
	assert_int_equal(workspace_mark_compromised(c->d.workspaces, "ws1", "evil.example"), 1);
	close(lock_fd);
	assert_int_equal(daemon_start(&c->d, "ws1", NULL, NULL, NULL, NULL, NULL, &err),
	                 SLATE_ERR_COMPROMISED);
	assert_non_null(strstr(err.msg, "evil.example"));
	assert_non_null(strstr(err.msg, "slate wipe ws1"));
	assert_string_equal(api_error_code(err.code, NULL), API_ERR_COMPROMISED);
	/* Wiped: past the quarantine, so it asks libvirt, which is not there here. */
	assert_int_equal(workspace_wipe(c->d.workspaces, "ws1"), 0);
	assert_int_equal(daemon_start(&c->d, "ws1", NULL, NULL, NULL, NULL, NULL, &err),
	                 SLATE_ERR_LIBVIRT);
	assert_string_equal(api_error_code(err.code, NULL), API_ERR_UNAVAILABLE);
}

/* A destructive verb never runs on a workspace whose domain may be running: when libvirt cannot
 * say, it is refused and the workspace is untouched. */
static void test_verbs_refused_blind(void **state)
{
	struct ctx *c = *state;
	struct daemon_create_spec spec = spec_for("ws1", "base");
	struct slate_error err = {0};
	struct workspace *w = NULL;

	assert_int_equal(daemon_create(&c->d, &spec, NULL, NULL, NULL), 0);
	assert_int_equal(workspace_prepare(c->d.workspaces, "ws1"), 0);
	for (enum daemon_verb v = DAEMON_RESET; v <= DAEMON_DELETE; v++) {
		assert_int_equal(daemon_verb(&c->d, "ws1", v, &err), SLATE_ERR_LIBVIRT);
		assert_non_null(strstr(err.msg, daemon_verb_name(v)));
		assert_non_null(strstr(err.msg, "cannot ask libvirt"));
	}
	assert_int_equal(daemon_revert(&c->d, "ws1", "1-1", false, &err), SLATE_ERR_LIBVIRT);
	assert_int_equal(workspace_load(c->d.workspaces, "ws1", &w), 0);
	assert_true(w->disk_present && w->home_present);
	workspace_free(w);
	assert_string_equal(daemon_verb_name(DAEMON_WIPE_HOME), "wipe-home");
}

static void test_error_codes(void **state)
{
	static const struct {
		int code;
		const char *name;
		unsigned status;
	} want[] = {
	        {-ENOENT, API_ERR_NOT_FOUND, 404},
	        {-EEXIST, API_ERR_CONFLICT, 409},
	        {-EALREADY, API_ERR_CONFLICT, 409},
	        {-ENOTCONN, API_ERR_CONFLICT, 409},
	        {SLATE_ERR_SHARE, API_ERR_CONFLICT, 409},
	        {-EBUSY, API_ERR_BUSY, 409},
	        {-EINVAL, API_ERR_BAD_REQUEST, 400},
	        {-ENOSPC, API_ERR_NO_SPACE, 507},
	        {-EDQUOT, API_ERR_NO_SPACE, 507},
	        {SLATE_ERR_LIBVIRT, API_ERR_UNAVAILABLE, 503},
	        {SLATE_ERR_COMPROMISED, API_ERR_COMPROMISED, 409},
	        {SLATE_ERR_BASE_DRIFT, API_ERR_BASE_DRIFT, 409},
	        {-EIO, API_ERR_FAILED, 500},
	        {-EACCES, API_ERR_FAILED, 500},
	        {SLATE_ERR_INTERNAL, API_ERR_FAILED, 500},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		unsigned status = 0;
		assert_string_equal(api_error_code(want[i].code, &status), want[i].name);
		assert_int_equal(status, want[i].status);
	}
	assert_string_equal(api_error_code(-EIO, NULL), API_ERR_FAILED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_create, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_egress_update, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_start_refusals, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_verbs_refused_blind, setup, teardown),
	        cmocka_unit_test(test_error_codes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

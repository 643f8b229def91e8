/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/conf.h"
#include "util/error.h"

static void test_parse_table(void **state)
{
	static const struct {
		const char *text;
		int r;
		unsigned line;
		const char *key, *value;
		const char *message; /* what the error says, in part */
	} cases[] = {
	        {"state-dir = /srv/slate\n", 0, 0, "state-dir", "/srv/slate", NULL},
	        {"# comment\n\n  libvirt-uri=qemu:///session  \n", 0, 0, "libvirt-uri",
	         "qemu:///session", NULL},
	        {"catalog-url = https://example.org/c.json?a=b=c", 0, 0, "catalog-url",
	         "https://example.org/c.json?a=b=c", NULL},
	        {"storage = qcow2\r\n", 0, 0, "storage", "qcow2", NULL},
	        {"pool-size=1.5T", 0, 0, "pool-size", "1.5T", NULL},
	        {"log-level = debug", 0, 0, "log-level", "debug", NULL},
	        {"channel = beta-2.x", 0, 0, "channel", "beta-2.x", NULL},
	        {"socket-group = dev-team", 0, 0, "socket-group", "dev-team", NULL},
	        {"socket-group = 1001", 0, 0, "socket-group", "1001", NULL},
	        {"trusted-keys = /etc/slate/keys # not a comment: part of the path", 0, 0,
	         "trusted-keys", "/etc/slate/keys # not a comment: part of the path", NULL},
	        {"libvirt-uri = qemu+ssh://root@host.example/system?keyfile=/k", 0, 0,
	         "libvirt-uri", "qemu+ssh://root@host.example/system?keyfile=/k", NULL},
	        {"catalog-url = /srv/catalog/stable.json", 0, 0, "catalog-url",
	         "/srv/catalog/stable.json", NULL},
	        /* Malformed lines. */
	        {"storage = auto\nnoequals\n", SLATE_ERR_INVALID_FORMAT, 2, NULL, NULL,
	         "expected \"key = value\""},
	        {"= value", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "without a key"},
	        {"Storage = auto", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "a-z, 0-9"},
	        {"sp ace = 1", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "a-z, 0-9"},
	        {"storage = auto\n# x\nstorage = pool\n", SLATE_ERR_INVALID_FORMAT, 3, NULL, NULL,
	         "'storage' is set twice"},
	        /* Unknown keys: a typo is not silently a default. */
	        {"\n\n\npool-sise = 64G\n", SLATE_ERR_INVALID_FORMAT, 4, NULL, NULL,
	         "unknown key 'pool-sise'"},
	        {"state-dir = /x\nstatedir = /y\n", SLATE_ERR_INVALID_FORMAT, 2, NULL, NULL,
	         "unknown key 'statedir'"},
	        /* Bad values, each type. */
	        {"state-dir = var/lib/slate", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL,
	         "state-dir = var/lib/slate: an absolute path"},
	        {"runtime-dir =", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "an absolute path"},
	        {"# c\nstorage = btrfs", SLATE_ERR_INVALID_FORMAT, 2, NULL, NULL,
	         "storage = btrfs: one of auto|pool|qcow2"},
	        {"storage = aut", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "one of"},
	        {"storage = auto|pool", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "one of"},
	        {"pool-size = 12", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL,
	         "pool-size = 12: a size such as 64G, at least 256"},
	        {"pool-size = 64 gigs", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "a size"},
	        {"log-level = loud", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL,
	         "log-level = loud: err, warning"},
	        {"libvirt-uri = system", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "a libvirt URI"},
	        {"libvirt-uri = qemu:///sys tem", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL,
	         "a libvirt URI"},
	        {"catalog-url = ftp://example.org/c.json", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL,
	         "an https://"},
	        {"catalog-url = example.org/c.json", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL,
	         "an https://"},
	        {"channel = Stable", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "channel = Stable"},
	        {"channel = a..b", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "a name"},
	        {"channel = -x", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "a name"},
	        {"socket-group = Dev", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "a group name"},
	        {"socket-group = -x", SLATE_ERR_INVALID_FORMAT, 1, NULL, NULL, "a group name"},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		struct conf *c = NULL;
		struct slate_error err = {0};
		int r = conf_parse(cases[i].text, strlen(cases[i].text), &c, &err);
		char where[32];

		if (r != cases[i].r)
			fail_msg("\"%s\": got %d (%s), want %d", cases[i].text, r, err.msg,
			         cases[i].r);
		if (r == 0) {
			assert_non_null(c);
			assert_string_equal(conf_get(c, cases[i].key), cases[i].value);
			assert_string_equal(conf_value(c, cases[i].key), cases[i].value);
			assert_null(conf_get(c, "missing"));
		} else {
			assert_null(c);
			assert_int_equal(err.code, r);
			/* The line comes first, as in "line 2: why". */
			(void)snprintf(where, sizeof(where), "line %u: ", cases[i].line);
			if (strncmp(err.msg, where, strlen(where)) != 0)
				fail_msg("\"%s\": message \"%s\" does not start with \"%s\"",
				         cases[i].text, err.msg, where);
			if (!strstr(err.msg, cases[i].message))
				fail_msg("\"%s\": message \"%s\" lacks \"%s\"", cases[i].text,
				         err.msg, cases[i].message);
		}
		conf_free(c);
	}
}

/* Every key has a type the checker knows, defaults pass their own check, names are unique. */
static void test_table(void **state)
{
	const struct conf_key *k;
	size_t n;
	char why[160];

	k = conf_keys(&n);
	assert_true(n >= 9);
	for (size_t i = 0; i < n; i++) {
		assert_ptr_equal(conf_key_find(k[i].name), &k[i]);
		if (k[i].def && conf_check_value(&k[i], k[i].def, why, sizeof(why)) != 0)
			fail_msg("default of %s (%s) fails its own check: %s", k[i].name, k[i].def,
			         why);
		if (k[i].type == CONF_ENUM)
			assert_non_null(k[i].choices);
	}
	assert_null(conf_key_find("nope"));
	assert_null(conf_key_find(NULL));
	/* Defaults when the file does not set a key (or there is no file). */
	assert_string_equal(conf_value(NULL, "storage"), "auto");
	assert_string_equal(conf_value(NULL, "libvirt-uri"), "qemu:///system");
	assert_string_equal(conf_value(NULL, "channel"), "stable");
	assert_null(conf_value(NULL, "catalog-url"));
	assert_null(conf_value(NULL, "socket-group")); /* slate when it exists: slated decides */
	assert_int_equal(conf_check_value(conf_key_find("storage"), "pool", NULL, 0), 0);
	assert_int_equal(conf_check_value(conf_key_find("storage"), "x", NULL, 0),
	                 SLATE_ERR_INVALID_FORMAT);
}

static void test_nul_and_size(void **state)
{
	static const char with_nul[] = "channel = b\0c\n";
	struct conf *c = NULL;
	struct slate_error err = {0};
	char *big;

	assert_int_equal(conf_parse(with_nul, sizeof(with_nul) - 1, &c, &err),
	                 SLATE_ERR_INVALID_FORMAT);
	assert_string_equal(err.msg, "line 1: a NUL byte in the value");
	big = calloc(1, CONF_MAX_SIZE + 2);
	memset(big, '#', CONF_MAX_SIZE + 1);
	assert_int_equal(conf_parse(big, CONF_MAX_SIZE + 1, &c, NULL), SLATE_ERR_TOO_LARGE);
	assert_null(c);
	assert_int_equal(conf_parse(big, CONF_MAX_SIZE + 1, &c, &err), SLATE_ERR_TOO_LARGE);
	assert_non_null(strstr(err.msg, "larger than"));
	free(big);
}

static void test_load(void **state)
{
	char path[] = "/tmp/test-conf.XXXXXX";
	static const char text[] = "# slate.conf\nstorage = pool\nlog-level = verbose\n";
	struct conf *c = NULL;
	struct slate_error err = {0};
	char want[128];
	int fd;

	assert_int_equal(conf_load("/nonexistent/slate.conf", &c, NULL), -ENOENT);
	assert_null(c);
	assert_int_equal(conf_load("/nonexistent/slate.conf", &c, &err), -ENOENT);
	assert_string_equal(err.msg, "cannot read configuration /nonexistent/slate.conf: No such "
	                             "file or directory");

	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
	(void)close(fd);
	assert_int_equal(conf_load(path, &c, &err), SLATE_ERR_INVALID_FORMAT);
	assert_null(c);
	/* FILE:LINE: why, as slated prints it */
	(void)snprintf(want, sizeof(want),
	               "%s:3: log-level = verbose: err, warning, notice, info or debug", path);
	assert_string_equal(err.msg, want);
	(void)unlink(path);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse_table),
	        cmocka_unit_test(test_table),
	        cmocka_unit_test(test_nul_and_size),
	        cmocka_unit_test(test_load),
	};

	/* For tests/unit/man-coverage.test: the keys slate.conf(5) must describe. */
	if (argc == 2 && streq(argv[1], "--list-keys")) {
		size_t n;
		const struct conf_key *k = conf_keys(&n);

		for (size_t i = 0; i < n; i++)
			printf("%s\t%s\n", k[i].name, k[i].def ? k[i].def : "");
		return 0;
	}
	/* For tests/integration/doc-examples.sh: a file (slate.conf(5)'s example) slated accepts. */
	if (argc == 3 && streq(argv[1], "--check")) {
		struct conf *c = NULL;
		struct slate_error err = {0};
		int r = conf_load(argv[2], &c, &err);

		if (r < 0) {
			fprintf(stderr, "%s\n",
			        err.code ? slate_error_text(&err) : slate_strerror(r));
			return 1;
		}
		conf_free(c);
		return 0;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}

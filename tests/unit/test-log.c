/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <cmocka.h>

#include "util/error.h"
#include "util/log.h"

/*
 * This binary is linked with -Wl,--wrap=sd_journal_sendv, so journald output is recorded here
 * (as tpm2-abrmd wraps its syscalls) instead of landing in the host's journal.
 */
int __wrap_sd_journal_sendv(const struct iovec *iov, int n);

static char journal_fields[4096];
static int journal_calls;
static int journal_result;

int __wrap_sd_journal_sendv(const struct iovec *iov, int n)
{
	size_t o = 0;

	journal_calls++;
	journal_fields[0] = '\0';
	for (int i = 0; i < n; i++) {
		size_t k = iov[i].iov_len;
		if (o + k + 2 > sizeof(journal_fields))
			break;
		memcpy(journal_fields + o, iov[i].iov_base, k);
		o += k;
		journal_fields[o++] = '\n';
		journal_fields[o] = '\0';
	}
	return journal_result;
}

/* stderr redirected to a memfd while a test runs; read back with captured(). */
static int saved_stderr = -1;
static int capture_fd = -1;
static char capture_text[1 << 20];

static void capture_begin(void)
{
	capture_fd = memfd_create("stderr", MFD_CLOEXEC);
	assert_true(capture_fd >= 0);
	saved_stderr = dup(STDERR_FILENO);
	assert_true(saved_stderr >= 0);
	assert_true(dup2(capture_fd, STDERR_FILENO) == STDERR_FILENO);
}

/* Returns what was written to stderr since capture_begin() and restores it. */
static const char *capture_end(void)
{
	ssize_t n;

	assert_true(dup2(saved_stderr, STDERR_FILENO) == STDERR_FILENO);
	saved_stderr = safe_close(saved_stderr);
	n = pread(capture_fd, capture_text, sizeof(capture_text) - 1, 0);
	assert_true(n >= 0);
	capture_text[n] = '\0';
	capture_fd = safe_close(capture_fd);
	return capture_text;
}

static int setup(void **state)
{
	log_open("test-log", LOG_TARGET_STDERR);
	log_set_max_level(LOG_DEBUG);
	journal_calls = 0;
	journal_result = 0;
	return 0;
}

static void test_stderr_format(void **state)
{
	static const struct {
		int level, error;
		const char *msg;
		int ret;
		const char *expect;
	} cases[] = {
	        {LOG_ERR, 0, "plain", 0, "test-log: plain\n"},
	        {LOG_ERR, -ENOENT, "open", -ENOENT, "test-log: open: No such file or directory\n"},
	        {LOG_WARNING, EACCES, "positive errno", -EACCES,
	         "test-log: positive errno: Permission denied\n"},
	        {LOG_INFO, SLATE_ERR_TOO_LARGE, "catalog", SLATE_ERR_TOO_LARGE,
	         "test-log: catalog: Input larger than allowed\n"},
	        {LOG_DEBUG, -EIO, "debug too", -EIO, "test-log: debug too: Input/output error\n"},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		const char *out;
		int r;

		capture_begin();
		r = log_full_errno(cases[i].level, cases[i].error, "%s", cases[i].msg);
		out = capture_end();
		assert_int_equal(r, cases[i].ret);
		assert_string_equal(out, cases[i].expect);
	}
}

static void test_macros_and_errno(void **state)
{
	const char *out;

	capture_begin();
	errno = EXDEV;
	assert_int_equal(log_error("n=%d s=%s", 42, "x"), 0);
	assert_int_equal(errno, EXDEV); /* logging does not clobber errno */
	assert_int_equal(log_error_errno(-EPERM, "e"), -EPERM);
	assert_int_equal(log_warning_errno(EPERM, "w"), -EPERM);
	assert_int_equal(log_ws(LOG_NOTICE, "ws1", "in a workspace"), 0);
	out = capture_end();
	assert_string_equal(out, "test-log: n=42 s=x\n"
	                         "test-log: e: Operation not permitted\n"
	                         "test-log: w: Operation not permitted\n"
	                         "test-log: in a workspace\n");
}

static void test_max_level(void **state)
{
	const char *out;

	log_set_max_level(LOG_WARNING);
	assert_int_equal(log_get_max_level(), LOG_WARNING);
	capture_begin();
	/* Dropped messages still hand the error back, as -abs(error). */
	assert_int_equal(log_info("dropped"), 0);
	assert_int_equal(log_full_errno(LOG_INFO, 5, "dropped"), -5);
	assert_int_equal(log_debug_errno(-EIO, "dropped"), -EIO);
	assert_int_equal(log_debug_errno(SLATE_ERR_CRYPTO, "dropped"), SLATE_ERR_CRYPTO);
	assert_int_equal(log_warning("kept"), 0);
	out = capture_end();
	assert_string_equal(out, "test-log: kept\n");

	log_set_max_level(100);
	assert_int_equal(log_get_max_level(), LOG_DEBUG);
	log_set_max_level(-3);
	assert_int_equal(log_get_max_level(), LOG_EMERG);
}

static void test_level_from_string(void **state)
{
	static const struct {
		const char *s;
		int level;
	} cases[] = {
	        {"err", LOG_ERR},
	        {"warning", LOG_WARNING},
	        {"info", LOG_INFO},
	        {"debug", LOG_DEBUG},
	        {"emerg", LOG_EMERG},
	        {"notice", LOG_NOTICE},
	        {"DEBUG", LOG_DEBUG},
	        {"0", 0},
	        {"7", 7},
	        {"8", -EINVAL},
	        {"-1", -EINVAL},
	        {"", -EINVAL},
	        {"debugx", -EINVAL},
	        {"07", -EINVAL},
	        {" info", -EINVAL},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		if (log_level_from_string(cases[i].s) != cases[i].level)
			fail_msg("\"%s\": got %d, want %d", cases[i].s,
			         log_level_from_string(cases[i].s), cases[i].level);
	assert_int_equal(log_level_from_string(NULL), -EINVAL);
}

/*
 * Redaction, table-driven. Each case registers its secrets, logs msg and expects exactly
 * the output; the check that no secret survives is separate so it cannot be fooled by a
 * wrong expectation.
 */
static const struct redact_case {
	const char *name;
	const char *secrets[3];
	const char *msg;
	const char *expect;
} redact_cases[] = {
        {"middle", {"hunter2"}, "password is hunter2, ok", "password is [redacted], ok"},
        {"start and end", {"tok"}, "tok and tok", "[redacted] and [redacted]"},
        {"whole message", {"ghp_abcdef"}, "ghp_abcdef", "[redacted]"},
        {"absent", {"hunter2"}, "nothing to see", "nothing to see"},
        {"adjacent", {"ab"}, "ababab", "[redacted]"},
        {"overlapping itself", {"aba"}, "xababay", "x[redacted]y"},
        {"two overlapping secrets", {"abcdef", "defghi"}, "<abcdefghi>", "<[redacted]>"},
        {"one inside another", {"SECRETVALUE", "RETVA"}, "k=SECRETVALUE;", "k=[redacted];"},
        {"prefix only is kept", {"hunter2"}, "hunter", "hunter"},
        {"case matters", {"Hunter2"}, "hunter2", "hunter2"},
        {"next to multibyte text",
         {"s\xc3\xa9"
          "cret"},
         "\xc3\xa9s\xc3\xa9"
         "cret!",
         "\xc3\xa9[redacted]!"},
};

static void test_redaction(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(redact_cases); i++) {
		const struct redact_case *c = &redact_cases[i];
		_cleanup_free_ char *want = NULL;
		const char *out;

		for (size_t k = 0; k < ELEMENTSOF(c->secrets) && c->secrets[k]; k++)
			assert_int_equal(log_forbid(c->secrets[k], strlen(c->secrets[k])), 0);
		capture_begin();
		log_error("%s", c->msg);
		out = capture_end();
		for (size_t k = 0; k < ELEMENTSOF(c->secrets) && c->secrets[k]; k++) {
			if (strstr(c->msg, c->secrets[k]) && strstr(out, c->secrets[k]))
				fail_msg("%s: secret \"%s\" leaked: %s", c->name, c->secrets[k],
				         out);
			log_unforbid(c->secrets[k], strlen(c->secrets[k]));
		}
		assert_true(asprintf(&want, "test-log: %s\n", c->expect) > 0);
		if (!streq(out, want))
			fail_msg("%s: got \"%s\", want \"%s\"", c->name, out, want);
	}
}

/* The control: without registration (or after unregistering) the same line goes out as is. */
static void test_unforbid_and_refcount(void **state)
{
	static const char secret[] = "s3cr3t-v4lue";
	const char *out;

	capture_begin();
	log_error("a %s", secret);
	out = capture_end();
	assert_string_equal(out, "test-log: a s3cr3t-v4lue\n");

	assert_int_equal(log_forbid(secret, strlen(secret)), 0);
	assert_int_equal(log_forbid(secret, strlen(secret)), 0); /* a second owner */
	log_unforbid(secret, strlen(secret));                    /* the first one leaves */
	capture_begin();
	log_error("b %s", secret);
	out = capture_end();
	assert_string_equal(out, "test-log: b [redacted]\n");

	log_unforbid(secret, strlen(secret));
	log_unforbid(secret, strlen(secret)); /* unknown by now: harmless */
	capture_begin();
	log_error("c %s", secret);
	out = capture_end();
	assert_string_equal(out, "test-log: c s3cr3t-v4lue\n");
}

static void test_forbid_arguments(void **state)
{
	_cleanup_free_ char *huge = calloc(1, 1 << 20);

	assert_non_null(huge);
	assert_int_equal(log_forbid("x", 0), -EINVAL);
	assert_int_equal(log_forbid(NULL, 3), -EINVAL);
	assert_int_equal(log_forbid(huge, 1 << 20), -E2BIG);
	log_unforbid(NULL, 3);
	log_unforbid("never registered", 16);
}

/* Binary secrets, and a message that carries a NUL through %c. */
static void test_redaction_binary(void **state)
{
	static const uint8_t secret[] = {0xde, 0xad, 0x00, 0xbe, 0xef};
	const char *out;

	assert_int_equal(log_forbid("\xde\xad", 2), 0);
	capture_begin();
	log_error("k=%c%c!", 0xde, 0xad);
	out = capture_end();
	assert_string_equal(out, "test-log: k=[redacted]!\n");
	log_unforbid("\xde\xad", 2);

	assert_int_equal(log_forbid(secret, sizeof(secret)), 0);
	log_unforbid(secret, sizeof(secret));
}

/* The error suffix and the journal fields see the redacted message too. */
static void test_journal_fields(void **state)
{
	const char *out;
	char expect_line[64];
	int line;

	log_open("test-journal", LOG_TARGET_JOURNAL);
	assert_int_equal(log_get_target(), LOG_TARGET_JOURNAL);
	assert_int_equal(log_forbid("topsecret", 9), 0);

	capture_begin();
	/* clang-format off */
	line = __LINE__; log_error_errno(-ENOENT, "key topsecret missing");
	/* clang-format on */
	out = capture_end();
	assert_string_equal(out, "");
	assert_int_equal(journal_calls, 1);
	assert_non_null(strstr(journal_fields,
	                       "MESSAGE=key [redacted] missing: No such file or directory\n"));
	assert_null(strstr(journal_fields, "topsecret"));
	assert_non_null(strstr(journal_fields, "\nPRIORITY=3\n"));
	assert_non_null(strstr(journal_fields, "\nSYSLOG_IDENTIFIER=test-journal\n"));
	assert_non_null(strstr(journal_fields, "\nCODE_FILE="));
	assert_non_null(strstr(journal_fields, "test-log.c\n"));
	snprintf(expect_line, sizeof(expect_line), "\nCODE_LINE=%d\n", line);
	assert_non_null(strstr(journal_fields, expect_line));
	assert_non_null(strstr(journal_fields, "\nCODE_FUNC=test_journal_fields\n"));
	assert_non_null(strstr(journal_fields, "\nERRNO=2\n"));
	assert_null(strstr(journal_fields, "WORKSPACE="));

	/* A slate_err code is not an errno; a workspace adds WORKSPACE=. */
	log_internal(LOG_WARNING, SLATE_ERR_SIGNATURE_INVALID, "dev-box", "f.c", 7, "fn", "bad");
	assert_int_equal(journal_calls, 2);
	assert_non_null(strstr(journal_fields, "MESSAGE=bad: Signature invalid\n"));
	assert_null(strstr(journal_fields, "ERRNO="));
	assert_non_null(strstr(journal_fields, "\nWORKSPACE=dev-box\n"));
	assert_non_null(strstr(journal_fields, "\nPRIORITY=4\n"));

	/* journald away: the line still gets out, on stderr, and still redacted. */
	journal_result = -ECONNREFUSED;
	capture_begin();
	log_error("fallback topsecret");
	out = capture_end();
	assert_string_equal(out, "test-journal: fallback [redacted]\n");

	log_unforbid("topsecret", 9);
	log_open("test-log", LOG_TARGET_STDERR);
}

/* Security events: MESSAGE_ID= and the workspace, domain and image fields, each optional. */
static void test_event_fields(void **state)
{
	const char *out;

	log_open("slated", LOG_TARGET_JOURNAL);
	journal_calls = 0;
	assert_int_equal(log_event(LOG_WARNING, SLATE_MESSAGE_LEAK_BLOCKED, "dev", "slate-dev",
	                           "debian-12", "leak blocked: %s", "api.example.org"),
	                 0);
	assert_int_equal(journal_calls, 1);
	assert_non_null(strstr(journal_fields, "MESSAGE=leak blocked: api.example.org\n"));
	assert_non_null(strstr(journal_fields, "\nMESSAGE_ID=" SLATE_MESSAGE_LEAK_BLOCKED "\n"));
	assert_non_null(strstr(journal_fields, "\nWORKSPACE=dev\n"));
	assert_non_null(strstr(journal_fields, "\nDOMAIN=slate-dev\n"));
	assert_non_null(strstr(journal_fields, "\nIMAGE=debian-12\n"));
	assert_non_null(strstr(journal_fields, "\nPRIORITY=4\n"));
	assert_non_null(strstr(journal_fields, "\nCODE_FUNC=test_event_fields\n"));
	assert_null(strstr(journal_fields, "ERRNO="));

	/* Fields given as NULL are left out; so is a malformed MESSAGE_ID. */
	log_event(LOG_ERR, SLATE_MESSAGE_CATALOG_REFUSED, NULL, NULL, NULL, "refused");
	assert_int_equal(journal_calls, 2);
	assert_non_null(strstr(journal_fields, "\nMESSAGE_ID=" SLATE_MESSAGE_CATALOG_REFUSED "\n"));
	assert_null(strstr(journal_fields, "WORKSPACE="));
	assert_null(strstr(journal_fields, "DOMAIN="));
	assert_null(strstr(journal_fields, "IMAGE="));
	log_event(LOG_ERR, "not-an-id", "w", NULL, "img", "x");
	assert_null(strstr(journal_fields, "MESSAGE_ID="));
	assert_non_null(strstr(journal_fields, "\nIMAGE=img\n"));
	log_event(LOG_ERR, "9AB7AAA3AA6C403085F813345B9E2362", NULL, NULL, NULL, "upper");
	assert_null(strstr(journal_fields, "MESSAGE_ID="));
	log_event(LOG_ERR, NULL, "w", NULL, NULL, "no id");
	assert_null(strstr(journal_fields, "MESSAGE_ID="));
	assert_non_null(strstr(journal_fields, "\nWORKSPACE=w\n"));

	/* The three IDs are distinct 128-bit IDs. */
	assert_int_equal(strlen(SLATE_MESSAGE_LEAK_BLOCKED), 32);
	assert_int_equal(strlen(SLATE_MESSAGE_WORKSPACE_COMPROMISED), 32);
	assert_int_equal(strlen(SLATE_MESSAGE_CATALOG_REFUSED), 32);
	assert_string_not_equal(SLATE_MESSAGE_LEAK_BLOCKED, SLATE_MESSAGE_WORKSPACE_COMPROMISED);
	assert_string_not_equal(SLATE_MESSAGE_LEAK_BLOCKED, SLATE_MESSAGE_CATALOG_REFUSED);
	assert_string_not_equal(SLATE_MESSAGE_CATALOG_REFUSED, SLATE_MESSAGE_WORKSPACE_COMPROMISED);

	/* No secret in the message or in a field. */
	assert_int_equal(log_forbid("sk-live-123", 11), 0);
	log_event(LOG_WARNING, SLATE_MESSAGE_LEAK_BLOCKED, "ws-sk-live-123", NULL, NULL,
	          "saw sk-live-123");
	assert_null(strstr(journal_fields, "sk-live-123"));
	assert_non_null(strstr(journal_fields, "MESSAGE=saw [redacted]\n"));
	assert_non_null(strstr(journal_fields, "\nWORKSPACE=ws-[redacted]\n"));

	/* Level filtering applies as to every line. */
	journal_calls = 0;
	log_set_max_level(LOG_ERR);
	log_event(LOG_WARNING, SLATE_MESSAGE_LEAK_BLOCKED, "dev", NULL, NULL, "dropped");
	assert_int_equal(journal_calls, 0);
	log_set_max_level(LOG_DEBUG);

	/* journald away (or never there): the message alone, on stderr, still redacted. */
	journal_result = -ENOENT;
	capture_begin();
	log_event(LOG_WARNING, SLATE_MESSAGE_WORKSPACE_COMPROMISED, "dev", "slate-dev", NULL,
	          "workspace dev compromised: sk-live-123 sent to evil.example");
	out = capture_end();
	assert_string_equal(out, "slated: workspace dev compromised: [redacted] sent to "
	                         "evil.example\n");
	log_unforbid("sk-live-123", 11);

	/* A process started by hand logs to stderr without asking journald at all. */
	journal_calls = 0;
	journal_result = 0;
	log_open("slated", LOG_TARGET_STDERR);
	capture_begin();
	log_event(LOG_NOTICE, SLATE_MESSAGE_CATALOG_REFUSED, NULL, NULL, "img", "catalog refused");
	out = capture_end();
	assert_string_equal(out, "slated: catalog refused\n");
	assert_int_equal(journal_calls, 0);
	log_open("test-log", LOG_TARGET_STDERR);
}

/* AUTO picks journald only when stderr is the journal stream or systemd started us. */
static void test_auto_target(void **state)
{
	char sockpath[] = "/tmp/test-log-journal.XXXXXX";
	struct stat st;
	char stream[64];
	int fd;

	/* A stand-in for journald's socket: AUTO only checks that it exists. */
	fd = mkstemp(sockpath);
	assert_true(fd >= 0);
	(void)close(fd);
	log_set_journal_socket(sockpath);
	assert_int_equal(unsetenv("JOURNAL_STREAM"), 0);
	assert_int_equal(unsetenv("INVOCATION_ID"), 0);
	log_open("t", LOG_TARGET_AUTO);
	assert_int_equal(log_get_target(), LOG_TARGET_STDERR);

	capture_begin();
	assert_int_equal(fstat(STDERR_FILENO, &st), 0);
	snprintf(stream, sizeof(stream), "%llu:%llu", (unsigned long long)st.st_dev,
	         (unsigned long long)st.st_ino);
	assert_int_equal(setenv("JOURNAL_STREAM", stream, 1), 0);
	log_open("t", LOG_TARGET_AUTO);
	assert_int_equal(log_get_target(), LOG_TARGET_JOURNAL);
	/* Inherited from a parent whose stderr was the journal, but ours is not. */
	snprintf(stream, sizeof(stream), "%llu:%llu", (unsigned long long)st.st_dev,
	         (unsigned long long)st.st_ino + 1);
	assert_int_equal(setenv("JOURNAL_STREAM", stream, 1), 0);
	log_open("t", LOG_TARGET_AUTO);
	assert_int_equal(log_get_target(), LOG_TARGET_STDERR);
	assert_int_equal(setenv("JOURNAL_STREAM", "garbage", 1), 0);
	log_open("t", LOG_TARGET_AUTO);
	assert_int_equal(log_get_target(), LOG_TARGET_STDERR);
	(void)capture_end();

	assert_int_equal(setenv("INVOCATION_ID", "0123456789abcdef0123456789abcdef", 1), 0);
	log_open("t", LOG_TARGET_AUTO);
	assert_int_equal(log_get_target(), LOG_TARGET_JOURNAL);
	/* Under systemd, but no journald (sd_journal_sendv would drop every line silently). */
	assert_int_equal(unlink(sockpath), 0);
	log_open("t", LOG_TARGET_AUTO);
	assert_int_equal(log_get_target(), LOG_TARGET_STDERR);
	capture_begin();
	journal_calls = 0;
	log_error("still seen");
	assert_string_equal(capture_end(), "t: still seen\n");
	assert_int_equal(journal_calls, 0);
	log_set_journal_socket(NULL);
	assert_int_equal(unsetenv("INVOCATION_ID"), 0);
	assert_int_equal(unsetenv("JOURNAL_STREAM"), 0);

	log_open(NULL, LOG_TARGET_STDERR);
	assert_int_equal(log_get_target(), LOG_TARGET_STDERR);
	log_open("test-log", LOG_TARGET_STDERR);
}

/* Every slate_err code has its own description; errno values get libc's, never NULL. */
static void test_strerror(void **state)
{
	static const struct {
		int r;
		const char *expect;
	} cases[] = {
	        {0, "Success"},
	        {-ENOENT, "No such file or directory"},
	        {ENOENT, "No such file or directory"},
	        {SLATE_ERR_NO_BUFFER_SPACE, "Buffer maximum would be exceeded"},
	        {SLATE_ERR_CRYPTO, "Cryptographic operation failed"},
	        {-4000, "Unknown error"},
	        {SLATE_ERR_LAST_, "Unknown slate error"},
	        {-SLATE_ERR_BASE, "Unknown slate error"},
	        {-99999, "Unknown slate error"},
	        {INT_MIN, "Unknown error"},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		assert_string_equal(slate_strerror(cases[i].r), cases[i].expect);
	for (int r = SLATE_ERR_INTERNAL; r > SLATE_ERR_LAST_; r--) {
		const char *s = slate_strerror(r);
		assert_non_null(s);
		assert_null(strstr(s, "Unknown"));
		/* Distinct, so a log line tells which one it was. */
		for (int k = SLATE_ERR_INTERNAL; k > r; k--)
			assert_string_not_equal(s, slate_strerror(k));
	}
}

/* Threads log, register and unregister at once; every line stays whole and redacted. */
#define N_THREADS 4
#define N_LINES 300

static void *log_thread(void *arg)
{
	int id = (int)(intptr_t)arg;
	char own[32];

	snprintf(own, sizeof(own), "own-secret-%d", id);
	for (int i = 0; i < N_LINES; i++) {
		if (log_forbid(own, strlen(own)) < 0)
			return (void *)1;
		log_error("thread %d line %d shared-secret %s", id, i, own);
		log_unforbid(own, strlen(own));
	}
	return NULL;
}

static void test_threads(void **state)
{
	pthread_t t[N_THREADS];
	const char *out, *p;
	int lines = 0;

	assert_int_equal(log_forbid("shared-secret", 13), 0);
	capture_begin();
	for (int i = 0; i < N_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, log_thread, (void *)(intptr_t)i), 0);
	for (int i = 0; i < N_THREADS; i++) {
		void *ret;
		assert_int_equal(pthread_join(t[i], &ret), 0);
		assert_null(ret);
	}
	out = capture_end();
	log_unforbid("shared-secret", 13);

	assert_null(strstr(out, "secret"));
	for (p = out; *p; lines++) {
		const char *nl = strchr(p, '\n');
		int id, i, n = 0;

		assert_non_null(nl);
		assert_int_equal(sscanf(p, "test-log: thread %d line %d [redacted] [redacted]%n",
		                        &id, &i, &n),
		                 2);
		assert_ptr_equal(p + n, nl);
		p = nl + 1;
	}
	assert_int_equal(lines, N_THREADS * N_LINES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup(test_stderr_format, setup),
	        cmocka_unit_test_setup(test_macros_and_errno, setup),
	        cmocka_unit_test_setup(test_max_level, setup),
	        cmocka_unit_test_setup(test_level_from_string, setup),
	        cmocka_unit_test_setup(test_redaction, setup),
	        cmocka_unit_test_setup(test_unforbid_and_refcount, setup),
	        cmocka_unit_test_setup(test_forbid_arguments, setup),
	        cmocka_unit_test_setup(test_redaction_binary, setup),
	        cmocka_unit_test_setup(test_journal_fields, setup),
	        cmocka_unit_test_setup(test_event_fields, setup),
	        cmocka_unit_test_setup(test_auto_target, setup),
	        cmocka_unit_test_setup(test_threads, setup),
	        cmocka_unit_test(test_strerror),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

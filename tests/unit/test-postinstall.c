/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The installer console parser (image/postinstall.c), table-driven: what slated concludes from
 * what an installer VM printed. Success needs every step in order with status 0 and the final
 * "ok"; a failed step keeps its status and output; anything out of order, a wrong nonce, an
 * early end, a timeout or the installer's own error is never taken for success. Each transcript
 * is fed whole and one byte at a time, with the same verdict.
 */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "image/postinstall.h"

#define NONCE "00112233445566778899aabbccddeeff"
#define OTHER "ffeeddccbbaa99887766554433221100"
#define U1 "6a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a21"
#define U2 "6a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a22"

static const char *const uuids[] = {U1, U2};

struct transcript {
	const char *name;
	const char *text;
	bool ended; /* the VM is gone after it */
	enum postinstall_state want;
	size_t done;
	int status;         /* exit status of a failed step, else -1 */
	const char *output; /* the step output must contain this (or NULL) */
	const char *error;  /* the error must contain this (or NULL) */
};

static const struct transcript transcripts[] = {
        {"success, with kernel noise and CR LF",
         "[    0.000000] Linux version 6.1\r\nslate-install: 2 step(s)\r\n"
         "SLATE-INSTALL-BEGIN " NONCE "\r\nSLATE-STEP-BEGIN " NONCE " " U1 "\r\none\r\n"
         "SLATE-STEP-END " NONCE " " U1 " rc=0\r\nSLATE-STEP-BEGIN " NONCE " " U2 "\r\n"
         "SLATE-STEP-END " NONCE " " U2 " rc=0\r\nSLATE-INSTALL-END " NONCE " ok\r\n",
         true, POSTINSTALL_SUCCEEDED, 2, -1, NULL, NULL},
        {"the second step fails",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "SLATE-STEP-END " NONCE " " U1 " rc=0\nSLATE-STEP-BEGIN " NONCE " " U2 "\n"
         "about to fail\noops\nSLATE-STEP-END " NONCE " " U2 " rc=3\n"
         "SLATE-INSTALL-END " NONCE " failed\n",
         true, POSTINSTALL_FAILED, 1, 3, "about to fail\noops\n", NULL},
        {"a failure stays one, whatever follows",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "SLATE-STEP-END " NONCE " " U1 " rc=255\nSLATE-STEP-BEGIN " NONCE " " U2 "\n"
         "SLATE-STEP-END " NONCE " " U2 " rc=0\nSLATE-INSTALL-END " NONCE " ok\n",
         true, POSTINSTALL_FAILED, 0, 255, NULL, NULL},
        {"markers with another nonce are a step's output",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "SLATE-STEP-END " OTHER " " U1 " rc=0\nSLATE-INSTALL-END " OTHER " ok\n",
         true, POSTINSTALL_ERROR, 0, -1, "SLATE-INSTALL-END " OTHER " ok", "stopped before"},
        {"ok before every step ran",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "SLATE-STEP-END " NONCE " " U1 " rc=0\nSLATE-INSTALL-END " NONCE " ok\n",
         true, POSTINSTALL_ERROR, 1, -1, NULL, "before every step"},
        {"ok inside a step",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "SLATE-INSTALL-END " NONCE " ok\n",
         true, POSTINSTALL_ERROR, 0, -1, NULL, "before every step"},
        {"steps out of order", "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U2 "\n",
         true, POSTINSTALL_ERROR, 0, -1, NULL, "out of order"},
        {"a step ending that did not start",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-END " NONCE " " U1 " rc=0\n", true,
         POSTINSTALL_ERROR, 0, -1, NULL, "out of order"},
        {"a status that is not 0..255",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "SLATE-STEP-END " NONCE " " U1 " rc=256\n",
         true, POSTINSTALL_ERROR, 0, -1, NULL, "out of order"},
        {"a status with a leading zero",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "SLATE-STEP-END " NONCE " " U1 " rc=00\n",
         true, POSTINSTALL_ERROR, 0, -1, NULL, "out of order"},
        {"a marker with two spaces is output",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "SLATE-STEP-END " NONCE "  " U1 " rc=0\n",
         true, POSTINSTALL_ERROR, 0, -1, "SLATE-STEP-END", "stopped before"},
        {"the installer's own error",
         "SLATE-INSTALL-ERROR " NONCE " no root file system\x1b[31m on vda\n", true,
         POSTINSTALL_ERROR, 0, -1, NULL, "no root file system?[31m on vda"},
        {"the guest's deadline",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\nsleeping\n"
         "SLATE-INSTALL-END " NONCE " timeout\n",
         true, POSTINSTALL_ERROR, 0, -1, "sleeping", "deadline"},
        {"the VM stopped mid-step",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\npartial", true,
         POSTINSTALL_ERROR, 0, -1, "partial", "stopped before it finished"},
        {"the VM never started the steps", "[ 1.0] Kernel panic\n", true, POSTINSTALL_ERROR, 0, -1,
         NULL, "before it ran any step"},
        {"still running", "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n",
         false, POSTINSTALL_RUNNING, 0, -1, NULL, NULL},
        {"control characters are shown as '?'",
         "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n"
         "red \x1b[31mtext\x07\xc3\xa9\tend\n"
         "SLATE-STEP-END " NONCE " " U1 " rc=1\n",
         true, POSTINSTALL_FAILED, 0, 1, "red ?[31mtext???\tend\n", NULL},
};

static void feed_and_check(const struct transcript *t, bool bytewise)
{
	struct postinstall_log *l = NULL;
	size_t n = strlen(t->text);

	assert_int_equal(postinstall_log_new(NONCE, uuids, 2, &l), 0);
	if (bytewise)
		for (size_t i = 0; i < n; i++)
			(void)postinstall_log_feed(l, t->text + i, 1);
	else
		(void)postinstall_log_feed(l, t->text, n);
	if (t->ended)
		(void)postinstall_log_end(l);
	if (postinstall_log_state(l) != t->want)
		fail_msg("%s: state %d, want %d (error: %s)", t->name, postinstall_log_state(l),
		         t->want, postinstall_log_error(l));
	assert_int_equal(postinstall_log_done(l), t->done);
	assert_int_equal(postinstall_log_exit_status(l), t->status);
	if (t->output && !strstr(postinstall_log_output(l), t->output))
		fail_msg("%s: output '%s' lacks '%s'", t->name, postinstall_log_output(l),
		         t->output);
	if (t->error && !strstr(postinstall_log_error(l), t->error))
		fail_msg("%s: error '%s' lacks '%s'", t->name, postinstall_log_error(l), t->error);
	if (!t->error)
		assert_string_equal(postinstall_log_error(l), "");
	postinstall_log_free(l);
}

static void test_transcripts(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(transcripts) / sizeof(transcripts[0]); i++) {
		feed_and_check(&transcripts[i], false);
		feed_and_check(&transcripts[i], true);
	}
}

/* A line longer than POSTINSTALL_LINE_MAX is cut into pieces, and no piece is a marker, even
 * one that starts with a marker's text exactly at the cut. */
static void test_long_line(void **state)
{
	struct postinstall_log *l = NULL;
	static const char begin[] =
	        "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n";
	static const char fake[] = "SLATE-STEP-END " NONCE " " U1 " rc=0";
	char *pad = malloc(POSTINSTALL_LINE_MAX);

	(void)state;
	assert_non_null(pad);
	memset(pad, 'x', POSTINSTALL_LINE_MAX);
	assert_int_equal(postinstall_log_new(NONCE, uuids, 2, &l), 0);
	(void)postinstall_log_feed(l, begin, strlen(begin));
	(void)postinstall_log_feed(l, pad, POSTINSTALL_LINE_MAX);
	(void)postinstall_log_feed(l, fake, strlen(fake));
	(void)postinstall_log_feed(l, "\n", 1);
	assert_int_equal(postinstall_log_state(l), POSTINSTALL_RUNNING);
	assert_int_equal(postinstall_log_done(l), 0);
	assert_non_null(strstr(postinstall_log_output(l), fake));
	/* The next line is whole again: the real marker counts. */
	(void)postinstall_log_feed(l, fake, strlen(fake));
	(void)postinstall_log_feed(l, "\n", 1);
	assert_int_equal(postinstall_log_done(l), 1);
	postinstall_log_free(l);
	free(pad);
}

/* A step's output is kept up to POSTINSTALL_OUTPUT_MAX bytes: its end. */
static void test_output_tail(void **state)
{
	struct postinstall_log *l = NULL;
	static const char begin[] =
	        "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-STEP-BEGIN " NONCE " " U1 "\n";
	static const char end[] = "SLATE-STEP-END " NONCE " " U1 " rc=7\n";
	char line[64];
	const char *out;

	(void)state;
	assert_int_equal(postinstall_log_new(NONCE, uuids, 2, &l), 0);
	(void)postinstall_log_feed(l, begin, strlen(begin));
	for (int i = 0; i < 10000; i++) {
		int n = snprintf(line, sizeof(line), "line %d of the output\n", i);
		(void)postinstall_log_feed(l, line, (size_t)n);
	}
	(void)postinstall_log_feed(l, end, strlen(end));
	assert_int_equal(postinstall_log_state(l), POSTINSTALL_FAILED);
	assert_int_equal(postinstall_log_exit_status(l), 7);
	out = postinstall_log_output(l);
	assert_int_equal(strlen(out), POSTINSTALL_OUTPUT_MAX);
	assert_non_null(strstr(out, "line 9999 of the output\n"));
	assert_null(strstr(out, "line 0 of"));
	postinstall_log_free(l);
}

static void test_new_refuses(void **state)
{
	struct postinstall_log *l = NULL;
	const char *bad_uuid[] = {"6a1f0c2e"};

	(void)state;
	assert_int_equal(postinstall_log_new("0011", uuids, 2, &l), -EINVAL);
	assert_int_equal(postinstall_log_new("00112233445566778899AABBCCDDEEFF", uuids, 2, &l),
	                 -EINVAL);
	assert_int_equal(postinstall_log_new(NONCE, bad_uuid, 1, &l), -EINVAL);
	assert_int_equal(postinstall_log_new(NONCE, NULL, 1, &l), -EINVAL);
	assert_null(l);
	/* No steps at all: BEGIN then ok is a success. */
	assert_int_equal(postinstall_log_new(NONCE, NULL, 0, &l), 0);
	(void)postinstall_log_feed(
	        l, "SLATE-INSTALL-BEGIN " NONCE "\nSLATE-INSTALL-END " NONCE " ok\n",
	        strlen("SLATE-INSTALL-BEGIN " NONCE "\nSLATE-INSTALL-END " NONCE " ok\n"));
	assert_int_equal(postinstall_log_state(l), POSTINSTALL_SUCCEEDED);
	postinstall_log_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_transcripts),
	        cmocka_unit_test(test_long_line),
	        cmocka_unit_test(test_output_tail),
	        cmocka_unit_test(test_new_refuses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

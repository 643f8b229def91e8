/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the installer console parser (image/postinstall.c): the console is what
 * an installer VM wrote, untrusted bytes. The input is fed whole to one parser and in pieces (cut
 * where its own bytes say) to another; both must agree on everything, and every promise holds:
 * counts in range, a failure has a status 1..255, success means every step, and the text shown
 * to people is bounded, printable ASCII, tab and newline only.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/postinstall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NONCE "0123456789abcdef0123456789abcdef"

static const char *const uuids[] = {
        "6a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a21",
        "6a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a22",
        "6a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a23",
};

static void check_text(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n > max)
		abort();
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!((c >= 0x20 && c < 0x7f) || c == '\t' || c == '\n'))
			abort();
	}
}

static void check(const struct postinstall_log *l)
{
	enum postinstall_state st = postinstall_log_state(l);
	size_t done = postinstall_log_done(l);
	int rc = postinstall_log_exit_status(l);

	if (done > 3 || postinstall_log_current(l) != done)
		abort();
	if (st == POSTINSTALL_SUCCEEDED && done != 3)
		abort();
	if ((st == POSTINSTALL_FAILED) != (rc >= 0) || (rc >= 0 && (rc < 1 || rc > 255)))
		abort();
	if (st == POSTINSTALL_FAILED && done >= 3)
		abort();
	if ((st == POSTINSTALL_ERROR) != (postinstall_log_error(l)[0] != '\0'))
		abort();
	check_text(postinstall_log_output(l), POSTINSTALL_OUTPUT_MAX);
	check_text(postinstall_log_console_tail(l), POSTINSTALL_OUTPUT_MAX);
	check_text(postinstall_log_error(l), 255);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct postinstall_log *whole = NULL, *pieces = NULL;
	size_t off = 0;

	if (postinstall_log_new(NONCE, uuids, 3, &whole) < 0 ||
	    postinstall_log_new(NONCE, uuids, 3, &pieces) < 0)
		abort();
	(void)postinstall_log_feed(whole, data, size);
	check(whole);
	while (off < size) {
		size_t n = 1 + data[off] % 97;
		if (n > size - off)
			n = size - off;
		(void)postinstall_log_feed(pieces, data + off, n);
		off += n;
	}
	if (postinstall_log_state(whole) != postinstall_log_state(pieces) ||
	    postinstall_log_done(whole) != postinstall_log_done(pieces) ||
	    strcmp(postinstall_log_output(whole), postinstall_log_output(pieces)) != 0 ||
	    strcmp(postinstall_log_console_tail(whole), postinstall_log_console_tail(pieces)) != 0)
		abort();
	(void)postinstall_log_end(whole);
	(void)postinstall_log_end(pieces);
	check(whole);
	if (postinstall_log_state(whole) == POSTINSTALL_WAITING ||
	    postinstall_log_state(whole) == POSTINSTALL_RUNNING ||
	    postinstall_log_state(whole) != postinstall_log_state(pieces) ||
	    strcmp(postinstall_log_error(whole), postinstall_log_error(pieces)) != 0)
		abort();
	postinstall_log_free(whole);
	postinstall_log_free(pieces);
	return 0;
}

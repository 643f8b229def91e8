/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the "browser" protocol's request lines (src/slate-guest/browser-req.c),
 * which slate-guest in the browser VM reads from the host (or from stdin with --browser) before
 * it formats a disk, mounts it and starts Chromium. The input is split at newlines and fed line
 * by line, as slate-guest does. Besides not crashing, the target checks what browser.c relies on:
 *   - accepted lines come in the protocol's order, each at most once, stop only after start;
 *   - a ca length is 1..64 KiB, a window within 16..16384 each way;
 *   - a refused line has a reason and changes nothing;
 *   - browser_ca_valid() accepts only printable ASCII with tabs and line ends.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "browser-req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct browser_req r, before;
	size_t off = 0;

	browser_req_init(&r);
	while (off < size) {
		const uint8_t *nl = memchr(data + off, '\n', size - off);
		size_t n = nl ? (size_t)(nl - (data + off)) : size - off;
		const char *why = NULL;
		int kind;

		before = r;
		kind = browser_req_line(&r, (const char *)data + off, n, &why);
		if (kind < 0) {
			if (kind != -EINVAL || !why || !*why || memcmp(&before, &r, sizeof(r)) != 0)
				abort();
		} else {
			if (kind <= (int)before.last ||
			    (kind == BL_STOP) != (before.last == BL_START && kind > BL_START))
				abort();
			if (kind != (int)r.last || n > BROWSER_LINE_MAX)
				abort();
			if (kind == BL_CA && (r.ca_len < 1 || r.ca_len > BROWSER_CA_MAX))
				abort();
		}
		if (r.width < BROWSER_WINDOW_MIN || r.width > BROWSER_WINDOW_MAX ||
		    r.height < BROWSER_WINDOW_MIN || r.height > BROWSER_WINDOW_MAX)
			abort();
		off += n + 1;
	}
	if (browser_ca_valid(data, size)) {
		for (size_t i = 0; i < size; i++)
			if ((data[i] < 0x20 || data[i] > 0x7e) && data[i] != '\n' &&
			    data[i] != '\r' && data[i] != '\t')
				abort();
	}
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the lines slate-guest --probe prints (daemon/probe.c), which slated reads
 * from a guest that has root and may print anything. Besides not crashing, the target checks
 * what the probe's result relies on:
 *   - an accepted device name is 1..16 bytes of [a-z0-9] (or empty for "error -");
 *   - text is 1..256 printable ASCII bytes, a sample at most 32 bytes;
 *   - a hit's first byte lies inside the 64 KiB region, its counts within the region;
 *   - a region's offset is 64 KiB-aligned, a free extent does not wrap;
 *   - a refusal leaves nothing half-parsed that says "clean".
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/probe.h"
#include "storage/residue.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct probe_line l;
	size_t n;

	if (probe_parse_guest_line((const char *)data, size, &l) < 0)
		return 0;
	n = strlen(l.dev);
	if (n > 16 || strspn(l.dev, "abcdefghijklmnopqrstuvwxyz0123456789") != n)
		abort();
	if (n == 0 && l.kind != PL_ERROR && l.kind != PL_REFUSED && l.kind != PL_HEADER &&
	    l.kind != PL_READY && l.kind != PL_END)
		abort();
	if (l.sample_len > PROBE_SAMPLE_MAX || strlen(l.text) > PROBE_TEXT_MAX)
		abort();
	for (size_t i = 0; l.text[i]; i++)
		if ((unsigned char)l.text[i] < 0x20 || (unsigned char)l.text[i] > 0x7e)
			abort();
	if ((l.kind == PL_WRITE || l.kind == PL_COMPARE) &&
	    (l.a % RESIDUE_REGION ||
	     (!l.clean && (l.first >= RESIDUE_REGION || l.bytes > RESIDUE_REGION ||
	                   l.markers > RESIDUE_REGION))))
		abort();
	if (l.kind == PL_COMPARE && !l.clean && (l.blocks < 1 || l.blocks > RESIDUE_BLOCKS))
		abort();
	if (l.kind == PL_FREE && (l.b == 0 || l.a > UINT64_MAX - l.b))
		abort();
	if ((l.kind == PL_ERROR || l.kind == PL_FS || l.kind == PL_REFUSED) && !l.text[0])
		abort();
	return 0;
}

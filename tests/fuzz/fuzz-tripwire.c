/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the leak scanner's patterns (proxy/tripwire.c) and the one automaton they
 * are built into (proxy/scan.c). The input: a byte n (1-4 placeholders), then each placeholder as
 * a length byte (8-71 bytes follow; NULs become 'x'), a byte choosing an encoding, a prefix
 * length and where to put it, and the rest is text. Checks, besides not crashing:
 *   - every (pattern, end) the automaton reports, the text fed in pieces of a size the input
 *     picks, is one a naive search of every pattern finds, and none is missed;
 *   - the chosen placeholder encoded whole (percent or \u with either hex case, base64 or
 *     base64url after 0-2 bytes of prefix, by this file's own encoders) and put into the text is
 *     found, as that placeholder.
 */

#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/tripwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEXT_MAX 4096
#define HITS_MAX 65536

struct hit {
	size_t pattern, end;
};

struct run {
	struct hit *v;
	size_t n;
	size_t base;
	bool overflow;
};

static int hit_fn(size_t pattern, size_t end, void *userdata)
{
	struct run *r = userdata;

	if (r->n == HITS_MAX) {
		r->overflow = true;
		return 1;
	}
	r->v[r->n++] = (struct hit){pattern, r->base + end};
	return 0;
}

static int cmp_hit(const void *a, const void *b)
{
	const struct hit *x = a, *y = b;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return x->pattern < y->pattern ? -1 : x->pattern > y->pattern;
}

/* ph encoded whole after prefix (plen bytes), as chosen by how (0-5), into out. */
static size_t encode(const char *ph, const uint8_t *prefix, size_t plen, unsigned how, char *out)
{
	uint8_t in[80];
	size_t n = plen + strlen(ph), o = 0;

	memcpy(in, prefix, plen);
	memcpy(in + plen, ph, strlen(ph));
	switch (how) {
	case 0:
	case 1:
		for (size_t i = 0; i < n; i++)
			o += (size_t)sprintf(out + o, how ? "%%%02x" : "%%%02X", in[i]);
		return o;
	case 2:
	case 3:
		for (size_t i = 0; i < n; i++)
			o += (size_t)sprintf(out + o, how == 3 ? "\\u%04x" : "\\u%04X", in[i]);
		return o;
	default:
		(void)sodium_bin2base64(out, 512, in, n,
		                        how == 4 ? sodium_base64_VARIANT_ORIGINAL
		                                 : sodium_base64_VARIANT_URLSAFE_NO_PADDING);
		return strlen(out);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char phs_buf[4][72];
	const char *phs[4];
	size_t n, pos = 1, step;
	unsigned how, plen, at, which;
	struct tripwire *t = NULL;
	static char text[TEXT_MAX + 512];
	char enc[512];
	size_t tn, en;
	struct run got = {0};
	struct hit *want;
	size_t n_want = 0;
	uint32_t st = SCAN_START;
	bool found = false;

	if (size < 1 || sodium_init() < 0)
		return 0;
	n = (size_t)(data[0] % 4) + 1;
	for (size_t i = 0; i < n; i++) {
		size_t len;
		if (pos >= size)
			return 0;
		len = 8 + data[pos++] % 64;
		if (pos + len > size)
			return 0;
		for (size_t j = 0; j < len; j++)
			phs_buf[i][j] = data[pos + j] ? (char)data[pos + j] : 'x';
		phs_buf[i][len] = '\0';
		phs[i] = phs_buf[i];
		pos += len;
	}
	if (pos + 3 > size)
		return 0;
	how = data[pos] % 6;
	which = (unsigned)(data[pos] / 6) % n;
	plen = data[pos + 1] % 3;
	step = 1 + data[pos + 1] / 3 % 64;
	at = data[pos + 2];
	pos += 3;
	tn = size - pos < TEXT_MAX ? size - pos : TEXT_MAX;
	memcpy(text, data + pos, tn);
	at = tn ? at % (unsigned)(tn + 1) : 0;
	/* The encoded placeholder goes in at at (the prefix bytes are the text's own, which is
	 * what an encoder would have seen before it). */
	en = encode(phs[which], data + pos, plen <= tn ? plen : 0, how, enc);
	memmove(text + at + en, text + at, tn - at);
	memcpy(text + at, enc, en);
	tn += en;

	if (tripwire_new(phs, n, &t) < 0)
		return 0;
	got.v = malloc(HITS_MAX * sizeof(*got.v));
	want = malloc(HITS_MAX * sizeof(*want));
	if (!got.v || !want)
		abort();
	for (size_t o = 0; o < tn && !got.overflow; o += step) {
		got.base = o;
		(void)scan_feed(tripwire_scan(t), &st, (const uint8_t *)text + o,
		                o + step <= tn ? step : tn - o, hit_fn, &got);
	}
	for (size_t i = 0; i < tripwire_n_pats(t); i++) {
		const struct tripwire_pat *p = tripwire_pat(t, i);
		if (p->len > scan_max_len(tripwire_scan(t)) || strlen(p->form) != p->len)
			abort();
		for (size_t e = p->len; e <= tn && n_want < HITS_MAX; e++)
			if (memcmp(text + e - p->len, p->form, p->len) == 0)
				want[n_want++] = (struct hit){i, e};
	}
	if (!got.overflow && n_want < HITS_MAX) {
		qsort(got.v, got.n, sizeof(*got.v), cmp_hit);
		qsort(want, n_want, sizeof(*want), cmp_hit);
		if (got.n != n_want || memcmp(got.v, want, n_want * sizeof(*want)) != 0)
			abort();
	}
	/* The encoded placeholder is found, as itself, ending inside what was put in. */
	for (size_t i = 0; i < got.n; i++) {
		const struct tripwire_pat *p = tripwire_pat(t, got.v[i].pattern);
		if (strcmp(phs[p->placeholder], phs[which]) == 0 && got.v[i].end > at &&
		    got.v[i].end <= at + en)
			found = true;
	}
	if (!got.overflow && !found)
		abort();
	free(got.v);
	free(want);
	tripwire_unref(t);
	return 0;
}

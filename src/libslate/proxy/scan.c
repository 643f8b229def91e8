/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Aho-Corasick (1975). The trie keeps children in sibling lists (memory linear in the patterns'
 * total length, whatever the alphabet); the root has a full 256-entry table because nearly every
 * byte of ordinary traffic leaves the automaton at the root, and that step then costs one load.
 *
 * Scanning walks a dense transition table (a DFA: fail links folded in) when it fits: bytes are
 * mapped to classes (one per byte that occurs in some pattern, one for all others), and each
 * state has one entry per class, so every byte costs one load whatever the text. Without it,
 * text made of the patterns' own alphabet (base64 bodies, tokens) walked sibling lists and fail
 * chains at every byte: 110-240 MB/s with 10-30 placeholders against about 1 GB/s with the table.
 * Past SCAN_DENSE_MAX entries (very long or very many patterns) the sibling lists are walked.
 *
 * With the table, and every pattern at least SCAN_SAMPLE_MIN bytes long, most text is not walked
 * at all. A bitmap (hashed) holds every 3-byte sequence found anywhere in any pattern. At the
 * root (no match under way), with m the shortest pattern's length, the text is sampled every
 * m - 2 bytes: an occurrence covers m - 2 consecutive 3-byte starts, so it covers a sample, and a
 * sample whose 3 bytes are in no pattern rules out every occurrence starting at or before it.
 * Only when a sample's bytes are in the bitmap is the automaton run, from just past the previous
 * sample until it is back at the root. Patterns of 10-30 placeholders and their encoded forms
 * (proxy/tripwire.h) hold a few percent of the 3-byte sequences of base64 text, the hardest
 * text for this, so it is walked a few bytes in twenty.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/scan.h"

#define SCAN_MAX_STATES (16u << 20)
#define SCAN_DENSE_MAX (4u << 20) /* entries of the dense table: 16 MiB */
#define SCAN_OUT_BIT 0x80000000u  /* in a dense entry: the state reached has outputs */
#define SCAN_SAMPLE_MIN 8u        /* the shortest pattern length that sampling needs */
#define SCAN_TRI_BITS 18u         /* the 3-byte bitmap: 2^18 bits, 32 KiB */

struct node {
	uint32_t fail;
	uint32_t first_child;
	uint32_t next_sibling;
	uint32_t out;      /* head of this node's pattern list in outs (index + 1), or 0 */
	uint32_t out_link; /* nearest node on the fail chain with outputs, or 0 */
	uint8_t byte;
};

struct out {
	uint32_t pattern;
	uint32_t next; /* index + 1, or 0 */
};

struct scan {
	struct node *nodes;
	size_t n_nodes;
	struct out *outs;
	size_t n_outs;
	uint32_t root[256];
	size_t max_len;
	/* The dense table, or NULL: entry [state * n_classes + class[byte]] is the next state times
	 * n_classes, with SCAN_OUT_BIT set when that state has outputs. */
	uint32_t *dense;
	uint32_t n_classes;
	uint8_t class[256];
	/* Bit (b0 | b1 << 8) is set when the two bytes b0 b1 begin some pattern (with the dense
	 * table, and only when every pattern has two bytes or more). */
	uint64_t *pairs;
	/* With the dense table and no pattern shorter than SCAN_SAMPLE_MIN: bit tri_index(q) is
	 * set for every 3 bytes q inside some pattern; the text is sampled every stride bytes. */
	uint64_t *tri;
	size_t stride;
};

static inline uint32_t tri_index(const uint8_t *q)
{
	uint32_t x = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16;
	return (x * 0x9E3779B1u) >> (32 - SCAN_TRI_BITS);
}

static uint32_t child(const struct scan *s, uint32_t node, uint8_t c)
{
	if (node == 0)
		return s->root[c];
	for (uint32_t k = s->nodes[node].first_child; k; k = s->nodes[k].next_sibling)
		if (s->nodes[k].byte == c)
			return k;
	return 0;
}

void scan_free(struct scan *s)
{
	if (!s)
		return;
	free(s->nodes);
	free(s->outs);
	free(s->dense);
	free(s->pairs);
	free(s->tri);
	free(s);
}

size_t scan_max_len(const struct scan *s)
{
	return s ? s->max_len : 0;
}

size_t scan_stride(const struct scan *s)
{
	return s && s->tri ? s->stride : 0;
}

/* queue holds every node but the root in breadth-first order, so a node's fail target (shallower)
 * has its row before the node needs it. Leaves s->dense NULL when the table would be too big or
 * cannot be allocated: scanning then walks the trie. */
static void build_dense(struct scan *s, const uint32_t *queue, size_t min_len)
{
	uint8_t rep[256]; /* a byte of each class (class 0: bytes in no pattern) */
	uint32_t k = 1;

	for (unsigned c = 0; c < 256; c++)
		s->class[c] = 0;
	for (size_t v = 1; v < s->n_nodes; v++) {
		uint8_t c = s->nodes[v].byte;
		if (s->class[c] == 0) {
			rep[k] = c;
			s->class[c] = (uint8_t)k++;
		}
	}
	if (k > 255 || s->n_nodes > SCAN_DENSE_MAX / k)
		return; /* 256 classes would not fit a uint8_t; too big: the trie it is */
	s->dense = calloc(s->n_nodes * k, sizeof(*s->dense));
	if (!s->dense)
		return;
	s->n_classes = k;
	/* Two-byte starts: at the root, a byte whose pair with the next byte begins no pattern
	 * leaves the automaton at the root after the next byte too (no pattern is one byte long),
	 * so it can be skipped; in text drawn from the patterns' own alphabet nearly every byte
	 * starts some pattern, but very few pairs do. */
	s->pairs = min_len >= 2 ? calloc(65536 / 64, sizeof(*s->pairs)) : NULL;
	for (unsigned a = 0; s->pairs && a < 256; a++) {
		uint32_t u = s->root[a];
		for (uint32_t v = u ? s->nodes[u].first_child : 0; v;
		     v = s->nodes[v].next_sibling) {
			unsigned bit = a | (unsigned)s->nodes[v].byte << 8;
			s->pairs[bit / 64] |= UINT64_C(1) << (bit % 64);
		}
	}
	for (size_t j = 0; j < s->n_nodes; j++) {
		uint32_t u = j == 0 ? 0 : queue[j - 1];
		uint32_t *row = s->dense + (size_t)u * k;
		/* Class 0 leads back to the root from anywhere (no pattern holds its bytes). */
		for (uint32_t cl = 1; cl < k; cl++) {
			uint32_t t = child(s, u, rep[cl]);
			if (t)
				row[cl] = t * k |
				          (s->nodes[t].out || s->nodes[t].out_link ? SCAN_OUT_BIT
				                                                   : 0);
			else
				row[cl] = u == 0 ? 0 : s->dense[(size_t)s->nodes[u].fail * k + cl];
		}
	}
}

int scan_new(const char *const *patterns, const size_t *lens, size_t n, struct scan **ret)
{
	_cleanup_(scan_freep) struct scan *s = calloc(1, sizeof(*s));
	size_t total = 1, min_len = 0;
	uint32_t *queue = NULL;
	size_t qh = 0, qt = 0;

	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (lens[i] > SCAN_MAX_STATES || total > SCAN_MAX_STATES - lens[i])
			return -E2BIG;
		total += lens[i];
	}
	s->nodes = calloc(total, sizeof(*s->nodes));
	s->outs = calloc(n ? n : 1, sizeof(*s->outs));
	if (!s->nodes || !s->outs)
		return -ENOMEM;
	s->n_nodes = 1;

	for (size_t i = 0; i < n; i++) {
		uint32_t cur = 0;
		if (lens[i] == 0)
			continue;
		if (lens[i] > s->max_len)
			s->max_len = lens[i];
		if (min_len == 0 || lens[i] < min_len)
			min_len = lens[i];
		for (size_t j = 0; j < lens[i]; j++) {
			uint8_t c = (uint8_t)patterns[i][j];
			uint32_t next = child(s, cur, c);
			if (!next) {
				next = (uint32_t)s->n_nodes++;
				s->nodes[next].byte = c;
				if (cur == 0)
					s->root[c] = next;
				else {
					s->nodes[next].next_sibling = s->nodes[cur].first_child;
					s->nodes[cur].first_child = next;
				}
			}
			cur = next;
		}
		s->outs[s->n_outs] =
		        (struct out){.pattern = (uint32_t)i, .next = s->nodes[cur].out};
		s->nodes[cur].out = (uint32_t)++s->n_outs;
	}

	/* Breadth first: a node's fail link is the longest proper suffix that is in the trie. */
	queue = malloc(s->n_nodes * sizeof(*queue));
	if (!queue)
		return -ENOMEM;
	for (unsigned c = 0; c < 256; c++)
		if (s->root[c])
			queue[qt++] = s->root[c]; /* depth 1: fail to the root */
	while (qh < qt) {
		uint32_t u = queue[qh++];
		for (uint32_t v = s->nodes[u].first_child; v; v = s->nodes[v].next_sibling) {
			uint32_t f = s->nodes[u].fail, t;
			uint8_t c = s->nodes[v].byte;
			for (;;) {
				t = child(s, f, c);
				if (t || f == 0)
					break;
				f = s->nodes[f].fail;
			}
			s->nodes[v].fail = t;
			s->nodes[v].out_link = s->nodes[t].out ? t : s->nodes[t].out_link;
			queue[qt++] = v;
		}
	}
	build_dense(s, queue, min_len);
	free(queue);
	if (s->dense && min_len >= SCAN_SAMPLE_MIN) {
		s->tri = calloc((1u << SCAN_TRI_BITS) / 64, sizeof(*s->tri));
		for (size_t i = 0; s->tri && i < n; i++)
			for (size_t j = 0; j + 3 <= lens[i]; j++) {
				uint32_t b = tri_index((const uint8_t *)patterns[i] + j);
				s->tri[b / 64] |= UINT64_C(1) << (b % 64);
			}
		s->stride = min_len - 2;
	}
	*ret = TAKE_PTR(s);
	return 0;
}

/* Calls fn for each pattern that ends at node st (its own and those down its output links). */
static int report(const struct scan *s, uint32_t st, size_t end, scan_fn fn, void *userdata)
{
	uint32_t o = s->nodes[st].out ? st : s->nodes[st].out_link;

	for (; o; o = s->nodes[o].out_link)
		for (uint32_t e = s->nodes[o].out; e; e = s->outs[e - 1].next) {
			int r = fn(s->outs[e - 1].pattern, end, userdata);
			if (r != 0)
				return r;
		}
	return 0;
}

static int feed_dense(const struct scan *s, uint32_t *state, const uint8_t *p, size_t n, scan_fn fn,
                      void *userdata)
{
	const uint32_t *d = s->dense, k = s->n_classes;
	uint32_t st = *state * k; /* premultiplied: the row's offset */

	for (size_t i = 0; i < n; i++) {
		uint32_t t;

		if (st == 0 && s->pairs) {
			while (i + 1 < n) {
				unsigned bit = p[i] | (unsigned)p[i + 1] << 8;
				if (s->pairs[bit / 64] & UINT64_C(1) << (bit % 64))
					break;
				i++;
			}
		}
		t = d[st + s->class[p[i]]];
		st = t & ~SCAN_OUT_BIT;
		if (t & SCAN_OUT_BIT) {
			int r = report(s, st / k, i + 1, fn, userdata);
			if (r != 0) {
				*state = st / k;
				return r;
			}
		}
	}
	*state = st / k;
	return 0;
}

/* The dense walk with sampling at the root (see the top of this file). */
static int feed_sampled(const struct scan *s, uint32_t *state, const uint8_t *p, size_t n,
                        scan_fn fn, void *userdata)
{
	const uint32_t *d = s->dense, k = s->n_classes;
	const size_t stride = s->stride;
	uint32_t st = *state * k;
	size_t i = 0, until = 0; /* i: the next byte to walk; walk at least up to until */

	for (;;) {
		size_t j;

		/* Walk while a match may be under way. */
		while (i < n && (st != 0 || i < until)) {
			uint32_t t = d[st + s->class[p[i]]];
			st = t & ~SCAN_OUT_BIT;
			i++;
			if (t & SCAN_OUT_BIT) {
				int r = report(s, st / k, i, fn, userdata);
				if (r != 0) {
					*state = st / k;
					return r;
				}
			}
		}
		if (i >= n)
			break;
		/* At the root at i: nothing under way. Sample every stride bytes from the last
		 * start an occurrence beginning at i would cover. */
		for (j = i + stride - 1; j + 2 < n; j += stride) {
			uint32_t b = tri_index(p + j);
			if (s->tri[b / 64] & UINT64_C(1) << (b % 64))
				break;
		}
		/* Nothing starts before the previous sample's next byte: walk from there, past
		 * this sample (or, when the samples ran out, to the end, so that a match begun
		 * near it carries into the next chunk). */
		i = j - stride + 1;
		until = j + 2 < n ? j + 3 : n;
	}
	*state = st / k;
	return 0;
}

int scan_feed(const struct scan *s, uint32_t *state, const uint8_t *p, size_t n, scan_fn fn,
              void *userdata)
{
	uint32_t st = *state;

	if (!s || s->n_outs == 0)
		return 0;
	if (s->dense && s->tri)
		return feed_sampled(s, state, p, n, fn, userdata);
	if (s->dense)
		return feed_dense(s, state, p, n, fn, userdata);
	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];
		uint32_t o;

		/* At the root, skip bytes that start no pattern. */
		if (st == 0) {
			while (i < n && s->root[p[i]] == 0)
				i++;
			if (i == n)
				break;
			c = p[i];
		}
		for (;;) {
			uint32_t t = child(s, st, c);
			if (t) {
				st = t;
				break;
			}
			if (st == 0)
				break;
			st = s->nodes[st].fail;
		}
		o = s->nodes[st].out ? st : s->nodes[st].out_link;
		for (; o; o = s->nodes[o].out_link)
			for (uint32_t e = s->nodes[o].out; e; e = s->outs[e - 1].next) {
				int r = fn(s->outs[e - 1].pattern, i + 1, userdata);
				if (r != 0) {
					*state = st;
					return r;
				}
			}
	}
	*state = st;
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Aho-Corasick (1975). The trie keeps children in sibling lists (memory linear in the patterns'
 * total length, whatever the alphabet); the root has a full 256-entry table because nearly every
 * byte of ordinary traffic leaves the automaton at the root, and that step then costs one load.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/scan.h"

#define SCAN_MAX_STATES (16u << 20)

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
};

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
	free(s);
}

size_t scan_max_len(const struct scan *s)
{
	return s ? s->max_len : 0;
}

int scan_new(const char *const *patterns, const size_t *lens, size_t n, struct scan **ret)
{
	_cleanup_(scan_freep) struct scan *s = calloc(1, sizeof(*s));
	size_t total = 1;
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
	free(queue);
	*ret = TAKE_PTR(s);
	return 0;
}

int scan_feed(const struct scan *s, uint32_t *state, const uint8_t *p, size_t n, scan_fn fn,
              void *userdata)
{
	uint32_t st = *state;

	if (!s || s->n_outs == 0)
		return 0;
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

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * One multi-pattern automaton (Aho-Corasick) over every placeholder of a workspace, so that a
 * request line, its headers, its body and a tunnel's raw bytes are each scanned once for all of
 * them. The automaton is immutable once built and may be shared between threads; a stream's
 * position in it is one uint32_t the caller keeps (start at SCAN_START), so a placeholder split
 * across reads, chunks or TLS records is still found.
 */

#include <stddef.h>
#include <stdint.h>

#include "util/macro.h"

#define SCAN_START 0u

struct scan;

/*
 * Builds the automaton for the n patterns (patterns[i], lens[i] bytes; empty ones never match).
 * Returns 0 or -ENOMEM/-E2BIG (more than 16 Mi states).
 */
int scan_new(const char *const *patterns, const size_t *lens, size_t n, struct scan **ret);
void scan_free(struct scan *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct scan *, scan_free);

/* The longest pattern's length (0 when there are none). */
size_t scan_max_len(const struct scan *s);
/* How far apart the text is sampled at the root (scan.c), or 0 when it is walked byte by byte:
 * for tests and benchmarks. */
size_t scan_stride(const struct scan *s);

/*
 * Called for each match: pattern is its index, end the offset in the fed chunk just past its last
 * byte (a match may have started in an earlier chunk). Return non-zero to stop scanning.
 */
typedef int (*scan_fn)(size_t pattern, size_t end, void *userdata);

/*
 * Advances *state through the n bytes at p, calling fn for every match. Returns 0 when the whole
 * chunk was scanned, or fn's non-zero value when it stopped early. s may be NULL (no patterns).
 */
int scan_feed(const struct scan *s, uint32_t *state, const uint8_t *p, size_t n, scan_fn fn,
              void *userdata);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The leak scanner's patterns (doc/egress-proxy.md, "The scan"): for every placeholder of a
 * workspace, the placeholder itself and the encodings a hijacked agent reaches for first, all in
 * one Aho-Corasick automaton (proxy/scan.h), so that each byte of a request is looked at once
 * whatever the number of secrets and encodings:
 *
 *   - percent-encoded, every byte as %XX (upper and lower case hex): "%67%68%70..."
 *   - JSON \u escapes, every byte as \u00XX (upper and lower case hex): "\u0067\u0068..."
 *   - base64, standard and URL-safe alphabets, at each of the three alignments a placeholder
 *     can have inside a longer encoded string.
 *
 * Encoded forms are made of the placeholder's last TRIPWIRE_WINDOW bytes (the whole of a
 * shorter one): the tail is always drawn at random (prefixes and the "slate" marker are fixed),
 * and the full encoding holds it, so a full encoding is found; a window keeps the automaton small
 * for long values (session tokens). A base64 form covers the whole 3-byte groups of the window
 * at its alignment (encoders differ only at the edges). Forms mixing cases, encoding only some
 * bytes, wrapping lines inside the window or stacking encodings are not found.
 *
 * A tripwire is immutable once built and shared between threads (tripwire_ref/unref); the
 * proxy keeps the last ones built in a tripwire_cache, keyed by the placeholders, so a secret
 * set's patterns are built once, not per connection.
 */

#include <stddef.h>
#include <stdint.h>

#include "proxy/scan.h"
#include "util/macro.h"

#define TRIPWIRE_WINDOW 32u /* bytes of a placeholder's tail its encoded forms are made of */

enum tripwire_enc {
	TRIPWIRE_RAW = 0,   /* the placeholder as it is */
	TRIPWIRE_PERCENT,   /* %XX */
	TRIPWIRE_JSON_U,    /* \u00XX */
	TRIPWIRE_BASE64,    /* standard alphabet (+/) */
	TRIPWIRE_BASE64URL, /* URL-safe alphabet (-_), when it differs */
	_TRIPWIRE_ENC_MAX,
};

struct tripwire_pat {
	uint32_t placeholder; /* index into the placeholders the tripwire was built from */
	uint32_t len;         /* the pattern's length in bytes */
	enum tripwire_enc enc;
	const char *form; /* the pattern (len bytes, NUL-terminated), owned by the tripwire */
};

struct tripwire;

/*
 * Builds the patterns of the n placeholders (NUL-terminated; NULL or empty ones get none) and
 * their automaton. Returns 0 or -ENOMEM/-E2BIG (scan_new's limits).
 */
int tripwire_new(const char *const *placeholders, size_t n, struct tripwire **ret);
struct tripwire *tripwire_ref(struct tripwire *t);
void tripwire_unref(struct tripwire *t); /* NULL is fine */
DEFINE_TRIVIAL_CLEANUP_FUNC(struct tripwire *, tripwire_unref);

/* The automaton; a pattern index it reports is one of tripwire_pat's. */
const struct scan *tripwire_scan(const struct tripwire *t);
/* Pattern i (i < tripwire_n_pats). */
const struct tripwire_pat *tripwire_pat(const struct tripwire *t, size_t i);
size_t tripwire_n_pats(const struct tripwire *t);
/* "percent-encoded", "json-escaped" (\\u00XX), "base64-encoded", "base64url-encoded"; NULL for RAW. */
const char *tripwire_enc_name(enum tripwire_enc e);

/* Variants of one encoding: hex case for PERCENT and JSON_U (0 upper, 1 lower); for BASE64
 * and BASE64URL the alignment (0-2: how many of the window's first bytes share a 3-byte group
 * with what precedes them). RAW has one. */
#define TRIPWIRE_VARIANTS 3u

/*
 * Writes form enc, variant v, of placeholder ph (len bytes) into out (out_size bytes): for RAW
 * the placeholder, for the others the encoding of its window. Returns the form's length, 0 when
 * it does not exist (a variant past the encoding's, a window too short for a group), or
 * -ENOBUFS.
 */
long tripwire_encode(const char *ph, size_t len, enum tripwire_enc enc, unsigned v, char *out,
                     size_t out_size);

/* ---- the cache ---- */

#define TRIPWIRE_CACHE_SIZE 16 /* tripwires kept once no connection uses them */

struct tripwire_cache;

int tripwire_cache_new(struct tripwire_cache **ret);
void tripwire_cache_free(struct tripwire_cache *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct tripwire_cache *, tripwire_cache_free);
/*
 * The tripwire of these placeholders (in this order), built now or taken from the cache; the
 * caller owns one reference (tripwire_unref). Returns 0 or tripwire_new's errors.
 */
int tripwire_cache_get(struct tripwire_cache *c, const char *const *placeholders, size_t n,
                       struct tripwire **ret);
/* How many tripwires were built, for tests: a second get of the same set builds none. */
unsigned long tripwire_cache_builds(const struct tripwire_cache *c);

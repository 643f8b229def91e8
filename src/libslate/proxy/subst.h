/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Substitution outside header fields, for the secrets configured for it (doc/egress-proxy.md,
 * "Substitution"): in form and JSON request bodies (`slate secret set --body`), and as the value
 * of one named query parameter of the request target (`--query PARAM`). Pure functions over
 * buffers: the proxy decides which secrets apply (bound to the host, configured for the place),
 * these put the real values in, each encoded for where it goes. The output holds real values:
 * give them a secure buffer (buf_new_secure) and never log it.
 *
 * What is replaced is the placeholder as it stands in the bytes (as the leak scanner sees it),
 * never an encoded form of it: in a form body anywhere outside a %XX escape; in a JSON body only
 * inside a string, outside an escape sequence; in a query, a parameter whose name (percent-
 * decoded) is the item's param and whose whole value (percent-decoded) is the placeholder.
 * Placeholders that hold a byte that could change the structure ('%', '&', '=', '+', '"', '\\',
 * '#', controls, space) are never matched (slate's placeholders hold none).
 */

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define SUBST_ITEMS_MAX 256 /* items one call takes (a vault's secrets have at most 192 values) */

struct subst_item {
	const char *placeholder; /* NUL-terminated */
	const uint8_t *real;     /* the real value, real_len bytes */
	size_t real_len;
	const char *param; /* subst_query: the query parameter; ignored by the body functions */
};

enum subst_body_type {
	SUBST_BODY_NONE, /* not substituted */
	SUBST_BODY_FORM, /* application/x-www-form-urlencoded */
	SUBST_BODY_JSON, /* application/json, application/<anything>+json */
};

/* The body type a request's Content-Type value (NULL: none) gives; NONE also when it has a
 * Content-Encoding (NULL: none) other than identity (a gzip body is never rewritten). */
enum subst_body_type subst_body_type(const char *content_type, const char *content_encoding);

/*
 * Appends the n bytes at p to out with the items' placeholders replaced by their real values
 * (the longest placeholder at a position wins), encoded for type: form: bytes other than
 * A-Z a-z 0-9 * - . _ as %XX, space as '+'; JSON: '"', '\\' and control bytes escaped (\" \\
 * \u00XX), other bytes as they are. counts (n_items entries, may be NULL) is incremented per
 * substitution. Returns the number of substitutions, or a negative error (out's maximum:
 * SLATE_ERR_NO_BUFFER_SPACE; -EINVAL for type NONE; -E2BIG for over SUBST_ITEMS_MAX items). out is left partly written on failure.
 */
int subst_body(enum subst_body_type type, const uint8_t *p, size_t n,
               const struct subst_item *items, size_t n_items, struct buf *out, unsigned *counts);

/*
 * Appends the request target (origin form, n bytes) to out with the value of each query
 * parameter named by an item's param replaced by its real value, percent-encoded (RFC 3986:
 * every byte but A-Z a-z 0-9 - . _ ~ as %XX), where that value is the item's placeholder.
 * The path, other parameters, and a placeholder anywhere else are copied as they are.
 * Returns the number of substitutions or a negative error, as subst_body.
 */
int subst_query(const char *target, size_t n, const struct subst_item *items, size_t n_items,
                struct buf *out, unsigned *counts);

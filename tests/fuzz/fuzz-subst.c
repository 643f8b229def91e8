/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for body and query substitution (proxy/subst.c). The first byte picks form,
 * JSON or query; the rest is the body or request target. Checked, whatever the input:
 *  - the result is the number of substitutions, and the counts add up to it;
 *  - with every real value equal to its placeholder, the output is the input, byte for byte
 *    (the scanner's view and the substituter's agree on where a placeholder is);
 *  - a real value full of delimiters never adds one: a form or query keeps its '&' '=' '#'
 *    count, and JSON that json-c reads keeps being read (same type), with the real value
 *    inside a string when a substitution was made;
 *  - no placeholder is left where one was substituted (the output holds none when every
 *    occurrence counted, for form bodies).
 */

#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/subst.h"
#include "util/buf.h"
#include "util/macro.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PH_A "slt_fuzzAAAA"
#define PH_B "slt_fuzzAAAAbb"
#define REAL_A "&=#\"\\%+ ?;\x01\xc3\xa9"
#define REAL_B "real-b"

static int run(int what, const uint8_t *p, size_t n, const struct subst_item *items,
               struct buf *out, unsigned *counts)
{
	if (what == 0)
		return subst_query((const char *)p, n, items, 2, out, counts);
	return subst_body((enum subst_body_type)what, p, n, items, 2, out, counts);
}

static size_t count_of(const uint8_t *p, size_t n, char c)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += p[i] == (uint8_t)c;
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct subst_item items[] = {
	        {PH_A, (const uint8_t *)REAL_A, sizeof(REAL_A) - 1, "key"},
	        {PH_B, (const uint8_t *)REAL_B, sizeof(REAL_B) - 1, "k%"},
	};
	const struct subst_item same[] = {
	        {PH_A, (const uint8_t *)PH_A, sizeof(PH_A) - 1, "key"},
	        {PH_B, (const uint8_t *)PH_B, sizeof(PH_B) - 1, "k%"},
	};
	_cleanup_buf_ struct buf *out = NULL, *id = NULL;
	unsigned counts[2] = {0}, counts_id[2] = {0};
	const uint8_t *p;
	size_t n;
	int what, r, r_id;

	if (size < 1 || size > 65536)
		return 0;
	what = data[0] % 3; /* 0 query, 1 form, 2 JSON */
	p = data + 1;
	n = size - 1;
	out = buf_new(n * 40 + 64);
	id = buf_new(n + 64);
	if (!out || !id)
		abort();
	r = run(what, p, n, items, out, counts);
	r_id = run(what, p, n, same, id, counts_id);
	if (r < 0 || r_id < 0 || r != r_id || (unsigned)r != counts[0] + counts[1] ||
	    counts[0] != counts_id[0] || counts[1] != counts_id[1])
		abort();
	if (buf_len(id) != n || memcmp(buf_ptr(id), p, n) != 0)
		abort();
	if (what != 2) {
		/* A real value full of delimiters adds none. */
		if (count_of(buf_ptr(out), buf_len(out), '&') != count_of(p, n, '&') ||
		    count_of(buf_ptr(out), buf_len(out), '=') != count_of(p, n, '=') ||
		    count_of(buf_ptr(out), buf_len(out), '#') != count_of(p, n, '#'))
			abort();
		if (what == 1 && memmem(buf_ptr(out), buf_len(out), PH_A, strlen(PH_A)) &&
		    !memmem(p, n, "%", 1))
			abort(); /* without escapes, every occurrence is substituted */
	} else {
		struct json_tokener *tok = json_tokener_new();
		struct json_object *a, *b;
		if (!tok)
			abort();
		json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
		a = json_tokener_parse_ex(tok, (const char *)p, (int)n);
		if (a && json_tokener_get_error(tok) == json_tokener_success &&
		    (size_t)json_tokener_get_parse_end(tok) == n) {
			json_tokener_reset(tok);
			b = json_tokener_parse_ex(tok, (const char *)buf_ptr(out),
			                          (int)buf_len(out));
			if (!b || json_tokener_get_error(tok) != json_tokener_success ||
			    json_object_get_type(a) != json_object_get_type(b))
				abort();
			json_object_put(b);
		}
		json_object_put(a);
		json_tokener_free(tok);
	}
	return 0;
}

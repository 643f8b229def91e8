/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/buf.h"
#include "util/error.h"

/*
 * This binary is linked with -Wl,--wrap=free: while free_check_marker is set, every block that
 * libslate (or this file) frees is searched for the marker first. That is how the tests see
 * that buf_free_secure() and growing wipe what they release, without reading freed memory.
 */
void __real_free(void *p);
void __wrap_free(void *p);

static const char *free_check_marker;
static unsigned free_check_hits;

void __wrap_free(void *p)
{
	if (p && free_check_marker) {
		size_t n = malloc_usable_size(p), m = strlen(free_check_marker);
		if (n >= m && memmem(p, n, free_check_marker, m))
			free_check_hits++;
	}
	__real_free(p);
}

static const uint8_t pattern[] = "0123456789abcdef";

static void test_roundtrip(void **state)
{
	_cleanup_buf_ struct buf *b = buf_new(BUF_MAX_DEFAULT);
	static const uint8_t expect[] = {
	        0x7f,                                           /* u8 */
	        0x01, 0x02, 0x03, 0x04,                         /* u32 */
	        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* u64 */
	        0x00, 0x00, 0x00, 0x03, 'a',  'b',  'c',        /* string */
	        0x00, 0x00, 0x00, 0x02, 'h',  'i',              /* cstring */
	        'n',  '=',  '4',  '2',                          /* putf */
	};
	const uint8_t *p;
	uint8_t u8;
	uint32_t u32;
	uint64_t u64;
	size_t n;
	char *s;

	assert_non_null(b);
	assert_int_equal(buf_len(b), 0);
	assert_int_equal(buf_max(b), BUF_MAX_DEFAULT);
	assert_int_equal(buf_put_u8(b, 0x7f), 0);
	assert_int_equal(buf_put_u32(b, 0x01020304), 0);
	assert_int_equal(buf_put_u64(b, 0x0102030405060708ull), 0);
	assert_int_equal(buf_put_string(b, "abc", 3), 0);
	assert_int_equal(buf_put_cstring(b, "hi"), 0);
	assert_int_equal(buf_putf(b, "n=%d", 42), 0);
	assert_int_equal(buf_len(b), sizeof(expect));
	assert_memory_equal(buf_ptr(b), expect, sizeof(expect));

	assert_int_equal(buf_get_u8(b, &u8), 0);
	assert_int_equal(u8, 0x7f);
	assert_int_equal(buf_peek_u32(b, &u32), 0);
	assert_int_equal(u32, 0x01020304);
	assert_int_equal(buf_len(b), sizeof(expect) - 1);
	assert_int_equal(buf_get_u32(b, &u32), 0);
	assert_int_equal(u32, 0x01020304);
	assert_int_equal(buf_get_u64(b, &u64), 0);
	assert_true(u64 == 0x0102030405060708ull);
	assert_int_equal(buf_get_string_direct(b, &p, &n), 0);
	assert_int_equal(n, 3);
	assert_memory_equal(p, "abc", 3);
	assert_int_equal(buf_get_cstring(b, &s, &n), 0);
	assert_string_equal(s, "hi");
	assert_int_equal(n, 2);
	free(s);
	s = buf_dup_string(b);
	assert_string_equal(s, "n=42");
	free(s);
	assert_int_equal(buf_consume(b, 4), 0);
	assert_int_equal(buf_len(b), 0);
	assert_int_equal(buf_consume(b, 0), 0);
}

/* Each put, given exactly one byte too little room, must fail and change nothing. */
enum put_op { PUT, PUT_U8, PUT_U32, PUT_U64, PUT_STRING, PUT_CSTRING, PUTF, RESERVE };
static const struct put_case {
	const char *name;
	enum put_op op;
	size_t need; /* bytes the op appends */
} put_cases[] = {
        {"put", PUT, 5},         {"put_u8", PUT_U8, 1},         {"put_u32", PUT_U32, 4},
        {"put_u64", PUT_U64, 8}, {"put_string", PUT_STRING, 9}, {"put_cstring", PUT_CSTRING, 9},
        {"putf", PUTF, 5},       {"reserve", RESERVE, 5},
};

static int do_put(struct buf *b, enum put_op op)
{
	uint8_t *p = NULL;

	switch (op) {
	case PUT:
		return buf_put(b, "hello", 5);
	case PUT_U8:
		return buf_put_u8(b, 1);
	case PUT_U32:
		return buf_put_u32(b, 1);
	case PUT_U64:
		return buf_put_u64(b, 1);
	case PUT_STRING:
		return buf_put_string(b, "hello", 5);
	case PUT_CSTRING:
		return buf_put_cstring(b, "hello");
	case PUTF:
		return buf_putf(b, "%s", "hello");
	case RESERVE:
		return buf_reserve(b, 5, &p);
	}
	return -EINVAL;
}

static void test_max_every_put(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(put_cases); i++) {
		const struct put_case *c = &put_cases[i];
		/* With 3 bytes already there, and with some consumed, to exercise compaction. */
		for (size_t prefill = 0; prefill <= 3; prefill += 3) {
			_cleanup_buf_ struct buf *small = buf_new(prefill + c->need - 1);
			_cleanup_buf_ struct buf *exact = buf_new(prefill + c->need);
			int r;

			assert_non_null(small);
			assert_non_null(exact);
			assert_int_equal(buf_put(small, "xyz", prefill), 0);
			assert_int_equal(buf_put(exact, "xyz", prefill), 0);

			r = do_put(small, c->op);
			if (r != SLATE_ERR_NO_BUFFER_SPACE)
				fail_msg("%s (prefill %zu): got %d, want NO_BUFFER_SPACE", c->name,
				         prefill, r);
			assert_int_equal(buf_len(small), prefill);
			if (prefill > 0)
				assert_memory_equal(buf_ptr(small), "xyz", prefill);

			r = do_put(exact, c->op);
			if (r != 0)
				fail_msg("%s (prefill %zu): got %d at exactly max", c->name,
				         prefill, r);
			assert_int_equal(buf_len(exact), prefill + c->need);
			/* Full now: even a zero-byte put is fine, one more byte is not. */
			assert_int_equal(buf_put(exact, "", 0), 0);
			assert_int_equal(buf_put_u8(exact, 0), SLATE_ERR_NO_BUFFER_SPACE);
		}
	}
}

/* Consuming the front frees room again: max bounds the unread bytes, not the total. */
static void test_max_after_consume(void **state)
{
	_cleanup_buf_ struct buf *b = buf_new(8);

	assert_int_equal(buf_put_u64(b, 42), 0);
	assert_int_equal(buf_put_u8(b, 1), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_consume(b, 4), 0);
	assert_int_equal(buf_put_u32(b, 0xdeadbeef), 0);
	assert_int_equal(buf_len(b), 8);
	assert_memory_equal(buf_ptr(b), "\0\0\0\x2a\xde\xad\xbe\xef", 8);
}

/* A read that does not fit fails with MESSAGE_INCOMPLETE, consumes nothing, writes nothing. */
enum get_op {
	GET,
	GET_U8,
	GET_U32,
	GET_U64,
	GET_STRING_DIRECT,
	GET_CSTRING,
	GET_STRINGB,
	CONSUME,
	PEEK_U32
};
static const struct get_case {
	const char *name;
	enum get_op op;
	const char *data;
	size_t len;
} get_cases[] = {
        {"get 4 of 3", GET, "abc", 3},
        {"u8 of 0", GET_U8, "", 0},
        {"u32 of 3", GET_U32, "abc", 3},
        {"u64 of 7", GET_U64, "abcdefg", 7},
        {"string: short prefix", GET_STRING_DIRECT, "\0\0\0", 3},
        {"string: 4 claimed, 3 there", GET_STRING_DIRECT,
         "\0\0\0\x04"
         "abc",
         7},
        {"string: 0xffffffff claimed", GET_STRING_DIRECT,
         "\xff\xff\xff\xff"
         "abc",
         7},
        {"string: 0x80000000 claimed", GET_STRING_DIRECT,
         "\x80\0\0\0"
         "abc",
         7},
        {"cstring: 4 claimed, 3 there", GET_CSTRING,
         "\0\0\0\x04"
         "abc",
         7},
        {"cstring: 0xffffffff claimed", GET_CSTRING, "\xff\xff\xff\xff", 4},
        {"stringb: 4 claimed, 3 there", GET_STRINGB,
         "\0\0\0\x04"
         "abc",
         7},
        {"stringb: 0xfffffffc claimed", GET_STRINGB,
         "\xff\xff\xff\xfc"
         "abc",
         7},
        {"consume 4 of 3", CONSUME, "abc", 3},
        {"peek u32 of 2", PEEK_U32, "ab", 2},
};

static void test_partial_reads(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(get_cases); i++) {
		const struct get_case *c = &get_cases[i];
		/* Twice: once over a writable buffer, once over a read-only view. */
		for (int view = 0; view <= 1; view++) {
			_cleanup_buf_ struct buf *b = NULL;
			const uint8_t *sentinel_p = (const uint8_t *)"sentinel";
			uint8_t out[8] = "sentinl";
			uint8_t u8 = 0x5a;
			uint32_t u32 = 0x5a5a5a5a;
			uint64_t u64 = 0x5a5a5a5a5a5a5a5aull;
			const uint8_t *p = sentinel_p;
			char *s = (char *)"sentinel";
			struct buf *sb = (struct buf *)&u8;
			size_t n = 12345;
			int r = 0;

			if (view) {
				b = buf_from(c->data, c->len);
			} else {
				b = buf_new(64);
				assert_non_null(b);
				assert_int_equal(buf_put(b, c->data, c->len), 0);
			}
			assert_non_null(b);

			switch (c->op) {
			case GET:
				r = buf_get(b, out, c->len + 1);
				break;
			case GET_U8:
				r = buf_get_u8(b, &u8);
				break;
			case GET_U32:
				r = buf_get_u32(b, &u32);
				break;
			case GET_U64:
				r = buf_get_u64(b, &u64);
				break;
			case GET_STRING_DIRECT:
				r = buf_get_string_direct(b, &p, &n);
				break;
			case GET_CSTRING:
				r = buf_get_cstring(b, &s, &n);
				break;
			case GET_STRINGB:
				r = buf_get_stringb(b, &sb);
				break;
			case CONSUME:
				r = buf_consume(b, c->len + 1);
				break;
			case PEEK_U32:
				r = buf_peek_u32(b, &u32);
				break;
			}
			if (r != SLATE_ERR_MESSAGE_INCOMPLETE)
				fail_msg("%s (view %d): got %d, want MESSAGE_INCOMPLETE", c->name,
				         view, r);
			assert_int_equal(buf_len(b), c->len);
			if (c->len > 0)
				assert_memory_equal(buf_ptr(b), c->data, c->len);
			assert_memory_equal(out, "sentinl", 8);
			assert_int_equal(u8, 0x5a);
			assert_int_equal(u32, 0x5a5a5a5a);
			assert_true(u64 == 0x5a5a5a5a5a5a5a5aull);
			assert_ptr_equal(p, sentinel_p);
			assert_string_equal(s, "sentinel");
			assert_ptr_equal(sb, (struct buf *)&u8);
			assert_int_equal(n, 12345);
		}
	}
}

/* Sizes near SIZE_MAX must fail cleanly, not wrap around and succeed. */
static void test_overflow_sizes(void **state)
{
	_cleanup_buf_ struct buf *b = buf_new(SIZE_MAX), *small = buf_new(16);
	uint8_t *p = (uint8_t *)"untouched";
	uint8_t byte = 0;

	assert_non_null(b);
	assert_non_null(small);
	assert_int_equal(buf_put(b, pattern, 10), 0);

	assert_int_equal(buf_reserve(b, SIZE_MAX, &p), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_reserve(b, SIZE_MAX - 9, &p), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_reserve(b, SIZE_MAX - 5, &p), SLATE_ERR_NO_BUFFER_SPACE);
	assert_string_equal((char *)p, "untouched");
	assert_int_equal(buf_put(b, &byte, SIZE_MAX), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_put_string(b, &byte, SIZE_MAX), SLATE_ERR_STRING_TOO_LARGE);
	assert_int_equal(buf_put_string(b, &byte, SIZE_MAX - 3), SLATE_ERR_STRING_TOO_LARGE);
	assert_int_equal(buf_put_string(b, &byte, (size_t)UINT32_MAX + 1),
	                 SLATE_ERR_STRING_TOO_LARGE);
	assert_int_equal(buf_len(b), 10);

	assert_int_equal(buf_reserve(small, SIZE_MAX, &p), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_put(small, &byte, SIZE_MAX), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_consume(small, SIZE_MAX), SLATE_ERR_MESSAGE_INCOMPLETE);
	assert_int_equal(buf_get(small, &byte, SIZE_MAX), SLATE_ERR_MESSAGE_INCOMPLETE);
	assert_int_equal(buf_len(small), 0);

	/* A u32 prefix one below the wrap point of "4 + n" on 32-bit systems. */
	assert_int_equal(buf_put(small,
	                         "\xff\xff\xff\xfd"
	                         "abc",
	                         7),
	                 0);
	assert_int_equal(buf_get_string_direct(small, NULL, NULL), SLATE_ERR_MESSAGE_INCOMPLETE);
	assert_int_equal(buf_len(small), 7);
}

static const struct cstring_case {
	const char *name;
	const char *wire;
	size_t len;
	int expect;
	const char *value;
} cstring_cases[] = {
        {"plain",
         "\0\0\0\x03"
         "abc",
         7, 0, "abc"},
        {"empty", "\0\0\0\0", 4, 0, ""},
        {"interior NUL",
         "\0\0\0\x03"
         "a\0c",
         7, SLATE_ERR_INVALID_FORMAT, NULL},
        {"leading NUL",
         "\0\0\0\x02"
         "\0c",
         6, SLATE_ERR_INVALID_FORMAT, NULL},
        {"trailing NUL",
         "\0\0\0\x02"
         "c\0",
         6, SLATE_ERR_INVALID_FORMAT, NULL},
        {"only a NUL",
         "\0\0\0\x01"
         "\0",
         5, SLATE_ERR_INVALID_FORMAT, NULL},
};

static void test_get_cstring(void **state)
{
	for (size_t i = 0; i < ELEMENTSOF(cstring_cases); i++) {
		const struct cstring_case *c = &cstring_cases[i];
		_cleanup_buf_ struct buf *b = buf_from(c->wire, c->len);
		_cleanup_free_ char *s = NULL;
		size_t n = 999;
		int r;

		assert_non_null(b);
		r = buf_get_cstring(b, &s, &n);
		if (r != c->expect)
			fail_msg("%s: got %d, want %d", c->name, r, c->expect);
		if (r < 0) {
			assert_null(s);
			assert_int_equal(n, 999);
			assert_int_equal(buf_len(b), c->len);
		} else {
			assert_string_equal(s, c->value);
			assert_int_equal(n, strlen(c->value));
			assert_int_equal(buf_len(b), 0);
		}
	}
}

static void test_get_stringb(void **state)
{
	_cleanup_buf_ struct buf *b = buf_from("\0\0\0\x05"
	                                       "hello"
	                                       "rest",
	                                       13);
	_cleanup_buf_ struct buf *s = NULL;

	assert_int_equal(buf_get_stringb(b, &s), 0);
	assert_non_null(s);
	assert_int_equal(buf_len(s), 5);
	assert_int_equal(buf_max(s), 5);
	assert_memory_equal(buf_ptr(s), "hello", 5);
	assert_int_equal(buf_put_u8(s, 0), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_len(b), 4);
	assert_memory_equal(buf_ptr(b), "rest", 4);
}

static void test_read_only_view(void **state)
{
	static const char data[] = "\0\0\0\x01";
	_cleanup_buf_ struct buf *b = buf_from(data, 4), *empty = buf_from(NULL, 0);
	uint8_t *p = NULL;
	uint32_t v;

	assert_non_null(b);
	assert_non_null(empty);
	assert_null(buf_from(NULL, 1));
	assert_int_equal(buf_len(empty), 0);
	assert_int_equal(buf_get_u8(empty, NULL), SLATE_ERR_MESSAGE_INCOMPLETE);

	assert_ptr_equal(buf_ptr(b), data);
	assert_null(buf_mutable_ptr(b));
	assert_int_equal(buf_put_u8(b, 1), -EROFS);
	assert_int_equal(buf_put(b, "", 0), -EROFS);
	assert_int_equal(buf_putf(b, "x"), -EROFS);
	assert_int_equal(buf_reserve(b, 1, &p), -EROFS);
	assert_null(p);
	assert_int_equal(buf_reset(b), -EROFS);
	assert_int_equal(buf_len(b), 4);
	/* Reading a view consumes the view, never the caller's bytes. */
	assert_int_equal(buf_get_u32(b, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(buf_len(b), 0);
	assert_memory_equal(data, "\0\0\0\x01", 4);
}

/* Many small writes and reads through growth and compaction keep the bytes in order. */
static void test_growth_and_compaction(void **state)
{
	_cleanup_buf_ struct buf *b = buf_new(4096);
	size_t written = 0, read = 0;

	assert_non_null(b);
	for (int round = 0; round < 2000; round++) {
		uint8_t chunk[37];
		size_t k = (size_t)round % sizeof(chunk) + 1;

		for (size_t i = 0; i < k; i++)
			chunk[i] = (uint8_t)((written + i) * 7);
		if (buf_put(b, chunk, k) == 0)
			written += k;
		k = (size_t)round % 23;
		if (k > buf_len(b))
			k = buf_len(b);
		assert_int_equal(buf_get(b, chunk, k), 0);
		for (size_t i = 0; i < k; i++)
			assert_int_equal(chunk[i], (uint8_t)((read + i) * 7));
		read += k;
		assert_int_equal(buf_len(b), written - read);
		assert_true(buf_len(b) <= 4096);
	}
	assert_non_null(buf_mutable_ptr(b));
	assert_ptr_equal(buf_mutable_ptr(b), buf_ptr(b));
	assert_int_equal(buf_reset(b), 0);
	assert_int_equal(buf_len(b), 0);
	assert_int_equal(buf_max(b), 4096);
}

static void test_reserve(void **state)
{
	_cleanup_buf_ struct buf *b = buf_new(16);
	uint8_t *p = NULL;

	assert_int_equal(buf_put(b, "ab", 2), 0);
	assert_int_equal(buf_reserve(b, 3, &p), 0);
	assert_non_null(p);
	assert_memory_equal(p, "\0\0\0", 3);
	memcpy(p, "cde", 3);
	assert_int_equal(buf_len(b), 5);
	assert_memory_equal(buf_ptr(b), "abcde", 5);
	assert_int_equal(buf_reserve(b, 0, NULL), 0);
}

static void test_putf(void **state)
{
	_cleanup_buf_ struct buf *b = buf_new(10);
	_cleanup_free_ char *s = NULL;

	assert_int_equal(buf_putf(b, "%s-%d", "abc", 12345), 0); /* 9 bytes, no NUL */
	assert_int_equal(buf_len(b), 9);
	assert_int_equal(buf_putf(b, "%s", "xy"), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_len(b), 9);
	assert_int_equal(buf_putf(b, "%c", '!'), 0);
	assert_int_equal(buf_putf(b, "%s", ""), 0);
	s = buf_dup_string(b);
	assert_string_equal(s, "abc-12345!");
}

/* Fills a new buffer with the marker first, so it sits in every block the buffer grows out of. */
static struct buf *buf_with_marker(const char *marker)
{
	struct buf *b = buf_new(1 << 20);

	assert_non_null(b);
	assert_int_equal(buf_put(b, marker, strlen(marker)), 0);
	for (int i = 0; i < 2000; i++)
		assert_int_equal(buf_put(b, pattern, sizeof(pattern)), 0);
	assert_int_equal(buf_consume(b, 5), 0);
	return b;
}

/* Every byte a secure buffer held, including blocks left behind by growing, is wiped. */
static void test_free_secure_wipes(void **state)
{
	static const char marker[] = "SECRET-marker-7f3a";
	struct buf *b;

	free_check_marker = marker;
	free_check_hits = 0;
	b = buf_with_marker(marker);
	buf_free_secure(b);
	free_check_marker = NULL;
	assert_int_equal(free_check_hits, 0);

	/* The control: a plain buf_free() leaves the marker in the block it frees, and is seen. */
	free_check_marker = marker;
	b = buf_with_marker(marker);
	buf_free(b);
	free_check_marker = NULL;
	assert_int_equal(free_check_hits, 1);
	free_check_hits = 0;

	buf_free_secure(NULL);
	buf_free(NULL);
}

/* Whether the mapping holding p is marked MADV_DONTDUMP ("dd" in its VmFlags). */
static bool mapping_dontdump(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	bool in = false, dd = false;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			continue;
		}
		if (in && strncmp(line, "VmFlags:", 8) == 0) {
			dd = strstr(line, " dd") != NULL;
			break;
		}
	}
	fclose(f);
	return dd;
}

/* Secrets live in guarded memory: out of core dumps, at a fixed maximum, wiped on free. */
static void test_secure_buffer(void **state)
{
	struct buf *b = buf_new_secure(64), *plain = buf_new(64);
	(void)state;

	assert_non_null(b);
	assert_non_null(plain);
	assert_int_equal(
	        buf_put(b, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 64),
	        0);
	assert_int_equal(buf_put_u8(b, 'x'), SLATE_ERR_NO_BUFFER_SPACE);
	assert_int_equal(buf_len(b), 64);
	assert_true(mapping_dontdump(buf_ptr(b)));
	/* The control: ordinary buffers are not, so the check above means something. */
	assert_int_equal(buf_put_u8(plain, 'x'), 0);
	assert_false(mapping_dontdump(buf_ptr(plain)));
	/* Consumed and compacted, it stays where it is. */
	const uint8_t *where = buf_ptr(b);
	assert_int_equal(buf_consume(b, 60), 0);
	assert_int_equal(buf_put(b, "abcd", 4), 0);
	assert_ptr_equal(buf_ptr(b), where);
	assert_null(buf_new_secure(0));
	assert_null(buf_new_secure(BUF_SECURE_MAX + 1));
	buf_free_secure(b);
	buf_free(plain);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_roundtrip),
	        cmocka_unit_test(test_max_every_put),
	        cmocka_unit_test(test_max_after_consume),
	        cmocka_unit_test(test_partial_reads),
	        cmocka_unit_test(test_overflow_sizes),
	        cmocka_unit_test(test_get_cstring),
	        cmocka_unit_test(test_get_stringb),
	        cmocka_unit_test(test_read_only_view),
	        cmocka_unit_test(test_growth_and_compaction),
	        cmocka_unit_test(test_reserve),
	        cmocka_unit_test(test_putf),
	        cmocka_unit_test(test_free_secure_wipes),
	        cmocka_unit_test(test_secure_buffer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

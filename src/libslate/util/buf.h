/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Bounds-checked bytes with a hard maximum (after OpenSSH's sshbuf). Every byte that arrives
 * from a guest, a network peer or a file is read through one of these. Reads consume from the
 * front; writes append. A write that would grow the buffer past its maximum fails with
 * SLATE_ERR_NO_BUFFER_SPACE and leaves the buffer as it was; a read past the end fails with
 * SLATE_ERR_MESSAGE_INCOMPLETE and consumes nothing. Output parameters are untouched on failure.
 * Integers on the wire are big-endian; strings are a u32 length followed by the bytes.
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "util/macro.h"

#define BUF_MAX_DEFAULT (64u * 1024u * 1024u)

struct buf;

/* Returns a new empty buffer that never grows past max bytes, or NULL on allocation failure. */
struct buf *buf_new(size_t max);
/*
 * Returns a new empty buffer for secrets: its max bytes (at most BUF_SECURE_MAX) are allocated at
 * once with sodium_malloc(), so they sit between guard pages, are locked out of swap, are left
 * out of core dumps (MADV_DONTDUMP) and never move; freeing wipes them. NULL on failure.
 */
#define BUF_SECURE_MAX (1u << 20)
struct buf *buf_new_secure(size_t max);
/* Returns a read-only buffer viewing len bytes at p (not copied; p must outlive it), or NULL. */
struct buf *buf_from(const void *p, size_t len);
/* Frees b; NULL is fine. */
void buf_free(struct buf *b);
/* Wipes every byte b ever held (sodium_memzero), then frees it; for secrets. NULL is fine. */
void buf_free_secure(struct buf *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct buf *, buf_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct buf *, buf_free_secure);
#define _cleanup_buf_ _cleanup_(buf_freep)
#define _cleanup_buf_secure_ _cleanup_(buf_free_securep)

/* Returns the number of unread bytes. */
size_t buf_len(const struct buf *b);
/* Returns the maximum the buffer may hold. */
size_t buf_max(const struct buf *b);
/* Returns a pointer to the unread bytes (valid until the next write). */
const uint8_t *buf_ptr(const struct buf *b);
/* Returns a writable pointer to the unread bytes, or NULL for a read-only buffer. */
uint8_t *buf_mutable_ptr(struct buf *b);
/* Empties b (keeps its maximum). Returns 0, or -EROFS for a read-only buffer. */
int buf_reset(struct buf *b);

/* Appending. Each returns 0 or a negative error. */
int buf_put(struct buf *b, const void *p, size_t n);
int buf_put_u8(struct buf *b, uint8_t v);
int buf_put_u32(struct buf *b, uint32_t v);
int buf_put_u64(struct buf *b, uint64_t v);
int buf_put_string(struct buf *b, const void *p, size_t n);       /* u32 length + bytes */
int buf_put_cstring(struct buf *b, const char *s);                /* u32 length + bytes, no NUL */
int buf_putf(struct buf *b, const char *fmt, ...) _printf_(2, 3); /* formatted, no NUL */
int buf_putfv(struct buf *b, const char *fmt, va_list ap) _printf_(2, 0);
/* Makes room for n bytes at the end and returns a pointer to them in *ret_p. */
int buf_reserve(struct buf *b, size_t n, uint8_t **ret_p);

/* Consuming. Each returns 0 or a negative error. */
int buf_get(struct buf *b, void *out, size_t n);
int buf_get_u8(struct buf *b, uint8_t *ret);
int buf_get_u32(struct buf *b, uint32_t *ret);
int buf_get_u64(struct buf *b, uint64_t *ret);
/* A u32-length-prefixed string; *ret_p points into b and is valid until b is next changed. */
int buf_get_string_direct(struct buf *b, const uint8_t **ret_p, size_t *ret_len);
/* Like buf_get_string_direct, but a NUL-terminated copy with no interior NUL (caller frees). */
int buf_get_cstring(struct buf *b, char **ret, size_t *ret_len);
/* Like buf_get_string_direct, but the string goes into a new buffer limited to its length. */
int buf_get_stringb(struct buf *b, struct buf **ret);
int buf_consume(struct buf *b, size_t n);
/* Reads a u32 without consuming it. */
int buf_peek_u32(const struct buf *b, uint32_t *ret);

/* Returns a NUL-terminated heap copy of the unread bytes (caller frees), or NULL. */
char *buf_dup_string(const struct buf *b);

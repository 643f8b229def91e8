/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The leak scanner's patterns and their cache (see tripwire.h). */
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/tripwire.h"

struct tripwire {
	unsigned long refs; /* atomic */
	struct scan *scan;
	struct tripwire_pat *pats;
	size_t n_pats;
};

static const char *const enc_names[_TRIPWIRE_ENC_MAX] = {
        [TRIPWIRE_RAW] = NULL,
        [TRIPWIRE_PERCENT] = "percent-encoded",
        [TRIPWIRE_JSON_U] = "json-escaped",
        [TRIPWIRE_BASE64] = "base64-encoded",
        [TRIPWIRE_BASE64URL] = "base64url-encoded",
};

const char *tripwire_enc_name(enum tripwire_enc e)
{
	return e < _TRIPWIRE_ENC_MAX ? enc_names[e] : NULL;
}

/* Each byte of p as prefix followed by two hex digits (upper or lower case). */
static long put_hex(const uint8_t *p, size_t n, const char *prefix, bool lower, char *out,
                    size_t size)
{
	const char *digits = lower ? "0123456789abcdef" : "0123456789ABCDEF";
	size_t pl = strlen(prefix), o = 0;

	if (n > size / (pl + 2))
		return -ENOBUFS;
	for (size_t i = 0; i < n; i++) {
		memcpy(out + o, prefix, pl);
		out[o + pl] = digits[p[i] >> 4];
		out[o + pl + 1] = digits[p[i] & 15];
		o += pl + 2;
	}
	return (long)o;
}

/* The whole 3-byte groups of p after its first align bytes, base64-encoded (variant: libsodium's
 * unpadded one; whole groups never need padding). */
static long put_base64(const uint8_t *p, size_t n, unsigned align, int variant, char *out,
                       size_t size)
{
	size_t groups = n > align ? (n - align) / 3 : 0, need;

	if (groups == 0)
		return 0;
	need = sodium_base64_ENCODED_LEN(groups * 3, variant);
	if (need > size)
		return -ENOBUFS;
	(void)sodium_bin2base64(out, need, p + align, groups * 3, variant);
	return (long)(groups * 4);
}

long tripwire_encode(const char *ph, size_t len, enum tripwire_enc enc, unsigned v, char *out,
                     size_t out_size)
{
	size_t wl = len < TRIPWIRE_WINDOW ? len : TRIPWIRE_WINDOW;
	const uint8_t *w = (const uint8_t *)ph + len - wl;
	long r;

	switch (enc) {
	case TRIPWIRE_RAW:
		if (v > 0)
			return 0;
		if (len > out_size)
			return -ENOBUFS;
		memcpy(out, ph, len);
		return (long)len;
	case TRIPWIRE_PERCENT:
		return v > 1 ? 0 : put_hex(w, wl, "%", v == 1, out, out_size);
	case TRIPWIRE_JSON_U:
		return v > 1 ? 0 : put_hex(w, wl, "\\u00", v == 1, out, out_size);
	case TRIPWIRE_BASE64:
		return v > 2 ? 0
		             : put_base64(w, wl, v, sodium_base64_VARIANT_ORIGINAL_NO_PADDING, out,
		                          out_size);
	case TRIPWIRE_BASE64URL:
		if (v > 2)
			return 0;
		r = put_base64(w, wl, v, sodium_base64_VARIANT_URLSAFE_NO_PADDING, out, out_size);
		/* Only where it differs from the standard alphabet's. */
		return r > 0 && !memchr(out, '-', (size_t)r) && !memchr(out, '_', (size_t)r) ? 0
		                                                                             : r;
	default:
		return 0;
	}
}

/* The longest form of a len-byte placeholder (\u00XX of the window, or the placeholder). */
static size_t max_form(size_t len)
{
	size_t wl = len < TRIPWIRE_WINDOW ? len : TRIPWIRE_WINDOW;
	return len > 6 * wl ? len : 6 * wl;
}

struct tripwire *tripwire_ref(struct tripwire *t)
{
	if (t)
		__atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
	return t;
}

void tripwire_unref(struct tripwire *t)
{
	if (!t || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	scan_free(t->scan);
	for (size_t i = 0; i < t->n_pats; i++)
		free((char *)t->pats[i].form);
	free(t->pats);
	free(t);
}

int tripwire_new(const char *const *placeholders, size_t n, struct tripwire **ret)
{
	_cleanup_(tripwire_unrefp) struct tripwire *t = calloc(1, sizeof(*t));
	size_t cap = 0, k = 0;
	char **forms = NULL;
	size_t *lens = NULL;
	int r = -ENOMEM;

	if (!t)
		return -ENOMEM;
	t->refs = 1;
	for (size_t i = 0; i < n; i++)
		if (placeholders[i] && placeholders[i][0])
			cap += 1 + 2 + 2 + 3 + 3;
	t->pats = calloc(cap ? cap : 1, sizeof(*t->pats));
	forms = calloc(cap ? cap : 1, sizeof(*forms));
	lens = calloc(cap ? cap : 1, sizeof(*lens));
	if (!t->pats || !forms || !lens)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const char *ph = placeholders[i];
		size_t len = ph ? strlen(ph) : 0, first = k;

		if (len == 0)
			continue;
		for (enum tripwire_enc e = TRIPWIRE_RAW; e < _TRIPWIRE_ENC_MAX; e++)
			for (unsigned v = 0; v < TRIPWIRE_VARIANTS; v++) {
				size_t size = max_form(len) + 4;
				char *f = malloc(size);
				long fl;
				bool dup = false;

				if (!f)
					goto out;
				fl = tripwire_encode(ph, len, e, v, f, size);
				/* One pattern per distinct form of this placeholder (lower case
				 * hex of a window without letters is its upper case one). */
				for (size_t j = first; fl > 0 && j < k; j++)
					dup = dup || (lens[j] == (size_t)fl &&
					              memcmp(forms[j], f, (size_t)fl) == 0);
				if (fl <= 0 || dup) {
					free(f);
					if (fl < 0) {
						r = (int)fl;
						goto out;
					}
					continue;
				}
				f[fl] = '\0';
				forms[k] = f;
				lens[k] = (size_t)fl;
				t->pats[k] = (struct tripwire_pat){.placeholder = (uint32_t)i,
				                                   .len = (uint32_t)fl,
				                                   .enc = e,
				                                   .form = f};
				t->n_pats = ++k;
			}
	}
	r = scan_new((const char *const *)forms, lens, k, &t->scan);
	if (r >= 0)
		*ret = TAKE_PTR(t);
out:
	free(forms); /* the forms themselves are the patterns' (freed with t on failure) */
	free(lens);
	return r < 0 ? r : 0;
}

const struct scan *tripwire_scan(const struct tripwire *t)
{
	return t ? t->scan : NULL;
}

const struct tripwire_pat *tripwire_pat(const struct tripwire *t, size_t i)
{
	return i < t->n_pats ? &t->pats[i] : NULL;
}

size_t tripwire_n_pats(const struct tripwire *t)
{
	return t ? t->n_pats : 0;
}

/* ---- the cache ---- */

struct cache_entry {
	uint8_t key[crypto_generichash_BYTES];
	struct tripwire *t; /* the cache's reference; NULL: free slot */
	unsigned long used; /* when last handed out (the cache's clock) */
};

struct tripwire_cache {
	pthread_mutex_t lock;
	struct cache_entry v[TRIPWIRE_CACHE_SIZE];
	unsigned long clock;
	unsigned long builds;
};

int tripwire_cache_new(struct tripwire_cache **ret)
{
	struct tripwire_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	*ret = c;
	return 0;
}

void tripwire_cache_free(struct tripwire_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < TRIPWIRE_CACHE_SIZE; i++)
		tripwire_unref(c->v[i].t);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

unsigned long tripwire_cache_builds(const struct tripwire_cache *c)
{
	return __atomic_load_n(&c->builds, __ATOMIC_RELAXED);
}

/* The key of a list of placeholders: BLAKE2b over each one's length and bytes, in order. */
static void cache_key(const char *const *placeholders, size_t n, uint8_t *key)
{
	crypto_generichash_state st;
	uint64_t count = n;

	(void)crypto_generichash_init(&st, NULL, 0, crypto_generichash_BYTES);
	(void)crypto_generichash_update(&st, (const unsigned char *)&count, sizeof(count));
	for (size_t i = 0; i < n; i++) {
		uint64_t len = placeholders[i] ? strlen(placeholders[i]) : 0;
		(void)crypto_generichash_update(&st, (const unsigned char *)&len, sizeof(len));
		if (len)
			(void)crypto_generichash_update(&st, (const unsigned char *)placeholders[i],
			                                (size_t)len);
	}
	(void)crypto_generichash_final(&st, key, crypto_generichash_BYTES);
}

/* Under the lock: the entry holding key, or NULL. */
static struct cache_entry *cache_find(struct tripwire_cache *c, const uint8_t *key)
{
	for (size_t i = 0; i < TRIPWIRE_CACHE_SIZE; i++)
		if (c->v[i].t && memcmp(c->v[i].key, key, sizeof(c->v[i].key)) == 0)
			return &c->v[i];
	return NULL;
}

int tripwire_cache_get(struct tripwire_cache *c, const char *const *placeholders, size_t n,
                       struct tripwire **ret)
{
	uint8_t key[crypto_generichash_BYTES];
	struct tripwire *t = NULL, *old = NULL;
	struct cache_entry *e;
	int r;

	cache_key(placeholders, n, key);
	pthread_mutex_lock(&c->lock);
	e = cache_find(c, key);
	if (e) {
		e->used = ++c->clock;
		*ret = tripwire_ref(e->t);
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	pthread_mutex_unlock(&c->lock);

	/* Built outside the lock: another set's connections need not wait for it. */
	r = tripwire_new(placeholders, n, &t);
	if (r < 0)
		return r;
	__atomic_add_fetch(&c->builds, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&c->lock);
	e = cache_find(c, key);
	if (e) { /* built meanwhile by another connection: theirs is kept */
		old = t;
		t = e->t;
	} else {
		e = &c->v[0];
		for (size_t i = 1; i < TRIPWIRE_CACHE_SIZE && e->t; i++)
			if (!c->v[i].t || c->v[i].used < e->used)
				e = &c->v[i];
		old = e->t; /* the least recently used one goes (its users keep theirs) */
		memcpy(e->key, key, sizeof(key));
		e->t = t;
	}
	e->used = ++c->clock;
	*ret = tripwire_ref(t);
	pthread_mutex_unlock(&c->lock);
	tripwire_unref(old);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "secrets/install.h"
#include "secrets/placeholder.h"
#include "util/error.h"

#define HKDF_INFO_PREFIX "slate-placeholder-v1"
#define SEED_LEN 32u
#define MAX_TRIES 64

static const char BASE62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
static const char BASE32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"; /* AWS key ids */
static const char HEX[] = "0123456789abcdef";

/* What a placeholder looks like: tpl[i] is a fixed character, or '\0' for one drawn from
 * alphabet; with checksum, the last 6 characters are GitHub's CRC32 of [pfx_len, len - 6). */
struct shape {
	char *tpl;
	size_t len;
	const char *alphabet;
	size_t pfx_len;
	bool checksum;
};

static bool starts_with(const char *s, size_t len, const char *p)
{
	size_t n = strlen(p);
	return len >= n && memcmp(s, p, n) == 0;
}

static size_t max_size(size_t a, size_t b)
{
	return a > b ? a : b;
}

static void put(struct shape *sh, size_t pos, const char *s)
{
	for (size_t i = 0; s[i] && pos + i < sh->len; i++)
		sh->tpl[pos + i] = s[i];
}

static int shape_alloc(struct shape *sh, size_t len, const char *alphabet, const char *pfx,
                       bool marker)
{
	if (len > PLACEHOLDER_MAX)
		return SLATE_ERR_TOO_LARGE;
	sh->tpl = calloc(1, len + 1);
	if (!sh->tpl)
		return -ENOMEM;
	sh->len = len;
	sh->alphabet = alphabet;
	sh->pfx_len = strlen(pfx);
	put(sh, 0, pfx);
	if (marker)
		put(sh, sh->pfx_len, PLACEHOLDER_MARKER);
	return 0;
}

/* The prefix of r that matches [a-z]{lo..hi}[0-9]* followed by end, from offset off: returns its
 * length after off, or 0. Used for "sk-ant-<word><digits>-" and "gl<word>-". */
static size_t word_then(const char *r, size_t len, size_t off, size_t hi, char end)
{
	size_t i = off;

	while (i < len && i - off < hi && r[i] >= 'a' && r[i] <= 'z')
		i++;
	if (i == off)
		return 0;
	while (i < len && i - off < hi && r[i] >= '0' && r[i] <= '9')
		i++;
	return i < len && r[i] == end ? i + 1 - off : 0;
}

/* Keeps the real value's sep characters where they are, past the marker. */
static void keep_separators(struct shape *sh, const char *r, size_t len, char sep)
{
	for (size_t i = sh->pfx_len + strlen(PLACEHOLDER_MARKER); i < len && i < sh->len; i++)
		if (r[i] == sep)
			sh->tpl[i] = sep;
}

static int shape_fallback(struct shape *sh, const char *r, size_t len)
{
	bool hex = len >= 32;

	for (size_t i = 0; hex && i < len; i++)
		hex = (r[i] >= '0' && r[i] <= '9') || (r[i] >= 'a' && r[i] <= 'f');
	if (hex) /* e.g. a 40-hex classic GitHub token: no room for a marker in that alphabet */
		return shape_alloc(sh, len, HEX, "", false);
	return shape_alloc(sh, max_size(len, 5 + 32), BASE62, "", true);
}

static int shape_for(enum secret_kind kind, const char *name, const char *r, size_t len,
                     struct shape *sh)
{
	static const char *const openai[] = {"sk-proj-", "sk-svcacct-", "sk-admin-", "sk-None-"};
	static const char *const github[] = {"ghp_", "gho_", "ghu_", "ghs_", "ghr_"};
	char pfx[32];
	size_t n;
	int rc;

	switch (kind) {
	case SECRET_KIND_ANTHROPIC:
		n = starts_with(r, len, "sk-ant-") ? word_then(r, len, 7, 16, '-') : 0;
		if (n > 0) {
			memcpy(pfx, r, 7 + n);
			pfx[7 + n] = '\0';
		} else
			strcpy(pfx, "sk-ant-api03-");
		rc = shape_alloc(sh, max_size(len, strlen(pfx) + 5 + 32), BASE62, pfx, true);
		if (rc == 0 && sh->len == len && len >= 2 && r[len - 2] == 'A' && r[len - 1] == 'A')
			put(sh, len - 2, "AA");
		return rc;
	case SECRET_KIND_OPENAI: {
		const char *p = "sk-";
		const char *t;
		for (size_t i = 0; i < ELEMENTSOF(openai); i++)
			if (starts_with(r, len, openai[i]))
				p = openai[i];
		rc = shape_alloc(sh, max_size(len, strlen(p) + 5 + 32), BASE62, p, true);
		/* Legacy and project keys carry base64("OpenAI") at a fixed place; keep it there. */
		t = rc == 0 ? memmem(r, len, "T3BlbkFJ", 8) : NULL;
		if (t && (size_t)(t - r) >= sh->pfx_len + 5 && (size_t)(t - r) + 8 <= sh->len)
			put(sh, (size_t)(t - r), "T3BlbkFJ");
		return rc;
	}
	case SECRET_KIND_GITHUB:
		for (size_t i = 0; i < ELEMENTSOF(github); i++) {
			if (!starts_with(r, len, github[i]))
				continue;
			rc = shape_alloc(sh, len >= 4 + 5 + 8 + 6 ? len : 40, BASE62, github[i],
			                 true);
			sh->checksum = true;
			return rc;
		}
		if (starts_with(r, len, "github_pat_")) {
			bool sep = len >= 11 + 5 + 16 && memchr(r + 16, '_', len - 16);
			rc = shape_alloc(sh, sep ? len : 93, BASE62, "github_pat_", true);
			if (rc == 0 && sep)
				keep_separators(sh, r, len, '_');
			else if (rc == 0)
				put(sh, 11 + 22, "_"); /* github_pat_<22>_<59> */
			return rc;
		}
		return shape_fallback(sh, r, len);
	case SECRET_KIND_GITLAB:
		n = starts_with(r, len, "gl") ? word_then(r, len, 2, 8, '-') : 0;
		if (n > 0) {
			memcpy(pfx, r, 2 + n);
			pfx[2 + n] = '\0';
		} else
			strcpy(pfx, "glpat-");
		rc = shape_alloc(sh, max_size(len, strlen(pfx) + 5 + 15), BASE62, pfx, true);
		if (rc == 0)
			keep_separators(sh, r, len, '.');
		return rc;
	case SECRET_KIND_AWS:
		if (streq(name, "access-key-id")) {
			bool upper = len >= 4;
			for (size_t i = 0; upper && i < 4; i++)
				upper = r[i] >= 'A' && r[i] <= 'Z';
			if (upper) {
				memcpy(pfx, r, 4);
				pfx[4] = '\0';
			} else
				strcpy(pfx, "AKIA");
			rc = shape_alloc(sh, 20, BASE32, pfx, false);
			if (rc == 0)
				put(sh, 4, "SLATE"); /* the key id alphabet is upper case */
			return rc;
		}
		if (streq(name, "secret-access-key"))
			return shape_alloc(sh, max_size(len, 40), BASE62, "", true);
		if (streq(name, "session-token"))
			return shape_alloc(sh, max_size(len, 5 + 32), BASE62, "", true);
		return -EINVAL;
	case SECRET_KIND_GENERIC:
		return shape_alloc(sh, max_size(len, 4 + 32), BASE62, "slt_", false);
	}
	return -EINVAL;
}

void placeholder_github_checksum(const char *payload, size_t len, char out[7])
{
	uint32_t c = (uint32_t)crc32(0L, (const Bytef *)payload, (uInt)len);

	for (int i = 5; i >= 0; i--) {
		out[i] = BASE62[c % 62];
		c /= 62;
	}
	out[6] = '\0';
}

/* HKDF-SHA256(ikm = real, salt, info = prefix|kind|name|try) -> SEED_LEN bytes. */
static int hkdf_seed(const unsigned char *salt, enum secret_kind kind, const char *name,
                     unsigned attempt, const void *real, size_t len, unsigned char *seed)
{
	unsigned char info[128];
	const char *kn = secret_kind_name(kind);
	size_t il;
	EVP_KDF *kdf;
	EVP_KDF_CTX *ctx;
	OSSL_PARAM params[5];
	int ok;

	il = (size_t)snprintf((char *)info, sizeof(info), "%s%c%s%c%s%c%u", HKDF_INFO_PREFIX, 0,
	                      kn ? kn : "?", 0, name, 0, attempt);
	if (il >= sizeof(info))
		return -EINVAL;
	kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	if (!kdf)
		return SLATE_ERR_CRYPTO;
	ctx = EVP_KDF_CTX_new(kdf);
	EVP_KDF_free(kdf);
	if (!ctx)
		return SLATE_ERR_CRYPTO;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0);
	params[1] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)real, len);
	params[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt,
	                                              INSTALL_SALT_LEN);
	params[3] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, il);
	params[4] = OSSL_PARAM_construct_end();
	ok = EVP_KDF_derive(ctx, seed, SEED_LEN, params);
	EVP_KDF_CTX_free(ctx); /* clears the key material it copied */
	return ok == 1 ? 0 : SLATE_ERR_CRYPTO;
}

/* Fills sh's open positions from a deterministic stream keyed by seed (rejection sampling, so
 * each character is uniform over the alphabet). -EAGAIN when the stream ran short. */
static int fill(const struct shape *sh, const unsigned char *seed, char *out)
{
	size_t alen = strlen(sh->alphabet), limit = 256 - 256 % alen, n = 2 * sh->len + 64, pos = 0;
	_cleanup_free_ unsigned char *stream = malloc(n);

	if (!stream)
		return -ENOMEM;
	randombytes_buf_deterministic(stream, n, seed);
	for (size_t i = 0; i < sh->len; i++) {
		if (sh->tpl[i]) {
			out[i] = sh->tpl[i];
			continue;
		}
		for (;;) {
			if (pos >= n)
				return -EAGAIN;
			if (stream[pos] < limit)
				break;
			pos++;
		}
		out[i] = sh->alphabet[stream[pos++] % alen];
	}
	out[sh->len] = '\0';
	return 0;
}

int placeholder_derive(const unsigned char *salt, enum secret_kind kind, const char *name,
                       const void *real, size_t len, char **ret)
{
	struct shape sh = {0};
	unsigned char seed[SEED_LEN];
	_cleanup_free_ char *out = NULL;
	int r;

	if (!salt || !name || !real || len == 0)
		return -EINVAL;
	if (sodium_init() < 0)
		return SLATE_ERR_CRYPTO;
	r = shape_for(kind, name, real, len, &sh);
	if (r < 0)
		goto done;
	out = malloc(sh.len + 1);
	if (!out) {
		r = -ENOMEM;
		goto done;
	}
	r = SLATE_ERR_INTERNAL;
	for (unsigned attempt = 0; attempt < MAX_TRIES; attempt++) {
		r = hkdf_seed(salt, kind, name, attempt, real, len, seed);
		if (r < 0)
			break;
		r = fill(&sh, seed, out);
		if (r == -EAGAIN)
			continue;
		if (r < 0)
			break;
		if (sh.checksum) {
			size_t plen = sh.len - 6 - sh.pfx_len;
			uint32_t c =
			        (uint32_t)crc32(0L, (const Bytef *)out + sh.pfx_len, (uInt)plen);
			/* A CRC below 62^5 would need a leading '0' pad: some validators compare the
			 * unpadded base62 text, so such payloads are drawn again. */
			if (c < 916132832u) {
				r = -EAGAIN;
				continue;
			}
			placeholder_github_checksum(out + sh.pfx_len, plen, out + sh.len - 6);
		}
		if (memmem(out, sh.len, real, len)) {
			r = -EAGAIN;
			continue;
		}
		*ret = TAKE_PTR(out);
		r = 0;
		break;
	}
	if (r == -EAGAIN)
		r = SLATE_ERR_INTERNAL;
done:
	sodium_memzero(seed, sizeof(seed));
	free(sh.tpl);
	return r;
}

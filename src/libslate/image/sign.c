/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <fcntl.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "image/sign.h"
#include "util/error.h"
#include "util/fs.h"

/* Base64 (RFC 4648, with padding) lengths, without the NUL libsodium adds. */
#define B64_KEY_LEN 44 /* 32 bytes */
#define B64_SIG_LEN 88 /* 64 bytes */
#define PEM_PUBLIC_KEY_BEGIN "-----BEGIN PUBLIC KEY-----"

struct sign_secret_key {
	uint8_t seed[SIGN_SEED_BYTES];
	uint8_t sk[crypto_sign_SECRETKEYBYTES];
	struct sign_public_key pub;
};

static void sodium_freep(void *p)
{
	sodium_free(*(void **)p);
}
#define _cleanup_guarded_ _cleanup_(sodium_freep)

DEFINE_TRIVIAL_CLEANUP_FUNC(BIO *, BIO_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(EVP_PKEY *, EVP_PKEY_free);

static int sign_init(void)
{
	/* Idempotent and thread-safe; needed before sodium_malloc() and randombytes. */
	return sodium_init() < 0 ? SLATE_ERR_CRYPTO : 0;
}

static bool is_printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

int sign_channel_check(const char *channel)
{
	size_t n;

	if (!channel)
		return -EINVAL;
	n = strlen(channel);
	if (n == 0 || n > SIGN_CHANNEL_MAX)
		return -EINVAL;
	if (!((channel[0] >= 'a' && channel[0] <= 'z') || (channel[0] >= '0' && channel[0] <= '9')))
		return -EINVAL;
	for (size_t i = 1; i < n; i++) {
		char c = channel[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return -EINVAL;
	}
	if (strstr(channel, ".."))
		return -EINVAL;
	return 0;
}

int sign_comment_check(const char *s)
{
	size_t n;

	if (!s)
		return -EINVAL;
	n = strlen(s);
	if (n > SIGN_COMMENT_MAX || !is_printable(s, n))
		return -EINVAL;
	return 0;
}

/* sign_init(), then comment (NULL: none) checked: what making a key starts with. */
static int init_with_comment(const char *comment)
{
	int r;

	r = sign_init();
	if (r < 0)
		return r;
	if (comment && sign_comment_check(comment) < 0)
		return -EINVAL;
	return 0;
}

int sign_public_key_from_raw(const uint8_t raw[SIGN_PUBLIC_KEY_BYTES], const char *comment,
                             struct sign_public_key *ret)
{
	struct sign_public_key k = {};
	uint8_t h[crypto_hash_sha256_BYTES];
	int r;

	r = init_with_comment(comment);
	if (r < 0)
		return r;
	/* Refuses small-order points, non-canonical encodings and points outside the main
	 * subgroup: no signature could ever verify under them, or several keys would share one. */
	if (!crypto_core_ed25519_is_valid_point(raw))
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(k.key, raw, SIGN_PUBLIC_KEY_BYTES);
	crypto_hash_sha256(h, raw, SIGN_PUBLIC_KEY_BYTES);
	(void)sodium_bin2hex(k.id, sizeof(k.id), h, SIGN_KEY_ID_BYTES);
	if (comment)
		memcpy(k.comment, comment, strlen(comment) + 1);
	*ret = k;
	return 0;
}

int sign_base64_decode(const char *s, size_t n, uint8_t *out, size_t want)
{
	const char *end = NULL;
	size_t got = 0;

	/* libsodium 1.0.18 decodes bytes above 0x7f as if they were letters (its constant-time
	 * comparisons go wrong for a negative char), so one signature would have many spellings.
	 * Only the alphabet itself gets through to it. */
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '+' || c == '/' || c == '='))
			return SLATE_ERR_INVALID_FORMAT;
	}
	if (sodium_base642bin(out, want, s, n, NULL, &got, &end, sodium_base64_VARIANT_ORIGINAL) !=
	            0 ||
	    got != want || end != s + n)
		return SLATE_ERR_INVALID_FORMAT;
	return 0;
}

/*
 * Splits a one-line key file "TAG BASE64[ COMMENT][\n]": checks the tag, that the line is
 * printable ASCII, and returns the base64 text (exactly b64_len long) and the comment (a
 * pointer into text and its length; 0 when there is none).
 */
static int split_key_line(const char *text, size_t len, const char *tag, size_t b64_len,
                          const char **ret_b64, const char **ret_comment, size_t *ret_comment_len)
{
	size_t tag_len = strlen(tag), rest;

	if (len > 0 && text[len - 1] == '\n')
		len--;
	if (!is_printable(text, len))
		return SLATE_ERR_INVALID_FORMAT;
	if (len < tag_len + 1 + b64_len || memcmp(text, tag, tag_len) != 0 || text[tag_len] != ' ')
		return SLATE_ERR_INVALID_FORMAT;
	rest = len - tag_len - 1 - b64_len;
	if (rest == 1 || (rest > 0 && text[tag_len + 1 + b64_len] != ' '))
		return SLATE_ERR_INVALID_FORMAT; /* junk after the key, or a space and no comment */
	if (rest > 0 && rest - 1 > SIGN_COMMENT_MAX)
		return SLATE_ERR_INVALID_FORMAT;
	*ret_b64 = text + tag_len + 1;
	*ret_comment = rest > 0 ? text + tag_len + 1 + b64_len + 1 : text + len;
	*ret_comment_len = rest > 0 ? rest - 1 : 0;
	return 0;
}

static int parse_pem_public_key(const char *text, size_t len, struct sign_public_key *ret,
                                struct slate_error *err)
{
	_cleanup_(BIO_freep) BIO *bio = NULL;
	_cleanup_(EVP_PKEY_freep) EVP_PKEY *pkey = NULL;
	char *name = NULL, *header = NULL;
	unsigned char *der = NULL;
	const unsigned char *p;
	uint8_t raw[SIGN_PUBLIC_KEY_BYTES];
	size_t raw_len = sizeof(raw);
	long der_len = 0;
	char rest[256];
	int n, r;
	bool ok;

	if (len > INT_MAX)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE, "PEM public key too large");
	bio = BIO_new_mem_buf(text, (int)len);
	if (!bio)
		return -ENOMEM;
	ok = PEM_read_bio(bio, &name, &header, &der, &der_len) == 1;
	if (ok) {
		/* One unencrypted "PUBLIC KEY" block whose DER is one SubjectPublicKeyInfo, all of
		 * it: no headers, nothing after the structure. */
		ok = strcmp(name, "PUBLIC KEY") == 0 && header[0] == '\0' && der_len > 0;
		p = der;
		if (ok)
			pkey = d2i_PUBKEY(NULL, &p, der_len);
		ok = ok && pkey && p == der + der_len;
	}
	OPENSSL_free(name);
	OPENSSL_free(header);
	OPENSSL_free(der);
	if (!ok) {
		ERR_clear_error();
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "not a valid PEM public key");
	}
	/* Only blank space may follow the block. */
	while ((n = BIO_read(bio, rest, sizeof(rest))) > 0)
		for (int i = 0; i < n; i++)
			if (rest[i] != '\n' && rest[i] != '\r' && rest[i] != ' ' && rest[i] != '\t')
				return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
				                       "data after the PEM public key");
	if (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_ED25519)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "PEM public key is not an Ed25519 key");
	if (EVP_PKEY_get_raw_public_key(pkey, raw, &raw_len) != 1 || raw_len != sizeof(raw)) {
		ERR_clear_error();
		return slate_error_set(err, SLATE_ERR_CRYPTO, "cannot read the Ed25519 key");
	}
	r = sign_public_key_from_raw(raw, NULL, ret);
	if (r < 0)
		return slate_error_set(err, r, "not a valid Ed25519 public key");
	return 0;
}

int sign_public_key_parse(const char *text, size_t len, struct sign_public_key *ret,
                          struct slate_error *err)
{
	uint8_t raw[SIGN_PUBLIC_KEY_BYTES];
	char comment[SIGN_COMMENT_MAX + 1];
	const char *b64, *c;
	size_t clen;
	int r;

	if (!text && len > 0)
		return -EINVAL;
	if (len > SIGN_KEY_FILE_MAX)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE, "public key larger than %u bytes",
		                       SIGN_KEY_FILE_MAX);
	if (len >= strlen(PEM_PUBLIC_KEY_BEGIN) &&
	    memcmp(text, PEM_PUBLIC_KEY_BEGIN, strlen(PEM_PUBLIC_KEY_BEGIN)) == 0)
		return parse_pem_public_key(text, len, ret, err);

	r = split_key_line(text, len, SIGN_PUBLIC_KEY_TAG, B64_KEY_LEN, &b64, &c, &clen);
	if (r < 0)
		return slate_error_set(err, r,
		                       "not a public key (want one line \"" SIGN_PUBLIC_KEY_TAG
		                       " BASE64 [COMMENT]\" or a PEM PUBLIC KEY block)");
	if (sign_base64_decode(b64, B64_KEY_LEN, raw, sizeof(raw)) < 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "public key is not 32 bytes of base64");
	memcpy(comment, c, clen);
	comment[clen] = '\0';
	r = sign_public_key_from_raw(raw, comment, ret);
	if (r < 0)
		return slate_error_set(err, r, "not a valid Ed25519 public key");
	return 0;
}

int sign_public_key_load_at(int dirfd, const char *path, struct sign_public_key *ret,
                            struct slate_error *err)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	r = fs_read_file_at(dirfd, path, SIGN_KEY_FILE_MAX, &b);
	if (r == -EFBIG)
		r = SLATE_ERR_TOO_LARGE;
	if (r < 0)
		return slate_error_errno(err, r, "%s", path);
	r = sign_public_key_parse((const char *)buf_ptr(b), buf_len(b), ret, err);
	if (r < 0)
		(void)slate_error_wrap(err, r, "%s", path);
	return r;
}

int sign_public_key_format(const struct sign_public_key *k, char **ret)
{
	char b64[B64_KEY_LEN + 1];
	char *s = NULL;

	(void)sodium_bin2base64(b64, sizeof(b64), k->key, sizeof(k->key),
	                        sodium_base64_VARIANT_ORIGINAL);
	if (asprintf(&s, "%s %s%s%s\n", SIGN_PUBLIC_KEY_TAG, b64, k->comment[0] ? " " : "",
	             k->comment) < 0)
		return -ENOMEM;
	*ret = s;
	return 0;
}

/* Completes k from k->seed. */
static int secret_key_derive(struct sign_secret_key *k, const char *comment)
{
	uint8_t pk[crypto_sign_PUBLICKEYBYTES];

	if (crypto_sign_seed_keypair(pk, k->sk, k->seed) != 0)
		return SLATE_ERR_CRYPTO;
	return sign_public_key_from_raw(pk, comment, &k->pub);
}

int sign_secret_key_generate(const char *comment, struct sign_secret_key **ret)
{
	_cleanup_secret_key_ struct sign_secret_key *k = NULL;
	int r;

	r = init_with_comment(comment);
	if (r < 0)
		return r;
	k = sodium_malloc(sizeof(*k));
	if (!k)
		return -ENOMEM;
	randombytes_buf(k->seed, sizeof(k->seed));
	r = secret_key_derive(k, comment);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(k);
	return 0;
}

int sign_secret_key_load_at(int dirfd, const char *path, struct sign_secret_key **ret,
                            struct slate_error *err)
{
	_cleanup_secret_key_ struct sign_secret_key *k = NULL;
	_cleanup_guarded_ char *text = NULL, *comment = NULL;
	_cleanup_close_ int fd = -1;
	const char *b64, *c;
	size_t len = 0, clen;
	struct stat st;
	int r;

	r = sign_init();
	if (r < 0)
		return slate_error_set(err, r, "cannot initialise libsodium");
	if (!path || !*path)
		return -EINVAL;
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return slate_error_errno(err, -errno, "%s", path);
	if (fstat(fd, &st) < 0)
		return slate_error_errno(err, -errno, "%s", path);
	if (!S_ISREG(st.st_mode))
		return slate_error_set(err, S_ISDIR(st.st_mode) ? -EISDIR : -EBADFD,
		                       "%s: not a regular file", path);
	/* Checked before a byte is read: a secret others could read is no longer secret. */
	if (st.st_mode & 077)
		return slate_error_set(err, SLATE_ERR_KEY_PERMISSIONS,
		                       "%s: secret key file has mode %04o, group or others may "
		                       "access it (chmod 0600 it, or better, make a new key)",
		                       path, (unsigned)(st.st_mode & 07777));
	if (st.st_size > SIGN_KEY_FILE_MAX)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE, "%s: larger than %u bytes", path,
		                       SIGN_KEY_FILE_MAX);

	text = sodium_malloc(SIGN_KEY_FILE_MAX + 1);
	comment = sodium_malloc(SIGN_COMMENT_MAX + 1);
	k = sodium_malloc(sizeof(*k));
	if (!text || !comment || !k)
		return -ENOMEM;
	/* Straight into guarded memory, so the secret never sits in the heap or on the stack. */
	for (;;) {
		ssize_t n = read(fd, text + len, SIGN_KEY_FILE_MAX + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return slate_error_errno(err, -errno, "%s", path);
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > SIGN_KEY_FILE_MAX)
			return slate_error_set(err, SLATE_ERR_TOO_LARGE, "%s: larger than %u bytes",
			                       path, SIGN_KEY_FILE_MAX);
	}

	r = split_key_line(text, len, SIGN_SECRET_KEY_TAG, B64_KEY_LEN, &b64, &c, &clen);
	if (r < 0)
		return slate_error_set(
		        err, r,
		        "%s: not a secret key file (want one line \"" SIGN_SECRET_KEY_TAG
		        " BASE64 [COMMENT]\")",
		        path);
	if (sign_base64_decode(b64, B64_KEY_LEN, k->seed, sizeof(k->seed)) < 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "%s: secret key is not 32 bytes of base64", path);
	memcpy(comment, c, clen);
	comment[clen] = '\0';
	r = secret_key_derive(k, comment);
	if (r < 0)
		return slate_error_errno(err, r, "%s", path);
	*ret = TAKE_PTR(k);
	return 0;
}

const struct sign_public_key *sign_secret_key_public(const struct sign_secret_key *k)
{
	return &k->pub;
}

void sign_secret_key_free(struct sign_secret_key *k)
{
	/* sodium_free() wipes the pages before it releases them. */
	sodium_free(k);
}

static int write_and_sync(int fd, const void *p, size_t n)
{
	int r = fs_write_all(fd, p, n);
	if (r < 0)
		return r;
	return RET_NERRNO(fsync(fd));
}

int sign_keygen_write_at(int dirfd, const char *secret_path, const char *public_path,
                         const struct sign_secret_key *k, struct slate_error *err)
{
	_cleanup_close_ int sfd = -1, pfd = -1;
	_cleanup_guarded_ char *text = NULL;
	_cleanup_free_ char *pub = NULL;
	size_t tag_len = strlen(SIGN_SECRET_KEY_TAG), clen = strlen(k->pub.comment), len;
	int r;

	if (!secret_path || !*secret_path || !public_path || !*public_path)
		return -EINVAL;
	r = sign_public_key_format(&k->pub, &pub);
	if (r < 0)
		return r;
	text = sodium_malloc(tag_len + 1 + B64_KEY_LEN + 1 + clen + 2);
	if (!text)
		return -ENOMEM;
	memcpy(text, SIGN_SECRET_KEY_TAG " ", tag_len + 1);
	(void)sodium_bin2base64(text + tag_len + 1, B64_KEY_LEN + 1, k->seed, sizeof(k->seed),
	                        sodium_base64_VARIANT_ORIGINAL);
	len = tag_len + 1 + B64_KEY_LEN;
	if (clen > 0) {
		text[len++] = ' ';
		memcpy(text + len, k->pub.comment, clen);
		len += clen;
	}
	text[len++] = '\n';

	/* O_EXCL: never replace a key, and never write a secret through someone's symlink. The
	 * mode is set again because umask may have taken the owner's bits away. */
	sfd = openat(dirfd, secret_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	             0600);
	if (sfd < 0)
		return slate_error_errno(err, -errno, "%s", secret_path);
	if (fchmod(sfd, 0600) < 0) {
		r = slate_error_errno(err, -errno, "%s", secret_path);
		goto fail_secret;
	}
	pfd = openat(dirfd, public_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	             0644);
	if (pfd < 0) {
		r = slate_error_errno(err, -errno, "%s", public_path);
		goto fail_secret;
	}
	r = write_and_sync(sfd, text, len);
	if (r < 0) {
		(void)slate_error_errno(err, r, "%s", secret_path);
		goto fail_both;
	}
	r = write_and_sync(pfd, pub, strlen(pub));
	if (r < 0) {
		(void)slate_error_errno(err, r, "%s", public_path);
		goto fail_both;
	}
	return 0;

fail_both:
	(void)unlinkat(dirfd, public_path, 0);
fail_secret:
	(void)unlinkat(dirfd, secret_path, 0);
	return r;
}

int sign_message_new(const char *channel, const uint8_t *data, size_t len, uint8_t **ret,
                     size_t *ret_len)
{
	size_t dlen = strlen(SIGN_DOMAIN), clen, plen;
	uint8_t *m;

	if (sign_channel_check(channel) < 0 || (!data && len > 0))
		return -EINVAL;
	clen = strlen(channel);
	plen = dlen + 1 + strlen("channel=") + clen + 1;
	if (len > SIZE_MAX - plen)
		return -E2BIG;
	m = malloc(plen + len + 1);
	if (!m)
		return -ENOMEM;
	memcpy(m, SIGN_DOMAIN, dlen + 1); /* with its NUL */
	memcpy(m + dlen + 1, "channel=", 8);
	memcpy(m + dlen + 9, channel, clen + 1); /* with its NUL */
	if (len > 0)
		memcpy(m + plen, data, len);
	*ret = m;
	*ret_len = plen + len;
	return 0;
}

/* sign_message_new() after libsodium is ready: what both sign and verify start with. */
static int signed_message(const char *channel, const uint8_t *data, size_t len, uint8_t **ret,
                          size_t *ret_len)
{
	int r;

	r = sign_init();
	if (r < 0)
		return r;
	return sign_message_new(channel, data, len, ret, ret_len);
}

int sign_detached(const struct sign_secret_key *k, const char *channel, const uint8_t *data,
                  size_t len, uint8_t ret_sig[SIGN_SIGNATURE_BYTES])
{
	_cleanup_free_ uint8_t *m = NULL;
	uint8_t sig[SIGN_SIGNATURE_BYTES];
	size_t mlen = 0;
	int r;

	r = signed_message(channel, data, len, &m, &mlen);
	if (r < 0)
		return r;
	if (crypto_sign_detached(sig, NULL, m, mlen, k->sk) != 0)
		return SLATE_ERR_CRYPTO;
	memcpy(ret_sig, sig, sizeof(sig));
	return 0;
}

int sign_verify_detached(const struct sign_public_key *k, const char *channel, const uint8_t *data,
                         size_t len, const uint8_t sig[SIGN_SIGNATURE_BYTES])
{
	_cleanup_free_ uint8_t *m = NULL;
	size_t mlen = 0;
	int r;

	r = signed_message(channel, data, len, &m, &mlen);
	if (r < 0)
		return r;
	/* libsodium refuses non-canonical S and small-order R and keys: strict verification. */
	if (crypto_sign_verify_detached(sig, m, mlen, k->key) != 0)
		return SLATE_ERR_SIGNATURE_INVALID;
	return 0;
}

static bool is_key_id(const char *s, size_t n)
{
	if (n != SIGN_KEY_ID_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int sign_signature_format(const char *key_id, const uint8_t sig[SIGN_SIGNATURE_BYTES], char **ret)
{
	char b64[B64_SIG_LEN + 1];
	char *s = NULL;

	if (!key_id || !is_key_id(key_id, strlen(key_id)))
		return -EINVAL;
	(void)sodium_bin2base64(b64, sizeof(b64), sig, SIGN_SIGNATURE_BYTES,
	                        sodium_base64_VARIANT_ORIGINAL);
	if (asprintf(&s, "%s %s %s\n", SIGN_SIGNATURE_TAG, key_id, b64) < 0)
		return -ENOMEM;
	*ret = s;
	return 0;
}

int sign_signature_parse(const uint8_t *text, size_t len, char ret_key_id[SIGN_KEY_ID_LEN + 1],
                         uint8_t ret_sig[SIGN_SIGNATURE_BYTES], struct slate_error *err)
{
	static const char family[] = "slate-catalog-sig-";
	const char *s = (const char *)text;
	size_t tag_len = strlen(SIGN_SIGNATURE_TAG);
	size_t want = tag_len + 1 + SIGN_KEY_ID_LEN + 1 + B64_SIG_LEN;
	uint8_t sig[SIGN_SIGNATURE_BYTES];

	if (!text || len == 0)
		return slate_error_set(err, SLATE_ERR_SIGNATURE_MISSING,
		                       "the catalog has no signature (the signature is empty)");
	if (len > SIGN_SIG_FILE_MAX)
		return slate_error_set(err, SLATE_ERR_SIGNATURE_FORMAT,
		                       "malformed signature: larger than %u bytes",
		                       SIGN_SIG_FILE_MAX);
	if (s[len - 1] == '\n')
		len--;
	if (len < strlen(family) || memcmp(s, family, strlen(family)) != 0)
		return slate_error_set(err, SLATE_ERR_SIGNATURE_FORMAT,
		                       "malformed signature: not a slate catalog signature");
	if (len < tag_len + 1 || memcmp(s, SIGN_SIGNATURE_TAG, tag_len) != 0 || s[tag_len] != ' ')
		return slate_error_set(err, SLATE_ERR_SIGNATURE_FORMAT,
		                       "malformed signature: unsupported signature format (want "
		                       "\"" SIGN_SIGNATURE_TAG "\")");
	if (len != want || s[tag_len + 1 + SIGN_KEY_ID_LEN] != ' ' ||
	    !is_key_id(s + tag_len + 1, SIGN_KEY_ID_LEN))
		return slate_error_set(err, SLATE_ERR_SIGNATURE_FORMAT,
		                       "malformed signature: want one line \"" SIGN_SIGNATURE_TAG
		                       " KEYID BASE64\" with a 16-hex-digit key ID and a "
		                       "64-byte signature");
	if (sign_base64_decode(s + want - B64_SIG_LEN, B64_SIG_LEN, sig, sizeof(sig)) < 0)
		return slate_error_set(err, SLATE_ERR_SIGNATURE_FORMAT,
		                       "malformed signature: not 64 bytes of base64");
	memcpy(ret_key_id, s + tag_len + 1, SIGN_KEY_ID_LEN);
	ret_key_id[SIGN_KEY_ID_LEN] = '\0';
	memcpy(ret_sig, sig, sizeof(sig));
	return 0;
}

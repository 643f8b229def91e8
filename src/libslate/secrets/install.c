/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "secrets/install.h"
#include "util/error.h"
#include "util/fs.h"

#define SEAL_MAGIC "SLSEAL1\n"
#define SEAL_MAGIC_LEN 8u
#define SEAL_NONCE_LEN crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define SEAL_TAG_LEN crypto_aead_xchacha20poly1305_ietf_ABYTES
#define SEAL_AD_MAX 512u

struct install {
	int dirfd;
	unsigned char *key;  /* sodium_malloc()ed, INSTALL_KEY_LEN */
	unsigned char *salt; /* sodium_malloc()ed, INSTALL_SALT_LEN */
	const char *key_source;
};

/* Reads exactly len bytes from a 0600 file that belongs to us. */
static int read_secret_file(int dirfd, const char *name, unsigned char *out, size_t len)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	ssize_t n;

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return SLATE_ERR_INVALID_FORMAT;
	if ((st.st_mode & 077) != 0 || st.st_uid != geteuid())
		return SLATE_ERR_KEY_PERMISSIONS;
	if ((size_t)st.st_size != len)
		return SLATE_ERR_SIZE_MISMATCH;
	n = read(fd, out, len);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : SLATE_ERR_SIZE_MISMATCH;
}

/* Loads name, creating it with fresh random bytes the first time. */
static int load_or_create(int dirfd, const char *name, unsigned char *out, size_t len)
{
	int r = read_secret_file(dirfd, name, out, len);

	if (r != -ENOENT)
		return r;
	randombytes_buf(out, len);
	r = fs_write_atomic_at(dirfd, name, out, len, 0600);
	if (r < 0)
		sodium_memzero(out, len);
	return r;
}

int install_open(int state_dirfd, const char *credentials_dir, struct install **ret,
                 struct slate_error *err)
{
	struct install *in;
	const char *cdir = credentials_dir ? credentials_dir : getenv("CREDENTIALS_DIRECTORY");
	struct stat st;
	int r;

	if (sodium_init() < 0)
		return slate_error_errno(err, SLATE_ERR_CRYPTO, "libsodium");
	in = calloc(1, sizeof(*in));
	if (!in)
		return slate_error_errno(err, -ENOMEM, "the master key");
	in->dirfd = -1;
	in->key = sodium_malloc(INSTALL_KEY_LEN);
	in->salt = sodium_malloc(INSTALL_SALT_LEN);
	if (!in->key || !in->salt) {
		r = slate_error_errno(err, -ENOMEM, "the master key");
		goto fail;
	}
	if (mkdirat(state_dirfd, "install", 0700) < 0 && errno != EEXIST) {
		r = slate_error_errno(err, -errno, "creating install/");
		goto fail;
	}
	r = fs_open_dir_at(state_dirfd, "install", &in->dirfd);
	if (r < 0) {
		(void)slate_error_errno(err, r, "opening install/");
		goto fail;
	}
	if (fstat(in->dirfd, &st) < 0) {
		r = slate_error_errno(err, -errno, "install/");
		goto fail;
	}
	if ((st.st_mode & 077) != 0 && fchmod(in->dirfd, 0700) < 0) {
		r = slate_error_errno(err, -errno, "install/: cannot make it 0700");
		goto fail;
	}

	r = -ENOENT;
	if (cdir && *cdir) {
		_cleanup_close_ int cfd = open(cdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cfd >= 0) {
			/* systemd makes credential files 0400 root: the permission check holds. */
			r = read_secret_file(cfd, "slate-master-key", in->key, INSTALL_KEY_LEN);
			if (r == 0)
				in->key_source = "systemd-credential";
			else if (r != -ENOENT) {
				(void)slate_error_set(
				        err, r,
				        "credential slate-master-key in %s: %s (it must "
				        "be %u bytes, mode 0400 or 0600)",
				        cdir, slate_strerror(r), INSTALL_KEY_LEN);
				goto fail;
			}
		}
	}
	if (r == -ENOENT) {
		r = load_or_create(in->dirfd, "master.key", in->key, INSTALL_KEY_LEN);
		if (r < 0) {
			(void)slate_error_errno(err, r, "master key install/master.key");
			goto fail;
		}
		in->key_source = "file";
	}
	r = load_or_create(in->dirfd, "salt", in->salt, INSTALL_SALT_LEN);
	if (r < 0) {
		(void)slate_error_errno(err, r, "placeholder salt install/salt");
		goto fail;
	}
	(void)sodium_mprotect_readonly(in->key);
	(void)sodium_mprotect_readonly(in->salt);
	*ret = in;
	return 0;
fail:
	install_free(in);
	return r;
}

void install_free(struct install *in)
{
	if (!in)
		return;
	sodium_free(in->key); /* wipes */
	sodium_free(in->salt);
	if (in->dirfd >= 0)
		(void)close(in->dirfd);
	free(in);
}

int install_dirfd(const struct install *in)
{
	return in->dirfd;
}

const unsigned char *install_salt(const struct install *in)
{
	return in->salt;
}

const char *install_master_key_source(const struct install *in)
{
	return in->key_source;
}

static int seal_ad(const char *purpose, unsigned char *ad, size_t *ad_len)
{
	size_t p = strlen(purpose);

	if (SEAL_MAGIC_LEN + p > SEAL_AD_MAX)
		return -EINVAL;
	memcpy(ad, SEAL_MAGIC, SEAL_MAGIC_LEN);
	memcpy(ad + SEAL_MAGIC_LEN, purpose, p);
	*ad_len = SEAL_MAGIC_LEN + p;
	return 0;
}

int install_seal(const struct install *in, const char *purpose, const void *plain, size_t len,
                 struct buf **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	unsigned char ad[SEAL_AD_MAX];
	size_t ad_len, total;
	unsigned long long clen;
	uint8_t *p;
	int r;

	r = seal_ad(purpose, ad, &ad_len);
	if (r < 0)
		return r;
	if (len > BUF_MAX_DEFAULT)
		return SLATE_ERR_TOO_LARGE;
	total = SEAL_MAGIC_LEN + SEAL_NONCE_LEN + len + SEAL_TAG_LEN;
	b = buf_new(total);
	if (!b)
		return -ENOMEM;
	r = buf_reserve(b, total, &p);
	if (r < 0)
		return r;
	memcpy(p, SEAL_MAGIC, SEAL_MAGIC_LEN);
	randombytes_buf(p + SEAL_MAGIC_LEN, SEAL_NONCE_LEN);
	if (crypto_aead_xchacha20poly1305_ietf_encrypt(p + SEAL_MAGIC_LEN + SEAL_NONCE_LEN, &clen,
	                                               plain, len, ad, ad_len, NULL,
	                                               p + SEAL_MAGIC_LEN, in->key) != 0 ||
	    clen != len + SEAL_TAG_LEN)
		return SLATE_ERR_CRYPTO;
	*ret = TAKE_PTR(b);
	return 0;
}

int install_unseal(const struct install *in, const char *purpose, const void *sealed, size_t len,
                   struct buf **ret)
{
	const unsigned char *s = sealed;
	unsigned char ad[SEAL_AD_MAX];
	struct buf *b;
	size_t ad_len, plen;
	unsigned long long mlen;
	uint8_t *p;
	int r;

	r = seal_ad(purpose, ad, &ad_len);
	if (r < 0)
		return r;
	if (len < SEAL_MAGIC_LEN + SEAL_NONCE_LEN + SEAL_TAG_LEN ||
	    memcmp(s, SEAL_MAGIC, SEAL_MAGIC_LEN) != 0)
		return SLATE_ERR_INVALID_FORMAT;
	plen = len - SEAL_MAGIC_LEN - SEAL_NONCE_LEN - SEAL_TAG_LEN;
	/* Guarded memory for what fits (vaults, keys); plain, wiped memory beyond. */
	b = plen <= BUF_SECURE_MAX ? buf_new_secure(plen ? plen : 1) : buf_new(plen);
	if (!b)
		return -ENOMEM;
	r = buf_reserve(b, plen, &p);
	if (r < 0) {
		buf_free_secure(b);
		return r;
	}
	if (crypto_aead_xchacha20poly1305_ietf_decrypt(p, &mlen, NULL,
	                                               s + SEAL_MAGIC_LEN + SEAL_NONCE_LEN,
	                                               len - SEAL_MAGIC_LEN - SEAL_NONCE_LEN, ad,
	                                               ad_len, s + SEAL_MAGIC_LEN, in->key) != 0 ||
	    mlen != plen) {
		buf_free_secure(b);
		return SLATE_ERR_SIGNATURE_INVALID; /* forged, damaged or another purpose's */
	}
	*ret = b;
	return 0;
}

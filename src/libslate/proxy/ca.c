/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The egress CA and its leaf certificates (see ca.h). */
#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proxy/ca.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/host.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(EVP_PKEY *, EVP_PKEY_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(X509 *, X509_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(BIO *, BIO_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(X509_NAME *, X509_NAME_free);

struct leaf {
	char host[HOST_BUF];
	X509 *cert;
	EVP_PKEY *key;
	time_t not_after;
	time_t issued;
};

struct egress_ca {
	EVP_PKEY *key;
	X509 *cert;
	char *pem;
	pthread_mutex_t lock;
	struct leaf *leaves;
	size_t n_leaves;
};

void egress_ca_free(struct egress_ca *ca)
{
	if (!ca)
		return;
	for (size_t i = 0; i < ca->n_leaves; i++) {
		X509_free(ca->leaves[i].cert);
		EVP_PKEY_free(ca->leaves[i].key);
	}
	free(ca->leaves);
	EVP_PKEY_free(ca->key);
	X509_free(ca->cert);
	free(ca->pem);
	pthread_mutex_destroy(&ca->lock);
	free(ca);
}

const char *egress_ca_pem(const struct egress_ca *ca)
{
	return ca->pem;
}

static int random_serial(X509 *x)
{
	unsigned char b[16];
	BIGNUM *bn;
	int ok;

	if (RAND_bytes(b, sizeof(b)) != 1)
		return SLATE_ERR_CRYPTO;
	b[0] &= 0x7f; /* positive */
	bn = BN_bin2bn(b, sizeof(b), NULL);
	if (!bn)
		return -ENOMEM;
	ok = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
	BN_free(bn);
	return ok ? 0 : SLATE_ERR_CRYPTO;
}

static int add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value)
{
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
	int ok;

	if (!e)
		return SLATE_ERR_CRYPTO;
	ok = X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	return ok ? 0 : SLATE_ERR_CRYPTO;
}

static int make_ca_cert(EVP_PKEY *key, X509 **ret)
{
	_cleanup_(X509_freep) X509 *x = X509_new();
	X509_NAME *name;
	X509V3_CTX ctx;
	char cn[128], hostname[64] = "";
	int r;

	if (!x)
		return -ENOMEM;
	(void)gethostname(hostname, sizeof(hostname) - 1);
	(void)snprintf(cn, sizeof(cn), "slate egress CA (%s)", hostname[0] ? hostname : "host");
	if (!X509_set_version(x, 2) || (r = random_serial(x)) < 0 ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
	    !X509_time_adj_ex(X509_getm_notAfter(x), EGRESS_CA_LIFETIME_DAYS, 0, NULL) ||
	    !X509_set_pubkey(x, key))
		return SLATE_ERR_CRYPTO;
	name = X509_get_subject_name(x);
	if (!X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"slate", -1,
	                                -1, 0) ||
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1,
	                                -1, 0) ||
	    !X509_set_issuer_name(x, name))
		return SLATE_ERR_CRYPTO;
	X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
	if ((r = add_ext(x, &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0")) < 0 ||
	    (r = add_ext(x, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign")) < 0 ||
	    (r = add_ext(x, &ctx, NID_subject_key_identifier, "hash")) < 0)
		return r;
	if (!X509_sign(x, key, EVP_sha256()))
		return SLATE_ERR_CRYPTO;
	*ret = TAKE_PTR(x);
	return 0;
}

static int pem_of(BIO *b, char **ret)
{
	char *data;
	long n = BIO_get_mem_data(b, &data);
	char *s;

	if (n <= 0)
		return SLATE_ERR_CRYPTO;
	s = malloc((size_t)n + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, data, (size_t)n);
	s[n] = '\0';
	*ret = s;
	return 0;
}

static int write_cert(int dirfd, X509 *cert, char **ret_pem)
{
	_cleanup_(BIO_freep) BIO *b = BIO_new(BIO_s_mem());
	char *pem = NULL;
	int r;

	if (!b || !PEM_write_bio_X509(b, cert))
		return SLATE_ERR_CRYPTO;
	r = pem_of(b, &pem);
	if (r < 0)
		return r;
	r = fs_write_atomic_at(dirfd, EGRESS_CA_CERT, pem, strlen(pem), 0644);
	if (r < 0) {
		free(pem);
		return r;
	}
	*ret_pem = pem;
	return 0;
}

static int write_key(int dirfd, EVP_PKEY *key)
{
	_cleanup_(BIO_freep) BIO *b = BIO_new(BIO_s_secmem());
	char *data;
	long n;
	int r;

	if (!b || !PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL))
		return SLATE_ERR_CRYPTO;
	n = BIO_get_mem_data(b, &data);
	if (n <= 0)
		return SLATE_ERR_CRYPTO;
	r = fs_write_atomic_at(dirfd, EGRESS_CA_KEY, data, (size_t)n, 0600);
	return r;
}

/* Reads the key file, refusing one that group or others may read. -ENOENT when missing. */
static int read_key(int dirfd, EVP_PKEY **ret)
{
	_cleanup_close_ int fd = openat(dirfd, EGRESS_CA_KEY, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_buf_secure_ struct buf *b = NULL;
	_cleanup_(BIO_freep) BIO *bio = NULL;
	struct stat st;
	EVP_PKEY *key;
	uint8_t *p;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (st.st_mode & 077)
		return SLATE_ERR_KEY_PERMISSIONS;
	if (st.st_size > 64 * 1024)
		return -EFBIG;
	b = buf_new((size_t)st.st_size + 1);
	if (!b || buf_reserve(b, (size_t)st.st_size, &p) < 0)
		return -ENOMEM;
	for (size_t off = 0; off < (size_t)st.st_size;) {
		ssize_t n = read(fd, p + off, (size_t)st.st_size - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		off += (size_t)n;
	}
	bio = BIO_new_mem_buf(buf_ptr(b), (int)buf_len(b));
	if (!bio)
		return -ENOMEM;
	key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
	if (!key)
		return SLATE_ERR_INVALID_FORMAT;
	*ret = key;
	return 0;
}

static int read_cert(int dirfd, X509 **ret, char **ret_pem)
{
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_(BIO_freep) BIO *bio = NULL;
	X509 *x;
	char *pem;
	int r;

	r = fs_read_file_at(dirfd, EGRESS_CA_CERT, 64 * 1024, &b);
	if (r < 0)
		return r;
	bio = BIO_new_mem_buf(buf_ptr(b), (int)buf_len(b));
	if (!bio)
		return -ENOMEM;
	x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	if (!x)
		return SLATE_ERR_INVALID_FORMAT;
	pem = buf_dup_string(b);
	if (!pem) {
		X509_free(x);
		return -ENOMEM;
	}
	*ret = x;
	*ret_pem = pem;
	return 0;
}

int egress_ca_open(int dirfd, struct egress_ca **ret)
{
	struct egress_ca *ca = calloc(1, sizeof(*ca));
	int r;

	if (!ca)
		return -ENOMEM;
	pthread_mutex_init(&ca->lock, NULL);
	r = read_key(dirfd, &ca->key);
	if (r == -ENOENT) {
		ca->key = EVP_EC_gen("P-256");
		if (!ca->key) {
			r = SLATE_ERR_CRYPTO;
			goto fail;
		}
		r = write_key(dirfd, ca->key);
		if (r < 0)
			goto fail;
	} else if (r < 0)
		goto fail;

	r = read_cert(dirfd, &ca->cert, &ca->pem);
	if (r >= 0 && X509_check_private_key(ca->cert, ca->key) != 1) {
		X509_free(TAKE_PTR(ca->cert));
		free(TAKE_PTR(ca->pem));
		r = -ENOENT;
	}
	if (r == -ENOENT || r == SLATE_ERR_INVALID_FORMAT) {
		r = make_ca_cert(ca->key, &ca->cert);
		if (r < 0)
			goto fail;
		r = write_cert(dirfd, ca->cert, &ca->pem);
	}
	if (r < 0)
		goto fail;
	ERR_clear_error();
	*ret = ca;
	return 0;
fail:
	ERR_clear_error();
	egress_ca_free(ca);
	return r;
}

static int issue_leaf(struct egress_ca *ca, const char *host, struct leaf *ret)
{
	_cleanup_(EVP_PKEY_freep) EVP_PKEY *key = EVP_EC_gen("P-256");
	_cleanup_(X509_freep) X509 *x = X509_new();
	char san[HOST_BUF + 8];
	X509V3_CTX ctx;
	X509_NAME *name;
	time_t now = time(NULL);
	int r;

	if (!key || !x)
		return SLATE_ERR_CRYPTO;
	if (!X509_set_version(x, 2) || (r = random_serial(x)) < 0 ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), EGRESS_LEAF_LIFETIME_S) ||
	    !X509_set_pubkey(x, key) || !X509_set_issuer_name(x, X509_get_subject_name(ca->cert)))
		return SLATE_ERR_CRYPTO;
	name = X509_get_subject_name(x);
	/* CN is limited to 64 bytes; subjectAltName is what clients check anyway. */
	if (strlen(host) <= 64 &&
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)host, -1,
	                                -1, 0))
		return SLATE_ERR_CRYPTO;
	/* host is normalised: [a-z0-9._-] or an IP literal, nothing the config syntax reads. */
	(void)snprintf(san, sizeof(san), "%s:%s", host_is_ip(host) ? "IP" : "DNS", host);
	X509V3_set_ctx(&ctx, ca->cert, x, NULL, NULL, 0);
	if ((r = add_ext(x, &ctx, NID_subject_alt_name, san)) < 0 ||
	    (r = add_ext(x, &ctx, NID_basic_constraints, "critical,CA:FALSE")) < 0 ||
	    (r = add_ext(x, &ctx, NID_key_usage, "critical,digitalSignature")) < 0 ||
	    (r = add_ext(x, &ctx, NID_ext_key_usage, "serverAuth")) < 0 ||
	    (r = add_ext(x, &ctx, NID_authority_key_identifier, "keyid:always")) < 0)
		return r;
	if (!X509_sign(x, ca->key, EVP_sha256()))
		return SLATE_ERR_CRYPTO;
	(void)snprintf(ret->host, sizeof(ret->host), "%s", host);
	ret->cert = TAKE_PTR(x);
	ret->key = TAKE_PTR(key);
	ret->issued = now;
	ret->not_after = now + EGRESS_LEAF_LIFETIME_S;
	return 0;
}

int egress_ca_use_leaf(struct egress_ca *ca, const char *host, SSL *ssl)
{
	struct leaf *l = NULL, fresh = {0};
	time_t now = time(NULL);
	int r = 0;

	pthread_mutex_lock(&ca->lock);
	for (size_t i = 0; i < ca->n_leaves; i++)
		if (strcmp(ca->leaves[i].host, host) == 0) {
			l = &ca->leaves[i];
			break;
		}
	if (l && l->not_after - now < EGRESS_LEAF_LIFETIME_S / 4) {
		X509_free(l->cert);
		EVP_PKEY_free(l->key);
		*l = (struct leaf){0};
		r = issue_leaf(ca, host, l);
		if (r < 0) {
			/* Drop the emptied slot. */
			*l = ca->leaves[--ca->n_leaves];
			l = NULL;
		}
	} else if (!l) {
		r = issue_leaf(ca, host, &fresh);
		if (r >= 0) {
			if (ca->n_leaves < EGRESS_LEAF_CACHE) {
				struct leaf *nl =
				        realloc(ca->leaves, (ca->n_leaves + 1) * sizeof(*nl));
				if (nl) {
					ca->leaves = nl;
					l = &ca->leaves[ca->n_leaves++];
				}
			} else {
				/* Full: the oldest goes. */
				size_t oldest = 0;
				for (size_t i = 1; i < ca->n_leaves; i++)
					if (ca->leaves[i].issued < ca->leaves[oldest].issued)
						oldest = i;
				l = &ca->leaves[oldest];
				X509_free(l->cert);
				EVP_PKEY_free(l->key);
			}
			if (l)
				*l = fresh;
			else
				r = -ENOMEM;
		}
	}
	if (r >= 0 && l) {
		if (SSL_use_certificate(ssl, l->cert) != 1 || SSL_use_PrivateKey(ssl, l->key) != 1)
			r = SLATE_ERR_CRYPTO;
	}
	pthread_mutex_unlock(&ca->lock);
	if (r < 0 && !l) {
		X509_free(fresh.cert);
		EVP_PKEY_free(fresh.key);
	}
	ERR_clear_error();
	return r;
}

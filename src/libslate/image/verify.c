/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/verify.h"
#include "util/error.h"
#include "util/macro.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(EVP_MD_CTX *, EVP_MD_CTX_free);

const uint8_t VERIFY_ZERO_BLOCK_SHA256[32] = {0x30, 0xe1, 0x49, 0x55, 0xeb, 0xf1, 0x35, 0x22,
                                              0x66, 0xdc, 0x2f, 0xf8, 0x06, 0x7e, 0x68, 0x10,
                                              0x46, 0x07, 0xe7, 0x50, 0xab, 0xb9, 0xd3, 0xb3,
                                              0x65, 0x82, 0xb8, 0xaf, 0x90, 0x9f, 0xcb, 0x58};

/* ---- the sha256-1m digest --------------------------------------------------------------- */

bool verify_all_zero(const uint8_t *p, size_t n)
{
	/* p[0] is zero and every byte equals the one before it. */
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

int verify_block_sha256(const uint8_t *p, size_t n, uint8_t ret[32])
{
	unsigned len = 0;

	if (n > VERIFY_BLOCK)
		return -EINVAL;
	if (n == VERIFY_BLOCK && verify_all_zero(p, n)) {
		memcpy(ret, VERIFY_ZERO_BLOCK_SHA256, 32);
		return 0;
	}
	if (EVP_Digest(p, n, ret, &len, EVP_sha256(), NULL) != 1 || len != 32)
		return SLATE_ERR_CRYPTO;
	return 0;
}

void verify_digest_done(struct verify_digest *d)
{
	if (!d)
		return;
	EVP_MD_CTX_free(d->outer);
	EVP_MD_CTX_free(d->inner);
	d->outer = d->inner = NULL;
}

int verify_digest_init(struct verify_digest *d, uint64_t size)
{
	uint8_t le[8];

	*d = (struct verify_digest){.size = size};
	d->outer = EVP_MD_CTX_new();
	d->inner = EVP_MD_CTX_new();
	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(size >> (8 * i));
	if (!d->outer || !d->inner || EVP_DigestInit_ex(d->outer, EVP_sha256(), NULL) != 1 ||
	    EVP_DigestUpdate(d->outer, VERIFY_DIGEST_DOMAIN, sizeof(VERIFY_DIGEST_DOMAIN)) != 1 ||
	    EVP_DigestUpdate(d->outer, le, sizeof(le)) != 1) {
		verify_digest_done(d);
		return SLATE_ERR_CRYPTO;
	}
	return 0;
}

/* The length of the block starting at d->off. */
static size_t block_len(const struct verify_digest *d)
{
	uint64_t left = d->size - d->off;
	return left < VERIFY_BLOCK ? (size_t)left : VERIFY_BLOCK;
}

int verify_digest_add_block(struct verify_digest *d, const uint8_t h[32], size_t len)
{
	if (!d->outer || d->fill != 0 || d->off >= d->size || len != block_len(d))
		return -EINVAL;
	if (EVP_DigestUpdate(d->outer, h, 32) != 1)
		return SLATE_ERR_CRYPTO;
	d->off += len;
	return 0;
}

/* Bytes into the current, partly filled block (n stays within it). */
static int partial(struct verify_digest *d, const uint8_t *p, size_t n)
{
	static const uint8_t zeros[64 * 1024];

	if (d->fill == 0 && EVP_DigestInit_ex(d->inner, EVP_sha256(), NULL) != 1)
		return SLATE_ERR_CRYPTO;
	for (size_t done = 0; done < n;) {
		size_t k = n - done;

		if (!p && k > sizeof(zeros))
			k = sizeof(zeros);
		if (EVP_DigestUpdate(d->inner, p ? p + done : zeros, k) != 1)
			return SLATE_ERR_CRYPTO;
		done += k;
	}
	d->fill += n;
	return 0;
}

/* Closes the current block once it is full. */
static int close_block(struct verify_digest *d)
{
	uint8_t h[32];
	unsigned len = 0;
	size_t blen;

	blen = block_len(d);
	if (d->fill < blen)
		return 0;
	if (EVP_DigestFinal_ex(d->inner, h, &len) != 1 || len != 32)
		return SLATE_ERR_CRYPTO;
	d->fill = 0;
	return verify_digest_add_block(d, h, blen);
}

/* Feeds n bytes at p, or n zeros when p is NULL. */
static int feed(struct verify_digest *d, const uint8_t *p, uint64_t n)
{
	int r;

	if (!d->outer)
		return -EINVAL;
	if (n > d->size - d->off - d->fill)
		return -EINVAL; /* more than the declared size */
	while (n > 0) {
		size_t blen = block_len(d), k;

		if (d->fill == 0 && n >= blen) {
			/* A whole block: straight to its hash. */
			uint8_t h[32];

			if (p)
				r = verify_block_sha256(p, blen, h);
			else if (blen == VERIFY_BLOCK) {
				memcpy(h, VERIFY_ZERO_BLOCK_SHA256, 32);
				r = 0;
			} else {
				/* The short last block, all zeros. */
				r = partial(d, NULL, blen);
				if (r >= 0)
					r = close_block(d);
			}
			if (r < 0)
				return r;
			if (p || blen == VERIFY_BLOCK) {
				r = verify_digest_add_block(d, h, blen);
				if (r < 0)
					return r;
			}
			k = blen;
		} else {
			k = blen - d->fill;
			if (k > n)
				k = (size_t)n;
			r = partial(d, p, k);
			if (r >= 0)
				r = close_block(d);
			if (r < 0)
				return r;
		}
		if (p)
			p += k;
		n -= k;
	}
	return 0;
}

int verify_digest_update(struct verify_digest *d, const void *p, size_t n)
{
	if (!p && n > 0)
		return -EINVAL;
	return feed(d, p, n);
}

int verify_digest_zeros(struct verify_digest *d, uint64_t n)
{
	return feed(d, NULL, n);
}

int verify_digest_final(struct verify_digest *d, uint8_t ret[32])
{
	unsigned len = 0;
	int r = 0;

	if (!d->outer || d->fill != 0 || d->off != d->size)
		r = -EINVAL;
	else if (EVP_DigestFinal_ex(d->outer, ret, &len) != 1 || len != 32)
		r = SLATE_ERR_CRYPTO;
	verify_digest_done(d);
	return r;
}

/* ---- reading a file: liburing reads in flight while the bytes read are hashed ----------- */

struct slot {
	uint8_t *buf;
	uint64_t off; /* where this chunk starts */
	size_t len;   /* its length */
	size_t got;   /* bytes read so far */
	bool hole;    /* nothing to read: all zeros */
	bool busy;    /* a chunk is assigned */
	bool done;    /* read complete */
};

struct pipeline {
	struct io_uring ring;
	int fd;
	uint64_t size;
	uint64_t next_off; /* the next chunk to assign */
	uint64_t data_end; /* cached: off_t of the next data at or after next_off, or size */
	struct slot slots[VERIFY_DEPTH];
};

/* What is done with the chunks, in file order: p is NULL for a hole (len zero bytes). */
struct consumer {
	int (*begin)(void *ud, uint64_t size);
	int (*chunk)(void *ud, const uint8_t *p, size_t len);
	void *ud;
};

static int submit_read(struct pipeline *p, unsigned i)
{
	struct slot *s = &p->slots[i];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, p->fd, s->buf + s->got, (unsigned)(s->len - s->got),
	                   s->off + s->got);
	io_uring_sqe_set_data64(sqe, i);
	return 0;
}

/* Assigns the next chunk to slot i; holes are marked and not read. Returns 1 if a read was
 * queued, 0 if not (hole, or nothing left). */
static int assign(struct pipeline *p, unsigned i)
{
	struct slot *s = &p->slots[i];

	s->busy = s->done = s->hole = false;
	s->got = 0;
	if (p->next_off >= p->size)
		return 0;
	s->busy = true;
	s->off = p->next_off;
	s->len = p->size - s->off < VERIFY_CHUNK ? (size_t)(p->size - s->off) : VERIFY_CHUNK;
	p->next_off += s->len;
	if (p->data_end < s->off) {
		off_t d = lseek(p->fd, (off_t)s->off, SEEK_DATA);
		/* ENXIO: no data after off; any other failure: read everything. */
		p->data_end = d >= 0 ? (uint64_t)d : errno == ENXIO ? p->size : s->off;
	}
	if (p->data_end >= s->off + s->len) {
		s->hole = s->done = true;
		return 0;
	}
	return submit_read(p, i) < 0 ? -EBUSY : 1;
}

static int read_file(int dirfd, const char *name, const struct consumer *c,
                     verify_progress_fn progress, void *ud)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ uint8_t *mem = NULL;
	struct pipeline p = {0};
	unsigned cur = 0;
	uint64_t done = 0;
	struct stat st;
	int r;

	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	r = c->begin(c->ud, (uint64_t)st.st_size);
	if (r < 0)
		return r;
	if (posix_memalign((void **)&mem, 4096, (size_t)VERIFY_CHUNK * VERIFY_DEPTH) != 0)
		return -ENOMEM;
	r = io_uring_queue_init(VERIFY_DEPTH * 2, &p.ring, 0);
	if (r < 0)
		return r;
	p.fd = fd;
	p.size = (uint64_t)st.st_size;
	for (unsigned i = 0; i < VERIFY_DEPTH; i++)
		p.slots[i].buf = mem + (size_t)i * VERIFY_CHUNK;

	for (unsigned i = 0; i < VERIFY_DEPTH; i++) {
		r = assign(&p, i);
		if (r < 0)
			goto out;
	}
	/* Chunks are consumed in order: slot cur holds the oldest. */
	while (p.slots[cur].busy) {
		struct slot *s = &p.slots[cur];

		(void)io_uring_submit(&p.ring);
		while (!s->done) {
			struct io_uring_cqe *cqe;
			struct slot *t;

			r = io_uring_wait_cqe(&p.ring, &cqe);
			if (r == -EINTR)
				continue;
			if (r < 0)
				goto out;
			t = &p.slots[io_uring_cqe_get_data64(cqe)];
			r = cqe->res;
			io_uring_cqe_seen(&p.ring, cqe);
			if (r == -EINTR || r == -EAGAIN)
				r = 0; /* resubmit the rest below */
			else if (r < 0)
				goto out;
			else if (r == 0) {
				r = -EIO; /* the file got shorter */
				goto out;
			}
			t->got += (size_t)r;
			if (t->got < t->len) {
				r = submit_read(&p, (unsigned)(t - p.slots));
				if (r < 0)
					goto out;
				(void)io_uring_submit(&p.ring);
			} else
				t->done = true;
		}
		r = c->chunk(c->ud, s->hole ? NULL : s->buf, s->len);
		if (r < 0)
			goto out;
		done += s->len;
		if (progress)
			progress(done, p.size, ud);
		r = assign(&p, cur);
		if (r < 0)
			goto out;
		cur = (cur + 1) % VERIFY_DEPTH;
	}
	r = 0;
out:
	/* Wait for reads still in flight before their buffers go. */
	for (unsigned i = 0; i < VERIFY_DEPTH; i++)
		while (p.slots[i].busy && !p.slots[i].done) {
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&p.ring, &cqe) < 0)
				break;
			p.slots[io_uring_cqe_get_data64(cqe)].done = true;
			io_uring_cqe_seen(&p.ring, cqe);
		}
	io_uring_queue_exit(&p.ring);
	return r;
}

/* ---- plain SHA-256 ---------------------------------------------------------------------- */

struct plain {
	EVP_MD_CTX *md;
	uint8_t *zeros;
};

static int plain_begin(void *ud, uint64_t size)
{
	struct plain *pl = ud;

	return EVP_DigestInit_ex(pl->md, EVP_sha256(), NULL) == 1 ? 0 : SLATE_ERR_CRYPTO;
}

static int plain_chunk(void *ud, const uint8_t *p, size_t len)
{
	struct plain *pl = ud;

	return EVP_DigestUpdate(pl->md, p ? p : pl->zeros, len) == 1 ? 0 : SLATE_ERR_CRYPTO;
}

int verify_file_sha256(int dirfd, const char *name, uint8_t ret_sha256[32],
                       verify_progress_fn progress, void *ud)
{
	_cleanup_(EVP_MD_CTX_freep) EVP_MD_CTX *md = EVP_MD_CTX_new();
	_cleanup_free_ uint8_t *zeros = calloc(1, VERIFY_CHUNK);
	struct plain pl = {md, zeros};
	struct consumer c = {plain_begin, plain_chunk, &pl};
	unsigned hlen = 0;
	int r;

	if (!md || !zeros)
		return -ENOMEM;
	r = read_file(dirfd, name, &c, progress, ud);
	if (r < 0)
		return r;
	if (EVP_DigestFinal_ex(md, ret_sha256, &hlen) != 1 || hlen != 32)
		return SLATE_ERR_CRYPTO;
	return 0;
}

/* ---- sha256-1m, data blocks hashed on two threads --------------------------------------- */

#define CHUNK_BLOCKS (VERIFY_CHUNK / VERIFY_BLOCK)

struct blocks {
	struct verify_digest d;
	/* The helper thread hashes the odd blocks of each chunk while the caller does the even
	 * ones. Under lock: */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const uint8_t *p;
	size_t len;
	unsigned gen, done_gen;
	bool stop;
	int r;
	pthread_t thread;
	bool started;
	uint8_t h[CHUNK_BLOCKS][32];
};

/* Hashes the blocks first, first + 2, ... of the chunk at p. */
static int hash_blocks(struct blocks *b, const uint8_t *p, size_t len, unsigned first)
{
	for (size_t i = first; (size_t)i * VERIFY_BLOCK < len; i += 2) {
		size_t off = i * (size_t)VERIFY_BLOCK;
		size_t n = len - off < VERIFY_BLOCK ? len - off : VERIFY_BLOCK;
		int r = verify_block_sha256(p + off, n, b->h[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

static void *helper_main(void *arg)
{
	struct blocks *b = arg;

	(void)pthread_mutex_lock(&b->lock);
	for (;;) {
		const uint8_t *p;
		size_t len;
		int r;

		while (b->gen == b->done_gen && !b->stop)
			(void)pthread_cond_wait(&b->cond, &b->lock);
		if (b->stop)
			break;
		p = b->p;
		len = b->len;
		(void)pthread_mutex_unlock(&b->lock);
		r = hash_blocks(b, p, len, 1);
		(void)pthread_mutex_lock(&b->lock);
		if (r < 0 && b->r == 0)
			b->r = r;
		b->done_gen = b->gen;
		(void)pthread_cond_broadcast(&b->cond);
	}
	(void)pthread_mutex_unlock(&b->lock);
	return NULL;
}

static int blocks_begin(void *ud, uint64_t size)
{
	struct blocks *b = ud;

	return verify_digest_init(&b->d, size);
}

static int blocks_chunk(void *ud, const uint8_t *p, size_t len)
{
	struct blocks *b = ud;
	bool helped = false;
	int r;

	if (!p)
		return verify_digest_zeros(&b->d, len);
	if (len > VERIFY_BLOCK && b->started) {
		(void)pthread_mutex_lock(&b->lock);
		b->p = p;
		b->len = len;
		b->gen++;
		(void)pthread_cond_broadcast(&b->cond);
		(void)pthread_mutex_unlock(&b->lock);
		helped = true;
	}
	r = hash_blocks(b, p, len, 0);
	if (helped) {
		int k;
		(void)pthread_mutex_lock(&b->lock);
		while (b->done_gen != b->gen)
			(void)pthread_cond_wait(&b->cond, &b->lock);
		k = b->r;
		(void)pthread_mutex_unlock(&b->lock);
		if (r >= 0 && k < 0)
			r = k;
	} else if (r >= 0)
		r = hash_blocks(b, p, len, 1);
	if (r < 0)
		return r;
	for (size_t i = 0; (size_t)i * VERIFY_BLOCK < len; i++) {
		size_t off = i * (size_t)VERIFY_BLOCK;
		r = verify_digest_add_block(&b->d, b->h[i],
		                            len - off < VERIFY_BLOCK ? len - off : VERIFY_BLOCK);
		if (r < 0)
			return r;
	}
	return 0;
}

int verify_file_digest(int dirfd, const char *name, char *ret, verify_progress_fn progress,
                       void *ud)
{
	struct blocks b = {0};
	struct consumer c = {blocks_begin, blocks_chunk, &b};
	uint8_t digest[32];
	int r;

	(void)pthread_mutex_init(&b.lock, NULL);
	(void)pthread_cond_init(&b.cond, NULL);
	/* Without a second thread the caller hashes every block itself. */
	b.started = pthread_create(&b.thread, NULL, helper_main, &b) == 0;
	r = read_file(dirfd, name, &c, progress, ud);
	if (b.started) {
		(void)pthread_mutex_lock(&b.lock);
		b.stop = true;
		(void)pthread_cond_broadcast(&b.cond);
		(void)pthread_mutex_unlock(&b.lock);
		(void)pthread_join(b.thread, NULL);
	}
	(void)pthread_mutex_destroy(&b.lock);
	(void)pthread_cond_destroy(&b.cond);
	if (r >= 0)
		r = verify_digest_final(&b.d, digest);
	verify_digest_done(&b.d);
	if (r < 0)
		return r;
	verify_digest_string(digest, ret);
	return 0;
}

void verify_hex(const uint8_t sha256[32], char out[65])
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < 32; i++) {
		out[2 * i] = digits[sha256[i] >> 4];
		out[2 * i + 1] = digits[sha256[i] & 15];
	}
	out[64] = '\0';
}

void verify_digest_string(const uint8_t digest[32], char *out)
{
	size_t k = sizeof(VERIFY_DIGEST_PREFIX) - 1;

	memcpy(out, VERIFY_DIGEST_PREFIX, k);
	verify_hex(digest, out + k);
}

bool verify_digest_string_ok(const char *s)
{
	size_t k = sizeof(VERIFY_DIGEST_PREFIX) - 1;

	if (!s || strncmp(s, VERIFY_DIGEST_PREFIX, k) != 0 || strlen(s) != k + 64)
		return false;
	for (size_t i = k; i < k + 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/verify.h"
#include "util/error.h"
#include "util/macro.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(EVP_MD_CTX *, EVP_MD_CTX_free);

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

int verify_file_sha256(int dirfd, const char *name, uint8_t ret_sha256[32],
                       verify_progress_fn progress, void *ud)
{
	_cleanup_(EVP_MD_CTX_freep) EVP_MD_CTX *md = NULL;
	_cleanup_close_ int fd = -1;
	_cleanup_free_ uint8_t *mem = NULL, *zeros = NULL;
	struct pipeline p = {0};
	uint8_t h[EVP_MAX_MD_SIZE];
	unsigned hlen = 0, cur = 0;
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
	md = EVP_MD_CTX_new();
	if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
		return SLATE_ERR_CRYPTO;
	if (posix_memalign((void **)&mem, 4096, (size_t)VERIFY_CHUNK * VERIFY_DEPTH) != 0)
		return -ENOMEM;
	zeros = calloc(1, VERIFY_CHUNK);
	if (!zeros)
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
	/* Chunks are hashed in order: slot cur holds the oldest. */
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
		if (EVP_DigestUpdate(md, s->hole ? zeros : s->buf, s->len) != 1) {
			r = SLATE_ERR_CRYPTO;
			goto out;
		}
		done += s->len;
		if (progress)
			progress(done, p.size, ud);
		r = assign(&p, cur);
		if (r < 0)
			goto out;
		cur = (cur + 1) % VERIFY_DEPTH;
	}
	r = 0;
	if (EVP_DigestFinal_ex(md, h, &hlen) != 1 || hlen != 32)
		r = SLATE_ERR_CRYPTO;
	else
		memcpy(ret_sha256, h, 32);
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

void verify_hex(const uint8_t sha256[32], char out[65])
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < 32; i++) {
		out[2 * i] = digits[sha256[i] >> 4];
		out[2 * i + 1] = digits[sha256[i] & 15];
	}
	out[64] = '\0';
}

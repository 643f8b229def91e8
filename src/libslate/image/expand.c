/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <lzma.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <openssl/evp.h>

#include "image/expand.h"
#include "image/verify.h"
#include "util/error.h"
#include "util/fs.h"

/*
 * Output travels in buffers of this size (a multiple of VERIFY_BLOCK, so every buffer starts on a
 * block of the digest), at most EXPAND_NBUF at once, to two threads: one finds the zero pages and
 * computes the sha256-1m digest (image/verify.h: a block of zeros costs the zero check, a data
 * block its SHA-256), the other then writes every page that is not zeros. Both run while the
 * caller receives and decompresses the next buffers.
 */
#define EXPAND_BUF_SIZE EXPAND_PACK_FRAME
#define EXPAND_NBUF 8
/*
 * The writeback of written data is started (sync_file_range(SYNC_FILE_RANGE_WRITE), on a thread of
 * its own) whenever this much more has been written, so that the device works while the download
 * goes on and the fsync before the install finds little left to do; it also keeps the page cache
 * from filling with dirty data. Only starting it, not fdatasync: that waits, and on btrfs commits
 * the log tree each time, for nothing, since the install fsyncs the file (data and metadata)
 * before the rename that makes it the image anyway. A crash before that fsync loses a staging
 * directory, never an installed image.
 */
#define EXPAND_SYNC_EVERY (128u << 20)
#define EXPAND_READ_CHUNK (1u << 20)
#define PAGES_PER_BUF (EXPAND_BUF_SIZE / EXPAND_HOLE_BLOCK)
#define ZMAP_WORDS (PAGES_PER_BUF / 64)
/* xz streams needing more memory than this to decode are refused. */
#define EXPAND_XZ_MEMLIMIT (512ull << 20)
/*
 * zstd artifacts made of independent frames of at most EXPAND_BUF_SIZE of output each (what
 * `slate-catalog pack` writes, doc/catalog.md) are taken a whole frame at a time: decoded in one
 * call straight into the ring (the streaming decoder decodes into its own window and copies out),
 * and a frame of nothing but RLE blocks of zeros is not decoded at all: its output is known to be
 * zeros, so it is neither written into the ring nor scanned. A frame is gathered up to this many
 * compressed bytes; one that is bigger (zstd(1) writes a single frame) goes to the streaming
 * decoder, as does any frame that does not fit the buffer being filled.
 */
#define ZFRAME_CAP (ZSTD_COMPRESSBOUND(EXPAND_BUF_SIZE) + 64)
#define ZBLOCK_MAX (128u << 10) /* RFC 8878: Block_Maximum_Size at most 128 KiB */
/* kmap/zmap words per VERIFY_BLOCK: whole blocks are whole words. */
#define WORDS_PER_BLOCK (VERIFY_BLOCK / EXPAND_HOLE_BLOCK / 64)

struct expand;
struct stage {
	struct expand *e;
	int (*fn)(struct expand *e, unsigned slot);
	unsigned done; /* under lock: buffers this stage is through with */
	pthread_t thread;
	bool started;
};

struct expand {
	enum catalog_compression compression;
	int fd;
	uint64_t size;     /* declared output size */
	uint64_t produced; /* output bytes handed on */
	bool stream_end;   /* the compressed stream (or the last member/frame) is complete */
	bool finished;

	z_stream z;
	bool z_init;
	ZSTD_DStream *zs;
	ZSTD_DCtx *zd; /* whole frames, one call each */
	uint8_t *zbuf; /* a frame being gathered (ZFRAME_CAP bytes) */
	size_t zbuf_len;
	bool zstream; /* the streaming decoder is inside a frame */
	struct expand_stats stats;
	lzma_stream xz;
	bool xz_init;

	/* Buffer ring: the decompressor fills bufs[tail % N]; a slot is free again once both
	 * stages are through with it. */
	uint8_t *bufs[EXPAND_NBUF];
	size_t lens[EXPAND_NBUF];
	uint64_t offs[EXPAND_NBUF];
	size_t fill;   /* bytes in bufs[tail % N] */
	bool have_cur; /* bufs[tail % N] is ours to fill */
	unsigned tail; /* under lock: buffers handed on */
	bool eof;      /* under lock: no more buffers will come */
	int error;     /* under lock: the first error of either stage */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct stage hash, write;
	uint64_t written, synced; /* under lock: data bytes written, and flushed */
	pthread_t syncer;
	bool syncer_started;
	/* The digest stage's finding for the writer: bit k of zmap[slot] is set when the k-th
	 * EXPAND_HOLE_BLOCK of the buffer is all zeros. The writer takes a buffer only after the
	 * digest stage, so the output is scanned for zeros once. */
	uint64_t zmap[EXPAND_NBUF][ZMAP_WORDS];
	/* The decoder's knowledge for the digest stage: the same bits for pages of a zstd frame
	 * that was all zeros. Only whole VERIFY_BLOCKs are marked, and never written into the
	 * buffer: the digest stage takes such a block as zeros without reading it. */
	uint64_t kmap[EXPAND_NBUF][ZMAP_WORDS];

	struct verify_digest digest;
};

static bool page_zero(const struct expand *e, unsigned slot, size_t page)
{
	return e->zmap[slot][page / 64] & (1ull << (page % 64));
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t k = pwrite(fd, p, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -EIO;
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

/*
 * The digest stage: finds the zero pages of a buffer (for the writer too), then adds each block
 * to the digest: a block of zero pages as zeros (not hashed), any other one hashed.
 */
static int hash_buffer(struct expand *e, unsigned slot)
{
	const uint8_t *p = e->bufs[slot];
	size_t len = e->lens[slot];
	uint64_t *zmap = e->zmap[slot];
	int r;

	memset(zmap, 0, sizeof(e->zmap[slot]));
	for (size_t b = 0; b < len; b += VERIFY_BLOCK) {
		size_t blen = len - b < VERIFY_BLOCK ? len - b : VERIFY_BLOCK;
		size_t w0 = b / EXPAND_HOLE_BLOCK / 64;
		bool zero = true;

		/* Blocks are marked whole (zstd_frame()): the first word says it. */
		if (blen == VERIFY_BLOCK && e->kmap[slot][w0] == UINT64_MAX) {
			memcpy(&zmap[w0], &e->kmap[slot][w0], WORDS_PER_BLOCK * sizeof(uint64_t));
			r = verify_digest_zeros(&e->digest, blen);
			if (r < 0)
				return r;
			continue;
		}

		for (size_t i = b; i < b + blen; i += EXPAND_HOLE_BLOCK) {
			size_t n =
			        b + blen - i < EXPAND_HOLE_BLOCK ? b + blen - i : EXPAND_HOLE_BLOCK;
			size_t page = i / EXPAND_HOLE_BLOCK;

			if (verify_all_zero(p + i, n))
				zmap[page / 64] |= 1ull << (page % 64);
			else
				zero = false;
		}
		r = zero ? verify_digest_zeros(&e->digest, blen)
		         : verify_digest_update(&e->digest, p + b, blen);
		if (r < 0)
			return r;
	}
	return 0;
}

static int write_run(struct expand *e, const uint8_t *p, size_t n, uint64_t off)
{
	int r = pwrite_all(e->fd, p, n, off);

	if (r < 0)
		return r;
	(void)pthread_mutex_lock(&e->lock);
	e->written += n;
	if (e->written - e->synced >= EXPAND_SYNC_EVERY)
		(void)pthread_cond_broadcast(&e->cond);
	(void)pthread_mutex_unlock(&e->lock);
	return 0;
}

/* Writes a buffer's non-zero blocks, coalesced, at their offsets; zero blocks stay holes. */
static int write_buffer(struct expand *e, unsigned slot)
{
	const uint8_t *p = e->bufs[slot];
	size_t len = e->lens[slot], run = 0, i;
	uint64_t off = e->offs[slot];
	int r;

	for (i = 0; i < len; i += EXPAND_HOLE_BLOCK) {
		size_t n = len - i < EXPAND_HOLE_BLOCK ? len - i : EXPAND_HOLE_BLOCK;

		if (!page_zero(e, slot, i / EXPAND_HOLE_BLOCK))
			continue;
		if (i > run) {
			r = write_run(e, p + run, i - run, off + run);
			if (r < 0)
				return r;
		}
		run = i + n;
	}
	if (len > run)
		return write_run(e, p + run, len - run, off + run);
	return 0;
}

/* A stage's thread: takes the buffers in order until there are no more. */
static void *stage_main(void *arg)
{
	struct stage *s = arg;
	struct expand *e = s->e;

	(void)pthread_mutex_lock(&e->lock);
	for (;;) {
		unsigned slot;
		bool skip;
		int r = 0;

		/* The writer takes only buffers the digest stage is through with (their zero
		 * map is made). */
		while (s->done == (s == &e->write ? e->hash.done : e->tail) &&
		       !(e->eof && s->done == e->tail))
			(void)pthread_cond_wait(&e->cond, &e->lock);
		if (s->done == e->tail)
			break;
		slot = s->done % EXPAND_NBUF;
		skip = e->error != 0; /* after an error the rest is only drained */
		(void)pthread_mutex_unlock(&e->lock);
		if (!skip)
			r = s->fn(e, slot);
		(void)pthread_mutex_lock(&e->lock);
		if (r < 0 && !e->error)
			e->error = r;
		s->done++;
		(void)pthread_cond_broadcast(&e->cond);
	}
	(void)pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* The syncer's thread: starts the writeback of what the writer wrote, EXPAND_SYNC_EVERY bytes at
 * a time. */
static void *syncer_main(void *arg)
{
	struct expand *e = arg;

	(void)pthread_mutex_lock(&e->lock);
	for (;;) {
		uint64_t mark;
		int r;

		while (e->written - e->synced < EXPAND_SYNC_EVERY && !e->eof && !e->error)
			(void)pthread_cond_wait(&e->cond, &e->lock);
		/* The last stretch is the caller's fsync. */
		if (e->eof || e->error)
			break;
		mark = e->written;
		(void)pthread_mutex_unlock(&e->lock);
		r = sync_file_range(e->fd, 0, 0, SYNC_FILE_RANGE_WRITE) < 0 ? -errno : 0;
		(void)pthread_mutex_lock(&e->lock);
		/* ESPIPE, EINVAL: nothing to sync (a pipe), or not supported: the final fsync
		 * does it all. */
		if (r < 0 && r != -EINVAL && r != -ESPIPE && r != -ENOSYS && !e->error)
			e->error = r;
		e->synced = mark;
	}
	(void)pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* Buffers neither stage has let go of yet. Under lock. */
static unsigned in_flight(const struct expand *e)
{
	unsigned h = e->tail - e->hash.done, w = e->tail - e->write.done;
	return h > w ? h : w;
}

/* Hands the current buffer on. */
static int submit(struct expand *e)
{
	unsigned slot = e->tail % EXPAND_NBUF;
	int r;

	if (!e->have_cur || e->fill == 0)
		return 0;
	e->lens[slot] = e->fill;
	e->offs[slot] = e->produced - e->fill;
	(void)pthread_mutex_lock(&e->lock);
	e->tail++;
	r = e->error;
	(void)pthread_cond_broadcast(&e->cond);
	(void)pthread_mutex_unlock(&e->lock);
	e->have_cur = false;
	e->fill = 0;
	return r;
}

/* Returns room for output: at most one byte more than the declared size still allows. */
static int out_space(struct expand *e, uint8_t **ret, size_t *ret_n)
{
	uint64_t left;
	size_t room;
	int r;

	if (e->have_cur && e->fill == EXPAND_BUF_SIZE) {
		r = submit(e);
		if (r < 0)
			return r;
	}
	if (!e->have_cur) {
		(void)pthread_mutex_lock(&e->lock);
		while (in_flight(e) >= EXPAND_NBUF && !e->error)
			(void)pthread_cond_wait(&e->cond, &e->lock);
		r = e->error;
		(void)pthread_mutex_unlock(&e->lock);
		if (r < 0)
			return r;
		e->have_cur = true;
		e->fill = 0;
		memset(e->kmap[e->tail % EXPAND_NBUF], 0, sizeof(e->kmap[0]));
	}
	room = EXPAND_BUF_SIZE - e->fill;
	left = e->size - e->produced + 1;
	if (left < room)
		room = (size_t)left;
	*ret = e->bufs[e->tail % EXPAND_NBUF] + e->fill;
	*ret_n = room;
	return 0;
}

static int commit(struct expand *e, size_t n)
{
	e->fill += n;
	e->produced += n;
	if (e->produced > e->size)
		return SLATE_ERR_SIZE_MISMATCH; /* more than declared: a bomb or a lie */
	return 0;
}

/*
 * One decoder step over (*in, *in_n): consumes input, produces at most out_n bytes at out.
 * Returns the bytes produced, or an error.
 */
static int decode_step(struct expand *e, const uint8_t **in, size_t *in_n, uint8_t *out,
                       size_t out_n, size_t *ret_out, bool finish)
{
	switch (e->compression) {
	case CATALOG_COMPRESSION_NONE: {
		size_t n = *in_n < out_n ? *in_n : out_n;
		if (n > 0) /* *in may be NULL when the input is empty (finish) */
			memcpy(out, *in, n);
		*in += n;
		*in_n -= n;
		*ret_out = n;
		return 0;
	}
	case CATALOG_COMPRESSION_GZIP: {
		int zr;

		if (e->stream_end) {
			if (*in_n == 0) {
				*ret_out = 0;
				return 0;
			}
			/* Another gzip member follows (RFC 1952 allows several). */
			if (inflateReset(&e->z) != Z_OK)
				return SLATE_ERR_INVALID_FORMAT;
			e->stream_end = false;
		}
		e->z.next_in = (Bytef *)*in;
		e->z.avail_in = (uInt)(*in_n > UINT32_MAX ? UINT32_MAX : *in_n);
		e->z.next_out = out;
		e->z.avail_out = (uInt)out_n;
		zr = inflate(&e->z, Z_NO_FLUSH);
		*ret_out = out_n - e->z.avail_out;
		*in_n -= (size_t)(e->z.next_in - *in);
		*in = e->z.next_in;
		if (zr == Z_STREAM_END)
			e->stream_end = true;
		else if (zr == Z_BUF_ERROR)
			; /* no progress possible now: needs more input */
		else if (zr != Z_OK)
			return SLATE_ERR_INVALID_FORMAT;
		return 0;
	}
	case CATALOG_COMPRESSION_ZSTD: {
		ZSTD_inBuffer ib = {*in, *in_n, 0};
		ZSTD_outBuffer ob = {out, out_n, 0};
		size_t zr = ZSTD_decompressStream(e->zs, &ob, &ib);

		if (ZSTD_isError(zr))
			return SLATE_ERR_INVALID_FORMAT;
		*in += ib.pos;
		*in_n -= ib.pos;
		*ret_out = ob.pos;
		/* 0: a frame is complete and flushed; another may follow. */
		if (ib.pos > 0 || ob.pos > 0)
			e->stream_end = zr == 0;
		return 0;
	}
	case CATALOG_COMPRESSION_XZ: {
		lzma_ret lr;

		e->xz.next_in = *in;
		e->xz.avail_in = *in_n;
		e->xz.next_out = out;
		e->xz.avail_out = out_n;
		lr = lzma_code(&e->xz, finish ? LZMA_FINISH : LZMA_RUN);
		*ret_out = out_n - e->xz.avail_out;
		*in_n = e->xz.avail_in;
		*in = e->xz.next_in;
		if (lr == LZMA_STREAM_END)
			e->stream_end = true;
		else if (lr == LZMA_BUF_ERROR && !finish)
			;
		else if (lr != LZMA_OK)
			return lr == LZMA_MEMLIMIT_ERROR ? -ENOMEM : SLATE_ERR_INVALID_FORMAT;
		return 0;
	}
	}
	return -EINVAL;
}

static uint64_t le_get(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Writes the n low bytes of v at p, little-endian; returns n. */
static size_t le_put(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return n;
}

/*
 * Whether a complete zstd frame (fsz bytes, declaring content bytes of output) holds nothing but
 * RLE blocks of the byte 0 that add up to content, read from its header and block headers as
 * RFC 8878 lays them out. Frames with a checksum or naming a dictionary are left to the decoder,
 * so that nothing is taken that libzstd would refuse.
 */
static bool zstd_zero_frame(const uint8_t *f, size_t fsz, uint64_t content)
{
	unsigned fhd, fcs_flag, fcs_len, pos;
	uint64_t total = 0;

	if (fsz < 6 || le_get(f, 4) != ZSTD_MAGICNUMBER)
		return false;
	fhd = f[4];
	fcs_flag = fhd >> 6;
	/* Single segment (the window is the content, so no block can exceed it), no reserved bit,
	 * checksum or dictionary. */
	if (!(fhd & 0x20) || (fhd & 0x0f))
		return false;
	fcs_len = fcs_flag == 0 ? 1 : 1u << fcs_flag;
	pos = 5 + fcs_len;
	for (;;) {
		uint32_t bh, bsize;

		if (fsz - pos < 4)
			return false;
		bh = (uint32_t)le_get(f + pos, 3);
		bsize = bh >> 3;
		if (((bh >> 1) & 3) != 1 || bsize > ZBLOCK_MAX || f[pos + 3] != 0)
			return false;
		pos += 4;
		total += bsize;
		if (bh & 1)
			break;
	}
	return pos == fsz && total == content;
}

/*
 * A whole zstd frame (fsz bytes at f) into the buffer being filled. Returns 1 when done, 0 when
 * this frame is for the streaming decoder (its size unknown, or more than the buffer has room
 * for), or an error.
 */
static int zstd_frame(struct expand *e, const uint8_t *f, size_t fsz)
{
	unsigned long long content;
	uint8_t *out;
	size_t room;
	int r;

	if ((le_get(f, 4) & 0xFFFFFFF0u) == ZSTD_MAGIC_SKIPPABLE_START)
		return 1; /* skippable: metadata, no output */
	content = ZSTD_getFrameContentSize(f, fsz);
	if (content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR ||
	    content == 0)
		return 0;
	if (content > e->size - e->produced)
		return SLATE_ERR_SIZE_MISMATCH; /* more than declared */
	r = out_space(e, &out, &room);
	if (r < 0)
		return r;
	if (content > room)
		return 0;
	if (zstd_zero_frame(f, fsz, content)) {
		e->stats.zero_frames++;
		/* Whole digest blocks inside the frame are only marked; the rest is zeroed in the
		 * buffer for the digest stage to read. Buffers start on a block, so offsets in
		 * the buffer are as aligned as offsets in the file. */
		size_t a = e->fill, z = e->fill + (size_t)content;
		size_t b0 = (a + VERIFY_BLOCK - 1) / VERIFY_BLOCK * VERIFY_BLOCK;
		size_t b1 = z / VERIFY_BLOCK * VERIFY_BLOCK;
		uint64_t *k = e->kmap[e->tail % EXPAND_NBUF];

		if (b0 >= b1) {
			memset(out, 0, (size_t)content);
		} else {
			memset(out, 0, b0 - a);
			memset(out + (b1 - a), 0, z - b1);
			memset(&k[b0 / VERIFY_BLOCK * WORDS_PER_BLOCK], 0xff,
			       (b1 - b0) / VERIFY_BLOCK * WORDS_PER_BLOCK * sizeof(uint64_t));
		}
	} else {
		size_t got = ZSTD_decompressDCtx(e->zd, out, (size_t)content, f, fsz);
		if (ZSTD_isError(got) || got != content)
			return SLATE_ERR_INVALID_FORMAT;
		e->stats.whole_frames++;
	}
	e->stream_end = true;
	r = commit(e, (size_t)content);
	return r < 0 ? r : 1;
}

static int run(struct expand *e, const uint8_t *p, size_t n, bool finish);

/* The streaming decoder takes n bytes; it is between frames again when they end one. */
static int zstd_stream(struct expand *e, const uint8_t *p, size_t n, bool finish)
{
	uint64_t before = e->produced;
	int r = run(e, p, n, finish);

	e->stats.streamed += e->produced - before;
	e->zstream = !e->stream_end;
	return r;
}

/* zstd input: whole frames where they can be had, the streaming decoder otherwise. */
static int zstd_run(struct expand *e, const uint8_t *p, size_t n, bool finish)
{
	for (;;) {
		const uint8_t *f;
		size_t avail, fsz;
		bool gathered = e->zbuf_len > 0;
		int r;

		if (e->zstream) {
			if (n == 0 && !finish)
				return 0;
			return zstd_stream(e, p, n, finish);
		}
		if (gathered) {
			size_t k = ZFRAME_CAP - e->zbuf_len < n ? ZFRAME_CAP - e->zbuf_len : n;
			if (k)
				memcpy(e->zbuf + e->zbuf_len, p, k);
			e->zbuf_len += k;
			p += k;
			n -= k;
			f = e->zbuf;
			avail = e->zbuf_len;
		} else {
			f = p;
			avail = n;
		}
		if (avail == 0)
			return finish ? zstd_stream(e, NULL, 0, true) : 0;
		fsz = ZSTD_findFrameCompressedSize(f, avail);
		if (ZSTD_isError(fsz)) {
			if (ZSTD_getErrorCode(fsz) == ZSTD_error_srcSize_wrong && !finish &&
			    avail < ZFRAME_CAP) {
				/* Incomplete: keep it until the rest comes. */
				if (!gathered) {
					memcpy(e->zbuf, p, n);
					e->zbuf_len = n;
				}
				return 0;
			}
			/* Too big for a buffer, cut short, or not zstd at all: the streaming
			 * decoder takes it from here (and says what is wrong). */
			e->zbuf_len = 0;
			r = zstd_stream(e, f, avail, false);
			if (r < 0)
				return r;
			if (!gathered)
				n = 0;
			continue;
		}
		r = zstd_frame(e, f, fsz);
		if (r == 0)
			r = zstd_stream(e, f, fsz, false);
		if (r < 0)
			return r;
		if (gathered) {
			memmove(e->zbuf, e->zbuf + fsz, avail - fsz);
			e->zbuf_len = avail - fsz;
		} else {
			p += fsz;
			n -= fsz;
		}
	}
}

static int run(struct expand *e, const uint8_t *p, size_t n, bool finish)
{
	for (;;) {
		uint8_t *out;
		size_t room, got = 0;
		int r;

		if (e->compression == CATALOG_COMPRESSION_XZ && e->stream_end && n > 0)
			return SLATE_ERR_INVALID_FORMAT; /* bytes after the end (concatenated: no) */
		r = out_space(e, &out, &room);
		if (r < 0)
			return r;
		r = decode_step(e, &p, &n, out, room, &got, finish);
		if (r < 0)
			return r;
		r = commit(e, got);
		if (r < 0)
			return r;
		/* Done when the input is used up and the decoder had room to spare. */
		if (n == 0 && got < room)
			return 0;
		if (got == 0 && n > 0 && e->compression == CATALOG_COMPRESSION_GZIP &&
		    !e->stream_end)
			return SLATE_ERR_INVALID_FORMAT; /* stuck: inflate takes no more input */
	}
}

int expand_new(enum catalog_compression compression, int out_fd, uint64_t size, struct expand **ret)
{
	_cleanup_(expand_freep) struct expand *e = NULL;
	int r;

	if (out_fd < 0 || size == 0 || !ret || compression > CATALOG_COMPRESSION_XZ)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->compression = compression;
	e->fd = out_fd;
	e->size = size;
	(void)pthread_mutex_init(&e->lock, NULL);
	(void)pthread_cond_init(&e->cond, NULL);
	for (unsigned i = 0; i < EXPAND_NBUF; i++)
		if (posix_memalign((void **)&e->bufs[i], EXPAND_HOLE_BLOCK, EXPAND_BUF_SIZE) != 0)
			return -ENOMEM;
	r = verify_digest_init(&e->digest, size);
	if (r < 0)
		return r;
	switch (compression) {
	case CATALOG_COMPRESSION_NONE:
		break;
	case CATALOG_COMPRESSION_GZIP:
		/* 15 + 16: gzip framing only, a raw or zlib stream is refused. */
		if (inflateInit2(&e->z, 15 + 16) != Z_OK)
			return -ENOMEM;
		e->z_init = true;
		break;
	case CATALOG_COMPRESSION_ZSTD:
		e->zs = ZSTD_createDStream();
		if (!e->zs || ZSTD_isError(ZSTD_initDStream(e->zs)))
			return -ENOMEM;
		/* At most a 128 MiB window (zstd --long=27), whatever the frame asks for. */
		(void)ZSTD_DCtx_setParameter(e->zs, ZSTD_d_windowLogMax, 27);
		e->zd = ZSTD_createDCtx();
		e->zbuf = malloc(ZFRAME_CAP);
		if (!e->zd || !e->zbuf)
			return -ENOMEM;
		break;
	case CATALOG_COMPRESSION_XZ: {
		lzma_stream init = LZMA_STREAM_INIT;
		e->xz = init;
		if (lzma_stream_decoder(&e->xz, EXPAND_XZ_MEMLIMIT, 0) != LZMA_OK)
			return -ENOMEM;
		e->xz_init = true;
		break;
	}
	}
	e->hash = (struct stage){.e = e, .fn = hash_buffer};
	e->write = (struct stage){.e = e, .fn = write_buffer};
	if (pthread_create(&e->hash.thread, NULL, stage_main, &e->hash) != 0)
		return -EAGAIN;
	e->hash.started = true;
	if (pthread_create(&e->write.thread, NULL, stage_main, &e->write) != 0)
		return -EAGAIN;
	e->write.started = true;
	if (pthread_create(&e->syncer, NULL, syncer_main, e) != 0)
		return -EAGAIN;
	e->syncer_started = true;
	*ret = TAKE_PTR(e);
	return 0;
}

int expand_write(struct expand *e, const void *p, size_t n)
{
	if (!e || e->finished)
		return -EINVAL;
	if (n == 0)
		return 0;
	if (e->compression == CATALOG_COMPRESSION_ZSTD)
		return zstd_run(e, p, n, false);
	return run(e, p, n, false);
}

/* Tells the threads no more comes and waits for them. Returns their first error. */
static int stop_stages(struct expand *e)
{
	struct stage *stages[] = {&e->hash, &e->write};
	int r;

	(void)pthread_mutex_lock(&e->lock);
	e->eof = true;
	(void)pthread_cond_broadcast(&e->cond);
	(void)pthread_mutex_unlock(&e->lock);
	for (size_t i = 0; i < ELEMENTSOF(stages); i++)
		if (stages[i]->started) {
			(void)pthread_join(stages[i]->thread, NULL);
			stages[i]->started = false;
		}
	if (e->syncer_started) {
		(void)pthread_join(e->syncer, NULL);
		e->syncer_started = false;
	}
	(void)pthread_mutex_lock(&e->lock);
	r = e->error;
	(void)pthread_mutex_unlock(&e->lock);
	return r;
}

int expand_finish(struct expand *e, uint8_t ret_digest[32])
{
	int r;

	if (!e || e->finished)
		return -EINVAL;
	e->finished = true;
	/* Flush whatever the decoder still holds. */
	r = e->compression == CATALOG_COMPRESSION_ZSTD ? zstd_run(e, NULL, 0, true)
	                                               : run(e, NULL, 0, true);
	if (r >= 0 && e->compression != CATALOG_COMPRESSION_NONE && !e->stream_end)
		r = SLATE_ERR_INVALID_FORMAT; /* truncated */
	if (r >= 0)
		r = submit(e);
	{
		int k = stop_stages(e);
		if (r >= 0 && k < 0)
			r = k;
	}
	if (r < 0)
		return r;
	if (e->produced != e->size)
		return SLATE_ERR_SIZE_MISMATCH;
	if (ftruncate(e->fd, (off_t)e->size) < 0)
		return -errno;
	return verify_digest_final(&e->digest, ret_digest);
}

void expand_get_stats(const struct expand *e, struct expand_stats *ret)
{
	*ret = e->stats;
}

uint64_t expand_output_size(const struct expand *e)
{
	return e ? e->produced : 0;
}

void expand_free(struct expand *e)
{
	if (!e)
		return;
	/* Buffers still queued are not worth writing any more. */
	(void)pthread_mutex_lock(&e->lock);
	if (!e->error)
		e->error = -ECANCELED;
	(void)pthread_mutex_unlock(&e->lock);
	(void)stop_stages(e);
	if (e->z_init)
		(void)inflateEnd(&e->z);
	if (e->zs)
		(void)ZSTD_freeDStream(e->zs);
	if (e->zd)
		(void)ZSTD_freeDCtx(e->zd);
	free(e->zbuf);
	if (e->xz_init)
		lzma_end(&e->xz);
	verify_digest_done(&e->digest);
	for (unsigned i = 0; i < EXPAND_NBUF; i++)
		free(e->bufs[i]);
	(void)pthread_mutex_destroy(&e->lock);
	(void)pthread_cond_destroy(&e->cond);
	free(e);
}

int expand_fd(enum catalog_compression compression, int in_fd, int out_fd, uint64_t size,
              uint8_t ret_digest[32])
{
	_cleanup_(expand_freep) struct expand *e = NULL;
	_cleanup_free_ uint8_t *chunk = malloc(EXPAND_READ_CHUNK);
	int r;

	if (!chunk)
		return -ENOMEM;
	r = expand_new(compression, out_fd, size, &e);
	if (r < 0)
		return r;
	for (;;) {
		ssize_t n = read(in_fd, chunk, EXPAND_READ_CHUNK);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		r = expand_write(e, chunk, (size_t)n);
		if (r < 0)
			return r;
	}
	return expand_finish(e, ret_digest);
}

/*
 * A frame of n zeros (n <= EXPAND_PACK_FRAME) written out by hand: libzstd never makes the first
 * block of a frame an RLE block, so its frame of zeros would be a compressed block and RLE blocks,
 * which the expander cannot tell from data without decoding. Single segment, the content size in
 * 4 bytes, RLE blocks of at most 128 KiB of the byte 0, no checksum (optional in RFC 8878; the
 * artifact's SHA-256 covers the frame). Returns its length.
 */
static size_t pack_zero_frame(uint8_t *out, size_t n)
{
	size_t len = 0, left = n;

	len += le_put(out + len, ZSTD_MAGICNUMBER, 4);
	out[len++] = 0xa0; /* FCS 4 bytes, single segment, no checksum, no dictionary */
	len += le_put(out + len, n, 4);
	do {
		uint32_t b = left < ZBLOCK_MAX ? (uint32_t)left : ZBLOCK_MAX;

		/* Last_Block, Block_Type 1 (RLE), Block_Size; then the byte repeated: 0. */
		len += le_put(out + len, (left == b ? 1u : 0u) | (1u << 1) | (b << 3), 3);
		out[len++] = 0;
		left -= b;
	} while (left > 0);
	return len;
}

int expand_pack_zstd(int in_fd, int out_fd, int level, uint64_t *ret_in, uint64_t *ret_out,
                     uint8_t ret_sha256[32])
{
	_cleanup_free_ uint8_t *in = malloc(EXPAND_BUF_SIZE);
	_cleanup_free_ uint8_t *out = malloc(ZSTD_COMPRESSBOUND(EXPAND_BUF_SIZE));
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	uint64_t total_in = 0, total_out = 0;
	int r = 0;

	if (!in || !out || !cc || !md) {
		r = -ENOMEM;
		goto out;
	}
	if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
		r = -EIO;
		goto out;
	}
	if (ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 1))) {
		r = -EINVAL;
		goto out;
	}
	for (;;) {
		size_t n = 0, z;

		/* Whole buffers: every frame but the last holds exactly EXPAND_BUF_SIZE. */
		while (n < EXPAND_BUF_SIZE) {
			ssize_t k = read(in_fd, in + n, EXPAND_BUF_SIZE - n);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0) {
				r = -errno;
				goto out;
			}
			if (k == 0)
				break;
			n += (size_t)k;
		}
		if (n == 0 && total_in > 0)
			break;
		if (n > 0 && verify_all_zero(in, n)) {
			z = pack_zero_frame(out, n);
		} else {
			z = ZSTD_compress2(cc, out, ZSTD_COMPRESSBOUND(EXPAND_BUF_SIZE), in, n);
			if (ZSTD_isError(z)) {
				r = -EIO;
				goto out;
			}
		}
		r = fs_write_all(out_fd, out, z);
		if (r < 0)
			goto out;
		/* The artifact's SHA-256 on the way: the catalog needs it, and nothing reads the
		 * output back for it. */
		if (EVP_DigestUpdate(md, out, z) != 1) {
			r = -EIO;
			goto out;
		}
		total_in += n;
		total_out += z;
		if (n < EXPAND_BUF_SIZE)
			break;
	}
	if (EVP_DigestFinal_ex(md, ret_sha256, NULL) != 1) {
		r = -EIO;
		goto out;
	}
	if (ret_in)
		*ret_in = total_in;
	if (ret_out)
		*ret_out = total_out;
out:
	EVP_MD_CTX_free(md);
	ZSTD_freeCCtx(cc);
	return r;
}

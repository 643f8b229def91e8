/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The host's half of `slate probe` (doc/residue.md): which 64 KiB regions of a guest disk the
 * host file has never written (holes), which are still the base image's own extents, which the
 * guest wrote. Raw files answer through SEEK_DATA and FIEMAP, qcow2 overlays through
 * `qemu-img map`, block devices not at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/residue.h"
#include "storage/spawn.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/macro.h"

/* qemu-img map's JSON for a workspace disk: one entry per run of like clusters. */
#define QEMU_MAP_MAX (64u * 1024 * 1024)
#define QEMU_MAP_ENTRIES_MAX (1u << 20)
#define FIEMAP_EXTENTS 32

struct qmap_entry {
	uint64_t start, length;
	int depth;
	bool zero, data;
};

struct residue_map {
	int fd;      /* the disk (raw or block device); -1 for qcow2 */
	int base_fd; /* the raw base, or -1 */
	bool block, qcow2;
	uint64_t size;
	struct qmap_entry *q;
	size_t n_q;
};

const char *residue_class_name(enum residue_class c)
{
	switch (c) {
	case RESIDUE_HOLE:
		return "hole";
	case RESIDUE_BASE:
		return "base";
	case RESIDUE_UNKNOWN:
		return "unknown";
	case RESIDUE_WRITTEN:
		break;
	}
	return "written";
}

void residue_map_free(struct residue_map *m)
{
	if (!m)
		return;
	safe_close(m->fd);
	safe_close(m->base_fd);
	free(m->q);
	free(m);
}

int residue_map_parse_qemu_map(struct residue_map *m, const char *json, size_t len)
{
	_cleanup_json_ struct json_object *root = NULL;
	uint64_t end = 0;
	size_t n;
	int r;

	r = json_parse_bounded(json, len, QEMU_MAP_MAX, &root);
	if (r < 0)
		return r;
	if (!json_object_is_type(root, json_type_array))
		return SLATE_ERR_INVALID_FORMAT;
	n = json_object_array_length(root);
	if (n == 0 || n > QEMU_MAP_ENTRIES_MAX)
		return SLATE_ERR_INVALID_FORMAT;
	free(m->q);
	m->q = calloc(n, sizeof(*m->q));
	m->n_q = 0;
	if (!m->q)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(root, i);
		struct qmap_entry *q = &m->q[i];
		int64_t start, length, depth;
		bool zero = false, data = false;

		if (!json_object_is_type(e, json_type_object) ||
		    json_get_int64(e, "start", &start) < 0 ||
		    json_get_int64(e, "length", &length) < 0 ||
		    json_get_int64(e, "depth", &depth) < 0 || json_get_bool(e, "zero", &zero) < 0 ||
		    json_get_bool(e, "data", &data) < 0)
			return SLATE_ERR_INVALID_FORMAT;
		/* Contiguous, in order, from 0: anything else is not a map of one disk. */
		if (start < 0 || length <= 0 || depth < 0 || depth > 64 || (uint64_t)start != end ||
		    (uint64_t)length > UINT64_MAX - (uint64_t)start)
			return SLATE_ERR_INVALID_FORMAT;
		*q = (struct qmap_entry){.start = (uint64_t)start,
		                         .length = (uint64_t)length,
		                         .depth = (int)depth,
		                         .zero = zero,
		                         .data = data};
		end = q->start + q->length;
		m->n_q++;
	}
	m->size = end;
	return 0;
}

static int open_qcow2(struct residue_map *m, const char *path, struct slate_error *err)
{
	const char *argv[] = {"qemu-img", "map", "--output=json", "-U", "-f", "qcow2", path, NULL};
	_cleanup_free_ char *out = NULL;
	int r;

	r = spawn_run_max(argv, QEMU_MAP_MAX, &out);
	if (r < 0)
		return slate_error_set(err, r, "qemu-img map %s failed: %s", path,
		                       out && *out ? out : slate_strerror(r));
	r = residue_map_parse_qemu_map(m, out, strlen(out));
	if (r < 0)
		return slate_error_set(err, r, "qemu-img map %s: unexpected output", path);
	return 0;
}

int residue_map_open(const char *path, const char *base, bool qcow2, struct residue_map **ret,
                     struct slate_error *err)
{
	struct residue_map *m = calloc(1, sizeof(*m));
	struct stat st;
	int r;

	if (!m)
		return slate_error_errno(err, -ENOMEM, "probe");
	m->fd = m->base_fd = -1;
	m->qcow2 = qcow2;
	if (base) {
		m->base_fd = open(base, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (m->base_fd < 0) {
			r = slate_error_errno(err, -errno, "cannot open the base image %s", base);
			goto fail;
		}
	}
	if (qcow2) {
		r = open_qcow2(m, path, err);
		if (r < 0)
			goto fail;
		*ret = m;
		return 0;
	}
	/* The workspace directory is slated's: a link there is refused, a device node is used. */
	m->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (m->fd < 0 || fstat(m->fd, &st) < 0) {
		r = slate_error_errno(err, -errno, "cannot open %s", path);
		goto fail;
	}
	if (S_ISBLK(st.st_mode)) {
		m->block = true;
		if (ioctl(m->fd, BLKGETSIZE64, &m->size) < 0) {
			r = slate_error_errno(err, -errno, "cannot read the size of %s", path);
			goto fail;
		}
	} else if (S_ISREG(st.st_mode)) {
		m->size = (uint64_t)st.st_size;
	} else {
		r = slate_error_set(err, -EINVAL, "%s is neither a file nor a block device", path);
		goto fail;
	}
	*ret = m;
	return 0;
fail:
	residue_map_free(m);
	return r;
}

uint64_t residue_map_size(const struct residue_map *m)
{
	return m->size;
}

bool residue_map_has_base(const struct residue_map *m)
{
	return m->base_fd >= 0;
}

static bool is_hole(int fd, uint64_t off)
{
	off_t d = lseek(fd, (off_t)off, SEEK_DATA);

	/* ENXIO: no data at or after off. */
	return (d < 0 && errno == ENXIO) || (d >= 0 && (uint64_t)d >= off + RESIDUE_REGION);
}

struct extents {
	struct fiemap fm;
	struct fiemap_extent ext[FIEMAP_EXTENTS];
};

static int get_extents(int fd, uint64_t off, struct extents *e)
{
	memset(e, 0, sizeof(*e));
	e->fm.fm_start = off;
	e->fm.fm_length = RESIDUE_REGION;
	e->fm.fm_flags = FIEMAP_FLAG_SYNC;
	e->fm.fm_extent_count = FIEMAP_EXTENTS;
	if (ioctl(fd, FS_IOC_FIEMAP, &e->fm) < 0)
		return -errno;
	return 0;
}

/* The extent of e holding byte p, if it is an ordinary one (known place, not delayed). */
static const struct fiemap_extent *extent_at(const struct extents *e, uint64_t p)
{
	const uint32_t odd = FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC |
	                     FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_DATA_TAIL |
	                     FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_UNWRITTEN;

	for (uint32_t i = 0; i < e->fm.fm_mapped_extents; i++) {
		const struct fiemap_extent *x = &e->ext[i];
		if (p >= x->fe_logical && p - x->fe_logical < x->fe_length)
			return (x->fe_flags & odd) ? NULL : x;
	}
	return NULL;
}

/* True when every byte of the region sits in the same physical place in both files: a shared
 * extent of the clone the guest never wrote. */
static bool same_extents(int fd, int base_fd, uint64_t off)
{
	struct extents a, b;
	uint64_t p = off, end = off + RESIDUE_REGION;

	if (get_extents(fd, off, &a) < 0 || get_extents(base_fd, off, &b) < 0)
		return false;
	while (p < end) {
		const struct fiemap_extent *x = extent_at(&a, p), *y = extent_at(&b, p);
		uint64_t xe, ye;

		if (!x || !y ||
		    x->fe_physical + (p - x->fe_logical) != y->fe_physical + (p - y->fe_logical))
			return false;
		xe = x->fe_logical + x->fe_length;
		ye = y->fe_logical + y->fe_length;
		p = xe < ye ? xe : ye;
	}
	return true;
}

static enum residue_class classify_qcow2(const struct residue_map *m, uint64_t off)
{
	bool all_zero = true, all_base = m->base_fd >= 0;
	size_t lo = 0, hi = m->n_q;

	/* The first entry that ends after off. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->q[mid].start + m->q[mid].length <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < m->n_q && m->q[i].start < off + RESIDUE_REGION; i++) {
		const struct qmap_entry *q = &m->q[i];
		if (!q->zero)
			all_zero = false;
		/* Served by the backing file (depth 1: the base) as data, or zeros from it. */
		if (q->depth < 1 || (!q->data && !q->zero))
			all_base = false;
	}
	if (all_zero)
		return RESIDUE_HOLE;
	return all_base ? RESIDUE_BASE : RESIDUE_WRITTEN;
}

int residue_map_classify(struct residue_map *m, uint64_t off, enum residue_class *ret)
{
	if (off % RESIDUE_REGION || off >= m->size || m->size - off < RESIDUE_REGION)
		return -EINVAL;
	if (m->block)
		*ret = RESIDUE_UNKNOWN;
	else if (m->qcow2)
		*ret = classify_qcow2(m, off);
	else if (is_hole(m->fd, off))
		/* A hole of the clone where the base has data: the guest discarded it (a write). */
		*ret = m->base_fd < 0 || is_hole(m->base_fd, off) ? RESIDUE_HOLE : RESIDUE_WRITTEN;
	else if (m->base_fd >= 0 && same_extents(m->fd, m->base_fd, off))
		*ret = RESIDUE_BASE;
	else
		*ret = RESIDUE_WRITTEN;
	return 0;
}

int residue_map_base_digests(struct residue_map *m, uint64_t off, uint8_t ret[RESIDUE_BLOCKS][32])
{
	_cleanup_free_ uint8_t *buf = malloc(RESIDUE_REGION);
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	if (m->base_fd < 0)
		return -ENOENT;
	n = pread(m->base_fd, buf, RESIDUE_REGION, (off_t)off);
	if (n < 0)
		return -errno;
	/* Past the base's end the clone reads zeros. */
	if ((size_t)n < RESIDUE_REGION)
		memset(buf + n, 0, RESIDUE_REGION - (size_t)n);
	for (size_t i = 0; i < RESIDUE_BLOCKS; i++)
		crypto_hash_sha256(ret[i], buf + i * RESIDUE_BLOCK, RESIDUE_BLOCK);
	return 0;
}

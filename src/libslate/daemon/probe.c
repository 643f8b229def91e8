/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * `slate probe` (doc/residue.md): slated runs `slate-guest --probe` as root in the workspace, gets
 * the free space of its disks (the guest's file systems frozen meanwhile), picks regions the host
 * file never wrote, sends them with what they must read as, and turns the guest's answers into
 * the result. Everything the guest prints is parsed as hostile input.
 */
#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel/proto.h"
#include "daemon/create.h"
#include "daemon/daemon.h"
#include "daemon/exec.h"
#include "daemon/probe.h"
#include "daemon/start.h"
#include "image/store.h"
#include "storage/residue.h"
#include "storage/storage.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/hex.h"
#include "util/json.h"
#include "util/log.h"
#include "util/macro.h"
#include "util/time.h"
#include "vm/domain.h"
#include "workspace/workspace.h"

#define PROBE_DEVICES 2
/* Free extents one device may list: a fresh 64 GiB ext4 has a few hundred. */
#define PROBE_FREE_MAX (1u << 20)
/* Regions looked at per run before the run is given up (all written by the guest). */
#define PROBE_RUN_SCAN 64
/* Hits kept per device in the result (all are counted). */
#define PROBE_HITS_KEPT 64

/* ---- parsing the guest's lines ---- */

struct tokens {
	const char *p[12];
	size_t len[12];
	size_t n;
	const char *rest; /* from the token after the fixed ones: text */
};

static bool split(const char *line, size_t len, size_t fixed, struct tokens *t)
{
	size_t i = 0;

	t->n = 0;
	t->rest = NULL;
	while (i < len && t->n < ELEMENTSOF(t->p)) {
		size_t s = i;
		if (t->n == fixed) {
			t->rest = line + i;
			return true;
		}
		while (i < len && line[i] != ' ')
			i++;
		if (i == s)
			return false; /* two spaces, or a leading/trailing one */
		t->p[t->n] = line + s;
		t->len[t->n++] = i - s;
		if (i < len && ++i == len)
			return false;
	}
	return i == len;
}

static bool tok_is(const struct tokens *t, size_t i, const char *s)
{
	return i < t->n && t->len[i] == strlen(s) && memcmp(t->p[i], s, t->len[i]) == 0;
}

static bool tok_u64(const struct tokens *t, size_t i, uint64_t *ret)
{
	uint64_t v = 0;

	if (i >= t->n || t->len[i] == 0 || t->len[i] > 20 || (t->len[i] > 1 && t->p[i][0] == '0'))
		return false;
	for (size_t k = 0; k < t->len[i]; k++) {
		unsigned c = (unsigned char)t->p[i][k] - '0';
		if (c > 9 || v > (UINT64_MAX - c) / 10)
			return false;
		v = v * 10 + c;
	}
	*ret = v;
	return true;
}

static bool tok_dev(const struct tokens *t, size_t i, char out[17])
{
	if (i >= t->n || t->len[i] == 0 || t->len[i] > 16)
		return false;
	for (size_t k = 0; k < t->len[i]; k++) {
		char c = t->p[i][k];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
			return false;
	}
	memcpy(out, t->p[i], t->len[i]);
	out[t->len[i]] = '\0';
	return true;
}

static bool tok_hex(const struct tokens *t, size_t i, uint8_t *out, size_t max, size_t *ret_len)
{
	if (i >= t->n || t->len[i] % 2 || t->len[i] / 2 > max)
		return false;
	if (hex_decode(t->p[i], t->len[i] / 2, out, HEX_LOWER) < 0)
		return false;
	*ret_len = t->len[i] / 2;
	return true;
}

/* Free text: 1..PROBE_TEXT_MAX printable ASCII bytes. */
static bool take_text(const char *p, size_t len, char *out)
{
	if (len == 0 || len > PROBE_TEXT_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] > 0x7e)
			return false;
	memcpy(out, p, len);
	out[len] = '\0';
	return true;
}

static bool parse_hit(const struct tokens *t, size_t at, struct probe_line *l)
{
	return tok_u64(t, at, &l->bytes) && tok_u64(t, at + 1, &l->first) &&
	       l->first < RESIDUE_REGION && tok_u64(t, at + 2, &l->markers) &&
	       tok_hex(t, at + 3, l->sample, sizeof(l->sample), &l->sample_len) &&
	       l->bytes <= RESIDUE_REGION && l->markers <= RESIDUE_REGION && t->n == at + 4;
}

/* How many space-separated words a line of this kind has before its free text (ELEMENTSOF:
 * none). */
static size_t fixed_words(const char *line, size_t len)
{
	const char *sp = memchr(line, ' ', len);
	size_t k = sp ? (size_t)(sp - line) : len;

	if (k == 2 && memcmp(line, "fs", 2) == 0)
		return 4;
	if (k == 7 && memcmp(line, "refused", 7) == 0)
		return 3;
	if (k == 5 && memcmp(line, "error", 5) == 0)
		return 2;
	return ELEMENTSOF(((struct tokens *)NULL)->p);
}

int probe_parse_guest_line(const char *line, size_t len, struct probe_line *l)
{
	struct tokens t;
	bool ok = false;

	memset(l, 0, sizeof(*l));
	if (len == 0 || len > PROBE_LINE_MAX || memchr(line, '\0', len) ||
	    !split(line, len, fixed_words(line, len), &t))
		return -EPROTO;
	if (tok_is(&t, 0, "SLATE-PROBE")) {
		l->kind = PL_HEADER;
		ok = t.n == 2 && tok_is(&t, 1, "1");
	} else if (tok_is(&t, 0, "device")) {
		l->kind = PL_DEVICE;
		ok = t.n == 4 && tok_dev(&t, 1, l->dev) && tok_u64(&t, 2, &l->a) &&
		     tok_u64(&t, 3, &l->b);
	} else if (tok_is(&t, 0, "fs")) {
		l->kind = PL_FS;
		ok = t.n == 4 && t.rest && tok_dev(&t, 1, l->dev) && tok_u64(&t, 2, &l->a) &&
		     tok_u64(&t, 3, &l->b) &&
		     take_text(t.rest, len - (size_t)(t.rest - line), l->text);
	} else if (tok_is(&t, 0, "free")) {
		l->kind = PL_FREE;
		ok = t.n == 4 && tok_dev(&t, 1, l->dev) && tok_u64(&t, 2, &l->a) &&
		     tok_u64(&t, 3, &l->b) && l->b > 0 && l->a <= UINT64_MAX - l->b;
	} else if (tok_is(&t, 0, "ready") || tok_is(&t, 0, "end")) {
		l->kind = tok_is(&t, 0, "ready") ? PL_READY : PL_END;
		ok = t.n == 1;
	} else if (tok_is(&t, 0, "refused") || tok_is(&t, 0, "error")) {
		bool refused = tok_is(&t, 0, "refused");
		l->kind = refused ? PL_REFUSED : PL_ERROR;
		ok = t.rest && t.n == (refused ? 3u : 2u) &&
		     (tok_is(&t, 1, "-") || tok_dev(&t, 1, l->dev)) &&
		     (!refused || tok_u64(&t, 2, &l->a)) &&
		     take_text(t.rest, len - (size_t)(t.rest - line), l->text);
	} else if (tok_is(&t, 0, "done")) {
		l->kind = PL_DONE;
		ok = t.n == 5 && tok_dev(&t, 1, l->dev) && tok_u64(&t, 2, &l->a) &&
		     tok_u64(&t, 3, &l->b) && tok_u64(&t, 4, &l->ms);
	} else if (tok_is(&t, 0, "write") || tok_is(&t, 0, "compare")) {
		bool w = tok_is(&t, 0, "write");
		l->kind = w ? PL_WRITE : PL_COMPARE;
		ok = tok_dev(&t, 1, l->dev) && tok_u64(&t, 2, &l->a) && l->a % RESIDUE_REGION == 0;
		if (ok && tok_is(&t, 3, "clean"))
			l->clean = true, ok = t.n == 4;
		else if (ok && w && tok_is(&t, 3, "foreign"))
			ok = parse_hit(&t, 4, l);
		else if (ok && !w && tok_is(&t, 3, "differs"))
			ok = tok_u64(&t, 4, &l->blocks) && l->blocks >= 1 &&
			     l->blocks <= RESIDUE_BLOCKS && parse_hit(&t, 5, l);
		else
			ok = false;
	}
	if (!ok)
		memset(l, 0, sizeof(*l));
	return ok ? 0 : -EPROTO;
}

/* ---- one device ---- */

struct extent {
	uint64_t off, len;
};

struct device {
	const char *name; /* vda, vdb */
	const char *file; /* disk.img, home.img */
	struct residue_map *map;
	uint64_t size;
	bool seen; /* the guest answered for it */
	struct extent *free;
	size_t n_free, cap_free;
	uint64_t *prefix; /* regions in free[0..i) */
	uint64_t candidates;
	struct json_object *fs; /* array */
	struct json_object *hits;
	struct json_object *errors;
	uint64_t n_class[4];
	uint64_t written, compared, refused, foreign_bytes, markers, n_hits, guest_ms;
	bool done;
};

static void device_clear(struct device *v)
{
	residue_map_free(v->map);
	free(v->free);
	free(v->prefix);
	json_object_put(v->fs);
	json_object_put(v->hits);
	json_object_put(v->errors);
}

static struct device *find_device(struct device *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (streq(v[i].name, name))
			return &v[i];
	return NULL;
}

static int add_free(struct device *v, uint64_t off, uint64_t len)
{
	if (off > v->size || len > v->size - off || v->n_free >= PROBE_FREE_MAX ||
	    (v->n_free && off < v->free[v->n_free - 1].off + v->free[v->n_free - 1].len))
		return -EPROTO; /* outside the device, too many, or not in order */
	if (v->n_free == v->cap_free) {
		size_t cap = v->cap_free ? 2 * v->cap_free : 256;
		struct extent *n = realloc(v->free, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		v->free = n;
		v->cap_free = cap;
	}
	v->free[v->n_free++] = (struct extent){off, len};
	return 0;
}

static uint64_t first_region(const struct extent *e)
{
	return (e->off + RESIDUE_REGION - 1) / RESIDUE_REGION * RESIDUE_REGION;
}

static uint64_t regions_in(const struct extent *e)
{
	uint64_t a = first_region(e), end = (e->off + e->len) / RESIDUE_REGION * RESIDUE_REGION;
	return end > a ? (end - a) / RESIDUE_REGION : 0;
}

static int index_free(struct device *v)
{
	v->prefix = calloc(v->n_free + 1, sizeof(*v->prefix));
	if (!v->prefix)
		return -ENOMEM;
	for (size_t i = 0; i < v->n_free; i++)
		v->prefix[i + 1] = v->prefix[i] + regions_in(&v->free[i]);
	v->candidates = v->prefix[v->n_free];
	return 0;
}

/* The offset of the k-th aligned region inside the free space. */
static uint64_t candidate(const struct device *v, uint64_t k)
{
	size_t lo = 0, hi = v->n_free;

	while (lo + 1 < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v->prefix[mid] <= k)
			lo = mid;
		else
			hi = mid;
	}
	while (lo < v->n_free && v->prefix[lo + 1] <= k)
		lo++;
	return first_region(&v->free[lo]) + (k - v->prefix[lo]) * RESIDUE_REGION;
}

/* n bytes at p as 2n lower-case hex digits and a NUL at out. */
static void put_hex(char *out, const uint8_t *p, size_t n)
{
	(void)sodium_bin2hex(out, 2 * n + 1, p, n);
}

/* One region's line: a hole is written and compared with zeros, a base extent compared with the
 * base's digests, an unknown region (a block device) written. */
static int plan_region(struct device *v, uint64_t off, enum residue_class c, struct buf *b,
                       struct slate_error *err)
{
	char digests[RESIDUE_BLOCKS * 64 + 1];
	int r;

	if (c == RESIDUE_BASE) {
		uint8_t dg[RESIDUE_BLOCKS][32];
		r = residue_map_base_digests(v->map, off, dg);
		if (r < 0)
			return slate_error_errno(err, r, "cannot read the base");
		for (size_t j = 0; j < RESIDUE_BLOCKS; j++)
			put_hex(digests + 64 * j, dg[j], 32);
		r = buf_putf(b, "region %s %" PRIu64 " c %s\n", v->name, off, digests);
	} else {
		r = buf_putf(b, "region %s %" PRIu64 " %s\n", v->name, off,
		             c == RESIDUE_HOLE ? "wc zero" : "w -");
	}
	return r < 0 ? slate_error_errno(err, r, "probe") : 0;
}

/*
 * Picks the regions: the device's candidates in `want` equal runs, and in each run the first
 * region the host never wrote (written and compared). Where the disk has a base, every candidate
 * is looked at, and up to `want` of the extents still the base's own, spread over all of them,
 * are compared with the base too: free blocks holding the base's bytes are few and bunched (a
 * deleted file of the image build), so a run's first eligible region is nearly always a hole.
 */
static int plan_device(struct device *v, unsigned want, struct buf *b, struct slate_error *err)
{
	uint64_t runs = want < v->candidates ? want : v->candidates;
	bool base = residue_map_has_base(v->map);
	_cleanup_free_ uint64_t *bases = NULL;
	size_t n_bases = 0, cap_bases = 0;
	int r;

	for (uint64_t k = 0; k < runs; k++) {
		uint64_t from = k * v->candidates / runs, to = (k + 1) * v->candidates / runs;
		bool have_write = false;

		for (uint64_t i = from; i < to; i++) {
			uint64_t off = candidate(v, i);
			enum residue_class c;

			/* Without a base, a run ends at its pick (or PROBE_RUN_SCAN regions in). */
			if (!base && (have_write || i >= from + PROBE_RUN_SCAN))
				break;
			r = residue_map_classify(v->map, off, &c);
			if (r < 0)
				return slate_error_set(err, r,
				                       "cannot classify %s at %" PRIu64 ": %s",
				                       v->file, off, slate_strerror(r));
			v->n_class[c]++;
			if (c == RESIDUE_BASE) {
				if (n_bases == cap_bases) {
					size_t cap = cap_bases ? 2 * cap_bases : 1024;
					uint64_t *nb = realloc(bases, cap * sizeof(*nb));
					if (!nb)
						return slate_error_errno(err, -ENOMEM, "probe");
					bases = nb;
					cap_bases = cap;
				}
				bases[n_bases++] = off;
			} else if (c != RESIDUE_WRITTEN && !have_write) {
				r = plan_region(v, off, c, b, err);
				if (r < 0)
					return r;
				have_write = true;
			}
		}
	}
	for (uint64_t k = 0, n = want < n_bases ? want : n_bases; k < n; k++) {
		r = plan_region(v, bases[k * n_bases / n], RESIDUE_BASE, b, err);
		if (r < 0)
			return r;
	}
	return 0;
}

static int add_hit(struct device *v, const struct probe_line *l)
{
	struct json_object *h;
	char hex[2 * PROBE_SAMPLE_MAX + 1];
	char text[PROBE_SAMPLE_MAX + 1];

	v->n_hits++;
	v->foreign_bytes += l->bytes;
	v->markers += l->markers;
	if (v->n_hits > PROBE_HITS_KEPT)
		return 0;
	put_hex(hex, l->sample, l->sample_len);
	for (size_t i = 0; i < l->sample_len; i++)
		text[i] = l->sample[i] >= 0x20 && l->sample[i] < 0x7f ? (char)l->sample[i] : '.';
	text[l->sample_len] = '\0';
	h = json_object_new_object();
	if (!h || json_add_string(h, "pass", l->kind == PL_WRITE ? "write" : "compare") < 0 ||
	    json_add_int64(h, "offset", (int64_t)l->a) < 0 ||
	    json_add_int64(h, "bytes", (int64_t)l->bytes) < 0 ||
	    json_add_int64(h, "first", (int64_t)l->first) < 0 ||
	    json_add_int64(h, "markers", (int64_t)l->markers) < 0 ||
	    (l->kind == PL_COMPARE && json_add_int64(h, "blocks", (int64_t)l->blocks) < 0) ||
	    json_add_string(h, "sample_hex", hex) < 0 || json_add_string(h, "sample", text) < 0 ||
	    json_object_array_add(v->hits, h) < 0) {
		json_object_put(h);
		return -ENOMEM;
	}
	return 0;
}

static int add_text(struct json_object *arr, const char *s)
{
	struct json_object *o = json_object_new_string(s);

	if (!o || json_object_array_add(arr, o) < 0) {
		json_object_put(o);
		return -ENOMEM;
	}
	return 0;
}

/* ---- the run ---- */

struct probe_run {
	struct daemon_ctx *d;
	const char *name;
	const struct daemon_probe_opts *o;
	probe_progress_fn progress;
	void *userdata;
	struct slate_error *err;
	struct exec_dialog *g;
	int64_t deadline;
	struct device dev[PROBE_DEVICES];
	size_t n_dev;
	char line[PROBE_LINE_MAX + 2];
};

static void say(struct probe_run *p, const char *step, const char *fmt, ...) _printf_(3, 4);
static void say(struct probe_run *p, const char *step, const char *fmt, ...)
{
	char detail[256];
	va_list ap;

	if (!p->progress)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	p->progress(step, detail, p->userdata);
}

static int next_line(struct probe_run *p, struct probe_line *l)
{
	int r = exec_dialog_line(p->g, p->deadline, p->line, sizeof(p->line), p->err);

	if (r < 0)
		return r;
	if (probe_parse_guest_line(p->line, strlen(p->line), l) < 0)
		return slate_error_set(p->err, -EPROTO, "slate-guest --probe: unexpected line");
	return 0;
}

static int open_devices(struct probe_run *p)
{
	struct daemon_ctx *d = p->d;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_(image_info_freep) struct image_info *img = NULL;
	_cleanup_free_ char *dir = NULL, *disk = NULL, *home = NULL, *base = NULL;
	bool qcow2 = storage_get_kind(d->storage) == STORAGE_QCOW2;
	enum vm_state state;
	int r;

	r = workspace_load(d->workspaces, p->name, &w);
	if (r < 0)
		return slate_error_set(p->err, r, "no workspace %s", p->name);
	r = vm_workspace_state_uri(d->libvirt_uri, p->name, &state);
	if (r < 0 || state != VM_STATE_RUNNING)
		return slate_error_set(p->err, -ENOTCONN, "%s is not running ('slate start %s')",
		                       p->name, p->name);
	dir = workspace_dir_path(d->workspaces, p->name);
	disk = dir ? fs_path_join(dir, "disk.img") : NULL;
	home = dir ? fs_path_join(dir, "home.img") : NULL;
	if (!disk || !home)
		return slate_error_errno(p->err, -ENOMEM, "probe");
	/* The base counts only when disk.img was cloned from the version installed now. */
	if (image_store_get(d->storage, w->image_id, &img) >= 0 &&
	    img->version == w->base_version) {
		_cleanup_free_ char *idir = fs_path_join(storage_images_path(d->storage), img->id);
		base = idir ? fs_path_join(idir, "disk.img") : NULL;
	}
	p->dev[0] = (struct device){.name = "vda", .file = "disk.img"};
	p->dev[1] = (struct device){.name = "vdb", .file = "home.img"};
	p->n_dev = 2;
	for (size_t i = 0; i < p->n_dev; i++) {
		struct device *v = &p->dev[i];
		v->fs = json_object_new_array();
		v->hits = json_object_new_array();
		v->errors = json_object_new_array();
		if (!v->fs || !v->hits || !v->errors)
			return slate_error_errno(p->err, -ENOMEM, "probe");
		r = residue_map_open(i == 0 ? disk : home, i == 0 ? base : NULL, i == 0 && qcow2,
		                     &v->map, p->err);
		if (r < 0)
			return r;
		v->size = residue_map_size(v->map);
	}
	return 0;
}

static int send_scan(struct probe_run *p)
{
	_cleanup_buf_ struct buf *b = buf_new(4096);
	char hex[2 * PROBE_MARKER_MAX + 1];
	int r;

	if (!b)
		return slate_error_errno(p->err, -ENOMEM, "probe");
	r = buf_putf(b, "SLATE-PROBE 1\n");
	for (size_t i = 0; r >= 0 && i < p->n_dev; i++)
		r = buf_putf(b, "device %s %" PRIu64 "\n", p->dev[i].name, p->dev[i].size);
	if (r >= 0 && p->o->marker_len > 0) {
		put_hex(hex, p->o->marker, p->o->marker_len);
		r = buf_putf(b, "marker %s\n", hex);
	}
	if (r >= 0)
		r = buf_putf(b, "scan\n");
	if (r < 0)
		return slate_error_errno(p->err, r, "probe");
	if (exec_dialog_send(p->g, buf_ptr(b), buf_len(b)) < 0)
		return slate_error_set(p->err, -EIO, "cannot send to slate-guest --probe");
	return 0;
}

static int device_error(struct probe_run *p, const struct probe_line *l)
{
	struct device *v = l->dev[0] ? find_device(p->dev, p->n_dev, l->dev) : NULL;

	log_ws(LOG_WARNING, p->name, "probe of %s: %s%s%s", p->name, v ? v->name : "",
	       v ? ": " : "", l->text);
	if (!v)
		return slate_error_set(p->err, -EIO, "slate-guest --probe: %s", l->text);
	return add_text(v->errors, l->text);
}

/* Round one: the devices the guest found, their file systems and free space. */
static int read_scan(struct probe_run *p)
{
	struct probe_line l;
	int r;

	r = next_line(p, &l);
	if (r < 0)
		return r;
	if (l.kind != PL_HEADER)
		return slate_error_set(p->err, -EPROTO,
		                       "slate-guest --probe: no header (an older slate-guest?)");
	for (;;) {
		struct device *v;

		r = next_line(p, &l);
		if (r < 0)
			return r;
		if (l.kind == PL_READY) {
			for (size_t i = 0; i < p->n_dev; i++)
				if (index_free(&p->dev[i]) < 0)
					return slate_error_errno(p->err, -ENOMEM, "probe");
			return 0;
		}
		if (l.kind == PL_ERROR) {
			r = device_error(p, &l);
			if (r < 0)
				return r;
			continue;
		}
		v = find_device(p->dev, p->n_dev, l.dev);
		if (!v || (l.kind != PL_DEVICE && !v->seen))
			return slate_error_set(p->err, -EPROTO,
			                       "slate-guest --probe: unexpected line");
		if (l.kind == PL_DEVICE) {
			if (v->seen || l.a != v->size)
				return slate_error_set(p->err, -EPROTO,
				                       "slate-guest --probe: bad device");
			v->seen = true;
		} else if (l.kind == PL_FS) {
			struct json_object *f = json_object_new_object();
			if (!f || json_add_int64(f, "start", (int64_t)l.a) < 0 ||
			    json_add_int64(f, "length", (int64_t)l.b) < 0 ||
			    json_add_string(f, "filesystem", l.text) < 0 ||
			    json_object_array_add(v->fs, f) < 0) {
				json_object_put(f);
				return slate_error_errno(p->err, -ENOMEM, "probe");
			}
		} else if (l.kind == PL_FREE) {
			r = add_free(v, l.a, l.b);
			if (r < 0)
				return slate_error_set(p->err, r,
				                       "slate-guest --probe: bad free extent");
		} else {
			return slate_error_set(p->err, -EPROTO,
			                       "slate-guest --probe: unexpected line");
		}
	}
}

static int send_regions(struct probe_run *p)
{
	_cleanup_buf_ struct buf *b = buf_new(8u * 1024 * 1024);
	unsigned want = p->o->regions ? p->o->regions : PROBE_REGIONS_DEFAULT;
	int r;

	if (!b)
		return slate_error_errno(p->err, -ENOMEM, "probe");
	for (size_t i = 0; i < p->n_dev; i++) {
		struct device *v = &p->dev[i];
		if (!v->seen)
			continue;
		r = plan_device(v, want, b, p->err);
		if (r < 0)
			return r;
	}
	if (buf_putf(b, "end\n") < 0)
		return slate_error_errno(p->err, -ENOMEM, "probe");
	if (exec_dialog_send(p->g, buf_ptr(b), buf_len(b)) < 0)
		return slate_error_set(p->err, -EIO, "cannot send to slate-guest --probe");
	return 0;
}

/* Round two: a line per region, one per device, then the end. */
static int read_results(struct probe_run *p)
{
	struct probe_line l;
	int r;

	for (;;) {
		struct device *v;

		r = next_line(p, &l);
		if (r < 0)
			return r;
		if (l.kind == PL_END)
			return 0;
		if (l.kind == PL_ERROR) {
			r = device_error(p, &l);
			if (r < 0)
				return r;
			continue;
		}
		v = find_device(p->dev, p->n_dev, l.dev);
		if (!v || !v->seen)
			return slate_error_set(p->err, -EPROTO,
			                       "slate-guest --probe: unexpected line");
		switch (l.kind) {
		case PL_WRITE:
		case PL_COMPARE:
			if (!l.clean) {
				r = add_hit(v, &l);
				if (r < 0)
					return slate_error_errno(p->err, r, "probe");
			}
			break;
		case PL_REFUSED:
			v->refused++;
			if (v->refused <= 8)
				(void)add_text(v->errors, l.text);
			break;
		case PL_DONE:
			v->done = true;
			v->written = l.a;
			v->compared = l.b;
			v->guest_ms = l.ms;
			break;
		default:
			return slate_error_set(p->err, -EPROTO,
			                       "slate-guest --probe: unexpected line");
		}
	}
}

static struct json_object *device_json(struct device *v)
{
	struct json_object *o = json_object_new_object(), *cl = json_object_new_object();

	if (!o || !cl || json_add_string(o, "device", v->name) < 0 ||
	    json_add_string(o, "file", v->file) < 0 ||
	    json_add_int64(o, "size", (int64_t)v->size) < 0 ||
	    json_add_bool(o, "probed", v->seen && v->done) < 0 ||
	    json_add(o, "filesystems", json_object_get(v->fs)) < 0 ||
	    json_add_int64(o, "free_regions", (int64_t)v->candidates) < 0 ||
	    json_add_int64(cl, "hole", (int64_t)v->n_class[RESIDUE_HOLE]) < 0 ||
	    json_add_int64(cl, "base", (int64_t)v->n_class[RESIDUE_BASE]) < 0 ||
	    json_add_int64(cl, "unknown", (int64_t)v->n_class[RESIDUE_UNKNOWN]) < 0 ||
	    json_add_int64(cl, "written", (int64_t)v->n_class[RESIDUE_WRITTEN]) < 0 ||
	    json_add(o, "classes", json_object_get(cl)) < 0 ||
	    json_add_int64(o, "written", (int64_t)v->written) < 0 ||
	    json_add_int64(o, "compared", (int64_t)v->compared) < 0 ||
	    json_add_int64(o, "refused", (int64_t)v->refused) < 0 ||
	    json_add_int64(o, "foreign_bytes", (int64_t)v->foreign_bytes) < 0 ||
	    json_add_int64(o, "regions_with_foreign_bytes", (int64_t)v->n_hits) < 0 ||
	    json_add_int64(o, "marker_hits", (int64_t)v->markers) < 0 ||
	    json_add_int64(o, "guest_ms", (int64_t)v->guest_ms) < 0 ||
	    json_add(o, "hits", json_object_get(v->hits)) < 0 ||
	    json_add(o, "errors", json_object_get(v->errors)) < 0) {
		json_object_put(cl);
		json_object_put(o);
		return NULL;
	}
	json_object_put(cl);
	return o;
}

static int result_json(struct probe_run *p, double secs, struct json_object **ret)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *devs = json_object_new_array();
	uint64_t foreign = 0, written = 0, compared = 0, markers = 0;
	bool complete = true;

	if (!o || !devs || json_add(o, "devices", devs) < 0) {
		json_object_put(devs);
		return -ENOMEM;
	}
	for (size_t i = 0; i < p->n_dev; i++) {
		struct device *v = &p->dev[i];
		struct json_object *dj = device_json(v);
		if (!dj || json_object_array_add(devs, dj) < 0) {
			json_object_put(dj);
			return -ENOMEM;
		}
		foreign += v->foreign_bytes;
		written += v->written;
		compared += v->compared;
		markers += v->markers;
		complete = complete && v->seen && v->done &&
		           json_object_array_length(v->errors) == 0 && v->refused == 0;
	}
	if (json_add_string(o, "name", p->name) < 0 ||
	    json_add_string(o, "storage", storage_kind_name(storage_get_kind(p->d->storage))) < 0 ||
	    json_add_int64(o, "regions_per_disk",
	                   p->o->regions ? p->o->regions : PROBE_REGIONS_DEFAULT) < 0 ||
	    json_add_int64(o, "written", (int64_t)written) < 0 ||
	    json_add_int64(o, "compared", (int64_t)compared) < 0 ||
	    json_add_int64(o, "foreign_bytes", (int64_t)foreign) < 0 ||
	    json_add_int64(o, "marker_hits", (int64_t)markers) < 0 ||
	    json_add_bool(o, "clean", foreign == 0) < 0 ||
	    json_add_bool(o, "complete", complete) < 0 ||
	    json_add(o, "seconds", json_object_new_double(secs)) < 0)
		return -ENOMEM;
	*ret = TAKE_PTR(o);
	return 0;
}

int daemon_probe(struct daemon_ctx *d, const char *name, const struct daemon_probe_opts *o,
                 probe_progress_fn progress, void *userdata, struct json_object **ret,
                 struct slate_error *err)
{
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	struct probe_run p = {.d = d,
	                      .name = name,
	                      .o = o,
	                      .progress = progress,
	                      .userdata = userdata,
	                      .err = err};
	double t0 = time_mono_s();
	int r;

	if (!req)
		return slate_error_errno(err, -ENOMEM, "probe");
	if (!d->workspaces || !d->storage)
		return slate_error_set(err, -ENODEV, "the workspace store is not available");
	if ((o->regions > PROBE_REGIONS_MAX) || o->marker_len > PROBE_MARKER_MAX)
		return slate_error_set(err, -EINVAL,
		                       "regions must be 1 to %u, a marker at most %u bytes",
		                       PROBE_REGIONS_MAX, PROBE_MARKER_MAX);
	p.deadline = time_mono_ms() + 1000LL * (o->timeout_s ? o->timeout_s : 300);
	r = open_devices(&p);
	if (r < 0)
		goto out;
	req->args[req->n_args++] = (struct ex_str){"slate-guest", 11};
	req->args[req->n_args++] = (struct ex_str){"--probe", 7};
	req->user = (struct ex_str){"root", 4};
	r = exec_dialog_open(d, name, req, &p.g, err);
	if (r < 0)
		goto out;
	say(&p, "scanning", "freezing the guest's file systems, reading their free space");
	r = send_scan(&p);
	if (r >= 0)
		r = read_scan(&p);
	if (r < 0)
		goto out;
	say(&p, "probing", "%" PRIu64 " + %" PRIu64 " free 64 KiB regions on vda + vdb",
	    p.dev[0].candidates, p.dev[1].candidates);
	r = send_regions(&p);
	if (r >= 0)
		r = read_results(&p);
	if (r < 0)
		goto out;
	r = result_json(&p, time_mono_s() - t0, ret);
	if (r < 0)
		r = slate_error_errno(err, r, "probe");
out:
	exec_dialog_free(p.g);
	for (size_t i = 0; i < p.n_dev; i++)
		device_clear(&p.dev[i]);
	return r;
}

/* ---- slate doctor --residue: a previous tenant, then the probe ---- */

/* What the previous tenant writes: a line an .env file could hold, found by the probe's marker
 * count wherever it shows up again. */
#define RESIDUE_MARKER "SLATE-RESIDUE-MARKER"
#define RESIDUE_LINE RESIDUE_MARKER " .env AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY"

static void residue_say(struct probe_run *p, const char *step, const char *detail)
{
	if (p->progress)
		p->progress(step, detail, p->userdata);
}

/* The previous tenant: fills its system disk and its home with the marker, then goes. */
static int residue_tenant(struct daemon_ctx *d, const char *name, uint64_t fill_mib,
                          struct slate_error *err)
{
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	char script[1024], out[2048];
	int status = -1, r;

	if (!req)
		return slate_error_errno(err, -ENOMEM, "residue check");
	/* The home is the guest user's (uid 1000), whatever the image calls it. */
	(void)snprintf(script, sizeof(script),
	               "set -e; h=$(awk -F: '$3==1000{print $6; exit}' /etc/passwd); "
	               "for f in /var/tmp/residue.env \"${h:-/root}/residue.env\"; do "
	               "yes '%s' | head -c %" PRIu64 " >\"$f\"; done; sync; "
	               "grep -c '%s' /var/tmp/residue.env",
	               RESIDUE_LINE, fill_mib << 20, RESIDUE_MARKER);
	req->args[req->n_args++] = (struct ex_str){"sh", 2};
	req->args[req->n_args++] = (struct ex_str){"-c", 2};
	req->args[req->n_args++] = (struct ex_str){script, (uint32_t)strlen(script)};
	req->user = (struct ex_str){"root", 4};
	r = exec_collect(d, name, req, NULL, 600 * 1000, out, sizeof(out), &status, err);
	if (r < 0)
		return r;
	if (status != 0)
		return slate_error_set(err, -EIO,
		                       "filling the previous tenant's disks failed (%d): %.512s",
		                       status, out);
	return 0;
}

static int residue_workspace(struct daemon_ctx *d, const struct daemon_residue_opts *o,
                             const char *name, struct slate_error *err)
{
	struct daemon_create_spec spec = {.args = {.name = name,
	                                           .owner = o->owner,
	                                           .image_id = o->image_id,
	                                           .memory_mib = 512,
	                                           .ephemeral = true}};
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	int r;

	r = daemon_create(d, &spec, &w, NULL, err);
	if (r < 0)
		return r;
	return daemon_start(d, name, NULL, NULL, NULL, NULL, NULL, err);
}

int daemon_residue_check(struct daemon_ctx *d, const struct daemon_residue_opts *o,
                         probe_progress_fn progress, void *userdata, struct json_object **ret,
                         struct slate_error *err)
{
	struct probe_run say_to = {.progress = progress, .userdata = userdata};
	struct daemon_probe_opts po = {.regions = o->regions,
	                               .marker = (const uint8_t *)RESIDUE_MARKER,
	                               .marker_len = strlen(RESIDUE_MARKER)};
	_cleanup_json_ struct json_object *res = NULL;
	char prev[WORKSPACE_NAME_MAX + 1], next[WORKSPACE_NAME_MAX + 1], detail[256];
	uint64_t fill = o->fill_mib ? o->fill_mib : 256;
	double t0 = time_mono_s();
	uint8_t rnd[4];
	bool clean = false;
	int r;

	randombytes_buf(rnd, sizeof(rnd));
	(void)snprintf(prev, sizeof(prev), "residue-prev-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
	               rnd[3]);
	(void)snprintf(next, sizeof(next), "residue-next-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
	               rnd[3]);
	(void)snprintf(detail, sizeof(detail),
	               "%s from image %s, filling %" PRIu64
	               " MiB of its system disk and of its home with a marker",
	               prev, o->image_id, fill);
	residue_say(&say_to, "previous tenant", detail);
	r = residue_workspace(d, o, prev, err);
	if (r >= 0)
		r = residue_tenant(d, prev, fill, err);
	/* Whatever happened, the tenant goes: that is the point. */
	if (daemon_destroy_and_delete(d, prev, r < 0 ? NULL : err) < 0 && r >= 0)
		r = -EIO;
	if (r < 0)
		return r;
	(void)snprintf(detail, sizeof(detail), "%s deleted; %s made on the same storage", prev,
	               next);
	residue_say(&say_to, "new tenant", detail);
	r = residue_workspace(d, o, next, err);
	if (r >= 0) {
		residue_say(&say_to, "probing", next);
		r = daemon_probe(d, next, &po, progress, userdata, &res, err);
	}
	(void)daemon_destroy_and_delete(d, next, NULL);
	if (r < 0)
		return r;
	(void)json_get_bool(res, "clean", &clean);
	if (json_add_string(res, "previous_tenant", prev) < 0 ||
	    json_add_int64(res, "fill_mib", (int64_t)fill) < 0 ||
	    json_add_string(res, "marker", RESIDUE_MARKER) < 0 ||
	    json_add_string(res, "image", o->image_id) < 0 ||
	    json_add_bool(res, "pass", clean) < 0 ||
	    json_add(res, "total_seconds", json_object_new_double(time_mono_s() - t0)) < 0)
		return slate_error_errno(err, -ENOMEM, "residue check");
	*ret = TAKE_PTR(res);
	return 0;
}

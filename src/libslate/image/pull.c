/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "image/expand.h"
#include "image/fetch.h"
#include "image/postinstall.h"
#include "image/pull.h"
#include "image/qcow2-header.h"
#include "image/verify.h"
#include "storage/spawn.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

#define SOURCE_MAX 8192
#define IMAGE_SOURCE_MAX (16u << 20) /* commands may be 64 KiB each, 256 of them */
#define LOCK_WAIT_MS 30000
#define PROGRESS_EVERY (4u << 20)
#define DIGEST_MAX (VERIFY_DIGEST_STRLEN + 1)

static const char *const compression_names[] = {"none", "gzip", "zstd", "xz"};

/* ---- catalog source and update ---------------------------------------------------------- */

int catalog_source_get(int state_dirfd, char **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_close_ int dfd = -1;
	char *s;
	int r;

	dfd = openat(state_dirfd, CATALOG_STATE_SUBDIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	r = fs_read_file_at(dfd, PULL_SOURCE_FILE, SOURCE_MAX, &b);
	if (r < 0)
		return r;
	s = buf_dup_string(b);
	if (!s)
		return -ENOMEM;
	s[strcspn(s, "\n")] = '\0';
	if (!*s) {
		free(s);
		return -ENOENT;
	}
	*ret = s;
	return 0;
}

static int source_set(int state_dirfd, const char *url)
{
	_cleanup_close_ int dfd = -1;
	_cleanup_free_ char *text = NULL;

	dfd = openat(state_dirfd, CATALOG_STATE_SUBDIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (asprintf(&text, "%s\n", url) < 0)
		return -ENOMEM;
	return fs_write_atomic_at(dfd, PULL_SOURCE_FILE, text, strlen(text), 0644);
}

/* The catalog state lock does not wait; updates are short, so we do, a while. */
static int state_lock_wait(int state_dirfd, int *ret_fd)
{
	for (int waited = 0;; waited += 50) {
		int r = catalog_state_lock(state_dirfd, ret_fd);
		if (r != -EWOULDBLOCK || waited >= LOCK_WAIT_MS)
			return r;
		(void)nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
	}
}

static int load_trust(const struct pull_config *cfg, struct catalog_trust **ret,
                      struct slate_error *err)
{
	_cleanup_trust_ struct catalog_trust *t = NULL;
	int r;

	r = catalog_trust_new(&t);
	if (r < 0)
		return slate_error_set(err, r, "out of memory");
	if (cfg->trusted_keys) {
		r = catalog_trust_add_path(t, AT_FDCWD, cfg->trusted_keys, err);
		if (r < 0 && r != -ENOENT)
			return r;
	}
	r = catalog_trust_add_state_keys(t, cfg->state_dirfd, err);
	if (r < 0)
		return r;
	if (catalog_trust_count(t) == 0)
		return slate_error_set(err, SLATE_ERR_KEY_NOT_TRUSTED,
		                       "no trusted keys: put the publisher's public key in %s",
		                       cfg->trusted_keys ? cfg->trusted_keys
		                                         : CATALOG_TRUSTED_KEYS_DIR);
	*ret = TAKE_PTR(t);
	return 0;
}

int catalog_update(const struct pull_config *cfg, const char *from, struct catalog **ret,
                   struct slate_error *err)
{
	_cleanup_trust_ struct catalog_trust *trust = NULL;
	_cleanup_catalog_ struct catalog *c = NULL;
	_cleanup_buf_ struct buf *doc = NULL, *sig = NULL;
	_cleanup_free_ char *stored = NULL, *url = NULL, *sig_url = NULL;
	_cleanup_close_ int lock = -1;
	struct catalog_state last;
	bool have_last;
	int r;

	if (!cfg || !cfg->channel)
		return slate_error_set(err, -EINVAL, "no channel configured");
	if (!from) {
		r = catalog_source_get(cfg->state_dirfd, &stored);
		if (r < 0 && r != -ENOENT)
			return slate_error_errno(err, r, "reading the catalog source");
		from = stored ? stored : cfg->catalog_url;
	}
	if (!from || !*from)
		return slate_error_set(err, -EINVAL,
		                       "no catalog source: give --from URL|FILE or set "
		                       "catalog-url in slate.conf");
	r = fetch_to_url(from, &url);
	if (r < 0)
		return slate_error_errno(err, r, "%s", from);
	if (asprintf(&sig_url, "%s.sig", url) < 0)
		return slate_error_set(err, -ENOMEM, "out of memory");

	r = fetch_document(url, CATALOG_MAX_SIZE, &doc, err);
	if (r < 0)
		return r;
	r = fetch_document(sig_url, SIGN_SIG_FILE_MAX, &sig, err);
	if (r == -ENOENT)
		sig = NULL; /* catalog_verify() says "no signature" */
	else if (r < 0)
		return r;

	r = load_trust(cfg, &trust, err);
	if (r < 0)
		return r;
	r = state_lock_wait(cfg->state_dirfd, &lock);
	if (r < 0)
		return slate_error_errno(err, r, "locking the catalog state");
	r = catalog_state_load(cfg->state_dirfd, &last, err);
	if (r < 0 && r != -ENOENT)
		return r;
	have_last = r == 0;
	r = catalog_verify(trust, cfg->channel, buf_ptr(doc), buf_len(doc),
	                   sig ? buf_ptr(sig) : NULL, sig ? buf_len(sig) : 0,
	                   have_last ? &last : NULL, (int64_t)time(NULL), &c, err);
	if (r < 0)
		return r;
	r = catalog_state_accept(cfg->state_dirfd, c, (int64_t)time(NULL), err);
	if (r < 0)
		return r;
	r = source_set(cfg->state_dirfd, url);
	if (r < 0)
		log_warning("catalog accepted, but its source was not recorded: %s",
		            slate_strerror(r));
	log_info("accepted catalog %s version %" PRId64 " from %s (key %s)", c->channel, c->version,
	         url, c->key_id);
	if (ret)
		*ret = TAKE_PTR(c);
	return 0;
}

/* ---- one artifact, with tries ----------------------------------------------------------- */

struct download;
struct sink_ops {
	int (*start)(struct download *d); /* from scratch: truncate, fresh decoder */
	int (*write)(struct download *d, const void *p, size_t n);
	int (*finish)(struct download *d); /* after the artifact's hash matched */
};

struct download {
	const struct pull_config *cfg;
	const char *id;
	const char *what;            /* "disk", "kernel", "initrd" */
	struct catalog_artifact art; /* borrowed from cat, which the tries may replace */
	struct catalog *cat;         /* owned: the catalog in use */
	char *base_url;              /* for relative artifact URLs */
	struct catalog_artifact_check *check;
	uint64_t have;
	uint64_t received; /* over all tries */
	uint64_t reported;
	unsigned attempt;
	bool resumed;
	const struct sink_ops *ops;
	int fd;           /* kernel/initrd: the staged file; disk: the expansion target */
	struct expand *x; /* disk */
	enum catalog_compression compression;
	uint64_t uncompressed;
	uint8_t raw_digest[32]; /* disk: sha256-1m of the expanded disk */
	pull_progress_fn progress;
	void *ud;
	struct slate_error *err;
	/* The expansion failed: the rest is only hashed, so that a wrong artifact is reported
	 * as wrong (its SHA-256) rather than as a bad stream. */
	struct slate_error sink_err;
};

static void report(struct download *d, bool force)
{
	struct pull_progress p = {.phase = "download",
	                          .artifact = d->what,
	                          .done = d->have,
	                          .total = d->art.size,
	                          .attempt = d->attempt,
	                          .resumed = d->resumed};

	if (!d->progress || (!force && d->have - d->reported < PROGRESS_EVERY))
		return;
	d->reported = d->have;
	d->progress(&p, d->ud);
}

static int dl_write(const void *p, size_t n, void *ud)
{
	struct download *d = ud;
	int r;

	r = catalog_artifact_check_update(d->check, p, n, d->err);
	if (r < 0)
		return r;
	if (d->sink_err.code == 0) {
		r = d->ops->write(d, p, n);
		if (r == SLATE_ERR_INVALID_FORMAT || r == SLATE_ERR_SIZE_MISMATCH) {
			d->sink_err = d->err ? *d->err : (struct slate_error){.code = r};
			d->sink_err.code = r;
		} else if (r < 0)
			return r;
	}
	d->have += n;
	d->received += n;
	report(d, false);
	return 0;
}

static int file_start(struct download *d)
{
	if (ftruncate(d->fd, 0) < 0)
		return -errno;
	return 0;
}

static int file_write(struct download *d, const void *p, size_t n)
{
	return pwrite(d->fd, p, n, (off_t)d->have) == (ssize_t)n ? 0 : errno ? -errno : -EIO;
}

/* Nothing to do: image_store_install_dir() fsyncs every file before the rename. */
static int file_finish(struct download *d)
{
	return 0;
}

static const struct sink_ops file_ops = {file_start, file_write, file_finish};

static int disk_start(struct download *d)
{
	expand_free(d->x);
	d->x = NULL;
	if (ftruncate(d->fd, 0) < 0)
		return -errno;
	return expand_new(d->compression, d->fd, d->uncompressed, &d->x);
}

static int disk_write(struct download *d, const void *p, size_t n)
{
	int r = expand_write(d->x, p, n);
	if (r == SLATE_ERR_SIZE_MISMATCH)
		return slate_error_set(
		        d->err, r, "the disk expands to more than the declared %" PRIu64 " bytes",
		        d->uncompressed);
	if (r == SLATE_ERR_INVALID_FORMAT)
		return slate_error_set(d->err, r, "the disk is not a valid %s stream",
		                       compression_names[d->compression]);
	return r;
}

static int disk_finish(struct download *d)
{
	int r = expand_finish(d->x, d->raw_digest);

	if (r == SLATE_ERR_SIZE_MISMATCH)
		return slate_error_set(d->err, r,
		                       "the disk expands to %" PRIu64
		                       " bytes, not the declared %" PRIu64,
		                       expand_output_size(d->x), d->uncompressed);
	if (r == SLATE_ERR_INVALID_FORMAT)
		return slate_error_set(d->err, r, "the disk's %s stream is truncated or corrupt",
		                       compression_names[d->compression]);
	if (r >= 0 && d->compression == CATALOG_COMPRESSION_ZSTD) {
		struct expand_stats st;
		expand_get_stats(d->x, &st);
		log_info("pull %s: disk expanded: %" PRIu64
		         " zstd frames decoded in place, %" PRIu64
		         " frames of zeros not decoded, %" PRIu64
		         " bytes through the streaming decoder",
		         d->id, st.whole_frames, st.zero_frames, st.streamed);
	}
	/* Not fsynced here: image_store_install_dir() does it, once, before the rename (and the
	 * expansion has been flushing as it went). */
	return r;
}

static const struct sink_ops disk_ops = {disk_start, disk_write, disk_finish};

static bool same_artifact(const struct catalog_artifact *a, const struct catalog_artifact *b)
{
	return a->size == b->size && memcmp(a->sha256, b->sha256, 32) == 0 && streq(a->url, b->url);
}

/* Points d->art at the artifact d->what of image d->id in d->cat. */
static int pick_artifact(struct download *d, struct catalog_artifact *ret)
{
	const struct catalog_image *img = catalog_find_image(d->cat, d->id);

	if (!img)
		return slate_error_set(d->err, -ENOENT, "the catalog no longer lists image '%s'",
		                       d->id);
	if (streq(d->what, "disk")) {
		*ret = img->disk;
		d->compression = img->compression;
		d->uncompressed = img->uncompressed_size;
	} else if (img->boot != CATALOG_BOOT_KERNEL) {
		return slate_error_set(d->err, -ENOENT,
		                       "image '%s' no longer boots with its own kernel", d->id);
	} else
		*ret = streq(d->what, "kernel") ? img->kernel : img->initrd;
	return 0;
}

/* Fetches the catalog again between tries. Returns 1 when the artifact changed. */
static int refresh_catalog(struct download *d)
{
	_cleanup_catalog_ struct catalog *c = NULL;
	struct slate_error e = {};
	struct catalog_artifact a;
	struct catalog *old;
	int r;

	if (d->progress) {
		struct pull_progress p = {.phase = "catalog", .attempt = d->attempt};
		d->progress(&p, d->ud);
	}
	r = catalog_update(d->cfg, NULL, &c, &e);
	if (r < 0) {
		const char *why = e.code ? slate_error_text(&e) : slate_strerror(r);

		/* Unreachable is no reason to stop; a catalog that fails verification is. */
		if (fetch_retryable(r) || r == -ENOENT) {
			log_info("pull %s: catalog not refreshed (%s); going on with the accepted "
			         "one",
			         d->id, why);
			return 0;
		}
		return slate_error_set(d->err, r, "fetching the catalog again: %s", why);
	}
	old = d->cat;
	d->cat = TAKE_PTR(c);
	r = pick_artifact(d, &a);
	if (r < 0) {
		catalog_free(old);
		return r;
	}
	r = !same_artifact(&a, &d->art);
	d->art = a;
	catalog_free(old);
	return r;
}

static int restart(struct download *d)
{
	int r;

	catalog_artifact_check_free(d->check);
	d->check = NULL;
	r = catalog_artifact_check_new(&d->art, &d->check);
	if (r < 0)
		return slate_error_set(d->err, r, "%s", slate_strerror(r));
	d->have = d->reported = 0;
	d->resumed = false;
	d->sink_err = (struct slate_error){0};
	r = d->ops->start(d);
	if (r < 0)
		return slate_error_errno(d->err, r, "%s", d->what);
	return 0;
}

static int download(struct download *d)
{
	int r = restart(d);

	if (r < 0)
		return r;
	for (d->attempt = 1;; d->attempt++) {
		_cleanup_free_ char *url = NULL;
		struct fetch_request req;
		bool integrity = false;

		r = fetch_resolve_url(d->base_url, d->art.url, &url);
		if (r < 0)
			return slate_error_set(d->err, r, "%s: bad URL %s", d->what, d->art.url);
		req = (struct fetch_request){.url = url,
		                             .offset = d->have,
		                             .max_size = d->art.size,
		                             .write = dl_write,
		                             .ud = d};
		report(d, true);
		r = fetch_once(&req, d->err);
		if (r == 0 && d->have < d->art.size)
			r = slate_error_set(d->err, -ECONNRESET,
			                    "%s: the transfer ended after %" PRIu64 " of %" PRIu64
			                    " bytes",
			                    url, d->have, d->art.size);
		if (r == 0) {
			r = catalog_artifact_check_final(d->check, d->err);
			if (r == 0 && d->sink_err.code < 0) {
				/* Signed, and still not what it says it is: no try will help. */
				if (d->err)
					*d->err = d->sink_err;
				return d->sink_err.code;
			}
			if (r == 0) {
				report(d, true);
				r = d->ops->finish(d);
				if (r < 0 && r != SLATE_ERR_SIZE_MISMATCH &&
				    r != SLATE_ERR_INVALID_FORMAT)
					return slate_error_errno(d->err, r, "%s", d->what);
				return r;
			}
		}
		integrity = r == SLATE_ERR_SIZE_MISMATCH || r == SLATE_ERR_DIGEST_MISMATCH ||
		            r == SLATE_ERR_INVALID_FORMAT;
		if (!integrity && !fetch_retryable(r))
			return r;
		if (d->attempt >= PULL_TRIES)
			return r;
		{
			int k = refresh_catalog(d);

			/* Only when another try follows: otherwise the error returned (which
			 * refresh_catalog() may have replaced) says why, and the caller shows it. */
			if (k > 0 || (k == 0 && !integrity))
				log_info("pull %s: %s, try %u of %u failed: %s", d->id, d->what,
				         d->attempt, PULL_TRIES,
				         d->err && d->err->code ? slate_error_text(d->err)
				                                : slate_strerror(r));
			if (k < 0)
				return k;
			if (k > 0 || integrity) {
				/* A changed artifact starts again; the same one that failed its
				 * checks was refused for good. */
				if (k == 0)
					return r;
				log_info("pull %s: the catalog changed %s; starting it again",
				         d->id, d->what);
				k = restart(d);
				if (k < 0)
					return k;
				continue;
			}
		}
		d->resumed = d->have > 0;
	}
}

static void download_done(struct download *d)
{
	catalog_artifact_check_free(d->check);
	expand_free(d->x);
	catalog_free(d->cat);
	free(d->base_url);
}

/* ---- the image directory's catalog.json ------------------------------------------------- */

static struct json_object *artifact_json(const struct catalog_artifact *a)
{
	struct json_object *o = json_object_new_object();

	if (o && (json_add_string(o, "url", a->url) < 0 ||
	          json_add_string(o, "sha256", a->sha256_hex) < 0 ||
	          json_add_int64(o, "size", (int64_t)a->size) < 0)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static struct json_object *step_json(const struct catalog_step *st)
{
	struct json_object *s = json_object_new_object();

	if (s &&
	    (json_add_string(s, "uuid", st->uuid) < 0 || json_add_int64(s, "seq", st->seq) < 0 ||
	     json_add_string(s, "description", st->description) < 0 ||
	     json_add_string(s, "command", st->command) < 0)) {
		json_object_put(s);
		return NULL;
	}
	return s;
}

/* catalog.json: where the image came from, and which of its steps are applied (applied, may be
 * NULL: none) or pending (the catalog's others). */
static int source_json(const struct catalog *c, const struct catalog_image *img,
                       const char *disk_sha, bool consent, struct json_object *applied, char **ret)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *disk = artifact_json(&img->disk), *pi = json_object_new_object();
	struct json_object *pending = json_object_new_array();
	int r;

	if (!o || !disk || !pi || !pending) {
		json_object_put(disk);
		json_object_put(pi);
		json_object_put(pending);
		return -ENOMEM;
	}
	if ((r = json_add(o, "disk", disk)) < 0 || (r = json_add(o, "postinstall", pi)) < 0 ||
	    (r = json_add(pi, "pending", pending)) < 0)
		return r;
	if ((r = json_add_string(o, "format", "slate-image-source")) < 0 ||
	    (r = json_add_int64(o, "formatVersion", 1)) < 0 ||
	    (r = json_add_string(o, "channel", c->channel)) < 0 ||
	    (r = json_add_int64(o, "catalogVersion", c->version)) < 0 ||
	    (r = json_add_string(o, "keyId", c->key_id)) < 0 ||
	    (r = json_add_int64(o, "imageVersion", img->version)) < 0 ||
	    (r = json_add_string(o, verify_digest_string_ok(disk_sha) ? "rawDigest" : "rawSha256",
	                         disk_sha)) < 0 ||
	    (r = json_add_string(disk, "compression", compression_names[img->compression])) < 0 ||
	    (r = json_add_string(disk, "format",
	                         img->format == CATALOG_DISK_QCOW2 ? "qcow2" : "raw")) < 0 ||
	    (r = json_add_int64(disk, "uncompressedSize", (int64_t)img->uncompressed_size)) < 0)
		return r;
	if (img->boot == CATALOG_BOOT_KERNEL &&
	    ((r = json_add(o, "kernel", artifact_json(&img->kernel))) < 0 ||
	     (r = json_add(o, "initrd", artifact_json(&img->initrd))) < 0))
		return r;
	if ((r = json_add_bool(pi, "consent", consent)) < 0 ||
	    (r = json_add(pi, "applied",
	                  applied ? json_object_get(applied) : json_object_new_array())) < 0)
		return r;
	for (size_t i = 0; i < img->n_steps; i++) {
		struct json_object *s;

		if (applied && image_step_applied(applied, &img->steps[i]))
			continue;
		s = step_json(&img->steps[i]);
		if (!s || json_object_array_add(pending, s) < 0) {
			json_object_put(s);
			return -ENOMEM;
		}
	}
	return json_to_string_dup(o, true, ret);
}

static int source_load(int image_dirfd, struct json_object **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r = fs_read_file_at(image_dirfd, PULL_IMAGE_SOURCE_FILE, IMAGE_SOURCE_MAX, &b);

	if (r < 0)
		return r;
	return json_parse_object((const char *)buf_ptr(b), buf_len(b), IMAGE_SOURCE_MAX, ret);
}

int image_applied_steps(struct storage *s, const char *id, struct json_object **ret)
{
	_cleanup_json_ struct json_object *src = NULL, *out = json_object_new_array();
	_cleanup_close_ int dfd = -1;
	struct json_object *pi, *applied;

	if (!out || !ret)
		return -ENOMEM;
	if (s && image_store_open_dir(s, id, &dfd) >= 0 && source_load(dfd, &src) >= 0 &&
	    json_get_object(src, "postinstall", &pi) >= 0 &&
	    json_get_array(pi, "applied", &applied) >= 0) {
		for (size_t i = 0; i < json_object_array_length(applied); i++) {
			struct json_object *e = json_object_array_get_idx(applied, i);
			const char *uuid, *command;

			/* Only well-formed entries count: anything else is as good as not applied. */
			if (!json_object_is_type(e, json_type_object) ||
			    json_get_string(e, "uuid", &uuid) < 0 ||
			    json_get_string(e, "command", &command) < 0 || strlen(uuid) != 36)
				continue;
			if (json_object_array_add(out, json_object_get(e)) < 0)
				return -ENOMEM;
		}
	}
	*ret = TAKE_PTR(out);
	return 0;
}

bool image_step_applied(struct json_object *applied, const struct catalog_step *step)
{
	for (size_t i = 0; applied && i < json_object_array_length(applied); i++) {
		struct json_object *e = json_object_array_get_idx(applied, i);
		const char *uuid = NULL, *command = NULL;

		if (json_get_string(e, "uuid", &uuid) >= 0 &&
		    json_get_string(e, "command", &command) >= 0 && streq(uuid, step->uuid) &&
		    streq(command, step->command))
			return true;
	}
	return false;
}

/* Steps of img that need consent (not applied before) and did not get it. Returns how many;
 * the first one's description in *ret_first. */
static size_t unconsented(const struct catalog_image *img, struct json_object *applied,
                          const struct pull_consent *consent, const struct catalog_step **ret_first)
{
	size_t n = 0;

	for (size_t i = 0; i < img->n_steps; i++) {
		const struct catalog_step *st = &img->steps[i];
		bool ok = consent && consent->all;

		if (image_step_applied(applied, st))
			continue;
		for (size_t k = 0; !ok && consent && k < consent->n_uuids; k++)
			ok = consent->uuids[k] && streq(consent->uuids[k], st->uuid);
		if (ok)
			continue;
		if (n++ == 0 && ret_first)
			*ret_first = st;
	}
	return n;
}

struct pi_relay {
	pull_progress_fn progress;
	void *ud;
};

static void pi_progress(const struct postinstall_progress *p, void *ud)
{
	struct pi_relay *rl = ud;
	struct pull_progress pp = {.done = p->step, .total = p->n_steps};

	if (!rl->progress)
		return;
	if (p->output) {
		pp.phase = "postinstall-output";
		pp.artifact = p->s ? p->s->uuid : NULL;
		pp.detail = p->output;
	} else {
		pp.phase = "postinstall";
		pp.artifact = p->s ? p->s->uuid : NULL;
		pp.detail = p->s ? p->s->description : NULL;
	}
	rl->progress(&pp, rl->ud);
}

/*
 * Runs the steps of img that applied does not list on installed image id (taken at version) and
 * records them as applied. *ret_info (replaced) gets the new image.
 */
static int run_pending(const struct pull_config *cfg, const struct catalog *cat,
                       const struct catalog_image *img, const char *raw_sha,
                       struct json_object *applied, int64_t version, pull_progress_fn progress,
                       void *ud, struct image_info **ret_info, size_t *ret_n,
                       struct slate_error *err)
{
	_cleanup_json_ struct json_object *now = json_object_new_array();
	_cleanup_free_ struct catalog_step *run = NULL;
	_cleanup_free_ char *json = NULL;
	struct postinstall_config pcfg = {.storage = cfg->storage,
	                                  .state_dir = cfg->state_dir,
	                                  .libvirt_uri = cfg->libvirt_uri};
	struct postinstall_result pres = {0};
	struct pi_relay relay = {progress, ud};
	size_t n = 0;
	int r;

	if (!now)
		return -ENOMEM;
	run = calloc(img->n_steps ? img->n_steps : 1, sizeof(*run));
	if (!run)
		return -ENOMEM;
	/* What was applied stays recorded (it is in the disk); then the steps run now. */
	for (size_t i = 0; applied && i < json_object_array_length(applied); i++)
		if (json_object_array_add(
		            now, json_object_get(json_object_array_get_idx(applied, i))) < 0)
			return -ENOMEM;
	for (size_t i = 0; i < img->n_steps; i++) {
		struct json_object *s;

		if (image_step_applied(applied, &img->steps[i]))
			continue;
		run[n++] = img->steps[i];
		s = step_json(&img->steps[i]);
		if (!s || json_object_array_add(now, s) < 0) {
			json_object_put(s);
			return -ENOMEM;
		}
	}
	*ret_n = n;
	if (n == 0)
		return 0;
	r = source_json(cat, img, raw_sha, true, now, &json);
	if (r < 0)
		return slate_error_errno(err, r, "recording the image's source");
	r = postinstall_apply(&pcfg, img->id, run, n, json, version, pi_progress, &relay, &pres,
	                      err);
	if (r < 0)
		return r == -ECANCELED ? PULL_ERR_POSTINSTALL : r;
	image_info_free(*ret_info);
	*ret_info = TAKE_PTR(pres.info);
	return 0;
}

/* ---- pull ------------------------------------------------------------------------------- */

void pull_result_done(struct pull_result *r)
{
	if (!r)
		return;
	image_info_free(r->info);
	r->info = NULL;
}

static int stage_file(int dir_fd, const char *name, int *ret_fd)
{
	int fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

/* Installed already from this very catalog image? */
static bool is_current(const struct pull_config *cfg, const struct catalog_image *img)
{
	_cleanup_json_ struct json_object *src = NULL;
	_cleanup_close_ int dfd = -1;
	struct json_object *disk;
	const char *sha = NULL;
	int64_t v = 0;

	if (image_store_open_dir(cfg->storage, img->id, &dfd) < 0 || source_load(dfd, &src) < 0)
		return false;
	if (json_get_int64(src, "imageVersion", &v) < 0 || v != img->version ||
	    json_get_object(src, "disk", &disk) < 0 || json_get_string(disk, "sha256", &sha) < 0)
		return false;
	return streq(sha, img->disk.sha256_hex);
}

/*
 * Converts the staged qcow2 disk (open as qcow2_fd, in stage_fd as disk.qcow2) to stage_fd's
 * disk.img. Its header is checked first (image/qcow2-header.h): an image that names a backing or
 * an external data file, is encrypted or asks for a feature not known, is refused, since qemu-img
 * would read the file it names, and a host file (the master key, a block device, another
 * workspace's home) would become the base image. qemu-img then runs confined
 * (spawn_run_confined()): it sees the two files and the system's program directories, nothing
 * else, whatever the image says. "backing":null stays as a third guard against backing files;
 * "data-file":null would guard against nothing: qemu-img 7.2 accepts it and still opens the data
 * file the header names.
 */
static int convert_qcow2(int stage_fd, int qcow2_fd, struct slate_error *err)
{
	static const char spec[] = "json:{\"driver\":\"qcow2\",\"backing\":null,"
	                           "\"file\":{\"driver\":\"file\",\"filename\":\"/disk.qcow2\"}}";
	const char *argv[] = {"qemu-img", "convert", "-q", "-O", "raw", spec, "/disk.img", NULL};
	_cleanup_free_ char *out = NULL;
	_cleanup_close_ int raw_fd = -1;
	int r;

	r = qcow2_header_check_fd(qcow2_fd, NULL, err);
	if (r < 0)
		return r == SLATE_ERR_INVALID_FORMAT
		               ? r
		               : slate_error_errno(err, r, "reading the qcow2 disk's header");
	r = stage_file(stage_fd, "disk.img", &raw_fd);
	if (r < 0)
		return slate_error_errno(err, r, "creating disk.img");
	{
		const struct spawn_file files[] = {
		        {.fd = qcow2_fd, .path = "/disk.qcow2", .writable = false},
		        {.fd = raw_fd, .path = "/disk.img", .writable = true},
		};

		r = spawn_run_confined(argv, files, ELEMENTSOF(files), &out);
	}
	if (r < 0)
		return slate_error_set(err, r, "qemu-img convert: %s%s%s", slate_strerror(r),
		                       out && *out ? ": " : "", out ? out : "");
	return 0;
}

/* The digest of image id's disk as the catalog made it (before any postinstall step):
 * catalog.json's rawDigest (sha256-1m), or rawSha256 (plain SHA-256: pulled before the block
 * digest). */
static void raw_sha_of(const struct pull_config *cfg, const struct image_info *info,
                       char out[DIGEST_MAX])
{
	_cleanup_json_ struct json_object *src = NULL;
	_cleanup_close_ int dfd = -1;
	const char *v = NULL;

	(void)snprintf(out, DIGEST_MAX, "%s", info->sha256);
	if (image_store_open_dir(cfg->storage, info->id, &dfd) < 0 || source_load(dfd, &src) < 0)
		return;
	if ((json_get_string(src, "rawDigest", &v) >= 0 && verify_digest_string_ok(v)) ||
	    (json_get_string(src, "rawSha256", &v) >= 0 && strlen(v) == 64))
		(void)snprintf(out, DIGEST_MAX, "%s", v);
}

int image_pull(const struct pull_config *cfg, const char *id, const struct pull_consent *consent,
               pull_progress_fn progress, void *ud, struct pull_result *ret,
               struct slate_error *err)
{
	_cleanup_json_ struct json_object *prev = NULL;
	_cleanup_catalog_ struct catalog *cat = NULL;
	const struct catalog_step *first = NULL;
	size_t missing;
	_cleanup_free_ char *stage = NULL, *source = NULL, *json = NULL;
	_cleanup_close_ int stage_fd = -1, qcow2_fd = -1;
	const struct catalog_image *img;
	struct image_info info = {0};
	struct pull_result res = {0};
	char raw_hex[DIGEST_MAX];
	bool qcow2;
	int r;

	if (!cfg || !cfg->storage || !ret || image_id_check(id) < 0)
		return slate_error_set(err, -EINVAL, "invalid image id");
	r = catalog_state_load_current(cfg->state_dirfd, &cat, err);
	if (r == -ENOENT)
		return slate_error_set(err, r, "no catalog accepted yet: run slate catalog update");
	if (r < 0)
		return r;
	if (cat->expires <= (int64_t)time(NULL)) {
		char when[32] = "";
		(void)catalog_time_format(cat->expires, when, sizeof(when));
		return slate_error_set(err, SLATE_ERR_EXPIRED,
		                       "the accepted catalog expired at %s: run slate catalog "
		                       "update",
		                       when);
	}
	img = catalog_find_image(cat, id);
	if (!img)
		return slate_error_set(err, -ENOENT,
		                       "the catalog (%s version %" PRId64 ") has no image '%s'",
		                       cat->channel, cat->version, id);
	/* Consent first: nothing is fetched or run for steps the caller has not accepted. Steps
	 * applied to the installed image before (same uuid, same command) were accepted then. */
	r = image_applied_steps(cfg->storage, id, &prev);
	if (r < 0)
		return slate_error_set(err, r, "out of memory");
	missing = unconsented(img, prev, consent, &first);
	if (missing > 0)
		return slate_error_set(err, PULL_ERR_CONSENT,
		                       "image %s has %zu postinstall step%s not accepted yet "
		                       "(the first: \"%s\", %s): review them (slate catalog show) "
		                       "and accept them (slate image pull %s --yes)",
		                       id, missing, missing == 1 ? "" : "s", first->description,
		                       first->uuid, id);
	if (is_current(cfg, img)) {
		r = image_store_get(cfg->storage, id, &res.info);
		if (r >= 0) {
			/* The disk is the catalog's: only steps not applied to it yet run. */
			raw_sha_of(cfg, res.info, raw_hex);
			r = run_pending(cfg, cat, img, raw_hex, prev, res.info->version, progress,
			                ud, &res.info, &res.n_applied, err);
			if (r < 0) {
				pull_result_done(&res);
				return r;
			}
			res.up_to_date = res.n_applied == 0;
			*ret = res;
			return 0;
		}
	}
	(void)catalog_source_get(cfg->state_dirfd, &source);

	r = image_store_stage_dir(cfg->storage, id, &stage_fd, &stage);
	if (r < 0)
		return slate_error_errno(err, r, "staging image %s", id);
	qcow2 = img->format == CATALOG_DISK_QCOW2;

	/* kernel, initrd, then the disk; each with its own tries. */
	{
		static const char *const whats[] = {"kernel", "initrd", "disk"};
		static const char *const names[] = {"vmlinuz", "initrd.img", "disk.img"};

		for (size_t i = 0; i < ELEMENTSOF(whats) && r >= 0; i++) {
			struct download d = {.cfg = cfg,
			                     .id = id,
			                     .what = whats[i],
			                     .progress = progress,
			                     .ud = ud,
			                     .err = err,
			                     .fd = -1};
			const char *name = names[i];

			if (i < 2 && img->boot != CATALOG_BOOT_KERNEL)
				continue;
			if (i == 2 && qcow2)
				name = "disk.qcow2";
			d.ops = i == 2 ? &disk_ops : &file_ops;
			d.cat = NULL;
			r = catalog_state_load_current(cfg->state_dirfd, &d.cat, err);
			if (r >= 0 && source && !(d.base_url = strdup(source)))
				r = -ENOMEM;
			if (r >= 0)
				r = pick_artifact(&d, &d.art);
			if (r >= 0 && i == 2 && qcow2)
				d.compression = img->compression;
			if (r >= 0)
				r = stage_file(stage_fd, name, &d.fd);
			if (r >= 0)
				r = download(&d);
			if (r >= 0) {
				res.downloaded += d.received;
				if (i == 2)
					verify_digest_string(d.raw_digest, raw_hex);
				/* A refreshed catalog may have moved on: what we install is what
				 * it now says. */
				if (d.cat->version != cat->version) {
					catalog_free(cat);
					cat = TAKE_PTR(d.cat);
					img = catalog_find_image(cat, id);
					if (!img)
						r = -ENOENT;
				}
			} else if (err && !err->msg[0])
				(void)slate_error_errno(err, r, "%s", whats[i]);
			if (r < 0 && err && err->code == r && !strstr(err->msg, whats[i]))
				(void)slate_error_wrap(err, r, "%s", whats[i]);
			if (r >= 0 && i == 2 && qcow2)
				qcow2_fd = TAKE_FD(d.fd);
			d.fd = safe_close(d.fd);
			download_done(&d);
		}
	}
	if (r >= 0 && qcow2) {
		if (progress) {
			struct pull_progress p = {.phase = "convert", .artifact = "disk"};
			progress(&p, ud);
		}
		r = convert_qcow2(stage_fd, qcow2_fd, err);
		qcow2_fd = safe_close(qcow2_fd);
		if (r >= 0) {
			(void)unlinkat(stage_fd, "disk.qcow2", 0);
			r = verify_file_digest(stage_fd, "disk.img", raw_hex, NULL, NULL);
			if (r < 0)
				(void)slate_error_errno(err, r, "hashing the converted disk");
		}
	}
	if (r >= 0) {
		r = source_json(cat, img, raw_hex, img->n_steps == 0 || consent, NULL, &json);
		if (r >= 0)
			r = fs_write_atomic_at(stage_fd, PULL_IMAGE_SOURCE_FILE, json, strlen(json),
			                       0444);
		if (r < 0)
			(void)slate_error_errno(err, r, "recording the image's source");
	}
	if (r < 0) {
		(void)image_store_abort_dir(cfg->storage, stage);
		return r;
	}
	if (progress) {
		struct pull_progress p = {.phase = "install"};
		progress(&p, ud);
	}
	info.id = (char *)id;
	info.local = false;
	info.sha256 = raw_hex;
	info.cmdline = img->boot == CATALOG_BOOT_KERNEL ? img->cmdline : NULL;
	info.description = img->description;
	r = image_store_install_dir(cfg->storage, stage, &info, true, &res.info);
	if (r < 0)
		return slate_error_errno(err, r, "installing image %s", id);
	res.n_pending = img->n_steps;
	log_info("pulled image %s version %" PRId64 " from catalog %s version %" PRId64
	         " (%zu postinstall steps to run)",
	         id, img->version, cat->channel, cat->version, img->n_steps);
	/* A catalog refreshed between tries may list steps the caller has not seen (those applied
	 * to the image this one replaces were accepted then). */
	missing = unconsented(img, prev, consent, &first);
	if (missing > 0) {
		pull_result_done(&res);
		return slate_error_set(err, PULL_ERR_CONSENT,
		                       "the catalog changed during the pull: image %s is "
		                       "installed, but %zu of its postinstall steps were not "
		                       "accepted (the first: \"%s\"): pull again to review them",
		                       id, missing, first->description);
	}
	/* A fresh disk: every step runs on it. */
	r = run_pending(cfg, cat, img, raw_hex, NULL, res.info->version, progress, ud, &res.info,
	                &res.n_applied, err);
	if (r < 0) {
		pull_result_done(&res);
		if (err && r == PULL_ERR_POSTINSTALL) {
			size_t len = strlen(err->msg);
			(void)snprintf(err->msg + len, sizeof(err->msg) - len,
			               " (the base was downloaded and is installed without its "
			               "postinstall steps)");
		}
		return r;
	}
	res.n_pending = 0;
	*ret = res;
	return 0;
}

/* ---- verify ----------------------------------------------------------------------------- */

struct verify_job {
	const char *id;
	const char *file;
	pull_progress_fn progress;
	void *ud;
	uint64_t reported;
};

static void verify_progress(uint64_t done, uint64_t total, void *ud)
{
	struct verify_job *j = ud;
	struct pull_progress p = {
	        .phase = "verify", .artifact = j->file, .done = done, .total = total};

	if (!j->progress || (done - j->reported < PROGRESS_EVERY && done != total))
		return;
	j->reported = done;
	j->progress(&p, j->ud);
}

/* Checks file against expected: a sha256-1m digest string, or a plain SHA-256's hex. */
static int check_file(int dfd, const char *file, const char *expected, struct verify_job *j,
                      struct image_verify_result *res)
{
	char hex[DIGEST_MAX];
	uint8_t h[32];
	int r;

	j->file = file;
	j->reported = 0;
	if (verify_digest_string_ok(expected))
		r = verify_file_digest(dfd, file, hex, verify_progress, j);
	else {
		r = verify_file_sha256(dfd, file, h, verify_progress, j);
		if (r >= 0)
			verify_hex(h, hex);
	}
	if (r < 0) {
		res->ok = false;
		res->error = r;
		(void)snprintf(res->file, sizeof(res->file), "%s", file);
		return r;
	}
	if (!streq(hex, expected)) {
		res->ok = false;
		(void)snprintf(res->file, sizeof(res->file), "%s", file);
		(void)snprintf(res->expected, sizeof(res->expected), "%s", expected);
		(void)snprintf(res->actual, sizeof(res->actual), "%s", hex);
		return 0;
	}
	if (streq(file, "disk.img"))
		(void)snprintf(res->actual, sizeof(res->actual), "%s", hex);
	return 0;
}

static void verify_one(const struct pull_config *cfg, const struct catalog *cat,
                       const struct image_info *info, pull_progress_fn progress, void *ud,
                       struct image_verify_result *res)
{
	_cleanup_json_ struct json_object *src = NULL;
	_cleanup_close_ int dfd = -1;
	struct verify_job j = {.id = info->id, .progress = progress, .ud = ud};
	const struct catalog_image *ci;
	int r;

	(void)snprintf(res->id, sizeof(res->id), "%s", info->id);
	res->ok = true;
	res->local = info->local;
	res->catalog = info->local ? "local" : cat ? "not-in-catalog" : "no-catalog";
	(void)snprintf(res->expected, sizeof(res->expected), "%s", info->sha256);
	r = image_store_open_dir(cfg->storage, info->id, &dfd);
	if (r < 0) {
		res->ok = false;
		res->error = r;
		return;
	}
	if (check_file(dfd, "disk.img", info->sha256, &j, res) < 0 || !res->ok)
		return;
	if (info->local)
		return;
	r = source_load(dfd, &src);
	if (r < 0) {
		res->ok = false;
		res->error = r;
		(void)snprintf(res->file, sizeof(res->file), "%s", PULL_IMAGE_SOURCE_FILE);
		return;
	}
	(void)json_get_int64(src, "imageVersion", &res->image_version);
	/* The kernel and initrd are installed as downloaded: their catalog hashes apply. */
	for (int k = 0; k < 2; k++) {
		const char *member = k == 0 ? "kernel" : "initrd";
		const char *file = k == 0 ? "vmlinuz" : "initrd.img";
		struct json_object *a;
		const char *sha;

		if (json_get_object(src, member, &a) < 0 || json_get_string(a, "sha256", &sha) < 0)
			continue;
		if (strlen(sha) != 64)
			continue;
		if (check_file(dfd, file, sha, &j, res) < 0 || !res->ok)
			return;
	}
	ci = cat ? catalog_find_image(cat, info->id) : NULL;
	if (ci) {
		struct json_object *disk, *pi, *applied = NULL;
		const char *sha = "";

		(void)json_get_object(src, "disk", &disk);
		(void)json_get_string(disk, "sha256", &sha);
		res->catalog = ci->version == res->image_version && streq(sha, ci->disk.sha256_hex)
		                       ? "current"
		                       : "outdated";
		/* An uncompressed raw disk is its own artifact: the catalog's hash applies too,
		 * until postinstall steps changed it (image.json has its hash since). Only where
		 * image.json has a plain SHA-256 (pulled before the block digest): a sha256-1m
		 * digest was computed from the very bytes whose SHA-256 matched the catalog's. */
		if (json_get_object(src, "postinstall", &pi) >= 0)
			(void)json_get_array(pi, "applied", &applied);
		if (ci->compression == CATALOG_COMPRESSION_NONE && ci->format == CATALOG_DISK_RAW &&
		    streq(res->catalog, "current") && !verify_digest_string_ok(info->sha256) &&
		    !streq(ci->disk.sha256_hex, info->sha256) &&
		    (!applied || json_object_array_length(applied) == 0)) {
			res->ok = false;
			(void)snprintf(res->file, sizeof(res->file), "disk.img");
			(void)snprintf(res->expected, sizeof(res->expected), "%s",
			               ci->disk.sha256_hex);
		}
	}
}

int image_verify(const struct pull_config *cfg, const char *id, pull_progress_fn progress, void *ud,
                 struct image_verify_result **ret, size_t *ret_n)
{
	_cleanup_catalog_ struct catalog *cat = NULL;
	struct image_info **list = NULL;
	struct image_verify_result *res;
	size_t n = 0;
	int r;

	if (!cfg || !cfg->storage || !ret || !ret_n)
		return -EINVAL;
	(void)catalog_state_load_current(cfg->state_dirfd, &cat, NULL);
	if (id) {
		struct image_info *one = NULL;
		r = image_store_get(cfg->storage, id, &one);
		if (r < 0)
			return r;
		list = calloc(1, sizeof(*list));
		if (!list) {
			image_info_free(one);
			return -ENOMEM;
		}
		list[0] = one;
		n = 1;
	} else {
		r = image_store_list(cfg->storage, &list, &n);
		if (r < 0)
			return r;
	}
	res = calloc(n ? n : 1, sizeof(*res));
	if (!res) {
		image_info_list_free(list, n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		verify_one(cfg, cat, list[i], progress, ud, &res[i]);
	image_info_list_free(list, n);
	*ret = res;
	*ret_n = n;
	return 0;
}

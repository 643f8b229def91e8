/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "image/store.h"
#include "image/verify.h"
#include "storage/sparse.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

#define IMAGE_JSON "image.json"
#define IMAGE_JSON_MAX (64u * 1024u)
#define DISK_IMG "disk.img"
#define KERNEL_IMG "vmlinuz"
#define INITRD_IMG "initrd.img"
#define STORE_LOCK ".lock"
#define TMP_PREFIX ".tmp-"
#define DEL_PREFIX ".del-"
#define TEXT_MAX 4096 /* cmdline, description */
#define PROGRESS_STEP (8ull << 20)

void image_info_free(struct image_info *i)
{
	if (!i)
		return;
	free(i->id);
	free(i->sha256);
	free(i->cmdline);
	free(i->description);
	free(i);
}

void image_info_list_free(struct image_info **list, size_t n)
{
	if (!list)
		return;
	for (size_t i = 0; i < n; i++)
		image_info_free(list[i]);
	free(list);
}

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int image_id_check(const char *id)
{
	size_t n;

	if (!id)
		return -EINVAL;
	n = strlen(id);
	if (n == 0 || n > IMAGE_ID_MAX || !is_lower_alnum(id[0]))
		return -EINVAL;
	for (size_t i = 1; i < n; i++)
		if (!is_lower_alnum(id[i]) && id[i] != '.' && id[i] != '_' && id[i] != '-')
			return -EINVAL;
	if (strstr(id, ".."))
		return -EINVAL;
	return 0;
}

static bool sha256_hex_ok(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (size_t i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* A disk digest as image.json records it: "sha256-1m:<hex>", or (older images) the plain
 * SHA-256's 64 hex digits. */
static bool disk_digest_ok(const char *s)
{
	return verify_digest_string_ok(s) || sha256_hex_ok(s);
}

static bool text_ok(const char *s)
{
	if (!s)
		return true;
	if (strlen(s) > TEXT_MAX)
		return false;
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 && *p != '\t')
			return false;
	return true;
}

/* A name for a temporary entry: "<prefix><id>-XXXXXX". */
static int temp_name(const char *prefix, const char *id, char **ret)
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	uint8_t rnd[6];
	char suffix[sizeof(rnd) + 1];

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return -EIO;
	for (size_t i = 0; i < sizeof(rnd); i++)
		suffix[i] = alphabet[rnd[i] % (sizeof(alphabet) - 1)];
	suffix[sizeof(rnd)] = '\0';
	if (asprintf(ret, "%s%s-%s", prefix, id, suffix) < 0)
		return -ENOMEM;
	return 0;
}

/* The store lock: installs, removals and the sweep each hold it for their renames. */
static int store_lock(struct storage *s, int *ret_fd)
{
	_cleanup_close_ int fd = -1;

	fd = openat(storage_images_fd(s), STORE_LOCK,
	            O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/* Opens a directory in images/ and locks it (without waiting), so that the sweep leaves it
 * alone. */
static int open_locked_dir(struct storage *s, const char *name, int *ret_fd)
{
	_cleanup_close_ int fd = -1;

	fd = openat(storage_images_fd(s), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_EX | LOCK_NB) < 0)
		if (errno != EINTR)
			return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static bool has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Metadata */

static int get_text(struct json_object *o, const char *key, char **ret)
{
	const char *v;
	int r = json_get_string(o, key, &v);

	if (r == -ENOENT) {
		*ret = NULL;
		return 0;
	}
	if (r < 0)
		return r;
	if (!text_ok(v))
		return SLATE_ERR_INVALID_FORMAT;
	*ret = strdup(v);
	return *ret ? 0 : -ENOMEM;
}

static int get_bool_default(struct json_object *o, const char *key, bool *ret)
{
	int r = json_get_bool(o, key, ret);

	if (r == -ENOENT) {
		*ret = false;
		return 0;
	}
	return r;
}

/* Parses image.json's text; id, when non-NULL, is the id it must carry (its directory's). */
static int info_parse(const char *data, size_t len, const char *id, struct image_info **ret)
{
	_cleanup_(image_info_freep) struct image_info *i = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	const char *v;
	int64_t n;
	int r;

	r = json_parse_object(data, len, IMAGE_JSON_MAX, &o);
	if (r < 0)
		return r;
	i = calloc(1, sizeof(*i));
	if (!i)
		return -ENOMEM;

	r = json_get_string(o, "id", &v);
	if (r < 0)
		return r;
	if (image_id_check(v) < 0 || (id && !streq(v, id)))
		return SLATE_ERR_INVALID_FORMAT;
	i->id = strdup(v);
	if (!i->id)
		return -ENOMEM;
	/* "digest" (sha256-1m) since the block digest; "sha256" (plain) before it. */
	r = json_get_string(o, "digest", &v);
	if (r == -ENOENT) {
		r = json_get_string(o, "sha256", &v);
		if (r < 0)
			return r;
		if (!sha256_hex_ok(v))
			return SLATE_ERR_INVALID_FORMAT;
	} else if (r < 0)
		return r;
	else if (!verify_digest_string_ok(v))
		return SLATE_ERR_INVALID_FORMAT;
	i->sha256 = strdup(v);
	if (!i->sha256)
		return -ENOMEM;
	if ((r = json_get_int64(o, "version", &i->version)) < 0)
		return r;
	if ((r = json_get_int64(o, "size", &n)) < 0)
		return r;
	if (i->version < 1 || n < 0)
		return SLATE_ERR_INVALID_FORMAT;
	i->size = (uint64_t)n;
	r = json_get_int64(o, "installed", &i->installed);
	if (r < 0 && r != -ENOENT)
		return r;
	if ((r = get_bool_default(o, "local", &i->local)) < 0 ||
	    (r = get_bool_default(o, "kernel_boot", &i->kernel_boot)) < 0 ||
	    (r = get_text(o, "cmdline", &i->cmdline)) < 0 ||
	    (r = get_text(o, "description", &i->description)) < 0)
		return r;
	*ret = TAKE_PTR(i);
	return 0;
}

static int load_info(int dir_fd, const char *id, struct image_info **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	int r;

	r = fs_read_file_at(dir_fd, IMAGE_JSON, IMAGE_JSON_MAX, &b);
	if (r < 0)
		return r;
	return info_parse((const char *)buf_ptr(b), buf_len(b), id, ret);
}

static int info_to_json(const struct image_info *i, char **ret)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	int r;

	if (!o)
		return -ENOMEM;
	if ((r = json_add_string(o, "id", i->id)) < 0 ||
	    (r = json_add_int64(o, "version", i->version)) < 0 ||
	    (r = json_add_bool(o, "local", i->local)) < 0 ||
	    (r = json_add_string(o, verify_digest_string_ok(i->sha256) ? "digest" : "sha256",
	                         i->sha256)) < 0 ||
	    (r = json_add_int64(o, "size", (int64_t)i->size)) < 0 ||
	    (r = json_add_bool(o, "kernel_boot", i->kernel_boot)) < 0 ||
	    (i->cmdline && (r = json_add_string(o, "cmdline", i->cmdline)) < 0) ||
	    (r = json_add_int64(o, "installed", i->installed)) < 0 ||
	    (i->description && (r = json_add_string(o, "description", i->description)) < 0))
		return r;
	return json_to_string_dup(o, true, ret);
}

static int info_dup(const struct image_info *i, struct image_info **ret)
{
	_cleanup_(image_info_freep) struct image_info *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	*d = *i;
	d->id = d->sha256 = d->cmdline = d->description = NULL;
	if (!(d->id = strdup(i->id)) || !(d->sha256 = strdup(i->sha256)) ||
	    (i->cmdline && !(d->cmdline = strdup(i->cmdline))) ||
	    (i->description && !(d->description = strdup(i->description))))
		return -ENOMEM;
	*ret = TAKE_PTR(d);
	return 0;
}

int image_store_get(struct storage *s, const char *id, struct image_info **ret)
{
	_cleanup_close_ int fd = -1;

	if (!s || !ret || image_id_check(id) < 0)
		return -EINVAL;
	fd = openat(storage_images_fd(s), id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return load_info(fd, id, ret);
}

int image_store_open_dir(struct storage *s, const char *id, int *ret_fd)
{
	int fd;

	if (!s || !ret_fd || image_id_check(id) < 0)
		return -EINVAL;
	fd = openat(storage_images_fd(s), id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

static int cmp_info(const void *a, const void *b)
{
	const struct image_info *const *x = a, *const *y = b;

	return strcmp((*x)->id, (*y)->id);
}

/* Opens the images directory for reading its entries. */
static int images_opendir(struct storage *s, DIR **ret)
{
	int fd, r;

	fd = openat(storage_images_fd(s), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	*ret = fdopendir(fd);
	if (!*ret) {
		r = -errno;
		(void)close(fd);
		return r;
	}
	return 0;
}

int image_store_list(struct storage *s, struct image_info ***ret, size_t *ret_n)
{
	struct image_info **list = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int r = 0;

	if (!s || !ret || !ret_n)
		return -EINVAL;
	r = images_opendir(s, &d);
	if (r < 0)
		return r;
	for (;;) {
		struct image_info *i = NULL;

		errno = 0;
		de = readdir(d);
		if (!de) {
			r = errno ? -errno : 0;
			break;
		}
		/* Dot entries are the store's own (lock, staging, deletion); the rest are ids. */
		if (de->d_name[0] == '.' || image_id_check(de->d_name) < 0)
			continue;
		r = image_store_get(s, de->d_name, &i);
		if (r < 0) {
			/* One broken image must not hide the others. */
			log_debug("image %s: %s", de->d_name, slate_strerror(r));
			r = 0;
			continue;
		}
		if (n == cap) {
			size_t c = cap ? cap * 2 : 8;
			struct image_info **l = realloc(list, c * sizeof(*l));
			if (!l) {
				image_info_free(i);
				r = -ENOMEM;
				break;
			}
			list = l;
			cap = c;
		}
		list[n++] = i;
	}
	(void)closedir(d);
	if (r < 0) {
		image_info_list_free(list, n);
		return r;
	}
	if (n > 1)
		qsort(list, n, sizeof(*list), cmp_info);
	*ret = list;
	*ret_n = n;
	return 0;
}

/* Staging and installing */

int image_store_stage_dir(struct storage *s, const char *id, int *ret_fd, char **ret_name)
{
	_cleanup_close_ int lock = -1, fd = -1;
	_cleanup_free_ char *name = NULL;
	int r;

	if (!s || !ret_fd || !ret_name || image_id_check(id) < 0)
		return -EINVAL;
	/* Under the store lock, so that a sweep never sees it unlocked. */
	r = store_lock(s, &lock);
	if (r < 0)
		return r;
	for (int attempt = 0;; attempt++) {
		free(name);
		name = NULL;
		r = temp_name(TMP_PREFIX, id, &name);
		if (r < 0)
			return r;
		if (mkdirat(storage_images_fd(s), name, 0700) == 0)
			break;
		if (errno != EEXIST || attempt >= 16)
			return -errno;
	}
	r = open_locked_dir(s, name, &fd);
	if (r < 0) {
		(void)unlinkat(storage_images_fd(s), name, AT_REMOVEDIR);
		return r;
	}
	*ret_fd = TAKE_FD(fd);
	*ret_name = TAKE_PTR(name);
	return 0;
}

int image_store_abort_dir(struct storage *s, const char *name)
{
	if (!s || !name || !has_prefix(name, TMP_PREFIX) || strchr(name, '/'))
		return -EINVAL;
	return storage_delete_dir(s, storage_images_fd(s), name);
}

/* Makes a staged file read-only and durable. Returns 1 if present, 0 if missing. */
static int seal_file(int dir_fd, const char *name, struct stat *ret_st)
{
	_cleanup_close_ int fd = -1;
	struct stat st;

	fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (fchmod(fd, 0444) < 0 || fsync(fd) < 0)
		return -errno;
	if (ret_st)
		*ret_st = st;
	return 1;
}

static int install_locked(struct storage *s, int dir_fd, const char *name, struct image_info *info,
                          bool replace, char **ret_old)
{
	_cleanup_(image_info_freep) struct image_info *old = NULL;
	_cleanup_free_ char *json = NULL, *del = NULL;
	int images = storage_images_fd(s);
	struct stat st;
	bool exists;
	int r;

	if (fstatat(images, info->id, &st, AT_SYMLINK_NOFOLLOW) == 0)
		exists = true;
	else if (errno == ENOENT)
		exists = false;
	else
		return -errno;
	if (exists && !replace)
		return -EEXIST;
	if (exists) {
		r = image_store_get(s, info->id, &old);
		if (r < 0)
			log_debug("image %s to be replaced has no readable metadata: %s", info->id,
			          slate_strerror(r));
	}
	info->version = old ? old->version + 1 : 1;
	info->installed = (int64_t)time(NULL);

	r = info_to_json(info, &json);
	if (r < 0)
		return r;
	r = fs_write_atomic_at(dir_fd, IMAGE_JSON, json, strlen(json), 0444);
	if (r < 0)
		return r;
	if (fchmod(dir_fd, 0755) < 0)
		return -errno;
	r = fs_fsync_dir(dir_fd);
	if (r < 0)
		return r;

	if (!exists) {
		if (renameat2(images, name, images, info->id, RENAME_NOREPLACE) < 0)
			return -errno;
		return fs_fsync_dir(images);
	}
	/* One atomic swap: there is always an image called id. The old one ends up at name. */
	if (renameat2(images, name, images, info->id, RENAME_EXCHANGE) == 0) {
		del = strdup(name);
		if (!del)
			return -ENOMEM;
	} else {
		if (errno != EINVAL && errno != ENOSYS)
			return -errno;
		/* No RENAME_EXCHANGE here: move the old one aside, then the new one in. */
		r = temp_name(DEL_PREFIX, info->id, &del);
		if (r < 0)
			return r;
		if (renameat2(images, info->id, images, del, RENAME_NOREPLACE) < 0)
			return -errno;
		if (renameat2(images, name, images, info->id, RENAME_NOREPLACE) < 0) {
			r = -errno;
			(void)renameat2(images, del, images, info->id, RENAME_NOREPLACE);
			return r;
		}
	}
	r = fs_fsync_dir(images);
	if (r < 0)
		return r;
	*ret_old = TAKE_PTR(del);
	return 0;
}

int image_store_install_dir(struct storage *s, const char *name, const struct image_info *info,
                            bool replace, struct image_info **ret)
{
	_cleanup_(image_info_freep) struct image_info *copy = NULL;
	_cleanup_close_ int dir_fd = -1, lock = -1, old_fd = -1;
	_cleanup_free_ char *old = NULL;
	struct stat st;
	int r, k, i;

	if (!s || !name || !has_prefix(name, TMP_PREFIX) || strchr(name, '/'))
		return -EINVAL;
	if (!info || image_id_check(info->id) < 0 || !disk_digest_ok(info->sha256) ||
	    !text_ok(info->cmdline) || !text_ok(info->description)) {
		(void)image_store_abort_dir(s, name);
		return -EINVAL;
	}
	r = info_dup(info, &copy);
	if (r < 0)
		goto fail;
	dir_fd =
	        openat(storage_images_fd(s), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir_fd < 0)
		return -errno;

	r = seal_file(dir_fd, DISK_IMG, &st);
	if (r == 0)
		r = -ENOENT;
	if (r < 0)
		goto fail;
	k = seal_file(dir_fd, KERNEL_IMG, NULL);
	i = seal_file(dir_fd, INITRD_IMG, NULL);
	if (k < 0 || i < 0) {
		r = k < 0 ? k : i;
		goto fail;
	}
	if (k != i) {
		r = -EINVAL; /* a kernel without its initrd, or the reverse */
		goto fail;
	}
	copy->size = (uint64_t)st.st_size;
	copy->kernel_boot = k > 0;
	if (!copy->kernel_boot) {
		free(copy->cmdline);
		copy->cmdline = NULL;
	}

	r = store_lock(s, &lock);
	if (r < 0)
		goto fail;
	/* The image being replaced is locked too, so a sweep does not race our delete. */
	if (replace)
		(void)open_locked_dir(s, copy->id, &old_fd);
	r = install_locked(s, dir_fd, name, copy, replace, &old);
	lock = safe_close(lock);
	if (r < 0)
		goto fail;
	if (old) {
		r = storage_delete_dir(s, storage_images_fd(s), old);
		if (r < 0)
			log_debug("removing the replaced image %s: %s (the sweep will finish it)",
			          old, slate_strerror(r));
	}
	log_debug("installed image %s version %lld", copy->id, (long long)copy->version);
	if (ret)
		*ret = TAKE_PTR(copy);
	return 0;

fail:
	(void)image_store_abort_dir(s, name);
	return r;
}

/* Import */

struct hash_state {
	struct verify_digest digest;
	uint64_t total, reported;
	void (*progress)(uint64_t done, uint64_t total, void *ud);
	void *ud;
};

static void report(struct hash_state *h, uint64_t done)
{
	if (!h->progress)
		return;
	if (done - h->reported >= PROGRESS_STEP || (done == h->total && h->reported != done)) {
		h->reported = done;
		h->progress(done, h->total, h->ud);
	}
}

static int hash_piece(uint64_t off, const uint8_t *p, uint64_t len, void *ud)
{
	struct hash_state *h = ud;

	int r;

	if (p) {
		r = verify_digest_update(&h->digest, p, (size_t)len);
		if (r < 0)
			return r;
		report(h, off + len);
		return 0;
	}
	/* A hole is zeros; its whole blocks are not hashed at all (progress still moves). */
	while (len > 0) {
		uint64_t n = len < PROGRESS_STEP ? len : PROGRESS_STEP;

		r = verify_digest_zeros(&h->digest, n);
		if (r < 0)
			return r;
		off += n;
		len -= n;
		report(h, off);
	}
	return 0;
}

/*
 * Puts the file at src_path into dir_fd as name: FICLONE when both are on one filesystem, a
 * sparse copy otherwise. With h, every byte is hashed: while copying, or by reading the clone.
 */
static int import_file(int dir_fd, const char *name, const char *src_path, struct hash_state *h)
{
	_cleanup_close_ int in = -1, out = -1;
	struct stat st;
	int r;

	in = open(src_path, O_RDONLY | O_NOCTTY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	if (fstat(in, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode) || st.st_size <= 0)
		return -EINVAL;
	out = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC,
	             0600);
	if (out < 0)
		return -errno;
	if (h) {
		h->total = (uint64_t)st.st_size;
		r = verify_digest_init(&h->digest, h->total);
		if (r < 0)
			return r;
	}

	if (ioctl(out, FICLONE, in) == 0) {
		log_debug("%s: reflinked from %s", name, src_path);
		r = h ? sparse_walk(out, (uint64_t)st.st_size, hash_piece, h) : 0;
	} else if (errno == EXDEV || errno == EOPNOTSUPP || errno == EINVAL || errno == ENOTTY ||
	           errno == EPERM) {
		log_debug("%s: copying %s (no reflink: %s)", name, src_path, strerror(errno));
		r = sparse_copy(in, out, (uint64_t)st.st_size, h ? hash_piece : NULL, h);
	} else {
		r = -errno;
	}
	if (r < 0)
		return r;
	if (fsync(out) < 0 || fchmod(out, 0444) < 0)
		return -errno;
	return 0;
}

/* Whether real (a resolved path) is dir or inside it; dir is resolved first. */
static bool path_within(const char *real, const char *dir)
{
	_cleanup_free_ char *d = dir ? realpath(dir, NULL) : NULL;
	size_t n;

	if (!d)
		return false;
	n = strlen(d);
	if (n == 1) /* "/" */
		return true;
	return strncmp(real, d, n) == 0 && (real[n] == '/' || real[n] == 0);
}

int image_store_source_check(struct storage *s, const char *path)
{
	_cleanup_free_ char *real = realpath(path, NULL);

	if (!real)
		return 0;
	if (path_within(real, storage_workspaces_path(s)) ||
	    (path_within(real, storage_state_path(s)) &&
	     !path_within(real, storage_images_path(s))))
		return -EPERM;
	return 0;
}

int image_store_import(struct storage *s, const char *id, const char *disk_path,
                       const char *kernel_path, const char *initrd_path, const char *cmdline,
                       bool replace, void (*progress)(uint64_t done, uint64_t total, void *ud),
                       void *ud, struct image_info **ret)
{
	_cleanup_free_ char *name = NULL;
	_cleanup_close_ int dir_fd = -1;
	struct hash_state h = {.progress = progress, .ud = ud};
	uint8_t md[32];
	char digest[VERIFY_DIGEST_STRLEN + 1];
	struct image_info info = {0};
	struct stat st;
	int r;

	if (!s || !disk_path || !*disk_path || image_id_check(id) < 0)
		return -EINVAL;
	if (!kernel_path != !initrd_path)
		return -EINVAL; /* both or neither */
	if (kernel_path && !text_ok(cmdline))
		return -EINVAL;
	/* Fail before copying gigabytes. install_dir() checks again under the lock. */
	if (!replace && fstatat(storage_images_fd(s), id, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return -EEXIST;

	r = image_store_stage_dir(s, id, &dir_fd, &name);
	if (r < 0)
		return r;
	r = import_file(dir_fd, DISK_IMG, disk_path, &h);
	if (r >= 0 && kernel_path)
		r = import_file(dir_fd, KERNEL_IMG, kernel_path, NULL);
	if (r >= 0 && initrd_path)
		r = import_file(dir_fd, INITRD_IMG, initrd_path, NULL);
	if (r >= 0)
		r = verify_digest_final(&h.digest, md);
	verify_digest_done(&h.digest);
	if (r < 0) {
		(void)image_store_abort_dir(s, name);
		return r;
	}
	verify_digest_string(md, digest);

	info.id = (char *)id;
	info.local = true;
	info.sha256 = digest;
	info.cmdline = kernel_path ? (char *)cmdline : NULL;
	return image_store_install_dir(s, name, &info, replace, ret);
}

/* Removal and the sweep */

int image_store_remove(struct storage *s, const char *id)
{
	_cleanup_close_ int lock = -1, fd = -1;
	_cleanup_free_ char *del = NULL;
	int images, r;

	if (!s || image_id_check(id) < 0)
		return -EINVAL;
	images = storage_images_fd(s);
	r = store_lock(s, &lock);
	if (r < 0)
		return r;
	r = temp_name(DEL_PREFIX, id, &del);
	if (r < 0)
		return r;
	/* First out of the way in one step, then deleted at leisure (a crash: the sweep's job). */
	if (renameat2(images, id, images, del, RENAME_NOREPLACE) < 0)
		return -errno;
	r = fs_fsync_dir(images);
	if (r < 0)
		return r;
	(void)open_locked_dir(s, del, &fd);
	lock = safe_close(lock);
	return storage_delete_dir(s, images, del);
}

int image_store_sweep(struct storage *s)
{
	_cleanup_close_ int lock = -1;
	struct dirent *de;
	unsigned removed = 0;
	DIR *d;
	int r;

	if (!s)
		return -EINVAL;
	r = store_lock(s, &lock);
	if (r < 0)
		return r;
	r = images_opendir(s, &d);
	if (r < 0)
		return r;
	r = 0;
	for (;;) {
		_cleanup_close_ int busy = -1;
		int k;

		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				r = -errno;
			break;
		}
		if (!has_prefix(de->d_name, TMP_PREFIX) && !has_prefix(de->d_name, DEL_PREFIX))
			continue;
		k = open_locked_dir(s, de->d_name, &busy);
		if (k == -EWOULDBLOCK) {
			log_debug("image store: %s is in use, left alone", de->d_name);
			continue;
		}
		if (k == -ENOTDIR)
			k = RET_NERRNO(unlinkat(storage_images_fd(s), de->d_name, 0));
		else if (k >= 0)
			k = storage_delete_dir(s, storage_images_fd(s), de->d_name);
		if (k < 0 && k != -ENOENT) {
			log_debug("image store: cannot remove %s: %s", de->d_name,
			          slate_strerror(k));
			if (r == 0)
				r = k;
			continue;
		}
		log_debug("image store: removed the leftover %s", de->d_name);
		removed++;
	}
	(void)closedir(d);
	return r < 0 ? r : (int)removed;
}

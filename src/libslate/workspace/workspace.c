/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The workspace verbs. Each one moves from the old state to the new one by renaming fully built
 * objects into place, or, where two objects change together (wipe-home, revert), by writing a
 * journal first that the sweep in workspace_store_open() completes. doc/workspace.md describes
 * the layout and doc/crash-points.md the state each crash point leaves.
 */

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include "image/store.h"
#include "storage/qcow2.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "workspace/crash.h"
#include "workspace/internal.h"
#include "workspace/mac.h"

#define TMP_PREFIX ".tmp-"
#define DEL_PREFIX ".del-"
#define ATOMIC_TMP_PREFIX ".#" /* fs_write_atomic_at()'s temporary files */

static bool has_prefix(const char *s, const char *p)
{
	return strneq(s, p, strlen(p));
}

/* ---- small helpers shared by the module ---- */

int ws_open_subdir(int dirfd, const char *name, int *ret_fd)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

int ws_open_dir(struct workspace_store *st, const char *name, int *ret_fd)
{
	int r = workspace_name_check(name);

	if (r < 0)
		return r;
	r = ws_open_subdir(st->dirfd, name, ret_fd);
	return r == -ENOTDIR || r == -ELOOP ? -ENOENT : r;
}

int ws_remove_at(struct workspace_store *st, int dirfd, const char *name)
{
	struct stat sb;

	if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(sb.st_mode)) {
		int r = storage_delete_dir(st->storage, dirfd, name);
		return r == -ENOENT ? 0 : r;
	}
	if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static int unlink_if_present(int dirfd, const char *name)
{
	if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

/* 1 if dirfd/name exists (not following a symlink), 0 if not, -errno otherwise. */
static int exists_at(int dirfd, const char *name)
{
	struct stat sb;

	if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	return 1;
}

int ws_clone_base(struct workspace_store *st, const char *image_id, int dir_fd, const char *name,
                  int64_t *ret_version)
{
	_cleanup_(image_info_freep) struct image_info *info = NULL;
	_cleanup_free_ char *img_dir = NULL, *src_path = NULL;
	_cleanup_close_ int img_fd = -1;
	int r;

	r = image_id_check(image_id);
	if (r < 0)
		return r;
	r = image_store_get(st->storage, image_id, &info);
	if (r < 0)
		return r;
	r = image_store_open_dir(st->storage, image_id, &img_fd);
	if (r < 0)
		return r;
	img_dir = fs_path_join(storage_images_path(st->storage), image_id);
	if (!img_dir)
		return -ENOMEM;
	src_path = fs_path_join(img_dir, WS_DISK);
	if (!src_path)
		return -ENOMEM;
	r = storage_clone_file(st->storage, img_fd, WS_DISK, src_path, dir_fd, name, 0600);
	if (r < 0)
		return r;
	*ret_version = info->version;
	return 0;
}

static int is_dir_at(int dirfd, const char *name)
{
	struct stat sb;

	if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	return S_ISDIR(sb.st_mode) ? 1 : 0;
}

/* ---- journals: a small JSON file naming the verb in progress ---- */

static int journal_write(int ws_fd, const char *file, const char *key, const char *value)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_free_ char *s = NULL;
	int r;

	if (!o)
		return -ENOMEM;
	if ((r = json_add_int64(o, "formatVersion", 1)) < 0 ||
	    (r = json_add_string(o, key, value)) < 0)
		return r;
	r = json_to_string_dup(o, true, &s);
	if (r < 0)
		return r;
	return fs_write_atomic_at(ws_fd, file, s, strlen(s), 0600);
}

static int journal_remove(int ws_fd, const char *file)
{
	int r = unlink_if_present(ws_fd, file);
	if (r < 0)
		return r;
	return fs_fsync_dir(ws_fd);
}

/* The "verb" of journal file, newly allocated. */
static int journal_verb(int ws_fd, const char *file, char **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	const char *v;
	int r;

	r = fs_read_file_at(ws_fd, file, 4096, &b);
	if (r < 0)
		return r;
	r = json_parse_object((const char *)buf_ptr(b), buf_len(b), 4096, &o);
	if (r < 0)
		return r;
	r = json_get_string(o, "verb", &v);
	if (r < 0)
		return r;
	*ret = strdup(v);
	return *ret ? 0 : -ENOMEM;
}

/* ---- the store ---- */

static int sweep_workspace(struct workspace_store *st, const char *name);

struct mac_keep_ctx {
	struct workspace_store *st;
};

/* A reservation stays when its workspace exists and its workspace.json names this MAC. */
static int mac_keep(const char *mac, const char *name, void *ud)
{
	struct workspace_store *st = ((struct mac_keep_ctx *)ud)->st;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	r = ws_open_dir(st, name, &fd);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	r = ws_state_load_at(fd, &w);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return 1; /* unreadable state: keep the reservation rather than guess */
	return streq(w->mac, mac) ? 1 : 0;
}

static int store_sweep(struct workspace_store *st)
{
	struct mac_keep_ctx ctx = {st};
	uint64_t *home_sizes = NULL;
	char **names = NULL;
	size_t n = 0, n_sizes = 0;
	int r;

	r = fs_list_names_at(st->dirfd, &names, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n && r >= 0; i++) {
		const char *e = names[i];

		if (has_prefix(e, TMP_PREFIX) || has_prefix(e, DEL_PREFIX)) {
			/* A half-made workspace goes; a half-deleted one finishes going. */
			log_debug("workspace sweep: removing %s", e);
			r = ws_remove_at(st, st->dirfd, e);
		} else if (has_prefix(e, ATOMIC_TMP_PREFIX)) {
			r = unlink_if_present(st->dirfd, e);
		} else if (workspace_name_check(e) >= 0 && is_dir_at(st->dirfd, e) > 0) {
			/* One workspace that cannot be settled (ENOSPC...) must not keep the others
			 * from opening; its verbs try again (ws_settle). */
			int k = sweep_workspace(st, e);
			if (k < 0)
				log_debug_errno(k, "workspace %s sweep: %m", e);
		}
	}
	if (r >= 0)
		r = fs_fsync_dir(st->dirfd);

	/* Reservations without their workspace are freed... */
	if (r >= 0) {
		r = mac_sweep(st->dirfd, mac_keep, &ctx);
		if (r > 0)
			log_debug("workspace sweep: freed %d orphan MAC reservation(s)", r);
	}
	/* ...and a workspace whose reservation went missing gets it back. */
	home_sizes = calloc(n ? n : 1, sizeof(*home_sizes));
	if (!home_sizes && r >= 0)
		r = -ENOMEM;
	for (size_t i = 0; i < n && r >= 0; i++) {
		_cleanup_(workspace_freep) struct workspace *w = NULL;
		_cleanup_close_ int fd = -1;

		if (workspace_name_check(names[i]) < 0 || ws_open_dir(st, names[i], &fd) < 0)
			continue;
		if (ws_state_load_at(fd, &w) < 0)
			continue;
		home_sizes[n_sizes++] = w->home_size;
		r = mac_claim(st->dirfd, w->mac, w->name);
		if (r == -EADDRINUSE) {
			log_debug("workspace %s: MAC %s is reserved by another workspace", w->name,
			          w->mac);
			r = 0;
		}
	}
	/* Home templates are a cache: one that cannot be swept only costs its space. */
	if (r >= 0) {
		int k = ws_home_templates_sweep(st, home_sizes, n_sizes);
		if (k < 0)
			log_debug_errno(k, "home templates sweep: %m");
	}
	free(home_sizes);
	fs_names_free(names, n);
	return r < 0 ? r : 0;
}

int workspace_store_open(struct storage *s, const struct workspace_hooks *hooks,
                         struct workspace_store **ret)
{
	_cleanup_(workspace_store_freep) struct workspace_store *st = NULL;
	int r;

	if (!s || !ret)
		return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->storage = s;
	if (hooks)
		st->hooks = *hooks;
	st->dirfd = storage_workspaces_fd(s);
	st->locks_fd = -1;
	if (st->dirfd < 0)
		return -EBADF;
	if (mkdirat(st->dirfd, WS_LOCKS_DIR, 0700) < 0 && errno != EEXIST)
		return -errno;
	r = ws_open_subdir(st->dirfd, WS_LOCKS_DIR, &st->locks_fd);
	if (r < 0)
		return r;
	r = store_sweep(st);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(st);
	return 0;
}

void workspace_store_free(struct workspace_store *st)
{
	if (!st)
		return;
	safe_close(st->locks_fd);
	free(st);
}

char *workspace_dir_path(struct workspace_store *st, const char *name)
{
	if (!st || workspace_name_check(name) < 0) {
		errno = EINVAL;
		return NULL;
	}
	return fs_path_join(storage_workspaces_path(st->storage), name);
}

int ws_lock_wait_at(int dirfd, const char *name, int *ret_fd)
{
	_cleanup_close_ int fd = -1;

	fd = openat(dirfd, name, O_RDONLY | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int workspace_lock(struct workspace_store *st, const char *name, int *ret_fd)
{
	char file[WORKSPACE_NAME_MAX + sizeof(".lock")];
	int r;

	r = workspace_name_check(name);
	if (r < 0)
		return r;
	(void)snprintf(file, sizeof(file), "%s.lock", name);
	/* Outside the workspace directory, so that delete and rename never break a held lock. */
	return ws_lock_wait_at(st->locks_fd, file, ret_fd);
}

/* ---- load, list, save ---- */

static int load_at(int fd, const char *name, struct workspace **ret)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	int r;

	r = ws_state_load_at(fd, &w);
	if (r < 0)
		return r;
	/* The directory's name is the workspace's name; a file claiming another is not ours. */
	if (!streq(w->name, name))
		return SLATE_ERR_INVALID_FORMAT;
	*ret = TAKE_PTR(w);
	return 0;
}

int workspace_load(struct workspace_store *st, const char *name, struct workspace **ret)
{
	_cleanup_close_ int fd = -1;
	int r;

	r = ws_open_dir(st, name, &fd);
	if (r < 0)
		return r;
	return load_at(fd, name, ret);
}

int ws_open_settled(struct workspace_store *st, const char *name, int *ret_fd,
                    struct workspace **ret)
{
	_cleanup_close_ int fd = -1;
	int r;

	r = ws_open_dir(st, name, &fd);
	if (r < 0)
		return r;
	r = ws_settle(st, name, fd);
	if (r < 0)
		return r;
	r = load_at(fd, name, ret);
	if (r < 0)
		return r;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static int ws_ptr_cmp(const void *a, const void *b)
{
	return strcmp((*(struct workspace *const *)a)->name, (*(struct workspace *const *)b)->name);
}

int workspace_list(struct workspace_store *st, struct workspace ***ret, size_t *ret_n)
{
	struct workspace **list = NULL;
	char **names = NULL;
	size_t n_names = 0, n = 0;
	int r;

	r = fs_list_names_at(st->dirfd, &names, &n_names);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n_names; i++) {
		struct workspace *w = NULL, **nl;

		if (workspace_name_check(names[i]) < 0)
			continue; /* .tmp-*, .del-*, .locks, .home-templates, the MAC registry */
		r = workspace_load(st, names[i], &w);
		if (r == -ENOENT) {
			r = 0; /* deleted meanwhile */
			continue;
		}
		if (r < 0)
			break;
		nl = reallocarray(list, n + 1, sizeof(*list));
		if (!nl) {
			workspace_free(w);
			r = -ENOMEM;
			break;
		}
		list = nl;
		list[n++] = w;
	}
	fs_names_free(names, n_names);
	if (r < 0) {
		workspace_list_free(list, n);
		return r;
	}
	if (n > 1)
		qsort(list, n, sizeof(*list), ws_ptr_cmp);
	*ret = list;
	*ret_n = n;
	return 0;
}

int workspace_mark_compromised(struct workspace_store *st, const char *name, const char *host)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int fd = -1;
	char *h;
	int r;

	r = ws_open_dir(st, name, &fd);
	if (r < 0)
		return r;
	r = load_at(fd, name, &w);
	if (r < 0)
		return r;
	if (w->compromised)
		return 0;
	h = strdup(host ? host : "?");
	if (!h)
		return -ENOMEM;
	free(w->compromised_host);
	w->compromised_host = h;
	w->compromised = true;
	w->compromised_at = (int64_t)time(NULL);
	r = ws_state_save_at(fd, w);
	return r < 0 ? r : 1;
}

int workspace_save(struct workspace_store *st, const struct workspace *w)
{
	_cleanup_close_ int fd = -1;
	int r;

	if (!w)
		return -EINVAL;
	r = ws_open_dir(st, w->name, &fd);
	if (r < 0)
		return r;
	if (exists_at(fd, WS_STATE_FILE) <= 0)
		return -ENOENT;
	return ws_state_save_at(fd, w);
}

/* ---- create ---- */

static int check_create_args(const struct workspace_create_args *a)
{
	int r;

	if (!a)
		return -EINVAL;
	r = workspace_name_check(a->name);
	if (r < 0)
		return r;
	if (!a->image_id || image_id_check(a->image_id) < 0)
		return -EINVAL;
	if (a->owner == (uid_t)-1)
		return -EINVAL;
	if (a->memory_mib > INT32_MAX || a->cpus > 4096)
		return -EINVAL;
	if (a->home_size != 0 && (a->home_size < (16u << 20) || a->home_size > (uint64_t)INT64_MAX))
		return -EINVAL;
	if (a->n_shares > WS_MAX_SHARES || (a->n_shares > 0 && !a->shares))
		return -EINVAL;
	for (size_t i = 0; i < a->n_shares; i++) {
		const struct workspace_share *sh = &a->shares[i];
		if (!sh->host_dir || sh->host_dir[0] != '/' || strlen(sh->host_dir) >= PATH_MAX)
			return -EINVAL;
		if (sh->guest_dir && (sh->guest_dir[0] != '/' || strlen(sh->guest_dir) >= PATH_MAX))
			return -EINVAL;
	}
	return 0;
}

static int build_workspace(const struct workspace_create_args *a, int64_t base_version,
                           const char *mac, struct workspace **ret)
{
	_cleanup_(workspace_freep) struct workspace *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->name = strdup(a->name);
	w->image_id = strdup(a->image_id);
	if (!w->name || !w->image_id)
		return -ENOMEM;
	w->owner = a->owner;
	(void)workspace_uuid_v4(w->uuid);
	w->base_version = base_version;
	w->memory_mib = a->memory_mib ? a->memory_mib : WORKSPACE_DEFAULT_MEMORY_MIB;
	w->cpus = a->cpus ? a->cpus : WORKSPACE_DEFAULT_CPUS;
	w->home_size = a->home_size ? a->home_size : WORKSPACE_DEFAULT_HOME_SIZE;
	if (a->n_shares > 0) {
		w->shares = calloc(a->n_shares, sizeof(*w->shares));
		if (!w->shares)
			return -ENOMEM;
		for (size_t i = 0; i < a->n_shares; i++) {
			struct workspace_share *sh = &w->shares[i];
			w->n_shares = i + 1;
			sh->host_dir = strdup(a->shares[i].host_dir);
			sh->guest_dir =
			        a->shares[i].guest_dir ? strdup(a->shares[i].guest_dir) : NULL;
			sh->readonly = a->shares[i].readonly;
			sh->uid = a->shares[i].uid;
			if (!sh->host_dir || (a->shares[i].guest_dir && !sh->guest_dir))
				return -ENOMEM;
		}
	}
	memcpy(w->mac, mac, sizeof(w->mac));
	w->created = w->last_used = ws_now();
	w->disk_present = w->home_present = true;
	w->disk_fresh = true;
	w->ephemeral = a->ephemeral;
	*ret = TAKE_PTR(w);
	return 0;
}

/* Creates <workspaces>/.tmp-<name>-XXXXXX; writes its name to tmp. */
static int create_tmp_dir(struct workspace_store *st, const char *name, char *tmp, size_t size)
{
	for (int attempt = 0; attempt < 16; attempt++) {
		char suffix[8];
		int r = ws_random_suffix(suffix, sizeof(suffix));
		if (r < 0)
			return r;
		if (snprintf(tmp, size, TMP_PREFIX "%s-%s", name, suffix) >= (int)size)
			return -ENAMETOOLONG;
		r = storage_create_dir(st->storage, st->dirfd, tmp);
		if (r != -EEXIST)
			return r;
	}
	return -EEXIST;
}

int workspace_create(struct workspace_store *st, const struct workspace_create_args *a,
                     struct workspace **ret)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_free_ char *tmp_path = NULL;
	_cleanup_close_ int fd = -1;
	char tmp[NAME_MAX + 1], mac[MAC_STRLEN + 1] = "";
	struct ws_home_job home;
	bool made = false;
	int64_t version = 0;
	int r;

	r = check_create_args(a);
	if (r < 0)
		return r;
	r = exists_at(st->dirfd, a->name);
	if (r != 0)
		return r < 0 ? r : -EEXIST;

	r = create_tmp_dir(st, a->name, tmp, sizeof(tmp));
	if (r < 0)
		return r;
	made = true;
	crash_point("create:after-mkdir");
	tmp_path = fs_path_join(storage_workspaces_path(st->storage), tmp);
	if (!tmp_path) {
		r = -ENOMEM;
		goto fail;
	}
	r = ws_open_subdir(st->dirfd, tmp, &fd);
	if (r < 0)
		goto fail;
	if (mkdirat(fd, WS_CHECKPOINTS, 0700) < 0 || mkdirat(fd, WS_SSH, 0700) < 0) {
		r = -errno;
		goto fail;
	}

	/* A clone of the size's template; the first time, mke2fs makes it while the disk clones. */
	r = ws_home_start(st, fd, tmp_path, WS_HOME,
	                  a->home_size ? a->home_size : WORKSPACE_DEFAULT_HOME_SIZE, &home);
	if (r < 0)
		goto fail;
	r = ws_clone_base(st, a->image_id, fd, WS_DISK, &version);
	if (r < 0) {
		ws_home_abort(&home);
		goto fail;
	}
	crash_point("create:after-clone");

	r = ws_home_finish(&home);
	if (r < 0)
		goto fail;
	crash_point("create:after-home");

	r = mac_reserve(st->dirfd, a->name, mac);
	if (r < 0)
		goto fail;
	crash_point("create:after-mac");

	r = build_workspace(a, version, mac, &w);
	if (r < 0)
		goto fail;
	r = ws_state_save_at(fd, w); /* fsyncs the directory too */
	if (r < 0)
		goto fail;
	crash_point("create:after-state");

	/* The one step that makes it exist. */
	if (renameat2(st->dirfd, tmp, st->dirfd, a->name, RENAME_NOREPLACE) < 0) {
		r = -errno;
		goto fail;
	}
	made = false;
	crash_point("create:after-rename");
	r = fs_fsync_dir(st->dirfd);
	if (r < 0)
		return r; /* it exists; only its durability is in doubt */

	if (ret)
		*ret = TAKE_PTR(w);
	return 0;

fail:
	fd = safe_close(fd);
	if (mac[0])
		(void)mac_release(st->dirfd, mac, a->name);
	if (made) {
		int k = ws_remove_at(st, st->dirfd, tmp);
		if (k < 0)
			log_debug_errno(k, "cannot remove %s after a failed create: %m", tmp);
	}
	return r;
}

/* ---- reset, prepare, wipe-home ---- */

/*
 * What reset does to the disk, for reset and wipe: marks it absent (the sweep then finishes the
 * job), then unlinks disk.img; the two crash points are the caller's.
 */
static int drop_disk(int fd, struct workspace *w, const char *after_save, const char *after_unlink)
{
	int r;

	if (w->disk_present) {
		w->disk_present = false;
		w->disk_fresh = false;
		r = ws_state_save_at(fd, w);
		if (r < 0)
			return r;
	}
	crash_point(after_save);
	r = unlink_if_present(fd, WS_DISK);
	if (r < 0)
		return r;
	crash_point(after_unlink);
	return 0;
}

int workspace_reset(struct workspace_store *st, const char *name)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	r = ws_open_settled(st, name, &fd, &w);
	if (r < 0)
		return r;
	/* The state first: from here on the sweep finishes the reset if we die. */
	r = drop_disk(fd, w, "reset:after-save", "reset:after-unlink");
	if (r < 0)
		return r;
	return fs_fsync_dir(fd);
}

/* Removes home.img and the generated key (ssh/ whole when it holds no imported key) and marks the
 * home absent; what a wipe-home journal asks for. */
static int wipe_home_finish(struct workspace_store *st, int fd, struct workspace *w)
{
	int kept, r;

	r = unlink_if_present(fd, WS_HOME);
	if (r < 0)
		return r;
	crash_point("wipe-home:after-unlink-home");
	/* The browser's kept profile is the user's data as the home is: its key first, so that
	 * from here on what is left of the disk cannot be read. */
	r = unlink_if_present(fd, WORKSPACE_BROWSER_KEY);
	if (r < 0)
		return r;
	r = unlink_if_present(fd, WORKSPACE_BROWSER_PROFILE);
	if (r < 0)
		return r;
	/* The generated key pair goes; keys the user imported stay (slate(1): wipe-home discards
	 * "the generated SSH key pair"; doc/security.md, "Credentials": a compromised workspace's
	 * wipe keeps keys). */
	kept = st->hooks.keep_ssh_keys ? st->hooks.keep_ssh_keys(fd) : 0;
	if (kept < 0)
		return kept;
	if (kept > 0) {
		crash_point("wipe-home:after-keep-imported");
	} else {
		/* None to keep: the directory goes, renamed first so that a half-deleted key
		 * directory is never mistaken for a key. */
		r = ws_remove_at(st, fd, WS_DEL_SSH);
		if (r < 0)
			return r;
		if (renameat(fd, WS_SSH, fd, WS_DEL_SSH) < 0 && errno != ENOENT)
			return -errno;
		crash_point("wipe-home:after-rename-ssh");
		r = ws_remove_at(st, fd, WS_DEL_SSH);
		if (r < 0)
			return r;
		crash_point("wipe-home:after-remove-ssh");
	}
	if (w->home_present) {
		w->home_present = false;
		r = ws_state_save_at(fd, w);
		if (r < 0)
			return r;
	}
	crash_point("wipe-home:after-save");
	return journal_remove(fd, WS_WIPE_JOURNAL);
}

/*
 * What a wipe journal asks for: with disk (`slate wipe`), first what reset does (disk.img gone,
 * marked absent), then the home as wipe-home does; the journal goes last, so a crash anywhere
 * after it was written ends, at the next sweep, with both done.
 */
static int wipe_finish(struct workspace_store *st, int fd, struct workspace *w, bool disk)
{
	if (disk) {
		int r = drop_disk(fd, w, "wipe:after-save-disk", "wipe:after-unlink-disk");
		if (r < 0)
			return r;
	}
	return wipe_home_finish(st, fd, w);
}

int ws_settle(struct workspace_store *st, const char *name, int fd)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	int r;

	r = exists_at(fd, WS_WIPE_JOURNAL);
	if (r < 0)
		return r;
	if (r > 0) {
		_cleanup_free_ char *verb = NULL;
		/* "wipe" covers the disk too; anything else (an older slated wrote no other verb
		 * there, and an unreadable journal is not trusted to mean more) the home only. */
		bool disk = journal_verb(fd, WS_WIPE_JOURNAL, &verb) >= 0 && streq(verb, "wipe");

		log_debug("workspace %s: completing an interrupted %s", name,
		          disk ? "wipe" : "wipe-home");
		r = load_at(fd, name, &w);
		if (r < 0)
			return r;
		r = wipe_finish(st, fd, w, disk);
		if (r < 0)
			return r;
	}
	return ws_revert_complete(st, name, fd);
}

static int wipe(struct workspace_store *st, const char *name, bool disk)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	r = ws_open_settled(st, name, &fd, &w);
	if (r < 0)
		return r;
	/* Several objects go together: the journal makes it one step for the sweep. */
	r = journal_write(fd, WS_WIPE_JOURNAL, "verb", disk ? "wipe" : "wipe-home");
	if (r < 0)
		return r;
	crash_point(disk ? "wipe:after-journal" : "wipe-home:after-journal");
	return wipe_finish(st, fd, w, disk);
}

int workspace_wipe_home(struct workspace_store *st, const char *name)
{
	return wipe(st, name, false);
}

int workspace_wipe(struct workspace_store *st, const char *name)
{
	return wipe(st, name, true);
}

int workspace_prepare(struct workspace_store *st, const char *name)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_free_ char *dir_path = NULL;
	_cleanup_close_ int fd = -1;
	bool need_disk, need_home, was_disk, was_home;
	int64_t version = 0;
	int r;

	r = ws_open_settled(st, name, &fd, &w);
	if (r < 0)
		return r;
	r = exists_at(fd, WS_DISK);
	if (r < 0)
		return r;
	need_disk = !w->disk_present || r == 0;
	r = exists_at(fd, WS_HOME);
	if (r < 0)
		return r;
	need_home = !w->home_present || r == 0;
	if (!need_disk && !need_home)
		return 0;
	was_disk = w->disk_present;
	was_home = w->home_present;

	if (need_disk) {
		/* Anything still named disk.img belongs to the reset that asked for this. */
		if ((r = unlink_if_present(fd, WS_DISK)) < 0 ||
		    (r = unlink_if_present(fd, WS_TMP_DISK)) < 0)
			return r;
		r = ws_clone_base(st, w->image_id, fd, WS_TMP_DISK, &version);
		if (r < 0)
			return r;
		crash_point("prepare:after-clone-disk");
		if (renameat2(fd, WS_TMP_DISK, fd, WS_DISK, RENAME_NOREPLACE) < 0) {
			r = -errno;
			(void)unlinkat(fd, WS_TMP_DISK, 0);
			return r;
		}
		crash_point("prepare:after-rename-disk");
	}
	if (need_home) {
		dir_path = workspace_dir_path(st, name);
		if (!dir_path)
			return -ENOMEM;
		if (!w->home_present && (r = unlink_if_present(fd, WS_HOME)) < 0)
			return r;
		if ((r = unlink_if_present(fd, WS_TMP_HOME)) < 0)
			return r;
		r = ws_home_create(st, fd, dir_path, WS_TMP_HOME, w->home_size);
		if (r < 0)
			return r;
		crash_point("prepare:after-home");
		if (renameat2(fd, WS_TMP_HOME, fd, WS_HOME, RENAME_NOREPLACE) < 0) {
			r = -errno;
			(void)unlinkat(fd, WS_TMP_HOME, 0);
			return r;
		}
		crash_point("prepare:after-rename-home");
		if (mkdirat(fd, WS_SSH, 0700) < 0 && errno != EEXIST)
			return -errno;
	}
	if (need_disk) {
		w->disk_present = true;
		w->disk_fresh = true;
		w->base_version = version;
	}
	if (need_home)
		w->home_present = true;
	/* A compromised workspace wiped of both: the fresh pair ends the quarantine, in the same
	 * write that records it (a crash before it leaves the mark and makes the pair again). */
	if (w->compromised && need_disk && need_home && !was_disk && !was_home) {
		w->compromised = false;
		w->compromised_at = 0;
		free(w->compromised_host);
		w->compromised_host = NULL;
	}
	r = ws_state_save_at(fd, w);
	if (r < 0)
		return r;
	crash_point("prepare:after-save");
	return 0;
}

/* ---- delete ---- */

struct drop_name_ctx {
	const char *name;
};

static int keep_other_names(const char *mac, const char *name, void *ud)
{
	return !streq(name, ((struct drop_name_ctx *)ud)->name);
}

int workspace_delete(struct workspace_store *st, const char *name)
{
	struct drop_name_ctx ctx = {name};
	char del[NAME_MAX + 1];
	int r;

	r = workspace_name_check(name);
	if (r < 0)
		return r;
	r = is_dir_at(st->dirfd, name);
	if (r <= 0)
		return r < 0 ? r : -ENOENT;

	/* It leaves every listing in one step; the rest is cleaning up, finished by the sweep. */
	for (int attempt = 0;; attempt++) {
		char suffix[8];

		if (attempt == 16)
			return -EEXIST;
		r = ws_random_suffix(suffix, sizeof(suffix));
		if (r < 0)
			return r;
		(void)snprintf(del, sizeof(del), DEL_PREFIX "%s-%s", name, suffix);
		if (renameat2(st->dirfd, name, st->dirfd, del, RENAME_NOREPLACE) == 0)
			break;
		if (errno != EEXIST)
			return -errno;
	}
	r = fs_fsync_dir(st->dirfd);
	if (r < 0)
		return r;
	crash_point("delete:after-rename");

	r = mac_sweep(st->dirfd, keep_other_names, &ctx);
	if (r < 0)
		return r;
	crash_point("delete:after-mac");

	r = ws_remove_at(st, st->dirfd, del);
	if (r < 0)
		return r;
	crash_point("delete:after-remove");
	return fs_fsync_dir(st->dirfd);
}

/* ---- usage ---- */

static int add_usage(struct workspace_store *st, int dirfd, const char *file,
                     struct storage_usage *sum)
{
	struct storage_usage u;
	int r;

	r = storage_file_usage(dirfd, file, &u);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	if (storage_get_kind(st->storage) == STORAGE_QCOW2 && streq(file, WS_DISK)) {
		uint64_t v = 0;

		/* A qcow2 disk: logical is the guest's size; what it does not hold is the base's. */
		if (qcow2_virtual_size(dirfd, file, &v) >= 0) {
			u.logical = v;
			u.shared = 0;
		}
	}
	sum->logical += u.logical;
	sum->physical += u.physical;
	sum->shared += u.shared;
	return 1;
}

int workspace_usage(struct workspace_store *st, const char *name, struct workspace_usage *ret)
{
	struct workspace_usage u = {0};
	_cleanup_close_ int fd = -1, cp = -1;
	char **names = NULL;
	size_t n = 0;
	int r;

	r = ws_open_dir(st, name, &fd);
	if (r < 0)
		return r;
	if ((r = add_usage(st, fd, WS_DISK, &u.disk)) < 0 ||
	    (r = add_usage(st, fd, WS_HOME, &u.home)) < 0)
		return r;
	r = ws_open_subdir(fd, WS_CHECKPOINTS, &cp);
	if (r >= 0)
		r = fs_list_names_at(cp, &names, &n);
	if (r == -ENOENT)
		r = 0;
	for (size_t i = 0; i < n && r >= 0; i++) {
		_cleanup_close_ int c = -1;

		if (names[i][0] == '.' || ws_open_subdir(cp, names[i], &c) < 0)
			continue;
		u.n_checkpoints++;
		if ((r = add_usage(st, c, WS_DISK, &u.checkpoints)) >= 0)
			r = add_usage(st, c, WS_HOME, &u.checkpoints);
	}
	fs_names_free(names, n);
	if (r < 0)
		return r;
	*ret = u;
	return 0;
}

/* ---- the sweep of one workspace ---- */

static int sweep_workspace(struct workspace_store *st, const char *name)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int fd = -1;
	char **names = NULL;
	size_t n = 0;
	bool changed = false;
	int r;

	r = ws_open_dir(st, name, &fd);
	if (r < 0)
		return r == -ENOENT ? 0 : r;

	/* Temporary files and directories of interrupted verbs. */
	r = fs_list_names_at(fd, &names, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n && r >= 0; i++)
		if (has_prefix(names[i], TMP_PREFIX) || has_prefix(names[i], DEL_PREFIX) ||
		    has_prefix(names[i], ATOMIC_TMP_PREFIX)) {
			log_debug("workspace %s sweep: removing %s", name, names[i]);
			r = ws_remove_at(st, fd, names[i]);
		}
	fs_names_free(names, n);
	if (r < 0)
		return r;

	r = load_at(fd, name, &w);
	if (r == -ENOENT)
		return 0; /* not a workspace we made: leave it alone */
	if (r < 0) {
		log_debug_errno(r, "workspace %s sweep: cannot load its state: %m", name);
		return 0;
	}

	workspace_free(TAKE_PTR(w));
	r = ws_checkpoint_sweep(st, name, fd);
	if (r < 0)
		return r;
	r = ws_settle(st, name, fd);
	if (r < 0)
		return r;
	/* A completed journal rewrote the state. */
	r = load_at(fd, name, &w);
	if (r < 0)
		return 0;

	/* workspace.json is the authority on which images exist. */
	r = exists_at(fd, WS_DISK);
	if (r < 0)
		return r;
	if (!w->disk_present && r > 0) {
		r = unlink_if_present(fd, WS_DISK); /* finish a reset */
		if (r < 0)
			return r;
	} else if (w->disk_present && r == 0) {
		w->disk_present = false; /* gone: the next start clones a fresh one */
		changed = true;
	}
	r = exists_at(fd, WS_HOME);
	if (r < 0)
		return r;
	if (!w->home_present && r > 0) {
		r = unlink_if_present(fd, WS_HOME);
		if (r < 0)
			return r;
	} else if (w->home_present && r == 0) {
		w->home_present = false;
		changed = true;
	}
	if (changed) {
		r = ws_state_save_at(fd, w);
		if (r < 0)
			return r;
	}
	return fs_fsync_dir(fd);
}

void workspace_share_guest_dir(const struct workspace *w, size_t i, char *buf, size_t len)
{
	const char *g = w->shares[i].guest_dir, *b;
	unsigned same = 0;

	if (g && g[0] == '/') {
		(void)snprintf(buf, len, "%s", g);
		return;
	}
	b = strrchr(w->shares[i].host_dir, '/');
	b = b && b[1] ? b + 1 : "host";
	for (size_t k = 0; k < i; k++) {
		const char *o = strrchr(w->shares[k].host_dir, '/'), *gk = w->shares[k].guest_dir;
		o = o && o[1] ? o + 1 : "host";
		if (!(gk && gk[0] == '/') && streq(o, b))
			same++;
	}
	if (same)
		(void)snprintf(buf, len, "~/%s-%u", b, same + 1);
	else
		(void)snprintf(buf, len, "~/%s", b);
}

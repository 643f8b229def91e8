/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Checkpoints: checkpoints/<id>/{disk.img,home.img,meta.json}, clones of the workspace's pair.
 * Built as checkpoints/.tmp-<id> and renamed into place; old ones are renamed to .del-<id> and
 * then deleted. A revert writes revert.json first, so that an interrupted revert is completed by
 * the sweep rather than leaving one new image beside one old one.
 */

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "workspace/crash.h"
#include "workspace/internal.h"

#define CHECKPOINT_NOTE_MAX 1024
#define CHECKPOINT_META_MAX (16u << 10)
#define CHECKPOINT_META_MEMBERS 6

struct cp_id {
	int64_t sec;
	uint32_t seq;
	char id[32];
};

/* Parses "<seconds>-<seq>" exactly as checkpoint_format_id() writes it. */
static int cp_id_parse(const char *s, struct cp_id *ret)
{
	struct cp_id c = {0};
	const char *p = s;
	uint64_t v = 0;
	size_t digits = 0;

	if (!s || strlen(s) >= sizeof(c.id))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++, digits++) {
		if (digits >= 18)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (digits == 0 || *p != '-')
		return -EINVAL;
	c.sec = (int64_t)v;
	v = 0;
	digits = 0;
	for (p++; isdigit((unsigned char)*p); p++, digits++) {
		if (digits >= 9)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (digits == 0 || *p != '\0')
		return -EINVAL;
	c.seq = (uint32_t)v;
	(void)snprintf(c.id, sizeof(c.id), "%s", s);
	*ret = c;
	return 0;
}

static void cp_id_format(int64_t sec, uint32_t seq, struct cp_id *ret)
{
	ret->sec = sec;
	ret->seq = seq;
	/* Fixed widths keep string order and time order the same for centuries. */
	(void)snprintf(ret->id, sizeof(ret->id), "%010" PRId64 "-%03" PRIu32, sec, seq);
}

/* Newest first. */
static int cp_id_cmp(const void *a, const void *b)
{
	const struct cp_id *x = a, *y = b;

	if (x->sec != y->sec)
		return x->sec > y->sec ? -1 : 1;
	if (x->seq != y->seq)
		return x->seq > y->seq ? -1 : 1;
	return 0;
}

/* The ids of the complete checkpoints in cp_fd, newest first. */
static int cp_ids(int cp_fd, struct cp_id **ret, size_t *ret_n)
{
	struct cp_id *ids = NULL;
	char **names = NULL;
	size_t n_names = 0, n = 0;
	int r;

	r = fs_list_names_at(cp_fd, &names, &n_names);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n_names; i++) {
		struct cp_id c, *nn;
		struct stat sb;

		if (cp_id_parse(names[i], &c) < 0)
			continue;
		if (fstatat(cp_fd, names[i], &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(sb.st_mode))
			continue;
		nn = reallocarray(ids, n + 1, sizeof(*ids));
		if (!nn) {
			r = -ENOMEM;
			break;
		}
		ids = nn;
		ids[n++] = c;
	}
	fs_names_free(names, n_names);
	if (r < 0) {
		free(ids);
		return r;
	}
	if (n > 1)
		qsort(ids, n, sizeof(*ids), cp_id_cmp);
	*ret = ids;
	*ret_n = n;
	return 0;
}

/* ---- meta.json ---- */

struct cp_meta {
	int64_t created;
	int64_t base_version;
	char *note;
};

static void cp_meta_done(struct cp_meta *m)
{
	free(m->note);
	m->note = NULL;
}

static int cp_meta_write(int fd, const struct cp_id *id, const struct workspace *w, int64_t created,
                         const char *note)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_free_ char *s = NULL;
	int r;

	if (!o)
		return -ENOMEM;
	if ((r = json_add_int64(o, "formatVersion", 1)) < 0 ||
	    (r = json_add_string(o, "id", id->id)) < 0 ||
	    (r = json_add_int64(o, "created", created)) < 0 ||
	    (r = note ? json_add_string(o, "note", note) : json_add(o, "note", NULL)) < 0 ||
	    (r = json_add_string(o, "image", w->image_id)) < 0 ||
	    (r = json_add_int64(o, "baseVersion", w->base_version)) < 0)
		return r;
	r = json_to_string_dup(o, true, &s);
	if (r < 0)
		return r;
	return fs_write_atomic_at(fd, WS_CHECKPOINT_META, s, strlen(s), 0600);
}

static int cp_meta_read(int fd, const char *id, struct cp_meta *ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *note;
	struct cp_meta m = {0};
	const char *s;
	int64_t version;
	int r;

	r = fs_read_file_at(fd, WS_CHECKPOINT_META, CHECKPOINT_META_MAX, &b);
	if (r == -EFBIG)
		return SLATE_ERR_TOO_LARGE;
	if (r < 0)
		return r;
	r = json_parse_object((const char *)buf_ptr(b), buf_len(b), CHECKPOINT_META_MAX, &o);
	if (r < 0)
		return r == SLATE_ERR_JSON_TYPE ? SLATE_ERR_INVALID_FORMAT : r;
	if (json_object_object_length(o) != CHECKPOINT_META_MEMBERS ||
	    json_get_int64(o, "formatVersion", &version) < 0 || version != 1 ||
	    json_get_string(o, "id", &s) < 0 || !streq(s, id) ||
	    json_get_int64(o, "created", &m.created) < 0 || json_get_string(o, "image", &s) < 0 ||
	    json_get_int64(o, "baseVersion", &m.base_version) < 0 ||
	    !json_object_object_get_ex(o, "note", &note))
		return SLATE_ERR_INVALID_FORMAT;
	if (note) {
		if (json_get_string(o, "note", &s) < 0 || strlen(s) > CHECKPOINT_NOTE_MAX)
			return SLATE_ERR_INVALID_FORMAT;
		m.note = strdup(s);
		if (!m.note)
			return -ENOMEM;
	}
	*ret = m;
	return 0;
}

void checkpoint_info_list_free(struct checkpoint_info *list, size_t n)
{
	if (!list)
		return;
	for (size_t i = 0; i < n; i++)
		free(list[i].note);
	free(list);
}

/* ---- list ---- */

int workspace_checkpoint_list(struct workspace_store *st, const char *name,
                              struct checkpoint_info **ret, size_t *ret_n)
{
	_cleanup_close_ int fd = -1, cp = -1;
	_cleanup_free_ struct cp_id *ids = NULL;
	struct checkpoint_info *list = NULL;
	size_t n = 0;
	int r;

	r = ws_open_dir(st, name, &fd);
	if (r < 0)
		return r;
	if (faccessat(fd, WS_STATE_FILE, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return -ENOENT;
	r = ws_open_subdir(fd, WS_CHECKPOINTS, &cp);
	if (r == -ENOENT) {
		*ret = NULL;
		*ret_n = 0;
		return 0;
	}
	if (r < 0)
		return r;
	r = cp_ids(cp, &ids, &n);
	if (r < 0)
		return r;
	if (n > 0) {
		list = calloc(n, sizeof(*list));
		if (!list)
			return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		_cleanup_close_ int c = -1;
		struct cp_meta m = {0};

		r = ws_open_subdir(cp, ids[i].id, &c);
		if (r >= 0)
			r = cp_meta_read(c, ids[i].id, &m);
		if (r < 0) {
			checkpoint_info_list_free(list, n);
			return r;
		}
		memcpy(list[i].id, ids[i].id, sizeof(list[i].id));
		list[i].created = m.created;
		/* What deleting it would free: its blocks that nothing else shares. */
		for (size_t k = 0; k < 2; k++) {
			struct storage_usage u;
			if (storage_file_usage(c, k ? WS_HOME : WS_DISK, &u) >= 0 &&
			    u.physical > u.shared)
				list[i].held += u.physical - u.shared;
		}
		list[i].note = TAKE_PTR(m.note);
	}
	*ret = list;
	*ret_n = n;
	return 0;
}

/* ---- create ---- */

/* Removes every checkpoint beyond the newest keep. */
static int cp_prune(struct workspace_store *st, int cp, size_t keep)
{
	_cleanup_free_ struct cp_id *ids = NULL;
	size_t n = 0;
	int r;

	r = cp_ids(cp, &ids, &n);
	if (r < 0)
		return r;
	for (size_t i = keep; i < n; i++) {
		char del[64];

		/* Gone from every listing at once, deleted after. */
		(void)snprintf(del, sizeof(del), ".del-%s", ids[i].id);
		r = ws_remove_at(st, cp, del);
		if (r < 0)
			return r;
		if (renameat(cp, ids[i].id, cp, del) < 0)
			return -errno;
		crash_point("checkpoint:after-prune-rename");
		r = ws_remove_at(st, cp, del);
		if (r < 0)
			return r;
	}
	return fs_fsync_dir(cp);
}

int workspace_checkpoint_create(struct workspace_store *st, const char *name, const char *note,
                                struct checkpoint_info *ret)
{
	return workspace_checkpoint_create_hooked(st, name, note, NULL, ret);
}

int workspace_checkpoint_create_hooked(struct workspace_store *st, const char *name,
                                       const char *note, const struct checkpoint_hooks *h,
                                       struct checkpoint_info *ret)
{
	bool paused = false;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_close_ int fd = -1, cp = -1, t = -1;
	_cleanup_free_ struct cp_id *ids = NULL;
	_cleanup_free_ char *note_copy = NULL;
	struct cp_id id;
	char tmp[64];
	size_t n = 0;
	int64_t now;
	int r;

	if (note && strlen(note) > CHECKPOINT_NOTE_MAX)
		return -EINVAL;
	r = ws_open_settled(st, name, &fd, &w);
	if (r < 0)
		return r;
	/* Nothing to keep while an image is missing (after a reset or a wipe). */
	if (!w->disk_present || !w->home_present ||
	    faccessat(fd, WS_DISK, F_OK, AT_SYMLINK_NOFOLLOW) < 0 ||
	    faccessat(fd, WS_HOME, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return -ENOENT;
	if (mkdirat(fd, WS_CHECKPOINTS, 0700) < 0 && errno != EEXIST)
		return -errno;
	r = ws_open_subdir(fd, WS_CHECKPOINTS, &cp);
	if (r < 0)
		return r;

	/* Ids only grow, even when the clock steps back. */
	r = cp_ids(cp, &ids, &n);
	if (r < 0)
		return r;
	now = ws_now();
	if (n > 0 && ids[0].sec >= now)
		cp_id_format(ids[0].sec, ids[0].seq + 1, &id);
	else
		cp_id_format(now, 0, &id);
	if (note) {
		note_copy = strdup(note);
		if (!note_copy)
			return -ENOMEM;
	}

	(void)snprintf(tmp, sizeof(tmp), ".tmp-%s", id.id);
	r = ws_remove_at(st, cp, tmp);
	if (r < 0)
		return r;
	if (mkdirat(cp, tmp, 0700) < 0)
		return -errno;
	r = ws_open_subdir(cp, tmp, &t);
	if (r < 0)
		goto fail;
	if (h && h->pause) {
		r = h->pause(h->userdata);
		if (r < 0)
			goto fail;
		paused = true;
	}
	r = storage_clone_plain(st->storage, fd, WS_DISK, t, WS_DISK, 0600);
	if (r < 0)
		goto fail;
	crash_point("checkpoint:after-clone-disk");
	r = storage_clone_plain(st->storage, fd, WS_HOME, t, WS_HOME, 0600);
	if (r < 0)
		goto fail;
	if (paused) {
		h->resume(h->userdata);
		paused = false;
	}
	crash_point("checkpoint:after-clone-home");
	r = cp_meta_write(t, &id, w, now, note);
	if (r < 0)
		goto fail;
	crash_point("checkpoint:after-meta");
	t = safe_close(t);
	if (renameat2(cp, tmp, cp, id.id, RENAME_NOREPLACE) < 0) {
		r = -errno;
		goto fail;
	}
	r = fs_fsync_dir(cp);
	if (r < 0)
		return r;
	crash_point("checkpoint:after-rename");

	r = cp_prune(st, cp, WORKSPACE_CHECKPOINTS_KEEP);
	if (r < 0)
		return r;
	crash_point("checkpoint:after-prune");

	if (ret) {
		memset(ret, 0, sizeof(*ret));
		memcpy(ret->id, id.id, sizeof(ret->id));
		ret->created = now;
		ret->note = TAKE_PTR(note_copy);
	}
	return 0;

fail:
	if (paused)
		h->resume(h->userdata);
	t = safe_close(t);
	(void)ws_remove_at(st, cp, tmp);
	return r;
}

/* ---- revert ---- */

/* Clones checkpoint id's pair over disk.img and home.img; what a revert journal asks for. */
static int revert_finish(struct workspace_store *st, int fd, const char *name, const char *id,
                         bool system_only, bool *ret_started)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_(cp_meta_done) struct cp_meta m = {0};
	_cleanup_close_ int cp = -1, c = -1;
	int r;

	r = ws_open_subdir(fd, WS_CHECKPOINTS, &cp);
	if (r >= 0)
		r = ws_open_subdir(cp, id, &c);
	if (r >= 0)
		r = cp_meta_read(c, id, &m);
	if (r < 0)
		return r;

	if ((r = ws_remove_at(st, fd, WS_TMP_DISK)) < 0 ||
	    (r = ws_remove_at(st, fd, WS_TMP_HOME)) < 0)
		return r;
	r = storage_clone_plain(st->storage, c, WS_DISK, fd, WS_TMP_DISK, 0600);
	if (r < 0)
		goto fail;
	crash_point("revert:after-clone-disk");
	if (!system_only) {
		r = storage_clone_plain(st->storage, c, WS_HOME, fd, WS_TMP_HOME, 0600);
		if (r < 0)
			goto fail;
	}
	crash_point("revert:after-clone-home");
	if (renameat(fd, WS_TMP_DISK, fd, WS_DISK) < 0) {
		r = -errno;
		goto fail;
	}
	*ret_started = true;
	crash_point("revert:after-rename-disk");
	if (!system_only && renameat(fd, WS_TMP_HOME, fd, WS_HOME) < 0) {
		r = -errno;
		goto fail;
	}
	crash_point("revert:after-rename-home");
	r = fs_fsync_dir(fd);
	if (r < 0)
		return r;

	r = ws_state_load_at(fd, &w);
	if (r < 0)
		return r;
	if (!streq(w->name, name))
		return SLATE_ERR_INVALID_FORMAT;
	w->disk_present = true;
	w->disk_fresh = false;
	if (!system_only)
		w->home_present = true;
	w->base_version = m.base_version;
	r = ws_state_save_at(fd, w);
	if (r < 0)
		return r;
	crash_point("revert:after-save");
	return 0;

fail:
	/* The journal stays: the next sweep tries again. */
	(void)unlinkat(fd, WS_TMP_DISK, 0);
	(void)unlinkat(fd, WS_TMP_HOME, 0);
	return r;
}

static int revert_journal_write(int fd, const char *id, bool system_only)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_free_ char *s = NULL;
	int r;

	if (!o)
		return -ENOMEM;
	if ((r = json_add_int64(o, "formatVersion", 1)) < 0 ||
	    (r = json_add_string(o, "checkpoint", id)) < 0 ||
	    (r = json_add_bool(o, "systemOnly", system_only)) < 0)
		return r;
	r = json_to_string_dup(o, true, &s);
	if (r < 0)
		return r;
	return fs_write_atomic_at(fd, WS_REVERT_JOURNAL, s, strlen(s), 0600);
}

static int revert_journal_read(int fd, struct cp_id *ret, bool *ret_system_only)
{
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	const char *s;
	int64_t version;
	int r;

	r = fs_read_file_at(fd, WS_REVERT_JOURNAL, WS_JOURNAL_MAX_SIZE, &b);
	if (r == -EFBIG)
		return SLATE_ERR_TOO_LARGE;
	if (r < 0)
		return r;
	r = json_parse_object((const char *)buf_ptr(b), buf_len(b), WS_JOURNAL_MAX_SIZE, &o);
	if (r < 0)
		return r == SLATE_ERR_JSON_TYPE ? SLATE_ERR_INVALID_FORMAT : r;
	/* systemOnly is absent from journals written before it existed. */
	*ret_system_only = false;
	r = json_get_bool(o, "systemOnly", ret_system_only);
	if ((r < 0 && r != -ENOENT) || json_object_object_length(o) != (r < 0 ? 2 : 3) ||
	    json_get_int64(o, "formatVersion", &version) < 0 || version != 1 ||
	    json_get_string(o, "checkpoint", &s) < 0 || cp_id_parse(s, ret) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	return 0;
}

static int journal_done(int fd)
{
	if (unlinkat(fd, WS_REVERT_JOURNAL, 0) < 0 && errno != ENOENT)
		return -errno;
	return fs_fsync_dir(fd);
}

int workspace_checkpoint_revert(struct workspace_store *st, const char *name, const char *id,
                                bool system_only)
{
	_cleanup_(cp_meta_done) struct cp_meta m = {0};
	_cleanup_close_ int fd = -1, cp = -1, c = -1;
	struct cp_id cid;
	bool started = false;
	int r;

	if (cp_id_parse(id, &cid) < 0)
		return -EINVAL;
	r = ws_open_dir(st, name, &fd);
	if (r < 0)
		return r;
	if (faccessat(fd, WS_STATE_FILE, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return -ENOENT;
	r = ws_settle(st, name, fd);
	if (r < 0)
		return r;
	r = ws_open_subdir(fd, WS_CHECKPOINTS, &cp);
	if (r >= 0)
		r = ws_open_subdir(cp, cid.id, &c);
	if (r == -ENOTDIR || r == -ELOOP)
		r = -ENOENT;
	if (r < 0)
		return r;
	/* Everything the revert needs is checked before the journal commits to it. */
	r = cp_meta_read(c, cid.id, &m);
	if (r < 0)
		return r;
	if (faccessat(c, WS_DISK, F_OK, AT_SYMLINK_NOFOLLOW) < 0 ||
	    faccessat(c, WS_HOME, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return -ENOENT;

	r = revert_journal_write(fd, cid.id, system_only);
	if (r < 0)
		return r;
	crash_point("revert:after-journal");
	r = revert_finish(st, fd, name, cid.id, system_only, &started);
	if (r < 0) {
		/* Nothing replaced yet (a clone failed, e.g. ENOSPC): the old state stays. Otherwise
		 * the journal stays too, and the next sweep completes the revert. */
		if (!started)
			(void)journal_done(fd);
		return r;
	}
	r = journal_done(fd);
	if (r < 0)
		return r;
	crash_point("revert:after-done");
	return 0;
}

/* ---- sweep ---- */

int ws_checkpoint_sweep(struct workspace_store *st, const char *name, int ws_fd)
{
	_cleanup_close_ int cp = -1;
	int r;

	r = ws_open_subdir(ws_fd, WS_CHECKPOINTS, &cp);
	if (r >= 0) {
		/* Half-built and half-deleted checkpoints. */
		char **names = NULL;
		size_t n = 0;

		r = fs_list_names_at(cp, &names, &n);
		if (r < 0)
			return r;
		for (size_t i = 0; i < n && r >= 0; i++) {
			if (!strneq(names[i], ".tmp-", 5) && !strneq(names[i], ".del-", 5) &&
			    !strneq(names[i], ".#", 2))
				continue;
			log_debug("workspace %s sweep: removing checkpoints/%s", name, names[i]);
			r = ws_remove_at(st, cp, names[i]);
		}
		fs_names_free(names, n);
		if (r < 0)
			return r;
		/* A checkpoint made just before a crash may not have pruned the oldest yet. */
		r = cp_prune(st, cp, WORKSPACE_CHECKPOINTS_KEEP);
		if (r < 0)
			return r;
	} else if (r != -ENOENT) {
		return r;
	}

	return 0;
}

int ws_revert_complete(struct workspace_store *st, const char *name, int ws_fd)
{
	bool started = false, system_only = false;
	struct cp_id cid;
	int r;

	r = revert_journal_read(ws_fd, &cid, &system_only);
	if (r == -ENOENT)
		return 0;
	if (r < 0) {
		/* Written atomically, so this is not a torn write; do not guess at its meaning. */
		log_debug_errno(r, "workspace %s: unreadable %s: %m", name, WS_REVERT_JOURNAL);
		return r;
	}
	log_debug("workspace %s: completing the revert to checkpoint %s", name, cid.id);
	r = revert_finish(st, ws_fd, name, cid.id, system_only, &started);
	if (r == -ENOENT && !started) {
		/* The checkpoint is gone (it cannot be, but never loop on it): keep what is there. */
		log_debug("workspace %s: checkpoint %s is gone; dropping the revert", name, cid.id);
	} else if (r < 0) {
		return r;
	}
	return journal_done(ws_fd);
}

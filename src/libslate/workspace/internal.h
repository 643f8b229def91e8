/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Shared between the workspace module's files; not for callers outside workspace/. */

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "storage/storage.h"
#include "workspace/workspace.h"

#define WS_STATE_FILE WORKSPACE_STATE_FILE
#define WS_STATE_MAX_SIZE (1u << 20)
#define WS_DISK WORKSPACE_DISK
#define WS_HOME WORKSPACE_HOME
#define WS_CHECKPOINTS WORKSPACE_CHECKPOINTS
#define WS_SSH WORKSPACE_SSH_DIR
#define WS_LOCKS_DIR ".locks"
/* Per-size home templates (home.c); never a workspace, never swept as a half-made one. */
#define WS_HOME_TEMPLATES ".home-templates"
/* Journals of the two verbs that change more than one object. */
#define WS_REVERT_JOURNAL "revert.json"
#define WS_WIPE_JOURNAL "wipe-home.json"
/* Temporary names inside a workspace directory; the sweep removes any it finds. */
#define WS_TMP_DISK ".tmp-disk.img"
#define WS_TMP_HOME ".tmp-home.img"
#define WS_DEL_SSH ".del-ssh"
#define WS_CHECKPOINT_META "meta.json"
#define WS_MAX_SHARES 64
#define WS_JOURNAL_MAX_SIZE 4096

struct workspace_store {
	struct storage *storage; /* borrowed */
	int dirfd;               /* storage_workspaces_fd(), borrowed */
	int locks_fd;            /* <workspaces>/.locks, owned */
	struct workspace_hooks hooks;
};

/* state.c */
int ws_state_to_json(const struct workspace *w, char **ret);
int ws_state_from_json(const char *data, size_t len, struct workspace **ret);
/* Reads <dir_fd>/workspace.json; -ENOENT when missing. */
int ws_state_load_at(int dir_fd, struct workspace **ret);
int ws_state_save_at(int dir_fd, const struct workspace *w);
int ws_random_suffix(char *ret, size_t size);
int64_t ws_now(void);

/*
 * home.c: makes dir_fd/name a sparse ext4 of size bytes with a skeleton home for uid 1000: a
 * clone of the store's template for that size (made the first time, with mke2fs), or on qcow2
 * storage a fresh mke2fs. dir_path is dir_fd's path (mke2fs takes a path). Leaves nothing behind
 * on failure but, possibly, a new template.
 */
int ws_home_create(struct workspace_store *st, int dir_fd, const char *dir_path, const char *name,
                   uint64_t size);

/*
 * The same in two halves, so that mke2fs (when a template must be made, or on qcow2) runs while
 * the caller clones the system disk. ws_home_start() leaves *job running; exactly one of
 * ws_home_finish() (waits, returns ws_home_create()'s result) or ws_home_abort() (kills, cleans
 * up) must follow.
 */
struct ws_home_job {
	int dir_fd;              /* borrowed: where the home goes */
	char name[NAME_MAX + 1]; /* its name there */
	struct storage *storage; /* borrowed */
	uint64_t size;
	int work_fd;  /* owned: the templates' directory; -1 on qcow2 (dir_fd is used) */
	char tpl[64]; /* the template's name; "" on qcow2 */
	char target[NAME_MAX + 1]; /* what mke2fs makes in the work directory */
	bool made;                 /* target exists and is ours to remove */
	char skel[32];             /* the skeleton directory next to target, "" when none */
	char *image;               /* target's path, for mke2fs */
	pid_t pid;                 /* mke2fs; -1 when none runs (the home was cloned already) */
	int errfd;                 /* mke2fs's stderr (a memfd) */
};
int ws_home_start(struct workspace_store *st, int dir_fd, const char *dir_path, const char *name,
                  uint64_t size, struct ws_home_job *job);
int ws_home_finish(struct ws_home_job *job);
void ws_home_abort(struct ws_home_job *job);
/*
 * Removes from <workspaces>/.home-templates what a crash while making a template left, templates
 * of an older recipe, and templates of sizes that are neither the default nor in keep (the home
 * sizes of the existing workspaces).
 */
int ws_home_templates_sweep(struct workspace_store *st, const uint64_t *keep, size_t n_keep);

/* checkpoint.c */
/* Removes what an interrupted checkpoint create or prune left in ws_fd's checkpoints/. */
int ws_checkpoint_sweep(struct workspace_store *st, const char *name, int ws_fd);
/* Completes a revert whose journal exists in ws_fd (idempotent); 0 when there is none. */
int ws_revert_complete(struct workspace_store *st, const char *name, int ws_fd);

/* workspace.c */
int ws_open_dir(struct workspace_store *st, const char *name, int *ret_fd);
/* Takes an exclusive flock on dirfd/name (created 0600 if missing), waiting for it; the held fd
 * in *ret_fd. */
int ws_lock_wait_at(int dirfd, const char *name, int *ret_fd);
/* Opens a directory below dirfd for reading/writing entries (not O_PATH). */
int ws_open_subdir(int dirfd, const char *name, int *ret_fd);
/* Removes a file or a whole directory tree (through storage_delete_dir); ENOENT is fine. */
int ws_remove_at(struct workspace_store *st, int dirfd, const char *name);
/* Completes a wipe-home or a revert whose journal exists in fd, before any other verb. */
int ws_settle(struct workspace_store *st, const char *name, int fd);
/* ws_open_dir, ws_settle, then the state: what a verb that changes the workspace starts with. */
int ws_open_settled(struct workspace_store *st, const char *name, int *ret_fd,
                    struct workspace **ret);
/* Clones the workspace's image disk to dir_fd/name and returns the image's version. */
int ws_clone_base(struct workspace_store *st, const char *image_id, int dir_fd, const char *name,
                  int64_t *ret_version);

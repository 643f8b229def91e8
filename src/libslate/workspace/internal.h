/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Shared between the workspace module's files; not for callers outside workspace/. */

#include <stdbool.h>
#include <stdint.h>

#include "storage/storage.h"
#include "workspace/workspace.h"

#define WS_STATE_FILE "workspace.json"
#define WS_STATE_MAX_SIZE (1u << 20)
#define WS_DISK "disk.img"
#define WS_HOME "home.img"
#define WS_CHECKPOINTS "checkpoints"
#define WS_SSH "ssh"
#define WS_LOCKS_DIR ".locks"
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
};

/* state.c */
int ws_state_to_json(const struct workspace *w, char **ret);
int ws_state_from_json(const char *data, size_t len, struct workspace **ret);
/* Reads <dir_fd>/workspace.json; -ENOENT when missing. */
int ws_state_load_at(int dir_fd, struct workspace **ret);
int ws_state_save_at(int dir_fd, const struct workspace *w);
int ws_uuid_v4(char ret[37]);
int ws_random_suffix(char *ret, size_t size);
int64_t ws_now(void);

/* workspace.c: the entry names of dirfd (all but "." and ".."), unsorted; free with
 * ws_names_free(). */
int ws_list_names(int dirfd, char ***ret, size_t *ret_n);
void ws_names_free(char **names, size_t n);

/* home.c: makes dir_fd/name a sparse ext4 of size bytes with a skeleton home for uid 1000.
 * dir_path is dir_fd's path (mke2fs takes a path). Leaves nothing behind on failure. */
int ws_home_create(int dir_fd, const char *dir_path, const char *name, uint64_t size);

/*
 * The same in two halves, so that mke2fs (most of a create's time) runs while the caller clones
 * the system disk. ws_home_start() leaves *job running; exactly one of ws_home_finish() (waits,
 * returns ws_home_create()'s result) or ws_home_abort() (kills, cleans up) must follow.
 */
struct ws_home_job {
	int dir_fd; /* borrowed */
	char name[64];
	char skel[32];
	char *image;
	pid_t pid;
	int errfd;
};
int ws_home_start(int dir_fd, const char *dir_path, const char *name, uint64_t size,
                  struct ws_home_job *job);
int ws_home_finish(struct ws_home_job *job);
void ws_home_abort(struct ws_home_job *job);

/* checkpoint.c */
/* Removes what an interrupted checkpoint create or prune left in ws_fd's checkpoints/. */
int ws_checkpoint_sweep(struct workspace_store *st, const char *name, int ws_fd);
/* Completes a revert whose journal exists in ws_fd (idempotent); 0 when there is none. */
int ws_revert_complete(struct workspace_store *st, const char *name, int ws_fd);

/* workspace.c */
int ws_open_dir(struct workspace_store *st, const char *name, int *ret_fd);
/* Opens a directory below dirfd for reading/writing entries (not O_PATH). */
int ws_open_subdir(int dirfd, const char *name, int *ret_fd);
/* Removes a file or a whole directory tree (through storage_delete_dir); ENOENT is fine. */
int ws_remove_at(struct workspace_store *st, int dirfd, const char *name);
/* Completes a wipe-home or a revert whose journal exists in fd, before any other verb. */
int ws_settle(struct workspace_store *st, const char *name, int fd);
/* Clones the workspace's image disk to dir_fd/name and returns the image's version. */
int ws_clone_base(struct workspace_store *st, const char *image_id, int dir_fd, const char *name,
                  int64_t *ret_version);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Workspaces: <workspaces>/<name>/ holds disk.img (a clone of the base), home.img (a sparse
 * ext4 of its own), workspace.json, secrets.enc, checkpoints/<id>/ and ssh/. A workspace
 * directory is the unit of everything (a btrfs subvolume where storage allows).
 *
 * Crash safety: every verb moves from the old state to the new one by renames of fully built
 * temporary objects (".tmp-*" to create, ".del-*" to delete), so that a kill -9 at any point
 * leaves the old state or the new one. workspace_store_open() sweeps the leftovers: half-made
 * workspaces vanish, half-deleted ones finish going, MAC reservations without a workspace are
 * freed, an interrupted checkpoint revert is completed. No verb ever touches a host share.
 *
 * Crash points for tests: when the environment variable SLATE_CRASH_POINT equals a point's
 * name ("create:after-clone", ...; doc/crash-points.md lists them), the process kills itself
 * with SIGKILL there.
 *
 * Verbs on one workspace are serialised by workspace_lock(); different workspaces proceed in
 * parallel. Functions return >= 0 or -errno/slate_err; outputs untouched on failure.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "storage/storage.h"
#include "util/macro.h"
#include "workspace/layout.h"

#define WORKSPACE_CHECKPOINTS_KEEP 5
#define WORKSPACE_DEFAULT_MEMORY_MIB 2048
#define WORKSPACE_DEFAULT_CPUS 2
#define WORKSPACE_DEFAULT_HOME_SIZE (64ull << 30)

struct workspace_share {
	char *host_dir;
	char *guest_dir;
	bool readonly;
	uid_t uid; /* host_dir's owner when it was shared; (uid_t)-1 in records made before */
};

struct workspace {
	char *name;
	uid_t owner;
	char uuid[37];
	char *image_id;
	int64_t base_version; /* the image version disk.img was cloned from */
	uint64_t memory_mib;
	unsigned cpus;
	uint64_t home_size;
	struct workspace_share *shares;
	size_t n_shares;
	char mac[18]; /* 52:54:00:xx:xx:xx, reserved in the registry */
	int64_t created;
	int64_t last_used;
	bool compromised;
	int64_t compromised_at;
	char *compromised_host;
	bool disk_present; /* false after reset: the next start clones a fresh disk */
	bool home_present; /* false after wipe-home: the next start makes a fresh home */
	bool disk_fresh;   /* disk.img is a clone of the base no guest has run on yet (made by
	                    * create or by a start after reset): a start may restore a booted
	                    * snapshot of the base instead (doc/vm.md) */
	bool ephemeral;    /* made by `slate run --rm`: deleted when its run ends, or by slated
	                    * when it starts and finds it (the run that owned it is gone) */
};

struct workspace_create_args {
	const char *name;
	uid_t owner;
	const char *image_id;
	uint64_t memory_mib; /* 0: default */
	unsigned cpus;       /* 0: default */
	uint64_t home_size;  /* 0: default */
	const struct workspace_share *shares;
	size_t n_shares;
	bool ephemeral;
};

struct workspace_usage {
	struct storage_usage disk;
	struct storage_usage home;
	struct storage_usage checkpoints; /* summed */
	unsigned n_checkpoints;
};

struct checkpoint_info {
	char id[32]; /* sortable: "<unix seconds>-<seq>" */
	int64_t created;
	char *note;    /* may be NULL */
	uint64_t held; /* bytes only this checkpoint holds (not shared with anything), or 0 */
};

struct workspace_store;

/* What the store asks of the modules above it (it includes none of their headers). */
struct workspace_hooks {
	/*
	 * wipe-home: keeps the SSH keys the user imported in the workspace's ssh/ directory
	 * (ws_dirfd: the workspace's directory) and drops the rest. Returns how many it kept (the
	 * directory then stays), 0 to have the directory removed, or < 0. NULL: none are kept.
	 * slated passes agent_keys_keep_imported() (agent/keys.h).
	 */
	int (*keep_ssh_keys)(int ws_dirfd);
};

/* Opens the store on s (borrowed; must outlive the store) with hooks (copied; may be NULL) and
 * runs the crash sweep, which may finish a wipe-home and so needs them already. */
int workspace_store_open(struct storage *s, const struct workspace_hooks *hooks,
                         struct workspace_store **ret);
void workspace_store_free(struct workspace_store *st);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct workspace_store *, workspace_store_free);

void workspace_free(struct workspace *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct workspace *, workspace_free);
void workspace_list_free(struct workspace **list, size_t n);

/* Takes the workspace's lock (blocking). The lock is released by closing *ret_fd. */
int workspace_lock(struct workspace_store *st, const char *name, int *ret_fd);

/*
 * Creates a workspace: clones the image's disk, makes a sparse ext4 home (mke2fs -t ext4
 * -E root_owner=1000:1000, a skeleton home), reserves a MAC, writes workspace.json; then
 * renames it into place. -EEXIST for a duplicate name, -ENOENT when the image is missing,
 * -ENOSPC with nothing left behind when the filesystem fills.
 */
int workspace_create(struct workspace_store *st, const struct workspace_create_args *a,
                     struct workspace **ret);
/*
 * Whether the workspace is quarantined: caught leaking a placeholder and not yet wiped. Wiping
 * (no disk.img and no home.img left) ends it; workspace_prepare clears the mark in the same
 * write that records the fresh disk and home.
 */
static inline bool workspace_quarantined(const struct workspace *w)
{
	return w->compromised && (w->disk_present || w->home_present);
}
/* Loads workspace.json. -ENOENT when there is no such workspace. */
int workspace_load(struct workspace_store *st, const char *name, struct workspace **ret);
/* Every workspace, sorted by name (callers filter by owner). */
int workspace_list(struct workspace_store *st, struct workspace ***ret, size_t *ret_n);
/* Writes workspace.json atomically. */
int workspace_save(struct workspace_store *st, const struct workspace *w);
/*
 * Marks the workspace compromised: a placeholder was sent to host (at now), persisted before
 * this returns. The caller holds the workspace's lock. Returns 1 when newly marked, 0 when it was
 * already (the first host and time are kept), or < 0.
 */
int workspace_mark_compromised(struct workspace_store *st, const char *name, const char *host);

/* Reset to base: deletes disk.img; home, secrets, keys and shares stay. */
int workspace_reset(struct workspace_store *st, const char *name);
/* Deletes home.img and ssh/ (the generated key pair). */
int workspace_wipe_home(struct workspace_store *st, const char *name);
/* Reset and wipe-home as one step: a crash leaves the workspace as it was or both done. */
int workspace_wipe(struct workspace_store *st, const char *name);
/* Before a start: clones a fresh disk.img / makes a fresh home.img when missing. */
int workspace_prepare(struct workspace_store *st, const char *name);
/* Deletes the whole workspace directory and frees its MAC. */
int workspace_delete(struct workspace_store *st, const char *name);
/* Where share i appears in the guest: its guest_dir, or "~/<basename>" (of the workspace user)
 * with "-2", "-3"... added when an earlier default share has the same basename. */
void workspace_share_guest_dir(const struct workspace *w, size_t i, char *buf, size_t len);
/* A random (version 4) UUID, lower-case: a workspace's, a domain's. */
int workspace_uuid_v4(char ret[37]);
/* Path of the workspace directory (for libvirt), newly allocated. */
char *workspace_dir_path(struct workspace_store *st, const char *name);

int workspace_usage(struct workspace_store *st, const char *name, struct workspace_usage *ret);

/* Clones disk.img + home.img into checkpoints/<id>/ atomically, keeps the newest
 * WORKSPACE_CHECKPOINTS_KEEP. */
int workspace_checkpoint_create(struct workspace_store *st, const char *name, const char *note,
                                struct checkpoint_info *ret);
/* Called around the two clones of a checkpoint (a running domain is paused for just that long);
 * resume is called whenever pause succeeded, also on failure. */
struct checkpoint_hooks {
	int (*pause)(void *userdata);
	void (*resume)(void *userdata);
	void *userdata;
};
int workspace_checkpoint_create_hooked(struct workspace_store *st, const char *name,
                                       const char *note, const struct checkpoint_hooks *h,
                                       struct checkpoint_info *ret);
/* Newest first. */
int workspace_checkpoint_list(struct workspace_store *st, const char *name,
                              struct checkpoint_info **ret, size_t *ret_n);
void checkpoint_info_list_free(struct checkpoint_info *list, size_t n);
/* Replaces disk.img and home.img by the checkpoint's pair, as one step; with system_only just
 * disk.img (home.img stays). */
int workspace_checkpoint_revert(struct workspace_store *st, const char *name, const char *id,
                                bool system_only);

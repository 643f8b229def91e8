/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Booted snapshots (daemon/snapshot.c, doc/vm.md "Starts from a booted snapshot"): for an image
 * and a shape (memory, vCPUs), a pristine clone of the base booted once to slate-guest's ready
 * line, with no workspace identity, and saved (memory and device state) with its disk exactly as
 * it stood. A fresh workspace's start restores it into the workspace's own domain instead of
 * booting, then slate-guest takes on the workspace's identity (daemon_guest_identity).
 *
 * They live in the image store beside the image: <images>/<id>/snapshots/<key>/ with disk.img,
 * state.sav (libvirt's save image, its stream aligned for clones) and snapshot.json. The key
 * is a digest of everything a restore must match: the image (id, version, digest), the shape,
 * the accelerator, the disk format and I/O mode, the domain template, the libvirt and QEMU
 * versions and slate's own. A change of any makes another key; removing the image removes them.
 */

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"
#include "vm/lifecycle.h"

struct daemon_ctx;
struct image_info;
struct workspace;

#define SNAPSHOT_KEY_LEN 16
#define SNAPSHOT_DOMAIN_PREFIX "slate.snapshot-"

/* slate.conf's boot-snapshots. */
enum snapshot_mode {
	SNAPSHOT_AUTO, /* use them; make one in the background after a cold start that lacked it */
	SNAPSHOT_USE,  /* use the ones made (slate image snapshot); never make one unasked */
	SNAPSHOT_OFF,  /* always boot cold */
};
int snapshot_mode_parse(const char *s, enum snapshot_mode *ret);
const char *snapshot_mode_name(enum snapshot_mode m);

struct snapshot_made {
	char key[SNAPSHOT_KEY_LEN + 1];
	bool existed;   /* it was there already: nothing was made */
	double boot_s;  /* booting the base to its ready line */
	double save_s;  /* saving its state */
	double total_s; /* the whole job */
	uint64_t state_bytes;
};

/*
 * Makes the booted snapshot of image_id for a workspace of memory_mib and cpus, reporting
 * progress (may be NULL). Takes a slot of the host's limits while its guest runs. -EBUSY when
 * another is making the same one; -EOPNOTSUPP when this host's starts cannot restore one (a
 * vsock channel). Returns 0 with *ret filled, or < 0 with err saying why.
 */
int daemon_snapshot_make(struct daemon_ctx *d, const char *image_id, uint64_t memory_mib,
                         unsigned cpus, vm_progress_fn progress, void *userdata,
                         struct snapshot_made *ret, struct slate_error *err);

/* Makes it in a thread of its own, once; logs what became of it. For boot-snapshots = auto. */
void daemon_snapshot_make_later(struct daemon_ctx *d, const char *image_id, uint64_t memory_mib,
                                unsigned cpus);

/* Whether a start of w can restore a snapshot: 0 when it can, else < 0 with why (a short
 * reason for the log). */
int daemon_snapshot_usable(struct daemon_ctx *d, const struct workspace *w, const char **why);

/*
 * The snapshots of image_id as a JSON array (util/json.h: struct json_object *), each its
 * snapshot.json: {"key","image","image_version","memory_mib","cpus","accelerator","disk_io",
 * "made","state_bytes","boot_s","save_s"}.
 */
struct json_object;
int daemon_snapshot_list(struct daemon_ctx *d, const char *image_id, struct json_object **ret);

/* Removes what an interrupted making left: its domain, its staging directory. */
void daemon_snapshot_sweep(struct daemon_ctx *d);

/* slated is stopping: no snapshot is made from now on, and the ones being made (in the
 * background or for a request) are cut short, their domains destroyed and their staging
 * directories removed; returns once they are gone (15 s at most). */
void daemon_snapshot_stop(struct daemon_ctx *d);

/*
 * A start's restore (daemon/start.c): with c the workspace's domain settings (c->disk its
 * disk.img), finds the snapshot it can use (-ENOENT when there is none), replaces disk.img with
 * a clone of the snapshot's disk, and writes save_path, the snapshot's state with c's XML
 * (*ret_xml). On failure disk.img is as it was, or missing when replacing it failed half-way.
 */
struct vm_config;
struct image_info;
int daemon_snapshot_prepare(struct daemon_ctx *d, const struct image_info *img,
                            const struct vm_config *c, const char *template_text,
                            const char *save_path, char **ret_xml,
                            char ret_key[SNAPSHOT_KEY_LEN + 1], struct slate_error *err);

/*
 * slate-guest --identity in the workspace's guest: host entropy into its RNG, the host's time,
 * its home mounted, its hostname (the workspace's name) and a new machine-id. Waits for the
 * guest agent up to timeout_ms. 0, or < 0 with err saying why.
 */
int daemon_guest_identity(struct daemon_ctx *d, const char *name, unsigned timeout_ms,
                          struct slate_error *err);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Postinstall steps: the signed shell commands a catalog image carries, run once per installed
 * base, in seq order, as root, on a copy-on-write clone of the base, inside a short-lived
 * installer VM. Only when every step exits 0 is the clone installed in the image store (one
 * atomic rename, version + 1); otherwise the base stays exactly as it was and the failing step's
 * output says why.
 *
 * The installer VM is a transient libvirt domain ("slate.install-<id>-<random>", so that
 * workspace code never takes it for a workspace's "slate-*" domain): the installer kernel and
 * initramfs (the test image's; its /init has an installer mode, images/test/initramfs-init)
 * booted directly with "slate.install" on the command line, the clone as vda, a small read-only
 * ext4 as vdb carrying the steps (made with mke2fs -d), no network interface, the serial console
 * written to a file. /init mounts the clone's root file system, chroots into it for each step and
 * prints the step's output between markers that carry a random nonce of this run:
 *
 *   SLATE-INSTALL-BEGIN <nonce>
 *   SLATE-STEP-BEGIN <nonce> <uuid>
 *   ...the step's output (stdout and stderr)...
 *   SLATE-STEP-END <nonce> <uuid> rc=<exit status>
 *   ...
 *   SLATE-INSTALL-END <nonce> ok|failed|timeout
 *   SLATE-INSTALL-ERROR <nonce> <message>        (the installer itself could not go on)
 *
 * slated reads the console file as it grows (postinstall_log_*, a strict bounded parser: the
 * guest's output is untrusted bytes) and decides: success needs every step's BEGIN and END, in
 * order, each with rc=0, then END ok, and the domain gone.
 *
 * Where the installer comes from (doc/catalog.md): <state>/installer/{vmlinuz,initrd.img} when
 * present, else SLATE_DATA_DIR/installer/. The slate-guest binary offered to the steps (at
 * /run/slate-install/slate-guest inside the chroot) is <that directory>/slate-guest when present,
 * else SLATE_BIN_DIR/slate-guest.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "image/catalog.h"
#include "image/store.h"
#include "util/macro.h"

#define POSTINSTALL_TIMEOUT_S 1800  /* the whole run, boot included */
#define POSTINSTALL_MEMORY_MIB 1024 /* the installer VM's memory */
#define POSTINSTALL_DOMAIN_PREFIX "slate.install-"
#define POSTINSTALL_INSTALLER_SUBDIR "installer"   /* below the state directory */
#define POSTINSTALL_GUEST_DIR "/run/slate-install" /* what steps see of the installer */
/* A failing step's output is kept up to this much (its end); the console's tail likewise. */
#define POSTINSTALL_OUTPUT_MAX (16u * 1024u)
/* Longer console lines are cut into pieces of this size (and never taken for markers). */
#define POSTINSTALL_LINE_MAX 4096u
/* The console file is read up to this much; a guest writing more is stopped. */
#define POSTINSTALL_CONSOLE_MAX (256ull << 20)
#define POSTINSTALL_NONCE_LEN 32 /* hex digits */

/* ---- the console log parser --------------------------------------------------------------- */

enum postinstall_state {
	POSTINSTALL_WAITING,   /* no SLATE-INSTALL-BEGIN yet */
	POSTINSTALL_RUNNING,   /* steps are running */
	POSTINSTALL_SUCCEEDED, /* every step exited 0 and the installer said ok */
	POSTINSTALL_FAILED,    /* a step exited non-zero */
	POSTINSTALL_ERROR,     /* the installer failed, timed out, or broke the protocol */
};

struct postinstall_log;

/*
 * A parser for one run: nonce (POSTINSTALL_NONCE_LEN hex digits) and the uuids of the steps
 * in the order they must run (copied). Returns 0 or -errno.
 */
int postinstall_log_new(const char *nonce, const char *const *uuids, size_t n,
                        struct postinstall_log **ret);
void postinstall_log_free(struct postinstall_log *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct postinstall_log *, postinstall_log_free);
/* Feeds console bytes, in order, any split. Returns the state after them. */
enum postinstall_state postinstall_log_feed(struct postinstall_log *l, const void *p, size_t n);
/* The console ended (the VM is gone): a run that did not finish becomes an error. */
enum postinstall_state postinstall_log_end(struct postinstall_log *l);
enum postinstall_state postinstall_log_state(const struct postinstall_log *l);
/* How many steps finished with status 0. */
size_t postinstall_log_done(const struct postinstall_log *l);
/* The index of the step running or failed (== done). */
size_t postinstall_log_current(const struct postinstall_log *l);
/* The failed step's exit status (POSTINSTALL_FAILED), else -1. */
int postinstall_log_exit_status(const struct postinstall_log *l);
/*
 * The current (or failed) step's output so far, at most POSTINSTALL_OUTPUT_MAX bytes of its end;
 * printable ASCII, tab and newline only (anything else is shown as '?'). Never NULL.
 */
const char *postinstall_log_output(const struct postinstall_log *l);
/* The console's last lines outside steps (kernel messages, the installer's own), same rules. */
const char *postinstall_log_console_tail(const struct postinstall_log *l);
/* Why the run is POSTINSTALL_ERROR ("" otherwise). */
const char *postinstall_log_error(const struct postinstall_log *l);

/* ---- running steps -------------------------------------------------------------------------- */

struct postinstall_config {
	struct storage *storage;
	const char *state_dir;     /* for <state>/installer */
	const char *libvirt_uri;   /* NULL: qemu:///system */
	const char *installer_dir; /* NULL: the lookup above */
	unsigned timeout_s;        /* 0: POSTINSTALL_TIMEOUT_S */
};

struct postinstall_progress {
	size_t step; /* 0-based index of the step starting, or n_steps when done */
	size_t n_steps;
	const struct catalog_step *s; /* the step starting, or NULL */
	const char *output;           /* set once, when a step failed: its output */
};
typedef void (*postinstall_progress_fn)(const struct postinstall_progress *p, void *ud);

struct postinstall_result {
	struct image_info *info; /* the image installed (success only) */
	size_t n_done;           /* steps that exited 0 */
	double seconds;          /* the installer VM's run */
	bool kvm;
};
void postinstall_result_done(struct postinstall_result *r);

/*
 * Runs steps[0..n) on a clone of installed image id and, when all of them exit 0, installs the
 * clone as the new version of id with catalog_json (the image's catalog.json to record, listing
 * these steps as applied). When expect_version > 0, the image must still be at that version when
 * the clone is taken and when it is installed (another pull in between: -ESTALE).
 *
 * Returns 0 and fills *ret; -ECANCELED when a step exited non-zero (err names it, progress has
 * seen its output); -ETIMEDOUT; -ENOENT with a message when there is no installer; other
 * errors with err saying why. On any failure the installed image is unchanged.
 */
int postinstall_apply(const struct postinstall_config *cfg, const char *id,
                      const struct catalog_step *steps, size_t n, const char *catalog_json,
                      int64_t expect_version, postinstall_progress_fn progress, void *ud,
                      struct postinstall_result *ret, struct slate_error *err);

/*
 * Installer domains left behind by a slated of this store's state directory that died while
 * steps ran (a crash, kill -9): at start, before image_store_sweep() and before any install,
 * every domain named POSTINSTALL_DOMAIN_PREFIX "<id>-<6 hex digits>" whose every file (each
 * disk's and the console's <source>, kernel, initrd) lies in one staging directory
 * <images>/.tmp-<id>-XXXXXX of this store is destroyed (and undefined if persistent), and that
 * directory removed. Domains of the same shape whose files lie elsewhere (another slated's state
 * directory) are never touched. The base image is unchanged either way: the clone was never
 * installed. Logs each removal. Returns the number removed, or -errno (-ECONNREFUSED: libvirt
 * cannot be reached).
 */
int postinstall_sweep(struct storage *s, const char *libvirt_uri);

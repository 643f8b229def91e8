/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Catalog updates, image pulls and image verification: what `slate catalog update`,
 * `slate image pull` and `slate image verify` do in slated.
 *
 * An update fetches a catalog (URL or local file) and its detached signature (the same name with
 * ".sig"), verifies it with catalog_verify() against the trusted keys (the administrator's
 * directory plus the keys accepted catalogs introduced), the configured channel, the stored
 * rollback state and the clock, and stores it with catalog_state_accept(). Where it came from is
 * remembered (<state>/catalog/source.url), so that relative artifact URLs resolve against it and
 * a pull can fetch the catalog again.
 *
 * A pull downloads the image's kernel, initrd and disk into a staging directory of the image
 * store, each checked on the way (size never exceeded, SHA-256 equal to the catalog's), expands
 * the disk into a sparse raw file (qcow2 through `qemu-img convert`) and installs it atomically;
 * on any failure the installed image is unchanged. A failed transfer is tried 3 times in all: the
 * catalog is fetched again between tries, and the transfer resumes where it stopped (Range) when
 * the artifact is unchanged, or starts again when a newer catalog changed it.
 *
 * Postinstall steps (image/postinstall.h) then run on a clone of the installed base in an
 * installer VM, and the clone replaces the base (version + 1) only when every one succeeded. A
 * step needs the caller's consent unless the installed image recorded it (same uuid, same
 * command) as applied before; without it the pull is refused before anything is downloaded.
 * The image directory's catalog.json records which steps are applied to its disk.
 */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "image/catalog.h"
#include "image/store.h"
#include "image/verify.h"

#define PULL_TRIES 3
#define PULL_SOURCE_FILE "source.url"         /* in <state>/catalog/ */
#define PULL_IMAGE_SOURCE_FILE "catalog.json" /* in <images>/<id>/ */
/* image_pull(): postinstall steps the caller did not consent to (nothing was done). */
#define PULL_ERR_CONSENT (-ENOKEY)
/* image_pull(): a postinstall step failed (the installed image is the base without it). */
#define PULL_ERR_POSTINSTALL (-ECANCELED)

struct json_object;

struct pull_config {
	struct storage *storage;
	int state_dirfd;
	const char *trusted_keys; /* directory (or file) of trusted *.pub keys */
	const char *channel;      /* the channel this host follows */
	const char *catalog_url;  /* the default source, may be NULL */
	const char *state_dir;    /* for the installer (<state>/installer); may be NULL */
	const char *libvirt_uri;  /* for the installer VM; NULL: qemu:///system */
};

struct pull_progress {
	const char *phase;    /* "catalog", "download", "convert", "install", "postinstall",
	                       * "postinstall-output" */
	const char *artifact; /* "disk", "kernel", "initrd", a step's uuid, or NULL */
	const char *detail;   /* postinstall: the step's description; postinstall-output: the
	                       * failing step's output (or the installer console's end) */
	uint64_t done, total;
	unsigned attempt; /* 1..PULL_TRIES */
	bool resumed;     /* this attempt continues an interrupted transfer */
};
typedef void (*pull_progress_fn)(const struct pull_progress *p, void *ud);

/*
 * Fetches, verifies and accepts a catalog from `from` (URL or path; NULL: the source last used,
 * else cfg->catalog_url). On success *ret (may be NULL) gets the accepted catalog.
 */
int catalog_update(const struct pull_config *cfg, const char *from, struct catalog **ret,
                   struct slate_error *err);
/* Returns the source last used in a new string, or -ENOENT. */
int catalog_source_get(int state_dirfd, char **ret);

struct pull_result {
	struct image_info *info; /* the installed image */
	bool up_to_date;         /* it was installed already: nothing was downloaded */
	size_t n_pending;        /* postinstall steps still pending */
	size_t n_applied;        /* postinstall steps applied by this pull */
	uint64_t downloaded;     /* bytes received */
};
void pull_result_done(struct pull_result *r);

/* The postinstall steps a caller accepted: every one (--yes), or those with these uuids. */
struct pull_consent {
	bool all;
	const char *const *uuids;
	size_t n_uuids;
};

/*
 * Pulls image id from the accepted catalog and applies its pending postinstall steps. consent
 * (may be NULL: none) must cover every step not applied before: else PULL_ERR_CONSENT before
 * anything is done. PULL_ERR_POSTINSTALL when a step failed (err says which; progress has seen
 * its output): the image is then the base without the steps (a fresh download stays installed,
 * its steps pending), never a half-applied one.
 */
int image_pull(const struct pull_config *cfg, const char *id, const struct pull_consent *consent,
               pull_progress_fn progress, void *ud, struct pull_result *ret,
               struct slate_error *err);

/*
 * The postinstall steps recorded as applied to installed image id (its catalog.json): a new
 * JSON array of {"uuid","seq","description","command"}, empty when there are none (or the image
 * is not installed, or not from a catalog).
 */
int image_applied_steps(struct storage *s, const char *id, struct json_object **ret);
/* Whether step is in such an array with the same uuid and the same command. */
bool image_step_applied(struct json_object *applied, const struct catalog_step *step);

struct image_verify_result {
	char id[IMAGE_ID_MAX + 1];
	bool ok;
	bool local;    /* imported, not from a catalog */
	char file[32]; /* the file that failed, or "" */
	/* disk.img: "sha256-1m:<hex>", or a plain SHA-256's hex (older images); the kernel and
	 * initrd: plain SHA-256 hex. */
	char expected[VERIFY_DIGEST_STRLEN + 1], actual[VERIFY_DIGEST_STRLEN + 1];
	const char *catalog;   /* "current", "outdated", "not-in-catalog", "no-catalog", "local" */
	int64_t image_version; /* the catalog image version installed (0 for local ones) */
	int error;             /* < 0 when the image could not be read at all */
};

/* Re-hashes image id (NULL: every installed image). *ret is an array of *ret_n results. */
int image_verify(const struct pull_config *cfg, const char *id, pull_progress_fn progress, void *ud,
                 struct image_verify_result **ret, size_t *ret_n);

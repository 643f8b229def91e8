/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A workspace's browser VM (daemon/browser.c, doc/browser.md): headless Chromium in a disposable
 * VM of its own, booted from the browser image on a qcow2 overlay in the runtime directory. Its
 * DevTools endpoint reaches the workspace's guest at 127.0.0.1:9222 through the guest channels
 * ("cdp" streams: workspace guest -> slated -> browser VM); its egress goes through slated's
 * proxy under the workspace's policy and secret bindings. It has no NIC and no definition that
 * outlives it: stop, slated's restart and the workspace's stop remove the domain and its files.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/error.h"
#include "vm/lifecycle.h"

struct daemon_ctx;
struct json_object;

/* The browser VM of workspace NAME: domain slate.browser-NAME (never a workspace's domain name:
 * those are slate-NAME), channel and runtime directory .browser-NAME. */
#define BROWSER_DOMAIN_PREFIX "slate.browser-"
#define BROWSER_KEY_PREFIX ".browser-"
#define BROWSER_DEFAULT_MEMORY_MIB 1024u
#define BROWSER_DEFAULT_CPUS 1u

struct browser_opts {
	const char *image; /* NULL: slate.conf's browser-image */
	bool persist;      /* the profile on the workspace's encrypted disk */
	uint64_t memory_mib;
	unsigned cpus;
};

/* Registers the workspace-side "cdp" service on the guest channels. Returns 0 or -errno. */
int daemon_browser_init(struct daemon_ctx *d);
/* Removes what a previous slated left: browser domains whose files are below our runtime
 * directory, and their runtime directories. */
void daemon_browser_sweep(struct daemon_ctx *d);
/* Stops every browser VM (slated is stopping). */
void daemon_browser_stop_all(struct daemon_ctx *d);

/*
 * Boots workspace name's browser VM and waits until Chromium answers DevTools. *ret (may be
 * NULL) gets what status shows. -EEXIST when one runs or starts, -ENOTCONN when the workspace does
 * not run, -ENOENT when no browser image is set or installed; err says why.
 */
int daemon_browser_start(struct daemon_ctx *d, const char *name, const struct browser_opts *o,
                         vm_progress_fn progress, void *userdata, struct json_object **ret,
                         struct slate_error *err);
/* Closes Chromium (it writes its profile), then removes the domain, its disk and sockets. -ENOENT
 * when none runs, -EBUSY while it starts. *ret (may be NULL): what was done. */
int daemon_browser_stop(struct daemon_ctx *d, const char *name, struct json_object **ret,
                        struct slate_error *err);
/* Stops the browser of a workspace whose domain stopped, on a thread of its own; returns at
 * once (callable from libvirt's event thread). */
void daemon_browser_stop_async(struct daemon_ctx *d, const char *name);
/* A leak caught in the workspace's egress (the browser's own included): its browser VM is paused
 * with it, its memory kept for inspection; stop then destroys it without a clean close. */
void daemon_browser_pause(struct daemon_ctx *d, const char *name);
/* {"running": false} or the running browser's figures. */
int daemon_browser_status(struct daemon_ctx *d, const char *name, struct json_object **ret);
/* A PNG of the browser's first page, through DevTools. */
int daemon_browser_screenshot(struct daemon_ctx *d, const char *name, uint8_t **ret_png,
                              size_t *ret_len, struct slate_error *err);
/*
 * The browser's view (browser-view.h): VNC on <runtime>/vm/.browser-NAME/view.sock, mode 0600 and
 * owned by uid, fed by DevTools' screencast; started when none serves, else the one that serves.
 * *ret: {"name", "socket", "width", "height"}. -ENOENT when no browser runs.
 */
int daemon_browser_view(struct daemon_ctx *d, const char *name, uid_t uid, struct json_object **ret,
                        struct slate_error *err);
/* Closes the view and removes its socket; *ret: {"name", "stopped": whether one served}. */
int daemon_browser_view_stop(struct daemon_ctx *d, const char *name, struct json_object **ret,
                             struct slate_error *err);

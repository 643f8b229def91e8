/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The daemon: what slated holds while it runs (storage, libvirt, the guest channels, the
 * services) and the workspace operations on it (the daemon/ headers), which call each other in one
 * direction only: run -> start -> provision -> exec. The API (api/) parses requests, checks who
 * may see what, calls one operation and renders its result or error.
 */

#include "daemon/snapshot.h"
#include <time.h>

struct storage;
struct workspace_store;
struct vm_events;
struct channels;
struct install;
struct helper;
struct agent;
struct proxy_service;

struct daemon_ctx {
	const char *state_dir;
	const char *runtime_dir;
	const char *libvirt_uri;
	int state_dirfd;
	time_t started;
	/* NULL when the storage could not be opened; storage_error then says why. */
	struct storage *storage;
	struct workspace_store *workspaces;
	const char *storage_error;
	struct vm_events *vm_events; /* domain events (api/vm.c) */
	struct channels *channels;   /* the guest channels (channel/channels.h); may be NULL */
	const char *trusted_keys;    /* catalog keys (dir); NULL: SLATE_SYSCONF_DIR/trusted-keys */
	const char *channel;         /* the catalog channel followed; NULL: "stable" */
	const char *catalog_url;     /* the default catalog source, may be NULL */
	struct install *install;     /* master key, salt (secrets/install.h); NULL if unusable */
	struct agent *agent;         /* the SSH agent (agent/agent.h), started by daemon/agent.c */
	struct proxy_service *proxy; /* the egress proxy service (daemon/egress.c) */
	/* slated-helper, which mounts the pool and starts virtiofsd for shares
	 * (helper/client.h); NULL when none could be started (helper_error says why). */
	struct helper *helper;
	const char *helper_error;
	/* Per-host limits on running workspaces (daemon/limits.h); NULL: none. */
	struct daemon_limits *limits;
	/* Starts from booted snapshots (daemon/snapshot.h): slate.conf's boot-snapshots. */
	enum snapshot_mode boot_snapshots;
	/* The image of browser VMs (daemon/browser.h): slate.conf's browser-image; NULL: none. */
	const char *browser_image;
};

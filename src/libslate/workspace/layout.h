/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Workspace names and what a workspace's directory holds (doc/workspace.md): a leaf header that
 * includes nothing of libslate, for the modules that need a name check or a file's name without
 * the store (agent/, secrets/, the programs).
 */

#define WORKSPACE_NAME_MAX 63

/* Returns 0 if name matches [a-z0-9][a-z0-9-]{0,62}, else -EINVAL (workspace/workspace.c). */
int workspace_name_check(const char *name);
/* The rule, for messages. */
#define WORKSPACE_NAME_RULE                                                                        \
	"a workspace name is 1 to 63 characters: lowercase letters, digits and '-', starting "     \
	"with a letter or digit"

/* In <workspaces>/<name>/: */
#define WORKSPACE_STATE_FILE "workspace.json"
#define WORKSPACE_DISK "disk.img"
#define WORKSPACE_HOME "home.img"
#define WORKSPACE_CHECKPOINTS "checkpoints"
#define WORKSPACE_SSH_DIR "ssh" /* the SSH agent's keys (agent/keys.h), kept by wipe-home */
/* The browser VM's kept profile (`slate browser --persist`, daemon/browser.h): a disk encrypted
 * inside the browser VM, and its key sealed under the master key. wipe-home, wipe and rm drop
 * both (the key first); reset keeps them. */
#define WORKSPACE_BROWSER_PROFILE "browser-profile.img"
#define WORKSPACE_BROWSER_KEY "browser-profile.key"

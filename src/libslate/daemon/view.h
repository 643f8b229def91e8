/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* The daemon's view of a workspace's VM, for its JSON (daemon/view.c). */

struct daemon_ctx;
struct json_object;

/* Adds the VM's view to a workspace's JSON o: "state" suspended or paused where that is so,
 * "accelerator" (kvm or tcg: the running domain's, else what a start would use) and, while it
 * runs, its guest channel's counters. active: whether its domain runs (> 0). */
int daemon_vm_view_json(struct daemon_ctx *d, const char *name, int active, struct json_object *o);

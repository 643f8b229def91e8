/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* A workspace's egress policy on disk (<workspace>/egress.json) and the egress proxy service
 * (daemon/egress.c). */

struct daemon_ctx;
struct egress_policy;

/* The workspace's directory, opened (O_PATH-free, for *at calls), into *ret. */
int daemon_ws_dirfd(struct daemon_ctx *d, const char *name, int *ret);
/* Reads workspace name's egress.json into *ret (a default policy when there is none). */
int daemon_egress_load(struct daemon_ctx *d, const char *name, struct egress_policy **ret);
/* Writes p as workspace name's egress.json (atomically, 0600). */
int daemon_egress_save(struct daemon_ctx *d, const char *name, const struct egress_policy *p);
/*
 * Applies one change (egress_policy_apply: action allow-all, deny-all, allow or deny, host for
 * the last two) to workspace name's policy and writes it, serialised with every other change;
 * *ret gets the new policy. -EINVAL: a bad action or host; -E2BIG: too many rules.
 */
int daemon_egress_update(struct daemon_ctx *d, const char *name, const char *action,
                         const char *host, struct egress_policy **ret);

/*
 * The egress proxy as the guest channels' "http-proxy" service: each stream served by
 * proxy_serve() with the workspace's secrets and policy; a leak marks the workspace compromised
 * (workspace_mark_compromised), pauses its domain and ends its exec sessions; every request goes
 * to its audit trail. Start returns 0 without channels (no guest can reach it), < 0 when it
 * cannot start (logged: slated runs on, guests without network). Stop waits for the streams.
 */
int daemon_egress_start(struct daemon_ctx *d);
void daemon_egress_stop(struct daemon_ctx *d);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* A workspace's egress policy on disk (<workspace>/egress.json; daemon/egress.c). */

struct daemon_ctx;
struct egress_policy;

/* The workspace's directory, opened (O_PATH-free, for *at calls), into *ret. */
int daemon_ws_dirfd(struct daemon_ctx *d, const char *name, int *ret);
/* Writes p as workspace name's egress.json (atomically, 0600). */
int daemon_egress_save(struct daemon_ctx *d, const char *name, const struct egress_policy *p);
/*
 * Applies one change (egress_policy_apply: action allow-all, deny-all, allow or deny, host for
 * the last two) to workspace name's policy and writes it, serialised with every other change;
 * *ret gets the new policy. -EINVAL: a bad action or host; -E2BIG: too many rules.
 */
int daemon_egress_update(struct daemon_ctx *d, const char *name, const char *action,
                         const char *host, struct egress_policy **ret);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The MAC registry: one file, <workspaces>/.macs.json, mapping each reserved MAC address to the
 * workspace that holds it:
 *
 *   {"formatVersion":1,"macs":{"52:54:00:12:ab:cd":"web",...}}
 *
 * Every change happens under an exclusive flock on <workspaces>/.macs.lock (blocking; other
 * processes and threads wait) and rewrites the file atomically, so a MAC is never handed out
 * twice while it is reserved, even by concurrent processes. Addresses are 52:54:00:xx:xx:xx
 * (QEMU's locally administered prefix) with 24 random bits, retried on collision.
 * A registry that fails to parse is an error (SLATE_ERR_INVALID_FORMAT), never silently reset.
 */

#include <stdbool.h>
#include <stddef.h>

#define MAC_REGISTRY_FILE ".macs.json"
#define MAC_REGISTRY_LOCK ".macs.lock"
#define MAC_REGISTRY_MAX_SIZE (8u << 20)
#define MAC_STRLEN 17
#define MAC_PREFIX "52:54:00:"

struct mac_entry {
	char mac[MAC_STRLEN + 1];
	char *name;
};

/* Returns 0 if mac is "52:54:00:xx:xx:xx" with lowercase hex digits, else -EINVAL. */
int mac_check(const char *mac);

/* Reserves a new random MAC for workspace name in the registry of dirfd; writes it to ret. */
int mac_reserve(int dirfd, const char *name, char ret[MAC_STRLEN + 1]);
/*
 * Reserves exactly mac for name (a repair). 0 if it is now held by name (already or newly),
 * -EADDRINUSE when another workspace holds it.
 */
int mac_claim(int dirfd, const char *mac, const char *name);
/*
 * Frees mac when it is held by name (any holder when name is NULL). Returns 1 if freed, 0 if it
 * was not reserved (or held by another name).
 */
int mac_release(int dirfd, const char *mac, const char *name);
/* Every reservation, sorted by MAC. */
int mac_list(int dirfd, struct mac_entry **ret, size_t *ret_n);
void mac_list_free(struct mac_entry *list, size_t n);
/*
 * Frees each reservation for which keep(mac, name, ud) returns false, in one locked rewrite.
 * Returns the number freed; keep returning a negative value aborts with that error.
 */
int mac_sweep(int dirfd, int (*keep)(const char *mac, const char *name, void *ud), void *ud);

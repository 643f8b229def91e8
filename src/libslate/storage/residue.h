/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * What the host file behind a guest disk says about each 64 KiB region of it, for `slate probe`
 * (doc/residue.md): never written (a hole: reads as zeros), still the base image's bytes, written
 * by the guest, or unknown (a block device, whose allocation the host cannot see).
 */

#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"

#define RESIDUE_REGION (64 * 1024)
#define RESIDUE_BLOCK 4096
#define RESIDUE_BLOCKS (RESIDUE_REGION / RESIDUE_BLOCK)

enum residue_class {
	RESIDUE_WRITTEN, /* the guest wrote there: its bytes are its own; not probed */
	RESIDUE_HOLE,    /* never written on the host: must read as zeros */
	RESIDUE_BASE,    /* the base image's own extent, never written: must read as the base */
	RESIDUE_UNKNOWN, /* a block device: the host cannot tell */
};

const char *residue_class_name(enum residue_class c);

struct residue_map;

/*
 * Opens the disk at path (a raw file, a qcow2 overlay when qcow2, or a block device) for
 * classification. base is the raw base image it was cloned from, or NULL when it is not known
 * (a home, or a disk cloned from an older version of its image): no region is then RESIDUE_BASE.
 * For qcow2 the overlay's allocation comes from `qemu-img map -U` (the domain may be running;
 * the guest's file systems are frozen by then, which flushed QEMU's metadata).
 */
int residue_map_open(const char *path, const char *base, bool qcow2, struct residue_map **ret,
                     struct slate_error *err);
void residue_map_free(struct residue_map *m);
/* The guest-visible size of the disk in bytes. */
uint64_t residue_map_size(const struct residue_map *m);
/* Whether regions can be RESIDUE_BASE (a base was given). */
bool residue_map_has_base(const struct residue_map *m);
/* The class of the 64 KiB region at off (aligned, inside the disk). */
int residue_map_classify(struct residue_map *m, uint64_t off, enum residue_class *ret);
/* The SHA-256 of each 4 KiB block of the base at off (a RESIDUE_BASE region). */
int residue_map_base_digests(struct residue_map *m, uint64_t off, uint8_t ret[RESIDUE_BLOCKS][32]);

/* Parses `qemu-img map --output=json` output into the map (exposed for tests). */
int residue_map_parse_qemu_map(struct residue_map *m, const char *json, size_t len);

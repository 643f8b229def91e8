/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * `slate probe` (doc/residue.md): slated asks slate-guest for the free space of the guest's disks,
 * picks regions the host never wrote, and has slate-guest write and read them on the raw devices.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/error.h"

struct daemon_ctx;

#define PROBE_REGIONS_DEFAULT 256
#define PROBE_REGIONS_MAX 65536
#define PROBE_MARKER_MAX 64
#define PROBE_LINE_MAX 2048
#define PROBE_SAMPLE_MAX 32
#define PROBE_TEXT_MAX 256

struct daemon_probe_opts {
	unsigned regions;      /* per disk; 0: PROBE_REGIONS_DEFAULT */
	const uint8_t *marker; /* counted in foreign bytes; may be NULL */
	size_t marker_len;     /* at most PROBE_MARKER_MAX */
	unsigned timeout_s;    /* 0: 300 */
};

typedef void (*probe_progress_fn)(const char *step, const char *detail, void *userdata);

/*
 * Probes the running workspace name. *ret gets the result (doc/residue.md, doc/api.md): whether
 * any foreign byte was found is its "clean" member. Fails (with err) only when the probe could
 * not run.
 */
int daemon_probe(struct daemon_ctx *d, const char *name, const struct daemon_probe_opts *o,
                 probe_progress_fn progress, void *userdata, struct json_object **ret,
                 struct slate_error *err);

/*
 * slate doctor --residue: a throwaway workspace (the previous tenant) fills fill_mib MiB of its
 * system disk and of its home with a marker and is deleted; a second one is made on the same
 * storage right after and probed for the marker. Both are ephemeral (slated deletes them at its
 * next start if it dies meanwhile) and gone when this returns. *ret: the probe's result with
 * "pass", "previous_tenant", "fill_mib", "marker", "image", "total_seconds".
 */
struct daemon_residue_opts {
	const char *image_id;
	uid_t owner;
	uint64_t fill_mib; /* 0: 256 */
	unsigned regions;  /* 0: PROBE_REGIONS_DEFAULT */
};
int daemon_residue_check(struct daemon_ctx *d, const struct daemon_residue_opts *o,
                         probe_progress_fn progress, void *userdata, struct json_object **ret,
                         struct slate_error *err);

/* ---- the guest's lines (hostile input; fuzzed by tests/fuzz/fuzz-probe.c) ---- */

enum probe_line_kind {
	PL_HEADER,
	PL_DEVICE,
	PL_FS,
	PL_FREE,
	PL_READY,
	PL_WRITE,
	PL_COMPARE,
	PL_REFUSED,
	PL_ERROR,
	PL_DONE,
	PL_END,
};

struct probe_line {
	enum probe_line_kind kind;
	char dev[17];    /* empty for "error -" */
	uint64_t a, b;   /* device: size, file systems; fs: start, length; free: offset, length;
	                  * write/compare/refused: offset; done: written, compared */
	uint64_t ms;     /* done */
	bool clean;      /* write/compare */
	uint64_t blocks; /* compare: 4 KiB blocks that differ */
	uint64_t bytes, first, markers;
	uint8_t sample[PROBE_SAMPLE_MAX];
	size_t sample_len;
	char text[PROBE_TEXT_MAX +
	          1]; /* fs: type and mount point; refused/error: why (printable) */
};

/* Parses one line (without its newline). -EPROTO when it is not one of the documented forms. */
int probe_parse_guest_line(const char *line, size_t len, struct probe_line *ret);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * libvirt's QEMU save image (virDomainSave), read and rewritten for starts from a booted
 * snapshot (doc/vm.md, "Starts from a booted snapshot"). The format is libvirt's own: a 92-byte
 * header (magic "LibvirtQemudSave", then five little-endian uint32 fields: version, data_len,
 * was_running, compressed, cookie_offset, then 56 unused bytes), data_len bytes holding the
 * domain XML, NUL, the cookie, NUL and zero padding, then QEMU's migration stream. Only
 * version 2, uncompressed, is accepted: anything else is a format slate does not know, and the
 * caller boots cold.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VM_SAVE_MAGIC "LibvirtQemudSave"
#define VM_SAVE_HEADER_LEN 92u
#define VM_SAVE_DATA_MAX (1u << 20) /* XML and cookie: libvirt's XML is a few KiB */
#define VM_SAVE_ALIGN 4096u
#define VM_SAVE_ROOM (64u * 1024) /* free space left after the XML when aligning */

struct vm_save_image {
	uint32_t version, data_len, was_running, compressed, cookie_off;
	char *xml;           /* the domain XML */
	char *cookie;        /* may be NULL */
	uint64_t stream_off; /* where QEMU's stream starts: VM_SAVE_HEADER_LEN + data_len */
	uint64_t size;       /* the whole file */
};

/*
 * Parses a save image's header and data (p: its first len bytes, at least VM_SAVE_HEADER_LEN;
 * file_size: the whole file's). Returns 0, -EAGAIN when len is too short to hold the data
 * (read VM_SAVE_HEADER_LEN + data_len bytes and call again), SLATE_ERR_INVALID_FORMAT when it
 * is no save image or a broken one, -EOPNOTSUPP when it is one slate cannot rewrite (another
 * version, compressed). *ret must be released with vm_save_image_done().
 */
int vm_save_parse(const uint8_t *p, size_t len, uint64_t file_size, struct vm_save_image *ret);
/* vm_save_parse() of the file open at fd. */
int vm_save_read(int fd, struct vm_save_image *ret);
void vm_save_image_done(struct vm_save_image *img);

/*
 * Writes to out_fd (truncated first, written from offset 0) a save image whose domain XML is xml
 * and whose stream is src's (src_fd, parsed as src). With align, the stream starts at the next
 * multiple of VM_SAVE_ALIGN after the XML and VM_SAVE_ROOM of room (-E2BIG when that data would
 * exceed VM_SAVE_DATA_MAX); without, at src's own offset (-E2BIG when xml does not fit there).
 * The stream is cloned (FICLONERANGE) when both files are on one file system that can and the
 * offsets are equal and aligned, else copied (copy_file_range); *ret_cloned (may be NULL) says
 * which. Returns 0 or -errno.
 */
int vm_save_rewrite(int src_fd, const struct vm_save_image *src, const char *xml, bool align,
                    int out_fd, bool *ret_cloned);

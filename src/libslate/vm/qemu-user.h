/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Whether QEMU can reach a directory. With qemu:///system libvirt runs QEMU as the user and group
 * of /etc/libvirt/qemu.conf (Debian: libvirt-qemu:libvirt-qemu, plus the user's supplementary
 * groups). libvirt relabels the image files it is given, never the directories above them: every
 * one of those, from / down, must be searchable by that user, or QEMU fails with a bare
 * "Could not open '.../disk.img': Permission denied". A state directory inside a 0700 directory
 * (what mktemp -d makes) is the common case.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define VM_QEMU_CONF "/etc/libvirt/qemu.conf"
#define VM_QEMU_USER_DEFAULT "libvirt-qemu"
#define VM_QEMU_GROUP_DEFAULT "libvirt-qemu"
#define VM_QEMU_MAX_GROUPS 64

struct vm_qemu_user {
	char name[64];
	uid_t uid;
	gid_t gid;
	gid_t groups[VM_QEMU_MAX_GROUPS]; /* gid first, then the supplementary groups */
	size_t n_groups;
};

/*
 * The user QEMU runs as for uri, from conf_path (NULL: VM_QEMU_CONF; a missing file means the
 * defaults). Returns 1 and fills *ret for qemu:///system (NULL, or through qemu+unix:// with a
 * socket), 0 for any other URI (QEMU runs as slated's own user, or elsewhere: nothing to
 * check), -ENOENT when the user or group does not exist, -EINVAL on a user/group line slate
 * cannot read, -errno otherwise.
 */
int vm_qemu_user_load(const char *uri, const char *conf_path, struct vm_qemu_user *ret);

/*
 * Walks every directory from / down to dir (after resolving symbolic links) as u would. Returns
 * 0 when u can search them all; 1 when one blocks it, with what to say in msg (which directory,
 * which user, and how to fix it); -errno when a directory cannot be looked at (msg says which).
 */
int vm_qemu_user_reach(const struct vm_qemu_user *u, const char *dir, char *msg, size_t len);

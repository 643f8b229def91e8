/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A workspace's libvirt domain XML, built with libxml2 from the template in libvirt-xml/domain.xml
 * (or /etc/slate/libvirt-xml/domain.xml): every value is set through the XML API, so names and
 * paths are escaped by construction. The template's comment lists what is set; doc/vm.md says why.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define VM_XML_NAMESPACE "https://slate.dev/xmlns/libvirt/1"
#define VM_XML_NS_PREFIX "slate"
#define VM_CHANNEL_NAME "org.slate.channel.0"
#define VM_MAX_SHARES 8
/* A template larger than this is refused unread. */
#define VM_TEMPLATE_MAX (256u * 1024u)

struct vm_share {
	const char *socket; /* the vhost-user socket of the share's virtiofsd (vm/virtiofs.h) */
	const char *tag;    /* the virtiofs mount tag */
	bool readonly;
};

struct vm_config {
	const char *domain_name; /* slate-<workspace> */
	const char *uuid;
	const char *workspace;
	uid_t owner;
	const char *image_id;
	int64_t base_version;
	const char *mac;
	uint64_t memory_mib;
	unsigned cpus;
	bool kvm;                /* type='kvm', else 'qemu' (TCG) */
	const char *disk;        /* disk.img */
	const char *disk_format; /* "qcow2" (qcow2 storage: an overlay of the base), NULL: raw */
	const char *home;        /* home.img */
	const char *disk_io;     /* "io_uring", "native" or "threads" */
	const char *kernel;      /* direct kernel boot when set */
	const char *initrd;      /* may be NULL */
	const char *cmdline;     /* may be NULL */
	const char *console_log;
	const char *channel_socket; /* virtio-serial port's unix socket (used when !vsock) */
	bool vsock;                 /* a vhost-vsock device with an automatic CID instead */
	const struct vm_share *shares;
	size_t n_shares;
	bool genid; /* a VM generation ID (<genid/>) when the template has none */
};

/* What slate's <metadata> says about a domain, and its type. */
struct vm_metadata {
	char workspace[64];
	char uuid[37];
	uid_t owner;
	char image_id[65];
	int64_t base_version;
	bool kvm;
};

/*
 * Loads the template: path when non-NULL (an error when it cannot be read), else
 * SLATE_SYSCONF_DIR/libvirt-xml/domain.xml when it exists, else the copy built into the program.
 * *ret_text gets a new string; *ret_origin (may be NULL) a new string saying where it came
 * from: the path, or "built-in".
 */
int vm_template_load(const char *path, char **ret_text, char **ret_origin);
/* The built-in copy of libvirt-xml/domain.xml. */
const char *vm_template_builtin(void);

/*
 * Builds the domain XML for c from template. Returns 0 and a new string in *ret_xml;
 * SLATE_ERR_INVALID_FORMAT when the template is not a <domain> document or lacks what slate
 * fills in (the vda/vdb disks), -EINVAL for a config with missing values.
 */
/* The kernel command line of a direct kernel boot: the image's, with the root disk named when
 * the image did not. NULL on ENOMEM. */
char *vm_kernel_cmdline(const char *image_cmdline);

int vm_xml_build(const char *template_text, const struct vm_config *c, char **ret_xml);

/* Reads slate's metadata and the domain type from a domain's XML. -ENOENT when the domain has no
 * slate metadata (not one of ours). */
int vm_xml_metadata(const char *domain_xml, struct vm_metadata *ret);
/* The guest CID of a running domain's <vsock> (from its live XML). -ENOENT when it has none. */
int vm_xml_vsock_cid(const char *domain_xml, unsigned *ret);

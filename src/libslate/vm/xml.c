/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The domain XML: the template parsed with libxml2, per-workspace values set through its API. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "vm/xml.h"

/* libvirt-xml/domain.xml as a C string, generated at build time (src/libslate/vm/local.mk). */
#include "vm/domain-template.inc"

DEFINE_TRIVIAL_CLEANUP_FUNC(xmlDocPtr, xmlFreeDoc);
DEFINE_TRIVIAL_CLEANUP_FUNC(xmlXPathContextPtr, xmlXPathFreeContext);
DEFINE_TRIVIAL_CLEANUP_FUNC(xmlXPathObjectPtr, xmlXPathFreeObject);
static inline void xml_freep(void *p)
{
	xmlFree(*(void **)p);
}
#define _cleanup_xmlfree_ _cleanup_(xml_freep)

const char *vm_template_builtin(void)
{
	return vm_domain_template;
}

int vm_template_load(const char *path, char **ret_text, char **ret_origin)
{
	_cleanup_(buf_freep) struct buf *b = NULL;
	const char *p = path ? path : SLATE_SYSCONF_DIR "/libvirt-xml/domain.xml";
	char *text, *origin;
	int r;

	r = fs_read_file_at(AT_FDCWD, p, VM_TEMPLATE_MAX, &b);
	if (r == -ENOENT && !path) {
		text = strdup(vm_domain_template);
		origin = strdup("built-in");
	} else if (r < 0) {
		return r;
	} else {
		text = strndup((const char *)buf_ptr(b), buf_len(b));
		origin = strdup(p);
	}
	if (!text || !origin) {
		free(text);
		free(origin);
		return -ENOMEM;
	}
	*ret_text = text;
	if (ret_origin)
		*ret_origin = origin;
	else
		free(origin);
	return 0;
}

char *vm_kernel_cmdline(const char *image_cmdline)
{
	const char *base = image_cmdline && *image_cmdline ? image_cmdline : "console=ttyS0";
	char *out = NULL;

	if (strstr(base, "root="))
		return strdup(base);
	if (asprintf(&out, "%s root=/dev/vda rw", base) < 0)
		return NULL;
	return out;
}

/* Parses XML without network access, entities or DTDs: templates and libvirt's answers only. */
static int parse_doc(const char *text, xmlDocPtr *ret)
{
	xmlDocPtr doc;

	doc = xmlReadMemory(text, (int)strlen(text), "domain.xml", NULL,
	                    XML_PARSE_NONET | XML_PARSE_NOBLANKS | XML_PARSE_NOERROR |
	                            XML_PARSE_NOWARNING);
	if (!doc)
		return SLATE_ERR_INVALID_FORMAT;
	*ret = doc;
	return 0;
}

static xmlNodePtr child(xmlNodePtr parent, const char *name)
{
	for (xmlNodePtr n = parent ? parent->children : NULL; n; n = n->next)
		if (n->type == XML_ELEMENT_NODE && xmlStrEqual(n->name, BAD_CAST name) && !n->ns)
			return n;
	return NULL;
}

/* The child element name of parent; created (at the end) when missing. NULL on ENOMEM. */
static xmlNodePtr ensure_child(xmlNodePtr parent, const char *name)
{
	xmlNodePtr n = child(parent, name);

	return n ? n : xmlNewChild(parent, NULL, BAD_CAST name, NULL);
}

/* Sets the text of parent/name (created when missing); text is escaped by libxml2. */
static int set_text(xmlNodePtr parent, const char *name, const char *text)
{
	xmlNodePtr n = ensure_child(parent, name);

	if (!n)
		return -ENOMEM;
	xmlNodeSetContent(n, NULL);
	xmlNodeAddContent(n, BAD_CAST text);
	return 0;
}

static int set_prop(xmlNodePtr n, const char *name, const char *value)
{
	return n && xmlSetProp(n, BAD_CAST name, BAD_CAST value) ? 0 : -ENOMEM;
}

static void remove_children(xmlNodePtr parent, const char *name)
{
	xmlNodePtr n, next;

	for (n = parent ? parent->children : NULL; n; n = next) {
		next = n->next;
		if (n->type == XML_ELEMENT_NODE && xmlStrEqual(n->name, BAD_CAST name) && !n->ns) {
			xmlUnlinkNode(n);
			xmlFreeNode(n);
		}
	}
}

/* devices/<elem> whose <target> has attribute attr = value. */
static xmlNodePtr find_by_target(xmlNodePtr devices, const char *elem, const char *attr,
                                 const char *value)
{
	for (xmlNodePtr n = devices->children; n; n = n->next) {
		_cleanup_xmlfree_ xmlChar *v = NULL;
		xmlNodePtr t;

		if (n->type != XML_ELEMENT_NODE || !xmlStrEqual(n->name, BAD_CAST elem))
			continue;
		t = child(n, "target");
		if (!t)
			continue;
		v = xmlGetProp(t, BAD_CAST attr);
		if (v && xmlStrEqual(v, BAD_CAST value))
			return n;
	}
	return NULL;
}

/*
 * A disk's source: a file, or a block device (a device node in the workspace directory, where a
 * block backend puts it; `slate probe`'s test backend is one), in the given format.
 */
static int set_disk(xmlNodePtr devices, const char *dev, const char *path, const char *format,
                    const char *io)
{
	xmlNodePtr d = find_by_target(devices, "disk", "dev", dev), drv, src;
	struct stat st;
	bool block = lstat(path, &st) == 0 && S_ISBLK(st.st_mode);

	if (!d)
		return SLATE_ERR_INVALID_FORMAT;
	drv = ensure_child(d, "driver");
	src = ensure_child(d, "source");
	if (!drv || !src)
		return -ENOMEM;
	(void)xmlUnsetProp(src, BAD_CAST(block ? "file" : "dev"));
	if (set_prop(d, "type", block ? "block" : "file") < 0 ||
	    set_prop(src, block ? "dev" : "file", path) < 0 || set_prop(drv, "io", io) < 0 ||
	    set_prop(drv, "type", format ? format : "raw") < 0)
		return -ENOMEM;
	/* io='native' needs O_DIRECT, which cache='none' gives; keep the pair consistent. */
	if (streq(io, "native") && set_prop(drv, "cache", "none") < 0)
		return -ENOMEM;
	return 0;
}

static int set_metadata(xmlDocPtr doc, xmlNodePtr root, const struct vm_config *c)
{
	xmlNodePtr md = ensure_child(root, "metadata"), ws;
	char num[32];
	xmlNsPtr ns;

	if (!md)
		return -ENOMEM;
	/* One slate element, replacing any the template carried. */
	for (xmlNodePtr n = md->children, next; n; n = next) {
		next = n->next;
		if (n->ns && xmlStrEqual(n->ns->href, BAD_CAST VM_XML_NAMESPACE)) {
			xmlUnlinkNode(n);
			xmlFreeNode(n);
		}
	}
	ws = xmlNewChild(md, NULL, BAD_CAST "workspace", NULL);
	if (!ws)
		return -ENOMEM;
	ns = xmlNewNs(ws, BAD_CAST VM_XML_NAMESPACE, BAD_CAST VM_XML_NS_PREFIX);
	if (!ns)
		return -ENOMEM;
	xmlSetNs(ws, ns);
	(void)snprintf(num, sizeof(num), "%u", (unsigned)c->owner);
	if (set_prop(ws, "name", c->workspace) < 0 || set_prop(ws, "uuid", c->uuid) < 0 ||
	    set_prop(ws, "owner", num) < 0 || set_prop(ws, "image", c->image_id) < 0)
		return -ENOMEM;
	(void)snprintf(num, sizeof(num), "%" PRId64, c->base_version);
	if (set_prop(ws, "base-version", num) < 0)
		return -ENOMEM;
	if (c->mac && set_prop(ws, "mac", c->mac) < 0)
		return -ENOMEM;
	(void)doc;
	return 0;
}

static int set_os(xmlNodePtr root, const struct vm_config *c)
{
	xmlNodePtr os = ensure_child(root, "os");

	if (!os)
		return -ENOMEM;
	remove_children(os, "kernel");
	remove_children(os, "initrd");
	remove_children(os, "cmdline");
	if (!c->kernel) {
		/* The image's own bootloader. */
		if (!child(os, "boot") && !xmlNewChild(os, NULL, BAD_CAST "boot", NULL))
			return -ENOMEM;
		return set_prop(child(os, "boot"), "dev", "hd");
	}
	remove_children(os, "boot");
	if (set_text(os, "kernel", c->kernel) < 0 ||
	    (c->initrd && set_text(os, "initrd", c->initrd) < 0) ||
	    (c->cmdline && set_text(os, "cmdline", c->cmdline) < 0))
		return -ENOMEM;
	return 0;
}

static int set_channel(xmlNodePtr devices, const struct vm_config *c)
{
	xmlNodePtr ch = find_by_target(devices, "channel", "name", VM_CHANNEL_NAME), v;

	if (c->vsock) {
		if (ch) {
			xmlUnlinkNode(ch);
			xmlFreeNode(ch);
		}
		remove_children(devices, "vsock");
		v = xmlNewChild(devices, NULL, BAD_CAST "vsock", NULL);
		if (!v || set_prop(v, "model", "virtio") < 0 ||
		    set_prop(xmlNewChild(v, NULL, BAD_CAST "cid", NULL), "auto", "yes") < 0)
			return -ENOMEM;
		return 0;
	}
	if (!ch) {
		xmlNodePtr t;
		ch = xmlNewChild(devices, NULL, BAD_CAST "channel", NULL);
		t = ch ? xmlNewChild(ch, NULL, BAD_CAST "target", NULL) : NULL;
		if (!t || set_prop(ch, "type", "unix") < 0 || set_prop(t, "type", "virtio") < 0 ||
		    set_prop(t, "name", VM_CHANNEL_NAME) < 0)
			return -ENOMEM;
	}
	v = ensure_child(ch, "source");
	if (set_prop(v, "mode", "bind") < 0 || set_prop(v, "path", c->channel_socket) < 0)
		return -ENOMEM;
	return 0;
}

static int set_shares(xmlNodePtr root, xmlNodePtr devices, const struct vm_config *c)
{
	xmlNodePtr mb, n;

	if (c->n_shares == 0)
		return 0;
	/* virtiofs needs guest memory that virtiofsd can map: shared memfd. libvirt's schema
	 * wants <memoryBacking> among the memory elements (before <vcpu>), not at the end. */
	mb = child(root, "memoryBacking");
	if (!mb) {
		xmlNodePtr vcpu = child(root, "vcpu");
		mb = xmlNewNode(NULL, BAD_CAST "memoryBacking");
		if (mb && vcpu)
			(void)xmlAddPrevSibling(vcpu, mb);
		else if (mb)
			(void)xmlAddChild(root, mb);
	}
	if (!mb || set_prop(ensure_child(mb, "source"), "type", "memfd") < 0 ||
	    set_prop(ensure_child(mb, "access"), "mode", "shared") < 0)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_shares; i++) {
		const struct vm_share *s = &c->shares[i];

		/* virtiofsd is slated's (vm/virtiofs.h), running as the share's owner: libvirt
		 * and QEMU get only its socket, never the host directory. Read-only is enforced
		 * there (libvirt refuses <readonly/> for virtiofs). */
		n = xmlNewChild(devices, NULL, BAD_CAST "filesystem", NULL);
		if (!n || !s->socket || set_prop(n, "type", "mount") < 0 ||
		    set_prop(xmlNewChild(n, NULL, BAD_CAST "driver", NULL), "type", "virtiofs") <
		            0 ||
		    set_prop(xmlNewChild(n, NULL, BAD_CAST "source", NULL), "socket", s->socket) <
		            0 ||
		    set_prop(xmlNewChild(n, NULL, BAD_CAST "target", NULL), "dir", s->tag) < 0)
			return -ENOMEM;
	}
	return 0;
}

int vm_xml_build(const char *template_text, const struct vm_config *c, char **ret_xml)
{
	_cleanup_(xmlFreeDocp) xmlDocPtr doc = NULL;
	xmlNodePtr root, devices, serial, n;
	xmlChar *out = NULL;
	char num[32];
	int r, len = 0;

	if (!template_text || !c || !c->domain_name || !c->uuid || !c->workspace || !c->image_id ||
	    !c->disk || !c->home || !c->disk_io || !c->console_log ||
	    (!c->vsock && !c->channel_socket) || c->memory_mib == 0 || c->cpus == 0 ||
	    c->n_shares > VM_MAX_SHARES)
		return -EINVAL;
	r = parse_doc(template_text, &doc);
	if (r < 0)
		return r;
	root = xmlDocGetRootElement(doc);
	if (!root || !xmlStrEqual(root->name, BAD_CAST "domain"))
		return SLATE_ERR_INVALID_FORMAT;
	devices = child(root, "devices");
	if (!devices)
		return SLATE_ERR_INVALID_FORMAT;

	/* A live domain's XML (a save image's, which a restore starts from) has its run's id. */
	(void)xmlUnsetProp(root, BAD_CAST "id");
	if (c->genid && !child(root, "genid")) {
		xmlNodePtr uuid = ensure_child(root, "uuid"),
		           g = xmlNewNode(NULL, BAD_CAST "genid");
		if (!uuid || !g || !xmlAddNextSibling(uuid, g))
			return -ENOMEM;
	}
	if (set_prop(root, "type", c->kvm ? "kvm" : "qemu") < 0 ||
	    set_text(root, "name", c->domain_name) < 0 || set_text(root, "uuid", c->uuid) < 0)
		return -ENOMEM;
	(void)snprintf(num, sizeof(num), "%" PRIu64, c->memory_mib);
	if (set_text(root, "memory", num) < 0 ||
	    set_prop(child(root, "memory"), "unit", "MiB") < 0 ||
	    set_text(root, "currentMemory", num) < 0 ||
	    set_prop(child(root, "currentMemory"), "unit", "MiB") < 0)
		return -ENOMEM;
	(void)snprintf(num, sizeof(num), "%u", c->cpus);
	if (set_text(root, "vcpu", num) < 0)
		return -ENOMEM;
	r = set_metadata(doc, root, c);
	if (r < 0)
		return r;
	r = set_os(root, c);
	if (r < 0)
		return r;
	if (c->kvm && !child(root, "cpu")) {
		n = xmlNewChild(root, NULL, BAD_CAST "cpu", NULL);
		if (set_prop(n, "mode", "host-passthrough") < 0)
			return -ENOMEM;
	} else if (!c->kvm) {
		/* host-passthrough means nothing to TCG and libvirt refuses it there. */
		n = child(root, "cpu");
		if (n) {
			_cleanup_xmlfree_ xmlChar *mode = xmlGetProp(n, BAD_CAST "mode");
			if (mode && xmlStrEqual(mode, BAD_CAST "host-passthrough")) {
				xmlUnlinkNode(n);
				xmlFreeNode(n);
			}
		}
	}

	r = set_disk(devices, "vda", c->disk, c->disk_format, c->disk_io);
	if (r < 0)
		return r;
	r = set_disk(devices, "vdb", c->home, NULL, c->disk_io);
	if (r < 0)
		return r;
	serial = child(devices, "serial");
	if (!serial) {
		serial = xmlNewChild(devices, NULL, BAD_CAST "serial", NULL);
		if (!serial || set_prop(serial, "type", "pty") < 0 ||
		    set_prop(xmlNewChild(serial, NULL, BAD_CAST "target", NULL), "port", "0") < 0)
			return -ENOMEM;
	}
	n = ensure_child(serial, "log");
	if (set_prop(n, "file", c->console_log) < 0 || set_prop(n, "append", "off") < 0)
		return -ENOMEM;
	r = set_channel(devices, c);
	if (r < 0)
		return r;
	/* A template with an interface gets the workspace's reserved MAC on the first one. */
	n = child(devices, "interface");
	if (n && c->mac && set_prop(ensure_child(n, "mac"), "address", c->mac) < 0)
		return -ENOMEM;
	r = set_shares(root, devices, c);
	if (r < 0)
		return r;

	xmlDocDumpFormatMemoryEnc(doc, &out, &len, "UTF-8", 1);
	if (!out)
		return -ENOMEM;
	*ret_xml = strndup((const char *)out, (size_t)len);
	xmlFree(out);
	return *ret_xml ? 0 : -ENOMEM;
}

static int copy_prop(xmlNodePtr n, const char *name, char *dst, size_t size)
{
	_cleanup_xmlfree_ xmlChar *v = xmlGetProp(n, BAD_CAST name);

	if (!v || xmlStrlen(v) >= (int)size)
		return SLATE_ERR_INVALID_FORMAT;
	memcpy(dst, v, (size_t)xmlStrlen(v) + 1);
	return 0;
}

int vm_xml_metadata(const char *domain_xml, struct vm_metadata *ret)
{
	_cleanup_(xmlFreeDocp) xmlDocPtr doc = NULL;
	_cleanup_xmlfree_ xmlChar *type = NULL, *owner = NULL, *base = NULL;
	struct vm_metadata m = {0};
	xmlNodePtr root, md, ws = NULL;
	char *end;
	int r;

	r = parse_doc(domain_xml, &doc);
	if (r < 0)
		return r;
	root = xmlDocGetRootElement(doc);
	if (!root || !xmlStrEqual(root->name, BAD_CAST "domain"))
		return SLATE_ERR_INVALID_FORMAT;
	md = child(root, "metadata");
	for (xmlNodePtr n = md ? md->children : NULL; n; n = n->next)
		if (n->type == XML_ELEMENT_NODE && n->ns &&
		    xmlStrEqual(n->ns->href, BAD_CAST VM_XML_NAMESPACE) &&
		    xmlStrEqual(n->name, BAD_CAST "workspace"))
			ws = n;
	if (!ws)
		return -ENOENT;
	if ((r = copy_prop(ws, "name", m.workspace, sizeof(m.workspace))) < 0 ||
	    (r = copy_prop(ws, "uuid", m.uuid, sizeof(m.uuid))) < 0 ||
	    (r = copy_prop(ws, "image", m.image_id, sizeof(m.image_id))) < 0)
		return r;
	owner = xmlGetProp(ws, BAD_CAST "owner");
	base = xmlGetProp(ws, BAD_CAST "base-version");
	if (!owner || !base)
		return SLATE_ERR_INVALID_FORMAT;
	errno = 0;
	m.owner = (uid_t)strtoul((const char *)owner, &end, 10);
	if (errno || *end || end == (char *)owner)
		return SLATE_ERR_INVALID_FORMAT;
	m.base_version = strtoll((const char *)base, &end, 10);
	if (errno || *end || end == (char *)base)
		return SLATE_ERR_INVALID_FORMAT;
	type = xmlGetProp(root, BAD_CAST "type");
	m.kvm = type && xmlStrEqual(type, BAD_CAST "kvm");
	*ret = m;
	return 0;
}

int vm_xml_vsock_cid(const char *domain_xml, unsigned *ret)
{
	_cleanup_(xmlFreeDocp) xmlDocPtr doc = NULL;
	_cleanup_xmlfree_ xmlChar *addr = NULL;
	xmlNodePtr root, devices, vsock, cid;
	unsigned long v;
	char *end;
	int r;

	r = parse_doc(domain_xml, &doc);
	if (r < 0)
		return r;
	root = xmlDocGetRootElement(doc);
	devices = root ? child(root, "devices") : NULL;
	vsock = devices ? child(devices, "vsock") : NULL;
	cid = vsock ? child(vsock, "cid") : NULL;
	addr = cid ? xmlGetProp(cid, BAD_CAST "address") : NULL;
	if (!addr)
		return -ENOENT;
	errno = 0;
	v = strtoul((const char *)addr, &end, 10);
	if (errno || *end || end == (char *)addr || v < 3 || v > UINT32_MAX)
		return SLATE_ERR_INVALID_FORMAT;
	*ret = (unsigned)v;
	return 0;
}

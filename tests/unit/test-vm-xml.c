/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The domain XML: built from the template (built-in and an override file), parsed back with
 * libxml2 and checked element by element; paths with quotes, ampersands and angle brackets come
 * back byte for byte; metadata round-trips; bad templates and configs are refused; a restore's
 * <genid/> and a live domain's id; the kernel command line. Also the console tail used in start
 * errors.
 */

#include <libxml/parser.h>
#include <libxml/relaxng.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/error.h"
#include "util/macro.h"
#include "vm/lifecycle.h"
#include "vm/xml.h"

#define ODD_DIR "/srv/it's \"odd\" & <weird>/ws"

static const struct vm_share shares[] = {
        {.socket = "/run/slate/vm/w & co/fs-share0.sock", .tag = "share0", .readonly = true},
        {.socket = "/run/slate/vm/w/fs-share1.sock", .tag = "share1", .readonly = false},
};

static struct vm_config base_config(void)
{
	return (struct vm_config){
	        .domain_name = "slate-ws1",
	        .uuid = "9d62a7a7-3641-41c9-9e4e-edcf05dfd08f",
	        .workspace = "ws1",
	        .owner = 1000,
	        .image_id = "test",
	        .base_version = 3,
	        .mac = "52:54:00:12:34:56",
	        .memory_mib = 1536,
	        .cpus = 3,
	        .kvm = false,
	        .disk = ODD_DIR "/disk.img",
	        .home = ODD_DIR "/home.img",
	        .disk_io = "io_uring",
	        .kernel = "/var/lib/slate/images/test/vmlinuz",
	        .initrd = "/var/lib/slate/images/test/initrd.img",
	        .cmdline = "console=ttyS0 root=/dev/vda rw quote=\"x\" amp=&",
	        .console_log = "/run/slate/vm/ws1/console.log",
	        .channel_socket = "/run/slate/vm/ws1/channel.sock",
	};
}

struct parsed {
	xmlDocPtr doc;
	xmlXPathContextPtr ctx;
};

static void parse(const char *xml, struct parsed *p)
{
	p->doc = xmlReadMemory(xml, (int)strlen(xml), "t.xml", NULL, XML_PARSE_NONET);
	assert_non_null(p->doc);
	p->ctx = xmlXPathNewContext(p->doc);
	assert_non_null(p->ctx);
	assert_int_equal(xmlXPathRegisterNs(p->ctx, BAD_CAST "s", BAD_CAST VM_XML_NAMESPACE), 0);
}

static void parsed_free(struct parsed *p)
{
	xmlXPathFreeContext(p->ctx);
	xmlFreeDoc(p->doc);
}

/* The string value of an XPath expression ("" when nothing matches). Caller frees. */
static char *xp(struct parsed *p, const char *expr)
{
	_cleanup_free_ char *e = NULL;
	xmlXPathObjectPtr o;
	char *s;

	assert_true(asprintf(&e, "string(%s)", expr) > 0);
	o = xmlXPathEvalExpression(BAD_CAST e, p->ctx);
	assert_non_null(o);
	s = strdup((const char *)o->stringval);
	xmlXPathFreeObject(o);
	return s;
}

static int count(struct parsed *p, const char *expr)
{
	_cleanup_free_ char *e = NULL;
	xmlXPathObjectPtr o;
	int n;

	assert_true(asprintf(&e, "count(%s)", expr) > 0);
	o = xmlXPathEvalExpression(BAD_CAST e, p->ctx);
	assert_non_null(o);
	n = (int)o->floatval;
	xmlXPathFreeObject(o);
	return n;
}

#define assert_xp(p, expr, want)                                                                   \
	do {                                                                                       \
		char *got_ = xp((p), (expr));                                                      \
		assert_string_equal(got_, (want));                                                 \
		free(got_);                                                                        \
	} while (0)

static void build(const struct vm_config *c, struct parsed *p)
{
	_cleanup_free_ char *xml = NULL;

	assert_int_equal(vm_xml_build(vm_template_builtin(), c, &xml), 0);
	parse(xml, p);
}

static void test_builtin(void **state)
{
	struct vm_config c = base_config();
	struct parsed p;

	build(&c, &p);
	assert_xp(&p, "/domain/@type", "qemu");
	assert_xp(&p, "/domain/name", "slate-ws1");
	assert_xp(&p, "/domain/uuid", c.uuid);
	assert_xp(&p, "/domain/memory", "1536");
	assert_xp(&p, "/domain/memory/@unit", "MiB");
	assert_xp(&p, "/domain/currentMemory", "1536");
	assert_xp(&p, "/domain/vcpu", "3");
	/* Metadata in slate's namespace. */
	assert_int_equal(count(&p, "/domain/metadata/s:workspace"), 1);
	assert_xp(&p, "/domain/metadata/s:workspace/@name", "ws1");
	assert_xp(&p, "/domain/metadata/s:workspace/@owner", "1000");
	assert_xp(&p, "/domain/metadata/s:workspace/@image", "test");
	assert_xp(&p, "/domain/metadata/s:workspace/@base-version", "3");
	assert_xp(&p, "/domain/metadata/s:workspace/@uuid", c.uuid);
	/* Direct kernel boot. */
	assert_xp(&p, "/domain/os/kernel", c.kernel);
	assert_xp(&p, "/domain/os/initrd", c.initrd);
	assert_xp(&p, "/domain/os/cmdline", c.cmdline);
	assert_int_equal(count(&p, "/domain/os/boot"), 0);
	/* TCG: no host CPU model. */
	assert_int_equal(count(&p, "/domain/cpu"), 0);
	/* Disks: odd paths come back byte for byte; the policy attributes stay. */
	assert_int_equal(count(&p, "/domain/devices/disk"), 2);
	assert_xp(&p, "/domain/devices/disk[target/@dev='vda']/source/@file", c.disk);
	assert_xp(&p, "/domain/devices/disk[target/@dev='vdb']/source/@file", c.home);
	assert_xp(&p, "/domain/devices/disk[target/@dev='vda']/target/@bus", "virtio");
	assert_xp(&p, "/domain/devices/disk[target/@dev='vda']/driver/@io", "io_uring");
	assert_xp(&p, "/domain/devices/disk[target/@dev='vdb']/driver/@cache", "none");
	assert_xp(&p, "/domain/devices/disk[target/@dev='vdb']/driver/@discard", "unmap");
	assert_xp(&p, "/domain/devices/disk[target/@dev='vdb']/driver/@detect_zeroes", "unmap");
	/* Console: a pty, logged. */
	assert_xp(&p, "/domain/devices/serial/@type", "pty");
	assert_xp(&p, "/domain/devices/serial/log/@file", c.console_log);
	assert_xp(&p, "/domain/devices/serial/log/@append", "off");
	/* The guest channel: virtio-serial on a unix socket. */
	assert_xp(&p, "/domain/devices/channel[target/@name='org.slate.channel.0']/source/@path",
	          c.channel_socket);
	assert_xp(&p, "/domain/devices/channel/source/@mode", "bind");
	assert_int_equal(count(&p, "/domain/devices/vsock"), 0);
	/* No network, a balloon that reports free pages, no shares. */
	assert_int_equal(count(&p, "/domain/devices/interface"), 0);
	assert_xp(&p, "/domain/devices/memballoon/@freePageReporting", "on");
	assert_int_equal(count(&p, "/domain/devices/filesystem"), 0);
	assert_int_equal(count(&p, "/domain/memoryBacking"), 0);
	parsed_free(&p);
}

static void test_kvm_vsock_firmware(void **state)
{
	struct vm_config c = base_config();
	struct parsed p;

	c.kvm = true;
	c.vsock = true;
	c.kernel = c.initrd = c.cmdline = NULL;
	c.disk_io = "native";
	build(&c, &p);
	assert_xp(&p, "/domain/@type", "kvm");
	assert_xp(&p, "/domain/cpu/@mode", "host-passthrough");
	assert_int_equal(count(&p, "/domain/devices/channel"), 0);
	assert_xp(&p, "/domain/devices/vsock/@model", "virtio");
	assert_xp(&p, "/domain/devices/vsock/cid/@auto", "yes");
	assert_int_equal(count(&p, "/domain/os/kernel"), 0);
	assert_xp(&p, "/domain/os/boot/@dev", "hd");
	assert_xp(&p, "/domain/devices/disk[target/@dev='vda']/driver/@io", "native");
	parsed_free(&p);
}

/* qcow2 storage: vda is the overlay, read through its format (raw would hand the guest the
 * qcow2 file's own bytes); a block device node as a disk becomes a block disk. */
static void test_disk_kinds(void **state)
{
	static const char *const blockdevs[] = {"/dev/loop0", "/dev/vda", "/dev/sda",
	                                        "/dev/nvme0n1"};
	struct vm_config c = base_config();
	const char *blk = NULL;
	struct stat st;
	struct parsed p;

	(void)state;
	c.disk_format = "qcow2";
	build(&c, &p);
	assert_xp(&p, "/domain/devices/disk[target/@dev='vda']/driver/@type", "qcow2");
	assert_xp(&p, "/domain/devices/disk[target/@dev='vdb']/driver/@type", "raw");
	assert_xp(&p, "/domain/devices/disk[target/@dev='vdb']/@type", "file");
	parsed_free(&p);

	for (size_t i = 0; i < ELEMENTSOF(blockdevs) && !blk; i++)
		if (lstat(blockdevs[i], &st) == 0 && S_ISBLK(st.st_mode))
			blk = blockdevs[i];
	if (!blk)
		skip();
	c = base_config();
	c.home = blk;
	build(&c, &p);
	assert_xp(&p, "/domain/devices/disk[target/@dev='vdb']/@type", "block");
	assert_xp(&p, "/domain/devices/disk[target/@dev='vdb']/source/@dev", blk);
	assert_int_equal(count(&p, "/domain/devices/disk[target/@dev='vdb']/source/@file"), 0);
	assert_xp(&p, "/domain/devices/disk[target/@dev='vda']/@type", "file");
	parsed_free(&p);
}

static void test_shares(void **state)
{
	struct vm_config c = base_config();
	struct parsed p;

	c.shares = shares;
	c.n_shares = 2;
	build(&c, &p);
	assert_xp(&p, "/domain/memoryBacking/source/@type", "memfd");
	assert_xp(&p, "/domain/memoryBacking/access/@mode", "shared");
	assert_int_equal(count(&p, "/domain/devices/filesystem"), 2);
	assert_xp(&p, "/domain/devices/filesystem[1]/driver/@type", "virtiofs");
	/* Only the socket of slated's virtiofsd: no host directory, no binary for libvirt. */
	assert_xp(&p, "/domain/devices/filesystem[1]/source/@socket",
	          "/run/slate/vm/w & co/fs-share0.sock");
	assert_int_equal(count(&p, "/domain/devices/filesystem/source/@dir"), 0);
	assert_int_equal(count(&p, "/domain/devices/filesystem/binary"), 0);
	assert_xp(&p, "/domain/devices/filesystem[1]/target/@dir", "share0");
	assert_int_equal(count(&p, "/domain/devices/filesystem[1]/readonly"), 0);
	assert_int_equal(count(&p, "/domain/devices/filesystem[2]/readonly"), 0);
	parsed_free(&p);
}

/*
 * libvirt validates a definition against its RelaxNG schema (VIR_DOMAIN_DEFINE_VALIDATE); so
 * does this test, for every shape slated builds, with the schema libvirt installed. It caught a
 * <memoryBacking> appended after <devices>, which libvirt refused.
 */
#define LIBVIRT_DOMAIN_RNG "/usr/share/libvirt/schemas/domain.rng"

static void assert_valid(const struct vm_config *c)
{
	_cleanup_free_ char *xml = NULL;
	xmlRelaxNGParserCtxtPtr pc;
	xmlRelaxNGValidCtxtPtr vc;
	xmlRelaxNGPtr schema;
	xmlDocPtr doc;

	assert_int_equal(vm_xml_build(vm_template_builtin(), c, &xml), 0);
	pc = xmlRelaxNGNewParserCtxt(LIBVIRT_DOMAIN_RNG);
	assert_non_null(pc);
	schema = xmlRelaxNGParse(pc);
	assert_non_null(schema);
	vc = xmlRelaxNGNewValidCtxt(schema);
	doc = xmlReadMemory(xml, (int)strlen(xml), "domain.xml", NULL, XML_PARSE_NONET);
	assert_non_null(doc);
	if (xmlRelaxNGValidateDoc(vc, doc) != 0)
		fail_msg("the domain XML does not validate against %s:\n%s", LIBVIRT_DOMAIN_RNG,
		         xml);
	xmlFreeDoc(doc);
	xmlRelaxNGFreeValidCtxt(vc);
	xmlRelaxNGFree(schema);
	xmlRelaxNGFreeParserCtxt(pc);
}

static void test_schema(void **state)
{
	struct vm_config c = base_config();

	if (access(LIBVIRT_DOMAIN_RNG, R_OK) < 0)
		skip();
	assert_valid(&c);
	c.genid = true;
	assert_valid(&c);
	c.shares = shares;
	c.n_shares = 2;
	assert_valid(&c);
	c.kvm = true;
	c.vsock = true;
	c.kernel = c.initrd = c.cmdline = NULL;
	assert_valid(&c);
}

static void test_metadata_roundtrip(void **state)
{
	struct vm_config c = base_config();
	_cleanup_free_ char *xml = NULL;
	struct vm_metadata md;

	c.kvm = true;
	assert_int_equal(vm_xml_build(vm_template_builtin(), &c, &xml), 0);
	assert_int_equal(vm_xml_metadata(xml, &md), 0);
	assert_string_equal(md.workspace, "ws1");
	assert_string_equal(md.uuid, c.uuid);
	assert_string_equal(md.image_id, "test");
	assert_int_equal(md.owner, 1000);
	assert_int_equal(md.base_version, 3);
	assert_true(md.kvm);
	/* Not one of ours. */
	assert_int_equal(vm_xml_metadata("<domain type='kvm'><name>x</name></domain>", &md),
	                 -ENOENT);
	assert_int_equal(vm_xml_metadata("<not-xml", &md), SLATE_ERR_INVALID_FORMAT);
}

/* A template with its own interface and metadata: the MAC is set, foreign metadata stays, a
 * stale slate element is replaced, and an admin's <cpu> is kept under KVM. */
static void test_override_template(void **state)
{
	static const char tpl[] =
	        "<domain type='kvm'><name>x</name><memory>1</memory>"
	        "<metadata><other:x xmlns:other='urn:other'/>"
	        "<slate:workspace xmlns:slate='" VM_XML_NAMESPACE "' name='stale'/></metadata>"
	        "<os><type>hvm</type><boot dev='network'/></os>"
	        "<cpu mode='host-model'/>"
	        "<devices>"
	        "<disk type='file' device='disk'><target dev='vda' bus='virtio'/></disk>"
	        "<disk type='file' device='disk'><target dev='vdb' bus='virtio'/></disk>"
	        "<interface type='network'><source network='default'/></interface>"
	        "</devices></domain>";
	char path[] = "/tmp/test-vm-xml.XXXXXX";
	struct vm_config c = base_config();
	_cleanup_free_ char *xml = NULL, *text = NULL, *origin = NULL;
	struct parsed p;
	int fd;

	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, tpl, strlen(tpl)), (ssize_t)strlen(tpl));
	close(fd);
	assert_int_equal(vm_template_load(path, &text, &origin), 0);
	assert_string_equal(origin, path);
	assert_string_equal(text, tpl);
	unlink(path);
	assert_int_equal(vm_template_load(path, &text, &origin), -ENOENT);

	c.kvm = true;
	assert_int_equal(vm_xml_build(tpl, &c, &xml), 0);
	parse(xml, &p);
	assert_xp(&p, "/domain/devices/interface/mac/@address", "52:54:00:12:34:56");
	assert_int_equal(count(&p, "/domain/metadata/s:workspace"), 1);
	assert_xp(&p, "/domain/metadata/s:workspace/@name", "ws1");
	assert_int_equal(count(&p, "/domain/metadata/*"), 2);
	assert_xp(&p, "/domain/cpu/@mode", "host-model");
	/* The serial console and the channel are added when the template lacks them. */
	assert_xp(&p, "/domain/devices/serial/log/@file", c.console_log);
	assert_xp(&p, "/domain/devices/channel/target/@name", VM_CHANNEL_NAME);
	assert_int_equal(count(&p, "/domain/os/boot"), 0);
	parsed_free(&p);
}

/* A VM generation ID for a restore from a booted snapshot: one <genid/> right after <uuid>,
 * never a second one, and a template's own value kept. A live domain's id attribute (a save
 * image's XML has one) is dropped. */
static void test_genid_and_live_id(void **state)
{
	static const char tpl[] =
	        "<domain type='qemu' id='7'><name>slate-base</name>"
	        "<uuid>0b6f4d8e-6a51-4f0a-9d3e-2a7c8c1b2f11</uuid>%s<memory>1</memory>"
	        "<os><type>hvm</type></os><devices>"
	        "<disk type='file' device='disk'><target dev='vda' bus='virtio'/></disk>"
	        "<disk type='file' device='disk'><target dev='vdb' bus='virtio'/></disk>"
	        "</devices></domain>";
	struct vm_config c = base_config();
	_cleanup_free_ char *with_genid = NULL, *without = NULL;
	char *xml = NULL;
	struct parsed p;

	(void)state;
	/* The built-in template has none: added only when asked. */
	build(&c, &p);
	assert_int_equal(count(&p, "/domain/genid"), 0);
	parsed_free(&p);
	c.genid = true;
	build(&c, &p);
	assert_int_equal(count(&p, "/domain/genid"), 1);
	assert_int_equal(count(&p, "//genid"), 1);
	assert_xp(&p, "name(/domain/uuid/following-sibling::*[1])", "genid");
	assert_xp(&p, "/domain/genid", ""); /* libvirt fills it in */
	assert_int_equal(count(&p, "/domain/genid/node()"), 0);
	assert_int_equal(count(&p, "/domain/@id"), 0);
	parsed_free(&p);

	/* A saved domain's XML: its id goes, its genid stays as it was. */
	assert_true(asprintf(&with_genid, tpl,
	                     "<genid>43dc0cf8-809b-4adb-9bea-a9abb5f3d90d</genid>") > 0);
	assert_true(asprintf(&without, tpl, "") > 0);
	assert_int_equal(vm_xml_build(with_genid, &c, &xml), 0);
	parse(xml, &p);
	free(xml);
	assert_int_equal(count(&p, "//genid"), 1);
	assert_xp(&p, "/domain/genid", "43dc0cf8-809b-4adb-9bea-a9abb5f3d90d");
	assert_int_equal(count(&p, "/domain/@id"), 0);
	assert_xp(&p, "/domain/@type", "qemu");
	assert_xp(&p, "/domain/uuid", c.uuid);
	assert_xp(&p, "/domain/name", "slate-ws1");
	parsed_free(&p);

	c.genid = false;
	assert_int_equal(vm_xml_build(without, &c, &xml), 0);
	parse(xml, &p);
	free(xml);
	assert_int_equal(count(&p, "//genid"), 0);
	assert_int_equal(count(&p, "/domain/@id"), 0);
	parsed_free(&p);
	c.kvm = true;
	c.genid = true;
	assert_int_equal(vm_xml_build(without, &c, &xml), 0);
	parse(xml, &p);
	free(xml);
	assert_int_equal(count(&p, "//genid"), 1);
	assert_xp(&p, "name(/domain/uuid/following-sibling::*[1])", "genid");
	assert_int_equal(count(&p, "/domain/@id"), 0);
	assert_xp(&p, "/domain/@type", "kvm");
	parsed_free(&p);
	/* Built again from its own output: still one. */
	assert_int_equal(vm_xml_build(with_genid, &c, &xml), 0);
	{
		_cleanup_free_ char *again = NULL;
		assert_int_equal(vm_xml_build(xml, &c, &again), 0);
		free(xml);
		parse(again, &p);
	}
	assert_int_equal(count(&p, "//genid"), 1);
	assert_xp(&p, "/domain/genid", "43dc0cf8-809b-4adb-9bea-a9abb5f3d90d");
	parsed_free(&p);
}

/* The kernel command line of a direct kernel boot. */
static void test_kernel_cmdline(void **state)
{
	static const struct {
		const char *image, *want;
	} cases[] = {
	        {NULL, "console=ttyS0 root=/dev/vda rw"},
	        {"", "console=ttyS0 root=/dev/vda rw"},
	        {"console=ttyS0 quiet", "console=ttyS0 quiet root=/dev/vda rw"},
	        {"root=/dev/vdz ro console=hvc0", "root=/dev/vdz ro console=hvc0"},
	        {"quiet root=LABEL=x", "quiet root=LABEL=x"},
	};

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		_cleanup_free_ char *got = vm_kernel_cmdline(cases[i].image);
		assert_non_null(got);
		assert_string_equal(got, cases[i].want);
	}
}

static void test_refusals(void **state)
{
	struct vm_config c = base_config();
	char *xml = NULL;

	assert_int_equal(vm_xml_build("<domain><devices/></domain>", &c, &xml),
	                 SLATE_ERR_INVALID_FORMAT); /* no vda/vdb */
	assert_int_equal(vm_xml_build("<network/>", &c, &xml), SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(vm_xml_build("<domain", &c, &xml), SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(vm_xml_build("<domain/>", &c, &xml), SLATE_ERR_INVALID_FORMAT);
	/* An entity would be expanded from outside: never. */
	assert_int_equal(vm_xml_build("<!DOCTYPE d [<!ENTITY e SYSTEM 'file:///etc/passwd'>]>"
	                              "<domain><name>&e;</name><devices/></domain>",
	                              &c, &xml),
	                 SLATE_ERR_INVALID_FORMAT);
	c.disk = NULL;
	assert_int_equal(vm_xml_build(vm_template_builtin(), &c, &xml), -EINVAL);
	c = base_config();
	c.n_shares = VM_MAX_SHARES + 1;
	assert_int_equal(vm_xml_build(vm_template_builtin(), &c, &xml), -EINVAL);
	assert_null(xml);
}

static void test_console_tail(void **state)
{
	char path[] = "/tmp/test-vm-tail.XXXXXX", buf[256];
	const char text[] = "line1\r\nline2\r\n\x1b[6nline3\nline4\n\n";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	close(fd);
	assert_int_equal(vm_console_tail(path, 2, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "[6nline3\nline4");
	assert_int_equal(vm_console_tail(path, 10, buf, 8), 0);
	assert_int_equal(strlen(buf), 7);
	unlink(path);
	assert_int_equal(vm_console_tail(path, 2, buf, sizeof(buf)), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_builtin),
	        cmocka_unit_test(test_kvm_vsock_firmware),
	        cmocka_unit_test(test_disk_kinds),
	        cmocka_unit_test(test_shares),
	        cmocka_unit_test(test_schema),
	        cmocka_unit_test(test_metadata_roundtrip),
	        cmocka_unit_test(test_override_template),
	        cmocka_unit_test(test_genid_and_live_id),
	        cmocka_unit_test(test_kernel_cmdline),
	        cmocka_unit_test(test_refusals),
	        cmocka_unit_test(test_console_tail),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Postinstall steps in an installer VM (postinstall.h; doc/catalog.md, "Postinstall steps"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libvirt/libvirt.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "image/postinstall.h"
#include "image/verify.h"
#include "storage/rmtree.h"
#include "storage/sparse.h"
#include "storage/spawn.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/time.h"
#include "vm/domain.h"
#include "vm/kvm.h"

#ifndef SLATE_BIN_DIR
#define SLATE_BIN_DIR "/usr/bin"
#endif

#define ERROR_MAX 256
#define POLL_MS 100
#define GRACE_S 30        /* after the verdict, for the guest to unmount and power off */
#define GUEST_MARGIN_S 30 /* the guest's own deadline comes this much before ours */
#define STEPS_FS_MIN (8ull << 20)
#define READ_CHUNK (16u * 1024u)

DEFINE_TRIVIAL_CLEANUP_FUNC(xmlDocPtr, xmlFreeDoc);

/* ---- the console log parser --------------------------------------------------------------- */

/* The last POSTINSTALL_OUTPUT_MAX bytes of some text, NUL-terminated. */
struct tail {
	char text[POSTINSTALL_OUTPUT_MAX + 1];
	size_t len;
};

struct postinstall_log {
	char nonce[POSTINSTALL_NONCE_LEN + 1];
	char (*uuids)[37];
	size_t n;
	enum postinstall_state state;
	size_t done;
	bool in_step;
	int exit_status;
	char line[POSTINSTALL_LINE_MAX];
	size_t line_len;
	bool line_cut; /* the line under way was too long: what comes of it is never a marker */
	struct tail output, console;
	char error[ERROR_MAX];
	bool ended;
};

static void tail_reset(struct tail *t)
{
	t->len = 0;
	t->text[0] = '\0';
}

/* Appends p[0..n) shown safely: printable ASCII, tab and newline; '?' for anything else. */
static void tail_append(struct tail *t, const char *p, size_t n)
{
	if (n > POSTINSTALL_OUTPUT_MAX) {
		p += n - POSTINSTALL_OUTPUT_MAX;
		n = POSTINSTALL_OUTPUT_MAX;
	}
	if (t->len + n > POSTINSTALL_OUTPUT_MAX) {
		size_t drop = t->len + n - POSTINSTALL_OUTPUT_MAX;
		memmove(t->text, t->text + drop, t->len - drop);
		t->len -= drop;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		t->text[t->len++] =
		        (c >= 0x20 && c < 0x7f) || c == '\t' || c == '\n' ? (char)c : '?';
	}
	t->text[t->len] = '\0';
}

static bool is_hex_lower(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int postinstall_log_new(const char *nonce, const char *const *uuids, size_t n,
                        struct postinstall_log **ret)
{
	struct postinstall_log *l;

	if (!nonce || strlen(nonce) != POSTINSTALL_NONCE_LEN ||
	    !is_hex_lower(nonce, POSTINSTALL_NONCE_LEN) || (n && !uuids) || !ret ||
	    n > CATALOG_MAX_STEPS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!uuids[i] || strlen(uuids[i]) != 36)
			return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->uuids = calloc(n ? n : 1, sizeof(*l->uuids));
	if (!l->uuids) {
		free(l);
		return -ENOMEM;
	}
	memcpy(l->nonce, nonce, POSTINSTALL_NONCE_LEN + 1);
	for (size_t i = 0; i < n; i++)
		memcpy(l->uuids[i], uuids[i], 37);
	l->n = n;
	l->exit_status = -1;
	*ret = l;
	return 0;
}

void postinstall_log_free(struct postinstall_log *l)
{
	if (!l)
		return;
	free(l->uuids);
	free(l);
}

static void set_error(struct postinstall_log *l, const char *what, const char *detail,
                      size_t detail_len)
{
	struct tail t;

	tail_reset(&t);
	if (detail)
		tail_append(&t, detail, detail_len < ERROR_MAX / 2 ? detail_len : ERROR_MAX / 2);
	(void)snprintf(l->error, sizeof(l->error), "%s%s%s", what, detail ? ": " : "",
	               detail ? t.text : "");
	l->state = POSTINSTALL_ERROR;
	l->in_step = false;
}

/* Splits s[0..n) at single spaces into at most max words; 0 when a word is empty. */
static size_t words(const char *s, size_t n, const char **w, size_t *wl, size_t max)
{
	size_t k = 0, start = 0;

	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != ' ')
			continue;
		if (i == start || k == max)
			return 0;
		w[k] = s + start;
		wl[k] = i - start;
		k++;
		start = i + 1;
	}
	return k;
}

static bool word_is(const char *w, size_t wl, const char *s)
{
	return wl == strlen(s) && memcmp(w, s, wl) == 0;
}

/* "rc=N", N in 0..255 without leading zeros. Returns N or -1. */
static int parse_rc(const char *w, size_t wl)
{
	int v = 0;

	if (wl < 4 || wl > 6 || memcmp(w, "rc=", 3) != 0 || (wl > 4 && w[3] == '0'))
		return -1;
	for (size_t i = 3; i < wl; i++) {
		if (w[i] < '0' || w[i] > '9')
			return -1;
		v = v * 10 + (w[i] - '0');
	}
	return v <= 255 ? v : -1;
}

/* Handles a whole console line (no CR, no LF). Returns true when it was one of our markers. */
static bool marker(struct postinstall_log *l, const char *s, size_t n)
{
	const char *w[4];
	size_t wl[4], k;
	bool running = l->state == POSTINSTALL_RUNNING;

	if (n < 6 || memcmp(s, "SLATE-", 6) != 0)
		return false;
	/* INSTALL-ERROR's message may have spaces: only its first two words are split. */
	if (n > 20 && memcmp(s, "SLATE-INSTALL-ERROR ", 20) == 0) {
		if (n < 20 + POSTINSTALL_NONCE_LEN ||
		    memcmp(s + 20, l->nonce, POSTINSTALL_NONCE_LEN) != 0 ||
		    (n > 20 + POSTINSTALL_NONCE_LEN && s[20 + POSTINSTALL_NONCE_LEN] != ' '))
			return false;
		if (l->state == POSTINSTALL_WAITING || running) {
			size_t off = 20 + POSTINSTALL_NONCE_LEN + 1;
			if (off > n)
				off = n;
			set_error(l, "the installer failed", s + off, n - off);
		}
		return true;
	}
	k = words(s, n, w, wl, ELEMENTSOF(w));
	if (k < 2 || !word_is(w[1], wl[1], l->nonce))
		return false; /* not ours: another run's, or a step printing look-alikes */

	if (word_is(w[0], wl[0], "SLATE-INSTALL-BEGIN") && k == 2) {
		if (l->state == POSTINSTALL_WAITING)
			l->state = POSTINSTALL_RUNNING;
		else if (running)
			set_error(l, "the installer started twice", NULL, 0);
		return true;
	}
	if (word_is(w[0], wl[0], "SLATE-STEP-BEGIN") && k == 3) {
		if (!running)
			return true;
		if (l->in_step || l->done >= l->n || !word_is(w[2], wl[2], l->uuids[l->done])) {
			set_error(l, "a step started out of order", w[2], wl[2]);
			return true;
		}
		l->in_step = true;
		tail_reset(&l->output);
		return true;
	}
	if (word_is(w[0], wl[0], "SLATE-STEP-END") && k == 4) {
		int rc = parse_rc(w[3], wl[3]);

		if (!running)
			return true;
		if (!l->in_step || !word_is(w[2], wl[2], l->uuids[l->done]) || rc < 0) {
			set_error(l, "a step ended out of order", w[2], wl[2]);
			return true;
		}
		l->in_step = false;
		if (rc == 0) {
			l->done++;
		} else {
			l->exit_status = rc;
			l->state = POSTINSTALL_FAILED;
		}
		return true;
	}
	if (word_is(w[0], wl[0], "SLATE-INSTALL-END") && k == 3) {
		if (!running)
			return true; /* after a failure: "failed", as expected */
		if (word_is(w[2], wl[2], "ok") && !l->in_step && l->done == l->n)
			l->state = POSTINSTALL_SUCCEEDED;
		else if (word_is(w[2], wl[2], "timeout"))
			set_error(l, "the installer's deadline passed", NULL, 0);
		else
			set_error(l, "the installer ended before every step had run", w[2], wl[2]);
		return true;
	}
	return false;
}

/* A piece of console text: a whole line (eol) or a part of an over-long one. */
static void piece(struct postinstall_log *l, const char *s, size_t n, bool eol)
{
	bool whole = eol && !l->line_cut;
	struct tail *t;

	if (whole && marker(l, s, n))
		return;
	t = l->in_step ? &l->output : &l->console;
	tail_append(t, s, n);
	if (eol)
		tail_append(t, "\n", 1);
}

enum postinstall_state postinstall_log_feed(struct postinstall_log *l, const void *p, size_t n)
{
	const char *s = p;

	if (!l)
		return POSTINSTALL_ERROR;
	for (size_t i = 0; i < n && !l->ended; i++) {
		char c = s[i];

		if (c == '\r')
			continue; /* the serial console's line ends are CR LF */
		if (c == '\n') {
			piece(l, l->line, l->line_len, true);
			l->line_len = 0;
			l->line_cut = false;
			continue;
		}
		if (l->line_len == sizeof(l->line)) {
			piece(l, l->line, l->line_len, false);
			l->line_len = 0;
			l->line_cut = true;
		}
		l->line[l->line_len++] = c;
	}
	return l->state;
}

enum postinstall_state postinstall_log_end(struct postinstall_log *l)
{
	if (!l)
		return POSTINSTALL_ERROR;
	if (!l->ended && l->line_len > 0) {
		piece(l, l->line, l->line_len, false);
		l->line_len = 0;
	}
	l->ended = true;
	if (l->state == POSTINSTALL_WAITING)
		set_error(l, "the installer VM stopped before it ran any step", NULL, 0);
	else if (l->state == POSTINSTALL_RUNNING)
		set_error(l, "the installer VM stopped before it finished", NULL, 0);
	return l->state;
}

enum postinstall_state postinstall_log_state(const struct postinstall_log *l)
{
	return l ? l->state : POSTINSTALL_ERROR;
}

size_t postinstall_log_done(const struct postinstall_log *l)
{
	return l ? l->done : 0;
}

size_t postinstall_log_current(const struct postinstall_log *l)
{
	return l ? l->done : 0;
}

int postinstall_log_exit_status(const struct postinstall_log *l)
{
	return l && l->state == POSTINSTALL_FAILED ? l->exit_status : -1;
}

const char *postinstall_log_output(const struct postinstall_log *l)
{
	return l ? l->output.text : "";
}

const char *postinstall_log_console_tail(const struct postinstall_log *l)
{
	return l ? l->console.text : "";
}

const char *postinstall_log_error(const struct postinstall_log *l)
{
	return l && l->state == POSTINSTALL_ERROR ? l->error : "";
}

/* ---- the installer -------------------------------------------------------------------------- */

void postinstall_result_done(struct postinstall_result *r)
{
	if (!r)
		return;
	image_info_free(r->info);
	r->info = NULL;
}

static bool regular_file(const char *dir, const char *name)
{
	_cleanup_free_ char *p = fs_path_join(dir, name);
	struct stat st;

	return p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool trusted_file(const char *dir, const char *name)
{
	_cleanup_free_ char *p = fs_path_join(dir, name);
	struct stat st;

	return p && stat(p, &st) == 0 && (st.st_uid == 0 || st.st_uid == geteuid()) &&
	       (st.st_mode & 022) == 0;
}

/* The installer's directory: cfg's, <state>/installer, or SLATE_DATA_DIR/installer. */
static int installer_find(const struct postinstall_config *cfg, char **ret, struct slate_error *err)
{
	_cleanup_free_ char *state = NULL;
	const char *candidates[2];
	size_t n = 0;

	if (cfg->installer_dir)
		candidates[n++] = cfg->installer_dir;
	else {
		if (cfg->state_dir) {
			state = fs_path_join(cfg->state_dir, POSTINSTALL_INSTALLER_SUBDIR);
			if (!state)
				return -ENOMEM;
			candidates[n++] = state;
		}
		candidates[n++] = SLATE_DATA_DIR "/" POSTINSTALL_INSTALLER_SUBDIR;
	}
	for (size_t i = 0; i < n; i++) {
		const char *bad = NULL;

		if (!regular_file(candidates[i], "vmlinuz") ||
		    !regular_file(candidates[i], "initrd.img"))
			continue;
		/* The installer runs as root over every base image: only root may have made it. */
		if (!trusted_file(candidates[i], "vmlinuz"))
			bad = "vmlinuz";
		else if (!trusted_file(candidates[i], "initrd.img"))
			bad = "initrd.img";
		else if (regular_file(candidates[i], "slate-guest") &&
		         !trusted_file(candidates[i], "slate-guest"))
			bad = "slate-guest";
		if (bad)
			return slate_error_set(err, -EPERM,
			                       "installer: %s/%s is not owned by root or may be "
			                       "written by others: refused",
			                       candidates[i], bad);
		*ret = strdup(candidates[i]);
		return *ret ? 0 : -ENOMEM;
	}
	return slate_error_set(err, -ENOENT,
	                       "no installer kernel: postinstall steps run in an installer VM "
	                       "that boots vmlinuz and initrd.img from %s (or %s); see "
	                       "slate-catalog(5)",
	                       candidates[0], n > 1 ? candidates[1] : candidates[0]);
}

/* Copies the regular file at path into dir_fd/name (mode), holes kept. */
static int copy_in(const char *path, int dir_fd, const char *name, mode_t mode)
{
	_cleanup_close_ int in = -1, out = -1;
	struct stat st;
	int r;

	in = open(path, O_RDONLY | O_NOCTTY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	if (fstat(in, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	out = openat(dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (out < 0)
		return -errno;
	r = sparse_copy(in, out, (uint64_t)st.st_size, NULL, NULL);
	if (r < 0)
		return r;
	return RET_NERRNO(fchmod(out, mode));
}

static int write_file_at(int dir_fd, const char *name, const void *p, size_t n, mode_t mode)
{
	_cleanup_close_ int fd =
	        openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);

	if (fd < 0)
		return -errno;
	return fs_write_all(fd, p, n);
}

static int random_hex(char *out, size_t digits)
{
	static const char hexd[] = "0123456789abcdef";
	uint8_t rnd[32];

	if (digits > 2 * sizeof(rnd) ||
	    getrandom(rnd, (digits + 1) / 2, 0) != (ssize_t)((digits + 1) / 2))
		return -EIO;
	for (size_t i = 0; i < digits; i++)
		out[i] = hexd[(rnd[i / 2] >> (i % 2 ? 0 : 4)) & 15];
	out[digits] = '\0';
	return 0;
}

/*
 * The steps file system: config (nonce, deadline, count), steps/NNNN.uuid and steps/NNNN.cmd in
 * order, files/slate-guest when there is one. Made in stage_fd as steps.img.
 */
static int steps_disk(int stage_fd, const char *stage_path, const struct catalog_step *steps,
                      size_t n, const char *nonce, unsigned deadline_s, const char *guest,
                      struct slate_error *err)
{
	_cleanup_free_ char *tree = NULL, *image = NULL, *out = NULL, *config = NULL;
	_cleanup_close_ int tree_fd = -1, steps_fd = -1, files_fd = -1;
	uint64_t total = 0, size;
	char size_arg[32];
	struct stat st;
	int r;

	if (mkdirat(stage_fd, "steps.d", 0700) < 0)
		return slate_error_set(err, -errno, "installer: %s", strerror(errno));
	r = fs_open_dir_at(stage_fd, "steps.d", &tree_fd);
	if (r >= 0 && (mkdirat(tree_fd, "steps", 0700) < 0 || mkdirat(tree_fd, "files", 0755) < 0))
		r = -errno;
	if (r >= 0)
		r = fs_open_dir_at(tree_fd, "steps", &steps_fd);
	if (r >= 0)
		r = fs_open_dir_at(tree_fd, "files", &files_fd);
	if (r >= 0 &&
	    asprintf(&config, "nonce=%s\ndeadline=%u\ncount=%zu\n", nonce, deadline_s, n) < 0)
		r = -ENOMEM;
	if (r >= 0)
		r = write_file_at(tree_fd, "config", config, strlen(config), 0600);
	for (size_t i = 0; i < n && r >= 0; i++) {
		char name[32], uuid[40];

		(void)snprintf(uuid, sizeof(uuid), "%s\n", steps[i].uuid);
		(void)snprintf(name, sizeof(name), "%04zu.uuid", i);
		r = write_file_at(steps_fd, name, uuid, strlen(uuid), 0600);
		(void)snprintf(name, sizeof(name), "%04zu.cmd", i);
		if (r >= 0)
			r = write_file_at(steps_fd, name, steps[i].command,
			                  strlen(steps[i].command), 0600);
		total += strlen(steps[i].command) + 4096;
	}
	if (r >= 0 && guest) {
		r = copy_in(guest, files_fd, "slate-guest", 0755);
		if (r >= 0 && fstatat(files_fd, "slate-guest", &st, 0) == 0)
			total += (uint64_t)st.st_size;
	}
	if (r < 0)
		return slate_error_errno(err, r, "installer: writing the steps");

	/* Room for the files twice over, in whole MiB. */
	size = 2 * total + (4ull << 20);
	if (size < STEPS_FS_MIN)
		size = STEPS_FS_MIN;
	size = (size + (1ull << 20) - 1) & ~((1ull << 20) - 1);
	(void)snprintf(size_arg, sizeof(size_arg), "%" PRIu64 "k", size >> 10);
	tree = fs_path_join(stage_path, "steps.d");
	image = fs_path_join(stage_path, "steps.img");
	if (!tree || !image)
		return -ENOMEM;
	{
		const char *argv[] = {
		        "mke2fs", "-q",  "-t",     "ext4",        "-O", "^has_journal",   "-F",
		        "-m",     "0",   "-L",     "slate-steps", "-E", "root_owner=0:0", "-d",
		        tree,     image, size_arg, NULL};
		r = spawn_run(argv, &out);
	}
	(void)rmtree_at(stage_fd, "steps.d");
	if (r < 0)
		return slate_error_set(err, r, "installer: mke2fs: %s%s%s", slate_strerror(r),
		                       out && *out ? ": " : "", out ? out : "");
	return 0;
}

static xmlNodePtr text_child(xmlNodePtr parent, const char *name, const char *text)
{
	return parent ? xmlNewTextChild(parent, NULL, BAD_CAST name, BAD_CAST text) : NULL;
}

static xmlNodePtr node(xmlNodePtr parent, const char *name)
{
	return parent ? xmlNewChild(parent, NULL, BAD_CAST name, NULL) : NULL;
}

static bool prop(xmlNodePtr n, const char *name, const char *value)
{
	return n && xmlSetProp(n, BAD_CAST name, BAD_CAST value);
}

struct domain_spec {
	const char *name;
	bool kvm;
	const char *kernel, *initrd, *cmdline;
	const char *disk, *steps, *console;
};

static bool add_disk(xmlNodePtr devices, const char *file, const char *dev, bool readonly)
{
	xmlNodePtr d = node(devices, "disk"), drv = node(d, "driver"), target;

	/* A private clone whose bytes slated hashes and fsyncs after the run: no host flushes. */
	if (!prop(d, "type", "file") || !prop(d, "device", "disk") || !prop(drv, "name", "qemu") ||
	    !prop(drv, "type", "raw") || !prop(drv, "cache", "unsafe") ||
	    !prop(node(d, "source"), "file", file))
		return false;
	target = node(d, "target");
	return prop(target, "dev", dev) && prop(target, "bus", "virtio") &&
	       (!readonly || node(d, "readonly"));
}

/* The installer's transient domain, every value set through libxml2 (escaped by construction). */
static int domain_xml(const struct domain_spec *sp, char **ret)
{
	_cleanup_(xmlFreeDocp) xmlDocPtr doc = xmlNewDoc(BAD_CAST "1.0");
	xmlNodePtr root, os, type, devices, serial, ctl, mem;
	char memory[32];
	xmlChar *text = NULL;
	int len = 0;
	bool ok;

	if (!doc)
		return -ENOMEM;
	root = xmlNewNode(NULL, BAD_CAST "domain");
	if (!root)
		return -ENOMEM;
	xmlDocSetRootElement(doc, root);
	(void)snprintf(memory, sizeof(memory), "%u", POSTINSTALL_MEMORY_MIB);
	mem = text_child(root, "memory", memory);
	os = node(root, "os");
	type = text_child(os, "type", "hvm");
	ok = prop(root, "type", sp->kvm ? "kvm" : "qemu") && text_child(root, "name", sp->name) &&
	     prop(mem, "unit", "MiB") && text_child(root, "vcpu", sp->kvm ? "2" : "1") &&
	     prop(type, "arch", "x86_64") && prop(type, "machine", "pc") &&
	     text_child(os, "kernel", sp->kernel) && text_child(os, "initrd", sp->initrd) &&
	     text_child(os, "cmdline", sp->cmdline) && node(node(root, "features"), "acpi") &&
	     (!sp->kvm || prop(node(root, "cpu"), "mode", "host-passthrough")) &&
	     prop(node(root, "clock"), "offset", "utc") &&
	     text_child(root, "on_poweroff", "destroy") &&
	     text_child(root, "on_reboot", "destroy") && text_child(root, "on_crash", "destroy");
	devices = ok ? node(root, "devices") : NULL;
	ok = devices && add_disk(devices, sp->disk, "vda", false) &&
	     add_disk(devices, sp->steps, "vdb", true);
	serial = ok ? node(devices, "serial") : NULL;
	ok = ok && prop(serial, "type", "file") &&
	     prop(node(serial, "source"), "path", sp->console) &&
	     prop(node(serial, "target"), "port", "0");
	ctl = ok ? node(devices, "controller") : NULL;
	ok = ok && prop(ctl, "type", "usb") && prop(ctl, "model", "none") &&
	     prop(node(devices, "memballoon"), "model", "none");
	if (!ok)
		return -ENOMEM;
	xmlDocDumpMemory(doc, &text, &len);
	if (!text)
		return -ENOMEM;
	*ret = strdup((const char *)text);
	xmlFree(text);
	return *ret ? 0 : -ENOMEM;
}

/* The console file as it grows; follows virtlogd's rotation (a new file under the same name). */
struct console_reader {
	const char *path;
	int fd;
	ino_t ino;
	uint64_t total;
};

static int console_read(struct console_reader *c, struct postinstall_log *l)
{
	char buf[READ_CHUNK];
	struct stat st;

	for (;;) {
		if (c->fd < 0) {
			c->fd = open(c->path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
			if (c->fd < 0)
				return errno == ENOENT ? 0 : -errno;
			if (fstat(c->fd, &st) < 0)
				return -errno;
			c->ino = st.st_ino;
		}
		for (;;) {
			ssize_t n = read(c->fd, buf, sizeof(buf));

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			if (n == 0)
				break;
			c->total += (uint64_t)n;
			if (c->total > POSTINSTALL_CONSOLE_MAX)
				return -EFBIG;
			(void)postinstall_log_feed(l, buf, (size_t)n);
		}
		/* Rotated: what was left in the old file has been read; go on with the new one. */
		if (stat(c->path, &st) < 0 || st.st_ino == c->ino)
			return 0;
		c->fd = safe_close(c->fd);
	}
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static bool domain_active(virDomainPtr dom)
{
	return virDomainIsActive(dom) == 1;
}

/* One run of the installer VM. Fills log; returns 0 when the domain ran and ended (whatever the
 * verdict), or an error with err set. */
static int run_vm(const struct postinstall_config *cfg, const struct domain_spec *sp,
                  const struct catalog_step *steps, size_t n, unsigned timeout_s,
                  struct postinstall_log *l, postinstall_progress_fn progress, void *ud,
                  struct slate_error *err)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	_cleanup_free_ char *xml = NULL;
	struct console_reader c = {.path = sp->console, .fd = -1};
	double t0, verdict_at = 0;
	size_t reported = SIZE_MAX;
	int r;

	r = domain_xml(sp, &xml);
	if (r < 0)
		return slate_error_errno(err, r, "installer: building the domain");
	r = vm_connect(cfg->libvirt_uri ? cfg->libvirt_uri : "qemu:///system", &conn);
	if (r < 0)
		return slate_error_set(err, r, "installer: cannot connect to libvirt (%s): %s",
		                       cfg->libvirt_uri ? cfg->libvirt_uri : "qemu:///system",
		                       vm_last_error());
	t0 = time_mono_s();
	dom = virDomainCreateXML(conn, xml, VIR_DOMAIN_NONE);
	if (!dom)
		return slate_error_set(err, -EIO, "installer: starting %s: %s", sp->name,
		                       vm_last_error());
	log_debug("installer %s started (%s)", sp->name, vm_accel_name(sp->kvm));

	for (;;) {
		enum postinstall_state st;
		bool active = domain_active(dom);

		r = console_read(&c, l);
		if (r < 0)
			break;
		st = postinstall_log_state(l);
		if (st == POSTINSTALL_RUNNING && progress &&
		    reported != postinstall_log_current(l) && postinstall_log_current(l) < n) {
			size_t i = postinstall_log_current(l);
			struct postinstall_progress p = {.step = i, .n_steps = n, .s = &steps[i]};
			reported = i;
			progress(&p, ud);
		}
		if (!active)
			break;
		if (st != POSTINSTALL_WAITING && st != POSTINSTALL_RUNNING) {
			/* The verdict is in; the guest unmounts and powers off. */
			if (verdict_at == 0)
				verdict_at = time_mono_s();
			else if (time_mono_s() - verdict_at > GRACE_S)
				break;
		}
		if (time_mono_s() - t0 > timeout_s) {
			r = -ETIMEDOUT;
			break;
		}
		sleep_ms(POLL_MS);
	}
	if (domain_active(dom)) {
		log_debug("installer %s: destroying it", sp->name);
		(void)virDomainDestroy(dom);
	}
	if (r >= 0)
		r = console_read(&c, l);
	c.fd = safe_close(c.fd);
	(void)postinstall_log_end(l);
	if (r == -ETIMEDOUT)
		return slate_error_set(err, r,
		                       "installer: the steps did not finish within %u s (after %zu "
		                       "of %zu)",
		                       timeout_s, postinstall_log_done(l), n);
	if (r == -EFBIG)
		return slate_error_set(err, r,
		                       "installer: the VM wrote more than %llu MiB to its console",
		                       POSTINSTALL_CONSOLE_MAX >> 20);
	if (r < 0)
		return slate_error_errno(err, r, "installer: reading its console %s", sp->console);
	log_debug("installer %s ended after %.1f s; its console's end:\n%s", sp->name,
	          time_mono_s() - t0, postinstall_log_console_tail(l));
	return 0;
}

static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

static void unlock_install(pthread_mutex_t **m)
{
	if (*m)
		(void)pthread_mutex_unlock(*m);
}

static const char *const stage_scratch[] = {"steps.img", "console.log", "installer.vmlinuz",
                                            "installer.initrd"};

int postinstall_apply(const struct postinstall_config *cfg, const char *id,
                      const struct catalog_step *steps, size_t n, const char *catalog_json,
                      int64_t expect_version, postinstall_progress_fn progress, void *ud,
                      struct postinstall_result *ret, struct slate_error *err)
{
	_cleanup_(unlock_install) pthread_mutex_t *locked = NULL;
	_cleanup_(image_info_freep) struct image_info *old = NULL, *now = NULL;
	_cleanup_(postinstall_log_freep) struct postinstall_log *l = NULL;
	_cleanup_free_ char *installer = NULL, *stage = NULL, *stage_path = NULL, *guest = NULL;
	_cleanup_free_ char *kernel = NULL, *initrd = NULL, *src_kernel = NULL, *src_initrd = NULL;
	_cleanup_free_ char *disk = NULL, *steps_img = NULL, *console = NULL, *name = NULL;
	_cleanup_free_ const char **uuids = NULL;
	_cleanup_close_ int img_fd = -1, stage_fd = -1;
	struct postinstall_result res = {0};
	struct image_info info = {0};
	char nonce[POSTINSTALL_NONCE_LEN + 1], suffix[7], cmdline[256],
	        hex[VERIFY_DIGEST_STRLEN + 1];
	unsigned timeout_s, deadline_s;
	struct domain_spec sp;
	double t0;
	int r;

	if (!cfg || !cfg->storage || !steps || n == 0 || n > CATALOG_MAX_STEPS || !catalog_json ||
	    !ret || image_id_check(id) < 0)
		return slate_error_set(err, -EINVAL, "postinstall: invalid arguments");
	timeout_s = cfg->timeout_s ? cfg->timeout_s : POSTINSTALL_TIMEOUT_S;
	deadline_s = timeout_s > 2 * GUEST_MARGIN_S ? timeout_s - GUEST_MARGIN_S : timeout_s;

	/* One installer at a time: they are heavy, and two of one image would race. */
	(void)pthread_mutex_lock(&install_lock);
	locked = &install_lock;

	r = installer_find(cfg, &installer, err);
	if (r < 0)
		return r;
	src_kernel = fs_path_join(installer, "vmlinuz");
	src_initrd = fs_path_join(installer, "initrd.img");
	guest = fs_path_join(installer, "slate-guest");
	if (!src_kernel || !src_initrd || !guest)
		return -ENOMEM;
	if (!regular_file(installer, "slate-guest")) {
		free(guest);
		guest = regular_file(SLATE_BIN_DIR, "slate-guest")
		                ? fs_path_join(SLATE_BIN_DIR, "slate-guest")
		                : NULL;
		if (!guest)
			log_debug(
			        "postinstall: no slate-guest in %s or %s; steps will not find one",
			        installer, SLATE_BIN_DIR);
	}

	r = image_store_get(cfg->storage, id, &old);
	if (r < 0)
		return slate_error_set(err, r, "image %s: %s", id,
		                       r == -ENOENT ? "not installed" : slate_strerror(r));
	if (expect_version > 0 && old->version != expect_version)
		return slate_error_set(err, -ESTALE,
		                       "image %s changed (version %" PRId64 ", expected %" PRId64
		                       ") while its postinstall steps were prepared: pull again",
		                       id, old->version, expect_version);
	r = image_store_open_dir(cfg->storage, id, &img_fd);
	if (r < 0)
		return slate_error_errno(err, r, "image %s", id);

	/* The clone, the kernel and initrd of the image, the installer's, the steps' disk. */
	r = image_store_stage_dir(cfg->storage, id, &stage_fd, &stage);
	if (r < 0)
		return slate_error_errno(err, r, "staging image %s", id);
	stage_path = fs_path_join(storage_images_path(cfg->storage), stage);
	if (!stage_path) {
		r = -ENOMEM;
		goto fail;
	}
	r = storage_clone_plain(cfg->storage, img_fd, "disk.img", stage_fd, "disk.img", 0600);
	if (r >= 0 && old->kernel_boot) {
		r = storage_clone_plain(cfg->storage, img_fd, "vmlinuz", stage_fd, "vmlinuz", 0444);
		if (r >= 0)
			r = storage_clone_plain(cfg->storage, img_fd, "initrd.img", stage_fd,
			                        "initrd.img", 0444);
	}
	if (r < 0) {
		(void)slate_error_errno(err, r, "cloning image %s", id);
		goto fail;
	}
	r = copy_in(src_kernel, stage_fd, "installer.vmlinuz", 0644);
	if (r >= 0)
		r = copy_in(src_initrd, stage_fd, "installer.initrd", 0644);
	if (r < 0) {
		(void)slate_error_errno(err, r, "installer: copying %s", installer);
		goto fail;
	}
	if ((r = random_hex(nonce, POSTINSTALL_NONCE_LEN)) < 0 || (r = random_hex(suffix, 6)) < 0)
		goto fail;
	r = steps_disk(stage_fd, stage_path, steps, n, nonce, deadline_s, guest, err);
	if (r < 0)
		goto fail;
	if (fchmod(stage_fd, 0711) < 0) {
		r = -errno;
		goto fail;
	}
	r = fs_make_traversable(storage_state_path(cfg->storage), stage_path);
	if (r < 0)
		log_warning("postinstall: cannot make %s traversable for QEMU: %s", stage_path,
		            slate_strerror(r));

	uuids = calloc(n, sizeof(*uuids));
	if (!uuids) {
		r = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < n; i++)
		uuids[i] = steps[i].uuid;
	r = postinstall_log_new(nonce, uuids, n, &l);
	if (r < 0)
		goto fail;
	kernel = fs_path_join(stage_path, "installer.vmlinuz");
	initrd = fs_path_join(stage_path, "installer.initrd");
	disk = fs_path_join(stage_path, "disk.img");
	steps_img = fs_path_join(stage_path, "steps.img");
	console = fs_path_join(stage_path, "console.log");
	if (!kernel || !initrd || !disk || !steps_img || !console ||
	    asprintf(&name, POSTINSTALL_DOMAIN_PREFIX "%s-%s", id, suffix) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	(void)snprintf(cmdline, sizeof(cmdline), "console=ttyS0 panic=-1 quiet slate.install");
	sp = (struct domain_spec){
	        .name = name,
	        .kvm = vm_kvm_usable(cfg->libvirt_uri ? cfg->libvirt_uri : "qemu:///system") > 0,
	        .kernel = kernel,
	        .initrd = initrd,
	        .cmdline = cmdline,
	        .disk = disk,
	        .steps = steps_img,
	        .console = console};
	log_info("image %s: running %zu postinstall step%s in installer VM %s (%s)", id, n,
	         n == 1 ? "" : "s", name, vm_accel_name(sp.kvm));
	t0 = time_mono_s();
	r = run_vm(cfg, &sp, steps, n, timeout_s, l, progress, ud, err);
	res.seconds = time_mono_s() - t0;
	res.kvm = sp.kvm;
	res.n_done = postinstall_log_done(l);
	if (r == -ETIMEDOUT && progress) {
		size_t i = postinstall_log_current(l);
		struct postinstall_progress p = {.step = i,
		                                 .n_steps = n,
		                                 .s = i < n ? &steps[i] : NULL,
		                                 .output =
		                                         i < n && postinstall_log_output(l)[0]
		                                                 ? postinstall_log_output(l)
		                                                 : postinstall_log_console_tail(l)};
		progress(&p, ud);
	}
	if (r < 0)
		goto fail;

	switch (postinstall_log_state(l)) {
	case POSTINSTALL_SUCCEEDED:
		break;
	case POSTINSTALL_FAILED: {
		size_t i = postinstall_log_current(l);
		if (progress) {
			struct postinstall_progress p = {.step = i,
			                                 .n_steps = n,
			                                 .s = &steps[i],
			                                 .output = postinstall_log_output(l)};
			progress(&p, ud);
		}
		r = slate_error_set(err, -ECANCELED,
		                    "postinstall step %zu of %zu, \"%s\" (%s), exited with status "
		                    "%d; image %s is unchanged (version %" PRId64 ")",
		                    i + 1, n, steps[i].description, steps[i].uuid,
		                    postinstall_log_exit_status(l), id, old->version);
		goto fail;
	}
	default:
		if (progress) {
			struct postinstall_progress p = {.step = postinstall_log_current(l),
			                                 .n_steps = n,
			                                 .output = postinstall_log_console_tail(l)};
			progress(&p, ud);
		}
		r = slate_error_set(
		        err, -EPROTO,
		        "postinstall: %s (after %zu of %zu steps); image %s is unchanged",
		        postinstall_log_error(l), postinstall_log_done(l), n, id);
		goto fail;
	}

	/* Every step exited 0: the clone becomes the image. */
	for (size_t i = 0; i < ELEMENTSOF(stage_scratch); i++)
		(void)unlinkat(stage_fd, stage_scratch[i], 0);
	for (int i = 0; i < 10; i++) {
		char rotated[32];
		(void)snprintf(rotated, sizeof(rotated), "console.log.%d", i);
		(void)unlinkat(stage_fd, rotated, 0);
	}
	r = fs_write_atomic_at(stage_fd, "catalog.json", catalog_json, strlen(catalog_json), 0444);
	if (r < 0) {
		(void)slate_error_errno(err, r, "recording the applied steps");
		goto fail;
	}
	r = verify_file_digest(stage_fd, "disk.img", hex, NULL, NULL);
	if (r < 0) {
		(void)slate_error_errno(err, r, "hashing the new disk");
		goto fail;
	}
	if (expect_version > 0 &&
	    (image_store_get(cfg->storage, id, &now) < 0 || now->version != old->version)) {
		r = slate_error_set(err, -ESTALE,
		                    "image %s changed while its postinstall steps ran: pull again",
		                    id);
		goto fail;
	}
	info.id = (char *)id;
	info.local = old->local;
	info.sha256 = hex;
	info.cmdline = old->cmdline;
	info.description = old->description;
	/* Installed or removed, the staging directory is gone afterwards. */
	r = image_store_install_dir(cfg->storage, stage, &info, true, &res.info);
	free(stage);
	stage = NULL;
	if (r < 0)
		return slate_error_errno(err, r, "installing image %s", id);
	log_info("image %s: %zu postinstall step%s applied in %.1f s; now version %" PRId64, id, n,
	         n == 1 ? "" : "s", res.seconds, res.info->version);
	*ret = res;
	return 0;

fail:
	if (stage)
		(void)image_store_abort_dir(cfg->storage, stage);
	return r;
}

/* ---- leftovers of a crashed slated ---------------------------------------------------------- */

/* image_store_stage_dir()'s names: <images>/.tmp-<id>-XXXXXX (store.h). */
#define STAGE_PREFIX ".tmp-"
#define SUFFIX_LEN 6

static bool all_of(const char *s, size_t n, const char *set)
{
	for (size_t i = 0; i < n; i++)
		if (!s[i] || !strchr(set, s[i]))
			return false;
	return true;
}

/* "slate.install-<id>-<6 hex>" -> id (allocated), or NULL when the name is not an installer's. */
static char *installer_domain_image(const char *name)
{
	size_t plen = strlen(POSTINSTALL_DOMAIN_PREFIX), n;
	char *id;

	if (!name || strncmp(name, POSTINSTALL_DOMAIN_PREFIX, plen) != 0)
		return NULL;
	name += plen;
	n = strlen(name);
	if (n < SUFFIX_LEN + 2 || name[n - SUFFIX_LEN - 1] != '-' ||
	    !all_of(name + n - SUFFIX_LEN, SUFFIX_LEN, "0123456789abcdef"))
		return NULL;
	id = strndup(name, n - SUFFIX_LEN - 1);
	if (id && image_id_check(id) < 0) {
		free(id);
		return NULL;
	}
	return id;
}

/*
 * Whether path is <images>/.tmp-<id>-XXXXXX/<one of the installer's files>, in the staging
 * directory *stage already seen (or the first one, stored in stage). False for anything else.
 */
static bool installer_path(const char *path, const char *images, const char *id, char *stage,
                           size_t stage_size)
{
	static const char *const files[] = {"disk.img", "steps.img", "console.log",
	                                    "installer.vmlinuz", "installer.initrd"};
	size_t ilen = strlen(images), slen = strlen(STAGE_PREFIX), idlen = strlen(id), n;
	const char *rest, *slash;

	if (!path || strncmp(path, images, ilen) != 0 || path[ilen] != '/')
		return false;
	rest = path + ilen + 1;
	slash = strchr(rest, '/');
	if (!slash || strchr(slash + 1, '/'))
		return false;
	n = (size_t)(slash - rest);
	if (n != slen + idlen + 1 + SUFFIX_LEN || strncmp(rest, STAGE_PREFIX, slen) != 0 ||
	    strncmp(rest + slen, id, idlen) != 0 || rest[slen + idlen] != '-' ||
	    !all_of(rest + slen + idlen + 1, SUFFIX_LEN, "abcdefghijklmnopqrstuvwxyz0123456789") ||
	    n >= stage_size)
		return false;
	if (!stage[0]) {
		memcpy(stage, rest, n);
		stage[n] = '\0';
	} else if (strlen(stage) != n || strncmp(stage, rest, n) != 0)
		return false;
	for (size_t i = 0; i < ELEMENTSOF(files); i++)
		if (streq(slash + 1, files[i]))
			return true;
	return false;
}

/*
 * Whether every file the domain's XML names (each <source>'s file or path, the kernel, the
 * initrd) is an installer file in one staging directory of this store; at least one must be.
 * Fills stage with that directory's name.
 */
static bool installer_of_this_store(const char *xml, const char *images, const char *id,
                                    char *stage, size_t stage_size)
{
	_cleanup_(xmlFreeDocp) xmlDocPtr doc = NULL;
	xmlNodePtr root, cur;
	size_t files = 0;
	bool ok = true;

	stage[0] = '\0';
	doc = xmlReadMemory(xml, (int)strlen(xml), "domain.xml", NULL,
	                    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	root = doc ? xmlDocGetRootElement(doc) : NULL;
	if (!root || !xmlStrEqual(root->name, BAD_CAST "domain"))
		return false;
	/* Depth-first over every element. */
	for (cur = root; cur && ok;) {
		if (cur->type == XML_ELEMENT_NODE) {
			bool source = xmlStrEqual(cur->name, BAD_CAST "source");
			bool boot = cur->parent && xmlStrEqual(cur->parent->name, BAD_CAST "os") &&
			            (xmlStrEqual(cur->name, BAD_CAST "kernel") ||
			             xmlStrEqual(cur->name, BAD_CAST "initrd") ||
			             xmlStrEqual(cur->name, BAD_CAST "loader") ||
			             xmlStrEqual(cur->name, BAD_CAST "nvram"));
			if (source || boot) {
				xmlChar *v = source ? xmlGetProp(cur, BAD_CAST "file") : NULL;

				if (source && !v)
					v = xmlGetProp(cur, BAD_CAST "path");
				if (!source)
					v = xmlNodeGetContent(cur);
				ok = v &&
				     installer_path((const char *)v, images, id, stage, stage_size);
				xmlFree(v);
				files++;
			}
		}
		if (cur->children && cur->type == XML_ELEMENT_NODE) {
			cur = cur->children;
			continue;
		}
		while (cur && cur != root && !cur->next)
			cur = cur->parent;
		cur = cur && cur != root ? cur->next : NULL;
	}
	return ok && files > 0 && stage[0];
}

int postinstall_sweep(struct storage *s, const char *libvirt_uri)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	virDomainPtr *doms = NULL;
	const char *images;
	int n, r, removed = 0;

	if (!s)
		return -EINVAL;
	images = storage_images_path(s);
	if (!images)
		return -EINVAL;
	r = vm_connect(libvirt_uri ? libvirt_uri : "qemu:///system", &conn);
	if (r < 0)
		return r;
	n = virConnectListAllDomains(conn, &doms, 0);
	if (n < 0)
		return -EIO;
	for (int i = 0; i < n; i++) {
		_cleanup_free_ char *id = NULL, *xml = NULL;
		const char *name = virDomainGetName(doms[i]);
		char stage[256];
		int k;

		id = installer_domain_image(name);
		if (!id)
			continue;
		xml = virDomainGetXMLDesc(doms[i], 0);
		if (!xml || !installer_of_this_store(xml, images, id, stage, sizeof(stage))) {
			log_debug("installer domain %s: not of state directory %s, left alone",
			          name, storage_state_path(s));
			continue;
		}
		if (virDomainIsActive(doms[i]) == 1 && virDomainDestroy(doms[i]) < 0) {
			log_warning("cannot destroy the leftover installer domain %s: %s", name,
			            vm_last_error());
			continue;
		}
		if (virDomainIsPersistent(doms[i]) == 1 && virDomainUndefine(doms[i]) < 0)
			log_warning("cannot undefine the leftover installer domain %s: %s", name,
			            vm_last_error());
		k = image_store_abort_dir(s, stage);
		if (k < 0 && k != -ENOENT)
			log_warning("cannot remove %s/%s of the leftover installer domain %s: %s",
			            images, stage, name, slate_strerror(k));
		log_info("removed installer domain %s and %s/%s, left over by an earlier slated "
		         "(postinstall steps of image %s interrupted; the image is unchanged)",
		         name, images, stage, id);
		removed++;
	}
	for (int i = 0; i < n; i++)
		(void)virDomainFree(doms[i]);
	free(doms);
	return removed;
}

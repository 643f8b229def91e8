/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * A workspace's browser VM (browser.h, doc/browser.md). One table entry per workspace whose
 * browser starts, runs or stops; the entry holds the "browser" control stream into the VM, whose
 * slate-guest runs Chromium for as long as that stream is open. The domain is transient: when
 * slated dies nothing stays defined, and the next slated's sweep destroys what still runs.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "browser/cdp.h"
#include "channel/channels.h"
#include "daemon/browser-view.h"
#include "daemon/browser.h"
#include "daemon/daemon.h"
#include "daemon/limits.h"
#include "daemon/shares.h"
#include "image/store.h"
#include "proxy/ca.h"
#include "secrets/install.h"
#include "storage/qcow2.h"
#include "storage/storage.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"
#include "vm/domain.h"
#include "vm/kvm.h"
#include "vm/lifecycle.h"
#include "vm/xml.h"
#include "workspace/layout.h"
#include "workspace/workspace.h"

#define KEY_MAX (sizeof(BROWSER_KEY_PREFIX) + WORKSPACE_NAME_MAX)
#define DOMAIN_MAX (sizeof(BROWSER_DOMAIN_PREFIX) + WORKSPACE_NAME_MAX)
#define BROWSER_DISK "disk.qcow2"
#define BROWSER_SCRATCH "scratch.img" /* vdb without --persist: blank, never mounted */
#define BROWSER_SCRATCH_BYTES (16u * 1024u * 1024u)
#define CHANNEL_READY_MS 30000u
#define OPEN_TIMEOUT_MS 10000u
#define CDP_READY_TIMEOUT_MS 180000
#define STOP_TIMEOUT_MS 20000
#define SCREENSHOT_TIMEOUT_MS 60000
#define LINE_MAX_LEN 512
#define PROFILE_KEY_BYTES 64
#define PROFILE_KEY_SEALED_MAX 4096
#define PROFILE_DISK_BYTES (1024ull * 1024 * 1024) /* sparse */

enum browser_state { B_STARTING, B_RUNNING, B_STOPPING };

struct browser {
	char name[WORKSPACE_NAME_MAX + 1];
	enum browser_state state;
	int ctl; /* the "browser" stream; -1 until started */
	char image[IMAGE_ID_MAX + 1];
	bool persist;
	uint64_t memory_mib;
	unsigned cpus;
	bool kvm;
	time_t started;
	double boot_s, cdp_s;      /* to the guest's ready line, then to DevTools answering */
	char exited[LINE_MAX_LEN]; /* what the guest said when Chromium ended on its own */
	bool paused;               /* by a leak of its workspace (daemon_browser_pause) */
	struct browser_view *view; /* the VNC view (view_lock), or NULL */
	struct browser *next;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct browser *table;
/* Serializes the views' starts and stops, taken before table_lock, never inside it. A running
 * entry is freed only by daemon_browser_stop, after it took this lock: whoever holds it may keep
 * a running entry's pointer with table_lock released. */
static pthread_mutex_t view_lock = PTHREAD_MUTEX_INITIALIZER;

static struct browser *find_locked(const char *name)
{
	for (struct browser *b = table; b; b = b->next)
		if (streq(b->name, name))
			return b;
	return NULL;
}

static void unlink_locked(struct browser *b)
{
	for (struct browser **p = &table; *p; p = &(*p)->next)
		if (*p == b) {
			*p = b->next;
			return;
		}
}

static void names_for(const char *name, char key[KEY_MAX], char domain[DOMAIN_MAX])
{
	(void)snprintf(key, KEY_MAX, BROWSER_KEY_PREFIX "%s", name);
	(void)snprintf(domain, DOMAIN_MAX, BROWSER_DOMAIN_PREFIX "%s", name);
}

static void say(vm_progress_fn progress, void *userdata, const char *step, const char *detail)
{
	if (progress)
		progress(step, detail, userdata);
}

/* ---- the control stream: lines ---- */

/* Reads one line (without its newline) by deadline_ms (time_mono_ms()). Byte by byte: the
 * stream carries nothing else we could read past. */
static int read_line(int fd, int64_t deadline_ms, char *out, size_t cap, struct slate_error *err)
{
	size_t len = 0;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline_ms - time_mono_ms();
		ssize_t k;
		char c;

		if (left <= 0 || poll(&p, 1, (int)(left > 60000 ? 60000 : left)) == 0) {
			if (time_mono_ms() < deadline_ms)
				continue;
			return slate_error_set(err, -ETIMEDOUT, "the browser VM did not answer");
		}
		k = read(fd, &c, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return slate_error_set(err, -ECONNRESET,
			                       "the browser VM closed its control stream");
		if (c == '\n') {
			out[len] = '\0';
			return 0;
		}
		if (len + 1 >= cap)
			return slate_error_set(err, -EMSGSIZE, "the browser VM's line is too long");
		/* The guest is hostile: what it says goes into logs and messages printable only. */
		out[len++] = (c >= 0x20 && c < 0x7f) ? c : '?';
	}
}

/* ---- the domain ---- */

/* Destroys the browser domain of name if it exists (a transient domain is then gone). */
static void destroy_domain(struct daemon_ctx *d, const char *domain)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;

	if (vm_connect(d->libvirt_uri, &conn) < 0)
		return;
	dom = virDomainLookupByName(conn, domain);
	if (!dom)
		return;
	(void)virDomainDestroy(dom);
	(void)virDomainUndefine(dom); /* a transient domain has no definition: harmless */
}

/* Everything of a browser VM but its table entry: control stream, channel, domain, files. */
static void teardown(struct daemon_ctx *d, const char *name, int *ctl)
{
	char key[KEY_MAX], domain[DOMAIN_MAX];

	names_for(name, key, domain);
	if (ctl)
		*ctl = safe_close(*ctl);
	if (d->channels)
		channels_detach(d->channels, key);
	destroy_domain(d, domain);
	daemon_runtime_dir_remove(d, key);
	daemon_limits_changed(d);
}

struct boot {
	struct daemon_ctx *d;
	const char *name;
	char key[KEY_MAX], domain[DOMAIN_MAX];
	struct image_info *img;
	char *run_dir, *disk, *vdb, *log, *sock;
	bool admitted;
	bool persist;
	unsigned char profile_key[PROFILE_KEY_BYTES]; /* with persist */
};

static void boot_done(struct boot *b)
{
	sodium_memzero(b->profile_key, sizeof(b->profile_key));
	if (b->admitted)
		daemon_limits_release(b->d, b->domain);
	image_info_free(b->img);
	free(b->run_dir);
	free(b->disk);
	free(b->vdb);
	free(b->log);
	free(b->sock);
}

/*
 * The kept profile (--persist): <workspace dir>/browser-profile.img, a sparse disk the browser
 * VM encrypts (LUKS2, doc/browser.md) with a random key slated keeps sealed under the master key
 * in browser-profile.key (purpose "browser-profile:NAME": it opens for this workspace only). The
 * key reaches the browser VM over its channel, never the workspace's guest. A new key gets a new,
 * blank disk: a disk left by another key could never be opened.
 */
static int profile_prepare(struct boot *b, struct slate_error *err)
{
	struct daemon_ctx *d = b->d;
	_cleanup_free_ char *dir = NULL, *purpose = NULL;
	_cleanup_close_ int dfd = -1, lock_fd = -1, vfd = -1;
	struct buf *sealed = NULL, *plain = NULL;
	bool fresh = false;
	int r;

	if (!d->install)
		return slate_error_set(
		        err, -ENOKEY,
		        "--persist needs slated's master key, which it could not open "
		        "(see slated's log)");
	if (asprintf(&purpose, "browser-profile:%s", b->name) < 0)
		return -ENOMEM;
	r = workspace_lock(d->workspaces, b->name, &lock_fd);
	if (r < 0)
		return slate_error_errno(err, r, "locking workspace '%s'", b->name);
	dir = workspace_dir_path(d->workspaces, b->name);
	if (!dir)
		return -ENOMEM;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return slate_error_errno(err, -errno, "opening %s", dir);
	r = fs_read_file_at(dfd, WORKSPACE_BROWSER_KEY, PROFILE_KEY_SEALED_MAX, &sealed);
	if (r >= 0) {
		r = install_unseal(d->install, purpose, buf_ptr(sealed), buf_len(sealed), &plain);
		buf_free(sealed);
		if (r < 0 || buf_len(plain) != PROFILE_KEY_BYTES) {
			if (plain)
				buf_free_secure(plain);
			return slate_error_set(err, r < 0 ? r : -EBADMSG,
			                       "%s/%s does not open with this host's master key",
			                       dir, WORKSPACE_BROWSER_KEY);
		}
		memcpy(b->profile_key, buf_ptr(plain), PROFILE_KEY_BYTES);
		buf_free_secure(plain);
	} else if (r == -ENOENT) {
		randombytes_buf(b->profile_key, sizeof(b->profile_key));
		r = install_seal(d->install, purpose, b->profile_key, sizeof(b->profile_key),
		                 &sealed);
		if (r < 0)
			return slate_error_errno(err, r, "sealing the profile's key");
		/* The disk a lost key leaves could never be opened: a blank one comes first. */
		if (unlinkat(dfd, WORKSPACE_BROWSER_PROFILE, 0) < 0 && errno != ENOENT) {
			buf_free(sealed);
			return slate_error_errno(err, -errno, "removing the old profile disk");
		}
		r = fs_write_atomic_at(dfd, WORKSPACE_BROWSER_KEY, buf_ptr(sealed), buf_len(sealed),
		                       0600);
		buf_free(sealed);
		if (r < 0)
			return slate_error_errno(err, r, "writing %s/%s", dir,
			                         WORKSPACE_BROWSER_KEY);
		fresh = true;
	} else {
		return slate_error_errno(err, r, "reading %s/%s", dir, WORKSPACE_BROWSER_KEY);
	}
	vfd = openat(dfd, WORKSPACE_BROWSER_PROFILE, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
	             0600);
	if (vfd < 0)
		return slate_error_errno(err, -errno, "the profile disk");
	if (fresh && ftruncate(vfd, (off_t)PROFILE_DISK_BYTES) < 0)
		return slate_error_errno(err, -errno, "the profile disk");
	b->vdb = fs_path_join(dir, WORKSPACE_BROWSER_PROFILE);
	return b->vdb ? 0 : -ENOMEM;
}

/* The runtime directory: the overlay of the image's disk, a blank vdb, console and channel. */
static int stage(struct boot *b, struct slate_error *err)
{
	struct daemon_ctx *d = b->d;
	_cleanup_free_ char *idir = NULL, *base = NULL;
	_cleanup_close_ int dfd = -1, vfd = -1;
	int r;

	daemon_runtime_dir_remove(d, b->key); /* an earlier one's leftovers */
	r = daemon_runtime_dir(d, b->key, &b->run_dir);
	if (r < 0)
		return slate_error_errno(err, r, "the browser's runtime directory");
	idir = fs_path_join(storage_images_path(d->storage), b->img->id);
	base = idir ? fs_path_join(idir, "disk.img") : NULL;
	b->disk = fs_path_join(b->run_dir, BROWSER_DISK);
	if (!b->persist)
		b->vdb = fs_path_join(b->run_dir, BROWSER_SCRATCH);
	b->log = fs_path_join(b->run_dir, "console.log");
	b->sock = fs_path_join(b->run_dir, "channel.sock");
	if (!base || !b->disk || (!b->persist && !b->vdb) || !b->log || !b->sock)
		return slate_error_errno(err, -ENOMEM, "the browser's files");
	dfd = open(b->run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return slate_error_errno(err, -errno, "opening %s", b->run_dir);
	/* Copy-on-write over the image, in the runtime directory: nothing of it outlives stop. */
	r = qcow2_create_overlay(base, dfd, BROWSER_DISK, 0600);
	if (r < 0)
		return slate_error_errno(err, r, "the browser's disk (an overlay of %s)", base);
	if (b->persist) {
		r = profile_prepare(b, err);
		if (r < 0)
			return r;
	} else {
		vfd = openat(dfd, BROWSER_SCRATCH, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (vfd < 0 || ftruncate(vfd, (off_t)BROWSER_SCRATCH_BYTES) < 0)
			return slate_error_errno(err, -errno, "the browser's scratch disk");
	}
	r = fs_make_traversable(d->runtime_dir, b->run_dir);
	if (r < 0)
		log_warning("cannot make %s traversable for QEMU: %s", b->run_dir,
		            slate_strerror(r));
	return 0;
}

static int boot(struct boot *b, const struct browser_opts *o, struct browser *entry,
                vm_progress_fn progress, void *userdata, struct slate_error *err)
{
	struct daemon_ctx *d = b->d;
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	_cleanup_free_ char *template_text = NULL, *xml = NULL, *kernel = NULL, *initrd = NULL,
	                    *cmdline = NULL;
	char uuid[37];
	struct vm_config c;
	double t0;
	int r;

	r = vm_template_load(NULL, &template_text, NULL);
	if (r < 0)
		return slate_error_errno(err, r, "the domain template");
	if (b->img->kernel_boot) {
		_cleanup_free_ char *idir =
		        fs_path_join(storage_images_path(d->storage), b->img->id);
		kernel = idir ? fs_path_join(idir, "vmlinuz") : NULL;
		initrd = idir ? fs_path_join(idir, "initrd.img") : NULL;
		cmdline = vm_kernel_cmdline(b->img->cmdline);
		if (!kernel || !initrd || !cmdline)
			return -ENOMEM;
	}
	(void)workspace_uuid_v4(uuid);
	entry->kvm = vm_kvm_usable(d->libvirt_uri) > 0;
	c = (struct vm_config){
	        .domain_name = b->domain,
	        .uuid = uuid,
	        .workspace = b->name,
	        .image_id = b->img->id,
	        .base_version = b->img->version,
	        .memory_mib = o->memory_mib,
	        .cpus = o->cpus,
	        .kvm = entry->kvm,
	        .disk = b->disk,
	        .disk_format = "qcow2",
	        .home = b->vdb,
	        .disk_io = vm_disk_io(),
	        .kernel = kernel,
	        .initrd = initrd,
	        .cmdline = cmdline,
	        .console_log = b->log,
	        .channel_socket = b->sock,
	};
	r = vm_xml_build(template_text, &c, &xml);
	if (r < 0)
		return slate_error_set(err, r, "cannot build the domain XML from the template");
	r = vm_connect(d->libvirt_uri, &conn);
	if (r < 0)
		return slate_error_errno(err, r, "cannot reach libvirt");
	say(progress, userdata, "booting",
	    entry->kvm ? "the browser VM (KVM)" : "the browser VM (TCG: slower)");
	t0 = time_mono_s();
	dom = virDomainCreateXML(conn, xml, 0);
	if (!dom)
		return slate_error_set(err, -EIO, "cannot start %s: %s", b->domain,
		                       vm_last_error());
	r = channels_attach_as(d->channels, b->key, b->name, CHANNEL_ROLE_BROWSER, b->sock);
	if (r < 0)
		return slate_error_errno(err, r, "attaching the browser VM's channel");
	say(progress, userdata, "waiting", "for the browser VM's ready line");
	r = vm_wait_ready(dom, b->log, VM_DEFAULT_BOOT_TIMEOUT_S, t0, err);
	if (r < 0)
		return r;
	r = channels_wait_ready(d->channels, b->key, CHANNEL_READY_MS);
	if (r < 0)
		return slate_error_errno(err, r, "the browser VM's channel");
	entry->boot_s = time_mono_s() - t0;
	return 0;
}

/* Hands Chromium its settings over the "browser" stream and waits for DevTools to answer. */
static int launch(struct daemon_ctx *d, struct boot *b, struct browser *entry,
                  vm_progress_fn progress, void *userdata, int *ret_ctl, struct slate_error *err)
{
	_cleanup_(egress_ca_freep) struct egress_ca *ca = NULL;
	_cleanup_close_ int fd = -1;
	char line[LINE_MAX_LEN], head[64];
	double t0 = time_mono_s();
	struct slate_error e = {0};
	int r;

	r = channels_open(d->channels, b->key, "browser", OPEN_TIMEOUT_MS, &fd, &e);
	if (r < 0)
		return slate_error_set(err, r, "the browser VM's agent: %s", slate_error_text(&e));
	/* Chromium trusts the egress CA, as the workspace's guest does: TLS goes through the
	 * proxy, which swaps placeholders for the hosts each secret is bound to. */
	if (d->install && egress_ca_open(install_dirfd(d->install), &ca) >= 0) {
		const char *pem = egress_ca_pem(ca);
		(void)snprintf(head, sizeof(head), "ca %zu\n", strlen(pem));
		if (fs_write_all(fd, head, strlen(head)) < 0 ||
		    fs_write_all(fd, pem, strlen(pem)) < 0)
			return slate_error_set(err, -EPIPE, "the browser VM's agent went away");
	}
	if (b->persist) {
		char kl[16 + 2 * PROFILE_KEY_BYTES + 2];
		int ok;

		memcpy(kl, "persist ", 8);
		(void)sodium_bin2hex(kl + 8, 2 * PROFILE_KEY_BYTES + 1, b->profile_key,
		                     sizeof(b->profile_key));
		memcpy(kl + 8 + 2 * PROFILE_KEY_BYTES, "\n", 2);
		ok = fs_write_all(fd, kl, 8 + 2 * PROFILE_KEY_BYTES + 1);
		sodium_memzero(kl, sizeof(kl));
		if (ok < 0)
			return slate_error_set(err, -EPIPE, "the browser VM's agent went away");
	}
	if (fs_write_all(fd, "start\n", 6) < 0)
		return slate_error_set(err, -EPIPE, "the browser VM's agent went away");
	say(progress, userdata, "chromium", "starting Chromium, waiting for DevTools");
	r = read_line(fd, time_mono_ms() + CDP_READY_TIMEOUT_MS, line, sizeof(line), err);
	if (r < 0)
		return r;
	if (strncmp(line, "ok", 2) != 0 || (line[2] != '\0' && line[2] != ' '))
		return slate_error_set(err, -EIO, "Chromium did not start in the browser VM: %s",
		                       strncmp(line, "error ", 6) == 0 ? line + 6 : line);
	entry->cdp_s = time_mono_s() - t0;
	*ret_ctl = TAKE_FD(fd);
	return 0;
}

static struct json_object *status_json(const struct browser *b)
{
	struct json_object *o = json_object_new_object();
	char domain[DOMAIN_MAX], key[KEY_MAX];

	if (!o)
		return NULL;
	names_for(b->name, key, domain);
	if (json_add_string(o, "name", b->name) < 0 ||
	    json_add_bool(o, "running", b->state == B_RUNNING && !b->exited[0]) < 0 ||
	    json_add_string(o, "state",
	                    b->state == B_STARTING   ? "starting"
	                    : b->state == B_STOPPING ? "stopping"
	                    : b->paused              ? "paused"
	                    : b->exited[0]           ? "chromium-exited"
	                                             : "running") < 0 ||
	    json_add_string(o, "domain", domain) < 0 || json_add_string(o, "image", b->image) < 0 ||
	    json_add_bool(o, "persist", b->persist) < 0 ||
	    json_add_int64(o, "memory_mib", (int64_t)b->memory_mib) < 0 ||
	    json_add_int64(o, "cpus", b->cpus) < 0 ||
	    json_add_string(o, "accelerator", vm_accel_name(b->kvm)) < 0 ||
	    json_add_string(o, "cdp", "127.0.0.1:9222 in the workspace's guest") < 0 ||
	    json_add_int64(o, "started", (int64_t)b->started) < 0 ||
	    json_add(o, "boot_s", json_object_new_double(b->boot_s)) < 0 ||
	    json_add(o, "cdp_ready_s", json_object_new_double(b->cdp_s)) < 0 ||
	    (b->exited[0] && json_add_string(o, "chromium", b->exited) < 0)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

int daemon_browser_start(struct daemon_ctx *d, const char *name, const struct browser_opts *o,
                         vm_progress_fn progress, void *userdata, struct json_object **ret,
                         struct slate_error *err)
{
	struct boot b = {.d = d, .name = name, .persist = o->persist};
	struct browser *entry;
	const char *image = o->image ? o->image : d->browser_image;
	int ctl = -1, r;

	if (!d->channels || !d->storage)
		return slate_error_set(err, -ENODEV, "slated has no guest channels or storage");
	if (!image || !*image)
		return slate_error_set(
		        err, -ENOENT,
		        "no browser image: set browser-image in slate.conf(5) or pass "
		        "--image (images/browser/README.md builds one)");
	r = vm_domain_is_active(d->libvirt_uri, name);
	if (r < 0)
		return slate_error_errno(err, r, "cannot ask libvirt whether %s runs", name);
	if (r == 0)
		return slate_error_set(
		        err, -ENOTCONN,
		        "workspace '%s' is not running: its browser serves its guest "
		        "('slate start %s' first)",
		        name, name);
	r = image_store_get(d->storage, image, &b.img);
	if (r < 0)
		return slate_error_set(
		        err, r == -ENOENT ? -ENOENT : r, "browser image '%s': %s", image,
		        r == -ENOENT ? "not installed ('slate image ls')" : slate_strerror(r));
	entry = calloc(1, sizeof(*entry));
	if (!entry) {
		boot_done(&b);
		return -ENOMEM;
	}
	*entry = (struct browser){.state = B_STARTING,
	                          .ctl = -1,
	                          .persist = o->persist,
	                          .memory_mib = o->memory_mib,
	                          .cpus = o->cpus,
	                          .started = time(NULL)};
	(void)snprintf(entry->name, sizeof(entry->name), "%s", name);
	(void)snprintf(entry->image, sizeof(entry->image), "%s", b.img->id);
	pthread_mutex_lock(&table_lock);
	if (find_locked(name)) {
		pthread_mutex_unlock(&table_lock);
		free(entry);
		boot_done(&b);
		return slate_error_set(err, -EEXIST,
		                       "workspace '%s' has a browser already ('slate browser %s "
		                       "status')",
		                       name, name);
	}
	entry->next = table;
	table = entry;
	pthread_mutex_unlock(&table_lock);

	names_for(name, b.key, b.domain);
	r = stage(&b, err);
	if (r >= 0) {
		r = daemon_limits_admit(d, name, b.domain, o->memory_mib, progress, userdata, NULL,
		                        err);
		b.admitted = r >= 0;
	}
	if (r >= 0)
		r = boot(&b, o, entry, progress, userdata, err);
	if (r >= 0)
		r = launch(d, &b, entry, progress, userdata, &ctl, err);
	boot_done(&b);
	pthread_mutex_lock(&table_lock);
	if (r < 0) {
		unlink_locked(entry);
		pthread_mutex_unlock(&table_lock);
		log_ws(LOG_WARNING, name, "browser of %s: %s", name, slate_error_text(err));
		teardown(d, name, &ctl);
		free(entry);
		return r;
	}
	entry->ctl = ctl;
	entry->state = B_RUNNING;
	if (ret)
		*ret = status_json(entry);
	pthread_mutex_unlock(&table_lock);
	log_ws(LOG_INFO, name, "browser of %s: running (%s, booted in %.1f s, DevTools in %.1f s)",
	       name, b.domain, entry->boot_s, entry->cdp_s);
	return 0;
}

/* Tells Chromium to close (it writes cookies and the profile then) and waits for the guest's
 * "stopped". Returns whether it said so. */
static bool close_chromium(int ctl, const char *name, char *said, size_t said_len)
{
	int64_t deadline = time_mono_ms() + STOP_TIMEOUT_MS;
	struct slate_error e = {0};
	char line[LINE_MAX_LEN];

	if (ctl < 0 || fs_write_all(ctl, "stop\n", 5) < 0)
		return false;
	while (read_line(ctl, deadline, line, sizeof(line), &e) >= 0) {
		if (strncmp(line, "stopped", 7) == 0) {
			(void)snprintf(said, said_len, "%s", line);
			return true;
		}
		log_ws(LOG_INFO, name, "browser of %s: %s", name, line);
	}
	(void)snprintf(said, said_len, "%s", slate_error_text(&e));
	return false;
}

int daemon_browser_stop(struct daemon_ctx *d, const char *name, struct json_object **ret,
                        struct slate_error *err)
{
	struct browser *b;
	char said[LINE_MAX_LEN] = "";
	bool clean;
	double t0 = time_mono_s();
	int ctl;

	pthread_mutex_lock(&table_lock);
	b = find_locked(name);
	if (!b) {
		pthread_mutex_unlock(&table_lock);
		return slate_error_set(err, -ENOENT, "workspace '%s' has no browser running", name);
	}
	if (b->state != B_RUNNING) {
		pthread_mutex_unlock(&table_lock);
		return slate_error_set(err, -EBUSY, "the browser of '%s' is %s", name,
		                       b->state == B_STARTING ? "starting" : "stopping already");
	}
	b->state = B_STOPPING;
	ctl = b->ctl;
	b->ctl = -1;
	pthread_mutex_unlock(&table_lock);

	/* The view first: its socket goes with it, before the domain and the directory. */
	pthread_mutex_lock(&view_lock);
	browser_view_stop(TAKE_PTR(b->view));
	pthread_mutex_unlock(&view_lock);

	/* A paused VM answers nothing: it is destroyed as it is, its profile unwritten. */
	if (b->paused)
		(void)snprintf(said, sizeof(said), "paused after a leak: destroyed as it was");
	clean = !b->paused && close_chromium(ctl, name, said, sizeof(said));
	teardown(d, name, &ctl);
	pthread_mutex_lock(&table_lock);
	unlink_locked(b);
	pthread_mutex_unlock(&table_lock);
	log_ws(LOG_INFO, name, "browser of %s: stopped in %.1f s (%s)", name, time_mono_s() - t0,
	       clean ? "Chromium closed" : said);
	if (ret) {
		struct json_object *o = json_object_new_object();
		if (o && (json_add_string(o, "name", name) < 0 ||
		          json_add_bool(o, "stopped", true) < 0 ||
		          json_add_bool(o, "chromium_closed", clean) < 0 ||
		          json_add_bool(o, "persist", b->persist) < 0 ||
		          json_add(o, "stop_s", json_object_new_double(time_mono_s() - t0)) < 0)) {
			json_object_put(o);
			o = NULL;
		}
		*ret = o;
	}
	free(b);
	return 0;
}

struct stop_job {
	struct daemon_ctx *d;
	char name[WORKSPACE_NAME_MAX + 1];
};

static void *stop_thread(void *p)
{
	struct stop_job *j = p;

	if (daemon_browser_stop(j->d, j->name, NULL, NULL) >= 0)
		log_ws(LOG_INFO, j->name, "browser of %s: stopped with its workspace", j->name);
	free(j);
	return NULL;
}

void daemon_browser_stop_async(struct daemon_ctx *d, const char *name)
{
	struct stop_job *j;
	pthread_attr_t attr;
	pthread_t t;
	bool have;

	pthread_mutex_lock(&table_lock);
	have = find_locked(name) != NULL;
	pthread_mutex_unlock(&table_lock);
	if (!have || !(j = calloc(1, sizeof(*j))))
		return;
	j->d = d;
	(void)snprintf(j->name, sizeof(j->name), "%s", name);
	(void)pthread_attr_init(&attr);
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, stop_thread, j) != 0)
		free(j);
	(void)pthread_attr_destroy(&attr);
}

void daemon_browser_stop_all(struct daemon_ctx *d)
{
	for (;;) {
		char name[WORKSPACE_NAME_MAX + 1] = "";

		pthread_mutex_lock(&table_lock);
		for (struct browser *b = table; b; b = b->next)
			if (b->state == B_RUNNING) {
				(void)snprintf(name, sizeof(name), "%s", b->name);
				break;
			}
		pthread_mutex_unlock(&table_lock);
		if (!name[0])
			return;
		(void)daemon_browser_stop(d, name, NULL, NULL);
	}
}

void daemon_browser_pause(struct daemon_ctx *d, const char *name)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	char key[KEY_MAX], domain[DOMAIN_MAX];
	struct browser *b;

	pthread_mutex_lock(&table_lock);
	b = find_locked(name);
	if (b)
		b->paused = true;
	pthread_mutex_unlock(&table_lock);
	if (!b)
		return;
	names_for(name, key, domain);
	if (vm_connect(d->libvirt_uri, &conn) < 0 || !(dom = virDomainLookupByName(conn, domain)) ||
	    virDomainSuspend(dom) < 0)
		log_ws(LOG_WARNING, name, "cannot pause %s after a leak: %s", domain,
		       vm_last_error());
	else
		log_ws(LOG_WARNING, name, "browser of %s: paused with its workspace after a leak",
		       name);
}

/* Notices a Chromium that ended on its own: the guest says "exited ..." on the control stream. */
static void poll_exited_locked(struct browser *b)
{
	char line[LINE_MAX_LEN];
	struct pollfd p = {.fd = b->ctl, .events = POLLIN};
	struct slate_error e = {0};

	if (b->ctl < 0 || b->exited[0] || poll(&p, 1, 0) <= 0)
		return;
	if (read_line(b->ctl, time_mono_ms() + 1000, line, sizeof(line), &e) < 0)
		(void)snprintf(b->exited, sizeof(b->exited), "%s", slate_error_text(&e));
	else if (strncmp(line, "exited", 6) == 0)
		(void)snprintf(b->exited, sizeof(b->exited), "%s", line);
}

int daemon_browser_status(struct daemon_ctx *d, const char *name, struct json_object **ret)
{
	struct browser *b;
	struct json_object *o;

	(void)d;
	pthread_mutex_lock(&table_lock);
	b = find_locked(name);
	if (b) {
		if (b->state == B_RUNNING)
			poll_exited_locked(b);
		o = status_json(b);
	} else {
		o = json_object_new_object();
		if (o && (json_add_string(o, "name", name) < 0 ||
		          json_add_bool(o, "running", false) < 0 ||
		          json_add_string(o, "state", "stopped") < 0)) {
			json_object_put(o);
			o = NULL;
		}
	}
	pthread_mutex_unlock(&table_lock);
	if (!o)
		return -ENOMEM;
	*ret = o;
	return 0;
}

struct dial_ctx {
	struct daemon_ctx *d;
	char key[KEY_MAX];
};

/* A fresh "cdp" stream into the browser VM: one per HTTP request or WebSocket. */
static int dial_browser(void *ud, int *ret_fd, struct slate_error *err)
{
	struct dial_ctx *c = ud;
	struct slate_error e = {0};
	int r = channels_open(c->d->channels, c->key, "cdp", OPEN_TIMEOUT_MS, ret_fd, &e);

	return r < 0 ? slate_error_set(err, r, "the browser VM's DevTools: %s",
	                               slate_error_text(&e))
	             : 0;
}

int daemon_browser_screenshot(struct daemon_ctx *d, const char *name, uint8_t **ret_png,
                              size_t *ret_len, struct slate_error *err)
{
	struct dial_ctx c = {.d = d};
	char domain[DOMAIN_MAX];
	bool running;

	pthread_mutex_lock(&table_lock);
	{
		struct browser *b = find_locked(name);
		running = b && b->state == B_RUNNING && !b->paused;
	}
	pthread_mutex_unlock(&table_lock);
	if (!running)
		return slate_error_set(err, -ENOENT, "workspace '%s' has no browser running", name);
	names_for(name, c.key, domain);
	return cdp_screenshot(dial_browser, &c, ret_png, ret_len, SCREENSHOT_TIMEOUT_MS, err);
}

/* ---- the view: VNC on a unix socket (browser-view.h) ---- */

#define VIEW_SOCKET "view.sock"

static struct json_object *view_json(const char *name, struct browser_view *v)
{
	struct json_object *o = json_object_new_object();
	unsigned w, h;

	if (!o)
		return NULL;
	browser_view_size(v, &w, &h);
	if (json_add_string(o, "name", name) < 0 ||
	    json_add_string(o, "socket", browser_view_socket(v)) < 0 ||
	    json_add_int64(o, "width", w) < 0 || json_add_int64(o, "height", h) < 0) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

int daemon_browser_view(struct daemon_ctx *d, const char *name, uid_t uid, struct json_object **ret,
                        struct slate_error *err)
{
	_cleanup_free_ char *vm = NULL, *dir = NULL, *sock = NULL;
	struct dial_ctx c = {.d = d};
	char domain[DOMAIN_MAX];
	struct browser *b;
	struct browser_view *old = NULL, *v = NULL;
	int r;

	names_for(name, c.key, domain);
	vm = fs_path_join(d->runtime_dir, "vm");
	dir = vm ? fs_path_join(vm, c.key) : NULL;
	sock = dir ? fs_path_join(dir, VIEW_SOCKET) : NULL;
	if (!sock)
		return -ENOMEM;
	pthread_mutex_lock(&view_lock);
	pthread_mutex_lock(&table_lock);
	b = find_locked(name);
	if (!b || b->state != B_RUNNING || b->paused) {
		pthread_mutex_unlock(&table_lock);
		pthread_mutex_unlock(&view_lock);
		return slate_error_set(err, -ENOENT, "workspace '%s' has no browser running%s",
		                       name, b && b->paused ? " (it is paused after a leak)" : "");
	}
	pthread_mutex_unlock(&table_lock);
	if (b->view && browser_view_alive(b->view)) {
		/* Idempotent: one view a browser, shared by its viewers. */
		*ret = view_json(name, b->view);
		pthread_mutex_unlock(&view_lock);
		return *ret ? 0 : -ENOMEM;
	}
	old = TAKE_PTR(b->view); /* one whose browser session ended */
	browser_view_stop(old);
	r = browser_view_start(dial_browser, &c, sock, uid, &v, err);
	if (r >= 0) {
		b->view = v;
		*ret = view_json(name, v);
		if (!*ret)
			r = -ENOMEM;
		log_ws(LOG_INFO, name, "browser of %s: view on %s for uid %u", name, sock,
		       (unsigned)uid);
	}
	pthread_mutex_unlock(&view_lock);
	return r < 0 ? slate_error_wrap(err, r, "the browser's view") : 0;
}

int daemon_browser_view_stop(struct daemon_ctx *d, const char *name, struct json_object **ret,
                             struct slate_error *err)
{
	struct browser_view *v = NULL;
	struct json_object *o;
	struct browser *b;

	(void)d;
	pthread_mutex_lock(&view_lock);
	pthread_mutex_lock(&table_lock);
	b = find_locked(name);
	if (b && b->state == B_RUNNING)
		v = TAKE_PTR(b->view);
	pthread_mutex_unlock(&table_lock);
	if (!b || b->state != B_RUNNING) {
		pthread_mutex_unlock(&view_lock);
		return slate_error_set(err, -ENOENT, "workspace '%s' has no browser running", name);
	}
	browser_view_stop(v);
	pthread_mutex_unlock(&view_lock);
	o = json_object_new_object();
	if (!o || json_add_string(o, "name", name) < 0 ||
	    json_add_bool(o, "stopped", v != NULL) < 0) {
		json_object_put(o);
		return -ENOMEM;
	}
	*ret = o;
	return 0;
}

/* ---- the workspace's side: 127.0.0.1:9222 in its guest ---- */

/* A "cdp" stream from a workspace's guest: spliced to a "cdp" stream into its browser VM, which
 * slate-guest there connects to Chromium's DevTools. Without a browser the guest's client gets
 * an HTTP answer that says so. */
static void cdp_stream(int fd, const char *workspace, void *userdata)
{
	struct daemon_ctx *d = userdata;
	char key[KEY_MAX], domain[DOMAIN_MAX];
	struct slate_error e = {0};
	int bfd = -1, r = -ENOENT;
	bool running;

	names_for(workspace, key, domain);
	pthread_mutex_lock(&table_lock);
	{
		struct browser *b = find_locked(workspace);
		running = b && b->state == B_RUNNING;
	}
	pthread_mutex_unlock(&table_lock);
	if (running)
		r = channels_open(d->channels, key, "cdp", OPEN_TIMEOUT_MS, &bfd, &e);
	if (r < 0) {
		char body[512], msg[768];
		int n = snprintf(body, sizeof(body), "%s\n",
		                 running ? slate_error_text(&e)
		                         : "no browser runs for this workspace: 'slate browser "
		                           "NAME start' on the host starts one");
		n = snprintf(msg, sizeof(msg),
		             "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
		             "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
		             n, body);
		(void)fs_write_all(fd, msg, (size_t)n);
		(void)close(fd);
		return;
	}
	(void)fs_relay(fd, bfd);
	(void)close(bfd);
	(void)close(fd);
}

int daemon_browser_init(struct daemon_ctx *d)
{
	int r;

	if (!d->channels)
		return 0;
	r = channels_register(d->channels, "cdp", cdp_stream, d);
	return r == -EEXIST ? 0 : r;
}

void daemon_browser_sweep(struct daemon_ctx *d)
{
	_cleanup_free_ char *vm = NULL;
	char **names = NULL;
	size_t n = 0;

	/* Only this slated's: their files lie below our runtime directory. */
	(void)vm_domains_destroy_below(d->libvirt_uri, d->runtime_dir, BROWSER_DOMAIN_PREFIX,
	                               "left by an earlier slated");
	vm = fs_path_join(d->runtime_dir, "vm");
	{
		_cleanup_close_ int fd = vm ? open(vm, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		if (fd < 0 || fs_list_names_at(fd, &names, &n) < 0)
			return;
	}
	for (size_t i = 0; i < n; i++)
		if (strncmp(names[i], BROWSER_KEY_PREFIX, strlen(BROWSER_KEY_PREFIX)) == 0)
			daemon_runtime_dir_remove(d, names[i]);
	fs_names_free(names, n);
}

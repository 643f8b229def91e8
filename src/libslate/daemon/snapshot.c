/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Booted snapshots of an image, and the restore of one into a fresh workspace's domain
 * (daemon/snapshot.h). The spike that measured the approach, and why each step is needed, is in
 * bench/spike-snapshot/FINDINGS.md; doc/vm.md has the design.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "channel/channels.h"
#include "daemon/daemon.h"
#include "daemon/exec.h"
#include "daemon/limits.h"
#include "daemon/shares.h"
#include "daemon/snapshot.h"
#include "image/store.h"
#include "storage/storage.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"
#include "version.h"
#include "vm/domain.h"
#include "vm/kvm.h"
#include "vm/lifecycle.h"
#include "vm/savefile.h"
#include "vm/xml.h"
#include "workspace/workspace.h"

#define SNAP_DIR "snapshots"
#define SNAP_DISK "disk.img"
#define SNAP_HOME "home.img"
#define SNAP_STATE "state.sav"
#define SNAP_RAW "state.raw"
#define SNAP_META "snapshot.json"
#define SNAP_META_MAX (64u * 1024)
/* The base boots with a blank vdb of this size: the guest must find no file system there. */
#define SNAP_HOME_PLACEHOLDER (16ull << 20)
/* After the ready line, the boot's last steps (init's, the console shell's) settle first. */
#define SNAP_SETTLE_MS 1500
#define IDENTITY_SEED_LEN 64
/* Opening the agent's identity stream (an answer to OPEN takes a loop turn in the guest). */
#define IDENTITY_OPEN_TIMEOUT_MS 10000

static const char *const mode_names[] = {
        [SNAPSHOT_AUTO] = "auto", [SNAPSHOT_USE] = "use", [SNAPSHOT_OFF] = "off"};

int snapshot_mode_parse(const char *s, enum snapshot_mode *ret)
{
	for (size_t i = 0; i < ELEMENTSOF(mode_names); i++)
		if (s && streq(s, mode_names[i])) {
			*ret = (enum snapshot_mode)i;
			return 0;
		}
	return -EINVAL;
}

const char *snapshot_mode_name(enum snapshot_mode m)
{
	return (size_t)m < ELEMENTSOF(mode_names) ? mode_names[m] : "?";
}

/* The snapshots being made (below, "snapshots being made") and whether slated is stopping
 * (daemon_snapshot_stop): then nothing new is made. */
static pthread_mutex_t making_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool making_stopped;

static void say(vm_progress_fn progress, void *userdata, const char *step, const char *detail)
{
	if (progress)
		progress(step, detail, userdata);
}

/* ---- what a restore must match ---- */

/* The settings of a domain of image img and shape (memory, cpus) on this host that are not
 * the workspace's own: what the key covers. Paths and names are the caller's. */
struct snap_shape {
	uint64_t memory_mib;
	unsigned cpus;
	bool kvm;
	const char *disk_format; /* NULL: raw */
	const char *disk_io;
	char *kernel, *initrd, *cmdline;
};

static void snap_shape_done(struct snap_shape *sh)
{
	free(sh->kernel);
	free(sh->initrd);
	free(sh->cmdline);
}

static int snap_shape_init(struct daemon_ctx *d, const struct image_info *img, uint64_t memory_mib,
                           unsigned cpus, struct snap_shape *ret)
{
	struct snap_shape sh = {
	        .memory_mib = memory_mib,
	        .cpus = cpus,
	        .kvm = vm_kvm_usable(d->libvirt_uri) > 0,
	        .disk_format = storage_get_kind(d->storage) == STORAGE_QCOW2 ? "qcow2" : NULL,
	        .disk_io = vm_disk_io(),
	};

	if (img->kernel_boot) {
		_cleanup_free_ char *idir = fs_path_join(storage_images_path(d->storage), img->id);
		sh.kernel = idir ? fs_path_join(idir, "vmlinuz") : NULL;
		sh.initrd = idir ? fs_path_join(idir, "initrd.img") : NULL;
		sh.cmdline = vm_kernel_cmdline(img->cmdline);
		if (!sh.kernel || !sh.initrd || !sh.cmdline) {
			snap_shape_done(&sh);
			return -ENOMEM;
		}
	}
	*ret = sh;
	return 0;
}

static void hash_str(crypto_hash_sha256_state *h, const char *name, const char *v)
{
	crypto_hash_sha256_update(h, (const unsigned char *)name, strlen(name) + 1);
	crypto_hash_sha256_update(h, (const unsigned char *)(v ? v : "-"), strlen(v ? v : "-") + 1);
}

static void hash_u64(crypto_hash_sha256_state *h, const char *name, uint64_t v)
{
	char num[32];

	(void)snprintf(num, sizeof(num), "%" PRIu64, v);
	hash_str(h, name, num);
}

static int snap_key(virConnectPtr conn, const struct image_info *img, const struct snap_shape *sh,
                    const char *template_text, char key[SNAPSHOT_KEY_LEN + 1])
{
	unsigned long lib = 0, hv = 0;
	unsigned char dig[crypto_hash_sha256_BYTES];
	crypto_hash_sha256_state h;

	if (virConnectGetLibVersion(conn, &lib) < 0 || virConnectGetVersion(conn, &hv) < 0)
		return -EIO;
	crypto_hash_sha256_init(&h);
	hash_str(&h, "format", "slate-snapshot-1");
	hash_str(&h, "slate", SLATE_VERSION);
	hash_str(&h, "image", img->id);
	hash_u64(&h, "version", (uint64_t)img->version);
	hash_str(&h, "digest", img->sha256);
	hash_u64(&h, "memory", sh->memory_mib);
	hash_u64(&h, "cpus", sh->cpus);
	hash_str(&h, "accel", sh->kvm ? "kvm" : "tcg");
	hash_str(&h, "format", sh->disk_format);
	hash_str(&h, "io", sh->disk_io);
	hash_str(&h, "cmdline", sh->cmdline);
	hash_u64(&h, "libvirt", lib);
	hash_u64(&h, "qemu", hv);
	hash_str(&h, "template", template_text);
	crypto_hash_sha256_final(&h, dig);
	(void)sodium_bin2hex(key, SNAPSHOT_KEY_LEN + 1, dig, SNAPSHOT_KEY_LEN / 2);
	return 0;
}

/* Opens <images>/<id>/snapshots (made when missing and create is set). */
static int open_snap_dir(struct daemon_ctx *d, const char *image_id, bool create, int *ret_fd)
{
	_cleanup_close_ int img_fd = -1;
	int fd;
	int r;

	r = image_store_open_dir(d->storage, image_id, &img_fd);
	if (r < 0)
		return r;
	if (create && mkdirat(img_fd, SNAP_DIR, 0711) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(img_fd, SNAP_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

static char *snap_path(struct daemon_ctx *d, const char *image_id, const char *name,
                       const char *file)
{
	_cleanup_free_ char *idir = fs_path_join(storage_images_path(d->storage), image_id);
	_cleanup_free_ char *sdir = idir ? fs_path_join(idir, SNAP_DIR) : NULL;
	_cleanup_free_ char *dir = sdir ? fs_path_join(sdir, name) : NULL;

	if (!dir)
		return NULL;
	return file ? fs_path_join(dir, file) : TAKE_PTR(dir);
}

/* <snapshots>/name/snapshot.json: 0, or < 0 when name is no installed snapshot (a staging
 * directory, a lock, an unreadable or malformed file). */
static int read_meta(int snap_fd, const char *name, struct json_object **ret)
{
	_cleanup_(buf_freep) struct buf *b = NULL;
	_cleanup_close_ int fd = -1;

	if (name[0] == '.' || strlen(name) != SNAPSHOT_KEY_LEN)
		return -ENOENT;
	fd = openat(snap_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fs_read_file_at(fd, SNAP_META, SNAP_META_MAX, &b) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	return json_parse_object((const char *)buf_ptr(b), buf_len(b), SNAP_META_MAX, ret);
}

/* The template, the shape and the key of (image, memory, cpus) on this host. */
struct snap_ctx {
	struct daemon_ctx *d;
	struct image_info *img;
	virConnectPtr conn;
	char *template_text;
	struct snap_shape sh;
	char key[SNAPSHOT_KEY_LEN + 1];
};

static void snap_ctx_done(struct snap_ctx *s)
{
	image_info_free(s->img);
	if (s->conn)
		(void)virConnectClose(s->conn);
	free(s->template_text);
	snap_shape_done(&s->sh);
}

static int snap_ctx_init(struct daemon_ctx *d, const char *image_id, uint64_t memory_mib,
                         unsigned cpus, struct snap_ctx *s, struct slate_error *err)
{
	int r;

	s->d = d;
	if (!d->storage)
		return slate_error_set(err, -ENODEV, "no storage: %s",
		                       d->storage_error ? d->storage_error : "not opened");
	r = image_store_get(d->storage, image_id, &s->img);
	if (r < 0)
		return slate_error_set(err, r, "image '%s' is not installed: %s", image_id,
		                       slate_strerror(r));
	r = vm_connect(d->libvirt_uri, &s->conn);
	if (r < 0)
		return slate_error_set(err, SLATE_ERR_LIBVIRT, "cannot connect to %s: %s",
		                       d->libvirt_uri, vm_last_error());
	r = vm_template_load(NULL, &s->template_text, NULL);
	if (r < 0)
		return slate_error_set(err, r, "cannot read the domain template: %s",
		                       slate_strerror(r));
	r = snap_shape_init(d, s->img, memory_mib, cpus, &s->sh);
	if (r >= 0)
		r = snap_key(s->conn, s->img, &s->sh, s->template_text, s->key);
	if (r < 0)
		return slate_error_set(err, r, "snapshot key: %s", vm_last_error());
	return 0;
}

/* ---- making one ---- */

struct snap_make {
	struct snap_ctx s;
	int snap_fd, tmp_fd, lock_fd;
	char tmp_name[64], domain[96], ws_name[64];
	char *tmp_path, *run_dir, *log, *sock, *disk, *home;
	virDomainPtr dom;
	bool admitted, installed;
};

static void snap_make_done(struct snap_make *m)
{
	if (m->dom) {
		(void)virDomainDestroy(m->dom);
		virDomainFree(m->dom);
	}
	if (m->tmp_fd >= 0 && !m->installed)
		(void)storage_delete_dir(m->s.d->storage, m->snap_fd, m->tmp_name);
	if (m->admitted)
		daemon_limits_release(m->s.d, m->domain);
	if (m->run_dir)
		daemon_runtime_dir_remove(m->s.d, m->ws_name);
	(void)safe_close(m->tmp_fd);
	(void)safe_close(m->snap_fd);
	(void)safe_close(m->lock_fd);
	free(m->tmp_path);
	free(m->run_dir);
	free(m->log);
	free(m->sock);
	free(m->disk);
	free(m->home);
	snap_ctx_done(&m->s);
}

/* The staging directory: a clone of the base and a blank placeholder home. */
static int make_stage(struct snap_make *m, struct slate_error *err)
{
	struct daemon_ctx *d = m->s.d;
	_cleanup_close_ int img_fd = -1, hfd = -1;
	_cleanup_free_ char *src = NULL;
	int r;

	(void)snprintf(m->tmp_name, sizeof(m->tmp_name), ".tmp-%s", m->s.key);
	/* Under the lock: what is there is an interrupted making's. */
	(void)storage_delete_dir(d->storage, m->snap_fd, m->tmp_name);
	if (mkdirat(m->snap_fd, m->tmp_name, 0711) < 0)
		return slate_error_errno(err, -errno, "making the staging directory");
	m->tmp_fd =
	        openat(m->snap_fd, m->tmp_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (m->tmp_fd < 0)
		return slate_error_errno(err, -errno, "opening the staging directory");
	m->tmp_path = snap_path(d, m->s.img->id, m->tmp_name, NULL);
	r = image_store_open_dir(d->storage, m->s.img->id, &img_fd);
	if (r < 0 || !m->tmp_path)
		return slate_error_errno(err, r < 0 ? r : -ENOMEM, "image directory");
	{
		_cleanup_free_ char *idir =
		        fs_path_join(storage_images_path(d->storage), m->s.img->id);
		src = idir ? fs_path_join(idir, SNAP_DISK) : NULL;
	}
	if (!src)
		return -ENOMEM;
	r = storage_clone_file(d->storage, img_fd, SNAP_DISK, src, m->tmp_fd, SNAP_DISK, 0600);
	if (r < 0)
		return slate_error_errno(err, r, "cloning the base");
	hfd = openat(m->tmp_fd, SNAP_HOME, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (hfd < 0 || ftruncate(hfd, (off_t)SNAP_HOME_PLACEHOLDER) < 0)
		return slate_error_errno(err, -errno, "the placeholder home");
	r = fs_make_traversable(storage_state_path(d->storage), m->tmp_path);
	if (r < 0)
		log_warning("cannot make %s traversable for QEMU: %s", m->tmp_path,
		            slate_strerror(r));
	m->disk = fs_path_join(m->tmp_path, SNAP_DISK);
	m->home = fs_path_join(m->tmp_path, SNAP_HOME);
	r = daemon_runtime_dir(d, m->ws_name, &m->run_dir);
	if (r < 0)
		return slate_error_errno(err, r, "runtime directory");
	m->log = fs_path_join(m->run_dir, "console.log");
	m->sock = fs_path_join(m->run_dir, "channel.sock");
	if (!m->disk || !m->home || !m->log || !m->sock)
		return -ENOMEM;
	return 0;
}

/* Boots the base (transient: nothing stays defined if slated dies) to its ready line. */
static int make_boot(struct snap_make *m, vm_progress_fn progress, void *userdata, double *ret_s,
                     struct slate_error *err)
{
	char uuid[37];
	struct vm_config c;
	_cleanup_free_ char *xml = NULL;
	double t0;
	int r;

	(void)workspace_uuid_v4(uuid);
	c = (struct vm_config){
	        .domain_name = m->domain,
	        .uuid = uuid,
	        .workspace = m->ws_name,
	        .image_id = m->s.img->id,
	        .base_version = m->s.img->version,
	        .memory_mib = m->s.sh.memory_mib,
	        .cpus = m->s.sh.cpus,
	        .kvm = m->s.sh.kvm,
	        .disk = m->disk,
	        .disk_format = m->s.sh.disk_format,
	        .home = m->home,
	        .disk_io = m->s.sh.disk_io,
	        .kernel = m->s.sh.kernel,
	        .initrd = m->s.sh.initrd,
	        .cmdline = m->s.sh.cmdline,
	        .console_log = m->log,
	        .channel_socket = m->sock,
	        .genid = true,
	};
	r = vm_xml_build(m->s.template_text, &c, &xml);
	if (r < 0)
		return slate_error_set(err, r, "cannot build the domain XML from the template");
	(void)unlink(m->log);
	say(progress, userdata, "booting",
	    m->s.sh.kvm ? "the base, once (KVM)" : "the base, once (TCG: slower)");
	t0 = time_mono_s();
	/* Under making_lock: daemon_snapshot_stop either sees this domain or stopped it first. */
	pthread_mutex_lock(&making_lock);
	if (!atomic_load(&making_stopped))
		m->dom = virDomainCreateXML(m->s.conn, xml, 0);
	pthread_mutex_unlock(&making_lock);
	if (!m->dom && atomic_load(&making_stopped))
		return slate_error_set(err, -ECANCELED, "slated is stopping");
	if (!m->dom)
		return slate_error_set(err, -EIO, "cannot start %s: %s", m->domain,
		                       vm_last_error());
	say(progress, userdata, "waiting", "for the guest's ready line on the console");
	r = vm_wait_ready(m->dom, m->log, VM_DEFAULT_BOOT_TIMEOUT_S, t0, err);
	if (r < 0)
		return r;
	*ret_s = time_mono_s() - t0;
	return 0;
}

/* Saves the guest's state, then rewrites it with its stream aligned for clones. */
static int make_save(struct snap_make *m, vm_progress_fn progress, void *userdata,
                     uint64_t *ret_bytes, struct slate_error *err)
{
	_cleanup_free_ char *raw = fs_path_join(m->tmp_path, SNAP_RAW);
	_cleanup_close_ int in = -1, out = -1;
	struct vm_save_image img = {0};
	struct stat st;
	int r;

	if (!raw)
		return -ENOMEM;
	say(progress, userdata, "saving", "the guest's memory and device state");
	(void)usleep(SNAP_SETTLE_MS * 1000);
	if (virDomainSaveFlags(m->dom, raw, NULL, VIR_DOMAIN_SAVE_RUNNING) < 0)
		return slate_error_set(err, -EIO, "libvirt cannot save %s: %s", m->domain,
		                       vm_last_error());
	/* A saved transient domain is gone. */
	virDomainFree(TAKE_PTR(m->dom));
	in = openat(m->tmp_fd, SNAP_RAW, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0)
		return slate_error_errno(err, -errno, "reading the save image");
	r = vm_save_read(in, &img);
	if (r < 0)
		return slate_error_set(err, r,
		                       "libvirt's save image is in a format slate cannot rewrite "
		                       "(%s): starts boot cold",
		                       r == -EOPNOTSUPP ? "another version, or compressed: see "
		                                          "save_image_format in qemu.conf"
		                                        : "not a QEMU save image");
	say(progress, userdata, "aligning", "the saved stream, for clones");
	out = openat(m->tmp_fd, SNAP_STATE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		r = -errno;
	else
		r = vm_save_rewrite(in, &img, img.xml, true, out, NULL);
	vm_save_image_done(&img);
	if (r < 0)
		return slate_error_errno(err, r, "writing %s", SNAP_STATE);
	if (fsync(out) < 0 || fstat(out, &st) < 0)
		return slate_error_errno(err, -errno, "writing %s", SNAP_STATE);
	(void)unlinkat(m->tmp_fd, SNAP_RAW, 0);
	(void)unlinkat(m->tmp_fd, SNAP_HOME, 0);
	*ret_bytes = (uint64_t)st.st_size;
	return 0;
}

/*
 * The snapshots of the same shape made before (another key: a QEMU, libvirt, template or slate
 * upgrade since) can never be used again: they go, so that each shape keeps one.
 */
static void prune_shape(struct snap_make *m)
{
	_cleanup_(closedirp) DIR *dp = fdopendir(fcntl(m->snap_fd, F_DUPFD_CLOEXEC, 3));
	struct dirent *de;

	while (dp && (de = readdir(dp))) {
		_cleanup_json_ struct json_object *o = NULL;
		int64_t mem = 0, cpus = 0;

		if (streq(de->d_name, m->s.key) || read_meta(m->snap_fd, de->d_name, &o) < 0 ||
		    json_get_int64(o, "memory_mib", &mem) < 0 ||
		    json_get_int64(o, "cpus", &cpus) < 0)
			continue;
		if ((uint64_t)mem != m->s.sh.memory_mib || (unsigned)cpus != m->s.sh.cpus)
			continue;
		log_info("removing booted snapshot %s of image %s: %s replaces it", de->d_name,
		         m->s.img->id, m->s.key);
		(void)storage_delete_dir(m->s.d->storage, m->snap_fd, de->d_name);
	}
}

static int make_install(struct snap_make *m, const struct snapshot_made *made,
                        struct slate_error *err)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_free_ char *text = NULL;
	int r;

	if (!o || json_add_string(o, "key", m->s.key) < 0 ||
	    json_add_string(o, "image", m->s.img->id) < 0 ||
	    json_add_int64(o, "image_version", m->s.img->version) < 0 ||
	    json_add_int64(o, "memory_mib", (int64_t)m->s.sh.memory_mib) < 0 ||
	    json_add_int64(o, "cpus", m->s.sh.cpus) < 0 ||
	    json_add_string(o, "accelerator", m->s.sh.kvm ? "kvm" : "tcg") < 0 ||
	    json_add_string(o, "disk_io", m->s.sh.disk_io) < 0 ||
	    json_add_int64(o, "made", (int64_t)time(NULL)) < 0 ||
	    json_add_int64(o, "state_bytes", (int64_t)made->state_bytes) < 0 ||
	    json_add(o, "boot_s", json_object_new_double(made->boot_s)) < 0 ||
	    json_add(o, "save_s", json_object_new_double(made->save_s)) < 0 ||
	    json_to_string_dup(o, true, &text) < 0)
		return -ENOMEM;
	r = fs_write_atomic_at(m->tmp_fd, SNAP_META, text, strlen(text), 0600);
	if (r < 0)
		return slate_error_errno(err, r, "writing %s", SNAP_META);
	if (renameat(m->snap_fd, m->tmp_name, m->snap_fd, m->s.key) < 0)
		return slate_error_errno(err, -errno, "installing the snapshot");
	m->installed = true;
	(void)fs_fsync_dir(m->snap_fd);
	prune_shape(m);
	return 0;
}

/* ---- snapshots being made, for the image list ---- */

#define MAKING_MAX 8

/* A snapshot being made (by a request or in the background), its last step. */
struct making {
	bool used;
	char image[IMAGE_ID_MAX + 1];
	char key[SNAPSHOT_KEY_LEN + 1];
	uint64_t memory_mib;
	unsigned cpus;
	char step[32];
	double since;
	/* The caller's progress, which this passes each step on to. */
	vm_progress_fn progress;
	void *userdata;
};

static struct making making[MAKING_MAX];

static void making_step(const char *step, const char *detail, void *userdata)
{
	struct making *mk = userdata;

	pthread_mutex_lock(&making_lock);
	(void)snprintf(mk->step, sizeof(mk->step), "%s", step);
	pthread_mutex_unlock(&making_lock);
	if (mk->progress)
		mk->progress(step, detail, mk->userdata);
}

/* A slot for the snapshot key of image being made from now on; NULL when all are taken or
 * slated is stopping (then it is not made). */
static struct making *making_begin(const char *image, const char *key, uint64_t memory_mib,
                                   unsigned cpus, vm_progress_fn progress, void *userdata)
{
	struct making *mk = NULL;

	pthread_mutex_lock(&making_lock);
	for (size_t i = 0; i < MAKING_MAX && !mk && !atomic_load(&making_stopped); i++) {
		if (making[i].used)
			continue;
		mk = &making[i];
		*mk = (struct making){.used = true,
		                      .memory_mib = memory_mib,
		                      .cpus = cpus,
		                      .since = time_mono_s(),
		                      .progress = progress,
		                      .userdata = userdata};
		(void)snprintf(mk->image, sizeof(mk->image), "%s", image);
		(void)snprintf(mk->key, sizeof(mk->key), "%s", key);
		(void)snprintf(mk->step, sizeof(mk->step), "starting");
	}
	pthread_mutex_unlock(&making_lock);
	return mk;
}

static void making_end(struct making **mk)
{
	if (!*mk)
		return;
	pthread_mutex_lock(&making_lock);
	(*mk)->used = false;
	pthread_mutex_unlock(&making_lock);
	*mk = NULL;
}

/* Adds {key, memory_mib, cpus, making: true, step, since_s} to arr for each of image's. */
static int making_list(const char *image, struct json_object *arr)
{
	int r = 0;

	pthread_mutex_lock(&making_lock);
	for (size_t i = 0; i < MAKING_MAX && r >= 0; i++) {
		const struct making *mk = &making[i];
		struct json_object *o;

		if (!mk->used || strcmp(mk->image, image) != 0)
			continue;
		o = json_object_new_object();
		if (!o || json_add_string(o, "key", mk->key) < 0 ||
		    json_add_int64(o, "memory_mib", (int64_t)mk->memory_mib) < 0 ||
		    json_add_int64(o, "cpus", mk->cpus) < 0 ||
		    json_add_bool(o, "making", true) < 0 ||
		    json_add_string(o, "step", mk->step) < 0 ||
		    json_add(o, "since_s", json_object_new_double(time_mono_s() - mk->since)) < 0 ||
		    json_object_array_add(arr, o) < 0) {
			json_object_put(o);
			r = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&making_lock);
	return r;
}

int daemon_snapshot_make(struct daemon_ctx *d, const char *image_id, uint64_t memory_mib,
                         unsigned cpus, vm_progress_fn progress, void *userdata,
                         struct snapshot_made *ret, struct slate_error *err)
{
	_cleanup_(snap_make_done) struct snap_make m = {.snap_fd = -1, .tmp_fd = -1, .lock_fd = -1};
	_cleanup_(making_end) struct making *mk = NULL;
	struct snapshot_made made = {0};
	char lock[64];
	double t0 = time_mono_s(), t;
	int r;

	if (vm_vsock_usable())
		return slate_error_set(err, -EOPNOTSUPP,
		                       "this host gives guests a vsock channel: starts from booted "
		                       "snapshots use the virtio-serial channel only");
	if (memory_mib < 128 || cpus == 0)
		return slate_error_set(err, -EINVAL,
		                       "a snapshot needs at least 128 MiB and 1 vCPU");
	r = snap_ctx_init(d, image_id, memory_mib, cpus, &m.s, err);
	if (r < 0)
		return r;
	memcpy(made.key, m.s.key, sizeof(made.key));
	r = open_snap_dir(d, image_id, true, &m.snap_fd);
	if (r < 0)
		return slate_error_errno(err, r, "snapshot directory of image '%s'", image_id);
	if (faccessat(m.snap_fd, m.s.key, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		made.existed = true;
		*ret = made;
		return 0;
	}
	(void)snprintf(lock, sizeof(lock), ".lock-%s", m.s.key);
	r = fs_lock_at(m.snap_fd, lock, &m.lock_fd);
	if (r == -EWOULDBLOCK)
		return slate_error_set(err, -EBUSY, "snapshot %s of image '%s' is being made",
		                       m.s.key, image_id);
	if (r < 0)
		return slate_error_errno(err, r, "locking the snapshot");
	/* Made while this waited for nothing: the lock was free, but look again. */
	if (faccessat(m.snap_fd, m.s.key, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		made.existed = true;
		*ret = made;
		return 0;
	}
	/* Listed as being made from here (image ls), each step passed on to the caller; what
	 * daemon_snapshot_stop finds to cut short. */
	mk = making_begin(image_id, m.s.key, memory_mib, cpus, progress, userdata);
	if (!mk)
		return slate_error_set(
		        err, atomic_load(&making_stopped) ? -ECANCELED : -EBUSY, "%s",
		        atomic_load(&making_stopped) ? "slated is stopping"
		                                     : "too many snapshots are being made");
	progress = making_step;
	userdata = mk;
	(void)snprintf(m.domain, sizeof(m.domain), SNAPSHOT_DOMAIN_PREFIX "%s", m.s.key);
	(void)snprintf(m.ws_name, sizeof(m.ws_name), ".snapshot-%s", m.s.key);
	r = daemon_limits_admit(d, m.domain, m.domain, memory_mib, progress, userdata, NULL, err);
	if (r < 0)
		return r;
	m.admitted = true;
	say(progress, userdata, "cloning", "a pristine clone of the base");
	r = make_stage(&m, err);
	if (r >= 0)
		r = make_boot(&m, progress, userdata, &made.boot_s, err);
	t = time_mono_s();
	if (r >= 0)
		r = make_save(&m, progress, userdata, &made.state_bytes, err);
	made.save_s = time_mono_s() - t;
	made.total_s = time_mono_s() - t0;
	if (r >= 0)
		r = make_install(&m, &made, err);
	if (r < 0)
		return r;
	log_info("booted snapshot %s of image %s (%" PRIu64 " MiB, %u vCPU): boot %.1f s, save "
	         "%.1f s, %" PRIu64 " MiB of state",
	         m.s.key, image_id, memory_mib, cpus, made.boot_s, made.save_s,
	         made.state_bytes >> 20);
	*ret = made;
	return 0;
}

/* ---- in the background (boot-snapshots = auto) ---- */

struct later {
	struct daemon_ctx *d;
	char image[IMAGE_ID_MAX + 1];
	uint64_t memory_mib;
	unsigned cpus;
};

static pthread_mutex_t later_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned later_running;

static void *later_thread(void *arg)
{
	_cleanup_free_ struct later *l = arg;
	struct slate_error err = {0};
	struct snapshot_made made;

	if (daemon_snapshot_make(l->d, l->image, l->memory_mib, l->cpus, NULL, NULL, &made, &err) <
	            0 &&
	    err.code != -EBUSY)
		log_notice("no booted snapshot of image %s (%" PRIu64 " MiB, %u vCPU): %s",
		           l->image, l->memory_mib, l->cpus, slate_error_text(&err));
	pthread_mutex_lock(&later_lock);
	later_running--;
	pthread_mutex_unlock(&later_lock);
	return NULL;
}

void daemon_snapshot_make_later(struct daemon_ctx *d, const char *image_id, uint64_t memory_mib,
                                unsigned cpus)
{
	struct later *l = calloc(1, sizeof(*l));
	pthread_attr_t a;
	pthread_t t;
	bool go;

	if (!l || strlen(image_id) > IMAGE_ID_MAX) {
		free(l);
		return;
	}
	/* One at a time: each boots a guest. */
	pthread_mutex_lock(&later_lock);
	go = later_running == 0;
	if (go)
		later_running++;
	pthread_mutex_unlock(&later_lock);
	if (!go) {
		free(l);
		return;
	}
	*l = (struct later){.d = d, .memory_mib = memory_mib, .cpus = cpus};
	memcpy(l->image, image_id, strlen(image_id) + 1);
	(void)pthread_attr_init(&a);
	(void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, later_thread, l) != 0) {
		free(l);
		pthread_mutex_lock(&later_lock);
		later_running--;
		pthread_mutex_unlock(&later_lock);
	} else {
		log_info("making a booted snapshot of image %s (%" PRIu64 " MiB, %u vCPU) in the "
		         "background",
		         image_id, memory_mib, cpus);
	}
	(void)pthread_attr_destroy(&a);
}

/* ---- using one ---- */

int daemon_snapshot_usable(struct daemon_ctx *d, const struct workspace *w, const char **why)
{
	if (d->boot_snapshots == SNAPSHOT_OFF)
		return *why = "boot-snapshots is off", -EPERM;
	if (!w->disk_fresh)
		return *why = "its disk is not a fresh clone of the base", -ESTALE;
	if (w->n_shares > 0)
		return *why = "it has shared folders", -EOPNOTSUPP;
	if (vm_vsock_usable())
		return *why = "the guest channel is vsock", -EOPNOTSUPP;
	return 0;
}

int daemon_snapshot_prepare(struct daemon_ctx *d, const struct image_info *img,
                            const struct vm_config *c, const char *template_text,
                            const char *save_path, char **ret_xml,
                            char ret_key[SNAPSHOT_KEY_LEN + 1], struct slate_error *err)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_close_ int snap_fd = -1, dir_fd = -1, in = -1, out = -1, ws_fd = -1;
	_cleanup_free_ char *xml = NULL, *ws_dir = NULL;
	struct vm_save_image saved = {0};
	struct snap_shape sh = {0};
	char key[SNAPSHOT_KEY_LEN + 1];
	const char *slash;
	int r;

	r = snap_shape_init(d, img, c->memory_mib, c->cpus, &sh);
	if (r < 0)
		return slate_error_errno(err, r, "snapshot");
	/* The domain would boot as configured: a shape that differs has no snapshot. */
	sh.disk_io = c->disk_io;
	sh.kvm = c->kvm;
	r = vm_connect(d->libvirt_uri, &conn);
	if (r >= 0)
		r = snap_key(conn, img, &sh, template_text, key);
	snap_shape_done(&sh);
	if (r < 0)
		return slate_error_set(err, r, "snapshot key: %s", vm_last_error());
	memcpy(ret_key, key, sizeof(key));
	r = open_snap_dir(d, img->id, false, &snap_fd);
	if (r >= 0) {
		dir_fd = openat(snap_fd, key, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		r = dir_fd < 0 ? -errno : 0;
	}
	if (r < 0)
		return slate_error_set(err, -ENOENT, "no booted snapshot %s of image %s", key,
		                       img->id);
	in = openat(dir_fd, SNAP_STATE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0)
		return slate_error_errno(err, -errno, "snapshot %s: %s", key, SNAP_STATE);
	r = vm_save_read(in, &saved);
	if (r < 0)
		return slate_error_errno(err, r, "snapshot %s: %s", key, SNAP_STATE);
	/* The saved domain's own XML (machine type, PCI addresses, genid as libvirt fixed them)
	 * with the workspace's name, UUID, metadata, disks, log and channel. */
	r = vm_xml_build(saved.xml, c, &xml);
	if (r < 0) {
		vm_save_image_done(&saved);
		return slate_error_set(err, r, "snapshot %s: its domain XML is not usable", key);
	}
	out = open(save_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	r = out < 0 ? -errno : vm_save_rewrite(in, &saved, xml, false, out, NULL);
	vm_save_image_done(&saved);
	if (r < 0) {
		(void)unlink(save_path);
		return slate_error_errno(err, r, "writing %s", save_path);
	}
	/* The disk as the guest had it mounted, replacing the pristine clone in one rename. */
	slash = strrchr(c->disk, '/');
	ws_dir = slash ? strndup(c->disk, (size_t)(slash - c->disk)) : NULL;
	ws_fd = ws_dir ? open(ws_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (ws_fd < 0) {
		(void)unlink(save_path);
		return slate_error_errno(err, ws_dir ? -errno : -ENOMEM, "workspace directory");
	}
	(void)unlinkat(ws_fd, "disk.img.snapshot", 0);
	r = storage_clone_plain(d->storage, dir_fd, SNAP_DISK, ws_fd, "disk.img.snapshot", 0600);
	if (r >= 0 && renameat(ws_fd, "disk.img.snapshot", ws_fd, slash + 1) < 0)
		r = -errno;
	if (r < 0) {
		(void)unlinkat(ws_fd, "disk.img.snapshot", 0);
		(void)unlink(save_path);
		return slate_error_errno(err, r, "cloning the snapshot's disk");
	}
	*ret_xml = TAKE_PTR(xml);
	return 0;
}

/* ---- listing and sweeping ---- */

int daemon_snapshot_list(struct daemon_ctx *d, const char *image_id, struct json_object **ret)
{
	_cleanup_json_ struct json_object *arr = json_object_new_array();
	_cleanup_close_ int snap_fd = -1;
	_cleanup_(closedirp) DIR *dp = NULL;
	struct dirent *de;
	int r;

	if (!arr)
		return -ENOMEM;
	r = open_snap_dir(d, image_id, false, &snap_fd);
	if (r == -ENOENT) {
		r = making_list(image_id, arr);
		if (r < 0)
			return r;
		*ret = TAKE_PTR(arr);
		return 0;
	}
	if (r < 0)
		return r;
	dp = fdopendir(fcntl(snap_fd, F_DUPFD_CLOEXEC, 3));
	if (!dp)
		return -errno;
	while ((de = readdir(dp))) {
		struct json_object *o = NULL;

		if (read_meta(snap_fd, de->d_name, &o) < 0)
			continue;
		if (json_object_array_add(arr, o) < 0) {
			json_object_put(o);
			return -ENOMEM;
		}
	}
	r = making_list(image_id, arr);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(arr);
	return 0;
}

void daemon_snapshot_sweep(struct daemon_ctx *d)
{
	struct image_info **list = NULL;
	size_t n = 0;

	/* Only this slated's: its disk lies below our state directory. Another slated on the same
	 * libvirt (a test's, a user's) may be making one right now, under the same name. */
	(void)vm_domains_destroy_below(d->libvirt_uri, d->state_dir, SNAPSHOT_DOMAIN_PREFIX,
	                               "left by an interrupted snapshot");
	if (!d->storage || image_store_list(d->storage, &list, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		_cleanup_close_ int snap_fd = -1;
		_cleanup_(closedirp) DIR *dp = NULL;
		struct dirent *de;

		if (open_snap_dir(d, list[i]->id, false, &snap_fd) < 0)
			continue;
		dp = fdopendir(fcntl(snap_fd, F_DUPFD_CLOEXEC, 3));
		while (dp && (de = readdir(dp))) {
			_cleanup_close_ int lock_fd = -1;
			char lock[64];

			if (strncmp(de->d_name, ".tmp-", 5) != 0)
				continue;
			(void)snprintf(lock, sizeof(lock), ".lock-%s", de->d_name + 5);
			if (fs_lock_at(snap_fd, lock, &lock_fd) < 0)
				continue; /* being made */
			(void)storage_delete_dir(d->storage, snap_fd, de->d_name);
		}
	}
	image_info_list_free(list, n);
}

/* ---- the guest takes on the workspace's identity ---- */

/* Reads the guest's one answer line from fd into reply (no newline) by the deadline. */
static int identity_read_line(int fd, int64_t deadline, char *reply, size_t cap,
                              struct slate_error *err)
{
	size_t len = 0;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - time_mono_ms();
		char *nl;
		ssize_t k;

		if (left <= 0 || poll(&p, 1, (int)left) == 0)
			return slate_error_set(err, -ETIMEDOUT, "the guest did not answer");
		k = read(fd, reply + len, cap - 1 - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return slate_error_set(
			        err, -ECONNRESET,
			        "the guest ended the identity stream without an answer");
		len += (size_t)k;
		reply[len] = '\0';
		nl = memchr(reply, '\n', len);
		if (nl) {
			*nl = '\0';
			return 0;
		}
		if (len == cap - 1)
			return slate_error_set(err, -EMSGSIZE, "the guest's answer is too long");
	}
}

/* The line through the agent's own "identity" stream: no process in the guest. -ENOTSUP when
 * the agent does not know it (an image with an older slate-guest). */
static int identity_stream(struct daemon_ctx *d, const char *name, const char *line, size_t n,
                           int64_t deadline, char *reply, size_t cap, struct slate_error *err)
{
	_cleanup_close_ int fd = -1;
	struct slate_error e = {0};
	int r;

	if (!d->channels)
		return slate_error_set(err, -ENOTCONN, "the guest channel is not available");
	r = channels_open(d->channels, name, "identity", IDENTITY_OPEN_TIMEOUT_MS, &fd, &e);
	if (r == -ECONNREFUSED && strstr(slate_error_text(&e), "unknown service"))
		return -ENOTSUP;
	if (r < 0)
		return slate_error_set(err, r, "%s", slate_error_text(&e));
	if (fs_write_all(fd, line, n) < 0)
		return slate_error_errno(err, -errno, "sending the identity to the guest");
	return identity_read_line(fd, deadline, reply, cap, err);
}

/* The same line to slate-guest --identity, run as root through an exec session. */
static int identity_exec(struct daemon_ctx *d, const char *name, const char *line, size_t n,
                         int64_t deadline, char *reply, size_t cap, struct slate_error *err)
{
	_cleanup_free_ struct ex_request *req = calloc(1, sizeof(*req));
	_cleanup_(exec_dialog_freep) struct exec_dialog *g = NULL;
	int r;

	if (!req)
		return slate_error_errno(err, -ENOMEM, "identity");
	req->args[req->n_args++] = (struct ex_str){"slate-guest", 11};
	req->args[req->n_args++] = (struct ex_str){"--identity", 10};
	req->user = (struct ex_str){"root", 4};
	r = exec_dialog_open(d, name, req, &g, err);
	if (r < 0)
		return r;
	r = exec_dialog_send(g, line, n);
	if (r < 0)
		return slate_error_errno(err, r, "sending the identity to the guest");
	r = exec_dialog_line(g, deadline, reply, cap, err);
	if (r < 0)
		return slate_error_set(err, r, "slate-guest --identity gave no answer%s",
		                       r == -EPIPE ? " (an image without it?)" : "");
	return 0;
}

/* One try: 0, -EPROTO when slate-guest answered an error (trying again is no use), or another
 * error (the session went: a guest agent that resynchronised its channel). */
static int identity_once(struct daemon_ctx *d, const char *name, int64_t deadline,
                         struct slate_error *err)
{
	uint8_t seed[IDENTITY_SEED_LEN];
	char hex[2 * IDENTITY_SEED_LEN + 1], line[512], reply[256];
	const char *how = "stream";
	struct timespec now;
	int n, r;

	randombytes_buf(seed, sizeof(seed));
	(void)sodium_bin2hex(hex, sizeof(hex), seed, sizeof(seed));
	sodium_memzero(seed, sizeof(seed));
	/* The time last, as late as can be: the guest sets its clock to it. */
	(void)clock_gettime(CLOCK_REALTIME, &now);
	n = snprintf(line, sizeof(line), "identity %s %lld %ld %s\n", name, (long long)now.tv_sec,
	             now.tv_nsec, hex);
	sodium_memzero(hex, sizeof(hex));
	r = identity_stream(d, name, line, (size_t)n, deadline, reply, sizeof(reply), err);
	if (r == -ENOTSUP) {
		how = "exec";
		r = identity_exec(d, name, line, (size_t)n, deadline, reply, sizeof(reply), err);
	}
	sodium_memzero(line, sizeof(line));
	if (r < 0)
		return r;
	/* "ok", with what the guest says its steps took. */
	if (strncmp(reply, "ok", 2) != 0 || (reply[2] != '\0' && reply[2] != ' '))
		return slate_error_set(err, -EPROTO, "slate-guest identity: %.200s", reply);
	log_ws(LOG_DEBUG, name, "identity (%s): %.200s", how, reply);
	return 0;
}

int daemon_guest_identity(struct daemon_ctx *d, const char *name, unsigned timeout_ms,
                          struct slate_error *err)
{
	int64_t t0 = time_mono_ms(), deadline = t0 + timeout_ms, t_ready;
	int r;

	for (;;) {
		int64_t left = deadline - time_mono_ms();

		r = channels_wait_ready(d->channels, name, left > 0 ? (unsigned)left : 1);
		if (r < 0)
			return slate_error_set(err, r,
			                       "the guest agent did not connect within %u s",
			                       timeout_ms / 1000);
		t_ready = time_mono_ms();
		r = identity_once(d, name, deadline, err);
		log_ws(LOG_DEBUG, name, "identity: agent ready after %lld ms, answered in %lld ms",
		       (long long)(t_ready - t0), (long long)(time_mono_ms() - t_ready));
		/* A guest agent that restarts its session (it noticed the new host a second
		 * time) takes the stream with it: once more, while there is time. */
		if (r >= 0 || r == -EPROTO || r == -EPIPE || deadline - time_mono_ms() < 1000)
			return r;
		log_ws(LOG_DEBUG, name, "identity: %s; trying again", slate_error_text(err));
		(void)usleep(200 * 1000);
	}
}

void daemon_snapshot_stop(struct daemon_ctx *d)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	bool told = false;

	atomic_store(&making_stopped, true);
	for (unsigned i = 0; i < 150; i++) {
		char doms[MAKING_MAX][sizeof(SNAPSHOT_DOMAIN_PREFIX) + SNAPSHOT_KEY_LEN];
		size_t n = 0;
		bool busy;

		pthread_mutex_lock(&later_lock);
		busy = later_running > 0;
		pthread_mutex_unlock(&later_lock);
		pthread_mutex_lock(&making_lock);
		for (size_t k = 0; k < MAKING_MAX; k++) {
			if (!making[k].used)
				continue;
			busy = true;
			(void)snprintf(doms[n++], sizeof(doms[0]), SNAPSHOT_DOMAIN_PREFIX "%s",
			               making[k].key);
		}
		pthread_mutex_unlock(&making_lock);
		if (!busy)
			return;
		if (!told) {
			log_info("stopping: cutting short the booted snapshots being made");
			told = true;
		}
		/* Its maker sees the guest go (or its save fail) and removes what it staged. */
		if (!conn)
			(void)vm_connect(d->libvirt_uri, &conn);
		for (size_t k = 0; conn && k < n; k++) {
			virDomainPtr dom = virDomainLookupByName(conn, doms[k]);
			if (dom) {
				if (virDomainIsActive(dom) == 1)
					(void)virDomainDestroy(dom);
				virDomainFree(dom);
			}
		}
		(void)usleep(100 * 1000);
	}
	log_warning("stopping: a booted snapshot is still being made after 15 s; the next start "
	            "removes what it leaves");
}

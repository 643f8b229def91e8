/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * home.img: a sparse ext4 made by mke2fs from a skeleton home. Its root directory is the home of
 * the guest user (uid/gid 1000). Every home starts as exactly what mke2fs makes of the skeleton
 * below, made from nothing, never derived from another workspace or a base image: a 64 GiB home
 * takes a few MiB on the host until the guest writes to it.
 *
 * mke2fs is most of a create's time, so where the storage reflinks (btrfs, reflink, pool) it runs
 * once per home size and recipe: the first home of a size is made as a template,
 * <workspaces>/.home-templates/home-<recipe>-<size>.img, and every home of that size after it is
 * a FICLONE of the template. A template is made from nothing as well (mke2fs and the skeleton
 * below; no workspace's bytes ever go into it), it never belongs to a workspace, and nothing
 * writes to it once it is renamed into place: each clone starts as exactly what mke2fs made, and
 * a guest's writes to its clone reach neither the template nor any other clone. qcow2 storage
 * cannot count on reflinks and runs mke2fs for every home.
 *
 * Clones of one template share its ext4 UUID, label and directory hash seed. Nothing relies on
 * them being unique: a guest mounts its home by device (vdb), it only ever sees its own, the host
 * never mounts homes, and a checkpoint's home already shares its workspace's UUID. A fresh UUID
 * per clone would need the metadata_csum_seed feature (every metadata checksum is seeded from the
 * UUID otherwise) and a superblock rewrite by hand, or a tune2fs per create costing as much as
 * the mke2fs it replaces; neither is worth it.
 */

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"
#include "workspace/crash.h"
#include "workspace/internal.h"

#define HOME_UID 1000
#define HOME_GID 1000
#define HOME_LABEL "slate-home"
/* How much of mke2fs's stderr is kept to tell ENOSPC from other failures. */
#define MKE2FS_ERR_MAX 4096
/* Bump when a home changes in a way the recipe digest below cannot see. */
#define HOME_RECIPE_VERSION "slate-home-1"
#define TEMPLATE_NAME_FMT "home-%016" PRIx64 "-%" PRIu64 ".img"
#define TMP_PREFIX ".tmp-"
/* Where the ext4 superblock's magic (0xef53, little-endian) sits in the image. */
#define EXT4_MAGIC_OFFSET 1080

struct skel_file {
	const char *name;
	const char *text;
};

static const struct skel_file skel_files[] = {
        {".profile", "# ~/.profile: a slate workspace home.\n"
                     "if [ -n \"$BASH_VERSION\" ] && [ -f \"$HOME/.bashrc\" ]; then\n"
                     "\t. \"$HOME/.bashrc\"\n"
                     "fi\n"
                     "if [ -d \"$HOME/.local/bin\" ]; then\n"
                     "\tPATH=\"$HOME/.local/bin:$PATH\"\n"
                     "fi\n"},
        {".bashrc", "# ~/.bashrc: a slate workspace home.\n"
                    "case $- in *i*) ;; *) return ;; esac\n"
                    "HISTCONTROL=ignoreboth\n"
                    "PS1='\\u@\\h:\\w\\$ '\n"},
};
#define SKEL_SSH ".ssh"

/* Removes what skel_create() may have made; every step tolerates a missing entry. */
static void skel_remove(int dir_fd, const char *skel)
{
	_cleanup_close_ int fd =
	        openat(dir_fd, skel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0) {
		for (size_t i = 0; i < ELEMENTSOF(skel_files); i++)
			(void)unlinkat(fd, skel_files[i].name, 0);
		(void)unlinkat(fd, SKEL_SSH, AT_REMOVEDIR);
	}
	(void)unlinkat(dir_fd, skel, AT_REMOVEDIR);
}

static int skel_create(int dir_fd, const char *skel)
{
	_cleanup_close_ int fd = -1;
	int r;

	if (mkdirat(dir_fd, skel, 0755) < 0)
		return -errno;
	fd = openat(dir_fd, skel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* mke2fs -d copies modes and owners as they are here; the umask must not decide. */
	if (fchmod(fd, 0755) < 0 || fchown(fd, HOME_UID, HOME_GID) < 0)
		return -errno;
	for (size_t i = 0; i < ELEMENTSOF(skel_files); i++) {
		_cleanup_close_ int f =
		        openat(fd, skel_files[i].name,
		               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (f < 0)
			return -errno;
		r = fs_write_all(f, skel_files[i].text, strlen(skel_files[i].text));
		if (r < 0)
			return r;
		if (fchmod(f, 0644) < 0 || fchown(f, HOME_UID, HOME_GID) < 0)
			return -errno;
	}
	if (mkdirat(fd, SKEL_SSH, 0700) < 0)
		return -errno;
	if (fchmodat(fd, SKEL_SSH, 0700, 0) < 0 ||
	    fchownat(fd, SKEL_SSH, HOME_UID, HOME_GID, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

static const char *const mke2fs_candidates[] = {"/usr/sbin/mke2fs", "/sbin/mke2fs", "mke2fs"};

/* Everything between "mke2fs" and "-d <skeleton> <image>". */
static const char *const mke2fs_options[] = {
        "-q",
        "-t",
        "ext4",
        "-F",
        "-m",
        "0",
        "-L",
        HOME_LABEL,
        "-E",
        "root_owner=" STRINGIFY(HOME_UID) ":" STRINGIFY(
                HOME_GID) ",lazy_itable_init=1,lazy_journal_init=1",
};

/* The first mke2fs candidate that is there; the last one (found through PATH) otherwise. */
static const char *mke2fs_path(void)
{
	for (size_t i = 0; i + 1 < ELEMENTSOF(mke2fs_candidates); i++)
		if (access(mke2fs_candidates[i], X_OK) == 0)
			return mke2fs_candidates[i];
	return mke2fs_candidates[ELEMENTSOF(mke2fs_candidates) - 1];
}

/* Starts mke2fs on image with the skeleton; *ret_pid and *ret_errfd (its stderr) on success. */
static int spawn_mke2fs(const char *image, const char *skel, pid_t *ret_pid, int *ret_errfd)
{
	char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LC_ALL=C",
	                      NULL};
	char *argv[ELEMENTSOF(mke2fs_options) + 5];
	const char *path = mke2fs_path();
	_cleanup_close_ int errfd = -1;
	posix_spawn_file_actions_t fa;
	size_t k = 0;
	pid_t pid = -1;
	int r;

	argv[k++] = (char *)"mke2fs";
	for (size_t i = 0; i < ELEMENTSOF(mke2fs_options); i++)
		argv[k++] = (char *)mke2fs_options[i];
	argv[k++] = (char *)"-d";
	argv[k++] = (char *)skel;
	argv[k++] = (char *)image;
	argv[k] = NULL;

	errfd = memfd_create("mke2fs-stderr", MFD_CLOEXEC);
	if (errfd < 0)
		return -errno;
	r = posix_spawn_file_actions_init(&fa);
	if (r != 0)
		return -r;
	if ((r = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) != 0 ||
	    (r = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0)) != 0 ||
	    (r = posix_spawn_file_actions_adddup2(&fa, errfd, 2)) != 0) {
		(void)posix_spawn_file_actions_destroy(&fa);
		return -r;
	}
	if (path[0] == '/')
		r = -posix_spawn(&pid, path, &fa, NULL, argv, envp);
	else
		r = -posix_spawnp(&pid, path, &fa, NULL, argv, envp);
	(void)posix_spawn_file_actions_destroy(&fa);
	if (r < 0)
		return log_debug_errno(r, "cannot run mke2fs: %m");
	*ret_pid = pid;
	*ret_errfd = TAKE_FD(errfd);
	return 0;
}

/* Waits for mke2fs; returns 0, -ENOSPC, or -EIO (details logged). */
static int wait_mke2fs(const char *image, pid_t pid, int errfd)
{
	char err[MKE2FS_ERR_MAX + 1];
	ssize_t n;
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;

	n = pread(errfd, err, MKE2FS_ERR_MAX, 0);
	err[n > 0 ? n : 0] = '\0';
	log_debug("mke2fs %s failed (status 0x%x): %s", image, (unsigned)status, err);
	if (strstr(err, "No space left on device"))
		return -ENOSPC;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		return -ENOENT; /* posix_spawnp's child could not exec it */
	return -EIO;
}

/* ---- templates ---- */

/* FNV-1a (64 bits): a short name for a recipe, not a defence against anyone. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

static uint64_t fnv1a_str(uint64_t h, const char *s)
{
	return fnv1a(h, s, strlen(s) + 1); /* the NUL keeps "ab","c" apart from "a","bc" */
}

/* What mke2fs reads besides its arguments: a new binary or configuration makes new templates. */
static uint64_t fnv1a_file(uint64_t h, const char *path)
{
	struct stat sb;

	h = fnv1a_str(h, path);
	if (stat(path, &sb) < 0)
		return fnv1a_str(h, "-");
	h = fnv1a(h, &sb.st_ino, sizeof(sb.st_ino));
	h = fnv1a(h, &sb.st_size, sizeof(sb.st_size));
	h = fnv1a(h, &sb.st_mtim.tv_sec, sizeof(sb.st_mtim.tv_sec));
	return fnv1a(h, &sb.st_mtim.tv_nsec, sizeof(sb.st_mtim.tv_nsec));
}

/*
 * A digest of everything that decides what a new home holds: the skeleton, its owner, mke2fs's
 * options, the mke2fs binary and /etc/mke2fs.conf (by inode, size and mtime). It is part of a
 * template's name, so a change to any of them makes new templates; the sweep drops the old.
 */
static uint64_t home_recipe(void)
{
	char ids[64];
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	h = fnv1a_str(h, HOME_RECIPE_VERSION);
	(void)snprintf(ids, sizeof(ids), "%d:%d %o %o %o", HOME_UID, HOME_GID, 0755, 0644, 0700);
	h = fnv1a_str(h, ids);
	for (size_t i = 0; i < ELEMENTSOF(skel_files); i++) {
		h = fnv1a_str(h, skel_files[i].name);
		h = fnv1a_str(h, skel_files[i].text);
	}
	h = fnv1a_str(h, SKEL_SSH);
	for (size_t i = 0; i < ELEMENTSOF(mke2fs_options); i++)
		h = fnv1a_str(h, mke2fs_options[i]);
	h = fnv1a_file(h, mke2fs_path());
	return fnv1a_file(h, "/etc/mke2fs.conf");
}

static void template_name(uint64_t recipe, uint64_t size, char *ret, size_t len)
{
	(void)snprintf(ret, len, TEMPLATE_NAME_FMT, recipe, size);
}

/* Only where clones are reflinks: a template must cost nothing per home made from it. */
static bool templates_usable(const struct workspace_store *st)
{
	switch (storage_get_kind(st->storage)) {
	case STORAGE_BTRFS:
	case STORAGE_REFLINK:
	case STORAGE_POOL:
		return true;
	case STORAGE_QCOW2:
		break;
	}
	return false;
}

/* Opens <workspaces>/.home-templates, making it the first time. */
static int templates_open(const struct workspace_store *st, int *ret_fd)
{
	int r;

	if (mkdirat(st->dirfd, WS_HOME_TEMPLATES, 0700) == 0) {
		r = fs_fsync_dir(st->dirfd);
		if (r < 0)
			return r;
	} else if (errno != EEXIST) {
		return -errno;
	}
	return ws_open_subdir(st->dirfd, WS_HOME_TEMPLATES, ret_fd);
}

/*
 * Clones the template tpl (of size bytes) to dst_fd/dst. -ENOENT when there is no usable
 * template: none yet, or a file that is not one (removed, so that it is made again).
 */
static int template_clone(struct storage *s, int tpl_fd, const char *tpl, uint64_t size, int dst_fd,
                          const char *dst)
{
	_cleanup_close_ int fd = -1;
	uint8_t magic[2];
	struct stat sb;

	fd = openat(tpl_fd, tpl, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno != ELOOP)
		return -errno;
	if (fd >= 0 && fstat(fd, &sb) < 0)
		return -errno;
	if (fd < 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != size ||
	    pread(fd, magic, sizeof(magic), EXT4_MAGIC_OFFSET) != (ssize_t)sizeof(magic) ||
	    magic[0] != 0x53 || magic[1] != 0xef) {
		log_debug("home template %s is not one: making it again", tpl);
		(void)unlinkat(tpl_fd, tpl, 0);
		return -ENOENT;
	}
	return storage_clone_plain(s, tpl_fd, tpl, dst_fd, dst, 0600);
}

/* Wanted: a template of the current recipe for one of the sizes in keep. */
static bool template_wanted(const char *name, uint64_t recipe, const uint64_t *keep, size_t n_keep)
{
	char want[NAME_MAX + 1];

	for (size_t i = 0; i < n_keep; i++) {
		template_name(recipe, keep[i], want, sizeof(want));
		if (streq(name, want))
			return true;
	}
	return false;
}

int ws_home_templates_sweep(struct workspace_store *st, const uint64_t *keep, size_t n_keep)
{
	_cleanup_close_ int fd = -1;
	uint64_t recipe = home_recipe();
	char dflt[NAME_MAX + 1], **names = NULL;
	size_t n = 0;
	int r;

	r = ws_open_subdir(st->dirfd, WS_HOME_TEMPLATES, &fd);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	r = fs_list_names_at(fd, &names, &n);
	if (r < 0)
		return r;
	template_name(recipe, WORKSPACE_DEFAULT_HOME_SIZE, dflt, sizeof(dflt));
	/* Temporaries of a template being made, templates of an old recipe or of unused sizes. */
	for (size_t i = 0; i < n && r >= 0; i++)
		if (!streq(names[i], dflt) && !template_wanted(names[i], recipe, keep, n_keep)) {
			log_debug("home templates sweep: removing %s", names[i]);
			r = ws_remove_at(st, fd, names[i]);
		}
	fs_names_free(names, n);
	return r;
}

/* ---- making a home ---- */

static int job_work_fd(const struct ws_home_job *job)
{
	return job->work_fd >= 0 ? job->work_fd : job->dir_fd;
}

/* Makes work_fd/target a sparse file of job->size and starts mke2fs on it (path: its path). */
static int mke2fs_start(struct ws_home_job *job, const char *work_path)
{
	_cleanup_free_ char *image = NULL, *skel_path = NULL;
	_cleanup_close_ int fd = -1;
	int wfd = job_work_fd(job);
	char suffix[8];
	int r;

	r = ws_random_suffix(suffix, sizeof(suffix));
	if (r < 0)
		return r;
	(void)snprintf(job->skel, sizeof(job->skel), TMP_PREFIX "skel-%s", suffix);
	image = fs_path_join(work_path, job->target);
	skel_path = fs_path_join(work_path, job->skel);
	if (!image || !skel_path)
		return -ENOMEM;

	fd = openat(wfd, job->target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	job->made = true;
	/* Sparse: only what mke2fs writes takes space. */
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)job->size) < 0)
		return -errno;
	fd = safe_close(fd);

	r = skel_create(wfd, job->skel);
	if (r >= 0)
		r = spawn_mke2fs(image, skel_path, &job->pid, &job->errfd);
	if (r < 0)
		return r;
	job->image = TAKE_PTR(image);
	return 0;
}

/* Ends whatever the job holds except the home itself; a template's temporary file goes. */
static void job_release(struct ws_home_job *job)
{
	if (job->skel[0])
		skel_remove(job_work_fd(job), job->skel);
	job->skel[0] = '\0';
	if (job->tpl[0] && job->made)
		(void)unlinkat(job->work_fd, job->target, 0);
	job->made = false;
	job->errfd = safe_close(job->errfd);
	job->work_fd = safe_close(job->work_fd);
	free(job->image);
	job->image = NULL;
	job->pid = -1;
}

int ws_home_start(struct workspace_store *st, int dir_fd, const char *dir_path, const char *name,
                  uint64_t size, struct ws_home_job *job)
{
	_cleanup_free_ char *tpl_path = NULL;
	const char *work_path = dir_path;
	uint64_t recipe;
	char suffix[8];
	int r;

	if (size < (16u << 20) || size > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (strlen(name) >= sizeof(job->name))
		return -ENAMETOOLONG;
	*job = (struct ws_home_job){.dir_fd = dir_fd,
	                            .work_fd = -1,
	                            .storage = st->storage,
	                            .size = size,
	                            .pid = -1,
	                            .errfd = -1};
	(void)snprintf(job->name, sizeof(job->name), "%s", name);

	if (!templates_usable(st)) {
		(void)snprintf(job->target, sizeof(job->target), "%s", name);
	} else {
		r = templates_open(st, &job->work_fd);
		if (r < 0)
			return r;
		recipe = home_recipe();
		template_name(recipe, size, job->tpl, sizeof(job->tpl));
		r = template_clone(st->storage, job->work_fd, job->tpl, size, dir_fd, name);
		if (r != -ENOENT) {
			/* The common case: cloned, and ws_home_finish() only makes it durable. */
			job->work_fd = safe_close(job->work_fd);
			return r;
		}
		/* The first home of its size: mke2fs makes the template while the disk clones. */
		r = ws_random_suffix(suffix, sizeof(suffix));
		if (r < 0)
			goto fail;
		(void)snprintf(job->target, sizeof(job->target), TMP_PREFIX "%s-%s", suffix,
		               job->tpl);
		tpl_path = fs_path_join(storage_workspaces_path(st->storage), WS_HOME_TEMPLATES);
		if (!tpl_path) {
			r = -ENOMEM;
			goto fail;
		}
		work_path = tpl_path;
	}
	r = mke2fs_start(job, work_path);
	if (r < 0)
		goto fail;
	return 0;

fail:
	job_release(job);
	(void)unlinkat(dir_fd, name, 0);
	return r;
}

/*
 * Puts the template mke2fs made under its name, durable before any home is cloned from it (a
 * crash before the rename leaves a temporary the sweep removes, never a half template under
 * the name), and clones the home from it.
 */
static int template_install(struct ws_home_job *job)
{
	_cleanup_close_ int fd = -1;
	int r;

	fd = openat(job->work_fd, job->target, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		return -errno;
	fd = safe_close(fd);
	crash_point("home-template:after-mke2fs");
	if (renameat2(job->work_fd, job->target, job->work_fd, job->tpl, RENAME_NOREPLACE) == 0)
		job->made = false;
	else if (errno != EEXIST)
		return -errno;
	/* EEXIST: another create made it meanwhile, as good as ours (which job_release drops). */
	r = fs_fsync_dir(job->work_fd);
	if (r < 0)
		return r;
	crash_point("home-template:after-rename");
	return template_clone(job->storage, job->work_fd, job->tpl, job->size, job->dir_fd,
	                      job->name);
}

int ws_home_finish(struct ws_home_job *job)
{
	_cleanup_close_ int fd = -1;
	int r = 0;

	if (job->pid > 0) {
		r = wait_mke2fs(job->image, job->pid, job->errfd);
		job->pid = -1;
		if (r >= 0 && job->tpl[0])
			r = template_install(job);
	}
	job_release(job);
	if (r < 0)
		goto fail;
	fd = openat(job->dir_fd, job->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto fail;
	}
	if (fsync(fd) < 0) {
		r = -errno;
		goto fail;
	}
	return 0;

fail:
	(void)unlinkat(job->dir_fd, job->name, 0);
	return r;
}

void ws_home_abort(struct ws_home_job *job)
{
	int status;

	if (job->pid > 0) {
		(void)kill(job->pid, SIGKILL);
		while (waitpid(job->pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	job_release(job);
	(void)unlinkat(job->dir_fd, job->name, 0);
}

int ws_home_create(struct workspace_store *st, int dir_fd, const char *dir_path, const char *name,
                   uint64_t size)
{
	struct ws_home_job job;
	int r;

	r = ws_home_start(st, dir_fd, dir_path, name, size, &job);
	if (r < 0)
		return r;
	return ws_home_finish(&job);
}

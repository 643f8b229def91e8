/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * home.img: a sparse ext4 made by mke2fs from a skeleton home. Its root directory is the home of
 * the guest user (uid/gid 1000). It is always made from nothing, never derived from another
 * workspace: a 64 GiB home takes a few MiB on the host until the guest writes to it.
 */

#include <fcntl.h>
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
#include "workspace/internal.h"

#define HOME_UID 1000
#define HOME_GID 1000
#define HOME_LABEL "slate-home"
/* How much of mke2fs's stderr is kept to tell ENOSPC from other failures. */
#define MKE2FS_ERR_MAX 4096

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

/* Starts mke2fs on image with the skeleton; *ret_pid and *ret_errfd (its stderr) on success. */
static int spawn_mke2fs(const char *image, const char *skel, pid_t *ret_pid, int *ret_errfd)
{
	static const char *const candidates[] = {"/usr/sbin/mke2fs", "/sbin/mke2fs", "mke2fs"};
	char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LC_ALL=C",
	                      NULL};
	char *const argv[] = {(char *)"mke2fs",
	                      (char *)"-q",
	                      (char *)"-t",
	                      (char *)"ext4",
	                      (char *)"-F",
	                      (char *)"-m",
	                      (char *)"0",
	                      (char *)"-L",
	                      (char *)HOME_LABEL,
	                      (char *)"-E",
	                      (char *)"root_owner=" STRINGIFY(HOME_UID) ":" STRINGIFY(
	                              HOME_GID) ",lazy_itable_init=1,lazy_journal_init=1",
	                      (char *)"-d",
	                      (char *)skel,
	                      (char *)image,
	                      NULL};
	_cleanup_close_ int errfd = -1;
	posix_spawn_file_actions_t fa;
	pid_t pid = -1;
	int r = -ENOENT;

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
	for (size_t i = 0; i < ELEMENTSOF(candidates); i++) {
		if (candidates[i][0] == '/') {
			if (access(candidates[i], X_OK) < 0)
				continue;
			r = posix_spawn(&pid, candidates[i], &fa, NULL, argv, envp);
		} else {
			r = posix_spawnp(&pid, candidates[i], &fa, NULL, argv, envp);
		}
		r = -r;
		break;
	}
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

int ws_home_start(int dir_fd, const char *dir_path, const char *name, uint64_t size,
                  struct ws_home_job *job)
{
	_cleanup_free_ char *image = NULL, *skel_path = NULL;
	_cleanup_close_ int fd = -1;
	char suffix[8], skel[32];
	pid_t pid = -1;
	int errfd = -1, r;

	if (size < (16u << 20) || size > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (strlen(name) >= sizeof(job->name))
		return -ENAMETOOLONG;
	r = ws_random_suffix(suffix, sizeof(suffix));
	if (r < 0)
		return r;
	(void)snprintf(skel, sizeof(skel), ".tmp-skel-%s", suffix);
	image = fs_path_join(dir_path, name);
	skel_path = fs_path_join(dir_path, skel);
	if (!image || !skel_path)
		return -ENOMEM;

	fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* Sparse: only what mke2fs writes takes space. */
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)size) < 0) {
		r = -errno;
		goto fail;
	}
	fd = safe_close(fd);

	r = skel_create(dir_fd, skel);
	if (r >= 0)
		r = spawn_mke2fs(image, skel_path, &pid, &errfd);
	if (r < 0) {
		skel_remove(dir_fd, skel);
		goto fail;
	}
	job->dir_fd = dir_fd;
	(void)snprintf(job->name, sizeof(job->name), "%s", name);
	memcpy(job->skel, skel, sizeof(skel));
	job->image = TAKE_PTR(image);
	job->pid = pid;
	job->errfd = errfd;
	return 0;

fail:
	(void)unlinkat(dir_fd, name, 0);
	return r;
}

static void job_release(struct ws_home_job *job)
{
	skel_remove(job->dir_fd, job->skel);
	job->errfd = safe_close(job->errfd);
	free(job->image);
	job->image = NULL;
	job->pid = -1;
}

int ws_home_finish(struct ws_home_job *job)
{
	_cleanup_close_ int fd = -1;
	int r;

	r = wait_mke2fs(job->image, job->pid, job->errfd);
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

int ws_home_create(int dir_fd, const char *dir_path, const char *name, uint64_t size)
{
	struct ws_home_job job;
	int r;

	r = ws_home_start(dir_fd, dir_path, name, size, &job);
	if (r < 0)
		return r;
	return ws_home_finish(&job);
}

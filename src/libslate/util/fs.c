/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/error.h"
#include "util/fs.h"

int fs_open_dir_at(int dirfd, const char *path, int *ret_fd)
{
	int fd;

	if (!path || !*path)
		return -EINVAL;
	fd = openat(dirfd, path, O_DIRECTORY | O_CLOEXEC | O_PATH);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

int fs_mkdir_p(const char *path, mode_t mode)
{
	_cleanup_free_ char *p = NULL;
	size_t len;

	if (!path || !*path)
		return -EINVAL;
	p = strdup(path);
	if (!p)
		return -ENOMEM;
	len = strlen(p);

	/* Walk the prefixes; skipping the first byte keeps "/" itself out of it. */
	for (size_t i = 1; i <= len; i++) {
		struct stat st;

		if (p[i] != '/' && p[i] != '\0')
			continue;
		if (p[i - 1] == '/')
			continue; /* "a//b" or a trailing slash: this prefix was just handled */
		p[i] = '\0';
		if (mkdir(p, mode) < 0) {
			int r = -errno;
			/*
			 * An existing directory (or a link to one) is fine. Ask stat() rather than
			 * trusting EEXIST: on a read-only mount or without write access to the
			 * parent, mkdir() of an existing directory fails with EROFS or EACCES.
			 */
			if (stat(p, &st) < 0)
				return r;
			if (!S_ISDIR(st.st_mode))
				return -ENOTDIR;
		}
		if (i < len)
			p[i] = '/';
	}
	return 0;
}

int fs_fsync_dir(int dirfd)
{
	_cleanup_close_ int fd = -1;

	if (fsync(dirfd) == 0)
		return 0;
	if (errno != EBADF)
		return -errno;
	/* An O_PATH fd (what fs_open_dir_at() returns) or AT_FDCWD cannot be fsynced directly. */
	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return RET_NERRNO(fsync(fd));
}

int fs_write_all(int fd, const void *p, size_t n)
{
	const uint8_t *q = p;

	while (n > 0) {
		ssize_t k = write(fd, q, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -EIO;
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

int fs_relay(int a, int b)
{
	int fds[2] = {a, b};
	bool open_in[2] = {true, true};
	uint8_t buf[65536];

	while (open_in[0] || open_in[1]) {
		struct pollfd p[2];
		nfds_t n = 0;
		int idx[2];

		for (int i = 0; i < 2; i++)
			if (open_in[i]) {
				p[n] = (struct pollfd){.fd = fds[i], .events = POLLIN};
				idx[n++] = i;
			}
		if (poll(p, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (nfds_t k = 0; k < n; k++) {
			int i = idx[k];
			ssize_t got;

			if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			got = read(fds[i], buf, sizeof(buf));
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got < 0 && errno != ECONNRESET)
				return -errno;
			if (got <= 0) {
				open_in[i] = false;
				(void)shutdown(fds[1 - i], SHUT_WR);
				continue;
			}
			if (fs_write_all(fds[1 - i], buf, (size_t)got) < 0)
				return -EPIPE;
		}
	}
	return 0;
}

int fs_set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	fl = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
	return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

/*
 * Splits name into the directory that holds it (opened relative to dirfd, returned in
 * *ret_parent, or -1 when that is dirfd itself) and its last component.
 */
static int open_parent(int dirfd, const char *name, int *ret_parent, const char **ret_base)
{
	_cleanup_free_ char *dir = NULL;
	const char *slash = strrchr(name, '/');
	int fd;

	if (!slash) {
		*ret_parent = -1;
		*ret_base = name;
		return 0;
	}
	if (slash[1] == '\0')
		return -EISDIR;
	dir = slash == name ? strdup("/") : strndup(name, (size_t)(slash - name));
	if (!dir)
		return -ENOMEM;
	fd = openat(dirfd, dir, O_DIRECTORY | O_CLOEXEC | O_PATH);
	if (fd < 0)
		return -errno;
	*ret_parent = fd;
	*ret_base = slash + 1;
	return 0;
}

/* A temporary name next to base: ".#base.XXXXXXXX", short enough for NAME_MAX. */
static int make_temp_name(const char *base, char *ret, size_t size)
{
	static const char alphabet[] =
	        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	uint8_t rnd[8];
	char suffix[sizeof(rnd) + 1];

	/* Only here to make the name unpredictable, so a short read is not worth failing on. */
	if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		randombytes_buf(rnd, sizeof(rnd));
	for (size_t i = 0; i < sizeof(rnd); i++)
		suffix[i] = alphabet[rnd[i] % (sizeof(alphabet) - 1)];
	suffix[sizeof(rnd)] = '\0';
	if (snprintf(ret, size, ".#%.200s.%s", base, suffix) >= (int)size)
		return -ENAMETOOLONG;
	return 0;
}

/* Gives the anonymous O_TMPFILE fd a temporary name in dirfd. */
static int link_tmpfile(int fd, int dirfd, const char *base, char *ret_tmp, size_t size)
{
	char proc[sizeof("/proc/self/fd/") + 3 * sizeof(int)];

	(void)snprintf(proc, sizeof(proc), "/proc/self/fd/%i", fd);
	for (int attempt = 0; attempt < 16; attempt++) {
		int r = make_temp_name(base, ret_tmp, size);
		if (r < 0)
			return r;
		/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link works for everyone. */
		if (linkat(AT_FDCWD, proc, dirfd, ret_tmp, AT_SYMLINK_FOLLOW) == 0)
			return 0;
		if (errno == ENOENT && linkat(fd, "", dirfd, ret_tmp, AT_EMPTY_PATH) == 0)
			return 0;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

static int create_named_temp(int dirfd, const char *base, mode_t mode, char *ret_tmp, size_t size,
                             int *ret_fd)
{
	for (int attempt = 0; attempt < 16; attempt++) {
		int fd, r;

		r = make_temp_name(base, ret_tmp, size);
		if (r < 0)
			return r;
		fd = openat(dirfd, ret_tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		            mode);
		if (fd >= 0) {
			*ret_fd = fd;
			return 0;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* Fills fd with data and makes it durable with the exact mode asked for. */
static int fill_temp(int fd, const void *data, size_t len, mode_t mode)
{
	int r;

	/* The umask must not decide who may read a state file. */
	if (fchmod(fd, mode) < 0)
		return -errno;
	r = fs_write_all(fd, data, len);
	if (r < 0)
		return r;
	return RET_NERRNO(fsync(fd));
}

int fs_write_atomic_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode)
{
	_cleanup_close_ int parent = -1, fd = -1;
	char tmp[NAME_MAX + 1];
	const char *base = NULL;
	bool named = false; /* tmp names a file that is ours to remove */
	int dfd, r;

	if (!name || !*name || (!data && len > 0))
		return -EINVAL;
	r = open_parent(dirfd, name, &parent, &base);
	if (r < 0)
		return r;
	dfd = parent >= 0 ? parent : dirfd;

	fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
	if (fd >= 0) {
		r = fill_temp(fd, data, len, mode);
		if (r < 0)
			return r; /* closing the fd discards the anonymous file */
		r = link_tmpfile(fd, dfd, base, tmp, sizeof(tmp));
		if (r == 0)
			named = true;
		else if (r == -ENOENT)
			fd = safe_close(fd); /* no /proc and no privilege: write it under a name */
		else
			return r;
	} else if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT) {
		/* Filesystems without O_TMPFILE say so in several ways; anything else is real. */
		return -errno;
	}
	if (!named) {
		r = create_named_temp(dfd, base, mode, tmp, sizeof(tmp), &fd);
		if (r < 0)
			return r;
		named = true;
		r = fill_temp(fd, data, len, mode);
		if (r < 0)
			goto fail;
	}

	if (renameat(dfd, tmp, dfd, base) < 0) {
		r = -errno;
		goto fail;
	}
	/* The rename is only durable once the directory is. */
	return fs_fsync_dir(dfd);

fail:
	(void)unlinkat(dfd, tmp, 0);
	return r;
}

int fs_read_file_at(int dirfd, const char *name, size_t max, struct buf **ret)
{
	_cleanup_close_ int fd = -1;
	_cleanup_buf_secure_ struct buf *b = NULL;
	uint8_t chunk[8192];
	struct stat st;
	int r = 0;

	if (!name || !*name)
		return -EINVAL;
	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -EBADFD;
	if ((uintmax_t)st.st_size > max)
		return -EFBIG;

	b = buf_new(max);
	if (!b)
		return -ENOMEM;
	/* Read to EOF rather than trusting st_size: the file may change while we read. */
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		r = buf_put(b, chunk, (size_t)n);
		if (r == SLATE_ERR_NO_BUFFER_SPACE)
			r = -EFBIG;
		if (r < 0)
			break;
	}
	/* The file may have been a secret; the stack copy must not outlive this call. */
	sodium_memzero(chunk, sizeof(chunk));
	if (r < 0)
		return r;
	*ret = TAKE_PTR(b);
	return 0;
}

int fs_lock_at(int dirfd, const char *name, int *ret_fd)
{
	_cleanup_close_ int fd = -1;

	if (!name || !*name)
		return -EINVAL;
	/* Read-only is enough for flock(), and lets the lock live on a directory too. */
	fd = openat(dirfd, name, O_RDONLY | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EISDIR)
		fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int fs_is_dir(const char *path)
{
	struct stat st;

	if (!path || !*path)
		return -EINVAL;
	if (stat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	return S_ISDIR(st.st_mode) ? 1 : -ENOTDIR;
}

char *fs_path_join(const char *a, const char *b)
{
	size_t la, lb;
	char *s;

	if (!a || !b) {
		errno = EINVAL;
		return NULL;
	}
	la = strlen(a);
	while (la > 0 && a[la - 1] == '/')
		la--;
	while (*b == '/')
		b++;
	lb = strlen(b);
	if (la > SIZE_MAX - lb - 2) {
		errno = ENOMEM;
		return NULL;
	}
	s = malloc(la + lb + 2);
	if (!s)
		return NULL;
	memcpy(s, a, la);
	s[la] = '/';
	memcpy(s + la + 1, b, lb);
	s[la + 1 + lb] = '\0';
	return s;
}

int fs_make_traversable(const char *top, const char *dir)
{
	_cleanup_free_ char *p = strdup(dir);
	size_t top_len = strlen(top);
	struct stat st;
	char *slash;

	if (!p)
		return -ENOMEM;
	if (strncmp(p, top, top_len) != 0 || (p[top_len] != '/' && p[top_len] != '\0'))
		return -EINVAL;
	for (;;) {
		if (stat(p, &st) < 0)
			return -errno;
		if (S_ISDIR(st.st_mode) && (st.st_mode & 0011) != 0011 &&
		    chmod(p, (st.st_mode & 07777) | 0011) < 0)
			return -errno;
		if (strlen(p) <= top_len)
			return 0;
		slash = strrchr(p, '/');
		if (!slash || slash == p)
			return 0;
		*slash = '\0';
	}
}

int fs_list_names_at(int dirfd, char ***ret, size_t *ret_n)
{
	_cleanup_close_ int fd = -1;
	DIR *d;
	struct dirent *de;
	char **names = NULL;
	size_t n = 0;
	int r = 0;

	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d)
		return -errno;
	fd = -1;
	for (;;) {
		char **nn;

		errno = 0;
		de = readdir(d);
		if (!de) {
			r = -errno;
			break;
		}
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		nn = reallocarray(names, n + 1, sizeof(*names));
		if (!nn) {
			r = -ENOMEM;
			break;
		}
		names = nn;
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	(void)closedir(d);
	if (r < 0) {
		for (size_t i = 0; i < n; i++)
			free(names[i]);
		free(names);
		return r;
	}
	*ret = names;
	*ret_n = n;
	return 0;
}

void fs_names_free(char **names, size_t n)
{
	if (!names)
		return;
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

void fs_close_fds_except(const int *keep, size_t n, int max_fd)
{
	int k[8], nk = 0, from = 3;

	/* The fds to keep, from 3 up, sorted (insertion: a handful at most). */
	for (size_t i = 0; i < n && nk < (int)ELEMENTSOF(k); i++) {
		int j = nk++;
		if (keep[i] < 3) {
			nk--;
			continue;
		}
		while (j > 0 && k[j - 1] > keep[i]) {
			k[j] = k[j - 1];
			j--;
		}
		k[j] = keep[i];
	}
#ifdef SYS_close_range
	{
		bool ok = true;
		/* The gaps between them, then everything above the last. */
		for (int i = 0; i < nk && ok; from = k[i++] + 1)
			if (k[i] > from)
				ok = syscall(SYS_close_range, (unsigned)from, (unsigned)k[i] - 1,
				             0u) == 0;
		if (ok && syscall(SYS_close_range, (unsigned)from, ~0u, 0u) == 0)
			return;
	}
#endif
	for (int fd = 3; fd < max_fd; fd++) {
		bool kept = false;
		for (int i = 0; i < nk; i++)
			kept = kept || k[i] == fd;
		if (!kept)
			(void)close(fd);
	}
}

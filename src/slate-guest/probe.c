/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate-guest --probe: the guest half of `slate probe` (doc/residue.md, "The guest side of the
 * protocol"). The host runs it as root through an exec session and speaks lines on stdin/stdout.
 *
 * It freezes every file system mounted from the devices the host names, lists their free space
 * from the kernel (FS_IOC_GETFSMAP), and then, for each region the host asks about, reads it,
 * compares it with zeros or with the host's SHA-256 digests, and/or writes a 4 KiB pattern at its
 * start and looks at what the rest of the 64 KiB reads as, and puts back what the region held.
 *
 * Nothing the host says is trusted: a region is touched only when it lies entirely inside the free
 * space this process listed itself while the file systems were frozen. A watchdog process in its
 * own session thaws them when this process ends (however it ends) or after WATCHDOG_S; regions
 * the host asks about once the time is nearly up, or once the watchdog is gone, are refused. While
 * the file systems are frozen this process writes nowhere but to the devices' free space, /proc
 * and stdout (a pipe).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/fsmap.h>
#include <linux/if_alg.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest.h"

#ifndef AF_ALG
#define AF_ALG 38
#endif

#define PROBE_LINE_MAX 2048 /* bytes, the newline included */
#define PROBE_MAX_DEVICES 8
#define PROBE_MAX_FS 64 /* file systems over all devices */
#define PROBE_MAX_PARTS 128
#define PROBE_NAME_MAX 16
#define PROBE_MARKER_MAX 64
#define REGION_SIZE 65536u
#define PROBE_BLOCK 4096u
#define BLOCKS (REGION_SIZE / PROBE_BLOCK)
#define DIGEST_LEN 32
#define SAMPLE_MAX 32
/* The watchdog thaws after this long; regions are refused REGION_MARGIN_S before. */
#define WATCHDOG_S 120
#define REGION_MARGIN_S 15

struct extent {
	uint64_t start, len;
};

struct pdev {
	char name[PROBE_NAME_MAX + 1];
	uint64_t size;
	bool ok;             /* sizes agree and the scan went through */
	int fd;              /* the device, O_RDWR | O_DIRECT, opened at the first region */
	dev_t rdev;          /* the whole device */
	struct extent *free; /* sorted, merged, device offsets */
	size_t n_free, cap_free;
	uint64_t written, compared;
	int64_t ms;
	bool dropped; /* the system's caches were dropped once for it */
};

struct pfs {
	struct pdev *dev;
	dev_t rdev;          /* the block device the file system is mounted from */
	uint64_t part_start; /* bytes, within dev */
	uint64_t part_len;
	char mnt[PATH_MAX];
	char type[64];
	int fd;      /* on the mount point, checked to be on rdev */
	bool frozen; /* by us */
};

static struct pdev devs[PROBE_MAX_DEVICES];
static size_t n_devs;
static struct pfs fss[PROBE_MAX_FS];
static size_t n_fss;
static uint8_t marker[PROBE_MARKER_MAX];
static size_t marker_len;

static int wd_pipe = -1; /* write end: one byte per file system about to be frozen */
static pid_t wd_pid = -1;
static int64_t freeze_deadline; /* now_ms() after which no region is touched */

static int hash_fd = -1; /* the accepted AF_ALG sha256 operation socket */
static int hash_err;     /* why there is none (-errno), 0 before the first try */

/* ---- output ---- */

static bool out_failed;

__attribute__((format(printf, 1, 2))) static void out(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vprintf(fmt, ap) < 0)
		out_failed = true;
	va_end(ap);
	putchar('\n');
}

static void out_flush(void)
{
	if (fflush(stdout) == EOF)
		out_failed = true;
}

/* ---- freezing ---- */

/* Thaws what we froze. Async-signal-safe: also the signal handler's way out. */
static void thaw_all(void)
{
	for (size_t i = 0; i < n_fss; i++) {
		if (fss[i].frozen && fss[i].fd >= 0)
			(void)ioctl(fss[i].fd, FITHAW, 0);
		fss[i].frozen = false;
	}
}

static void on_signal(int sig)
{
	(void)sig;
	thaw_all();
	_exit(1);
}

/* The watchdog: reads the indexes of the file systems the parent is about to freeze (0x80 set:
 * it did not), and thaws them at end of file (the parent is done or dead) or after WATCHDOG_S. It
 * keeps the mount point fds it inherited: its own references to the same file systems. */
static void watchdog(int rfd)
{
	bool marked[PROBE_MAX_FS] = {0};
	int64_t end = now_ms() + WATCHDOG_S * 1000;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	/* Out of the exec session's process group, and off its pipes so the session can end. */
	(void)setsid();
	if (null >= 0) {
		(void)dup2(null, 0);
		(void)dup2(null, 1);
		(void)dup2(null, 2);
	}
	(void)signal(SIGHUP, SIG_IGN);
	(void)signal(SIGINT, SIG_IGN);
	(void)signal(SIGTERM, SIG_IGN);
	(void)signal(SIGPIPE, SIG_IGN);
	for (;;) {
		int64_t now = now_ms();
		if (now >= end)
			break;
		struct pollfd p = {.fd = rfd, .events = POLLIN};
		int n = poll(&p, 1, (int)(end - now));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		uint8_t b[64];
		ssize_t r = read(rfd, b, sizeof(b));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++) {
			if ((b[i] & 0x7f) < PROBE_MAX_FS)
				marked[b[i] & 0x7f] = !(b[i] & 0x80);
		}
	}
	for (size_t i = 0; i < n_fss; i++) {
		/* EINVAL: not frozen (any more): fine. */
		if (marked[i] && fss[i].fd >= 0)
			(void)ioctl(fss[i].fd, FITHAW, 0);
	}
	_exit(0);
}

static int watchdog_start(void)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int r = -errno;
		(void)close(p[0]);
		(void)close(p[1]);
		return r;
	}
	if (pid == 0) {
		(void)close(p[1]);
		watchdog(p[0]);
	}
	(void)close(p[0]);
	wd_pipe = p[1];
	wd_pid = pid;
	freeze_deadline = now_ms() + (WATCHDOG_S - REGION_MARGIN_S) * 1000;
	return 0;
}

static void watchdog_tell(uint8_t b)
{
	while (write(wd_pipe, &b, 1) < 0 && errno == EINTR)
		;
}

/* Whether the watchdog still holds the file systems frozen for us. */
static bool watchdog_alive(void)
{
	int st;

	if (wd_pid <= 0)
		return false;
	return waitpid(wd_pid, &st, WNOHANG) == 0;
}

static void watchdog_stop(void)
{
	if (wd_pipe >= 0)
		(void)close(wd_pipe);
	wd_pipe = -1;
	if (wd_pid > 0) {
		while (waitpid(wd_pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	wd_pid = -1;
}

/* Thaws, lets the watchdog go, exits with status. */
static int finish(int status)
{
	thaw_all();
	watchdog_stop();
	out_flush();
	if (hash_fd >= 0)
		(void)close(hash_fd);
	return status;
}

/* ---- input ---- */

/* Reads one line into line (without its newline). 1, 0 at end of input, -1 when over-long or
 * unterminated. */
static int read_line(char *line, size_t size)
{
	if (!fgets(line, (int)size, stdin))
		return 0;
	size_t n = strlen(line);
	if (n == 0 || n > PROBE_LINE_MAX || line[n - 1] != '\n')
		return -1;
	line[n - 1] = '\0';
	return 1;
}

/* Splits line at single spaces into at most max tokens. The count, or -1 when a token is empty,
 * there are more than max, or a byte is not printable ASCII. */
static int split(char *line, char **tok, int max)
{
	int n = 0;
	char *p = line;

	for (const char *q = line; *q; q++) {
		if (*q < 0x20 || *q > 0x7e)
			return -1;
	}
	for (;;) {
		char *sp = strchr(p, ' ');
		if (n == max || (sp ? sp == p : *p == '\0'))
			return -1;
		tok[n++] = p;
		if (!sp)
			return n;
		*sp = '\0';
		p = sp + 1;
	}
}

static bool valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > PROBE_NAME_MAX)
		return false;
	for (; *s; s++) {
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
			return false;
	}
	return true;
}

static struct pdev *find_dev(const char *name)
{
	for (size_t i = 0; i < n_devs; i++) {
		if (strcmp(devs[i].name, name) == 0)
			return &devs[i];
	}
	return NULL;
}

/* ---- sysfs and mountinfo ---- */

/* Reads a small sysfs file into buf (newline stripped). */
static int read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, size - 1);
	int r = n < 0 ? -errno : 0;
	(void)close(fd);
	if (r < 0)
		return r;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

static bool sys_has(const char *dir, const char *file)
{
	char path[PATH_MAX];

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
		return false;
	return access(path, F_OK) == 0;
}

static int sys_u64(const char *dir, const char *file, uint64_t *ret)
{
	char path[PATH_MAX], buf[64];

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
		return -ENAMETOOLONG;
	int r = read_small(path, buf, sizeof(buf));
	if (r < 0)
		return r;
	return parse_dec(buf, UINT64_MAX, ret) ? 0 : -EINVAL;
}

static int sys_dev(const char *dir, dev_t *ret)
{
	char path[PATH_MAX], buf[64];
	unsigned ma, mi;
	int n = 0;

	if ((size_t)snprintf(path, sizeof(path), "%s/dev", dir) >= sizeof(path))
		return -ENAMETOOLONG;
	int r = read_small(path, buf, sizeof(buf));
	if (r < 0)
		return r;
	if (sscanf(buf, "%u:%u%n", &ma, &mi, &n) != 2 || buf[n])
		return -EINVAL;
	*ret = makedev(ma, mi);
	return 0;
}

/* Whether sysfs directory dir/holders has entries (a device mapper or md device on top). */
static bool has_holders(const char *dir)
{
	char path[PATH_MAX];
	bool any = false;

	if ((size_t)snprintf(path, sizeof(path), "%s/holders", dir) >= sizeof(path))
		return false;
	DIR *d = opendir(path);
	if (!d)
		return false;
	for (struct dirent *e; (e = readdir(d));)
		any |= e->d_name[0] != '.';
	(void)closedir(d);
	return any;
}

/* Undoes mountinfo's octal escapes (\040) in place. */
static void unescape(char *s)
{
	char *w = s;

	for (char *r = s; *r;) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') << 6 | (r[2] - '0') << 3 | (r[3] - '0'));
			r += 4;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
}

/* What goes on an fs line: printable ASCII without spaces or backslashes as is, every other byte
 * as \ooo; "-" when that does not fit. */
static void escape_word(const char *s, char *outp, size_t size)
{
	size_t n = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (n + 5 > size) {
			snprintf(outp, size, "-");
			return;
		}
		if (c > 0x20 && c < 0x7f && c != '\\')
			outp[n++] = (char)c;
		else
			n += (size_t)sprintf(outp + n, "\\%03o", c);
	}
	if (n == 0)
		outp[n++] = '-';
	outp[n] = '\0';
}

/* Finds a mount of rdev in mountinfo (text), opens it and checks it is on rdev. The fd, or -errno
 * (-ENOENT: not mounted). */
static int open_mount(const char *mountinfo, dev_t rdev, char *mnt, size_t mnt_size, char *type,
                      size_t type_size)
{
	const char *line = mountinfo;
	int r = -ENOENT;

	while (line && *line) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char buf[3 * PATH_MAX], *f[5] = {0}, *p = buf, *sep = NULL;
		unsigned ma, mi;
		int nf = 0;

		if (len < sizeof(buf)) {
			memcpy(buf, line, len);
			buf[len] = '\0';
			/* id parent major:minor root mountpoint options [optional...] - type source */
			while (nf < 5 && p) {
				f[nf++] = p;
				p = strchr(p, ' ');
				if (p)
					*p++ = '\0';
			}
			if (p)
				sep = strstr(p, " - ");
			if (nf == 5 && sep && sscanf(f[2], "%u:%u", &ma, &mi) == 2 &&
			    makedev(ma, mi) == rdev) {
				char *ty = sep + 3, *end = strchr(ty, ' ');
				if (end)
					*end = '\0';
				unescape(f[4]);
				int fd = open(f[4], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
				struct stat st;
				if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == rdev) {
					snprintf(mnt, mnt_size, "%s", f[4]);
					escape_word(ty, type, type_size);
					return fd;
				}
				if (fd >= 0)
					(void)close(fd);
				r = -EBUSY; /* mounted, but over-mounted where we looked */
			}
		}
		line = nl ? nl + 1 : NULL;
	}
	return r;
}

static char *read_mountinfo(void)
{
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	size_t cap = 1 << 16, len = 0;
	char *p = malloc(cap);

	if (fd < 0 || !p) {
		if (fd >= 0)
			(void)close(fd);
		free(p);
		return NULL;
	}
	for (;;) {
		if (len + 1 >= cap) {
			if (cap >= (64u << 20))
				break;
			char *q = realloc(p, cap * 2);
			if (!q)
				break;
			p = q;
			cap *= 2;
		}
		ssize_t n = read(fd, p + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	(void)close(fd);
	p[len] = '\0';
	return p;
}

struct part {
	dev_t rdev;
	uint64_t start, len; /* bytes */
	bool whole;
};

/* Scans one device: its size, its partitions, the file systems mounted from them. Prints the
 * device line and the fs lines, or an error line. Adds the file systems to fss. */
static void scan_dev(struct pdev *d, const char *mountinfo)
{
	char dir[PATH_MAX], msg[PATH_MAX + 64];
	struct part parts[PROBE_MAX_PARTS];
	size_t n_parts = 0, first_fs = n_fss;
	uint64_t sectors;
	int r;

	snprintf(dir, sizeof(dir), "/sys/class/block/%s", d->name);
	if (access(dir, F_OK) < 0) {
		out("error %s no such block device", d->name);
		return;
	}
	if (sys_has(dir, "partition")) {
		out("error %s is a partition, not a whole device", d->name);
		return;
	}
	if ((r = sys_u64(dir, "size", &sectors)) < 0 || (r = sys_dev(dir, &d->rdev)) < 0) {
		out("error %s cannot read its size from sysfs: %s", d->name, strerror(-r));
		return;
	}
	if (sectors > UINT64_MAX / 512 || sectors * 512 != d->size) {
		out("error %s size %llu in the guest, %llu on the host", d->name,
		    (unsigned long long)(sectors > UINT64_MAX / 512 ? 0 : sectors * 512),
		    (unsigned long long)d->size);
		return;
	}
	if (has_holders(dir)) {
		out("error %s is in use by a device mapper or md device", d->name);
		return;
	}
	parts[n_parts++] =
	        (struct part){.rdev = d->rdev, .start = 0, .len = d->size, .whole = true};
	DIR *dd = opendir(dir);
	if (!dd) {
		out("error %s cannot list its partitions: %s", d->name, strerror(errno));
		return;
	}
	bool bad = false;
	for (struct dirent *e; (e = readdir(dd));) {
		char sub[PATH_MAX];
		uint64_t st, sz;
		struct part p = {0};
		if (e->d_name[0] == '.' || strncmp(e->d_name, d->name, strlen(d->name)) != 0)
			continue;
		if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name) >= sizeof(sub))
			continue;
		if (!sys_has(sub, "partition"))
			continue;
		if (n_parts == PROBE_MAX_PARTS || sys_u64(sub, "start", &st) < 0 ||
		    sys_u64(sub, "size", &sz) < 0 || sys_dev(sub, &p.rdev) < 0 ||
		    st > d->size / 512 || sz > d->size / 512 - st || has_holders(sub)) {
			bad = true;
			break;
		}
		p.start = st * 512;
		p.len = sz * 512;
		parts[n_parts++] = p;
	}
	(void)closedir(dd);
	if (bad) {
		out("error %s has a partition this probe cannot account for", d->name);
		return;
	}
	/* Partitions must not overlap, or one's free space could be another's data. */
	for (size_t i = 1; i < n_parts; i++) {
		for (size_t j = i + 1; j < n_parts; j++) {
			if (parts[i].start < parts[j].start + parts[j].len &&
			    parts[j].start < parts[i].start + parts[i].len) {
				out("error %s has overlapping partitions", d->name);
				return;
			}
		}
	}

	/* The mounted ones. A file system straight on a partitioned device is refused below. */
	for (size_t i = 0; i < n_parts; i++) {
		char mnt[PATH_MAX], type[64];
		int fd = open_mount(mountinfo, parts[i].rdev, mnt, sizeof(mnt), type, sizeof(type));
		if (fd == -ENOENT)
			continue;
		if (fd < 0 || n_fss == PROBE_MAX_FS || (parts[i].whole && n_parts > 1)) {
			if (fd >= 0)
				(void)close(fd);
			out("error %s has a mounted file system this probe cannot account for",
			    d->name);
			for (size_t k = first_fs; k < n_fss; k++)
				(void)close(fss[k].fd);
			n_fss = first_fs;
			return;
		}
		struct pfs *f = &fss[n_fss++];
		f->dev = d;
		f->rdev = parts[i].rdev;
		f->part_start = parts[i].start;
		f->part_len = parts[i].len;
		f->fd = fd;
		f->frozen = false;
		snprintf(f->mnt, sizeof(f->mnt), "%s", mnt);
		snprintf(f->type, sizeof(f->type), "%s", type);
	}
	out("device %s %llu %zu", d->name, (unsigned long long)d->size, n_fss - first_fs);
	for (size_t k = first_fs; k < n_fss; k++) {
		escape_word(fss[k].mnt, msg, 1024);
		out("fs %s %llu %llu %s %s", d->name, (unsigned long long)fss[k].part_start,
		    (unsigned long long)fss[k].part_len, fss[k].type, msg);
	}
	d->ok = true;
}

/* ---- free space ---- */

static int add_free(struct pdev *d, uint64_t start, uint64_t len)
{
	if (d->n_free == d->cap_free) {
		size_t cap = d->cap_free ? d->cap_free * 2 : 256;
		struct extent *e = realloc(d->free, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		d->free = e;
		d->cap_free = cap;
	}
	d->free[d->n_free++] = (struct extent){start, len};
	return 0;
}

static int cmp_extent(const void *a, const void *b)
{
	const struct extent *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* Adds f's free space (FMR_OWN_FREE records on its own block device) to its device's list. */
static int map_free(struct pfs *f)
{
	enum { N = 256 };
	struct fsmap_head *h = calloc(1, sizeof(*h) + N * sizeof(struct fsmap));
	uint32_t want_dev = (uint32_t)(minor(f->rdev) & 0xff) | (uint32_t)(major(f->rdev) << 8) |
	                    (uint32_t)((minor(f->rdev) & ~0xffu) << 12);
	int r = 0;

	if (!h)
		return -ENOMEM;
	h->fmh_count = N;
	h->fmh_keys[1].fmr_device = UINT32_MAX;
	h->fmh_keys[1].fmr_physical = UINT64_MAX;
	h->fmh_keys[1].fmr_owner = UINT64_MAX;
	h->fmh_keys[1].fmr_offset = UINT64_MAX;
	h->fmh_keys[1].fmr_flags = UINT32_MAX;
	for (;;) {
		if (ioctl(f->fd, FS_IOC_GETFSMAP, h) < 0) {
			r = -errno;
			break;
		}
		if (h->fmh_entries == 0)
			break;
		for (uint32_t i = 0; i < h->fmh_entries && r == 0; i++) {
			const struct fsmap *m = &h->fmh_recs[i];
			if (!(m->fmr_flags & FMR_OF_SPECIAL_OWNER) ||
			    m->fmr_owner != FMR_OWN_FREE || m->fmr_device != want_dev ||
			    m->fmr_length == 0)
				continue;
			/* Clipped to the partition: the kernel's word, but cheap to hold it to. */
			if (m->fmr_physical >= f->part_len)
				continue;
			uint64_t len = m->fmr_length;
			if (len > f->part_len - m->fmr_physical)
				len = f->part_len - m->fmr_physical;
			r = add_free(f->dev, f->part_start + m->fmr_physical, len);
		}
		if (r < 0 || (h->fmh_recs[h->fmh_entries - 1].fmr_flags & FMR_OF_LAST))
			break;
		fsmap_advance(h);
	}
	free(h);
	return r;
}

/* Sorts and merges d's free extents. */
static void merge_free(struct pdev *d)
{
	size_t n = 0;

	if (d->n_free == 0)
		return;
	qsort(d->free, d->n_free, sizeof(*d->free), cmp_extent);
	for (size_t i = 1; i < d->n_free; i++) {
		struct extent *last = &d->free[n], *e = &d->free[i];
		if (e->start <= last->start + last->len) {
			uint64_t end = e->start + e->len;
			if (end > last->start + last->len)
				last->len = end - last->start;
		} else {
			d->free[++n] = *e;
		}
	}
	d->n_free = n + 1;
}

static bool holds_region(const struct extent *e)
{
	uint64_t a = (e->start + REGION_SIZE - 1) / REGION_SIZE * REGION_SIZE;
	return e->start + e->len >= a && e->start + e->len - a >= REGION_SIZE;
}

/* Whether [off, off + REGION_SIZE) lies inside one of d's free extents. */
static bool region_free(const struct pdev *d, uint64_t off)
{
	size_t lo = 0, hi = d->n_free;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (d->free[mid].start <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return false;
	const struct extent *e = &d->free[lo - 1];
	return off - e->start <= e->len && e->len - (off - e->start) >= REGION_SIZE;
}

/* ---- the kernel's SHA-256 ---- */

static int hash_init(void)
{
	struct sockaddr_alg sa = {.salg_family = AF_ALG};
	int tfm, fd;

	if (hash_err)
		return hash_err;
	snprintf((char *)sa.salg_type, sizeof(sa.salg_type), "hash");
	snprintf((char *)sa.salg_name, sizeof(sa.salg_name), "sha256");
	tfm = socket(AF_ALG, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (tfm < 0)
		return hash_err = -errno;
	if (bind(tfm, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		hash_err = -errno;
		(void)close(tfm);
		return hash_err;
	}
	fd = accept4(tfm, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		hash_err = -errno;
	/* The operation socket keeps the transform; the bound socket is not needed again. */
	(void)close(tfm);
	if (fd < 0)
		return hash_err;
	hash_fd = fd;
	return 0;
}

static int sha256(const uint8_t *p, size_t n, uint8_t out_digest[DIGEST_LEN])
{
	ssize_t w, r;

	if (hash_fd < 0) {
		int e = hash_init();
		if (e < 0)
			return e;
	}
	do
		w = send(hash_fd, p, n, 0);
	while (w < 0 && errno == EINTR);
	if (w != (ssize_t)n)
		return w < 0 ? -errno : -EIO;
	do
		r = read(hash_fd, out_digest, DIGEST_LEN);
	while (r < 0 && errno == EINTR);
	if (r != DIGEST_LEN)
		return r < 0 ? -errno : -EIO;
	return 0;
}

/* ---- regions ---- */

static uint8_t *buf_before, *buf_after, *buf_pattern, *buf_zero;

static int read_full(int fd, uint8_t *p, uint64_t off)
{
	size_t done = 0;

	while (done < REGION_SIZE) {
		ssize_t n = pread(fd, p + done, REGION_SIZE - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

static int write_full(int fd, const uint8_t *p, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, p + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i])
			return false;
	}
	return true;
}

static size_t count_marker(const uint8_t *p, size_t n)
{
	size_t hits = 0;

	if (marker_len == 0)
		return 0;
	for (size_t i = 0; i + marker_len <= n;) {
		if (memcmp(p + i, marker, marker_len) == 0) {
			hits++;
			i += marker_len;
		} else {
			i++;
		}
	}
	return hits;
}

static void hex_sample(const uint8_t *p, size_t from, char *outp)
{
	size_t n = REGION_SIZE - from < SAMPLE_MAX ? REGION_SIZE - from : SAMPLE_MAX;

	for (size_t i = 0; i < n; i++)
		sprintf(outp + 2 * i, "%02x", p[from + i]);
	outp[2 * n] = '\0';
}

/* What a span of the region holds that is not zero: bytes, the first one, marker hits. */
struct finding {
	uint64_t bytes, markers;
	size_t first; /* SIZE_MAX: none */
};

static void find_nonzero(const uint8_t *p, size_t from, size_t to, struct finding *f)
{
	for (size_t i = from; i < to; i++) {
		if (p[i]) {
			f->bytes++;
			if (f->first == SIZE_MAX)
				f->first = i;
		}
	}
	f->markers += count_marker(p + from, to - from);
}

/* Compares before with zeros (digests NULL) or the 16 digests. */
static void compare_region(struct pdev *d, uint64_t off, const uint8_t *digests)
{
	struct finding f = {.first = SIZE_MAX};
	size_t blocks = 0, first_block = SIZE_MAX, run_start = SIZE_MAX;
	char sample[2 * SAMPLE_MAX + 1];

	for (size_t b = 0; b <= BLOCKS; b++) {
		bool differs = false;
		if (b < BLOCKS) {
			const uint8_t *p = buf_before + b * PROBE_BLOCK;
			if (digests) {
				uint8_t got[DIGEST_LEN];
				int r = sha256(p, PROBE_BLOCK, got);
				if (r < 0) {
					out("error %s cannot hash: %s", d->name,
					    r == -EAFNOSUPPORT || r == -ENOENT
					            ? "no AF_ALG sha256 in this kernel"
					            : strerror(-r));
					return;
				}
				differs = memcmp(got, digests + b * DIGEST_LEN, DIGEST_LEN) != 0;
			} else {
				differs = !all_zero(p, PROBE_BLOCK);
			}
		}
		/* Runs of differing blocks: a marker may cross from one block into the next. */
		if (differs) {
			blocks++;
			if (first_block == SIZE_MAX)
				first_block = b * PROBE_BLOCK;
			if (run_start == SIZE_MAX)
				run_start = b * PROBE_BLOCK;
		} else if (run_start != SIZE_MAX) {
			find_nonzero(buf_before, run_start, b * PROBE_BLOCK, &f);
			run_start = SIZE_MAX;
		}
	}
	d->compared++;
	if (blocks == 0) {
		out("compare %s %llu clean", d->name, (unsigned long long)off);
		return;
	}
	/* A block that reads as zeros where the base has data: point at the block. */
	size_t first = f.first != SIZE_MAX ? f.first : first_block;
	hex_sample(buf_before, first, sample);
	out("compare %s %llu differs %zu %llu %zu %llu %s", d->name, (unsigned long long)off,
	    blocks, (unsigned long long)f.bytes, first, (unsigned long long)f.markers, sample);
}

/* Writes the pattern, drops the caches, reads back, restores. buf_before holds the region. */
static void write_region(struct pdev *d, uint64_t off)
{
	char sample[2 * SAMPLE_MAX + 1];
	int r;

	r = write_full(d->fd, buf_pattern, PROBE_BLOCK, off);
	if (r == 0 && fdatasync(d->fd) < 0)
		r = -errno;
	if (r < 0) {
		out("error %s cannot write at %llu: %s", d->name, (unsigned long long)off,
		    strerror(-r));
		goto restore;
	}
	/* The read below is O_DIRECT, and the device's own cache goes too: nothing cached can
	 * answer it. The system's caches are dropped once per device (it walks every cached
	 * page; per region it was half the probe's time under TCG). */
	(void)posix_fadvise(d->fd, 0, 0, POSIX_FADV_DONTNEED);
	(void)ioctl(d->fd, BLKFLSBUF, 0);
	if (!d->dropped) {
		int dc = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
		if (dc >= 0) {
			(void)!write(dc, "1\n", 2);
			(void)close(dc);
		}
		d->dropped = true;
	}
	r = read_full(d->fd, buf_after, off);
	if (r < 0) {
		out("error %s cannot read back %llu: %s", d->name, (unsigned long long)off,
		    strerror(-r));
		goto restore;
	}
	if (memcmp(buf_after, buf_pattern, PROBE_BLOCK) != 0) {
		out("error %s pattern did not read back at %llu", d->name, (unsigned long long)off);
		goto restore;
	}
	d->written++;
	struct finding f = {.first = SIZE_MAX};
	find_nonzero(buf_after, PROBE_BLOCK, REGION_SIZE, &f);
	if (f.bytes == 0) {
		out("write %s %llu clean", d->name, (unsigned long long)off);
	} else {
		hex_sample(buf_after, f.first, sample);
		out("write %s %llu foreign %llu %zu %llu %s", d->name, (unsigned long long)off,
		    (unsigned long long)f.bytes, f.first, (unsigned long long)f.markers, sample);
	}

restore:
	/* Exactly what the region held. Zeros as zeros: a block device's PUNCH_HOLE is a write of
	 * zeros that may unmap (virtio-blk WRITE_ZEROES with unmap: QEMU's discard=unmap makes a hole
	 * of it on the host again); BLKZEROOUT forbids unmapping (the host allocates zeros), so it
	 * only comes second, then plain zeros. */
	if (all_zero(buf_before, REGION_SIZE)) {
		uint64_t range[2] = {off, REGION_SIZE};
		if (fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		              REGION_SIZE) == 0 ||
		    ioctl(d->fd, BLKZEROOUT, range) == 0)
			r = 0;
		else
			r = write_full(d->fd, buf_zero, REGION_SIZE, off);
	} else {
		r = write_full(d->fd, buf_before, REGION_SIZE, off);
	}
	if (r == 0 && fdatasync(d->fd) < 0)
		r = -errno;
	if (r == 0)
		r = read_full(d->fd, buf_after, off);
	if (r == 0 && memcmp(buf_after, buf_before, REGION_SIZE) != 0)
		r = -EIO;
	if (r < 0)
		out("error %s cannot restore %llu: %s", d->name, (unsigned long long)off,
		    strerror(-r));
}

static int open_device(struct pdev *d)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/dev/%s", d->name);
	int fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != d->rdev) {
		(void)close(fd);
		return -ENODEV;
	}
	d->fd = fd;
	return 0;
}

/* One region line, split: NAME OFF MODE ARG. Returns 0, or -1 for a malformed line (*why set). */
static int do_region(char **tok, const char **why)
{
	static uint8_t digests[BLOCKS * DIGEST_LEN];
	struct pdev *d = find_dev(tok[1]);
	uint64_t off;
	bool wr, cmp, zero = false;

	if (!d) {
		*why = "region on a device not named before scan";
		return -1;
	}
	if (!parse_dec(tok[2], UINT64_MAX, &off)) {
		*why = "bad region offset";
		return -1;
	}
	wr = strcmp(tok[3], "w") == 0 || strcmp(tok[3], "wc") == 0;
	cmp = strcmp(tok[3], "c") == 0 || strcmp(tok[3], "wc") == 0;
	if (!wr && !cmp) {
		*why = "bad region mode";
		return -1;
	}
	if (!cmp) {
		if (strcmp(tok[4], "-") != 0) {
			*why = "a write-only region takes \"-\"";
			return -1;
		}
	} else if (strcmp(tok[4], "zero") == 0) {
		zero = true;
	} else if (!parse_hex(tok[4], digests, sizeof(digests))) {
		*why = "bad region digests";
		return -1;
	}

	unsigned long long o = (unsigned long long)off;
	if (off % REGION_SIZE) {
		out("refused %s %llu not aligned to 64 KiB", d->name, o);
		return 0;
	}
	if (!d->ok) {
		out("refused %s %llu device not probed", d->name, o);
		return 0;
	}
	if (off > d->size || d->size - off < REGION_SIZE) {
		out("refused %s %llu outside the device", d->name, o);
		return 0;
	}
	if (!region_free(d, off)) {
		out("refused %s %llu not free in the guest's file system", d->name, o);
		return 0;
	}
	if (now_ms() >= freeze_deadline || !watchdog_alive()) {
		out("refused %s %llu the file systems are no longer held frozen", d->name, o);
		return 0;
	}
	if (d->fd < 0) {
		int r = open_device(d);
		if (r < 0) {
			out("error %s cannot open /dev/%s: %s", d->name, d->name, strerror(-r));
			return 0;
		}
	}

	int64_t t0 = now_ms();
	sigset_t all, old;
	/* A signal waits until the region is back as it was. */
	(void)sigfillset(&all);
	(void)sigprocmask(SIG_BLOCK, &all, &old);
	int r = read_full(d->fd, buf_before, off);
	if (r < 0) {
		out("error %s cannot read %llu: %s", d->name, o, strerror(-r));
	} else {
		if (cmp)
			compare_region(d, off, zero ? NULL : digests);
		if (wr)
			write_region(d, off);
	}
	(void)sigprocmask(SIG_SETMASK, &old, NULL);
	d->ms += now_ms() - t0;
	out_flush();
	return 0;
}

static int malformed(const char *why)
{
	out("error - %s", why);
	return finish(2);
}

int probe_main(void)
{
	char line[PROBE_LINE_MAX + 2], *tok[6];
	int r, n;

	(void)signal(SIGPIPE, SIG_IGN);
	if (posix_memalign((void **)&buf_before, 4096, REGION_SIZE) ||
	    posix_memalign((void **)&buf_after, 4096, REGION_SIZE) ||
	    posix_memalign((void **)&buf_pattern, 4096, PROBE_BLOCK) ||
	    posix_memalign((void **)&buf_zero, 4096, REGION_SIZE)) {
		out("error - out of memory");
		return finish(1);
	}
	memset(buf_zero, 0, REGION_SIZE);
	static const char pat[] = "slate-probe ";
	for (size_t i = 0; i < PROBE_BLOCK; i++)
		buf_pattern[i] = (uint8_t)pat[i % (sizeof(pat) - 1)];

	/* The request: SLATE-PROBE 1, device lines, an optional marker, scan. */
	if (read_line(line, sizeof(line)) != 1 || strcmp(line, "SLATE-PROBE 1") != 0)
		return malformed("not a probe request (want \"SLATE-PROBE 1\")");
	bool have_marker = false;
	for (;;) {
		r = read_line(line, sizeof(line));
		if (r <= 0)
			return malformed(r < 0 ? "line too long or unterminated"
			                       : "missing \"scan\"");
		n = split(line, tok, 6);
		if (n == 1 && strcmp(tok[0], "scan") == 0)
			break;
		if (n == 3 && strcmp(tok[0], "device") == 0) {
			uint64_t size;
			if (!valid_name(tok[1]))
				return malformed("bad device name");
			if (!parse_dec(tok[2], UINT64_MAX, &size))
				return malformed("bad device size");
			if (find_dev(tok[1]))
				return malformed("device named twice");
			if (n_devs == PROBE_MAX_DEVICES)
				return malformed("too many devices");
			struct pdev *d = &devs[n_devs++];
			snprintf(d->name, sizeof(d->name), "%s", tok[1]);
			d->size = size;
			d->fd = -1;
		} else if (n == 2 && strcmp(tok[0], "marker") == 0) {
			size_t len = strlen(tok[1]) / 2;
			if (have_marker || len < 1 || len > PROBE_MARKER_MAX ||
			    !parse_hex(tok[1], marker, len))
				return malformed("bad marker");
			marker_len = len;
			have_marker = true;
		} else {
			return malformed("unknown line before \"scan\"");
		}
	}

	/* The scan: devices, file systems; then freeze them and list their free space. */
	out("SLATE-PROBE 1");
	char *mountinfo = read_mountinfo();
	if (!mountinfo) {
		out("error - cannot read /proc/self/mountinfo");
		return finish(1);
	}
	for (size_t i = 0; i < n_devs; i++)
		scan_dev(&devs[i], mountinfo);
	free(mountinfo);
	out_flush();

	r = watchdog_start();
	if (r < 0) {
		out("error - cannot start the watchdog: %s", strerror(-r));
		return finish(1);
	}
	(void)signal(SIGHUP, on_signal);
	(void)signal(SIGINT, on_signal);
	(void)signal(SIGTERM, on_signal);
	for (size_t i = 0; i < n_fss; i++) {
		struct pfs *f = &fss[i];
		watchdog_tell((uint8_t)i);
		if (ioctl(f->fd, FIFREEZE, 0) == 0) {
			f->frozen = true;
			continue;
		}
		int e = errno;
		watchdog_tell((uint8_t)(0x80 | i));
		char m[1024];
		escape_word(f->mnt, m, sizeof(m));
		out("error %s cannot freeze %s: %s", f->dev->name, m, strerror(e));
		/* Its free space is nobody's to probe; the other file systems on the device are. */
	}
	for (size_t i = 0; i < n_fss; i++) {
		struct pfs *f = &fss[i];
		if (!f->frozen)
			continue;
		r = map_free(f);
		if (r < 0) {
			char m[1024];
			escape_word(f->mnt, m, sizeof(m));
			out("error %s cannot list the free space of %s: %s", f->dev->name, m,
			    strerror(-r));
			/* Not half a list: none of this device's free space then. */
			f->dev->n_free = 0;
			f->dev->ok = false;
		}
	}
	for (size_t i = 0; i < n_devs; i++) {
		struct pdev *d = &devs[i];
		if (!d->ok)
			continue;
		merge_free(d);
		for (size_t k = 0; k < d->n_free; k++) {
			if (holds_region(&d->free[k]))
				out("free %s %llu %llu", d->name,
				    (unsigned long long)d->free[k].start,
				    (unsigned long long)d->free[k].len);
		}
	}
	out("ready");
	out_flush();
	if (out_failed)
		return finish(1);

	/* The regions, until end. */
	for (;;) {
		const char *why = NULL;
		r = read_line(line, sizeof(line));
		if (r <= 0)
			return malformed(r < 0 ? "line too long or unterminated"
			                       : "missing \"end\"");
		n = split(line, tok, 6);
		if (n == 1 && strcmp(tok[0], "end") == 0)
			break;
		if (n != 5 || strcmp(tok[0], "region") != 0)
			return malformed("unknown line after \"ready\"");
		if (do_region(tok, &why) < 0)
			return malformed(why);
		if (out_failed)
			return finish(1);
	}
	for (size_t i = 0; i < n_devs; i++) {
		struct pdev *d = &devs[i];
		out("done %s %llu %llu %lld", d->name, (unsigned long long)d->written,
		    (unsigned long long)d->compared, (long long)d->ms);
		if (d->fd >= 0)
			(void)close(d->fd);
		d->fd = -1;
	}
	thaw_all();
	out("end");
	return finish(out_failed ? 1 : 0);
}

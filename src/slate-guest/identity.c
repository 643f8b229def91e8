/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The identity step: gives a guest restored from a memory snapshot of a booted base guest
 * (issue 25) an identity of its own (doc/guest-channel.md, "The identity step"). slated opens
 * the agent's "identity" stream (no process is started: under TCG a fork and exec cost a third
 * of the step) or, with an older agent, runs slate-guest --identity as root through an exec
 * session, and writes one line:
 *
 *   identity HOSTNAME SECONDS NANOSECONDS SEEDHEX\n
 *
 * In this order it mixes the host's 64-byte seed into the kernel RNG and reseeds it (every
 * restored guest starts with the base's RNG state), sets CLOCK_REALTIME to the host's time (the
 * base's clock stood still), mounts /dev/vdb at the workspace user's home when nothing is
 * mounted there (the base was booted with a blank placeholder), sets the hostname (and
 * /etc/hostname, the 127.0.1.1 line of /etc/hosts), and writes a new /etc/machine-id. The answer
 * is one line: "ok ..." (exit 0), or "error <why>": 2 for a malformed line, 1 when a step failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/random.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "guest.h"

#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif

#define IDENTITY_LINE_MAX 512 /* bytes, the newline included */
#define SEED_LEN 64
#define HOSTNAME_MAX 63
#define HOSTS_MAX (256u * 1024)
#define HOME_DEV "/dev/vdb"
#define IDENTITY_REPLY_MAX 320

/* The answer: "error <why>\n" into reply; returns status. */
__attribute__((format(printf, 4, 5))) static int fail(char *reply, size_t cap, int status,
                                                      const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(reply, cap, "error ");
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < cap)
		(void)vsnprintf(reply + n, cap - (size_t)n, fmt, ap);
	va_end(ap);
	n = (int)strlen(reply);
	if ((size_t)n + 1 < cap) {
		reply[n] = '\n';
		reply[n + 1] = '\0';
	} else if (cap >= 2) {
		reply[cap - 2] = '\n';
	}
	return status;
}

/* [a-z0-9][a-z0-9-]*, at most 63 bytes. */
static bool valid_hostname(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > HOSTNAME_MAX || s[0] == '-')
		return false;
	for (; *s; s++) {
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-'))
			return false;
	}
	return true;
}

/* Parses the one line (n bytes, NUL-terminated, changed in place). NULL, or why it is malformed. */
static const char *parse_request(char *line, size_t n, char *name, struct timespec *ts,
                                 uint8_t *seed)
{
	char *tok[6], *p;
	uint64_t sec, nsec;
	int k = 0;

	if (n == 0)
		return "no input";
	if (n > IDENTITY_LINE_MAX)
		return "line too long";
	if (strlen(line) != n)
		return "not printable ASCII";
	if (n == 0 || line[n - 1] != '\n')
		return "unterminated line";
	line[--n] = '\0';
	for (p = line; *p; p++) {
		if (*p < 0x20 || *p > 0x7e)
			return "not printable ASCII";
	}
	/* Exactly five tokens, separated by single spaces. */
	for (p = line;;) {
		char *sp = strchr(p, ' ');
		if (k == 5 || (sp ? sp == p : *p == '\0'))
			return "want: identity HOSTNAME SECONDS NANOSECONDS SEEDHEX";
		tok[k++] = p;
		if (!sp)
			break;
		*sp = '\0';
		p = sp + 1;
	}
	if (k != 5 || strcmp(tok[0], "identity") != 0)
		return "want: identity HOSTNAME SECONDS NANOSECONDS SEEDHEX";
	if (!valid_hostname(tok[1]))
		return "bad hostname";
	/* time_t is 64 bits on every target slate builds the guest agent for. */
	if (!parse_dec(tok[2], INT64_MAX / 2, &sec) || !parse_dec(tok[3], 999999999, &nsec))
		return "bad time";
	if (!parse_hex(tok[4], seed, SEED_LEN))
		return "bad seed (want 128 lower-case hex digits)";
	strcpy(name, tok[1]);
	ts->tv_sec = (time_t)sec;
	ts->tv_nsec = (long)nsec;
	return NULL;
}

/* Credits the seed to the input pool and makes the CRNG reseed from it now. */
static int seed_rng(const uint8_t *seed)
{
	/* struct rand_pool_info: entropy_count (bits), buf_size (bytes), then the bytes. */
	union {
		struct rand_pool_info info;
		uint32_t words[sizeof(struct rand_pool_info) / 4 + SEED_LEN / 4];
	} req = {.info = {.entropy_count = SEED_LEN * 8, .buf_size = SEED_LEN}};
	int fd, r = 0;

	memcpy((uint8_t *)req.words + sizeof(struct rand_pool_info), seed, SEED_LEN);
	fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		r = -errno;
	else if (ioctl(fd, RNDADDENTROPY, &req) < 0)
		r = -errno;
	/* Older kernels (before 4.17) have no RNDRESEEDCRNG: what was added is used soon anyway. */
	else if (ioctl(fd, RNDRESEEDCRNG) < 0 && errno != ENOTTY && errno != EINVAL)
		r = -errno;
	if (fd >= 0)
		(void)close(fd);
	explicit_bzero(&req, sizeof(req));
	return r;
}

/* Mounts /dev/vdb at the home of uid 1000 unless something is mounted there. 0, or -errno with
 * *what saying which step failed. */
static int mount_home(const char **what)
{
	struct guest_user u;
	const char *home = "/home/slate";
	char parent[sizeof(u.home) + 4];
	struct stat st, pst;
	int fd;

	if (user_lookup(NULL, 0, 1000, &u) == 0 && u.home[0] == '/' && u.home[1])
		home = u.home;
	*what = home;
	if (stat(HOME_DEV, &st) < 0 || !S_ISBLK(st.st_mode))
		return 0;
	(void)snprintf(parent, sizeof(parent), "%s/..", home);
	if (stat(home, &st) < 0 || stat(parent, &pst) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	/* A mount point: another file system than its parent's, or its root. */
	if (st.st_dev != pst.st_dev || st.st_ino == pst.st_ino)
		return 0;
	/* The base guest read the blank placeholder's blocks: none of them may be used now. */
	*what = HOME_DEV;
	fd = open(HOME_DEV, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, BLKFLSBUF, 0) < 0) {
		int r = -errno;
		(void)close(fd);
		return r;
	}
	(void)close(fd);
	*what = home;
	if (mount(HOME_DEV, home, "ext4", MS_NOSUID | MS_NODEV, NULL) < 0)
		return -errno;
	return 0;
}

/* /etc/hosts with its first 127.0.1.1 line replaced (others dropped), or one appended. */
static int write_hosts(const char *name)
{
	static const char path[] = "/etc/hosts";
	char *old = NULL, *out = NULL;
	size_t old_len = 0, n = 0;
	mode_t mode = 0644;
	uid_t uid = 0;
	gid_t gid = 0;
	bool done = false;
	struct stat st;
	FILE *f;
	int r;

	f = fopen(path, "re");
	if (f) {
		if (fstat(fileno(f), &st) == 0) {
			mode = st.st_mode & 07777;
			uid = st.st_uid;
			gid = st.st_gid;
		}
		old = malloc(HOSTS_MAX + 1);
		if (old)
			old_len = fread(old, 1, HOSTS_MAX + 1, f);
		r = ferror(f) ? -EIO : 0;
		(void)fclose(f);
		if (!old)
			return -ENOMEM;
		if (r < 0 || old_len > HOSTS_MAX) {
			free(old);
			return r < 0 ? r : -EFBIG;
		}
	} else if (errno != ENOENT) {
		return -errno;
	} else {
		old = strdup("127.0.0.1 localhost\n");
		if (!old)
			return -ENOMEM;
		old_len = strlen(old);
	}
	out = malloc(old_len + strlen(name) + 16);
	if (!out) {
		free(old);
		return -ENOMEM;
	}
	for (size_t i = 0; i < old_len;) {
		const char *l = old + i, *nl = memchr(l, '\n', old_len - i);
		size_t len = nl ? (size_t)(nl - l) + 1 : old_len - i;
		i += len;
		if (len > 9 && memcmp(l, "127.0.1.1", 9) == 0 && (l[9] == ' ' || l[9] == '\t')) {
			if (!done)
				n += (size_t)sprintf(out + n, "127.0.1.1 %s\n", name);
			done = true;
			continue;
		}
		memcpy(out + n, l, len);
		n += len;
		if (!nl)
			out[n++] = '\n';
	}
	if (!done)
		n += (size_t)sprintf(out + n, "127.0.1.1 %s\n", name);
	r = write_atomic_nosync(path, out, n, mode, uid, gid);
	free(old);
	free(out);
	return r;
}

static int set_hostname(const char *name)
{
	char line[HOSTNAME_MAX + 2];
	int n = snprintf(line, sizeof(line), "%s\n", name);
	int r;

	if (sethostname(name, strlen(name)) < 0)
		return -errno;
	r = write_atomic_nosync("/etc/hostname", line, (size_t)n, 0644, 0, 0);
	return r < 0 ? r : write_hosts(name);
}

/* A new random machine id in /etc/machine-id and (a regular file) /var/lib/dbus/machine-id. */
static int new_machine_id(const char **what)
{
	static const char dbus[] = "/var/lib/dbus/machine-id";
	static const char digits[] = "0123456789abcdef";
	uint8_t id[16];
	char text[2 * sizeof(id) + 1];
	struct stat st;
	ssize_t got;
	int r;

	*what = "getrandom";
	do
		got = getrandom(id, sizeof(id), 0);
	while (got < 0 && errno == EINTR);
	if (got != (ssize_t)sizeof(id))
		return got < 0 ? -errno : -EIO;
	for (size_t i = 0; i < sizeof(id); i++) {
		text[2 * i] = digits[id[i] >> 4];
		text[2 * i + 1] = digits[id[i] & 15];
	}
	text[sizeof(text) - 1] = '\n';
	*what = "/etc/machine-id";
	r = write_atomic_nosync("/etc/machine-id", text, sizeof(text), 0444, 0, 0);
	if (r < 0)
		return r;
	*what = dbus;
	if (lstat(dbus, &st) == 0 && S_ISREG(st.st_mode))
		return write_atomic_nosync(dbus, text, sizeof(text), st.st_mode & 07777, st.st_uid,
		                           st.st_gid);
	return 0;
}

/* The whole step for one line: the answer in reply (one line), the exit status returned. */
static int identity_run(char *line, size_t n, char *reply, size_t cap)
{
	char name[HOSTNAME_MAX + 1];
	struct timespec ts;
	uint8_t seed[SEED_LEN];
	const char *bad, *what;
	int64_t t0, t_home, t_rest;
	int r;

	bad = parse_request(line, n, name, &ts, seed);
	explicit_bzero(line, n);
	if (bad) {
		explicit_bzero(seed, sizeof(seed));
		return fail(reply, cap, 2, "%s", bad);
	}
	if (geteuid() != 0) {
		explicit_bzero(seed, sizeof(seed));
		return fail(reply, cap, 1, "%s", "must run as root");
	}
	/* It sets the clock, the hostname and the machine-id: never of a host it was run on by
	 * mistake. A slate guest has slate's channel device. */
	if (!chan_in_guest()) {
		explicit_bzero(seed, sizeof(seed));
		return fail(reply, cap, 1, "%s",
		            "not in a slate guest (no slate channel device): refusing");
	}
	/* First: nothing in this guest may draw from the base's RNG state after this point. */
	r = seed_rng(seed);
	explicit_bzero(seed, sizeof(seed));
	if (r < 0)
		return fail(reply, cap, 1, "seeding the kernel RNG (RNDADDENTROPY): %s",
		            strerror(-r));
	if (clock_settime(CLOCK_REALTIME, &ts) < 0)
		return fail(reply, cap, 1, "setting the clock: %s", strerror(errno));
	t0 = now_ms();
	r = mount_home(&what);
	if (r < 0)
		return fail(reply, cap, 1, "mounting the home (%s): %s", what, strerror(-r));
	t_home = now_ms();
	r = set_hostname(name);
	if (r < 0)
		return fail(reply, cap, 1, "setting the hostname: %s", strerror(-r));
	r = new_machine_id(&what);
	if (r < 0)
		return fail(reply, cap, 1, "writing the machine id (%s): %s", what, strerror(-r));
	t_rest = now_ms();
	/* "ok", then where the time went (slated logs it). */
	(void)snprintf(reply, cap, "ok home_ms=%lld rest_ms=%lld\n", (long long)(t_home - t0),
	               (long long)(t_rest - t_home));
	return 0;
}

int identity_main(void)
{
	char line[IDENTITY_LINE_MAX + 2], reply[IDENTITY_REPLY_MAX];
	size_t n = 0;
	int status;

	if (fgets(line, sizeof(line), stdin))
		n = strlen(line);
	status = identity_run(line, n, reply, sizeof(reply));
	if (fputs(reply, stdout) == EOF || fflush(stdout) == EOF)
		return 1;
	return status;
}

/* ---- the agent's "identity" stream: the same step without a process ---- */

struct ident {
	char line[IDENTITY_LINE_MAX + 2];
	size_t len;
};

int identity_open(struct stream *s)
{
	s->ident = calloc(1, sizeof(*s->ident));
	return s->ident ? 0 : -ENOMEM;
}

/* The line is complete (or the host ended it): the step runs now, in the loop (the start that
 * asked waits for nothing else), and the answer ends the stream. */
static void ident_finish(struct stream *s)
{
	struct ident *id = s->ident;
	char reply[IDENTITY_REPLY_MAX];
	size_t n;
	int status;

	id->line[id->len] = '\0';
	status = identity_run(id->line, id->len, reply, sizeof(reply));
	n = strlen(reply);
	guest_log("identity: %.*s", (int)(n ? n - 1 : 0), reply);
	(void)status;
	if (n <= s->send_win) {
		s->send_win -= (uint32_t)n;
		(void)chan_send(CH_DATA, s->id, reply, (uint32_t)n, NULL, 0);
	}
	identity_abort(s);
	if (!s->sent_eof) {
		s->sent_eof = true;
		(void)chan_send(CH_EOF, s->id, NULL, 0, NULL, 0);
	}
	stream_close(s);
}

void identity_data(struct stream *s, const uint8_t *p, size_t n)
{
	struct ident *id = s->ident;
	const uint8_t *nl;
	size_t room, take;

	if (!id)
		return;
	/* Up to the newline (kept); one byte over the maximum says "too long". */
	room = IDENTITY_LINE_MAX + 1 - id->len;
	nl = memchr(p, '\n', n);
	take = nl ? (size_t)(nl - p) + 1 : n;
	if (take > room)
		take = room;
	memcpy(id->line + id->len, p, take);
	id->len += take;
	if ((nl && take == (size_t)(nl - p) + 1) || id->len > IDENTITY_LINE_MAX)
		ident_finish(s);
}

void identity_eof(struct stream *s)
{
	if (s->ident)
		ident_finish(s);
}

void identity_abort(struct stream *s)
{
	if (!s->ident)
		return;
	explicit_bzero(s->ident, sizeof(*s->ident));
	free(s->ident);
	s->ident = NULL;
}

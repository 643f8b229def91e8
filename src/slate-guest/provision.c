/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate-guest --provision: writes what the host wants the guest to see at start, read from
 * stdin (the host runs it as root through an exec session after every boot):
 *
 *   SLATE-PROVISION 1\n
 *   env NAME=VALUE\n                          one per variable; VALUE has no newline
 *   file MODE USER LEN PATH\n<LEN bytes>\n     PATH absolute or "~/..." (USER's home), written
 *                                             atomically, owned by USER (and the parent
 *                                             directories it creates); USER "-" is the
 *                                             workspace user (user_default())
 *   ca LEN\n<LEN bytes>\n                      a PEM certificate for the trust store
 *   end\n
 *
 * Everything here is a placeholder or a public certificate: real secrets never come to the guest.
 * env lines go to /run/slate/env (tmpfs), which every exec session and login shell reads. Files
 * written by an earlier provisioning that this one no longer names are removed (the list is kept
 * in /var/lib/slate-guest/provisioned), so a removed secret's file does not linger.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest.h"

#define PROVISION_MAX_FILE (1u << 20)
#define PROVISION_MAX_LINE 8192
#define ENV_FILE "/run/slate/env"
#define MANIFEST_DIR "/var/lib/slate-guest"
#define MANIFEST MANIFEST_DIR "/provisioned"
#define CA_NAME "slate-egress"

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "slate-guest: provision: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* Creates the directories above path (mode 0755, or 0700 under a home), owned by uid:gid. */
static int mkdir_parents(const char *path, uid_t uid, gid_t gid)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) == 0) {
			if (chown(tmp, uid, gid) < 0)
				return -errno;
		} else if (errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

static int write_replace(const char *path, const void *data, size_t len, mode_t mode, uid_t uid,
                         gid_t gid, bool sync)
{
	char tmp[PATH_MAX];
	int fd, r = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.slate-tmp", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	r = mkdir_parents(path, uid, gid);
	if (r < 0)
		return r;
	(void)unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode & 07777);
	if (fd < 0)
		return -errno;
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, (const char *)data + off, len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		off += (size_t)w;
	}
	if (r == 0 &&
	    (fchown(fd, uid, gid) < 0 || fchmod(fd, mode & 07777) < 0 || (sync && fsync(fd) < 0)))
		r = -errno;
	(void)close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlink(tmp);
	return r;
}

int write_atomic(const char *path, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid)
{
	return write_replace(path, data, len, mode, uid, gid, true);
}

int write_atomic_nosync(const char *path, const void *data, size_t len, mode_t mode, uid_t uid,
                        gid_t gid)
{
	return write_replace(path, data, len, mode, uid, gid, false);
}

/* Reads a line (without its newline) into line; 0 at EOF, -1 on an over-long line. */
static int read_line(char *line, size_t size)
{
	if (!fgets(line, (int)size, stdin))
		return 0;
	size_t n = strlen(line);
	if (n == 0 || line[n - 1] != '\n')
		return -1;
	line[n - 1] = '\0';
	return 1;
}

static char *read_blob(unsigned long len)
{
	char *p = malloc(len + 1);

	if (!p)
		return NULL;
	if (fread(p, 1, len, stdin) != len || fgetc(stdin) != '\n') {
		free(p);
		return NULL;
	}
	p[len] = '\0';
	return p;
}

/* Puts the certificate where the guest's TLS clients look: update-ca-certificates where the
 * image has it (Ubuntu), otherwise into the bundle file itself (the test image). */
static int install_ca(const char *pem, size_t len)
{
	static const char bundle[] = "/etc/ssl/certs/ca-certificates.crt";
	static const char begin[] = "# slate egress CA begin\n", end[] = "# slate egress CA end\n";

	if (access("/usr/sbin/update-ca-certificates", X_OK) == 0) {
		int r = write_atomic("/usr/local/share/ca-certificates/" CA_NAME ".crt", pem, len,
		                     0644, 0, 0);
		if (r < 0)
			return r;
		r = system("/usr/sbin/update-ca-certificates >/dev/null 2>&1");
		return r == 0 ? 0 : -EIO;
	}
	/* The bundle without our old block, then the new block. */
	char *old = NULL, *out;
	size_t old_len = 0, n = 0;
	FILE *f = fopen(bundle, "re");
	if (f) {
		old = malloc(PROVISION_MAX_FILE * 4);
		if (old)
			old_len = fread(old, 1, PROVISION_MAX_FILE * 4 - 1, f);
		fclose(f);
		if (old)
			old[old_len] = '\0';
	}
	out = malloc(old_len + len + sizeof(begin) + sizeof(end) + 2);
	if (!out) {
		free(old);
		return -ENOMEM;
	}
	if (old) {
		char *b = strstr(old, begin), *e = b ? strstr(b, end) : NULL;
		if (b && e) {
			memcpy(out, old, (size_t)(b - old));
			n = (size_t)(b - old);
			size_t rest = old_len - (size_t)(e + strlen(end) - old);
			memcpy(out + n, e + strlen(end), rest);
			n += rest;
		} else {
			memcpy(out, old, old_len);
			n = old_len;
		}
	}
	if (n && out[n - 1] != '\n')
		out[n++] = '\n';
	memcpy(out + n, begin, strlen(begin));
	n += strlen(begin);
	memcpy(out + n, pem, len);
	n += len;
	if (len && pem[len - 1] != '\n')
		out[n++] = '\n';
	memcpy(out + n, end, strlen(end));
	n += strlen(end);
	int r = write_atomic(bundle, out, n, 0644, 0, 0);
	free(old);
	free(out);
	return r;
}

/* Removes the files the previous provisioning wrote that this one did not name. */
static void remove_stale(char **paths, size_t n)
{
	char line[PATH_MAX + 2];
	FILE *f = fopen(MANIFEST, "re");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		bool keep = false;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] != '/')
			continue;
		for (size_t i = 0; i < n && !keep; i++)
			keep = strcmp(paths[i], line) == 0;
		if (!keep)
			(void)unlink(line);
	}
	fclose(f);
}

int provision_main(void)
{
	char line[PROVISION_MAX_LINE], *env = NULL, **paths = NULL;
	size_t env_len = 0, n_paths = 0;
	bool ended = false;
	int r;

	if (read_line(line, sizeof(line)) != 1 || strcmp(line, "SLATE-PROVISION 1") != 0)
		return fail("%s", "not a provisioning request (want \"SLATE-PROVISION 1\")");
	env = calloc(1, 1);
	while (env && !ended) {
		r = read_line(line, sizeof(line));
		if (r <= 0)
			return fail("%s", r < 0 ? "line too long" : "missing \"end\"");
		if (strncmp(line, "env ", 4) == 0) {
			const char *kv = line + 4;
			if (!strchr(kv, '=') || kv[0] == '=')
				return fail("bad env line: %s", kv);
			size_t n = strlen(kv);
			char *e = realloc(env, env_len + n + 2);
			if (!e)
				return fail("%s", "out of memory");
			env = e;
			memcpy(env + env_len, kv, n);
			env_len += n;
			env[env_len++] = '\n';
			env[env_len] = '\0';
		} else if (strncmp(line, "file ", 5) == 0) {
			unsigned mode;
			unsigned long len;
			char user[64];
			int off = 0;
			struct guest_user u;
			if (sscanf(line + 5, "%o %63s %lu %n", &mode, user, &len, &off) != 3 ||
			    off <= 0 || len > PROVISION_MAX_FILE ||
			    strstr(line + 5 + off, "/../") || mode > 07777)
				return fail("bad file line: %s", line);
			if (strcmp(user, "-") == 0)
				(void)user_default(&u);
			else if (user_lookup(user, strlen(user), 0, &u) < 0)
				return fail("no user %s", user);
			const char *given = line + 5 + off;
			char full[PATH_MAX];
			if (strncmp(given, "~/", 2) == 0)
				(void)snprintf(full, sizeof(full), "%s/%s", u.home, given + 2);
			else if (given[0] == '/')
				(void)snprintf(full, sizeof(full), "%s", given);
			else
				return fail("bad file path: %s", given);
			char *path = strdup(full), *data = read_blob(len);
			char **np = realloc(paths, (n_paths + 1) * sizeof(*paths));
			if (!path || !data || !np)
				return fail("%s", "truncated file contents");
			paths = np;
			paths[n_paths++] = path;
			r = write_atomic(path, data, len, mode, u.uid, u.gid);
			free(data);
			if (r < 0) {
				fprintf(stderr, "slate-guest: provision: %s: %s\n", path,
				        strerror(-r));
				return 1;
			}
		} else if (strncmp(line, "ca ", 3) == 0) {
			char *end;
			unsigned long len = strtoul(line + 3, &end, 10);
			if (*end || len > PROVISION_MAX_FILE)
				return fail("bad ca line: %s", line);
			char *pem = read_blob(len);
			if (!pem)
				return fail("%s", "truncated certificate");
			r = install_ca(pem, len);
			free(pem);
			if (r < 0)
				return fail("installing the egress CA: %s", strerror(-r));
		} else if (strcmp(line, "end") == 0) {
			ended = true;
		} else {
			return fail("unknown line: %s", line);
		}
	}
	if (!env)
		return fail("%s", "out of memory");
	remove_stale(paths, n_paths);
	(void)mkdir("/run/slate", 0755);
	r = write_atomic(ENV_FILE, env, env_len, 0644, 0, 0);
	if (r < 0)
		return fail("writing " ENV_FILE ": %s", strerror(-r));
	/* The manifest of the files this provisioning owns. */
	{
		size_t total = 0;
		for (size_t i = 0; i < n_paths; i++)
			total += strlen(paths[i]) + 1;
		char *m = malloc(total + 1), *p = m;
		if (m) {
			for (size_t i = 0; i < n_paths; i++)
				p += sprintf(p, "%s\n", paths[i]);
			(void)mkdir(MANIFEST_DIR, 0755);
			(void)write_atomic(MANIFEST, m, (size_t)(p - m), 0644, 0, 0);
			free(m);
		}
	}
	size_t n_env = 0;
	for (size_t i = 0; i < env_len; i++)
		n_env += env[i] == '\n';
	printf("provisioned %zu variable(s), %zu file(s)\n", n_env, n_paths);
	return 0;
}

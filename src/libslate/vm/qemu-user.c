/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The user libvirt runs QEMU as, and whether it can reach a directory (qemu-user.h says why). */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/macro.h"
#include "vm/qemu-user.h"

/* `key = "value"` (qemu.conf is libvirt's own config syntax); 1 when line sets key, 0 if not. */
static int conf_value(const char *line, const char *key, char *val, size_t len)
{
	size_t k = strlen(key), n;
	const char *p = line, *end;

	while (isspace((unsigned char)*p))
		p++;
	if (strncmp(p, key, k) != 0)
		return 0;
	p += k;
	while (isspace((unsigned char)*p))
		p++;
	if (*p++ != '=')
		return 0;
	while (isspace((unsigned char)*p))
		p++;
	if (*p++ != '"' || !(end = strchr(p, '"')))
		return -EINVAL;
	n = (size_t)(end - p);
	if (n == 0 || n >= len)
		return -EINVAL;
	memcpy(val, p, n);
	val[n] = '\0';
	return 1;
}

/* "+N" is a number, as libvirt reads it; a name that does not exist but is all digits, too. */
static int parse_id(const char *s, unsigned long *ret)
{
	char *end;

	if (*s == '+')
		s++;
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	*ret = strtoul(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

/* qemu:///system, also over an explicit socket (qemu+unix:///system?socket=...). */
static bool uri_is_system(const char *uri)
{
	static const char *const system[] = {"qemu:///system", "qemu+unix:///system"};

	if (!uri)
		return true;
	for (size_t i = 0; i < ELEMENTSOF(system); i++) {
		size_t n = strlen(system[i]);
		if (strncmp(uri, system[i], n) == 0 && (uri[n] == '\0' || uri[n] == '?'))
			return true;
	}
	return false;
}

int vm_qemu_user_load(const char *uri, const char *conf_path, struct vm_qemu_user *ret)
{
	_cleanup_fclose_ FILE *f = NULL;
	char user[64] = VM_QEMU_USER_DEFAULT, group[64] = VM_QEMU_GROUP_DEFAULT, line[1024];
	char pwbuf[4096], grbuf[4096];
	struct vm_qemu_user u = {0};
	struct passwd pwd, *pw = NULL;
	struct group grp, *gr = NULL;
	unsigned long id;
	int n, r;

	if (!uri_is_system(uri))
		return 0;
	f = fopen(conf_path ? conf_path : VM_QEMU_CONF, "re");
	if (!f && errno != ENOENT)
		return -errno;
	while (f && fgets(line, sizeof(line), f)) {
		if ((r = conf_value(line, "user", user, sizeof(user))) < 0 ||
		    (r = conf_value(line, "group", group, sizeof(group))) < 0)
			return r;
	}
	/* The _r lookups: slated asks from several worker threads at once. */
	if (user[0] != '+')
		(void)getpwnam_r(user, &pwd, pwbuf, sizeof(pwbuf), &pw);
	if (pw) {
		u.uid = pw->pw_uid;
		(void)snprintf(u.name, sizeof(u.name), "%s", pw->pw_name);
	} else if (parse_id(user, &id) == 0) {
		u.uid = (uid_t)id;
		(void)getpwuid_r(u.uid, &pwd, pwbuf, sizeof(pwbuf), &pw);
		(void)snprintf(u.name, sizeof(u.name), "%s", pw ? pw->pw_name : user);
	} else
		return -ENOENT;
	if (group[0] != '+')
		(void)getgrnam_r(group, &grp, grbuf, sizeof(grbuf), &gr);
	if (gr)
		u.gid = gr->gr_gid;
	else if (parse_id(group, &id) == 0)
		u.gid = (gid_t)id;
	else
		return -ENOENT;
	u.groups[0] = u.gid;
	u.n_groups = 1;
	/* libvirt gives QEMU the user's supplementary groups as well. */
	if (pw) {
		n = VM_QEMU_MAX_GROUPS - 1;
		if (getgrouplist(pw->pw_name, u.gid, u.groups + 1, &n) >= 0)
			u.n_groups += (size_t)n;
	}
	*ret = u;
	return 1;
}

static bool in_groups(const struct vm_qemu_user *u, gid_t g)
{
	for (size_t i = 0; i < u->n_groups; i++)
		if (u->groups[i] == g)
			return true;
	return false;
}

/* The kernel's order: the owner bits alone for the owner, then the group's, then the others'. */
static bool searchable(const struct vm_qemu_user *u, const struct stat *st, const char **fix)
{
	if (st->st_uid == u->uid) {
		*fix = "u+x";
		return st->st_mode & S_IXUSR;
	}
	if (in_groups(u, st->st_gid)) {
		*fix = "g+x";
		return st->st_mode & S_IXGRP;
	}
	*fix = "o+x";
	return st->st_mode & S_IXOTH;
}

static void owner_names(const struct stat *st, char *buf, size_t len)
{
	char pwbuf[4096], grbuf[4096], us[32], gs[32];
	struct passwd pwd, *pw = NULL;
	struct group grp, *gr = NULL;

	(void)getpwuid_r(st->st_uid, &pwd, pwbuf, sizeof(pwbuf), &pw);
	(void)getgrgid_r(st->st_gid, &grp, grbuf, sizeof(grbuf), &gr);
	(void)snprintf(us, sizeof(us), "%u", (unsigned)st->st_uid);
	(void)snprintf(gs, sizeof(gs), "%u", (unsigned)st->st_gid);
	(void)snprintf(buf, len, "%s:%s", pw ? pw->pw_name : us, gr ? gr->gr_name : gs);
}

int vm_qemu_user_reach(const struct vm_qemu_user *u, const char *dir, char *msg, size_t len)
{
	char path[PATH_MAX], prefix[PATH_MAX];
	size_t n;
	struct stat st;

	if (!realpath(dir, path)) {
		int r = -errno;
		(void)snprintf(msg, len, "%s: %s", dir, strerror(-r));
		return r;
	}
	n = strlen(path);
	/* Each prefix in turn: "/", "/a", "/a/b", ... */
	for (size_t i = 0; i <= n; i++) {
		const char *fix = "o+x";
		char owner[80];

		if (i > 0 && i < n && path[i] != '/')
			continue;
		if (i == 0)
			(void)snprintf(prefix, sizeof(prefix), "/");
		else if (i == 1)
			continue; /* "/" again, or "/x" with i at its end: checked at i == n */
		else {
			memcpy(prefix, path, i);
			prefix[i] = '\0';
		}
		if (stat(prefix, &st) < 0) {
			int r = -errno;
			(void)snprintf(msg, len, "%s: %s", prefix, strerror(-r));
			return r;
		}
		if (!searchable(u, &st, &fix)) {
			owner_names(&st, owner, sizeof(owner));
			(void)snprintf(msg, len,
			               "QEMU runs as user %s (uid %u, gid %u) and cannot search %s "
			               "(%s, mode %04o): 'chmod %s %s', or a state directory that "
			               "user can reach",
			               u->name, (unsigned)u->uid, (unsigned)u->gid, prefix, owner,
			               (unsigned)(st.st_mode & 07777), fix, prefix);
			return 1;
		}
	}
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Users and groups from /etc/passwd and /etc/group, read directly: a static glibc would need
 * the NSS modules of the glibc it was built with at run time, which a guest may not have.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest.h"

/* Splits a line at ':' into at most max fields. Returns how many. */
static int split(char *line, char **fields, int max)
{
	int n = 0;

	line[strcspn(line, "\n")] = '\0';
	fields[n++] = line;
	for (char *p = line; *p && n < max; p++) {
		if (*p == ':') {
			*p = '\0';
			fields[n++] = p + 1;
		}
	}
	return n;
}

static bool parse_id(const char *s, unsigned *ret)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > 0xfffffffeul)
		return false;
	*ret = (unsigned)v;
	return true;
}

int user_lookup(const char *name, size_t len, uid_t uid, struct guest_user *ret)
{
	char line[1024];
	int r = -ENOENT;
	FILE *f = fopen("/etc/passwd", "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *fld[7];
		unsigned id, gid;

		if (!strchr(line, '\n') && !feof(f)) {
			/* An overlong line: skip the rest of it. */
			int c;
			while ((c = fgetc(f)) != EOF && c != '\n')
				;
			continue;
		}
		if (split(line, fld, 7) != 7 || !parse_id(fld[2], &id) || !parse_id(fld[3], &gid))
			continue;
		if (name ? strlen(fld[0]) != len || memcmp(fld[0], name, len) != 0 : id != uid)
			continue;
		if (strlen(fld[0]) >= sizeof(ret->name) || strlen(fld[5]) >= sizeof(ret->home) ||
		    strlen(fld[6]) >= sizeof(ret->shell))
			continue;
		strcpy(ret->name, fld[0]);
		ret->uid = id;
		ret->gid = gid;
		strcpy(ret->home, fld[5][0] ? fld[5] : "/");
		strcpy(ret->shell, fld[6][0] ? fld[6] : "/bin/sh");
		r = 0;
		break;
	}
	(void)fclose(f);
	return r;
}

int user_groups(const struct guest_user *u, gid_t *groups, int max)
{
	char line[4096];
	int n = 0;
	FILE *f;

	if (max < 1)
		return 0;
	groups[n++] = u->gid;
	f = fopen("/etc/group", "re");
	if (!f)
		return n;
	while (n < max && fgets(line, sizeof(line), f)) {
		char *fld[4];
		unsigned gid;

		if (!strchr(line, '\n') && !feof(f)) {
			int c;
			while ((c = fgetc(f)) != EOF && c != '\n')
				;
			continue;
		}
		if (split(line, fld, 4) != 4 || !parse_id(fld[2], &gid) || gid == u->gid)
			continue;
		for (char *m = strtok(fld[3], ","); m; m = strtok(NULL, ",")) {
			if (strcmp(m, u->name) == 0) {
				groups[n++] = gid;
				break;
			}
		}
	}
	(void)fclose(f);
	return n;
}

int user_default(struct guest_user *u)
{
	if (user_lookup("slate", 5, 0, u) == 0 || user_lookup(NULL, 0, 1000, u) == 0)
		return 0;
	if (user_lookup(NULL, 0, 0, u) == 0)
		return 0;
	*u = (struct guest_user){.name = "root", .home = "/root", .shell = "/bin/sh"};
	return 0;
}

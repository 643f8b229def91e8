/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "workspace/audit.h"
#include "workspace/internal.h"
#include "workspace/workspace.h"

#define AUDIT_FILE "audit.jsonl"
#define AUDIT_OLD "audit.jsonl.1"

/* Serialises rotation against appends within this process (slated is the only writer). */
static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;

static int open_ws_dir(struct workspace_store *st, const char *name, int *ret_fd)
{
	int r = workspace_name_check(name);

	if (r < 0)
		return r;
	return fs_open_dir_at(st->dirfd, name, ret_fd);
}

int audit_append(struct workspace_store *st, const char *name, const char *type,
                 struct json_object *ev)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_close_ int dfd = -1, fd = -1;
	struct timespec ts;
	const char *line;
	size_t len;
	struct stat s;
	int r;

	if (!o)
		return -ENOMEM;
	(void)clock_gettime(CLOCK_REALTIME, &ts);
	if (json_add(o, "time",
	             json_object_new_double((double)ts.tv_sec +
	                                    (double)(ts.tv_nsec / 1000000) / 1000.0)) < 0 ||
	    json_add_string(o, "type", type) < 0)
		return -ENOMEM;
	if (ev) {
		json_object_object_foreach (ev, k, v) {
			if (streq(k, "time") || streq(k, "type"))
				continue;
			if (json_add(o, k, json_object_get(v)) < 0)
				return -ENOMEM;
		}
	}
	line = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	if (!line)
		return -ENOMEM;
	len = strlen(line);
	if (len + 1 > AUDIT_LINE_MAX)
		return SLATE_ERR_TOO_LARGE;

	r = open_ws_dir(st, name, &dfd);
	if (r < 0)
		return r;
	pthread_mutex_lock(&audit_lock);
	if (fstatat(dfd, AUDIT_FILE, &s, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (uint64_t)s.st_size >= AUDIT_ROTATE_BYTES)
		(void)renameat(dfd, AUDIT_FILE, dfd, AUDIT_OLD);
	fd = openat(dfd, AUDIT_FILE, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		r = -errno;
	} else {
		char *b = malloc(len + 1);
		if (!b) {
			r = -ENOMEM;
		} else {
			memcpy(b, line, len);
			b[len] = '\n';
			/* One write: O_APPEND makes it land whole at the end. */
			r = fs_write_all(fd, b, len + 1);
			free(b);
		}
	}
	pthread_mutex_unlock(&audit_lock);
	return r;
}

static bool type_wanted(struct json_object *ev, const char *const *types)
{
	const char *t;

	if (!types)
		return true;
	if (json_get_string(ev, "type", &t) < 0)
		return false;
	for (; *types; types++)
		if (streq(*types, t))
			return true;
	return false;
}

static int read_lines(int dfd, const char *file, const char *const *types, struct json_object *arr)
{
	_cleanup_buf_ struct buf *b = NULL;
	const char *p, *end, *nl;
	int r;

	r = fs_read_file_at(dfd, file, AUDIT_ROTATE_BYTES * 2, &b);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	p = (const char *)buf_ptr(b);
	end = p + buf_len(b);
	for (; p < end; p = nl + 1) {
		struct json_object *ev = NULL;
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			break; /* a torn last line */
		if (json_parse_object(p, (size_t)(nl - p), AUDIT_LINE_MAX, &ev) < 0)
			continue;
		if (!type_wanted(ev, types) || json_object_array_add(arr, ev) < 0)
			json_object_put(ev);
	}
	return 0;
}

int audit_read(struct workspace_store *st, const char *name, const char *const *types, size_t max,
               struct json_object **ret)
{
	_cleanup_json_ struct json_object *arr = json_object_new_array();
	_cleanup_close_ int dfd = -1;
	int r;

	if (!arr)
		return -ENOMEM;
	r = open_ws_dir(st, name, &dfd);
	if (r < 0)
		return r;
	pthread_mutex_lock(&audit_lock);
	r = read_lines(dfd, AUDIT_OLD, types, arr);
	if (r >= 0)
		r = read_lines(dfd, AUDIT_FILE, types, arr);
	pthread_mutex_unlock(&audit_lock);
	if (r < 0)
		return r;
	if (max && json_object_array_length(arr) > max) {
		size_t drop = json_object_array_length(arr) - max;
		if (json_object_array_del_idx(arr, 0, drop) < 0)
			return -ENOMEM;
	}
	*ret = TAKE_PTR(arr);
	return 0;
}

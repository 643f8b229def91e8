/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate cp: files and directories between the host and a running workspace, as tar streams
 * through an exec session ('tar' runs in the guest as the workspace user, so what lands there is
 * the user's). The host side reads and writes its tar with libarchive in a child process of its
 * own, with its own working directory: the child that unpacks what the guest sent treats it as
 * hostile (the guest has root): every entry must lie under the name that was asked for, nothing
 * is written through a symlink, no "..", no absolute name, no device node, no owner or
 * set-id bit.
 */

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "slate.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/size.h"
#include "util/time.h"
#include "workspace/workspace.h"

#define CP_BLOCK (256u * 1024)

/*
 * Into the guest: DEST ($1) an existing directory takes the entry NAME ($2) as it comes; else
 * the entry is unpacked beside DEST and renamed onto it (so a file is replaced whole, never
 * half-written).
 */
static const char cp_in_script[] =
        "d=$1 n=$2\n"
        "if [ -d \"$d\" ]; then exec tar -xf - -C \"$d\"; fi\n"
        "case $d in */) echo \"$d: no such directory\" >&2; exit 1;; esac\n"
        "p=$(dirname \"$d\")\n"
        "[ -d \"$p\" ] || { echo \"$p: no such directory\" >&2; exit 1; }\n"
        "t=$(mktemp -d -p \"$p\" .slate-cp.XXXXXX) || exit 1\n"
        "if ! tar -xf - -C \"$t\"; then rm -rf \"$t\"; exit 1; fi\n"
        "if [ -d \"$t/$n\" ] && [ -e \"$d\" ]; then\n"
        "  echo \"cannot overwrite non-directory $d with a directory\" >&2; rm -rf \"$t\"; exit 1\n"
        "fi\n"
        "mv -f \"$t/$n\" \"$d\"; r=$?; rm -rf \"$t\"; exit $r\n";
/* Out of the guest: SRC ($1) as one tar entry named by its last component. */
static const char cp_out_script[] =
        "cd \"$(dirname \"$1\")\" && exec tar -cf - \"$(basename \"$1\")\"\n";
/* Into the guest from a tar stream on stdin: DEST must be a directory. */
static const char cp_in_raw_script[] = "exec tar -xf - -C \"$1\"\n";

struct cp_stats {
	unsigned long long files, bytes;
};

struct cp_job {
	const char *what;
	bool progress;
	/* Unpacking: the top entry the guest must send, and the name it gets here (NULL: the
	 * same); dest_is_file: DEST exists and is not a directory. */
	const char *top, *rename_to;
	bool dest_is_file;
	int stats_fd; /* the child reports its totals here */
};

static int cp_fail(const struct cp_job *j, const char *fmt, ...) _printf_(2, 3);
static int cp_fail(const struct cp_job *j, const char *fmt, ...)
{
	va_list ap;

	if (j->progress)
		fputc('\n', stderr);
	va_start(ap, fmt);
	slate_vsay(j->what, fmt, ap);
	va_end(ap);
	return 1;
}

static void show_progress(const struct cp_job *j, const struct cp_stats *st, double *last,
                          bool final)
{
	char b[32];
	double t = time_mono_s();

	if (!j->progress || (!final && t - *last < 0.5))
		return;
	*last = t;
	fprintf(stderr, "\rslate: %s: %s in %llu file%s%s", j->what,
	        size_format(st->bytes, b, sizeof(b)), st->files, st->files == 1 ? "" : "s",
	        final ? "\n" : "");
}

static void report_stats(const struct cp_job *j, const struct cp_stats *st)
{
	if (j->stats_fd >= 0)
		(void)!write(j->stats_fd, st, sizeof(*st));
}

/* The last component of path, as basename(1) gives it ("a/b/" -> "b"), in buf. */
static const char *last_component(const char *path, char *buf, size_t len)
{
	(void)snprintf(buf, len, "%s", path);
	return basename(buf);
}

/* The guest's name for ENTRY, under top (the asked-for name), mapped to the name it gets here.
 * Returns 0 with *ret set (malloc'd), or -EPERM for a name outside top. */
static int map_entry_name(const struct cp_job *j, const char *name, char **ret)
{
	const char *p = name, *rest;
	size_t tl = strlen(j->top);

	/* tar writes "top", "top/x" or, for ".", "./x": a leading "./" on anything else is
	 * dropped, as tar does. */
	if (strcmp(j->top, ".") != 0)
		while (p[0] == '.' && p[1] == '/')
			p += 2;
	if (strncmp(p, j->top, tl) != 0 || (p[tl] != '\0' && p[tl] != '/'))
		return -EPERM;
	rest = p + tl;
	for (const char *c = rest; *c;) {
		while (*c == '/')
			c++;
		if (c[0] == '.' && c[1] == '.' && (c[2] == '/' || c[2] == '\0'))
			return -EPERM;
		c += strcspn(c, "/");
	}
	if (asprintf(ret, "%s%s", j->rename_to ? j->rename_to : j->top, rest) < 0)
		return -ENOMEM;
	/* "top/" is the directory top: compare and write names without the slash. */
	for (size_t n = strlen(*ret); n > 1 && (*ret)[n - 1] == '/'; n--)
		(*ret)[n - 1] = '\0';
	return 0;
}

static int copy_data(struct archive *in, struct archive *out, struct cp_stats *st,
                     const struct cp_job *j, double *last)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	int r;

	while ((r = archive_read_data_block(in, &buf, &len, &off)) == ARCHIVE_OK) {
		if (archive_write_data_block(out, buf, len, off) < ARCHIVE_OK)
			return -1;
		st->bytes += len;
		show_progress(j, st, last, false);
	}
	return r == ARCHIVE_EOF ? 0 : -1;
}

/* The child that unpacks the guest's tar from fd into the current directory. */
static int unpack_child(const struct cp_job *j, int fd)
{
	struct archive *in = archive_read_new(), *out = archive_write_disk_new();
	struct archive_entry *e;
	struct cp_stats st = {0};
	double last = 0;
	int r, rc = 0;
	bool top_seen = false;

	if (!in || !out)
		return cp_fail(j, "out of memory");
	(void)archive_read_support_format_tar(in);
	(void)archive_read_support_format_empty(in);
	(void)archive_write_disk_set_options(out, ARCHIVE_EXTRACT_TIME |
	                                                  ARCHIVE_EXTRACT_SECURE_SYMLINKS |
	                                                  ARCHIVE_EXTRACT_SECURE_NODOTDOT |
	                                                  ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
	if (archive_read_open_fd(in, fd, CP_BLOCK) != ARCHIVE_OK)
		return cp_fail(j, "reading the guest's tar: %s", archive_error_string(in));
	while ((r = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e), *link = archive_entry_hardlink(e);
		_cleanup_free_ char *mapped = NULL, *mapped_link = NULL;
		mode_t type = archive_entry_filetype(e);

		if (!name || map_entry_name(j, name, &mapped) < 0 ||
		    (link && map_entry_name(j, link, &mapped_link) < 0)) {
			rc = cp_fail(j,
			             "the guest sent '%s'%s%s, outside '%s': refused, stopped here",
			             name ? name : "(no name)", link ? " linked to " : "",
			             link ? link : "", j->top);
			break;
		}
		if (!mapped_link && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
			fprintf(stderr,
			        "slate: %s: skipping '%s': not a file, directory or symlink\n",
			        j->what, name);
			continue;
		}
		if (strcmp(mapped, j->rename_to ? j->rename_to : j->top) == 0) {
			if (j->dest_is_file && type == AE_IFDIR) {
				rc = cp_fail(j, "cannot overwrite the file '%s' with a directory",
				             mapped);
				break;
			}
			top_seen = true;
		}
		archive_entry_set_pathname(e, mapped);
		if (mapped_link)
			archive_entry_set_hardlink(e, mapped_link);
		/* Owners are the user's here; set-id and sticky bits never come along. */
		archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
		if (archive_write_header(out, e) < ARCHIVE_OK ||
		    (archive_entry_size(e) > 0 && copy_data(in, out, &st, j, &last) < 0) ||
		    archive_write_finish_entry(out) < ARCHIVE_OK) {
			rc = cp_fail(j, "%s: %s", mapped, archive_error_string(out));
			break;
		}
		if (type != AE_IFDIR)
			st.files++;
	}
	if (rc == 0 && r != ARCHIVE_EOF)
		rc = cp_fail(j, "reading the guest's tar: %s", archive_error_string(in));
	if (rc == 0 && !top_seen)
		rc = 1; /* the guest's tar said why (no such file...) */
	show_progress(j, &st, &last, true);
	report_stats(j, &st);
	(void)archive_write_free(out);
	(void)archive_read_free(in);
	return rc;
}

/* The child that packs name (in the current directory) as a tar onto fd. */
static int pack_child(const struct cp_job *j, const char *name, int fd)
{
	struct archive *disk = archive_read_disk_new(), *out = archive_write_new();
	struct archive_entry *e;
	struct cp_stats st = {0};
	double last = 0;
	int r, rc = 0;

	if (!disk || !out)
		return cp_fail(j, "out of memory");
	/* Follow a symlink named on the command line, as cp does; keep the ones below it. */
	(void)archive_read_disk_set_symlink_hybrid(disk);
	(void)archive_read_disk_set_standard_lookup(disk);
	(void)archive_write_set_format_pax_restricted(out);
	(void)archive_write_set_bytes_in_last_block(out, 1);
	if (archive_write_open_fd(out, fd) != ARCHIVE_OK)
		return cp_fail(j, "%s", archive_error_string(out));
	if (archive_read_disk_open(disk, name) != ARCHIVE_OK)
		return cp_fail(j, "%s", archive_error_string(disk));
	for (;;) {
		mode_t type;

		e = archive_entry_new();
		if (!e)
			return cp_fail(j, "out of memory");
		r = archive_read_next_header2(disk, e);
		if (r == ARCHIVE_EOF) {
			archive_entry_free(e);
			break;
		}
		if (r < ARCHIVE_WARN) {
			rc = cp_fail(j, "%s", archive_error_string(disk));
			archive_entry_free(e);
			break;
		}
		(void)archive_read_disk_descend(disk);
		type = archive_entry_filetype(e);
		if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
			fprintf(stderr,
			        "slate: %s: skipping '%s': not a file, directory or symlink\n",
			        j->what, archive_entry_pathname(e));
			archive_entry_free(e);
			continue;
		}
		/* The host's user and group names and ids are none of the guest's business. */
		archive_entry_set_uid(e, 0);
		archive_entry_set_gid(e, 0);
		archive_entry_set_uname(e, NULL);
		archive_entry_set_gname(e, NULL);
		if (archive_write_header(out, e) < ARCHIVE_OK) {
			rc = cp_fail(j, "%s", archive_error_string(out));
			archive_entry_free(e);
			break;
		}
		if (type == AE_IFREG && archive_entry_size(e) > 0) {
			const void *buf;
			size_t len;
			la_int64_t off;
			while ((r = archive_read_data_block(disk, &buf, &len, &off)) ==
			       ARCHIVE_OK) {
				if (archive_write_data(out, buf, len) < 0)
					break;
				st.bytes += len;
				show_progress(j, &st, &last, false);
			}
			if (r != ARCHIVE_EOF) {
				rc = cp_fail(j, "%s: %s", archive_entry_pathname(e),
				             archive_error_string(r == ARCHIVE_OK ? out : disk));
				archive_entry_free(e);
				break;
			}
		}
		if (type != AE_IFDIR)
			st.files++;
		archive_entry_free(e);
	}
	if (archive_write_close(out) != ARCHIVE_OK && rc == 0)
		rc = cp_fail(j, "%s", archive_error_string(out));
	show_progress(j, &st, &last, true);
	report_stats(j, &st);
	(void)archive_write_free(out);
	(void)archive_read_free(disk);
	return rc;
}

/* Forks the child that packs or unpacks in dir, with the other end of a pipe. Returns its pid,
 * with *ret_fd our end (the write end when unpacking). */
static pid_t spawn_child(const struct cp_job *j, const char *dir, bool unpack, const char *name,
                         int *ret_fd)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		int fd = unpack ? p[0] : p[1];
		(void)signal(SIGPIPE, SIG_DFL);
		close(unpack ? p[1] : p[0]);
		if (chdir(dir) < 0)
			_exit(cp_fail(j, "%s: %s", dir, strerror(errno)));
		_exit(unpack ? unpack_child(j, fd) : pack_child(j, name, fd));
	}
	close(unpack ? p[0] : p[1]);
	*ret_fd = unpack ? p[1] : p[0];
	return pid;
}

static int child_wait(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* "NAME:PATH" names a guest path when NAME has no '/' (./a:b is a host file). */
static bool is_guest_spec(const char *arg)
{
	const char *c = strchr(arg, ':');
	return c && c != arg && memchr(arg, '/', (size_t)(c - arg)) == NULL;
}

struct cp_args {
	char name[WORKSPACE_NAME_MAX + 1];
	char gpath[PATH_MAX + 2]; /* the guest path, "./" in front of one starting with '-' */
	const char *host;         /* the host path or "-" */
};

static int split_guest_spec(struct slate_ctx *ctx, const char *arg, struct cp_args *a)
{
	const char *c = strchr(arg, ':');
	size_t n = (size_t)(c - arg);

	if (n > WORKSPACE_NAME_MAX)
		return slate_usage_error(ctx, "cp: '%.*s': not a workspace name", (int)n, arg);
	memcpy(a->name, arg, n);
	a->name[n] = '\0';
	if (workspace_name_check(a->name) < 0)
		return slate_usage_error(ctx, "cp: invalid name '%s': %s", a->name,
		                         WORKSPACE_NAME_RULE);
	c++;
	if (!*c)
		return slate_usage_error(ctx, "cp: give a path after '%s:'", a->name);
	if (strlen(c) > PATH_MAX)
		return slate_usage_error(ctx, "cp: the guest path is over %d bytes", PATH_MAX);
	n = c[0] == '-' ? 2 : 0;
	memcpy(a->gpath, "./", n);
	memcpy(a->gpath + n, c, strlen(c) + 1);
	return 0;
}

static int run_guest(struct slate_ctx *ctx, const struct cp_job *j, const struct cp_args *a,
                     const char *script, const char *arg2, int in_fd, int out_fd)
{
	char *argv[] = {
	        (char *)"sh", (char *)"-c", (char *)script, (char *)"slate-cp", (char *)a->gpath,
	        (char *)arg2, NULL};
	struct exec_opts o = {.interactive = in_fd >= 0, .argv = argv, .argc = arg2 ? 6 : 5};
	bool ended = false;
	int status =
	        slate_exec_fds(ctx, j->what, a->name, &o, in_fd, out_fd, STDERR_FILENO, &ended);

	if (!ended)
		return status ? status : 1;
	/* The guest's sh or tar said what failed; its own status means nothing to a caller. */
	return status ? 1 : 0;
}

static int print_json(const struct cp_args *a, bool out, const struct cp_stats *st, double t0)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	char g[sizeof(a->name) + sizeof(a->gpath) + 2];

	(void)snprintf(g, sizeof(g), "%s:%s", a->name, a->gpath);
	if (!o || json_add_string(o, "source", out ? g : a->host) < 0 ||
	    json_add_string(o, "destination", out ? a->host : g) < 0 ||
	    json_add_int64(o, "files", (int64_t)st->files) < 0 ||
	    json_add_int64(o, "bytes", (int64_t)st->bytes) < 0 ||
	    json_add(o, "seconds", json_object_new_double(time_mono_s() - t0)) < 0)
		return slate_fail("cp", "out of memory");
	return slate_print_json(o);
}

static bool read_stats(int fd, struct cp_stats *st)
{
	return read(fd, st, sizeof(*st)) == (ssize_t)sizeof(*st);
}

/* NAME:PATH to the host path (a directory to copy into, or the new name) or "-" (stdout). */
static int copy_out(struct slate_ctx *ctx, struct cp_job *j, const struct cp_args *a, int sp[2])
{
	char topbuf[PATH_MAX + 2], dirbuf[PATH_MAX], namebuf[PATH_MAX];
	const char *dir = a->host;
	struct stat s;
	pid_t pid;
	int r, fd, status, child;

	if (strcmp(a->host, "-") == 0)
		return run_guest(ctx, j, a, cp_out_script, NULL, -1, STDOUT_FILENO);
	j->top = last_component(a->gpath, topbuf, sizeof(topbuf));
	if (strcmp(j->top, "/") == 0 || strcmp(j->top, "..") == 0)
		return slate_usage_error(ctx, "cp: name a file or directory in the guest, not '%s'",
		                         a->gpath);
	r = stat(a->host, &s);
	if (r < 0 && errno != ENOENT)
		return slate_fail("cp", "%s: %s", a->host, strerror(errno));
	if (r < 0 || !S_ISDIR(s.st_mode)) {
		/* Not a directory to copy into: the copy takes this name. */
		if (r < 0 && a->host[strlen(a->host) - 1] == '/')
			return slate_fail("cp", "%s: no such directory", a->host);
		(void)snprintf(dirbuf, sizeof(dirbuf), "%s", a->host);
		dir = dirname(dirbuf);
		j->rename_to = last_component(a->host, namebuf, sizeof(namebuf));
		j->dest_is_file = r == 0;
		if (fs_is_dir(dir) <= 0)
			return slate_fail("cp", "%s: no such directory", dir);
	}
	pid = spawn_child(j, dir, true, NULL, &fd);
	if (pid < 0)
		return slate_fail("cp", "starting the unpacker: %s", strerror(errno));
	close(sp[1]);
	sp[1] = -1;
	status = run_guest(ctx, j, a, cp_out_script, NULL, -1, fd);
	close(fd);
	child = child_wait(pid);
	return status ? status : child;
}

/* The host path (or "-": a tar stream on stdin) to NAME:PATH. */
static int copy_in(struct slate_ctx *ctx, struct cp_job *j, const struct cp_args *a, int sp[2])
{
	char dirbuf[PATH_MAX], namebuf[PATH_MAX];
	const char *name;
	struct stat s;
	pid_t pid;
	int fd, status, child;

	if (strcmp(a->host, "-") == 0)
		return run_guest(ctx, j, a, cp_in_raw_script, NULL, STDIN_FILENO, STDOUT_FILENO);
	if (stat(a->host, &s) < 0)
		return slate_fail("cp", "%s: %s", a->host, strerror(errno));
	name = last_component(a->host, namebuf, sizeof(namebuf));
	if (strcmp(name, "/") == 0 || strcmp(name, "..") == 0 || strcmp(name, ".") == 0)
		return slate_usage_error(ctx, "cp: name a file or directory on the host, not '%s'",
		                         a->host);
	(void)snprintf(dirbuf, sizeof(dirbuf), "%s", a->host);
	pid = spawn_child(j, dirname(dirbuf), false, name, &fd);
	if (pid < 0)
		return slate_fail("cp", "starting the packer: %s", strerror(errno));
	close(sp[1]);
	sp[1] = -1;
	status = run_guest(ctx, j, a, cp_in_script, name, fd, STDOUT_FILENO);
	close(fd);
	child = child_wait(pid);
	return child ? child : status;
}

int cmd_cp(struct slate_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS, {"quiet", no_argument, NULL, 'q'}, {}};
	struct cp_args a = {0};
	struct cp_job j = {.what = "cp", .stats_fd = -1};
	struct cp_stats st = {0};
	bool quiet = false, out;
	int c, r, sp[2] = {-1, -1};
	double t0 = time_mono_s();

	opterr = 0;
	while ((c = getopt_long(argc, argv, "hq", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		if (c == 'q') {
			quiet = true;
			continue;
		}
		if (c == 'h' || c == OPT_HELP) {
			printf("Usage: slate cp [-q] [--json] SRC DEST\n"
			       "Copy a file or directory between the host and the running "
			       "workspace "
			       "NAME; one of SRC and DEST is NAME:PATH (PATH relative to the "
			       "workspace user's home unless absolute).\n\n"
			       "  slate cp FILE|DIR NAME:PATH   into the guest: into PATH if it is "
			       "a "
			       "directory, else as PATH\n"
			       "  slate cp NAME:PATH DIR|FILE   out of the guest: into DIR, or as "
			       "FILE\n"
			       "  slate cp - NAME:DIR           a tar stream on stdin, unpacked in "
			       "DIR\n"
			       "  slate cp NAME:PATH -          PATH as a tar stream on stdout\n\n"
			       "In the guest the copy belongs to the workspace user. Out of the "
			       "guest, "
			       "only files, directories and symlinks under PATH are written, never "
			       "through a symlink, without owners or set-id bits.\n"
			       "  -q, --quiet   no progress on stderr\n"
			       "  --json        print what was copied: files, bytes, seconds\n");
			return 0;
		}
		return slate_usage_error(ctx, "cp: unknown option '%s'", argv[optind - 1]);
	}
	if (argc - optind != 2)
		return slate_usage_error(ctx, "cp: give a SRC and a DEST, one of them NAME:PATH");
	out = is_guest_spec(argv[optind]);
	if (out == is_guest_spec(argv[optind + 1]))
		return slate_usage_error(ctx,
		                         out ? "cp: copy between two workspaces through the host"
		                             : "cp: one of SRC and DEST must be NAME:PATH");
	r = split_guest_spec(ctx, argv[optind + (out ? 0 : 1)], &a);
	if (r)
		return r;
	a.host = argv[optind + (out ? 1 : 0)];
	if (!*a.host)
		return slate_usage_error(ctx, "cp: the host path is empty");
	if (strcmp(a.host, "-") == 0 && ctx->json)
		return slate_usage_error(ctx, "cp: --json and '-' both want stdout");
	if (strcmp(a.host, "-") == 0 && !out && isatty(STDIN_FILENO))
		return slate_usage_error(ctx, "cp: '-' reads a tar stream, not a terminal");
	if (strcmp(a.host, "-") == 0 && out && isatty(STDOUT_FILENO))
		return slate_usage_error(ctx, "cp: '-' writes a tar stream, not to a terminal");
	j.progress = !quiet && !ctx->json && isatty(STDERR_FILENO) == 1;
	if (pipe2(sp, O_CLOEXEC) < 0)
		return slate_fail("cp", "pipe: %s", strerror(errno));
	j.stats_fd = sp[1];
	r = out ? copy_out(ctx, &j, &a, sp) : copy_in(ctx, &j, &a, sp);
	if (sp[1] >= 0)
		close(sp[1]);
	if (r == 0 && ctx->json) {
		if (!read_stats(sp[0], &st))
			st = (struct cp_stats){0};
		r = print_json(&a, out, &st, t0);
	}
	close(sp[0]);
	return r;
}

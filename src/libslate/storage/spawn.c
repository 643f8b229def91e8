/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage/spawn.h"
#include "util/log.h"
#include "util/macro.h"

#define SPAWN_OUTPUT_MAX 4096

extern char **environ;

static bool is_executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Looks name up in $PATH, then in the usual system directories. */
static int find_program(const char *name, char **ret)
{
	static const char *const fallback[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
	const char *path = getenv("PATH");
	char buf[4096];

	if (!name || !*name)
		return -EINVAL;
	if (strchr(name, '/')) {
		if (!is_executable(name))
			return -ENOENT;
		*ret = strdup(name);
		return *ret ? 0 : -ENOMEM;
	}
	for (const char *p = path ? path : ""; *p;) {
		size_t n = strcspn(p, ":");

		if (n > 0 &&
		    snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, name) < (int)sizeof(buf) &&
		    is_executable(buf)) {
			*ret = strdup(buf);
			return *ret ? 0 : -ENOMEM;
		}
		p += n;
		if (*p == ':')
			p++;
	}
	for (size_t i = 0; i < ELEMENTSOF(fallback); i++) {
		(void)snprintf(buf, sizeof(buf), "%s/%s", fallback[i], name);
		if (is_executable(buf)) {
			*ret = strdup(buf);
			return *ret ? 0 : -ENOMEM;
		}
	}
	return -ENOENT;
}

static void trim_output(char *s, size_t *len)
{
	while (*len > 0 && (s[*len - 1] == '\n' || s[*len - 1] == ' ' || s[*len - 1] == '\t' ||
	                    s[*len - 1] == '\r'))
		(*len)--;
	s[*len] = '\0';
	/* The message ends up in a JSON reply or a log line: keep it printable. */
	for (size_t i = 0; i < *len; i++)
		if ((unsigned char)s[i] < 0x20 && s[i] != '\n' && s[i] != '\t')
			s[i] = ' ';
}

int spawn_run(const char *const *argv, char **ret_output)
{
	_cleanup_free_ char *prog = NULL, *out = NULL;
	_cleanup_close_ int rd = -1, wr = -1, null = -1;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	size_t len = 0;
	pid_t pid;
	int p[2], status, r;

	if (!argv || !argv[0])
		return -EINVAL;
	r = find_program(argv[0], &prog);
	if (r < 0)
		return r;
	out = malloc(SPAWN_OUTPUT_MAX + 1);
	if (!out)
		return -ENOMEM;
	/* Opened here: a missing /dev/null must not look like a missing program. */
	null = open("/dev/null", O_RDONLY | O_NOCTTY | O_CLOEXEC);
	if (null < 0)
		return -errno;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	rd = p[0];
	wr = p[1];

	r = posix_spawn_file_actions_init(&fa);
	if (r != 0)
		return -r;
	r = posix_spawnattr_init(&attr);
	if (r != 0) {
		(void)posix_spawn_file_actions_destroy(&fa);
		return -r;
	}
	/* The child starts with default signal handling and nothing blocked, whatever we did. */
	(void)sigemptyset(&none);
	(void)sigfillset(&all);
	r = posix_spawn_file_actions_adddup2(&fa, null, STDIN_FILENO);
	if (r == 0)
		r = posix_spawn_file_actions_adddup2(&fa, wr, STDOUT_FILENO);
	if (r == 0)
		r = posix_spawn_file_actions_adddup2(&fa, wr, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
	/* Libraries do not all open with O_CLOEXEC; no fd of the daemon leaks into a tool. */
	if (r == 0)
		r = posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
#endif
	if (r == 0)
		r = posix_spawnattr_setsigmask(&attr, &none);
	if (r == 0)
		r = posix_spawnattr_setsigdefault(&attr, &all);
	if (r == 0)
		r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	if (r == 0)
		r = posix_spawn(&pid, prog, &fa, &attr, (char *const *)argv, environ);
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)posix_spawnattr_destroy(&attr);
	if (r != 0)
		return -r;
	wr = safe_close(wr);

	/* Keep the start of the output (where tools say what went wrong) and drain the rest. */
	for (;;) {
		char sink[1024];
		size_t room = SPAWN_OUTPUT_MAX - len;
		ssize_t n = room > 0 ? read(rd, out + len, room) : read(rd, sink, sizeof(sink));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (n == 0)
			break;
		if (room > 0)
			len += (size_t)n;
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	trim_output(out, &len);
	log_debug("%s exited with status %d%s%s", prog,
	          WIFEXITED(status) ? WEXITSTATUS(status) : -1, len > 0 ? ": " : "", out);
	if (ret_output)
		*ret_output = TAKE_PTR(out);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -EIO;
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * api/dial: the ssh://[USER@]HOST[:PORT] parser (one table: what is accepted and what it means,
 * what is refused and why), the names it gives endpoints back, what a failed ssh is reported as,
 * and api_bridge() (slate system dial-stdio) carrying a stream both ways through a real
 * socketpair and pipes, with the end of input passed on as a half-close.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/dial.h"
#include "util/fs.h"
#include "util/macro.h"

static void test_parse(void **state)
{
	static const struct {
		const char *url;
		const char *user, *host; /* NULL: refused */
		unsigned port;
		const char *why; /* refused: a piece of the message */
	} cases[] = {
	        {"ssh://host", "", "host", 0, NULL},
	        {"ssh://u@host", "u", "host", 0, NULL},
	        {"ssh://u@host:22", "u", "host", 22, NULL},
	        {"ssh://ci.example.org:2222", "", "ci.example.org", 2222, NULL},
	        {"ssh://first.last_x-y@10.0.0.1:65535", "first.last_x-y", "10.0.0.1", 65535, NULL},
	        {"ssh://[::1]", "", "::1", 0, NULL},
	        {"ssh://root@[::1]:2200", "root", "::1", 2200, NULL},
	        {"ssh://[fe80::1:2]:1", "", "fe80::1:2", 1, NULL},
	        {"ssh://Host_Alias", "", "Host_Alias", 0, NULL},
	        /* other schemes, or none */
	        {"tcp://host:22", NULL, NULL, 0, "only ssh://"},
	        {"unix:///run/slate/slated.sock", NULL, NULL, 0, "only ssh://"},
	        {"SSH://host", NULL, NULL, 0, "only ssh://"},
	        {"host", NULL, NULL, 0, "only ssh://"},
	        {"/run/slate/slated.sock", NULL, NULL, 0, "only ssh://"},
	        {"", NULL, NULL, 0, "only ssh://"},
	        {"ssh:/host", NULL, NULL, 0, "only ssh://"},
	        /* anything after the authority */
	        {"ssh://host/", NULL, NULL, 0, "nothing may follow"},
	        {"ssh://host:22/run/slate/slated.sock", NULL, NULL, 0, "nothing may follow"},
	        {"ssh://host?x=1", NULL, NULL, 0, "nothing may follow"},
	        {"ssh://host#frag", NULL, NULL, 0, "nothing may follow"},
	        /* options smuggled in as names */
	        {"ssh://-oProxyCommand=sh", NULL, NULL, 0, "not starting with '-'"},
	        {"ssh://-p:22", NULL, NULL, 0, "not starting with '-'"},
	        {"ssh://-l@host", NULL, NULL, 0, "not starting with '-'"},
	        {"ssh://u@-host", NULL, NULL, 0, "not starting with '-'"},
	        {"ssh://host%20-oX", NULL, NULL, 0, "HOST must be"},
	        {"ssh://ho;st", NULL, NULL, 0, "HOST must be"},
	        {"ssh://ho$(x)st", NULL, NULL, 0, "HOST must be"},
	        {"ssh://u'x@host", NULL, NULL, 0, "user name must be"},
	        {"ssh://host name", NULL, NULL, 0, "space or a control"},
	        {"ssh://host\n", NULL, NULL, 0, "space or a control"},
	        {"ssh://h\xc3\xa9", NULL, NULL, 0, "space or a control"},
	        /* user and host */
	        {"ssh://u:pw@host", NULL, NULL, 0, "no password"},
	        {"ssh://@host", NULL, NULL, 0, "user name before '@' is empty"},
	        {"ssh://a@b@host", NULL, NULL, 0, "more than one '@'"},
	        {"ssh://", NULL, NULL, 0, "no HOST"},
	        {"ssh://u@", NULL, NULL, 0, "no HOST"},
	        {"ssh://:22", NULL, NULL, 0, "no HOST"},
	        /* IPv6 */
	        {"ssh://::1", NULL, NULL, 0, "in brackets"},
	        {"ssh://fe80::1:22", NULL, NULL, 0, "in brackets"},
	        {"ssh://[::1", NULL, NULL, 0, "without ']'"},
	        {"ssh://[]", NULL, NULL, 0, "no IPv6 address"},
	        {"ssh://[host]", NULL, NULL, 0, "not an IPv6 address"},
	        {"ssh://[10.0.0.1]", NULL, NULL, 0, "not an IPv6 address"},
	        {"ssh://[fe80::1%eth0]", NULL, NULL, 0, "not an IPv6 address"},
	        {"ssh://[::1]x", NULL, NULL, 0, "only ':PORT'"},
	        {"ssh://[::1]]", NULL, NULL, 0, "only ':PORT'"},
	        /* ports */
	        {"ssh://host:", NULL, NULL, 0, "port must be"},
	        {"ssh://host:0", NULL, NULL, 0, "port must be"},
	        {"ssh://host:65536", NULL, NULL, 0, "port must be"},
	        {"ssh://host:022222", NULL, NULL, 0, "port must be"},
	        {"ssh://host:+22", NULL, NULL, 0, "port must be"},
	        {"ssh://host:-1", NULL, NULL, 0, "port must be"},
	        {"ssh://host:22x", NULL, NULL, 0, "port must be"},
	        {"ssh://[::1]:", NULL, NULL, 0, "port must be"},
	};
	char long_user[128], long_host[300];

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		struct api_endpoint ep = {.port = 99};
		char err[256] = "";
		int r = api_endpoint_parse_host(cases[i].url, &ep, err, sizeof(err));

		if (!cases[i].host) {
			if (r != -EINVAL || !strstr(err, cases[i].why))
				fail_msg("'%s': r=%d, err '%s', want '%s'", cases[i].url, r, err,
				         cases[i].why);
			assert_int_equal(ep.port, 99); /* untouched on failure */
			continue;
		}
		if (r != 0)
			fail_msg("'%s' refused: %s", cases[i].url, err);
		assert_true(ep.ssh);
		assert_string_equal(ep.user, cases[i].user);
		assert_string_equal(ep.host, cases[i].host);
		assert_int_equal(ep.port, cases[i].port);
		assert_null(ep.ssh_command);
	}
	/* NULL, and names past their limits. */
	{
		struct api_endpoint ep;
		char err[256];
		assert_int_equal(api_endpoint_parse_host(NULL, &ep, err, sizeof(err)), -EINVAL);
	}
	memset(long_user, 'u', sizeof(long_user));
	(void)snprintf(long_user + 6 + API_SSH_USER_MAX + 1, 32, "@h");
	memcpy(long_user, "ssh://", 6);
	memset(long_host, 'h', sizeof(long_host));
	memcpy(long_host, "ssh://", 6);
	long_host[6 + API_SSH_HOST_MAX + 1] = '\0';
	{
		struct api_endpoint ep;
		char err[256];
		assert_int_equal(api_endpoint_parse_host(long_user, &ep, err, sizeof(err)),
		                 -EINVAL);
		assert_int_equal(api_endpoint_parse_host(long_host, &ep, err, sizeof(err)),
		                 -EINVAL);
		long_host[6 + API_SSH_HOST_MAX] = '\0';
		assert_int_equal(api_endpoint_parse_host(long_host, &ep, err, sizeof(err)), 0);
		assert_int_equal(strlen(ep.host), API_SSH_HOST_MAX);
	}
}

/* The name of a parsed endpoint is its URL again (a canonical one), and parses to the same. */
static void test_name(void **state)
{
	static const char *const urls[] = {"ssh://h", "ssh://u@h", "ssh://u@h:2", "ssh://[::1]",
	                                   "ssh://u@[fe80::2]:22"};
	struct api_endpoint ep, again;
	char name[512], err[256];

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(urls); i++) {
		assert_int_equal(api_endpoint_parse_host(urls[i], &ep, err, sizeof(err)), 0);
		assert_string_equal(api_endpoint_name(&ep, name, sizeof(name)), urls[i]);
		assert_int_equal(api_endpoint_parse_host(name, &again, err, sizeof(err)), 0);
		assert_memory_equal(&ep, &again, sizeof(ep));
	}
	assert_int_equal(api_endpoint_unix("/run/slate/slated.sock", &ep), 0);
	assert_false(ep.ssh);
	assert_string_equal(api_endpoint_name(&ep, name, sizeof(name)), "/run/slate/slated.sock");
	memset(name, 'x', 200);
	name[0] = '/';
	name[200] = '\0';
	assert_int_equal(api_endpoint_unix(name, &ep), -ENAMETOOLONG);
}

/* What a user reads when ssh ends a connection before slated answered. */
static void test_ssh_status(void **state)
{
	static const struct {
		int status;
		const char *want;
	} cases[] = {
	        {255 << 8, "cannot reach slated on ssh://u@h:2: ssh exited 255: it could not "
	                   "connect or log in"},
	        {127 << 8, "ssh exited 127: the remote host has no 'slate' command on its PATH"},
	        {1 << 8, "ssh exited 1: 'slate system dial-stdio' failed on the remote host"},
	        {0, "ended without an answer from slated"},
	        {SIGKILL, "ssh was killed by signal 9"},
	};
	struct api_endpoint ep;
	char buf[512], err[256];

	(void)state;
	assert_int_equal(api_endpoint_parse_host("ssh://u@h:2", &ep, err, sizeof(err)), 0);
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		api_ssh_status_explain(&ep, cases[i].status, buf, sizeof(buf));
		if (!strstr(buf, cases[i].want))
			fail_msg("status %#x: '%s', want '%s'", cases[i].status, buf,
			         cases[i].want);
	}
	/* A missing ssh is said at once, as api_dial()'s error. */
	ep.ssh_command = NULL;
	{
		struct api_conn c = API_CONN_NULL;
		char *path = getenv("PATH");
		char *saved = path ? strdup(path) : NULL;

		(void)setenv("PATH", "/nonexistent", 1);
		assert_int_equal(api_dial(&ep, &c, buf, sizeof(buf)), -ENOENT);
		assert_non_null(strstr(buf, "cannot run ssh"));
		assert_int_equal(c.fd, -1);
		if (saved)
			(void)setenv("PATH", saved, 1);
		free(saved);
	}
}

#define BRIDGE_BYTES (6u * 1024 * 1024 + 12345)

static uint8_t pattern(size_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

/* slated's side: echoes what comes until the end of input (the half-close), then closes. */
_noreturn_ static void echo_server(int fd)
{
	static uint8_t buf[65536];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (fs_write_all(fd, buf, (size_t)n) < 0)
			_exit(2);
	_exit(n == 0 ? 0 : 3);
}

static pid_t start(void (*fn)(int, int, int), int a, int b, int c)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		/* Only its own ends: an inherited write end of a pipe would hold its EOF back. */
		for (int fd = 3; fd < 1024; fd++)
			if (fd != a && fd != b && fd != c)
				(void)close(fd);
		fn(a, b, c);
		_exit(0);
	}
	return pid;
}

static void run_echo(int fd, int unused1, int unused2)
{
	(void)unused1;
	(void)unused2;
	echo_server(fd);
}

static void run_writer(int fd, int unused1, int unused2)
{
	static uint8_t buf[100000];
	size_t off = 0;

	(void)unused1;
	(void)unused2;
	while (off < BRIDGE_BYTES) {
		size_t n = BRIDGE_BYTES - off < sizeof(buf) ? BRIDGE_BYTES - off : sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(off + i);
		if (fs_write_all(fd, buf, n) < 0)
			_exit(2);
		off += n;
	}
	_exit(0);
}

static void run_bridge(int in, int out, int sock)
{
	_exit(api_bridge(in, out, sock) == 0 ? 0 : 4);
}

static int wait_status(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* stdin -> bridge -> socket -> echo -> socket -> bridge -> stdout, byte for byte; the bridge
 * ends only because it passed the end of stdin on and the echo then closed. */
static void test_bridge(void **state)
{
	int in[2], out[2], sv[2];
	pid_t echo, writer, bridge;
	uint8_t buf[65536];
	size_t got = 0;
	ssize_t n;

	(void)state;
	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	echo = start(run_echo, sv[1], -1, -1);
	(void)close(sv[1]);
	bridge = start(run_bridge, in[0], out[1], sv[0]);
	(void)close(in[0]);
	(void)close(out[1]);
	(void)close(sv[0]);
	writer = start(run_writer, in[1], -1, -1);
	(void)close(in[1]);
	while ((n = read(out[0], buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != pattern(got + (size_t)i))
				fail_msg("byte %zu differs", got + (size_t)i);
		got += (size_t)n;
	}
	assert_int_equal(n, 0);
	assert_int_equal(got, BRIDGE_BYTES);
	(void)close(out[0]);
	assert_int_equal(wait_status(writer), 0);
	assert_int_equal(wait_status(echo), 0);
	assert_int_equal(wait_status(bridge), 0);
}

/* A peer that closes at once (slated refusing): the bridge ends, whatever stdin still holds. */
static void test_bridge_peer_closes(void **state)
{
	int in[2], out[2], sv[2];
	pid_t bridge;
	char c;

	(void)state;
	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(write(sv[1], "bye", 3), 3);
	(void)close(sv[1]);
	bridge = start(run_bridge, in[0], out[1], sv[0]);
	(void)close(in[0]);
	(void)close(out[1]);
	(void)close(sv[0]);
	assert_int_equal(wait_status(bridge), 0);
	assert_int_equal(read(out[0], &c, 1), 1);
	assert_int_equal(c, 'b');
	(void)close(in[1]);
	(void)close(out[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse),
	        cmocka_unit_test(test_name),
	        cmocka_unit_test(test_ssh_status),
	        cmocka_unit_test(test_bridge),
	        cmocka_unit_test(test_bridge_peer_closes),
	};

	(void)signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

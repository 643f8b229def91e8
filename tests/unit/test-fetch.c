/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * Downloads against tests/unit/fetch-server.py on 127.0.0.1 (an ephemeral port; skipped when
 * python3 is missing): whole files, Range resume (the server's log shows the header), a
 * connection dropped half-way and resumed, a server that ignores Range, endless bodies with and
 * without Content-Length stopped at the declared size, 404, redirects (to file:// refused),
 * file:// URLs, local documents and their size cap, relative URL resolution; and HTTPS against a
 * second instance with a certificate from a throwaway CA made here with `openssl req` (skipped
 * when the openssl tool is missing): trusted through fetch_request.ca_file it works, an untrusted
 * CA or a host name the certificate is not for is -EKEYREJECTED, never retried.
 */

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "image/fetch.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"

#define FILE_SIZE (3u * 1024u * 1024u + 17u)

extern char **environ;

static char dir[64], port_file[128], log_file[128], data_path[128];
static char base[64];
static pid_t server = -1;
/* The HTTPS server: its CA, and another CA that did not sign its certificate. */
static char tls_port_file[128], ca_file[128], other_ca_file[128];
static char tls_port[16];
static pid_t tls_server = -1;
static const char *const tls_files[] = {"ca.key",  "ca.pem",  "ca.srl",  "other.key", "other.pem",
                                        "srv.key", "srv.csr", "srv.pem", "ext.cnf"};

/*
 * A CA, a certificate it issues for 127.0.0.1 (the subjectAltName is what is checked, not the
 * CN), and an unrelated CA; all in $1, valid for two days.
 */
static const char make_certs[] =
        "set -e; cd \"$1\"\n"
        "ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
        "-keyout $1.key -out $1.pem -days 2 -subj /CN=slate-test-$1 "
        "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign; }\n"
        "ca ca; ca other\n"
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key "
        "-out srv.csr -subj /CN=127.0.0.1\n"
        "printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n"
        "extendedKeyUsage=serverAuth\\n' >ext.cnf\n"
        "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile ext.cnf -out srv.pem\n";
static uint8_t *data;

struct sink {
	uint8_t *p;
	size_t n, cap;
};

static int sink_write(const void *p, size_t n, void *ud)
{
	struct sink *s = ud;

	if (s->n + n > s->cap)
		return -ENOSPC;
	memcpy(s->p + s->n, p, n);
	s->n += n;
	return 0;
}

/* Runs argv to its end, its output thrown away. Returns its exit status, or -1. */
static int run_quiet(char **argv)
{
	posix_spawn_file_actions_t fa;
	int status = -1;
	pid_t pid;

	if (posix_spawn_file_actions_init(&fa) != 0)
		return -1;
	(void)posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	(void)posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ) == 0 &&
	    waitpid(pid, &status, 0) == pid)
		status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	(void)posix_spawn_file_actions_destroy(&fa);
	return status;
}

/* Waits for a server to write its port. */
static int read_port(const char *file, char *out, size_t n)
{
	for (int i = 0; i < 200; i++) {
		struct buf *b = NULL;
		if (fs_read_file_at(AT_FDCWD, file, 32, &b) == 0) {
			char *s = buf_dup_string(b);
			(void)snprintf(out, n, "%s", s ? s : "");
			free(s);
			buf_free(b);
			return 0;
		}
		(void)nanosleep(&(struct timespec){0, 50000000}, NULL);
	}
	return -1;
}

/* The HTTPS server; without the openssl tool there is none, and test_https is skipped. */
static void setup_tls(const char *script)
{
	char sh[] = "sh", dash_c[] = "-c", name[] = "make-certs", python[] = "python3";
	char cert[128], key[128], tls_log[128];
	char *gen[] = {sh, dash_c, (char *)make_certs, name, dir, NULL};
	char *argv[] = {python, (char *)script, dir, tls_port_file, tls_log, cert, key, NULL};

	(void)snprintf(tls_port_file, sizeof(tls_port_file), "%s/tls-port", dir);
	/* The same request log as the plain server's. */
	(void)snprintf(tls_log, sizeof(tls_log), "%s/requests.log", dir);
	(void)snprintf(cert, sizeof(cert), "%s/srv.pem", dir);
	(void)snprintf(key, sizeof(key), "%s/srv.key", dir);
	(void)snprintf(ca_file, sizeof(ca_file), "%s/ca.pem", dir);
	(void)snprintf(other_ca_file, sizeof(other_ca_file), "%s/other.pem", dir);
	if (run_quiet(gen) != 0) {
		printf("# no certificates (is the openssl tool installed?): HTTPS not tested\n");
		return;
	}
	if (posix_spawnp(&tls_server, "python3", NULL, NULL, argv, environ) != 0) {
		tls_server = -1;
		return;
	}
	if (read_port(tls_port_file, tls_port, sizeof(tls_port)) < 0)
		tls_port[0] = '\0';
}

static int setup(void **state)
{
	char script[512], python[] = "python3", port[16];
	char *argv[] = {python, script, dir, port_file, log_file, NULL};
	int fd;

	if (access("/usr/bin/python3", X_OK) != 0)
		return -1;
	(void)snprintf(dir, sizeof(dir), "/tmp/test-fetch.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	(void)snprintf(port_file, sizeof(port_file), "%s/port", dir);
	(void)snprintf(log_file, sizeof(log_file), "%s/requests.log", dir);
	(void)snprintf(data_path, sizeof(data_path), "%s/data.bin", dir);
	(void)snprintf(script, sizeof(script), "%s/unit/fetch-server.py", TEST_DATA_DIR "/..");
	data = malloc(FILE_SIZE);
	if (!data)
		return -1;
	for (size_t i = 0; i < FILE_SIZE; i++)
		data[i] = (uint8_t)(i * 7 + i / 4096);
	fd = open(data_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || fs_write_all(fd, data, FILE_SIZE) < 0)
		return -1;
	close(fd);
	if (posix_spawnp(&server, "python3", NULL, NULL, argv, environ) != 0)
		return -1;
	if (read_port(port_file, port, sizeof(port)) < 0)
		return -1;
	(void)snprintf(base, sizeof(base), "http://127.0.0.1:%s", port);
	setup_tls(script);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	if (server > 0) {
		(void)kill(server, SIGTERM);
		(void)waitpid(server, NULL, 0);
	}
	if (tls_server > 0) {
		(void)kill(tls_server, SIGTERM);
		(void)waitpid(tls_server, NULL, 0);
	}
	free(data);
	(void)snprintf(cmd, sizeof(cmd), "%s/port", dir);
	(void)unlink(cmd);
	(void)unlink(tls_port_file);
	for (size_t i = 0; i < sizeof(tls_files) / sizeof(tls_files[0]); i++) {
		(void)snprintf(cmd, sizeof(cmd), "%s/%s", dir, tls_files[i]);
		(void)unlink(cmd);
	}
	(void)unlink(log_file);
	(void)unlink(data_path);
	(void)rmdir(dir);
	return 0;
}

/* Returns whether the request log has a line containing s. */
static bool logged(const char *s)
{
	struct buf *b = NULL;
	char *text;
	bool found;

	if (fs_read_file_at(AT_FDCWD, log_file, 1 << 20, &b) < 0)
		return false;
	text = buf_dup_string(b);
	found = text && strstr(text, s);
	free(text);
	buf_free(b);
	return found;
}

static int get(const char *path, uint64_t offset, uint64_t max, struct sink *s)
{
	char url[256];
	struct fetch_request req;
	struct slate_error err = {};

	(void)snprintf(url, sizeof(url), "%s%s", path[0] == '/' ? base : "", path);
	req = (struct fetch_request){
	        .url = url, .offset = offset, .max_size = max, .write = sink_write, .ud = s};
	return fetch_once(&req, &err);
}

static void test_whole(void **state)
{
	struct sink s = {.p = malloc(FILE_SIZE), .cap = FILE_SIZE};

	assert_int_equal(get("/data.bin", 0, FILE_SIZE, &s), 0);
	assert_int_equal(s.n, FILE_SIZE);
	assert_memory_equal(s.p, data, FILE_SIZE);
	/* Through a redirect too. */
	s.n = 0;
	assert_int_equal(get("/redirect/data.bin", 0, FILE_SIZE, &s), 0);
	assert_int_equal(s.n, FILE_SIZE);
	free(s.p);
}

static void test_range(void **state)
{
	struct sink s = {.p = malloc(FILE_SIZE), .cap = FILE_SIZE};

	assert_int_equal(get("/data.bin", 1048576, FILE_SIZE, &s), 0);
	assert_int_equal(s.n, FILE_SIZE - 1048576);
	assert_memory_equal(s.p, data + 1048576, s.n);
	assert_true(logged("GET /data.bin bytes=1048576-"));
	/* A server that ignores Range: the first bytes are dropped, not handed on twice. */
	s.n = 0;
	assert_int_equal(get("/norange/data.bin", 1000, FILE_SIZE, &s), 0);
	assert_int_equal(s.n, FILE_SIZE - 1000);
	assert_memory_equal(s.p, data + 1000, s.n);
	free(s.p);
}

static void test_drop_resume(void **state)
{
	struct sink s = {.p = malloc(FILE_SIZE), .cap = FILE_SIZE};
	char want[64];
	int r;

	r = get("/drop/data.bin", 0, FILE_SIZE, &s);
	assert_true(r < 0);
	assert_true(fetch_retryable(r));
	assert_true(s.n > 0 && s.n < FILE_SIZE);
	r = get("/drop/data.bin", s.n, FILE_SIZE, &s);
	assert_int_equal(r, 0);
	assert_int_equal(s.n, FILE_SIZE);
	assert_memory_equal(s.p, data, FILE_SIZE);
	(void)snprintf(want, sizeof(want), "GET /drop/data.bin bytes=");
	assert_true(logged(want));
	free(s.p);
}

static void test_endless(void **state)
{
	struct sink s = {.p = malloc(2u << 20), .cap = 2u << 20};

	assert_int_equal(get("/endless", 0, 1u << 20, &s), SLATE_ERR_SIZE_MISMATCH);
	assert_true(s.n <= (1u << 20));
	s.n = 0;
	/* Announced over the limit: refused before the body. */
	assert_int_equal(get("/endless-cl", 0, 1u << 20, &s), SLATE_ERR_SIZE_MISMATCH);
	assert_int_equal(s.n, 0);
	/* A real file larger than declared. */
	s.n = 0;
	assert_int_equal(get("/data.bin", 0, 1u << 20, &s), SLATE_ERR_SIZE_MISMATCH);
	assert_true(s.n <= (1u << 20));
	free(s.p);
}

static void test_errors(void **state)
{
	struct sink s = {.p = malloc(1024), .cap = 1024};

	assert_int_equal(get("/missing", 0, 1024, &s), -ENOENT);
	assert_false(fetch_retryable(-ENOENT));
	assert_true(get("/redirect-file", 0, 1024, &s) < 0);
	assert_int_equal(s.n, 0);
	assert_int_equal(get("ftp://127.0.0.1/x", 0, 1024, &s), -EPROTONOSUPPORT);
	free(s.p);
}

static void test_file_url(void **state)
{
	struct sink s = {.p = malloc(FILE_SIZE), .cap = FILE_SIZE};
	char *url = NULL;
	struct buf *b = NULL;
	struct slate_error err = {};

	assert_int_equal(fetch_to_url(data_path, &url), 0);
	assert_true(strncmp(url, "file:///", 8) == 0);
	assert_int_equal(get(url, 4096, FILE_SIZE, &s), 0);
	assert_int_equal(s.n, FILE_SIZE - 4096);
	assert_memory_equal(s.p, data + 4096, s.n);
	s.n = 0;
	assert_int_equal(get(url, 0, 100, &s), SLATE_ERR_SIZE_MISMATCH);
	/* Documents: by path and URL, capped. */
	assert_int_equal(fetch_document(data_path, FILE_SIZE, &b, &err), 0);
	assert_int_equal(buf_len(b), FILE_SIZE);
	buf_free(b);
	b = NULL;
	assert_int_equal(fetch_document(data_path, 1000, &b, &err), SLATE_ERR_TOO_LARGE);
	assert_int_equal(fetch_document(url, 1000, &b, &err), SLATE_ERR_TOO_LARGE);
	assert_null(b);
	free(url);
	free(s.p);
}

static void test_resolve(void **state)
{
	char *u = NULL;

	assert_int_equal(fetch_resolve_url("http://h.example/a/cat.json", "img.zst", &u), 0);
	assert_string_equal(u, "http://h.example/a/img.zst");
	free(u);
	assert_int_equal(fetch_resolve_url("http://h.example/a/cat.json", "/x/y", &u), 0);
	assert_string_equal(u, "http://h.example/x/y");
	free(u);
	assert_int_equal(fetch_resolve_url("file:///srv/c.json", "https://o.example/z", &u), 0);
	assert_string_equal(u, "https://o.example/z");
	free(u);
	assert_int_equal(fetch_resolve_url("file:///srv/cat/c.json", "d/disk.img", &u), 0);
	assert_string_equal(u, "file:///srv/cat/d/disk.img");
	free(u);
}

/* A download from the HTTPS server at host (its certificate is for 127.0.0.1). */
static int get_tls(const char *host, uint64_t offset, const char *ca, struct sink *s,
                   struct slate_error *err)
{
	char url[256];
	struct fetch_request req;

	(void)snprintf(url, sizeof(url), "https://%s:%s/data.bin", host, tls_port);
	req = (struct fetch_request){.url = url,
	                             .offset = offset,
	                             .max_size = FILE_SIZE,
	                             .write = sink_write,
	                             .ud = s,
	                             .ca_file = ca};
	return fetch_once(&req, err);
}

static void test_https(void **state)
{
	struct sink s = {.p = malloc(FILE_SIZE), .cap = FILE_SIZE};
	struct slate_error err = {};

	if (!tls_port[0]) {
		free(s.p);
		skip();
	}
	/* Trusted: the whole file, and a resumed rest. */
	assert_int_equal(get_tls("127.0.0.1", 0, ca_file, &s, &err), 0);
	assert_int_equal(s.n, FILE_SIZE);
	assert_memory_equal(s.p, data, FILE_SIZE);
	s.n = 0;
	assert_int_equal(get_tls("127.0.0.1", 4096, ca_file, &s, &err), 0);
	assert_int_equal(s.n, FILE_SIZE - 4096);
	assert_memory_equal(s.p, data + 4096, s.n);
	assert_true(logged("GET /data.bin bytes=4096-"));

	/* The system's store does not know the throwaway CA. */
	s.n = 0;
	assert_int_equal(get_tls("127.0.0.1", 0, NULL, &s, &err), -EKEYREJECTED);
	assert_int_equal(err.code, -EKEYREJECTED);
	assert_non_null(strstr(err.msg, "TLS certificate is not trusted"));
	assert_int_equal(s.n, 0);
	assert_false(fetch_retryable(-EKEYREJECTED));
	/* Nor does a CA that did not issue the certificate. */
	assert_int_equal(get_tls("127.0.0.1", 0, other_ca_file, &s, &err), -EKEYREJECTED);
	assert_non_null(strstr(err.msg, "TLS certificate is not trusted"));
	assert_int_equal(s.n, 0);
	/* The right CA, the wrong name: the certificate is for 127.0.0.1 only. */
	assert_int_equal(get_tls("localhost", 0, ca_file, &s, &err), -EKEYREJECTED);
	assert_non_null(strstr(err.msg, "TLS certificate is not trusted"));
	assert_non_null(strstr(err.msg, "localhost"));
	assert_int_equal(s.n, 0);
	free(s.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_whole),       cmocka_unit_test(test_range),
	        cmocka_unit_test(test_drop_resume), cmocka_unit_test(test_endless),
	        cmocka_unit_test(test_errors),      cmocka_unit_test(test_file_url),
	        cmocka_unit_test(test_resolve),     cmocka_unit_test(test_https),
	};
	if (access("/usr/bin/python3", X_OK) != 0) {
		printf("SKIP: python3 is needed for the local HTTP server\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}

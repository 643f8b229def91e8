/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * agent-serve: slate's SSH agent outside slated, for the tests and the benchmark that drive it
 * with real OpenSSH clients. Not installed.
 *
 *   agent-serve [--state DIR] [--workspaces DIR] [--runtime DIR] [--audit FILE] COMMAND ...
 *     generate WS [--seed-hex HEX]        the managed key (agent_generate); prints its line
 *     import WS FILE [--passphrase-file F] an OpenSSH key (agent_import); prints its line
 *     serve WS SOCKET                      serves WS's agent on a unix socket until SIGTERM
 *     openssh-add SOCKET --seed-hex HEX    adds the ed25519 key of that seed to an OpenSSH
 *                                          agent (SSH_AGENTC_ADD_IDENTITY), for the benchmark
 *     bench SOCKET N                       N sign requests (32 bytes each) for the first key
 *                                          listed; prints the median, p99 and mean in us
 *
 * --state holds install/ (the master key, as slated's does); --workspaces holds <WS>/ssh/;
 * --runtime is where private agents of imported keys live. Audit events go to --audit as
 * JSON lines.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/proto.h"
#include "secrets/install.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

static const char *audit_path;
static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;

static void audit(const char *ws, struct json_object *ev, void *userdata)
{
	FILE *f;

	(void)userdata;
	if (!audit_path)
		return;
	pthread_mutex_lock(&audit_lock);
	f = fopen(audit_path, "ae");
	if (f) {
		fprintf(f, "{\"workspace\":\"%s\",\"event\":%s}\n", ws,
		        json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN));
		fclose(f);
	}
	pthread_mutex_unlock(&audit_lock);
}

static int die(const char *what, int r)
{
	fprintf(stderr, "agent-serve: %s: %s\n", what, slate_strerror(r));
	return 1;
}

static int parse_seed(const char *hex, uint8_t seed[32])
{
	size_t n = 0;

	if (!hex || sodium_hex2bin(seed, 32, hex, strlen(hex), NULL, &n, NULL) != 0 || n != 32)
		return -EINVAL;
	return 0;
}

struct conn_arg {
	struct agent *a;
	const char *ws;
	int fd;
};

static void *conn_main(void *p)
{
	struct conn_arg *c = p;

	agent_serve(c->a, c->fd, c->ws);
	free(c);
	return NULL;
}

static int serve(struct agent *a, const char *ws, const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int lfd;
	sigset_t mask;

	if (strlen(path) >= sizeof(sa.sun_path))
		return die(path, -ENAMETOOLONG);
	strcpy(sa.sun_path, path);
	(void)unlink(path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0)
		return die(path, -errno);
	/* SIGTERM and SIGINT (blocked in every thread, see main) end the loop; main's cleanup
	 * then frees the agent, which stops the private agents. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		struct timespec zero = {0};
		struct conn_arg *c;
		pthread_t t;
		int fd;

		if (sigtimedwait(&mask, NULL, &zero) > 0)
			break;
		{
			struct timeval tv = {.tv_usec = 200000};
			fd_set set;
			FD_ZERO(&set);
			FD_SET(lfd, &set);
			if (select(lfd + 1, &set, NULL, NULL, &tv) <= 0)
				continue;
		}
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		c = malloc(sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		*c = (struct conn_arg){.a = a, .ws = ws, .fd = fd};
		if (pthread_create(&t, NULL, conn_main, c) != 0) {
			close(fd);
			free(c);
			continue;
		}
		(void)pthread_detach(t);
	}
	close(lfd);
	(void)unlink(path);
	return 0;
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* Sends one message body framed and reads one reply frame into *ret (a new buffer). */
static int roundtrip(int fd, const struct buf *msg, struct buf **ret)
{
	_cleanup_buf_ struct buf *out = buf_new(AGENT_MAX_FRAME + 4), *in = NULL;
	uint8_t hdr[4], *p;
	uint32_t len;

	if (!out || agent_frame_put(out, buf_ptr(msg), buf_len(msg)) < 0 ||
	    fs_write_all(fd, buf_ptr(out), buf_len(out)) < 0)
		return -EIO;
	for (size_t got = 0; got < 4;) {
		ssize_t n = read(fd, hdr + got, 4 - got);
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (agent_frame_length_check(len) < 0)
		return -EIO;
	in = buf_new(len);
	if (!in || buf_reserve(in, len, &p) < 0)
		return -ENOMEM;
	for (size_t got = 0; got < len;) {
		ssize_t n = read(fd, p + got, len - got);
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	*ret = TAKE_PTR(in);
	return 0;
}

static int openssh_add(const char *path, const uint8_t seed[32])
{
	_cleanup_buf_ struct buf *msg = buf_new(4096), *reply = NULL;
	uint8_t pk[32], sk[64];
	int fd, r;

	(void)crypto_sign_ed25519_seed_keypair(pk, sk, seed);
	if (!msg || buf_put_u8(msg, SSH_AGENTC_ADD_IDENTITY) < 0 ||
	    buf_put_cstring(msg, AGENT_ED25519_TYPE) < 0 || buf_put_string(msg, pk, 32) < 0 ||
	    buf_put_string(msg, sk, 64) < 0 || buf_put_cstring(msg, "bench") < 0)
		return die("openssh-add", -ENOMEM);
	sodium_memzero(sk, sizeof(sk));
	fd = connect_to(path);
	if (fd < 0)
		return die(path, fd);
	r = roundtrip(fd, msg, &reply);
	close(fd);
	if (r < 0 || buf_len(reply) != 1 || buf_ptr(reply)[0] != SSH_AGENT_SUCCESS)
		return die("openssh-add: the agent refused the key", r < 0 ? r : -EPERM);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int bench(const char *path, unsigned n)
{
	_cleanup_buf_ struct buf *msg = buf_new(64), *reply = NULL, *sign = buf_new(4096);
	_cleanup_free_ uint64_t *t = calloc(n ? n : 1, sizeof(uint64_t));
	const uint8_t *blob;
	size_t blob_len;
	uint32_t nkeys;
	uint8_t type, data[32];
	uint64_t sum = 0;
	int fd, r;

	if (!msg || !sign || !t || n == 0)
		return die("bench", -EINVAL);
	fd = connect_to(path);
	if (fd < 0)
		return die(path, fd);
	(void)buf_put_u8(msg, SSH_AGENTC_REQUEST_IDENTITIES);
	r = roundtrip(fd, msg, &reply);
	if (r < 0 || buf_get_u8(reply, &type) < 0 || type != SSH_AGENT_IDENTITIES_ANSWER ||
	    buf_get_u32(reply, &nkeys) < 0 || nkeys == 0 ||
	    buf_get_string_direct(reply, &blob, &blob_len) < 0)
		return die("bench: no key listed", r < 0 ? r : -ENOENT);
	randombytes_buf(data, sizeof(data));
	if (buf_put_u8(sign, SSH_AGENTC_SIGN_REQUEST) < 0 ||
	    buf_put_string(sign, blob, blob_len) < 0 || buf_put_string(sign, data, 32) < 0 ||
	    buf_put_u32(sign, 0) < 0)
		return die("bench", -ENOMEM);
	for (unsigned i = 0; i < n; i++) {
		_cleanup_buf_ struct buf *rep = NULL;
		uint64_t t0 = now_ns();

		r = roundtrip(fd, sign, &rep);
		t[i] = now_ns() - t0;
		if (r < 0 || buf_ptr(rep)[0] != SSH_AGENT_SIGN_RESPONSE)
			return die("bench: a signature failed", r < 0 ? r : -EIO);
		sum += t[i];
	}
	close(fd);
	qsort(t, n, sizeof(*t), cmp_u64);
	printf("median_us=%.1f p99_us=%.1f mean_us=%.1f n=%u\n", (double)t[n / 2] / 1000.0,
	       (double)t[(size_t)((double)n * 0.99) < n ? (size_t)((double)n * 0.99) : n - 1] /
	               1000.0,
	       (double)sum / n / 1000.0, n);
	return 0;
}

int main(int argc, char **argv)
{
	enum { OPT_STATE = 1, OPT_WS, OPT_RUNTIME, OPT_AUDIT, OPT_SEED, OPT_PASS };
	static const struct option opts[] = {
	        {"state", required_argument, NULL, OPT_STATE},
	        {"workspaces", required_argument, NULL, OPT_WS},
	        {"runtime", required_argument, NULL, OPT_RUNTIME},
	        {"audit", required_argument, NULL, OPT_AUDIT},
	        {"seed-hex", required_argument, NULL, OPT_SEED},
	        {"passphrase-file", required_argument, NULL, OPT_PASS},
	        {},
	};
	const char *state = NULL, *wsdir = NULL, *runtime = NULL, *seed_hex = NULL,
	           *pass_file = NULL;
	_cleanup_(install_freep) struct install *in = NULL;
	_cleanup_(agent_freep) struct agent *a = NULL;
	_cleanup_close_ int state_fd = -1, ws_fd = -1;
	struct agent_config cfg;
	uint8_t seed[32];
	const char *cmd;
	int c, r;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0) {
		switch (c) {
		case OPT_STATE:
			state = optarg;
			break;
		case OPT_WS:
			wsdir = optarg;
			break;
		case OPT_RUNTIME:
			runtime = optarg;
			break;
		case OPT_AUDIT:
			audit_path = optarg;
			break;
		case OPT_SEED:
			seed_hex = optarg;
			break;
		case OPT_PASS:
			pass_file = optarg;
			break;
		default:
			return 2;
		}
	}
	if (optind >= argc)
		return fprintf(stderr, "agent-serve: no command\n"), 2;
	if (sodium_init() < 0)
		return die("libsodium", SLATE_ERR_CRYPTO);
	cmd = argv[optind];
	if (seed_hex && parse_seed(seed_hex, seed) < 0)
		return die("--seed-hex", -EINVAL);
	if (streq(cmd, "openssh-add") && optind + 1 < argc && seed_hex)
		return openssh_add(argv[optind + 1], seed);
	if (streq(cmd, "bench") && optind + 2 < argc)
		return bench(argv[optind + 1], (unsigned)atoi(argv[optind + 2]));
	if (!state || !wsdir || optind + 1 >= argc)
		return fprintf(stderr, "agent-serve: --state and --workspaces, and WS\n"), 2;

	if (streq(cmd, "serve")) {
		sigset_t mask;

		/* Before any thread starts, so that none of them takes the signal. */
		sigemptyset(&mask);
		sigaddset(&mask, SIGTERM);
		sigaddset(&mask, SIGINT);
		(void)pthread_sigmask(SIG_BLOCK, &mask, NULL);
	}
	state_fd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (state_fd < 0)
		return die(state, -errno);
	r = install_open(state_fd, NULL, &in, NULL);
	if (r < 0)
		return die("install_open", r);
	ws_fd = open(wsdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ws_fd < 0)
		return die(wsdir, -errno);
	cfg = (struct agent_config){
	        .workspaces_dirfd = ws_fd, .install = in, .runtime_dir = runtime, .audit = audit};
	r = agent_new(&cfg, &a);
	if (r < 0)
		return die("agent_new", r);

	if (streq(cmd, "generate")) {
		_cleanup_json_ struct json_object *key = NULL;
		const char *line;

		r = agent_generate(a, argv[optind + 1], NULL, seed_hex ? seed : NULL, &key);
		if (r < 0)
			return die("generate", r);
		if (json_get_string(key, "public_key", &line) >= 0)
			printf("%s\n", line);
		return 0;
	}
	if (streq(cmd, "import") && optind + 2 < argc) {
		_cleanup_json_ struct json_object *key = NULL;
		_cleanup_buf_secure_ struct buf *k = NULL, *p = NULL;
		_cleanup_free_ char *pass = NULL;
		struct slate_error err = {0};
		const char *line;

		r = fs_read_file_at(AT_FDCWD, argv[optind + 2], 64 * 1024, &k);
		if (r < 0)
			return die(argv[optind + 2], r);
		if (pass_file) {
			r = fs_read_file_at(AT_FDCWD, pass_file, 4096, &p);
			if (r < 0)
				return die(pass_file, r);
			pass = buf_dup_string(p);
			if (!pass)
				return die("passphrase", -ENOMEM);
			pass[strcspn(pass, "\r\n")] = '\0';
		}
		r = agent_import(a, argv[optind + 1], buf_ptr(k), buf_len(k), pass, &key, &err);
		if (pass)
			sodium_memzero(pass, strlen(pass));
		if (r < 0) {
			fprintf(stderr, "agent-serve: import: %s\n", slate_error_text(&err));
			return r == -ENOKEY ? 3 : r == -EKEYREJECTED ? 4 : 1;
		}
		if (json_get_string(key, "public_key", &line) >= 0)
			printf("%s\n", line);
		return 0;
	}
	if (streq(cmd, "serve") && optind + 2 < argc)
		return serve(a, argv[optind + 1], argv[optind + 2]);
	fprintf(stderr, "agent-serve: unknown command or missing arguments\n");
	return 2;
}

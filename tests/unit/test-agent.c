/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The SSH agent (agent/) against a peer that speaks the agent protocol by hand over a
 * socketpair, as a guest's stream arrives: framing limits, the two answered messages, every
 * other message refused, signatures that verify, audit events, workspaces kept apart, keys
 * sealed at rest, and imported keys signed by a private OpenSSH ssh-agent (skipped without
 * ssh-keygen). Real OpenSSH clients drive it in test-agent-openssh.test.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/agent.h"
#include "agent/keys.h"
#include "agent/openssh.h"
#include "agent/proto.h"
#include "secrets/install.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

#define T_MS 5000

static const uint8_t SEED[32] = {0x5e, 0xed, 1,  2,  3,  4,  5,  6,  7,  8,  9,
                                 10,   11,   12, 13, 14, 15, 16, 17, 18, 19, 20,
                                 21,   22,   23, 24, 25, 26, 27, 28, 29, 30};
static const uint8_t SEED_B[32] = {0xbb, 0xbb, 0xbb};

struct fixture {
	char root[64];
	char wsdir[128], run[128];
	int state_fd, ws_fd;
	struct install *in;
	struct agent *a;
};

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static struct json_object *audits[64];
static size_t n_audits;

static void audit(const char *ws, struct json_object *ev, void *userdata)
{
	struct json_object *o = json_object_new_object();

	(void)userdata;
	json_object_object_add(o, "workspace", json_object_new_string(ws));
	json_object_object_add(o, "event", json_object_get(ev));
	pthread_mutex_lock(&audit_lock);
	if (n_audits < ELEMENTSOF(audits))
		audits[n_audits++] = o;
	else
		json_object_put(o);
	pthread_mutex_unlock(&audit_lock);
}

static void audits_clear(void)
{
	pthread_mutex_lock(&audit_lock);
	for (size_t i = 0; i < n_audits; i++)
		json_object_put(audits[i]);
	n_audits = 0;
	pthread_mutex_unlock(&audit_lock);
}

static void new_agent(struct fixture *f)
{
	struct agent_config cfg = {.workspaces_dirfd = f->ws_fd,
	                           .install = f->in,
	                           .runtime_dir = f->run,
	                           .audit = audit};

	assert_int_equal(agent_new(&cfg, &f->a), 0);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char path[160];

	assert_non_null(f);
	assert_int_equal(sodium_init() >= 0, 1);
	log_set_max_level(LOG_WARNING);
	(void)snprintf(f->root, sizeof(f->root), "/tmp/test-agent.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	(void)snprintf(path, sizeof(path), "%s/state", f->root);
	assert_int_equal(mkdir(path, 0700), 0);
	f->state_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(f->state_fd >= 0);
	assert_int_equal(install_open(f->state_fd, NULL, &f->in, NULL), 0);
	(void)snprintf(f->wsdir, sizeof(f->wsdir), "%s/ws", f->root);
	(void)snprintf(f->run, sizeof(f->run), "%s/run", f->root);
	assert_int_equal(mkdir(f->wsdir, 0700), 0);
	assert_int_equal(mkdir(f->run, 0755), 0);
	f->ws_fd = open(f->wsdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(f->ws_fd >= 0);
	assert_int_equal(mkdirat(f->ws_fd, "alpha", 0700), 0);
	assert_int_equal(mkdirat(f->ws_fd, "beta", 0700), 0);
	new_agent(f);
	audits_clear();
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	agent_free(f->a);
	install_free(f->in);
	close(f->ws_fd);
	close(f->state_fd);
	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
	assert_int_equal(system(cmd), 0);
	audits_clear();
	free(f);
	return 0;
}

/* ---- a peer ---- */

struct peer {
	int fd;
	pthread_t t;
	struct agent *a;
	char ws[64];
	int srv;
};

static void *serve_main(void *arg)
{
	struct peer *p = arg;

	agent_serve(p->a, p->srv, p->ws);
	return NULL;
}

static struct peer *peer_open(struct fixture *f, const char *ws)
{
	struct peer *p = calloc(1, sizeof(*p));
	int sv[2];

	assert_non_null(p);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	p->fd = sv[0];
	p->srv = sv[1];
	p->a = f->a;
	(void)snprintf(p->ws, sizeof(p->ws), "%s", ws);
	assert_int_equal(pthread_create(&p->t, NULL, serve_main, p), 0);
	return p;
}

static void peer_close(struct peer *p)
{
	close(p->fd);
	assert_int_equal(pthread_join(p->t, NULL), 0);
	free(p);
}

static void send_raw(struct peer *p, const void *data, size_t n)
{
	assert_int_equal(fs_write_all(p->fd, data, n), 0);
}

static void send_msg(struct peer *p, const struct buf *msg)
{
	_cleanup_buf_ struct buf *out = buf_new(AGENT_MAX_FRAME + 4);

	assert_int_equal(agent_frame_put(out, buf_ptr(msg), buf_len(msg)), 0);
	send_raw(p, buf_ptr(out), buf_len(out));
}

/* Reads n bytes within T_MS; returns the count (short at EOF). */
static size_t recv_n(int fd, uint8_t *b, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t k;

		assert_int_equal(poll(&pfd, 1, T_MS), 1);
		k = read(fd, b + got, n - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	return got;
}

/* One reply frame (its body, type byte first). */
static struct buf *recv_msg(struct peer *p)
{
	uint8_t hdr[4], *d;
	struct buf *b;
	uint32_t len;

	assert_int_equal(recv_n(p->fd, hdr, 4), 4);
	len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	assert_int_equal(agent_frame_length_check(len), 0);
	b = buf_new(len);
	assert_non_null(b);
	assert_int_equal(buf_reserve(b, len, &d), 0);
	assert_int_equal(recv_n(p->fd, d, len), len);
	return b;
}

static void expect_closed(struct peer *p)
{
	uint8_t b[16];

	assert_int_equal(recv_n(p->fd, b, sizeof(b)), 0);
}

static void expect_failure(struct peer *p)
{
	_cleanup_buf_ struct buf *r = recv_msg(p);

	assert_int_equal(buf_len(r), 1);
	assert_int_equal(buf_ptr(r)[0], SSH_AGENT_FAILURE);
}

static struct buf *msg_identities(void)
{
	struct buf *m = buf_new(16);

	assert_int_equal(buf_put_u8(m, SSH_AGENTC_REQUEST_IDENTITIES), 0);
	return m;
}

static struct buf *msg_sign(const uint8_t *blob, size_t blob_len, const void *data, size_t len,
                            uint32_t flags)
{
	struct buf *m = buf_new(AGENT_MAX_FRAME);

	assert_int_equal(buf_put_u8(m, SSH_AGENTC_SIGN_REQUEST), 0);
	assert_int_equal(buf_put_string(m, blob, blob_len), 0);
	assert_int_equal(buf_put_string(m, data, len), 0);
	assert_int_equal(buf_put_u32(m, flags), 0);
	return m;
}

struct identity {
	uint8_t blob[AGENT_MAX_KEY_BLOB];
	size_t len;
	char comment[256];
};

/* Lists the identities; returns how many (up to max filled in). */
static uint32_t list(struct peer *p, struct identity *ids, size_t max)
{
	_cleanup_buf_ struct buf *m = msg_identities(), *r = NULL;
	uint32_t n;
	uint8_t type;

	send_msg(p, m);
	r = recv_msg(p);
	assert_int_equal(buf_get_u8(r, &type), 0);
	assert_int_equal(type, SSH_AGENT_IDENTITIES_ANSWER);
	assert_int_equal(buf_get_u32(r, &n), 0);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *b, *c;
		size_t bl, cl;

		assert_int_equal(buf_get_string_direct(r, &b, &bl), 0);
		assert_int_equal(buf_get_string_direct(r, &c, &cl), 0);
		if (i < max) {
			memcpy(ids[i].blob, b, bl);
			ids[i].len = bl;
			(void)snprintf(ids[i].comment, sizeof(ids[i].comment), "%.*s", (int)cl, c);
		}
	}
	assert_int_equal(buf_len(r), 0);
	return n;
}

/* Asks for a signature; returns the reply's signature blob (NULL for a failure). */
static struct buf *sign(struct peer *p, const uint8_t *blob, size_t blob_len, const void *data,
                        size_t len, uint32_t flags, char alg[AGENT_MAX_KEY_TYPE])
{
	_cleanup_buf_ struct buf *m = msg_sign(blob, blob_len, data, len, flags), *r = NULL;
	struct buf *sig;

	send_msg(p, m);
	r = recv_msg(p);
	if (buf_len(r) == 1 && buf_ptr(r)[0] == SSH_AGENT_FAILURE)
		return NULL;
	assert_int_equal(agent_sign_response_parse(buf_ptr(r), buf_len(r), alg), 0);
	assert_int_equal(buf_consume(r, 1), 0);
	assert_int_equal(buf_get_stringb(r, &sig), 0);
	return sig;
}

static void ed25519_blob(const uint8_t seed[32], uint8_t pk[32], struct buf **ret)
{
	uint8_t sk[64];
	struct buf *b = buf_new(128);

	(void)crypto_sign_ed25519_seed_keypair(pk, sk, seed);
	assert_int_equal(agent_ed25519_blob(pk, b), 0);
	*ret = b;
}

static void verify_ed25519(struct buf *sig, const uint8_t pk[32], const void *data, size_t len)
{
	const uint8_t *alg, *s;
	size_t an, sn;

	assert_int_equal(buf_get_string_direct(sig, &alg, &an), 0);
	assert_int_equal(an, strlen(AGENT_ED25519_TYPE));
	assert_memory_equal(alg, AGENT_ED25519_TYPE, an);
	assert_int_equal(buf_get_string_direct(sig, &s, &sn), 0);
	assert_int_equal(sn, 64);
	assert_int_equal(crypto_sign_ed25519_verify_detached(s, data, len, pk), 0);
}

static bool file_contains(const char *path, const void *needle, size_t n)
{
	_cleanup_buf_ struct buf *b = NULL;

	assert_int_equal(fs_read_file_at(AT_FDCWD, path, 1u << 20, &b), 0);
	for (size_t i = 0; i + n <= buf_len(b); i++)
		if (memcmp(buf_ptr(b) + i, needle, n) == 0)
			return true;
	return false;
}

/* ---- protocol ---- */

static void test_frame_length(void **state)
{
	(void)state;
	assert_int_equal(agent_frame_length_check(0), SLATE_ERR_INVALID_FORMAT);
	assert_int_equal(agent_frame_length_check(1), 0);
	assert_int_equal(agent_frame_length_check(256 * 1024), 0);
	assert_int_equal(agent_frame_length_check(256 * 1024 + 1), SLATE_ERR_TOO_LARGE);
	assert_int_equal(agent_frame_length_check(UINT32_MAX), SLATE_ERR_TOO_LARGE);
}

static void test_sign_request_parse(void **state)
{
	static const uint8_t blob[] = {0, 0, 0, 3, 'a', 'b', 'c', 0};
	_cleanup_buf_ struct buf *m = msg_sign(blob, sizeof(blob), "data", 4, 2);
	struct agent_sign_request req;

	(void)state;
	assert_int_equal(agent_sign_request_parse(buf_ptr(m), buf_len(m), &req), 0);
	assert_int_equal(req.key_len, sizeof(blob));
	assert_int_equal(req.data_len, 4);
	assert_int_equal(req.flags, 2);
	/* Cut anywhere: incomplete; one byte more: trailing data. */
	for (size_t n = 1; n < buf_len(m); n++)
		assert_true(agent_sign_request_parse(buf_ptr(m), n, &req) < 0);
	assert_int_equal(buf_put_u8(m, 0), 0);
	assert_int_equal(agent_sign_request_parse(buf_ptr(m), buf_len(m), &req),
	                 SLATE_ERR_INVALID_FORMAT);
	/* An empty key blob. */
	{
		_cleanup_buf_ struct buf *e = msg_sign(blob, 0, "d", 1, 0);
		assert_true(agent_sign_request_parse(buf_ptr(e), buf_len(e), &req) < 0);
	}
}

static void test_fingerprint_and_line(void **state)
{
	/* ssh-keygen -l printed this fingerprint for this key. */
	static const char line[] =
	        "ecdsa-sha2-nistp256 "
	        "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQaRzB0"
	        "UhWGlqeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/UPdYZncs= my "
	        "ecdsa\r\n";
	_cleanup_free_ uint8_t *blob = NULL;
	_cleanup_free_ char *comment = NULL, *again = NULL;
	char fp[AGENT_FINGERPRINT_MAX], type[AGENT_MAX_KEY_TYPE];
	size_t n;

	(void)state;
	assert_int_equal(agent_public_line_parse(line, &blob, &n, &comment), 0);
	assert_string_equal(comment, "my ecdsa");
	assert_int_equal(agent_key_blob_type(blob, n, type), 0);
	assert_string_equal(type, "ecdsa-sha2-nistp256");
	assert_int_equal(agent_fingerprint(blob, n, fp), 0);
	assert_string_equal(fp, "SHA256:fL2g9ycY2QrCR7a2HKkBX3dcPcUwm/qxYUfx0TrfHSQ");
	assert_int_equal(agent_public_line(blob, n, comment, &again), 0);
	assert_int_equal(strncmp(again, line, strlen(again)), 0);

	/* The line's type must be the blob's; the base64 must be base64; one line only. */
	{
		static const char *const bad[] = {
		        "ssh-ed25519 "
		        "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQaRzB0"
		        "UhWGlqeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/"
		        "UPdYZncs=",
		        "ecdsa-sha2-nistp256 AAAA!!!!",
		        "ecdsa-sha2-nistp256",
		        "",
		        "ecdsa-sha2-nistp256 "
		        "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQa"
		        "RzB0UhWGlqeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/"
		        "UPdYZncs= "
		        "a\nb",
		};
		for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
			_cleanup_free_ uint8_t *b = NULL;
			assert_true(agent_public_line_parse(bad[i], &b, &n, NULL) < 0);
		}
	}
}

static void test_keyset_parse(void **state)
{
	static const char good[] =
	        "{\"version\":1,\"keys\":[{\"kind\":\"imported\",\"type\":\"ecdsa-sha2-nistp256\","
	        "\"public\":"
	        "\"AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQaRzB0UhWGl"
	        "qeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/UPdYZncs=\","
	        "\"file\":\"imported-0123456789abcdef.key\",\"comment\":\"c\",\"created\":1}]}";
	static const char *const bad[] = {
	        "{\"version\":2,\"keys\":[]}",
	        "{\"version\":1}",
	        "{\"version\":1,\"keys\":[{\"kind\":\"weird\",\"type\":\"ecdsa-sha2-nistp256\","
	        "\"public\":"
	        "\"AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQaRzB0UhWGl"
	        "qeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/UPdYZncs=\","
	        "\"file\":\"imported-0123456789abcdef.key\"}]}",
	        /* A file name that would leave ssh/. */
	        "{\"version\":1,\"keys\":[{\"kind\":\"imported\",\"type\":\"ecdsa-sha2-nistp256\","
	        "\"public\":"
	        "\"AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQaRzB0UhWGl"
	        "qeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/UPdYZncs=\","
	        "\"file\":\"../../install/master.key\"}]}",
	        /* A type that is not the blob's. */
	        "{\"version\":1,\"keys\":[{\"kind\":\"imported\",\"type\":\"ssh-rsa\","
	        "\"public\":"
	        "\"AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQaRzB0UhWGl"
	        "qeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/UPdYZncs=\","
	        "\"file\":\"imported-0123456789abcdef.key\"}]}",
	        /* A managed key that is not ed25519. */
	        "{\"version\":1,\"keys\":[{\"kind\":\"managed\",\"type\":\"ecdsa-sha2-nistp256\","
	        "\"public\":"
	        "\"AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQaRzB0UhWGl"
	        "qeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/UPdYZncs=\","
	        "\"file\":\"managed.key\"}]}",
	        "[]",
	        "",
	};
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;

	(void)state;
	assert_int_equal(agent_keyset_parse(good, strlen(good), &ks), 0);
	assert_int_equal(ks->n, 1);
	assert_int_equal(ks->keys[0].kind, AGENT_KEY_IMPORTED);
	assert_string_equal(ks->keys[0].fingerprint,
	                    "SHA256:fL2g9ycY2QrCR7a2HKkBX3dcPcUwm/qxYUfx0TrfHSQ");
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		struct agent_keyset *k = NULL;
		assert_true(agent_keyset_parse(bad[i], strlen(bad[i]), &k) < 0);
		assert_null(k);
	}
}

/* ---- managed keys ---- */

static void test_generate_sealed(void **state)
{
	struct fixture *f = *state;
	_cleanup_json_ struct json_object *key = NULL;
	_cleanup_buf_ struct buf *blob = NULL;
	uint8_t pk[32], sk[64];
	const char *line, *comment;
	char path[256];
	struct stat st;

	assert_int_equal(agent_generate(f->a, "alpha", NULL, SEED, &key), 0);
	assert_int_equal(json_get_string(key, "public_key", &line), 0);
	assert_int_equal(strncmp(line, "ssh-ed25519 AAAA", 16), 0);
	assert_int_equal(json_get_string(key, "comment", &comment), 0);
	assert_int_equal(strncmp(comment, "slate:alpha@", 12), 0);
	assert_int_equal(agent_generate(f->a, "alpha", NULL, NULL, NULL), -EEXIST);

	(void)snprintf(path, sizeof(path), "%s/alpha/ssh", f->wsdir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	(void)snprintf(path, sizeof(path), "%s/alpha/ssh/managed.key", f->wsdir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* Sealed: neither the seed nor the secret key is in the file. */
	ed25519_blob(SEED, pk, &blob);
	(void)crypto_sign_ed25519_seed_keypair(pk, sk, SEED);
	assert_false(file_contains(path, SEED, 32));
	assert_false(file_contains(path, sk, 64));
	assert_true(file_contains(path, "SLSEAL1\n", 8));
}

static void test_identities_and_sign(void **state)
{
	struct fixture *f = *state;
	_cleanup_buf_ struct buf *blob = NULL, *sig = NULL;
	struct identity ids[4];
	struct json_object *ev;
	const char *s;
	int64_t v;
	uint8_t pk[32];
	char alg[AGENT_MAX_KEY_TYPE], data[] = "sign me, once";
	struct peer *p;

	assert_int_equal(agent_generate(f->a, "alpha", "the comment", SEED, NULL), 0);
	ed25519_blob(SEED, pk, &blob);
	p = peer_open(f, "alpha");
	assert_int_equal(list(p, ids, 4), 1);
	assert_int_equal(ids[0].len, buf_len(blob));
	assert_memory_equal(ids[0].blob, buf_ptr(blob), buf_len(blob));
	assert_string_equal(ids[0].comment, "the comment");

	sig = sign(p, buf_ptr(blob), buf_len(blob), data, sizeof(data), 0, alg);
	assert_non_null(sig);
	assert_string_equal(alg, "ssh-ed25519");
	verify_ed25519(sig, pk, data, sizeof(data));
	/* The RSA flags mean nothing to an ed25519 key; the signature is the same kind. */
	buf_free(sig);
	sig = sign(p, buf_ptr(blob), buf_len(blob), data, sizeof(data), SSH_AGENT_RSA_SHA2_512,
	           alg);
	assert_non_null(sig);
	verify_ed25519(sig, pk, data, sizeof(data));

	/* One audit event per signature: fingerprint, type, length, flags; never the data. */
	assert_int_equal(n_audits, 2);
	assert_int_equal(json_get_object(audits[0], "event", &ev), 0);
	assert_int_equal(json_get_string(ev, "fingerprint", &s), 0);
	assert_int_equal(strncmp(s, "SHA256:", 7), 0);
	assert_int_equal(json_get_string(ev, "key_type", &s), 0);
	assert_string_equal(s, "ssh-ed25519");
	assert_int_equal(json_get_string(ev, "key", &s), 0);
	assert_string_equal(s, "managed");
	assert_int_equal(json_get_int64(ev, "bytes", &v), 0);
	assert_int_equal(v, sizeof(data));
	assert_null(strstr(json_object_to_json_string(audits[0]), "sign me"));
	assert_int_equal(json_get_object(audits[1], "event", &ev), 0);
	assert_int_equal(json_get_int64(ev, "flags", &v), 0);
	assert_int_equal(v, SSH_AGENT_RSA_SHA2_512);
	peer_close(p);
}

static void test_everything_else_refused(void **state)
{
	struct fixture *f = *state;
	_cleanup_buf_ struct buf *blob = NULL, *other = NULL;
	uint8_t pk[32], pk2[32];
	char alg[AGENT_MAX_KEY_TYPE];
	struct peer *p;

	assert_int_equal(agent_generate(f->a, "alpha", NULL, SEED, NULL), 0);
	ed25519_blob(SEED, pk, &blob);
	ed25519_blob(SEED_B, pk2, &other);
	p = peer_open(f, "alpha");
	/* Every message type but the two, with and without contents, on one connection. */
	for (unsigned t = 0; t < 256; t++) {
		uint8_t m[8] = {(uint8_t)t, 0, 0, 0, 1, 'x', 0, 0};
		_cleanup_buf_ struct buf *b = buf_new(16);

		if (t == SSH_AGENTC_REQUEST_IDENTITIES || t == SSH_AGENTC_SIGN_REQUEST)
			continue;
		assert_int_equal(buf_put(b, m, t % 2 ? 1 : sizeof(m)), 0);
		send_msg(p, b);
		expect_failure(p);
	}
	/* An add-identity of a real key: refused, and the key is not listed afterwards. */
	{
		_cleanup_buf_ struct buf *b = buf_new(512);
		uint8_t sk[64];
		(void)crypto_sign_ed25519_seed_keypair(pk2, sk, SEED_B);
		assert_int_equal(buf_put_u8(b, SSH_AGENTC_ADD_IDENTITY), 0);
		assert_int_equal(buf_put_cstring(b, AGENT_ED25519_TYPE), 0);
		assert_int_equal(buf_put_string(b, pk2, 32), 0);
		assert_int_equal(buf_put_string(b, sk, 64), 0);
		assert_int_equal(buf_put_cstring(b, "added"), 0);
		send_msg(p, b);
		expect_failure(p);
		assert_int_equal(list(p, NULL, 0), 1);
	}
	/* REQUEST_IDENTITIES with contents; a sign request cut short; unknown flags; a key the
	 * workspace does not hold. */
	{
		_cleanup_buf_ struct buf *b = buf_new(4096), *m = NULL;
		assert_int_equal(buf_put_u8(b, SSH_AGENTC_REQUEST_IDENTITIES), 0);
		assert_int_equal(buf_put_u8(b, 0), 0);
		send_msg(p, b);
		expect_failure(p);
		m = msg_sign(buf_ptr(blob), buf_len(blob), "data", 4, 0);
		(void)buf_reset(b);
		assert_int_equal(buf_put(b, buf_ptr(m), buf_len(m) - 6), 0);
		send_msg(p, b);
		expect_failure(p);
	}
	assert_null(sign(p, buf_ptr(blob), buf_len(blob), "d", 1, 1, alg));
	assert_null(sign(p, buf_ptr(blob), buf_len(blob), "d", 1, 0x100, alg));
	assert_null(sign(p, buf_ptr(other), buf_len(other), "d", 1, 0, alg));
	assert_int_equal(n_audits, 0);
	/* Still serving. */
	assert_int_equal(list(p, NULL, 0), 1);
	peer_close(p);
}

static void test_frame_limits(void **state)
{
	struct fixture *f = *state;
	_cleanup_buf_ struct buf *blob = NULL, *sig = NULL, *m = NULL;
	_cleanup_free_ uint8_t *big = NULL;
	uint8_t pk[32];
	char alg[AGENT_MAX_KEY_TYPE];
	struct peer *p;
	size_t n;

	assert_int_equal(agent_generate(f->a, "alpha", NULL, SEED, NULL), 0);
	ed25519_blob(SEED, pk, &blob);

	/* Over 256 KiB: closed before the body is read (a valid request follows unanswered). */
	{
		uint8_t hdr[] = {0, 4, 0, 1, SSH_AGENTC_REQUEST_IDENTITIES};
		uint8_t ok[] = {0, 0, 0, 1, SSH_AGENTC_REQUEST_IDENTITIES};
		p = peer_open(f, "alpha");
		send_raw(p, hdr, sizeof(hdr));
		(void)send(p->fd, ok, sizeof(ok), MSG_NOSIGNAL);
		expect_closed(p);
		peer_close(p);
	}
	/* Length 0: closed. */
	{
		uint8_t hdr[] = {0, 0, 0, 0};
		p = peer_open(f, "alpha");
		send_raw(p, hdr, sizeof(hdr));
		expect_closed(p);
		peer_close(p);
	}
	/* A frame cut short (the peer goes quiet and half-closes): closed, nothing answered. */
	{
		uint8_t part[] = {0, 0, 0, 100, SSH_AGENTC_SIGN_REQUEST, 0, 0, 0, 51};
		p = peer_open(f, "alpha");
		send_raw(p, part, sizeof(part));
		assert_int_equal(shutdown(p->fd, SHUT_WR), 0);
		expect_closed(p);
		peer_close(p);
	}
	/* Exactly 256 KiB: answered. */
	p = peer_open(f, "alpha");
	n = AGENT_MAX_FRAME - 1 - 4 - buf_len(blob) - 4 - 4;
	big = calloc(1, n);
	assert_non_null(big);
	m = msg_sign(buf_ptr(blob), buf_len(blob), big, n, 0);
	assert_int_equal(buf_len(m), AGENT_MAX_FRAME);
	send_msg(p, m);
	{
		_cleanup_buf_ struct buf *r = recv_msg(p);
		assert_int_equal(buf_ptr(r)[0], SSH_AGENT_SIGN_RESPONSE);
	}
	/* And the agent still serves, on this connection and new ones. */
	sig = sign(p, buf_ptr(blob), buf_len(blob), "x", 1, 0, alg);
	assert_non_null(sig);
	peer_close(p);
	p = peer_open(f, "alpha");
	assert_int_equal(list(p, NULL, 0), 1);
	peer_close(p);
}

static void test_workspaces_apart(void **state)
{
	struct fixture *f = *state;
	_cleanup_buf_ struct buf *a = NULL, *b = NULL, *sig = NULL;
	struct identity ids[4];
	uint8_t pk[32];
	char alg[AGENT_MAX_KEY_TYPE], cmd[512];
	struct peer *p;

	assert_int_equal(agent_generate(f->a, "alpha", NULL, SEED, NULL), 0);
	assert_int_equal(agent_generate(f->a, "beta", NULL, SEED_B, NULL), 0);
	ed25519_blob(SEED, pk, &a);
	ed25519_blob(SEED_B, pk, &b);
	p = peer_open(f, "alpha");
	assert_int_equal(list(p, ids, 4), 1);
	assert_memory_equal(ids[0].blob, buf_ptr(a), buf_len(a));
	assert_null(sign(p, buf_ptr(b), buf_len(b), "x", 1, 0, alg));
	peer_close(p);

	/* alpha's sealed key copied into gamma's ssh/ is listed there but does not open: the
	 * seal names the workspace. */
	assert_int_equal(mkdirat(f->ws_fd, "gamma", 0700), 0);
	(void)snprintf(cmd, sizeof(cmd), "cp -a '%s/alpha/ssh' '%s/gamma/ssh'", f->wsdir, f->wsdir);
	assert_int_equal(system(cmd), 0);
	p = peer_open(f, "gamma");
	assert_int_equal(list(p, NULL, 0), 1);
	assert_null(sign(p, buf_ptr(a), buf_len(a), "x", 1, 0, alg));
	peer_close(p);
	/* A connection without a valid workspace name is not served. */
	{
		int sv[2];
		uint8_t x;
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		agent_serve(f->a, sv[1], "../alpha");
		assert_int_equal(read(sv[0], &x, 1), 0);
		close(sv[0]);
	}
	(void)sig;
}

static void test_wipe_forgets(void **state)
{
	struct fixture *f = *state;
	_cleanup_buf_ struct buf *blob = NULL, *sig = NULL;
	uint8_t pk[32];
	char alg[AGENT_MAX_KEY_TYPE], cmd[512];
	struct peer *p;

	assert_int_equal(agent_generate(f->a, "alpha", NULL, SEED, NULL), 0);
	ed25519_blob(SEED, pk, &blob);
	p = peer_open(f, "alpha");
	sig = sign(p, buf_ptr(blob), buf_len(blob), "x", 1, 0, alg);
	assert_non_null(sig);
	/* wipe-home removes ssh/: the next request sees no key, on the same connection. */
	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s/alpha/ssh'", f->wsdir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(list(p, NULL, 0), 0);
	assert_null(sign(p, buf_ptr(blob), buf_len(blob), "x", 1, 0, alg));
	peer_close(p);
}

static void test_stop_closes(void **state)
{
	struct fixture *f = *state;
	struct peer *p = peer_open(f, "alpha");

	assert_int_equal(list(p, NULL, 0), 0);
	/* agent_free ends idle connections rather than waiting for them. */
	agent_free(f->a);
	expect_closed(p);
	peer_close(p);
	new_agent(f);
}

/* ---- imported keys (real OpenSSH) ---- */

static bool have_openssh(void)
{
	return access("/usr/bin/ssh-keygen", X_OK) == 0 &&
	       access("/usr/bin/ssh-agent", X_OK) == 0 && access("/usr/bin/ssh-add", X_OK) == 0;
}

static void keygen(struct fixture *f, const char *name, const char *args, const char *pass)
{
	char cmd[512];

	(void)snprintf(cmd, sizeof(cmd), "ssh-keygen -q %s -N '%s' -C 'c-%s' -f '%s/%s'", args,
	               pass, name, f->root, name);
	assert_int_equal(system(cmd), 0);
}

static int import(struct fixture *f, const char *ws, const char *name, const char *pass,
                  struct json_object **ret)
{
	_cleanup_buf_ struct buf *k = NULL;
	char path[256];
	struct slate_error err = {0};

	(void)snprintf(path, sizeof(path), "%s/%s", f->root, name);
	assert_int_equal(fs_read_file_at(AT_FDCWD, path, 64 * 1024, &k), 0);
	return agent_import(f->a, ws, buf_ptr(k), buf_len(k), pass, ret, &err);
}

/* The blob of a public key file. */
static struct buf *pub_blob(struct fixture *f, const char *name)
{
	_cleanup_buf_ struct buf *text = NULL;
	_cleanup_free_ char *s = NULL;
	_cleanup_free_ uint8_t *blob = NULL;
	char path[256];
	size_t n;
	struct buf *b;

	(void)snprintf(path, sizeof(path), "%s/%s.pub", f->root, name);
	assert_int_equal(fs_read_file_at(AT_FDCWD, path, 64 * 1024, &text), 0);
	s = buf_dup_string(text);
	assert_int_equal(agent_public_line_parse(s, &blob, &n, NULL), 0);
	b = buf_new(n);
	assert_int_equal(buf_put(b, blob, n), 0);
	return b;
}

static void test_import(void **state)
{
	struct fixture *f = *state;
	_cleanup_buf_ struct buf *ec = NULL, *rsa = NULL, *sig = NULL;
	_cleanup_json_ struct json_object *info = NULL;
	struct identity ids[4];
	struct json_object *ev;
	char alg[AGENT_MAX_KEY_TYPE], path[256], cmd[512];
	const char *s;
	struct peer *p;

	if (!have_openssh())
		skip();
	keygen(f, "ec", "-t ecdsa", "correct horse");
	keygen(f, "rsa", "-t rsa -b 2048 -m PEM", "");
	ec = pub_blob(f, "ec");
	rsa = pub_blob(f, "rsa");

	assert_int_equal(import(f, "alpha", "ec", NULL, NULL), -ENOKEY);
	assert_int_equal(import(f, "alpha", "ec", "wrong", NULL), -EKEYREJECTED);
	assert_int_equal(import(f, "alpha", "ec", "correct horse", &info), 0);
	assert_int_equal(json_get_string(info, "comment", &s), 0);
	assert_string_equal(s, "c-ec");
	assert_int_equal(json_get_string(info, "kind", &s), 0);
	assert_string_equal(s, "imported");
	assert_int_equal(import(f, "alpha", "ec", "correct horse", NULL), -EEXIST);
	/* An old PEM RSA key without a passphrase. */
	assert_int_equal(import(f, "alpha", "rsa", NULL, NULL), 0);
	/* Not a key. */
	{
		struct slate_error err = {0};
		assert_int_equal(agent_import(f->a, "alpha", "hello\n", 6, NULL, NULL, &err),
		                 -EINVAL);
	}
	assert_int_equal(agent_generate(f->a, "alpha", NULL, SEED, NULL), 0);

	/* At rest: the RSA key's PEM body is nowhere in ssh/. */
	{
		_cleanup_buf_ struct buf *pem = NULL;
		_cleanup_free_ char *text = NULL;
		char *line;
		(void)snprintf(path, sizeof(path), "%s/rsa", f->root);
		assert_int_equal(fs_read_file_at(AT_FDCWD, path, 64 * 1024, &pem), 0);
		text = buf_dup_string(pem);
		line = strchr(text, '\n') + 1;
		line[64] = '\0';
		(void)snprintf(cmd, sizeof(cmd), "! grep -rqF '%s' '%s/alpha/ssh'", line, f->wsdir);
		assert_int_equal(system(cmd), 0);
	}

	p = peer_open(f, "alpha");
	assert_int_equal(list(p, ids, 4), 3);
	assert_string_equal(ids[1].comment, "c-ec");
	sig = sign(p, buf_ptr(ec), buf_len(ec), "x", 1, 0, alg);
	assert_non_null(sig);
	assert_string_equal(alg, "ecdsa-sha2-nistp256");
	/* The flags go to the private agent unchanged: they choose the RSA signature. */
	buf_free(sig);
	sig = sign(p, buf_ptr(rsa), buf_len(rsa), "x", 1, 0, alg);
	assert_non_null(sig);
	assert_string_equal(alg, "ssh-rsa");
	buf_free(sig);
	sig = sign(p, buf_ptr(rsa), buf_len(rsa), "x", 1, SSH_AGENT_RSA_SHA2_256, alg);
	assert_non_null(sig);
	assert_string_equal(alg, "rsa-sha2-256");
	buf_free(sig);
	sig = sign(p, buf_ptr(rsa), buf_len(rsa), "x", 1, SSH_AGENT_RSA_SHA2_512, alg);
	assert_non_null(sig);
	assert_string_equal(alg, "rsa-sha2-512");
	assert_int_equal(json_get_object(audits[n_audits - 1], "event", &ev), 0);
	assert_int_equal(json_get_string(ev, "key", &s), 0);
	assert_string_equal(s, "imported");
	assert_int_equal(json_get_string(ev, "algorithm", &s), 0);
	assert_string_equal(s, "rsa-sha2-512");

	/* The private agent lives in run/ssh-agent/alpha (0700); forgetting the workspace stops
	 * it, and the next request starts it again from the sealed keys. */
	(void)snprintf(path, sizeof(path), "%s/ssh-agent/alpha/agent.sock", f->run);
	assert_int_equal(access(path, F_OK), 0);
	agent_forget(f->a, "alpha");
	assert_int_equal(access(path, F_OK), -1);
	buf_free(sig);
	sig = sign(p, buf_ptr(ec), buf_len(ec), "y", 1, 0, alg);
	assert_non_null(sig);
	assert_int_equal(access(path, F_OK), 0);
	peer_close(p);

	/* slated restarts: a new agent finds the keys sealed and signs again. */
	agent_free(f->a);
	assert_int_equal(access(path, F_OK), -1);
	new_agent(f);
	p = peer_open(f, "alpha");
	buf_free(sig);
	sig = sign(p, buf_ptr(rsa), buf_len(rsa), "z", 1, SSH_AGENT_RSA_SHA2_256, alg);
	assert_non_null(sig);
	assert_string_equal(alg, "rsa-sha2-256");
	/* beta holds none of it. */
	peer_close(p);
	p = peer_open(f, "beta");
	assert_int_equal(list(p, NULL, 0), 0);
	assert_null(sign(p, buf_ptr(rsa), buf_len(rsa), "z", 1, 0, alg));
	peer_close(p);

	/* What wipe-home leaves: the two imported keys, not the generated one nor anything else;
	 * again (a sweep after a crash) the same. */
	{
		_cleanup_close_ int wfd = -1;
		(void)snprintf(path, sizeof(path), "%s/alpha", f->wsdir);
		wfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(wfd >= 0);
		(void)snprintf(cmd, sizeof(cmd), "echo stray > '%s/alpha/ssh/stray'", f->wsdir);
		assert_int_equal(system(cmd), 0);
		assert_int_equal(agent_keys_keep_imported(wfd), 2);
		assert_int_equal(agent_keys_keep_imported(wfd), 2);
		(void)snprintf(cmd, sizeof(cmd),
		               "cd '%s/alpha/ssh' && [ ! -e managed.key ] && [ ! -e stray ] && "
		               "[ $(ls | wc -l) = 3 ]",
		               f->wsdir);
		assert_int_equal(system(cmd), 0);
		p = peer_open(f, "alpha");
		assert_int_equal(list(p, ids, 4), 2);
		buf_free(sig);
		sig = sign(p, buf_ptr(ec), buf_len(ec), "w", 1, 0, alg);
		assert_non_null(sig);
		peer_close(p);
		/* No imported key: 0, and the caller removes the directory. */
		(void)snprintf(path, sizeof(path), "%s/beta", f->wsdir);
		assert_int_equal(agent_generate(f->a, "beta", NULL, SEED, NULL), 0);
		(void)close(wfd);
		wfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(wfd >= 0);
		assert_int_equal(agent_keys_keep_imported(wfd), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_frame_length),
	        cmocka_unit_test(test_sign_request_parse),
	        cmocka_unit_test(test_fingerprint_and_line),
	        cmocka_unit_test(test_keyset_parse),
	        cmocka_unit_test_setup_teardown(test_generate_sealed, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_identities_and_sign, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_everything_else_refused, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_frame_limits, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_workspaces_apart, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_wipe_forgets, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_stop_closes, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_import, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

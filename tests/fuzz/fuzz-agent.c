/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the SSH agent (agent/): the first byte chooses
 *   0  a guest's byte stream on a real connection (agent_serve on a socketpair): framing,
 *      every message type, a workspace holding a managed ed25519 key and an imported key
 *      whose private agent cannot start; every reply must be a whole frame of type 5, 12 or 14
 *   1  the same messages split into frames here and handed to agent_conn_handle one by one:
 *      anything but REQUEST_IDENTITIES (exactly one byte) and SIGN_REQUEST must get exactly
 *      SSH_AGENT_FAILURE, and a signature must verify
 *   2  keys.json (agent_keyset_parse, and a parsed set must format and parse back)
 *   3  an OpenSSH public key line (agent_public_line_parse, round trip)
 *   4  a private agent's reply (agent_sign_response_parse)
 *   5  a sign request and a key blob on their own
 * The state lives in a temporary directory made once per process.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/keys.h"
#include "agent/proto.h"
#include "secrets/install.h"
#include "util/buf.h"
#include "util/json.h"
#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WS "fz"

static struct agent *A;
static struct install *IN;
static uint8_t PK[32];
static char ROOT[64];

static void audit(const char *ws, struct json_object *ev, void *userdata)
{
	(void)userdata;
	if (!ws || !ev)
		abort();
}

static void rm_rf(const char *path)
{
	char cmd[128];

	(void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	(void)system(cmd);
}

static void cleanup(void)
{
	agent_free(A);
	install_free(IN);
	rm_rf(ROOT);
}

static void setup(void)
{
	static const uint8_t seed[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	/* An ecdsa-sha2-nistp256 public key blob (ssh-keygen made it; any valid blob will do). */
	static const char imported[] =
	        "ecdsa-sha2-nistp256 "
	        "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBNnTfeVQaRzB0"
	        "UhWGlqeGW9RrC1UIevIfrD7fzWgslpARzlWZm/6c3jQffi1o7+g6qxhKnBa+vSFc0/UPdYZncs= fz";
	_cleanup_close_ int sfd = -1, wfd = -1, one = -1;
	_cleanup_free_ uint8_t *blob = NULL;
	uint8_t sk[64];
	size_t blob_len;
	char path[128];
	struct agent_config cfg;

	if (A)
		return;
	log_set_max_level(LOG_CRIT);
	(void)snprintf(ROOT, sizeof(ROOT), "/tmp/fuzz-agent.XXXXXX");
	if (!mkdtemp(ROOT) || sodium_init() < 0)
		abort();
	(void)snprintf(path, sizeof(path), "%s/state", ROOT);
	if (mkdir(path, 0700) < 0 || (sfd = open(path, O_RDONLY | O_DIRECTORY)) < 0 ||
	    install_open(sfd, NULL, &IN, NULL) < 0)
		abort();
	(void)snprintf(path, sizeof(path), "%s/ws", ROOT);
	if (mkdir(path, 0700) < 0 || (wfd = open(path, O_RDONLY | O_DIRECTORY)) < 0 ||
	    mkdirat(wfd, WS, 0700) < 0 || (one = openat(wfd, WS, O_RDONLY | O_DIRECTORY)) < 0)
		abort();
	cfg = (struct agent_config){.workspaces_dirfd = wfd, .install = IN, .audit = audit};
	if (agent_new(&cfg, &A) < 0 || agent_generate(A, WS, "fuzz", seed, NULL) < 0)
		abort();
	if (agent_public_line_parse(imported, &blob, &blob_len, NULL) < 0 ||
	    agent_keys_add_imported(one, IN, WS, "not a key", 9, blob, blob_len, "imported", NULL) <
	            0)
		abort();
	(void)crypto_sign_ed25519_seed_keypair(PK, sk, seed);
	sodium_memzero(sk, sizeof(sk));
	wfd = -1; /* the agent borrows it for the process's life */
	(void)atexit(cleanup);
}

/* Every reply is a whole frame of a reply type; a FAILURE is that one byte. */
static void check_replies(const uint8_t *p, size_t n)
{
	while (n > 0) {
		uint32_t len;

		if (n < 5)
			abort();
		len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
		if (len == 0 || len > n - 4 || len > AGENT_MAX_FRAME)
			abort();
		if (p[4] != SSH_AGENT_FAILURE && p[4] != SSH_AGENT_IDENTITIES_ANSWER &&
		    p[4] != SSH_AGENT_SIGN_RESPONSE)
			abort();
		if (p[4] == SSH_AGENT_FAILURE && len != 1)
			abort();
		p += 4 + len;
		n -= 4 + len;
	}
}

struct feeder {
	int fd;
	const uint8_t *data;
	size_t size;
	struct buf *replies;
};

static void *feed(void *arg)
{
	struct feeder *f = arg;
	size_t off = 0;

	while (off < f->size) {
		ssize_t k = send(f->fd, f->data + off, f->size - off, MSG_NOSIGNAL);
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	(void)shutdown(f->fd, SHUT_WR);
	return NULL;
}

static void *serve_main(void *arg)
{
	agent_conn_run(arg);
	return NULL;
}

static void stream(const uint8_t *data, size_t size)
{
	_cleanup_buf_ struct buf *replies = buf_new(64u << 20);
	struct feeder f;
	pthread_t t;
	int sv[2];
	uint8_t chunk[4096];

	if (!replies || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	f = (struct feeder){.fd = sv[0], .data = data, .size = size};
	if (pthread_create(&t, NULL, feed, &f) != 0)
		abort();
	/* The agent's end runs on a thread of its own, as the channel runs it. */
	{
		struct agent_conn *c;
		pthread_t srv;
		if (agent_conn_begin(A, sv[1], WS, &c) < 0)
			abort();
		if (pthread_create(&srv, NULL, serve_main, c) != 0)
			abort();
		for (;;) {
			ssize_t k = read(sv[0], chunk, sizeof(chunk));
			if (k <= 0)
				break;
			if (buf_put(replies, chunk, (size_t)k) < 0)
				abort();
		}
		(void)pthread_join(srv, NULL);
	}
	(void)pthread_join(t, NULL);
	close(sv[0]);
	check_replies(buf_ptr(replies), buf_len(replies));
}

static void frames(const uint8_t *data, size_t size)
{
	_cleanup_buf_ struct buf *out = buf_new(AGENT_MAX_FRAME + 4);
	struct agent_conn *c;

	if (!out || agent_conn_new_detached(A, WS, &c) < 0)
		abort();
	while (size >= 4) {
		uint32_t len = (uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 |
		               (uint32_t)data[2] << 8 | data[3];
		const uint8_t *msg = data + 4;

		if (agent_frame_length_check(len) < 0 || len > size - 4)
			break;
		(void)buf_reset(out);
		if (agent_conn_handle(c, msg, len, out) < 0)
			abort();
		check_replies(buf_ptr(out), buf_len(out));
		if (buf_len(out) == 0)
			abort();
		/* The defence itself: only the two answered messages get anything but FAILURE. */
		if (!((msg[0] == SSH_AGENTC_REQUEST_IDENTITIES && len == 1) ||
		      msg[0] == SSH_AGENTC_SIGN_REQUEST) &&
		    buf_ptr(out)[4] != SSH_AGENT_FAILURE)
			abort();
		if (buf_ptr(out)[4] == SSH_AGENT_SIGN_RESPONSE) {
			struct agent_sign_request req;
			_cleanup_buf_ struct buf *b = buf_from(buf_ptr(out) + 5, buf_len(out) - 5);
			_cleanup_buf_ struct buf *sig = NULL;
			const uint8_t *s;
			size_t sn;

			/* Only the managed key can sign here: its signature must verify. */
			if (agent_sign_request_parse(msg, len, &req) < 0 || !b ||
			    buf_get_stringb(b, &sig) < 0 ||
			    buf_get_string_direct(sig, NULL, NULL) < 0 ||
			    buf_get_string_direct(sig, &s, &sn) < 0 || sn != 64 ||
			    crypto_sign_ed25519_verify_detached(s, req.data, req.data_len, PK) != 0)
				abort();
		}
		data += 4 + len;
		size -= 4 + len;
	}
	agent_conn_free_detached(c);
}

static void keys_json(const uint8_t *data, size_t size)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL, *again = NULL;
	_cleanup_free_ char *text = NULL;

	if (agent_keyset_parse((const char *)data, size, &ks) < 0)
		return;
	if (agent_keyset_format(ks, &text) < 0 ||
	    agent_keyset_parse(text, strlen(text), &again) < 0 || again->n != ks->n)
		abort();
	for (size_t i = 0; i < ks->n; i++) {
		struct json_object *j = agent_key_json(&ks->keys[i]);
		if (!j)
			abort();
		json_object_put(j);
	}
}

static void public_line(const uint8_t *data, size_t size)
{
	_cleanup_free_ char *s = strndup((const char *)data, size), *line = NULL, *comment = NULL,
	                    *comment2 = NULL;
	_cleanup_free_ uint8_t *blob = NULL, *blob2 = NULL;
	size_t n, n2;

	if (!s || agent_public_line_parse(s, &blob, &n, &comment) < 0)
		return;
	if (agent_public_line(blob, n, comment, &line) < 0 ||
	    agent_public_line_parse(line, &blob2, &n2, &comment2) < 0 || n != n2 ||
	    memcmp(blob, blob2, n) != 0 || (!comment) != (!comment2) ||
	    (comment && strcmp(comment, comment2) != 0))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char alg[AGENT_MAX_KEY_TYPE], fp[AGENT_FINGERPRINT_MAX];
	struct agent_sign_request req;

	if (size < 1 || size > (1u << 20))
		return 0;
	setup();
	switch (data[0] % 6) {
	case 0:
		stream(data + 1, size - 1);
		break;
	case 1:
		frames(data + 1, size - 1);
		break;
	case 2:
		keys_json(data + 1, size - 1);
		break;
	case 3:
		public_line(data + 1, size - 1);
		break;
	case 4:
		(void)agent_sign_response_parse(data + 1, size - 1, alg);
		break;
	case 5:
		if (agent_sign_request_parse(data + 1, size - 1, &req) == 0 &&
		    agent_key_blob_type(req.key, req.key_len, alg) == 0)
			(void)agent_fingerprint(req.key, req.key_len, fp);
		break;
	}
	return 0;
}

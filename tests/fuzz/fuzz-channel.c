/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the guest channel: the host's multiplexer (channel/mux.c) fed arbitrary
 * bytes as if from a guest -- after a HELLO or not, in chunks of varying size, with streams of
 * both parities on real socketpairs whose events are delivered -- and the exec records
 * (ex_record_decode, ex_request_parse, an encode/parse round trip). The first byte chooses.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "channel/mux.h"
#include "channel/proto.h"
#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_STREAMS (2 * CH_MAX_STREAMS + 8)

struct harness {
	struct mux_stream *watched[FUZZ_MAX_STREAMS];
	int peers[FUZZ_MAX_STREAMS]; /* the users' ends */
	size_t n_peers;
	unsigned opened;
};

static struct harness H;

static void h_watch(void *u, struct mux_stream *s, int fd, uint32_t events)
{
	for (size_t i = 0; i < FUZZ_MAX_STREAMS; i++)
		if (H.watched[i] == s) {
			if (fd < 0)
				H.watched[i] = NULL;
			return;
		}
	if (fd < 0)
		abort(); /* forgetting a stream that was never watched */
	for (size_t i = 0; i < FUZZ_MAX_STREAMS; i++)
		if (!H.watched[i]) {
			H.watched[i] = s;
			return;
		}
	abort(); /* more streams than the limits allow */
}

static int new_pair(int *ret_ours)
{
	int sv[2];

	if (H.n_peers >= FUZZ_MAX_STREAMS)
		return -EMFILE;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	(void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
	(void)fcntl(sv[0], F_SETFL, O_NONBLOCK);
	/* Something for the mux to read and send on. */
	(void)write(sv[0], "user bytes", 10);
	H.peers[H.n_peers++] = sv[0];
	*ret_ours = sv[1];
	return 0;
}

static int h_accept(void *u, const char *service, int *ret_fd)
{
	if (strcmp(service, "ssh-agent") == 0)
		return new_pair(ret_fd);
	if (strcmp(service, "http-proxy") == 0)
		return -EAGAIN;
	return -ENOENT;
}

static void h_opened(void *u, void *cookie, int r, const char *text)
{
	if (cookie != &H)
		abort();
	if (r < 0 && !text)
		abort();
	H.opened--;
}

static const struct mux_ops ops = {.watch = h_watch, .accept = h_accept, .opened = h_opened};

static void drain_output(struct mux *m)
{
	const uint8_t *p;
	size_t n = mux_output(m, &p);

	/* What the mux writes must itself be well-formed frames. */
	for (size_t off = 0; off < n;) {
		struct ch_frame f;
		int r = ch_frame_decode(p + off, n - off, &f);
		if (r <= 0)
			abort();
		off += (size_t)r;
	}
	mux_output_consume(m, n);
}

static void fuzz_mux(const uint8_t *data, size_t size)
{
	uint8_t hello[CH_HEADER_LEN + CH_HELLO_LEN];
	struct mux *m = NULL;
	size_t off = 0;
	uint8_t flags;

	if (size < 1)
		return;
	flags = data[0];
	data++;
	size--;
	memset(&H, 0, sizeof(H));
	if (mux_new("fuzz", &ops, NULL, &m) < 0)
		return;
	mux_start(m);
	drain_output(m);
	if (flags & 1) {
		uint8_t p[CH_HELLO_LEN];
		ch_hello_payload(p);
		(void)ch_frame_encode(hello, CH_HELLO, 0, p, CH_HELLO_LEN);
		if (mux_feed(m, hello, sizeof(hello)) < 0)
			abort();
		drain_output(m);
	}
	while (off < size) {
		/* Chunks of 1..64 bytes or the rest, as the flags say. */
		size_t chunk = (flags & 2) ? (size_t)(data[off] % 64) + 1 : size - off;
		if (chunk > size - off)
			chunk = size - off;
		int r = mux_feed(m, data + off, chunk);
		off += chunk;
		drain_output(m);
		if (r < 0) {
			if (!(flags & 4))
				break;
			/* The driver's reconnection: start over on the same mux. */
			mux_reset(m);
			mux_start(m);
			drain_output(m);
			continue;
		}
		if ((flags & 8) && mux_ready(m) && H.opened < 2) {
			int fd;
			if (new_pair(&fd) == 0) {
				if (mux_open(m, "exec", fd, &H) == 0)
					H.opened++;
				else
					close(fd);
			}
		}
		/* Every stream is readable and writable, as a poll would say. */
		if (flags & 16)
			for (size_t i = 0; i < FUZZ_MAX_STREAMS; i++)
				if (H.watched[i]) {
					uint32_t ev =
					        POLLIN | POLLOUT | ((flags & 32) ? POLLHUP : 0);
					if (mux_stream_event(H.watched[i], ev) < 0)
						break;
					drain_output(m);
				}
		struct mux_info mi;
		mux_get_info(m, &mi);
		if (mi.streams > 2 * CH_MAX_STREAMS)
			abort();
	}
	mux_tick(m, (uint64_t)1 << 40);
	drain_output(m);
	mux_free(m);
	if (H.opened != 0)
		abort(); /* an open that was never answered */
	for (size_t i = 0; i < FUZZ_MAX_STREAMS; i++)
		if (H.watched[i])
			abort(); /* a stream outlived its mux */
	for (size_t i = 0; i < H.n_peers; i++)
		close(H.peers[i]);
}

static struct ex_request req, req2;
static uint8_t enc[EX_HEADER_LEN + EX_MAX_REQUEST];

static void fuzz_request(const uint8_t *p, size_t n)
{
	long k;

	if (ex_request_parse(p, n, &req) < 0)
		return;
	if (req.n_args > EX_MAX_ARGS || req.n_env > EX_MAX_ENV)
		abort();
	k = ex_request_encode(&req, enc, sizeof(enc));
	if (k < 0)
		return; /* over EX_MAX_REQUEST: the input was too */
	if (ex_request_parse(enc + EX_HEADER_LEN, (size_t)k - EX_HEADER_LEN, &req2) < 0)
		abort();
	if (req2.n_args != req.n_args || req2.n_env != req.n_env || req2.tty != req.tty ||
	    req2.login != req.login || req2.timeout_s != req.timeout_s)
		abort();
}

static void fuzz_records(const uint8_t *data, size_t size)
{
	size_t off = 0;

	while (off < size) {
		struct ex_record r;
		int n = ex_record_decode(data + off, size - off, &r);
		if (n <= 0)
			break;
		if ((size_t)n != EX_HEADER_LEN + r.len || (size_t)n > size - off)
			abort();
		if (r.type == EX_REQUEST)
			fuzz_request(r.payload, r.len);
		off += (size_t)n;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;

	if (!quiet) {
		log_set_max_level(LOG_CRIT);
		quiet = true;
	}
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		fuzz_mux(data + 1, size - 1);
		break;
	case 1:
		fuzz_records(data + 1, size - 1);
		break;
	default:
		fuzz_request(data + 1, size - 1);
		break;
	}
	return 0;
}

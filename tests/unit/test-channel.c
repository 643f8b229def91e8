/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The host side of the guest channel (channel/channels.h, channel/mux.h) against a peer that
 * speaks the protocol by hand on a unix socket, as QEMU's virtio-serial socket would carry it.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "channel/channels.h"
#include "channel/mux.h"
#include "channel/proto.h"
#include "util/log.h"

#define WS "ws1"
#define T_MS 3000

struct pframe {
	uint8_t type;
	uint32_t stream, len;
	uint8_t payload[CH_MAX_PAYLOAD];
};

static struct channels *C;
static int lfd = -1, pfd = -1;
static char dir[64], sock_path[100];
static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static char svc_workspace[256];
static unsigned svc_calls;

/* ---- the peer ---- */

static void peer_send_raw(const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t k = send(pfd, b, n, MSG_NOSIGNAL);
		assert_true(k > 0);
		b += k;
		n -= (size_t)k;
	}
}

static void peer_send(uint8_t type, uint32_t stream, const void *payload, uint32_t len)
{
	static uint8_t buf[CH_MAX_FRAME];

	peer_send_raw(buf, ch_frame_encode(buf, type, stream, payload, len));
}

static void peer_send_u32(uint8_t type, uint32_t stream, uint32_t v)
{
	uint8_t b[4];

	ch_put_u32(b, v);
	peer_send(type, stream, b, 4);
}

/* Reads exactly n bytes. 1: done, 0: timeout, -1: end of file or error. */
static int peer_read_exact(void *p, size_t n, int timeout_ms)
{
	uint8_t *b = p;

	while (n > 0) {
		struct pollfd pf = {.fd = pfd, .events = POLLIN};
		int r = poll(&pf, 1, timeout_ms);
		if (r == 0)
			return 0;
		assert_true(r > 0);
		ssize_t k = read(pfd, b, n);
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 1;
}

static int peer_recv(struct pframe *f, int timeout_ms)
{
	uint8_t h[CH_HEADER_LEN];
	int r = peer_read_exact(h, sizeof(h), timeout_ms);

	if (r <= 0)
		return r;
	f->type = h[0];
	assert_int_equal(h[1], 0);
	f->stream = ch_get_u32(h + 4);
	f->len = ch_get_u32(h + 8);
	assert_true(f->len <= CH_MAX_PAYLOAD);
	if (f->len == 0)
		return 1;
	r = peer_read_exact(f->payload, f->len, T_MS);
	assert_int_equal(r, 1);
	return 1;
}

static void peer_expect(struct pframe *f, uint8_t type)
{
	assert_int_equal(peer_recv(f, T_MS), 1);
	assert_int_equal(f->type, type);
}

static void peer_accept(void)
{
	struct pollfd pf = {.fd = lfd, .events = POLLIN};

	assert_int_equal(poll(&pf, 1, 5000), 1);
	pfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(pfd >= 0);
}

static void peer_close(void)
{
	if (pfd >= 0)
		close(pfd);
	pfd = -1;
}

static void peer_hello(void)
{
	static struct pframe f;
	uint8_t hello[CH_HELLO_LEN];

	peer_expect(&f, CH_HELLO);
	assert_int_equal(f.stream, 0);
	assert_int_equal(f.len, CH_HELLO_LEN);
	assert_memory_equal(f.payload, CH_MAGIC, CH_MAGIC_LEN);
	ch_hello_payload(hello);
	peer_send(CH_HELLO, 0, hello, sizeof(hello));
}

static void session_up(void)
{
	peer_accept();
	peer_hello();
	assert_int_equal(channels_wait_ready(C, WS, T_MS), 0);
}

/* Waits for the host to drop the connection, skipping what it still sent. */
static void peer_expect_dropped(void)
{
	static struct pframe f;
	int r;

	while ((r = peer_recv(&f, T_MS)) == 1)
		;
	assert_int_equal(r, -1);
	peer_close();
}

/* A PING answered proves the connection still runs. */
static void peer_ping(void)
{
	static struct pframe f;
	const uint8_t b[8] = "12345678";

	peer_send(CH_PING, 0, b, 8);
	do
		assert_int_equal(peer_recv(&f, T_MS), 1);
	while (f.type == CH_WINDOW);
	assert_int_equal(f.type, CH_PONG);
	assert_memory_equal(f.payload, b, 8);
}

static struct channel_info info(void)
{
	struct channel_info i;

	assert_int_equal(channels_info(C, WS, &i), 0);
	return i;
}

/* ---- opening from the host, on a thread (channels_open blocks) ---- */

struct opener {
	const char *service;
	unsigned timeout;
	int fd, r;
	struct slate_error err;
	pthread_t t;
};

static void *opener_main(void *p)
{
	struct opener *o = p;

	o->r = channels_open(C, WS, o->service, o->timeout, &o->fd, &o->err);
	return NULL;
}

static void opener_start(struct opener *o, const char *service, unsigned timeout)
{
	*o = (struct opener){.service = service, .timeout = timeout, .fd = -1};
	assert_int_equal(pthread_create(&o->t, NULL, opener_main, o), 0);
}

static int opener_join(struct opener *o)
{
	pthread_join(o->t, NULL);
	return o->r;
}

/* Opens an exec stream and answers OPEN_OK with window; returns the user's fd and the id. */
static int open_exec(uint32_t window, uint32_t *ret_id)
{
	static struct pframe f;
	struct opener o;
	uint32_t w;
	char svc[CH_MAX_SERVICE + 1];

	opener_start(&o, "exec", T_MS);
	peer_expect(&f, CH_OPEN);
	assert_true(ch_stream_is_host(f.stream));
	struct ch_frame cf = {
	        .type = CH_OPEN, .stream = f.stream, .len = f.len, .payload = f.payload};
	assert_int_equal(ch_open_parse(&cf, &w, svc), 0);
	assert_string_equal(svc, "exec");
	/* Streams slated opens get the bulk window; the guest's own get the initial one. */
	assert_int_equal(w, MUX_BULK_WINDOW);
	peer_send_u32(CH_OPEN_OK, f.stream, window);
	assert_int_equal(opener_join(&o), 0);
	assert_true(o.fd >= 0);
	*ret_id = f.stream;
	return o.fd;
}

/* ---- a service the guest may open: echoes ---- */

static void echo_service(int fd, const char *workspace, void *userdata)
{
	char buf[4096];
	ssize_t n;

	pthread_mutex_lock(&svc_lock);
	(void)snprintf(svc_workspace, sizeof(svc_workspace), "%s", workspace);
	svc_calls++;
	pthread_mutex_unlock(&svc_lock);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		if (write(fd, buf, (size_t)n) != n)
			break;
	close(fd);
}

/* ---- fixtures ---- */

static int setup(void **state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	(void)snprintf(dir, sizeof(dir), "/tmp/test-channel-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	(void)snprintf(sock_path, sizeof(sock_path), "%s/channel.sock", dir);
	(void)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4) < 0)
		return -1;
	if (channels_new(&C) < 0)
		return -1;
	if (channels_register(C, "ssh-agent", echo_service, NULL) < 0)
		return -1;
	return channels_attach(C, WS, sock_path);
}

static int teardown(void **state)
{
	channels_free(C);
	C = NULL;
	peer_close();
	close(lfd);
	unlink(sock_path);
	rmdir(dir);
	return 0;
}

/* ---- tests ---- */

static void test_hello(void **state)
{
	struct channel_info i;
	uint8_t hello[CH_HELLO_LEN];

	assert_int_equal(channels_wait_ready(C, "nope", 10), -ENOENT);
	assert_int_equal(channels_wait_ready(C, WS, 50), -ETIMEDOUT);
	/* Attaching again with the same path changes nothing. */
	assert_int_equal(channels_attach(C, WS, sock_path), 0);
	session_up();
	i = info();
	assert_true(i.attached && i.connected && i.ready);
	assert_int_equal(i.sessions, 1);
	assert_int_equal(i.errors, 0);
	assert_int_equal(i.streams, 0);

	peer_send(CH_EVENT, 0, "ready", 5);
	peer_ping();
	i = info();
	assert_string_equal(i.last_event, "ready");

	/* A HELLO during the session starts a new one: ours answers it, then the guest's. */
	ch_hello_payload(hello);
	peer_send(CH_HELLO, 0, hello, sizeof(hello));
	peer_hello();
	assert_int_equal(channels_wait_ready(C, WS, T_MS), 0);
	peer_ping();
	i = info();
	assert_int_equal(i.sessions, 2);
	assert_int_equal(i.errors, 0);
}

static void test_stale_bytes(void **state)
{
	static struct pframe f;
	uint8_t junk[300], hello[CH_HELLO_LEN], partial[CH_HEADER_LEN + 5];

	peer_accept();
	peer_expect(&f, CH_HELLO);
	/* The tail of a frame from before, something that starts like a HELLO, then one. */
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 7 + 1);
	peer_send_raw(junk, sizeof(junk));
	ch_frame_header(partial, CH_HELLO, 0, CH_HELLO_LEN);
	memcpy(partial + CH_HEADER_LEN, "SLATE", 5);
	peer_send_raw(partial, sizeof(partial));
	ch_hello_payload(hello);
	peer_send(CH_HELLO, 0, hello, sizeof(hello));
	assert_int_equal(channels_wait_ready(C, WS, T_MS), 0);
	peer_ping();
	assert_int_equal(info().errors, 0);
}

static void test_open_exec(void **state)
{
	static struct pframe f;
	uint32_t id;
	char buf[16];
	int fd;

	session_up();
	fd = open_exec(CH_INITIAL_WINDOW, &id);
	assert_int_equal(info().streams, 1);

	assert_int_equal(write(fd, "hello", 5), 5);
	peer_expect(&f, CH_DATA);
	assert_int_equal(f.stream, id);
	assert_int_equal(f.len, 5);
	assert_memory_equal(f.payload, "hello", 5);

	peer_send(CH_DATA, id, "world", 5);
	assert_int_equal(read(fd, buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "world", 5);

	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	peer_expect(&f, CH_EOF);
	assert_int_equal(f.stream, id);

	peer_send(CH_EOF, id, NULL, 0);
	assert_int_equal(read(fd, buf, sizeof(buf)), 0);
	/* Both ways ended: the host closes. */
	peer_expect(&f, CH_CLOSE);
	assert_int_equal(f.stream, id);
	peer_send(CH_CLOSE, id, NULL, 0);
	peer_ping();
	assert_int_equal(info().streams, 0);
	close(fd);

	/* The user closing its end sends CLOSE; the guest's answer frees the id. */
	fd = open_exec(CH_INITIAL_WINDOW, &id);
	close(fd);
	peer_expect(&f, CH_CLOSE);
	assert_int_equal(f.stream, id);
	peer_send(CH_CLOSE, id, NULL, 0);

	/* The guest closing first: its last bytes still reach the user, then EOF. */
	fd = open_exec(CH_INITIAL_WINDOW, &id);
	peer_send(CH_DATA, id, "bye", 3);
	peer_send(CH_CLOSE, id, NULL, 0);
	peer_expect(&f, CH_CLOSE);
	assert_int_equal(read(fd, buf, sizeof(buf)), 3);
	assert_int_equal(read(fd, buf, sizeof(buf)), 0);
	close(fd);
	peer_ping();
	assert_int_equal(info().streams, 0);
	assert_int_equal(info().errors, 0);
}

static void test_open_fail(void **state)
{
	static struct pframe f;
	struct opener o;
	uint8_t b[64];
	int fd;

	/* No session yet. */
	assert_int_equal(channels_open(C, WS, "exec", 100, &fd, NULL), -ENOTCONN);
	assert_int_equal(channels_open(C, "nope", "exec", 100, &fd, NULL), -ENOENT);
	assert_int_equal(channels_open(C, WS, "Bad!", 100, &fd, NULL), -EINVAL);
	session_up();
	opener_start(&o, "exec", T_MS);
	peer_expect(&f, CH_OPEN);
	ch_put_u32(b, CH_FAIL_UNAVAILABLE);
	memcpy(b + 4, "exec is off", 11);
	peer_send(CH_OPEN_FAIL, f.stream, b, 15);
	assert_int_equal(opener_join(&o), -ECONNREFUSED);
	assert_string_equal(o.err.msg, "exec is off");
	assert_int_equal(info().streams, 0);
}

static void test_open_timeout(void **state)
{
	static struct pframe f;
	struct opener o;

	session_up();
	opener_start(&o, "exec", 200);
	peer_expect(&f, CH_OPEN);
	assert_int_equal(opener_join(&o), -ETIMEDOUT);
	/* The user's end is gone before the guest's answer: the host closes the stream. */
	peer_send_u32(CH_OPEN_OK, f.stream, CH_INITIAL_WINDOW);
	uint32_t id = f.stream;
	peer_expect(&f, CH_CLOSE);
	assert_int_equal(f.stream, id);
	peer_send(CH_CLOSE, id, NULL, 0);
	peer_ping();
	assert_int_equal(info().streams, 0);
	assert_int_equal(info().errors, 0);
}

/* Sends what the host granted, reading its WINDOWs, until no more comes. */
static void test_window_guest(void **state)
{
	static struct pframe f;
	static uint8_t data[CH_MAX_PAYLOAD];
	uint64_t credit = MUX_BULK_WINDOW, sent = 0;
	uint32_t id;
	int fd, r;

	session_up();
	fd = open_exec(CH_INITIAL_WINDOW, &id);
	memset(data, 'x', sizeof(data));
	for (;;) {
		while (credit > 0) {
			uint32_t n = credit < sizeof(data) ? (uint32_t)credit : sizeof(data);
			peer_send(CH_DATA, id, data, n);
			credit -= n;
			sent += n;
		}
		/* The user reads nothing: soon the host grants no more. */
		r = peer_recv(&f, 300);
		if (r == 0)
			break;
		assert_int_equal(r, 1);
		assert_int_equal(f.type, CH_WINDOW);
		credit += ch_get_u32(f.payload);
	}
	assert_true(sent >= MUX_BULK_WINDOW);
	assert_true(sent < MUX_BULK_WINDOW + 8u * 1024 * 1024);
	/* Exactly the window: fine. */
	peer_ping();
	assert_int_equal(info().errors, 0);
	/* One byte more: the channel drops, counts it, and comes back. */
	peer_send(CH_DATA, id, data, 1);
	peer_expect_dropped();
	{
		char buf[4096];
		ssize_t n;
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			;
		assert_true(n == 0 || errno == ECONNRESET);
	}
	close(fd);
	struct channel_info i = info();
	assert_int_equal(i.errors, 1);
	assert_non_null(strstr(i.last_error, "window"));
	session_up();
	assert_int_equal(info().sessions, 2);
}

struct writer {
	int fd;
	size_t n;
};

static void *writer_main(void *p)
{
	struct writer *w = p;
	static uint8_t buf[65536];
	size_t done = 0;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)i;
	while (done < w->n) {
		size_t k = w->n - done < sizeof(buf) ? w->n - done : sizeof(buf);
		ssize_t n = write(w->fd, buf, k);
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	(void)shutdown(w->fd, SHUT_WR);
	return NULL;
}

static void test_window_host(void **state)
{
	static struct pframe f;
	struct writer w;
	pthread_t t;
	uint64_t granted = 10000, got = 0;
	uint32_t id;

	session_up();
	w.fd = open_exec((uint32_t)granted, &id);
	w.n = 5u * 1024 * 1024;
	assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
	for (;;) {
		assert_int_equal(peer_recv(&f, T_MS), 1);
		if (f.type == CH_EOF)
			break;
		assert_int_equal(f.type, CH_DATA);
		assert_int_equal(f.stream, id);
		assert_true(f.len <= CH_MAX_PAYLOAD);
		got += f.len;
		assert_true(got <= granted);
		if (got == granted) {
			uint32_t inc = granted == 10000 ? 1 : 1024 * 1024;
			/* Nothing beyond the window comes, even after a while. */
			if (granted == 10000)
				assert_int_equal(peer_recv(&f, 200), 0);
			peer_send_u32(CH_WINDOW, id, inc);
			granted += inc;
		}
	}
	assert_int_equal(got, w.n);
	pthread_join(t, NULL);
	assert_int_equal(info().bytes_out, w.n);
	close(w.fd);
	peer_expect(&f, CH_CLOSE);
}

struct bad {
	const char *name;
	uint8_t bytes[40];
	size_t len;
};

static void test_bad_frames(void **state)
{
	static const struct bad cases[] = {
	        {"garbage",
	         {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	         12},
	        {"oversized", {CH_DATA, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1}, 12},
	        {"bad parity",
	         {CH_OPEN, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 8, 0, 4, 0, 0, 'e', 'x', 'e', 'c'},
	         20},
	        {"unknown type", {12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 12},
	        {"flags", {CH_PING, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8}, 20},
	        {"reserved",
	         {CH_PING, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8},
	         20},
	        {"stream on ping",
	         {CH_PING, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8},
	         20},
	        {"answer to nothing",
	         {CH_OPEN_OK, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 1, 0},
	         16},
	        {"event control", {CH_EVENT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 'a', '\n'}, 14},
	        {"version 2",
	         {CH_HELLO, 0,   0,   0,   0,   0,   0, 0, 0, 0, 0, 16, 'S', 'L',
	          'A',      'T', 'E', 'C', 'H', '1', 0, 0, 0, 2, 0, 0,  0,   0},
	         28},
	};
	uint64_t errors = 0;

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		session_up();
		peer_send_raw(cases[k].bytes, cases[k].len);
		peer_expect_dropped();
		errors++;
		struct channel_info i = info();
		if (i.errors != errors)
			fail_msg("%s: %llu errors", cases[k].name, (unsigned long long)i.errors);
	}
	/* It reconnects after each, and the new session works. */
	session_up();
	peer_ping();
	assert_int_equal(info().sessions, errors + 1);
}

static void test_guest_open(void **state)
{
	static struct pframe f;
	uint8_t b[4 + CH_MAX_SERVICE];
	int n;

	session_up();
	n = ch_open_payload(b, CH_INITIAL_WINDOW, "ssh-agent");
	peer_send(CH_OPEN, 1, b, (uint32_t)n);
	peer_expect(&f, CH_OPEN_OK);
	assert_int_equal(f.stream, 1);
	assert_int_equal(ch_get_u32(f.payload), CH_INITIAL_WINDOW);
	peer_send(CH_DATA, 1, "ping", 4);
	peer_expect(&f, CH_DATA);
	assert_int_equal(f.stream, 1);
	assert_memory_equal(f.payload, "ping", 4);
	pthread_mutex_lock(&svc_lock);
	assert_string_equal(svc_workspace, WS);
	pthread_mutex_unlock(&svc_lock);
	/* The service ends when the guest does; the host closes then. */
	peer_send(CH_EOF, 1, NULL, 0);
	assert_int_equal(peer_recv(&f, T_MS), 1);
	if (f.type == CH_EOF)
		assert_int_equal(peer_recv(&f, T_MS), 1);
	assert_int_equal(f.type, CH_CLOSE);
	assert_int_equal(f.stream, 1);
	peer_send(CH_CLOSE, 1, NULL, 0);

	/* Not a host service. */
	n = ch_open_payload(b, CH_INITIAL_WINDOW, "http-proxy");
	peer_send(CH_OPEN, 3, b, (uint32_t)n);
	peer_expect(&f, CH_OPEN_FAIL);
	assert_int_equal(f.stream, 3);
	assert_int_equal(ch_get_u32(f.payload), CH_FAIL_UNKNOWN_SERVICE);
	peer_ping();
	assert_int_equal(info().streams, 0);
	assert_int_equal(info().errors, 0);
}

/* A browser VM's channel (CHANNEL_ROLE_BROWSER) reaches only the services registered for its
 * role, and they are told the workspace it belongs to, not its own key. */
static void test_guest_roles(void **state)
{
	static struct pframe f;
	uint8_t b[4 + CH_MAX_SERVICE];
	int n;

	assert_int_equal(channels_register_for(C, "http-proxy",
	                                       CHANNEL_ROLE_WORKSPACE | CHANNEL_ROLE_BROWSER,
	                                       echo_service, NULL),
	                 0);
	assert_int_equal(channels_register_for(C, "x", 0, echo_service, NULL), -EINVAL);
	assert_int_equal(channels_register_for(C, "x", 8, echo_service, NULL), -EINVAL);
	/* The same key cannot change its owner or role while attached. */
	assert_int_equal(channels_attach_as(C, WS, "other", CHANNEL_ROLE_BROWSER, sock_path),
	                 -EEXIST);
	/* The workspace's connection (setup's) goes; a browser VM's comes on the same socket. */
	peer_accept();
	channels_detach(C, WS);
	peer_close();
	assert_int_equal(channels_attach_as(C, WS, "owner-ws", 3, sock_path), -EINVAL);
	assert_int_equal(channels_attach_as(C, WS, "owner-ws", CHANNEL_ROLE_BROWSER, sock_path), 0);
	session_up();

	/* The SSH agent is a workspace's service: unknown to a browser VM. */
	n = ch_open_payload(b, CH_INITIAL_WINDOW, "ssh-agent");
	peer_send(CH_OPEN, 1, b, (uint32_t)n);
	peer_expect(&f, CH_OPEN_FAIL);
	assert_int_equal(f.stream, 1);
	assert_int_equal(ch_get_u32(f.payload), CH_FAIL_UNKNOWN_SERVICE);

	n = ch_open_payload(b, CH_INITIAL_WINDOW, "http-proxy");
	peer_send(CH_OPEN, 3, b, (uint32_t)n);
	peer_expect(&f, CH_OPEN_OK);
	assert_int_equal(f.stream, 3);
	peer_send(CH_DATA, 3, "ping", 4);
	peer_expect(&f, CH_DATA);
	assert_memory_equal(f.payload, "ping", 4);
	pthread_mutex_lock(&svc_lock);
	assert_string_equal(svc_workspace, "owner-ws");
	pthread_mutex_unlock(&svc_lock);
}

static void test_stream_limit(void **state)
{
	static struct pframe f;
	static int fds[CH_MAX_STREAMS];
	uint8_t b[4 + CH_MAX_SERVICE];
	int n, fd;

	session_up();
	n = ch_open_payload(b, CH_INITIAL_WINDOW, "ssh-agent");
	for (uint32_t i = 0; i < CH_MAX_STREAMS; i++) {
		peer_send(CH_OPEN, 2 * i + 1, b, (uint32_t)n);
		peer_expect(&f, CH_OPEN_OK);
		assert_int_equal(f.stream, 2 * i + 1);
	}
	peer_send(CH_OPEN, 2 * CH_MAX_STREAMS + 1, b, (uint32_t)n);
	peer_expect(&f, CH_OPEN_FAIL);
	assert_int_equal(ch_get_u32(f.payload), CH_FAIL_TOO_MANY);
	assert_int_equal(info().streams, CH_MAX_STREAMS);

	/* Ours too. */
	for (int i = 0; i < CH_MAX_STREAMS; i++) {
		uint32_t id;
		fds[i] = open_exec(CH_INITIAL_WINDOW, &id);
	}
	assert_int_equal(channels_open(C, WS, "exec", T_MS, &fd, NULL), -EMFILE);
	assert_int_equal(info().streams, 2 * CH_MAX_STREAMS);

	for (uint32_t i = 0; i < CH_MAX_STREAMS; i++)
		peer_send(CH_CLOSE, 2 * i + 1, NULL, 0);
	for (uint32_t i = 0; i < CH_MAX_STREAMS; i++)
		peer_expect(&f, CH_CLOSE);
	peer_ping();
	assert_int_equal(info().streams, CH_MAX_STREAMS);
	/* Detaching ends every stream: the users see end of file. */
	channels_detach(C, WS);
	for (int i = 0; i < CH_MAX_STREAMS; i++) {
		char c;
		ssize_t k = read(fds[i], &c, 1);
		assert_true(k == 0 || (k < 0 && errno == ECONNRESET));
		close(fds[i]);
	}
	peer_expect_dropped();
	assert_int_equal(channels_wait_ready(C, WS, 10), -ENOENT);
	assert_int_equal(channels_info(C, WS, &(struct channel_info){0}), -ENOENT);
	/* No reconnection once detached. */
	struct pollfd pf = {.fd = lfd, .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 1500), 0);
}

static void test_switch_path(void **state)
{
	session_up();
	/* Another path: the old connection goes. */
	assert_int_equal(channels_attach(C, WS, "/nonexistent/channel.sock"), 0);
	peer_expect_dropped();
	assert_true(!info().connected);
	assert_int_equal(channels_attach(C, WS, sock_path), 0);
	session_up();
}

/* ---- the mux alone ---- */

static unsigned mux_state_calls;

static void stub_watch(void *u, struct mux_stream *s, int fd, uint32_t ev) {}
static int stub_accept(void *u, const char *service, int *ret_fd)
{
	return -ENOENT;
}
static void stub_opened(void *u, void *cookie, int r, const char *text) {}
static void stub_state(void *u)
{
	mux_state_calls++;
}

static const struct mux_ops stub_ops = {stub_watch, stub_accept, stub_opened, stub_state};

/* channels_probe: a PING goes out unless one waits already; its age grows until a PONG. */
static void test_probe(void **state)
{
	static struct pframe f;
	uint64_t ms = 99;

	assert_int_equal(channels_probe(C, "nope", &ms), -ENOENT);
	session_up();
	assert_int_equal(channels_probe(C, WS, &ms), 0);
	assert_int_equal(ms, 0);
	peer_expect(&f, CH_PING);
	(void)usleep(120 * 1000);
	/* Unanswered: no second PING, and the first one's age. */
	assert_int_equal(channels_probe(C, WS, &ms), 0);
	assert_true(ms >= 100 && ms < T_MS);
	peer_send(CH_PONG, 0, f.payload, 8);
	peer_ping(); /* the PONG was handled */
	assert_int_equal(channels_probe(C, WS, &ms), 0);
	assert_int_equal(ms, 0);
	peer_expect(&f, CH_PING);
}

/* slated's ENDED record: a known reason, then text. */
static void test_ended_record(void **state)
{
	uint8_t buf[EX_HEADER_LEN + 1 + CH_MAX_TEXT + 1];
	struct ex_record r;

	ex_record_header(buf, EX_ENDED, 7);
	buf[EX_HEADER_LEN] = EX_END_COMPROMISED;
	memcpy(buf + EX_HEADER_LEN + 1, "leaked", 6);
	assert_int_equal(ex_record_decode(buf, EX_HEADER_LEN + 7, &r), EX_HEADER_LEN + 7);
	assert_int_equal(r.type, EX_ENDED);
	assert_int_equal(r.payload[0], EX_END_COMPROMISED);
	assert_int_equal(ex_record_decode(buf, EX_HEADER_LEN + 6, &r), 0);
	buf[EX_HEADER_LEN] = 0; /* no such reason */
	assert_int_equal(ex_record_decode(buf, EX_HEADER_LEN + 7, &r), -EPROTO);
	buf[EX_HEADER_LEN] = EX_END_UNRESPONSIVE + 1;
	assert_int_equal(ex_record_decode(buf, EX_HEADER_LEN + 7, &r), -EPROTO);
	buf[EX_HEADER_LEN] = EX_END_PAUSED;
	buf[EX_HEADER_LEN + 2] = '\n'; /* not text */
	assert_int_equal(ex_record_decode(buf, EX_HEADER_LEN + 7, &r), -EPROTO);
	ex_record_header(buf, EX_ENDED, 1); /* a reason without text */
	assert_int_equal(ex_record_decode(buf, sizeof(buf), &r), -EPROTO);
	ex_record_header(buf, EX_ENDED, 2 + CH_MAX_TEXT); /* text too long */
	assert_int_equal(ex_record_decode(buf, sizeof(buf), &r), -EPROTO);
}

static void test_mux_bytewise(void **state)
{
	struct mux *m;
	uint8_t in[200], hello[CH_HELLO_LEN];
	const uint8_t *out;
	size_t n = 0, k;

	assert_int_equal(mux_new("m", &stub_ops, NULL, &m), 0);
	mux_start(m);
	k = mux_output(m, &out);
	assert_int_equal(k, CH_HEADER_LEN + CH_HELLO_LEN);
	assert_int_equal(out[0], CH_HELLO);
	mux_output_consume(m, k);
	/* Stale bytes, a HELLO, a PING and an unknown stream's DATA, one byte at a time. */
	memset(in, CH_HELLO, 30);
	n = 30;
	ch_hello_payload(hello);
	n += ch_frame_encode(in + n, CH_HELLO, 0, hello, CH_HELLO_LEN);
	n += ch_frame_encode(in + n, CH_PING, 0, "abcdefgh", 8);
	n += ch_frame_encode(in + n, CH_DATA, 7, "zz", 2);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(mux_feed(m, in + i, 1), 0);
	assert_true(mux_ready(m));
	assert_int_equal(mux_state_calls, 1);
	k = mux_output(m, &out);
	assert_int_equal(k, CH_HEADER_LEN + 8);
	assert_int_equal(out[0], CH_PONG);
	assert_memory_equal(out + CH_HEADER_LEN, "abcdefgh", 8);
	mux_output_consume(m, k);
	/* An unknown service. */
	n = ch_frame_encode(in, CH_OPEN, 5, "\0\0\0\x10x", 5);
	assert_int_equal(mux_feed(m, in, n), 0);
	k = mux_output(m, &out);
	assert_int_equal(out[0], CH_OPEN_FAIL);
	mux_output_consume(m, k);
	mux_tick(m, UINT64_MAX / 2);
	k = mux_output(m, &out);
	assert_int_equal(out[0], CH_PING);
	mux_reset(m);
	assert_false(mux_ready(m));
	mux_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_mux_bytewise),
	        cmocka_unit_test(test_ended_record),
	        cmocka_unit_test_setup_teardown(test_probe, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_hello, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_stale_bytes, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_open_exec, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_open_fail, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_open_timeout, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_window_guest, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_window_host, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_bad_frames, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_guest_open, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_guest_roles, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_stream_limit, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_switch_path, setup, teardown),
	};

	log_set_max_level(getenv("TEST_CHANNEL_DEBUG") ? LOG_DEBUG : LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

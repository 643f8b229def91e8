/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The guest channel's multiplexer for ONE connection (doc/guest-channel.md), host side, without
 * any I/O of its own on the connection: the driver reads the connection into the mux's input
 * buffer (mux_input_buffer + mux_input_commit, or mux_feed), writes out what mux_output()
 * shows, and polls each stream's socket as the watch callback asks, handing the events to
 * mux_stream_event(). Every stream is a non-blocking AF_UNIX socket (our end of a socketpair);
 * the mux reads and writes it itself, within the windows.
 *
 * Any protocol violation makes mux_input_commit()/mux_feed() return a negative error after the
 * mux logged it (workspace, reason, the frame's header) and counted it; the driver then drops
 * the connection and calls mux_reset().
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "channel/proto.h"

#define MUX_READ_CHUNK (256u * 1024) /* what the driver reads from the connection at once */
/* The window we grant the guest on a stream we open (an exec's output): under TCG a guest that
 * waits for window every 128 KiB spends its time waking up, not sending (doc/performance.md,
 * "Guest channel"). Streams the guest opens get CH_INITIAL_WINDOW: the guest decides how many of
 * those there are, and each may hold its whole window in our memory. */
#define MUX_BULK_WINDOW (4u * 1024 * 1024)
#define MUX_PING_MS 30000u
#define MUX_PONG_MS 90000u
#define MUX_TEXT_MAX 256

struct mux;
struct mux_stream;

struct mux_ops {
	/* Watch fd for events (poll.h bits; 0: take it out of the set). fd < 0: the stream is
	 * gone (its fd is closed right after the call); forget it. */
	void (*watch)(void *userdata, struct mux_stream *s, int fd, uint32_t events);
	/* The guest opens service: return our end of a new stream (non-blocking socket), or
	 * -ENOENT (unknown service) / another error (unavailable). */
	int (*accept)(void *userdata, const char *service, int *ret_fd);
	/* The answer to mux_open()'s cookie: 0 (OPEN_OK), -ECONNREFUSED (OPEN_FAIL, text says
	 * why) or -ECONNRESET (the session ended first). Called exactly once per cookie. */
	void (*opened)(void *userdata, void *cookie, int r, const char *text);
	/* Ready or EVENT text changed. May be NULL. */
	void (*state)(void *userdata);
};

struct mux_info {
	bool ready;
	unsigned streams;
	uint64_t sessions, errors, bytes_in, bytes_out;
	char last_error[MUX_TEXT_MAX];
	char last_event[MUX_TEXT_MAX];
};

/* workspace names the connection in log lines. Returns 0 or -ENOMEM. */
int mux_new(const char *workspace, const struct mux_ops *ops, void *userdata, struct mux **ret);
/* Closes every stream (users see EOF/ECONNRESET). NULL is fine. */
void mux_free(struct mux *m);
/* A connection is up: queue our HELLO, skip the guest's bytes until its HELLO. */
void mux_start(struct mux *m);
/* The connection is gone: end every stream (pending opens get -ECONNRESET), drop buffers.
 * Streams the guest already closed keep draining their last bytes to their users. */
void mux_reset(struct mux *m);

/* Where the driver may read into: room for at least MUX_READ_CHUNK bytes. */
void mux_input_buffer(struct mux *m, uint8_t **ret_p, size_t *ret_len);
/* Processes n bytes just read into mux_input_buffer(). Returns 0 or a negative error (protocol
 * violation: drop the connection). */
int mux_input_commit(struct mux *m, size_t n);
/* Copies and processes bytes (tests, fuzzing). Same return as mux_input_commit(). */
int mux_feed(struct mux *m, const uint8_t *p, size_t n);
/* Whether the driver should read the connection now (false while our output is backed up). */
bool mux_want_input(const struct mux *m);

/* The bytes waiting to be written to the connection; returns their number. */
size_t mux_output(const struct mux *m, const uint8_t **ret_p);
void mux_output_consume(struct mux *m, size_t n);

/* Events for a stream the watch callback named. May free s. Returns 0 or a negative error
 * (the output buffer overflowed: drop the connection). */
int mux_stream_event(struct mux_stream *s, uint32_t revents);
struct mux *mux_stream_mux(struct mux_stream *s);
void *mux_stream_get_data(struct mux_stream *s);
void mux_stream_set_data(struct mux_stream *s, void *data);

/* Opens a stream to service in the guest over fd (our end, non-blocking; taken on success).
 * The answer comes through ops->opened(cookie). Returns 0, -ENOTCONN (no session), -EINVAL
 * (bad service name), -EMFILE (CH_MAX_STREAMS of ours open), -ENOBUFS. */
int mux_open(struct mux *m, const char *service, int fd, void *cookie);

/* Keepalive: PING every MUX_PING_MS, log when no PONG came for MUX_PONG_MS. */
void mux_tick(struct mux *m, uint64_t now_ms);
/* Asks whether the guest still answers: sends a PING unless one is unanswered already, and
 * sets *ret_unanswered_ms to how long the oldest unanswered PING has waited (0 just sent).
 * Returns 0, or -ENOTCONN without a session. */
int mux_probe(struct mux *m, uint64_t now_ms, uint64_t *ret_unanswered_ms);
bool mux_ready(const struct mux *m);
void mux_get_info(const struct mux *m, struct mux_info *ret);
void *mux_get_userdata(const struct mux *m);

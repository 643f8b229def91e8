/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * slate-guest's internals (doc/guest-channel.md): one process, one poll() loop. chan.c owns the
 * transport, the frames and the stream table; exec.c runs the host's "exec" streams; fwd.c
 * forwards local connections (the egress proxy port, the SSH agent socket) to the host; user.c
 * reads /etc/passwd and /etc/group. Everything is non-blocking and every buffer has a hard size.
 */

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "parse.h"
#include "proto.h"

/* ---- log and time (main.c) ---- */

void guest_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Monotonic milliseconds. */
int64_t now_ms(void);
/* Lowers *next to t. */
static inline void deadline_min(int64_t *next, int64_t t)
{
	if (t > 0 && t < *next)
		*next = t;
}

/* ---- poll table (main.c): rebuilt every loop iteration ---- */

typedef void (*poll_fn)(void *ctx, short revents);
/* Polls fd for events this iteration and calls fn(ctx, revents) when it reports something. */
void poll_add(int fd, short events, poll_fn fn, void *ctx);

/* ---- bounded byte buffer ---- */

struct gbuf {
	uint8_t *p;
	size_t off, len, cap; /* the bytes are p[off, off + len) */
};

int gbuf_init(struct gbuf *b, size_t cap);
void gbuf_free(struct gbuf *b);
static inline uint8_t *gbuf_data(const struct gbuf *b)
{
	return b->p + b->off;
}
/* Appends n bytes; the caller has checked that len + n <= cap. */
void gbuf_append(struct gbuf *b, const void *p, size_t n);
void gbuf_consume(struct gbuf *b, size_t n);
/* Writes what b holds to fd until it is empty or fd would block (0), or fd fails (-errno). */
int gbuf_write(struct gbuf *b, int fd);

/* ---- channel (chan.c) ---- */

/* Stop reading local sources while this much is queued for the channel. */
#define OUTQ_HIGH (1024u * 1024)

enum stream_kind { ST_EXEC, ST_FWD, ST_IDENTITY, ST_BROWSER };

struct exec;
struct fwd;
struct ident;
struct browser;

struct stream {
	uint32_t id;
	enum stream_kind kind;
	bool opening;      /* guest-opened, no OPEN_OK yet */
	bool accepting;    /* host-opened, our OPEN_OK or OPEN_FAIL not sent yet */
	bool sent_eof;     /* we sent EOF */
	bool got_eof;      /* the host sent EOF */
	bool sent_close;   /* we sent CLOSE: waiting for the host's */
	bool dead;         /* gone; freed at the end of the loop iteration */
	uint32_t send_win; /* DATA bytes the host lets us send */
	uint32_t recv_win; /* DATA bytes we let the host send and have not received */
	struct exec *exec; /* the service's state; NULL once it sent CLOSE */
	struct fwd *fwd;
	struct ident *ident;     /* an "identity" stream until it answered */
	struct browser *browser; /* a "browser" stream */
	struct stream *grave_next;
};

struct chunk {
	struct chunk *next;
	uint32_t off, len, cap;
	uint8_t data[];
};

extern size_t outq_bytes;
/* Whether a session with the host is up. */
bool chan_session(void);
/* A chunk with room for one whole frame (CH_MAX_FRAME bytes). NULL when out of memory. */
struct chunk *chunk_get(void);
void chunk_put(struct chunk *c);
/* Queues a filled chunk (one or more whole frames) for the channel. */
void chan_queue(struct chunk *c);
/* Queues one frame whose payload is p1 then p2 (either may be empty). */
int chan_send(uint8_t type, uint32_t stream, const void *p1, uint32_t n1, const void *p2,
              uint32_t n2);
/* How many frames one stream_read_data() fills at most. */
#define READ_BATCH 16
/* What s's window lets one stream_read_data() read, in READ_BATCH frames at most. */
size_t stream_read_room(const struct stream *s, uint8_t rec);
/* Reads up to max bytes (at most stream_read_room()) from fd straight into DATA frames for s,
 * each behind a record header of type rec (0: none). Charges the window. Returns bytes read, 0 at
 * end of file, -errno. */
ssize_t stream_read_data(struct stream *s, int fd, uint8_t rec, size_t max);
/* Sends CLOSE once; the stream stays until the host's CLOSE. */
void stream_close(struct stream *s);
/* Grants the host more window: budget is how much more the stream can buffer beyond what it
 * has buffered and already granted. Small grants wait unless the host is nearly out. */
void stream_grant(struct stream *s, size_t budget);
/* Opens a guest stream for service; the caller fills in s->fwd. NULL when out of ids/memory. */
struct stream *stream_open(const char *service, uint32_t window);
/* Answers a host OPEN left accepting: OPEN_OK (err 0), or OPEN_FAIL "unavailable" with why, which
 * frees the stream. */
void stream_accepted(struct stream *s, int err, const char *why);
/* How many guest-opened streams exist (CH_MAX_STREAMS at most). */
unsigned guest_stream_count(void);

void chan_init(const char *channel);
void chan_poll(void);
void chan_timers(int64_t now, int64_t *next);
void chan_flush(void);
/* Calls each live stream's advance step, then frees the dead ones. */
void streams_advance(void);
/* Adds each live stream's fds to the poll table. */
void streams_poll(void);

/* ---- exec sessions (exec.c) ---- */

/* The host opened an "exec" stream. Returns 0 or -errno (answered with OPEN_FAIL). */
int exec_open(struct stream *s);
void exec_data(struct stream *s, const uint8_t *p, size_t n);
void exec_eof(struct stream *s);
/* The stream ends before the session did: hang up the command, free everything. */
void exec_abort(struct stream *s);
void exec_poll(struct stream *s);
void exec_advance(struct stream *s);
void exec_init(void);
void exec_poll_sigchld(void);
void exec_timers(int64_t now, int64_t *next);
/* Calls fn(ctx, wait status) once pid (a child of ours that no exec session owns) is reaped.
 * 0, or -ENOSPC when too many are watched. */
int child_watch(pid_t pid, void (*fn)(void *ctx, int status), void *ctx);
void child_unwatch(pid_t pid);

/* ---- forwarded connections (fwd.c) ---- */

/* The port Chromium's DevTools listen on in the browser VM: a host-opened "cdp" stream connects
 * there (slate-guest's own 9222 listener is the workspace's end). */
#define DEVTOOLS_PORT 9223
/* DEVTOOLS_PORT, or --devtools-port's (the tests'). */
extern int devtools_port;
int fwd_init(int proxy_port, int cdp_port, const char *agent_socket);
/* The host opened a "cdp" stream: connect to 127.0.0.1:devtools_port. 0: connected (answer
 * OPEN_OK), 1: connecting (fwd answers with stream_accepted()), -errno (answer OPEN_FAIL). */
int fwd_connect(struct stream *s);
void fwd_data(struct stream *s, const uint8_t *p, size_t n);
void fwd_eof(struct stream *s);
void fwd_open_ok(struct stream *s);
void fwd_abort(struct stream *s);
void fwd_poll(struct stream *s);
void fwd_advance(struct stream *s);
void fwd_poll_listeners(void);
void fwd_timers(int64_t now, int64_t *next);

/* ---- the browser VM's Chromium (browser.c) ---- */

/* The host opened a "browser" stream. 0, -EBUSY (one browser at a time) or -ENOMEM. */
int browser_open(struct stream *s);
void browser_data(struct stream *s, const uint8_t *p, size_t n);
void browser_eof(struct stream *s);
/* The stream is gone: Chromium stops and its profile is closed all the same. */
void browser_abort(struct stream *s);
void browser_advance(void);
void browser_poll(void);
void browser_timers(int64_t now, int64_t *next);
/* slate-guest --browser: the same protocol on stdin and stdout. Exit status. */
int browser_main(void);

/* ---- the poll loop (main.c) ---- */

/* Empties the poll table (before the poll_add()s of an iteration). */
void poll_reset(void);
/* Polls the table until next (monotonic ms) and calls the handlers. 0 or -errno. */
int poll_run(int64_t next);

/* ---- users (user.c) ---- */

struct guest_user {
	char name[64];
	uid_t uid;
	gid_t gid;
	char home[512];
	char shell[256];
};

/* The workspace user: "slate" (the test image), else uid 1000 (ubuntu on Ubuntu images), else
 * root. Returns 0. */
int user_default(struct guest_user *u);
/* Looks a user up in /etc/passwd by name (len bytes) or, with name NULL, by uid. */
int user_lookup(const char *name, size_t len, uid_t uid, struct guest_user *ret);
/* The user's groups from /etc/group, the primary one first. Returns how many (<= max). */
int user_groups(const struct guest_user *u, gid_t *groups, int max);

/* ---- provisioning (provision.c) ---- */

/* Writes data to path through a temporary file (path.slate-tmp) and a rename, owned by uid:gid,
 * with mode; creates the directories above it. 0 or -errno. */
int write_atomic(const char *path, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid);
/* The same without the fsync: for files a crash may leave old (the identity's, written while a
 * start waits; the kernel writes them back within seconds). */
int write_atomic_nosync(const char *path, const void *data, size_t len, mode_t mode, uid_t uid,
                        gid_t gid);

/* slate-guest --provision: reads the host's provisioning request on stdin. Exit status. */
int provision_main(void);
/* Where provisioning leaves the environment every session starts with (NAME=VALUE lines). */
#define PROVISION_ENV_FILE "/run/slate/env"

/* ---- residue probe (probe.c) ---- */

/* slate-guest --probe: the guest half of `slate probe` (doc/residue.md), stdin to stdout. Exit
 * status: 0, 1 when it could not go on, 2 on a malformed request. */
int probe_main(void);

/* ---- identity after a snapshot restore (identity.c) ---- */

/* slate-guest --identity: one line on stdin gives the guest its own RNG seed, clock, home mount,
 * hostname and machine id. Exit status: 0, 1 when a step failed, 2 on a malformed line. */
int identity_main(void);
/* The host opened an "identity" stream: the same step, its line as DATA, its answer as DATA
 * then EOF and CLOSE, run in this process. 0 or -ENOMEM. */
int identity_open(struct stream *s);
void identity_data(struct stream *s, const uint8_t *p, size_t n);
void identity_eof(struct stream *s);
void identity_abort(struct stream *s);
/* Whether this runs in a slate guest: its channel device (virtio-serial port, or vsock with a
 * guest CID) is there. */
bool chan_in_guest(void);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The guest channel's wire format (doc/guest-channel.md is the specification): the multiplexing
 * frames that carry every host<->guest stream over one byte stream (a virtio-serial port or one
 * vsock connection), and the records of an exec session, which travel inside a stream and, the
 * same way, between `slate` and slated on an upgraded API connection.
 *
 * This file and proto.c depend on libc only: slate-guest (static, libc only) compiles them too.
 * Every decoder takes hostile bytes: it checks every length against the buffer and the limits
 * below before it reads, never allocates, and says "need more bytes" (0), "here is one" (> 0:
 * bytes consumed) or "malformed" (-EBADMSG, -EMSGSIZE, -EPROTO) -- after which the channel (or
 * the session) is closed.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- multiplexing frames ---- */

#define CH_VERSION 1
#define CH_MAGIC "SLATECH1" /* 8 bytes, starts a HELLO's payload */
#define CH_MAGIC_LEN 8
#define CH_HEADER_LEN 12
#define CH_MAX_PAYLOAD (64u * 1024)
#define CH_MAX_FRAME (CH_HEADER_LEN + CH_MAX_PAYLOAD)
#define CH_MAX_STREAMS 256                /* open at once, per side */
#define CH_INITIAL_WINDOW (256u * 1024)   /* what each side grants a new stream */
#define CH_MAX_WINDOW (16u * 1024 * 1024) /* a grant that would exceed this is a protocol error */
#define CH_MAX_SERVICE 32
#define CH_MAX_TEXT 256 /* OPEN_FAIL messages and EVENT text */
#define CH_HELLO_LEN (CH_MAGIC_LEN + 4 + 4)
#define CH_VSOCK_PORT 7700 /* the one vsock port the guest connects to (host CID 2) */
#define CH_SERIAL_NAME "org.slate.channel.0"

enum ch_type {
	CH_HELLO = 1,     /* stream 0; magic, u32 version, u32 flags (0) */
	CH_OPEN = 2,      /* new stream; u32 initial window, then the service name */
	CH_OPEN_OK = 3,   /* u32 initial window */
	CH_OPEN_FAIL = 4, /* u32 reason (enum ch_fail), then a message (text) */
	CH_DATA = 5,      /* bytes, at most the receiver's remaining window */
	CH_WINDOW = 6,    /* u32 increment (> 0) */
	CH_EOF = 7,       /* the sender sends no more DATA on the stream */
	CH_CLOSE = 8,     /* the stream is over; answered by CLOSE; then the id is free */
	CH_PING = 9,      /* stream 0; 8 opaque bytes */
	CH_PONG = 10,     /* stream 0; the PING's 8 bytes */
	CH_EVENT = 11,    /* stream 0, guest to host; text: boot progress ("ready", ...) */
};

enum ch_fail {
	CH_FAIL_UNKNOWN_SERVICE = 1, /* not on the receiver's list */
	CH_FAIL_TOO_MANY = 2,        /* CH_MAX_STREAMS open already */
	CH_FAIL_UNAVAILABLE = 3,     /* the service exists but cannot take the stream now */
};

struct ch_frame {
	uint8_t type;
	uint8_t flags; /* 0 */
	uint32_t stream;
	uint32_t len;
	const uint8_t *payload; /* points into the decoded buffer */
};

/* Streams the host opens have even ids (2, 4, ...), the guest's odd ones; 0 is the channel. */
static inline bool ch_stream_is_host(uint32_t id)
{
	return id != 0 && (id & 1) == 0;
}

/*
 * Decodes one frame from buf. Returns bytes consumed (> 0) and fills f, 0 when buf holds less
 * than a whole frame, -EMSGSIZE for a payload over CH_MAX_PAYLOAD, -EPROTO for an unknown type,
 * nonzero flags/reserved bits, a stream id that the type forbids (0 for stream frames, non-0 for
 * channel frames) or a payload length the type does not allow (see the table in proto.c).
 */
int ch_frame_decode(const uint8_t *buf, size_t len, struct ch_frame *f);
/* Writes a frame header into out (CH_HEADER_LEN bytes). */
void ch_frame_header(uint8_t out[CH_HEADER_LEN], uint8_t type, uint32_t stream, uint32_t len);
/* Encodes a whole frame (header + payload) into out (room for CH_HEADER_LEN + len). Returns the
 * frame's length. */
size_t ch_frame_encode(uint8_t *out, uint8_t type, uint32_t stream, const void *payload,
                       uint32_t len);

/* Encodes HELLO's payload (CH_HELLO_LEN bytes). */
void ch_hello_payload(uint8_t out[CH_HELLO_LEN]);
/* Checks a HELLO frame: magic, version. Returns 0, -EPROTO (bad magic), -EPROTONOSUPPORT. */
int ch_hello_check(const struct ch_frame *f);
/*
 * Resynchronisation after a (re)connection: returns the offset in buf where a HELLO frame
 * (header then magic) starts, or -1 when there is none yet; bytes before it are stale and are
 * dropped. Needs at least CH_HEADER_LEN + CH_MAGIC_LEN bytes from that offset to match.
 */
long ch_find_hello(const uint8_t *buf, size_t len);

/* OPEN: payload = u32 window + service ([a-z0-9-], 1..CH_MAX_SERVICE). Returns payload length,
 * or -EINVAL for a bad service name. out needs 4 + CH_MAX_SERVICE bytes. */
int ch_open_payload(uint8_t *out, uint32_t window, const char *service);
/* Parses OPEN's payload into window and service (NUL-terminated, CH_MAX_SERVICE + 1 bytes).
 * -EPROTO when malformed. */
int ch_open_parse(const struct ch_frame *f, uint32_t *window, char service[CH_MAX_SERVICE + 1]);
/* Parses a u32 payload (OPEN_OK window, WINDOW increment, OPEN_FAIL reason). */
uint32_t ch_get_u32(const uint8_t *p);
void ch_put_u32(uint8_t *p, uint32_t v);
uint16_t ch_get_u16(const uint8_t *p);
void ch_put_u16(uint8_t *p, uint16_t v);
/* Whether s is a valid service name. */
bool ch_service_valid(const char *s);
/* Text payloads (OPEN_FAIL message, EVENT): printable ASCII and UTF-8 bytes >= 0x80 only. */
bool ch_text_valid(const uint8_t *p, size_t len);

/* ---- exec session records ---- */

/*
 * A record: u8 type, u32 length (big-endian), then length bytes. Records may span DATA frames
 * (the stream is a byte stream). The first record from the client is exactly one REQUEST.
 */
#define EX_HEADER_LEN 5
#define EX_MAX_RECORD (64u * 1024)   /* every record but REQUEST */
#define EX_MAX_REQUEST (256u * 1024) /* REQUEST */
#define EX_MAX_ARGS 4096
#define EX_MAX_ENV 1024
#define EX_MAX_FIELD (128u * 1024) /* one argument / environment entry */

enum ex_type {
	/* client -> guest */
	EX_REQUEST = 1,   /* fields, see below */
	EX_STDIN = 2,     /* bytes */
	EX_STDIN_EOF = 3, /* empty */
	EX_RESIZE = 4,    /* u16 rows, u16 cols */
	EX_SIGNAL = 5,    /* u32 signal: one of ex_signal_allowed() */
	/* guest -> client */
	EX_STARTED = 16, /* u32 pid */
	EX_STDOUT = 17,  /* bytes (with a PTY: the terminal's output) */
	EX_STDERR = 18,  /* bytes */
	EX_EXIT = 19,    /* u8 how (0 exited, 1 killed by a signal), u32 status or signal */
	EX_ERROR = 20,   /* text: the session could not start or broke; ends it */
	/* slated -> client only */
	EX_PROGRESS = 21, /* text: "creating", "booting"... (slate run) */
	EX_ENDED = 22,    /* u8 enum ex_end, then text: slated ended the session; nothing follows */
};

/* Why slated ended a session whose command was still running (EX_ENDED's first byte). */
enum ex_end {
	EX_END_PAUSED = 1,       /* the domain is paused */
	EX_END_COMPROMISED = 2,  /* the leak detector marked the workspace and paused it */
	EX_END_STOPPED = 3,      /* the domain stopped (powered off, destroyed, crashed, saved) */
	EX_END_UNRESPONSIVE = 4, /* the domain runs but the guest channel stopped answering */
};

/* REQUEST fields: u8 tag, u32 length, bytes (no NULs inside strings). */
enum ex_field {
	EXF_ARG = 1,     /* repeated, in order; at least one */
	EXF_ENV = 2,     /* "NAME=value", repeated */
	EXF_CWD = 3,     /* absolute path; default: the user's home */
	EXF_USER = 4,    /* "root" or the workspace user's name; default: the workspace user */
	EXF_TTY = 5,     /* u16 rows, u16 cols: run on a PTY */
	EXF_LOGIN = 6,   /* empty: run the user's login shell (ARG then optional) */
	EXF_TIMEOUT = 7, /* u32 seconds: the guest kills the command (SIGKILL) after this */
};

struct ex_record {
	uint8_t type;
	uint32_t len;
	const uint8_t *payload;
};

/* Decodes one record (same return convention as ch_frame_decode); checks the type's payload
 * size (RESIZE 4 bytes, SIGNAL 4, EXIT 5, STARTED 4, STDIN_EOF 0, text types valid text). */
int ex_record_decode(const uint8_t *buf, size_t len, struct ex_record *r);
void ex_record_header(uint8_t out[EX_HEADER_LEN], uint8_t type, uint32_t len);

/* A parsed REQUEST. Strings point into the record's bytes, which must outlive it; they are not
 * NUL-terminated in the record, so each carries a length, and ex_request_parse checks that none
 * contains a NUL. */
struct ex_str {
	const char *p;
	uint32_t len;
};
struct ex_request {
	struct ex_str args[EX_MAX_ARGS];
	uint32_t n_args;
	struct ex_str env[EX_MAX_ENV];
	uint32_t n_env;
	struct ex_str cwd, user; /* len 0: not given */
	bool tty, login;
	uint16_t rows, cols;
	uint32_t timeout_s; /* 0: none */
};

/* Parses a REQUEST's payload. -EPROTO when malformed: unknown tag, field over EX_MAX_FIELD, a
 * NUL inside a string, ENV without '=' or with an empty name, CWD not absolute, a repeated
 * single field, no ARG without LOGIN, more than EX_MAX_ARGS/EX_MAX_ENV. */
int ex_request_parse(const uint8_t *p, size_t len, struct ex_request *req);

/* Builds a REQUEST record (header included) into buf of size cap. Returns its length or
 * -EMSGSIZE. The fields are written from req (strings with their lengths). */
long ex_request_encode(const struct ex_request *req, uint8_t *buf, size_t cap);

/* The signals a client may send: HUP INT QUIT KILL USR1 USR2 TERM CONT STOP TSTP WINCH. */
bool ex_signal_allowed(uint32_t sig);

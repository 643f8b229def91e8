/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The guest channels of every workspace (doc/guest-channel.md), host side: one thread runs an
 * io_uring event loop (channel/loop.h) with one multiplexer (channel/mux.h) per connected
 * workspace. Every function here may be called from any thread but that one; each stream
 * reaches its user as one end of an AF_UNIX SOCK_STREAM socketpair.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

struct channels;

/* Starts the channel manager: one thread running an io_uring event loop. Returns 0 or -errno. */
int channels_new(struct channels **ret);
/* Stops the thread and closes everything (every stream's fd sees EOF/ECONNRESET); no other
 * call may be running or start. NULL is fine. */
void channels_free(struct channels *c);

/*
 * Connects (and keeps reconnecting every second while attached) to the virtio-serial unix
 * socket of the workspace's domain. Idempotent: attaching an attached workspace with the same
 * path is a no-op; with another path it switches. socket_path NULL registers the workspace
 * without a socket (vsock: the guest connects to us). Returns 0, -EINVAL (bad name or path),
 * -ENOMEM.
 */
int channels_attach(struct channels *c, const char *workspace, const char *socket_path);

/*
 * What kind of guest a channel leads to. Each service says which kinds may open it; the rest
 * get OPEN_FAIL "unknown service", as for a name never registered. A workspace's guest may open
 * every service registered with channels_register(); a browser VM (daemon/browser.h) only those
 * registered for CHANNEL_ROLE_BROWSER (the egress proxy), never the SSH agent.
 */
enum {
	CHANNEL_ROLE_WORKSPACE = 1u << 0,
	CHANNEL_ROLE_BROWSER = 1u << 1,
};
/*
 * channels_attach() for a channel under key (what channels_open() and friends take) that speaks
 * for workspace owner (what services are told) as a guest of one role. -EEXIST when key is
 * attached or connected already under another owner or role.
 */
int channels_attach_as(struct channels *c, const char *key, const char *owner, unsigned role,
                       const char *socket_path);
/* Stops reconnecting and closes the connection; every stream's fd sees EOF/ECONNRESET. */
void channels_detach(struct channels *c, const char *workspace);
/* Waits until the workspace's channel has a session (the guest answered HELLO), up to
 * timeout_ms. Returns 0, -ETIMEDOUT, or -ENOENT (not attached). */
int channels_wait_ready(struct channels *c, const char *workspace, unsigned timeout_ms);

/*
 * Opens a stream to service in the guest (host-opened: "exec"). Blocks until OPEN_OK/OPEN_FAIL
 * or timeout. Returns 0 and *ret_fd = our end of an AF_UNIX SOCK_STREAM socketpair (blocking,
 * CLOEXEC) whose other end the loop relays to the stream; -ENOENT not attached, -ENOTCONN no
 * session, -ECONNREFUSED OPEN_FAIL (err gets the guest's text), -ETIMEDOUT, -ECONNRESET (the
 * channel dropped while waiting), -EMFILE (256 host streams open), -EINVAL (bad service name).
 * err (may be NULL) says why on every failure. Closing the fd sends CLOSE;
 * shutdown(fd, SHUT_WR) sends EOF; the guest's EOF is read()'s 0.
 */
int channels_open(struct channels *c, const char *workspace, const char *service,
                  unsigned timeout_ms, int *ret_fd, struct slate_error *err);

/*
 * Services the guest may open ("http-proxy", "ssh-agent"): fn runs on a new detached thread per
 * stream and owns fd (blocking socketpair end, CLOEXEC); workspace says whose it is (valid
 * during the call only). Unregistered names get OPEN_FAIL unknown service. Register before
 * guests connect. Returns 0, -EINVAL, -EEXIST, -ENOSPC.
 */
typedef void (*channel_service_fn)(int fd, const char *workspace, void *userdata);
int channels_register(struct channels *c, const char *service, channel_service_fn fn,
                      void *userdata);
/* The same for the guests of the given roles (a mask of CHANNEL_ROLE_*); channels_register()
 * is CHANNEL_ROLE_WORKSPACE only. */
int channels_register_for(struct channels *c, const char *service, unsigned roles,
                          channel_service_fn fn, void *userdata);

struct channel_info {
	bool attached, connected, ready;
	unsigned streams;
	uint64_t sessions, errors, bytes_in, bytes_out; /* bytes: DATA payload from/to the guest */
	char last_error[256];
	char last_event[256];
};
/* Returns 0 or -ENOENT (not attached and no vsock connection ever came). */
int channels_info(struct channels *c, const char *workspace, struct channel_info *ret);

/*
 * Whether the workspace's guest still answers on its channel: sends a PING unless one is
 * unanswered already and sets *ret_unanswered_ms to how long the oldest unanswered PING has
 * waited (0: none was outstanding). Returns 0, -ENOENT (not attached), -ENOTCONN (no session).
 */
int channels_probe(struct channels *c, const char *workspace, uint64_t *ret_unanswered_ms);

/*
 * vsock: when /dev/vhost-vsock exists slated calls this to listen on AF_VSOCK CH_VSOCK_PORT;
 * lookup maps a peer CID to a workspace name (the caller reads live domain XML; it runs on a
 * thread of its own, never on the loop) and returns 0 or -ENOENT. Accepted connections run the
 * same mux as the serial socket; a second connection for a workspace replaces the first.
 * Returns 0 or -errno (-EAFNOSUPPORT without vsock, -EALREADY when listening already).
 */
typedef int (*channel_cid_lookup_fn)(unsigned cid, char *workspace, size_t len, void *userdata);
int channels_listen_vsock(struct channels *c, channel_cid_lookup_fn lookup, void *userdata);

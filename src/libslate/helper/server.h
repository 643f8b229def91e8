/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * slated-helper's side of helper/proto.h: the privileged acts slated may ask for, and nothing
 * else. Every request is checked whole (helper_request_check) before any of it is acted upon;
 * only root may ask (SO_PEERCRED).
 */

#include <stddef.h>

#include "helper/proto.h"

struct helper_server {
	const char *state_dir; /* absolute and canonical, fixed when the helper starts */
	const char *virtiofsd; /* the virtiofsd to run; NULL: VIRTIOFSD_DEFAULT */
};

/*
 * Handles one request of len bytes that came with the n_fds fds (the caller keeps and closes
 * them): checks it, acts on it when it passes, and fills *reply (status 0 or -errno, message,
 * value, start). A refused request is logged at warning level.
 */
void helper_handle(const struct helper_server *s, const void *msg, size_t len, const int *fds,
                   size_t n_fds, struct helper_reply *reply);

/*
 * Receives one message from the connected SOCK_SEQPACKET socket fd and answers it: at most
 * HELPER_FDS_MAX fds and only SCM_RIGHTS, or the request is refused; every received fd is closed
 * before this returns. Returns 1 when it answered a request, 0 at end of file, or -errno.
 */
int helper_serve_one(const struct helper_server *s, int fd);

/* Returns 0 when the peer of the connected socket fd is root (SO_PEERCRED), else -EPERM (or
 * -errno). */
int helper_peer_is_root(int fd);

/*
 * Serves the connected socket fd (slated's end of a socketpair, for a helper slated spawned)
 * until the peer closes it. The peer must be root, or one refusal is sent and the connection
 * closed. Returns 0 at end of file, or -errno.
 */
int helper_serve_conn(const struct helper_server *s, int fd);

/*
 * Accepts connections on the listening SOCK_SEQPACKET socket listen_fd (systemd's, or one of
 * the helper's own) and serves up to 16 of them at once, one request at a time, until stop_fd
 * (-1: none) becomes readable. A peer that is not root gets one refusal and is disconnected.
 * Returns 0 when stopped, or -errno.
 */
int helper_serve_listen(const struct helper_server *s, int listen_fd, int stop_fd);

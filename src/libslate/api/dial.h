/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Where the client finds slated, and the one function that opens a connection to it: a unix
 * socket here, or slated's socket on another host reached through OpenSSH's ssh client, which
 * runs "slate system dial-stdio" there (api_bridge()) and hands back one end of a socketpair.
 * Every API call and every upgraded connection (exec, shell, console) goes through api_dial().
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define API_SSH_USER_MAX 64
#define API_SSH_HOST_MAX 253

/* slated's address. A unix socket when ssh is false, else ssh://[user@]host[:port]. */
struct api_endpoint {
	bool ssh;
	char socket[108];                /* the unix socket's path (sun_path's size) */
	char user[API_SSH_USER_MAX + 1]; /* "" for ssh's own choice */
	char host[API_SSH_HOST_MAX + 1]; /* a name or an address, IPv6 without brackets */
	unsigned port;                   /* 0 for ssh's own choice */
	/*
	 * The ssh command line (SLATE_SSH): run by /bin/sh with ssh's arguments appended, as git
	 * runs GIT_SSH_COMMAND. NULL runs "ssh" from PATH. Not copied: it must outlive the
	 * endpoint.
	 */
	const char *ssh_command;
};

/* An open connection: fd, and for ssh the ssh process behind it (else pid 0). */
struct api_conn {
	int fd;
	pid_t pid;
};
#define API_CONN_NULL ((struct api_conn){.fd = -1})

/*
 * Parses url, which must be ssh://[USER@]HOST[:PORT] with HOST a name, an IPv4 address or an
 * IPv6 address in brackets, and nothing else: no other scheme, no path, query or password, no
 * USER or HOST that ssh could read as an option. Fills *ret (ssh_command NULL) and returns 0,
 * or returns -EINVAL and writes why to err.
 */
int api_endpoint_parse_host(const char *url, struct api_endpoint *ret, char *err, size_t errlen);

/* Fills *ret with the unix socket path. Returns 0, or -ENAMETOOLONG. */
int api_endpoint_unix(const char *path, struct api_endpoint *ret);

/* Writes ep for messages: the socket's path, or "ssh://user@host:port". Returns buf. */
const char *api_endpoint_name(const struct api_endpoint *ep, char *buf, size_t len);

/*
 * Opens a connection to slated at ep: connects to the unix socket, or starts ssh (in a session
 * of its own, so it never reads the terminal nor gets its signals; its stderr is ours) with one
 * end of a socketpair as its stdin and stdout. Returns 0 and the connection in *ret, or a
 * negative errno and why in err: the socket cannot be reached (api_socket_explain()), or ssh
 * cannot be run. An ssh that starts but cannot log in shows only when the connection ends
 * without an answer: then api_conn_fail() says why.
 */
int api_dial(const struct api_endpoint *ep, struct api_conn *ret, char *err, size_t errlen);

/*
 * Starts ssh to ep with fd as its stdin and stdout (api_dial()'s way; fd stays the caller's to
 * close). Returns 0 and its pid in *ret_pid, or a negative errno and why in err.
 */
int api_ssh_start(const struct api_endpoint *ep, int fd, pid_t *ret_pid, char *err, size_t errlen);

/*
 * Closes c's fd and reaps its ssh, which ends once it has passed on the end of our input
 * (killed after a few seconds if it does not). Returns ssh's wait status (0 for a unix
 * socket, or when there was nothing to close). c is left closed.
 */
int api_conn_close(struct api_conn *c);

/*
 * For a connection that ended before slated answered: closes it and writes why to buf, "cannot
 * reach slated on ssh://...: ssh exited 255: ..." for ssh, api_socket_explain()'s message for
 * a socket. Returns -ECONNREFUSED (-EACCES for a socket that refuses us).
 */
int api_conn_fail(const struct api_endpoint *ep, struct api_conn *c, const char *detail, char *buf,
                  size_t len);

/* Writes why ssh's wait status ended a connection to ep, as api_conn_fail() does. */
void api_ssh_status_explain(const struct api_endpoint *ep, int status, char *buf, size_t len);

/*
 * slate system dial-stdio: copies in to sock and sock to out until sock ends, both ways at
 * once (non-blocking, a buffer each way), shutting sock's writing side down when in ends.
 * Returns 0 when slated closed the connection, or a negative errno when in, out or sock failed.
 */
int api_bridge(int in, int out, int sock);

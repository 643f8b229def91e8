/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for slated-helper's request check (helper/proto.c). The first byte is the
 * number of fds (0-3), then 8 bytes describe each (socket or not, domain, type, listening,
 * writable, file type); the rest is the message as the helper receives it. Besides not
 * crashing, a request the check lets through must have every property the helper's actions
 * rely on: exact size, magic, version, a known op, a NUL-terminated path of the right shape,
 * the fds the op takes, a share of root's only read-only (gid 0 only root's), and the state
 * directory where the op needs it.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "helper/proto.h"

#define STATE "/var/lib/slate"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const mode_t modes[] = {S_IFREG, S_IFIFO, S_IFSOCK, S_IFDIR, S_IFCHR, 0};
static const int domains[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, 0};
static const int types[] = {SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET, 0};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct helper_fd_info fds[3];
	struct helper_request q;
	char why[HELPER_MESSAGE_MAX];
	size_t n_fds;
	int r;

	if (size < 1)
		return 0;
	n_fds = data[0] % 4;
	data++;
	size--;
	if (size < n_fds * 8)
		return 0;
	for (size_t i = 0; i < n_fds; i++, data += 8, size -= 8) {
		fds[i] = (struct helper_fd_info){
		        .is_socket = data[0] & 1,
		        .domain = domains[data[1] % (sizeof(domains) / sizeof(domains[0]))],
		        .type = types[data[2] % (sizeof(types) / sizeof(types[0]))],
		        .listening = data[3] & 1,
		        .writable = data[4] & 1,
		        .mode = modes[data[5] % (sizeof(modes) / sizeof(modes[0]))],
		};
	}
	memset(why, 'x', sizeof(why));
	r = helper_request_check(data, size, fds, n_fds, STATE, why, sizeof(why));
	if (r < 0) {
		/* Refused: -EINVAL or -EPERM, with a message. */
		if ((r != -22 && r != -1) || !memchr(why, '\0', sizeof(why)) || !why[0])
			abort();
		return 0;
	}
	if (r != 0 || size != sizeof(q))
		abort();
	memcpy(&q, data, sizeof(q));
	if (q.magic != HELPER_MAGIC || q.version != HELPER_VERSION || !helper_op_name(q.op) ||
	    !memchr(q.path, '\0', sizeof(q.path)) || n_fds > HELPER_FDS_MAX)
		abort();
	switch (q.op) {
	case HELPER_POOL_MOUNT:
	case HELPER_POOL_UNMOUNT:
		if (n_fds || q.flags || q.uid || q.gid || q.pid || q.start || strcmp(q.path, STATE))
			abort();
		break;
	case HELPER_SHARE_SERVE:
		if (!helper_path_ok(q.path) || n_fds < 1 || !fds[0].is_socket ||
		    fds[0].domain != AF_UNIX || fds[0].type != SOCK_STREAM || !fds[0].listening ||
		    (q.uid == 0 && !(q.flags & HELPER_SHARE_READONLY)) ||
		    (q.gid == 0 && q.uid != 0) || q.uid == (uint32_t)-1 || q.gid == (uint32_t)-1 ||
		    (q.flags & ~HELPER_SHARE_READONLY) || q.pid || q.start ||
		    !strncmp(q.path, STATE "/", strlen(STATE) + 1) || !strcmp(q.path, STATE) ||
		    strstr(q.path, "/../") || strstr(q.path, "//"))
			abort();
		if (n_fds == 2 && (fds[1].is_socket || !fds[1].writable))
			abort();
		break;
	case HELPER_SHARE_STOP:
		if (n_fds || q.flags || q.uid || q.gid || q.path[0] || q.pid <= 1 || !q.start)
			abort();
		break;
	default:
		abort();
	}
	return 0;
}

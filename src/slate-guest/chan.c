/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * The guest's end of the channel (doc/guest-channel.md): the transport (vsock, the virtio-serial
 * port, or a unix socket for tests), the output queue, frame dispatch and the stream table.
 *
 * Output is a queue of chunks that each hold whole frames; DATA from a pipe or socket is read
 * straight into a chunk behind its headers, and the queue is written with writev(). Input is
 * read into one buffer that always has room for a whole frame, and each frame is handled in
 * place: a stream's buffers always have room for what its window allows.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#include "guest.h"

#define RBUF_CAP (4 * CH_MAX_FRAME)
/* Stop reading the channel while this much is queued to it (replies pile up otherwise). */
#define CHAN_READ_LIMIT (8u * 1024 * 1024)
#define SMALL_CHUNK 2048
/* What one write() to a virtio-serial port takes at most (virtio_console: one buffer of up to
 * 32 KiB per write, a write() per iovec of a writev()). Every buffer costs the host a notification
 * and the guest an interrupt, so the port gets whole units where it can. */
#define DEV_WRITE_UNIT (32u * 1024)
#define FREE_CHUNKS_MAX 48
#define RETRY_DEVICE_MS 1000 /* looking for a channel device / vsock connection */
#define RETRY_UNIX_MS 200    /* --channel SOCKET */
#define PROBE_HOST_MS 100    /* virtio-serial: is the host end connected again? */
/* virtio-serial: when no host HELLO comes this long after the host end is connected (or after a
 * protocol error), we send ours: a restarted slate-guest finds the host's end still connected,
 * and slated only sends HELLO when it connects. Long enough that a connecting host's HELLO, sent
 * at once, wins, so the two do not cross at every boot. */
#define HELLO_WAIT_MS 500

enum transport { T_NONE, T_DEV, T_UNIX, T_VSOCK };

static struct {
	const char *opt_path; /* --channel */
	enum transport kind;
	int fd;
	bool host_up;     /* T_DEV: the host end is connected (no POLLHUP) */
	bool session;     /* the host's HELLO arrived and was answered */
	int64_t hello_at; /* T_DEV: send an unsolicited HELLO then, unless a session began */
	int64_t retry_at;
	bool missing_logged;
	char where[PATH_MAX];
	struct gbuf in;
	struct chunk *head, *tail;
} ch = {.fd = -1};

size_t outq_bytes;
static struct chunk *free_chunks;
static unsigned n_free_chunks;

static struct stream *streams[2 * CH_MAX_STREAMS];
static unsigned n_streams, n_host, n_guest;
static struct stream *graveyard;
static uint32_t next_guest_id = 1;

bool chan_session(void)
{
	return ch.session;
}

/* ---- output queue ---- */

struct chunk *chunk_get(void)
{
	struct chunk *c = free_chunks;

	if (c) {
		free_chunks = c->next;
		n_free_chunks--;
	} else {
		c = malloc(sizeof(*c) + CH_MAX_FRAME);
		if (!c)
			return NULL;
		c->cap = CH_MAX_FRAME;
	}
	c->next = NULL;
	c->off = c->len = 0;
	return c;
}

void chunk_put(struct chunk *c)
{
	if (c->cap == CH_MAX_FRAME && n_free_chunks < FREE_CHUNKS_MAX) {
		c->next = free_chunks;
		free_chunks = c;
		n_free_chunks++;
	} else {
		free(c);
	}
}

void chan_queue(struct chunk *c)
{
	c->next = NULL;
	if (ch.tail)
		ch.tail->next = c;
	else
		ch.head = c;
	ch.tail = c;
	outq_bytes += c->len - c->off;
}

static void outq_discard(void)
{
	while (ch.head) {
		struct chunk *c = ch.head;
		ch.head = c->next;
		chunk_put(c);
	}
	ch.tail = NULL;
	outq_bytes = 0;
}

int chan_send(uint8_t type, uint32_t stream, const void *p1, uint32_t n1, const void *p2,
              uint32_t n2)
{
	size_t total = CH_HEADER_LEN + (size_t)n1 + n2;
	struct chunk *c = ch.tail;

	if (total > CH_MAX_FRAME)
		return -EMSGSIZE;
	if (c && c->cap - c->len >= total) {
		/* Small frames share the last chunk: fewer iovecs, fewer writes. */
		outq_bytes += total;
	} else {
		if (total <= SMALL_CHUNK) {
			c = malloc(sizeof(*c) + SMALL_CHUNK);
			if (c)
				c->cap = SMALL_CHUNK;
		} else {
			c = malloc(sizeof(*c) + CH_MAX_FRAME);
			if (c)
				c->cap = CH_MAX_FRAME;
		}
		if (!c) {
			guest_log("out of memory for a frame");
			return -ENOMEM;
		}
		c->off = c->len = 0;
		chan_queue(c);
		outq_bytes += total;
	}
	ch_frame_header(c->data + c->len, type, stream, (uint32_t)(n1 + n2));
	c->len += CH_HEADER_LEN;
	if (n1)
		memcpy(c->data + c->len, p1, n1);
	c->len += n1;
	if (n2)
		memcpy(c->data + c->len, p2, n2);
	c->len += n2;
	return 0;
}

static int send_u32(uint8_t type, uint32_t stream, uint32_t v)
{
	uint8_t b[4];

	ch_put_u32(b, v);
	return chan_send(type, stream, b, 4, NULL, 0);
}

/* A DATA frame's payload at most: a whole frame is DEV_WRITE_UNIT * 2 bytes, headers included,
 * which virtio-serial takes in two writes (see chan_flush()). */
static size_t frame_payload_max(uint8_t rec)
{
	return 2 * DEV_WRITE_UNIT - CH_HEADER_LEN - (rec ? EX_HEADER_LEN : 0);
}

size_t stream_read_room(const struct stream *s, uint8_t rec)
{
	size_t extra = rec ? EX_HEADER_LEN : 0, per = frame_payload_max(rec);
	size_t win = s->send_win, room = 0;

	for (unsigned k = 0; k < READ_BATCH && win > extra; k++) {
		size_t p = win - extra < per ? win - extra : per;
		room += p;
		win -= extra + p;
	}
	return room;
}

ssize_t stream_read_data(struct stream *s, int fd, uint8_t rec, size_t max)
{
	size_t hdr = CH_HEADER_LEN + (rec ? EX_HEADER_LEN : 0);
	size_t extra = rec ? EX_HEADER_LEN : 0, per = frame_payload_max(rec);
	struct chunk *c[READ_BATCH];
	struct iovec iov[READ_BATCH];
	unsigned k = 0;
	ssize_t n;

	/* One readv() into as many frames as max needs: a command writing a lot is woken once
	 * per batch, not once per frame (under TCG every wakeup costs the guest an interrupt). */
	if (max == 0)
		return -EAGAIN;
	for (size_t want = max; want > 0 && k < READ_BATCH; k++) {
		c[k] = chunk_get();
		if (!c[k])
			break;
		iov[k].iov_base = c[k]->data + hdr;
		iov[k].iov_len = want < per ? want : per;
		want -= iov[k].iov_len;
	}
	if (k == 0)
		return -ENOMEM;
	n = readv(fd, iov, (int)k);
	if (n <= 0) {
		int e = errno;
		while (k > 0)
			chunk_put(c[--k]);
		return n == 0 ? 0 : -e;
	}
	size_t left = (size_t)n;
	for (unsigned i = 0; i < k; i++) {
		if (left == 0) {
			chunk_put(c[i]);
			continue;
		}
		size_t p = left < iov[i].iov_len ? left : iov[i].iov_len;
		ch_frame_header(c[i]->data, CH_DATA, s->id, (uint32_t)(extra + p));
		if (rec)
			ex_record_header(c[i]->data + CH_HEADER_LEN, rec, (uint32_t)p);
		c[i]->len = (uint32_t)(hdr + p);
		s->send_win -= (uint32_t)(extra + p);
		chan_queue(c[i]);
		left -= p;
	}
	return n;
}

/* ---- transport ---- */

static void session_end(void);

/* The host end went away (hard: the transport failed and is opened afresh). */
static void chan_lost(const char *why, bool hard)
{
	int64_t now = now_ms();

	if (why)
		guest_log("channel %s: %s", ch.where, why);
	session_end();
	ch.in.off = ch.in.len = 0;
	if (ch.kind == T_DEV && !hard) {
		/* A virtio-serial port stays open: wait for the host end to come back. */
		ch.host_up = false;
		ch.retry_at = now + PROBE_HOST_MS;
		return;
	}
	(void)close(ch.fd);
	ch.fd = -1;
	ch.retry_at = now + (ch.kind == T_UNIX ? RETRY_UNIX_MS : RETRY_DEVICE_MS);
	ch.kind = T_NONE;
}

/* Drops w written bytes from the queue's head. */
static void outq_consume(size_t w)
{
	outq_bytes -= w;
	while (w > 0) {
		struct chunk *c = ch.head;
		size_t left = c->len - c->off;
		if (w < left) {
			c->off += (uint32_t)w;
			break;
		}
		w -= left;
		ch.head = c->next;
		if (!ch.head)
			ch.tail = NULL;
		chunk_put(c);
	}
}

/* Writes the queue's head to the virtio-serial port in buffers of up to DEV_WRITE_UNIT: straight
 * from the head chunk when it holds a whole unit (a full DATA frame is two), else small frames
 * gathered into one. Returns the bytes written or -errno. */
static ssize_t dev_write(void)
{
	static uint8_t unit[DEV_WRITE_UNIT];
	struct chunk *c = ch.head;
	size_t left = c->len - c->off, n = 0;

	if (left >= DEV_WRITE_UNIT || !c->next ||
	    left + (c->next->len - c->next->off) > DEV_WRITE_UNIT) {
		ssize_t w = write(ch.fd, c->data + c->off,
		                  left < DEV_WRITE_UNIT ? left : DEV_WRITE_UNIT);
		return w < 0 ? -errno : w;
	}
	for (; c && n + (c->len - c->off) <= DEV_WRITE_UNIT; c = c->next) {
		memcpy(unit + n, c->data + c->off, c->len - c->off);
		n += c->len - c->off;
	}
	ssize_t w = write(ch.fd, unit, n);
	return w < 0 ? -errno : w;
}

void chan_flush(void)
{
	if (ch.fd < 0 || (ch.kind == T_DEV && !ch.host_up))
		return;
	while (ch.head) {
		if (ch.kind == T_DEV) {
			ssize_t w = dev_write();
			if (w == -EINTR)
				continue;
			if (w == 0 || w == -EAGAIN || w == -EWOULDBLOCK)
				return;
			if (w < 0) {
				chan_lost(strerror((int)-w), true);
				return;
			}
			outq_consume((size_t)w);
			continue;
		}

		struct iovec iov[64];
		int n = 0;

		for (struct chunk *c = ch.head; c && n < 64; c = c->next) {
			iov[n].iov_base = c->data + c->off;
			iov[n].iov_len = c->len - c->off;
			n++;
		}
		ssize_t w = writev(ch.fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			chan_lost(strerror(errno), true);
			return;
		}
		outq_consume((size_t)w);
	}
}

static int open_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		(void)close(fd);
		return -e;
	}
	return fd;
}

static int open_vsock(void)
{
	struct sockaddr_vm sa = {
	        .svm_family = AF_VSOCK,
	        .svm_cid = VMADDR_CID_HOST,
	        .svm_port = CH_VSOCK_PORT,
	};
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	/* Blocking: the host answers or refuses at once; the kernel's timeout bounds the rest. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		int e = errno;
		(void)close(fd);
		return -e;
	}
	return fd;
}

/* Finds the virtio-serial port: the udev symlink, else by name in sysfs (no udev needed). */
static bool find_serial(char *path, size_t size)
{
	static const char link[] = "/dev/virtio-ports/" CH_SERIAL_NAME;
	struct dirent *de;
	bool found = false;
	DIR *d;

	if (access(link, F_OK) == 0) {
		snprintf(path, size, "%s", link);
		return true;
	}
	d = opendir("/sys/class/virtio-ports");
	if (!d)
		return false;
	while (!found && (de = readdir(d))) {
		char name_path[PATH_MAX], name[64];
		ssize_t n;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(name_path, sizeof(name_path), "/sys/class/virtio-ports/%s/name",
		         de->d_name);
		fd = open(name_path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, name, sizeof(name) - 1);
		(void)close(fd);
		if (n <= 0)
			continue;
		name[n] = '\0';
		name[strcspn(name, "\n")] = '\0';
		if (strcmp(name, CH_SERIAL_NAME) == 0) {
			snprintf(path, size, "/dev/%s", de->d_name);
			found = true;
		}
	}
	(void)closedir(d);
	return found;
}

bool chan_in_guest(void)
{
	char path[PATH_MAX], vendor[16] = "";
	unsigned cid = 0;
	ssize_t n;
	int fd;

	if (find_serial(path, sizeof(path)))
		return true;
	/*
	 * vsock alone says little: a host with vhost-vsock has /dev/vsock, and so has a sandbox
	 * (gVisor) whose own CID is a guest's. slate's guests are QEMU machines: SMBIOS says so.
	 */
	fd = open("/sys/class/dmi/id/sys_vendor", O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, vendor, sizeof(vendor) - 1) : -1;
	if (fd >= 0)
		(void)close(fd);
	if (n <= 0 || strncmp(vendor, "QEMU", 4) != 0)
		return false;
	fd = open("/dev/vsock", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0)
		cid = 0;
	(void)close(fd);
	return cid > VMADDR_CID_HOST && cid != VMADDR_CID_ANY;
}

static int open_device(const char *path)
{
	int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	return fd < 0 ? -errno : fd;
}

static void chan_connect(int64_t now)
{
	char path[PATH_MAX];
	int fd = -1;

	if (ch.opt_path) {
		struct stat st;
		bool sock = stat(ch.opt_path, &st) < 0 || S_ISSOCK(st.st_mode);

		fd = sock ? open_unix(ch.opt_path) : open_device(ch.opt_path);
		if (fd >= 0) {
			ch.kind = sock ? T_UNIX : T_DEV;
			snprintf(ch.where, sizeof(ch.where), "%s", ch.opt_path);
		} else if (!ch.missing_logged) {
			guest_log("cannot connect to %s: %s; retrying", ch.opt_path, strerror(-fd));
			ch.missing_logged = true;
		}
		if (fd < 0) {
			ch.retry_at = now + (sock ? RETRY_UNIX_MS : RETRY_DEVICE_MS);
			return;
		}
	} else {
		if (access("/dev/vsock", F_OK) == 0) {
			fd = open_vsock();
			if (fd >= 0) {
				ch.kind = T_VSOCK;
				snprintf(ch.where, sizeof(ch.where), "vsock:2:%d", CH_VSOCK_PORT);
			}
		}
		if (fd < 0 && find_serial(path, sizeof(path))) {
			fd = open_device(path);
			if (fd >= 0) {
				ch.kind = T_DEV;
				snprintf(ch.where, sizeof(ch.where), "%s", path);
			} else if (!ch.missing_logged) {
				guest_log("cannot open %s: %s; retrying", path, strerror(-fd));
				ch.missing_logged = true;
			}
		}
		if (fd < 0) {
			if (!ch.missing_logged)
				guest_log("no channel device (vsock port %d or virtio-serial port "
				          "%s) "
				          "yet; waiting for one",
				          CH_VSOCK_PORT, CH_SERIAL_NAME);
			ch.missing_logged = true;
			ch.retry_at = now + RETRY_DEVICE_MS;
			return;
		}
	}
	if (ch.missing_logged)
		guest_log("channel: %s", ch.where);
	ch.missing_logged = false;
	ch.fd = fd;
	ch.host_up = true;
	ch.session = false;
	ch.in.off = ch.in.len = 0;
	if (ch.kind == T_DEV) {
		/* Whether the host end is connected shows as POLLHUP. */
		ch.host_up = false;
		ch.retry_at = now;
	}
}

static void chan_process(void);

/* virtio-serial: POLLHUP while the host end is not connected, so it cannot be polled for: look
 * every PROBE_HOST_MS instead. Bytes in the port are kept for chan_process. */
static void probe_host(int64_t now)
{
	struct pollfd p = {.fd = ch.fd, .events = POLLIN};

	if (poll(&p, 1, 0) < 0)
		p.revents = POLLHUP;
	if (p.revents & POLLNVAL) {
		chan_lost("invalid file descriptor", true);
		return;
	}
	if (!(p.revents & POLLHUP)) {
		ch.host_up = true;
		ch.hello_at = now + HELLO_WAIT_MS;
		/* What came while the port still said POLLHUP: a host that connects writes its
		 * HELLO at once, and the port may show the bytes before the connection (a restored
		 * guest does, every time). Stale bytes of an earlier host go in chan_process, which
		 * drops everything up to a HELLO outside a session. */
		if (ch.in.len > 0)
			chan_process();
		return;
	}
	/* Kept, not dropped (above); bounded: more than a buffer full is an earlier host's. */
	for (int i = 0; i < 64; i++) {
		size_t used = ch.in.off + ch.in.len;
		ssize_t n;

		if (used >= ch.in.cap) {
			ch.in.off = ch.in.len = 0;
			used = 0;
		}
		n = read(ch.fd, ch.in.p + used, ch.in.cap - used);
		if (n <= 0)
			break;
		ch.in.len += (size_t)n;
	}
	ch.retry_at = now + PROBE_HOST_MS;
}

void chan_timers(int64_t now, int64_t *next)
{
	if (ch.fd < 0) {
		if (now >= ch.retry_at)
			chan_connect(now);
		if (ch.fd < 0) {
			deadline_min(next, ch.retry_at);
			return;
		}
	}
	if (ch.kind == T_DEV && !ch.host_up) {
		if (now >= ch.retry_at)
			probe_host(now);
		if (!ch.host_up)
			deadline_min(next, ch.retry_at);
	}
	if (ch.kind == T_DEV && ch.host_up && !ch.session && ch.hello_at) {
		if (now >= ch.hello_at) {
			uint8_t hello[CH_HELLO_LEN];
			ch_hello_payload(hello);
			(void)chan_send(CH_HELLO, 0, hello, sizeof(hello), NULL, 0);
			/* Again later, should this one be lost too. */
			ch.hello_at = now + 10 * HELLO_WAIT_MS;
		}
		deadline_min(next, ch.hello_at);
	}
}

void chan_init(const char *channel)
{
	ch.opt_path = channel;
	if (gbuf_init(&ch.in, RBUF_CAP) < 0) {
		guest_log("out of memory");
		exit(EXIT_FAILURE);
	}
	chan_connect(now_ms());
}

/* ---- streams ---- */

static struct stream *stream_find(uint32_t id)
{
	for (unsigned i = 0; i < n_streams; i++)
		if (streams[i]->id == id)
			return streams[i];
	return NULL;
}

static struct stream *stream_new(uint32_t id, enum stream_kind kind)
{
	struct stream *s;

	if (n_streams >= sizeof(streams) / sizeof(streams[0]))
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id = id;
	s->kind = kind;
	streams[n_streams++] = s;
	if (ch_stream_is_host(id))
		n_host++;
	else
		n_guest++;
	return s;
}

/* The id is free: the stream leaves the table now, its memory at the next loop iteration
 * (poll handlers of this one may still hold it). */
static void stream_kill(struct stream *s)
{
	if (s->dead)
		return;
	if (s->exec)
		exec_abort(s);
	if (s->fwd)
		fwd_abort(s);
	if (s->browser)
		browser_abort(s);
	identity_abort(s);
	s->dead = true;
	for (unsigned i = 0; i < n_streams; i++) {
		if (streams[i] == s) {
			streams[i] = streams[--n_streams];
			break;
		}
	}
	if (ch_stream_is_host(s->id))
		n_host--;
	else
		n_guest--;
	s->grave_next = graveyard;
	graveyard = s;
}

void stream_close(struct stream *s)
{
	if (s->sent_close || s->dead)
		return;
	s->sent_close = true;
	(void)chan_send(CH_CLOSE, s->id, NULL, 0, NULL, 0);
}

void stream_grant(struct stream *s, size_t budget)
{
	const size_t quarter = CH_INITIAL_WINDOW / 4;

	if (s->dead || s->sent_close || s->got_eof || budget == 0)
		return;
	/* Small grants wait until they add up, unless the host is nearly out of window. */
	if (budget < quarter && s->recv_win >= quarter)
		return;
	if (budget > CH_MAX_WINDOW - s->recv_win)
		budget = CH_MAX_WINDOW - s->recv_win;
	if (budget == 0)
		return;
	if (send_u32(CH_WINDOW, s->id, (uint32_t)budget) == 0)
		s->recv_win += (uint32_t)budget;
}

void stream_accepted(struct stream *s, int err, const char *why)
{
	if (s->dead || !s->accepting)
		return;
	s->accepting = false;
	if (err == 0) {
		(void)send_u32(CH_OPEN_OK, s->id, CH_INITIAL_WINDOW);
		return;
	}
	(void)chan_send(CH_OPEN_FAIL, s->id, "\0\0\0\3", 4, why, (uint32_t)strlen(why));
	stream_kill(s);
}

unsigned guest_stream_count(void)
{
	return n_guest;
}

struct stream *stream_open(const char *service, uint32_t window)
{
	uint8_t payload[4 + CH_MAX_SERVICE];
	struct stream *s;
	int len;

	if (!ch.session || n_guest >= CH_MAX_STREAMS)
		return NULL;
	while (stream_find(next_guest_id)) {
		next_guest_id += 2;
		if (next_guest_id > 0x7fffffff)
			next_guest_id = 1;
	}
	len = ch_open_payload(payload, window, service);
	if (len < 0)
		return NULL;
	s = stream_new(next_guest_id, ST_FWD);
	if (!s)
		return NULL;
	next_guest_id += 2;
	if (next_guest_id > 0x7fffffff)
		next_guest_id = 1;
	s->opening = true;
	s->recv_win = window;
	(void)chan_send(CH_OPEN, s->id, payload, (uint32_t)len, NULL, 0);
	return s;
}

/* Resets every stream: exec sessions hang up, forwarded connections close. Frames still queued
 * belong to the old session and go too: the host drops everything until our next HELLO. */
static void session_end(void)
{
	while (n_streams > 0)
		stream_kill(streams[n_streams - 1]);
	outq_discard();
	ch.session = false;
}

void streams_advance(void)
{
	while (graveyard) {
		struct stream *s = graveyard;
		graveyard = s->grave_next;
		free(s);
	}
	for (unsigned i = n_streams; i-- > 0;) {
		if (i >= n_streams)
			continue;
		struct stream *s = streams[i];
		if (s->exec)
			exec_advance(s);
		else if (s->fwd)
			fwd_advance(s);
	}
	browser_advance();
}

void streams_poll(void)
{
	for (unsigned i = 0; i < n_streams; i++) {
		struct stream *s = streams[i];
		if (s->exec)
			exec_poll(s);
		else if (s->fwd)
			fwd_poll(s);
	}
	browser_poll();
}

/* ---- frames from the host ---- */

static void proto_error(const struct ch_frame *f, const char *what)
{
	if (f)
		guest_log("protocol error: %s (type %u, stream %u, length %u); waiting for a new "
		          "HELLO",
		          what, f->type, f->stream, f->len);
	else
		guest_log("protocol error: %s; waiting for a new HELLO", what);
	session_end();
	ch.hello_at = now_ms() + HELLO_WAIT_MS;
}

static void handle_hello(const struct ch_frame *f)
{
	uint8_t hello[CH_HELLO_LEN];
	int r = ch_hello_check(f);

	session_end();
	if (r < 0) {
		guest_log("the host's HELLO is %s; waiting for a new one",
		          r == -EPROTONOSUPPORT ? "for another channel version" : "malformed");
		return;
	}
	ch_hello_payload(hello);
	(void)chan_send(CH_HELLO, 0, hello, sizeof(hello), NULL, 0);
	(void)chan_send(CH_EVENT, 0, "ready", 5, NULL, 0);
	ch.session = true;
}

static void handle_open(const struct ch_frame *f)
{
	char service[CH_MAX_SERVICE + 1];
	enum stream_kind kind;
	uint32_t window;
	struct stream *s;
	int r;

	if (!ch_stream_is_host(f->stream)) {
		proto_error(f, "OPEN with a guest stream id");
		return;
	}
	if (stream_find(f->stream)) {
		proto_error(f, "OPEN of a stream id in use");
		return;
	}
	if (ch_open_parse(f, &window, service) < 0) {
		proto_error(f, "malformed OPEN");
		return;
	}
	if (n_host >= CH_MAX_STREAMS) {
		(void)chan_send(CH_OPEN_FAIL, f->stream, "\0\0\0\2", 4, "too many streams", 16);
		return;
	}
	if (strcmp(service, "exec") == 0)
		kind = ST_EXEC;
	else if (strcmp(service, "identity") == 0)
		kind = ST_IDENTITY;
	else if (strcmp(service, "cdp") == 0)
		kind = ST_FWD;
	else if (strcmp(service, "browser") == 0)
		kind = ST_BROWSER;
	else {
		(void)chan_send(CH_OPEN_FAIL, f->stream, "\0\0\0\1", 4, "unknown service", 15);
		return;
	}
	s = stream_new(f->stream, kind);
	if (!s) {
		(void)chan_send(CH_OPEN_FAIL, f->stream, "\0\0\0\3", 4, "out of memory", 13);
		return;
	}
	s->send_win = window;
	s->recv_win = CH_INITIAL_WINDOW;
	switch (kind) {
	case ST_EXEC:
		r = exec_open(s);
		break;
	case ST_IDENTITY:
		r = identity_open(s);
		break;
	case ST_FWD:
		r = fwd_connect(s);
		break;
	default:
		r = browser_open(s);
		break;
	}
	if (r < 0) {
		char why[160];
		if (kind == ST_FWD)
			snprintf(why, sizeof(why), "cannot connect to 127.0.0.1:%d: %s",
			         devtools_port, strerror(-r));
		else if (r == -EBUSY)
			snprintf(why, sizeof(why), "a browser session is running already");
		else
			snprintf(why, sizeof(why), "%s", strerror(-r));
		stream_kill(s);
		(void)chan_send(CH_OPEN_FAIL, f->stream, "\0\0\0\3", 4, why, (uint32_t)strlen(why));
		return;
	}
	/* Connecting: fwd answers once connect() finished (stream_accepted()). */
	if (r == 1)
		return;
	(void)send_u32(CH_OPEN_OK, f->stream, CH_INITIAL_WINDOW);
}

static void handle_stream_frame(const struct ch_frame *f)
{
	struct stream *s = stream_find(f->stream);
	uint32_t v;

	/* Frames for an id that was just closed are in flight: dropped. */
	if (!s)
		return;
	/* The host opened it and has had no answer: it can send nothing yet. */
	if (s->accepting) {
		proto_error(f, "frame for a stream before its OPEN_OK");
		return;
	}
	switch (f->type) {
	case CH_OPEN_OK:
	case CH_OPEN_FAIL:
		if (!s->opening) {
			proto_error(f, "OPEN_OK/OPEN_FAIL for a stream that is not opening");
			return;
		}
		if (f->type == CH_OPEN_FAIL) {
			stream_kill(s);
			return;
		}
		v = ch_get_u32(f->payload);
		if (v > CH_MAX_WINDOW) {
			proto_error(f, "window over the maximum");
			return;
		}
		s->opening = false;
		s->send_win = v;
		if (s->fwd)
			fwd_open_ok(s);
		return;
	case CH_DATA:
		if (s->opening || s->got_eof) {
			proto_error(f, "DATA before OPEN_OK or after EOF");
			return;
		}
		if (f->len > s->recv_win) {
			proto_error(f, "DATA beyond the window");
			return;
		}
		s->recv_win -= f->len;
		if (s->sent_close)
			return;
		if (s->exec)
			exec_data(s, f->payload, f->len);
		else if (s->fwd)
			fwd_data(s, f->payload, f->len);
		else if (s->ident)
			identity_data(s, f->payload, f->len);
		else if (s->browser)
			browser_data(s, f->payload, f->len);
		return;
	case CH_WINDOW:
		v = ch_get_u32(f->payload);
		if (s->opening || v == 0 || v > CH_MAX_WINDOW - s->send_win) {
			proto_error(f, "bad WINDOW");
			return;
		}
		s->send_win += v;
		return;
	case CH_EOF:
		if (s->opening || s->got_eof) {
			proto_error(f, "EOF before OPEN_OK or after EOF");
			return;
		}
		s->got_eof = true;
		if (s->sent_close)
			return;
		if (s->exec)
			exec_eof(s);
		else if (s->fwd)
			fwd_eof(s);
		else if (s->ident)
			identity_eof(s);
		else if (s->browser)
			browser_eof(s);
		return;
	case CH_CLOSE:
		if (s->opening) {
			proto_error(f, "CLOSE before OPEN_OK");
			return;
		}
		if (!s->sent_close)
			(void)chan_send(CH_CLOSE, s->id, NULL, 0, NULL, 0);
		stream_kill(s);
		return;
	}
}

static void handle_frame(const struct ch_frame *f)
{
	switch (f->type) {
	case CH_HELLO:
		handle_hello(f);
		return;
	case CH_PING:
		(void)chan_send(CH_PONG, 0, f->payload, 8, NULL, 0);
		return;
	case CH_PONG:
		return;
	case CH_EVENT:
		proto_error(f, "EVENT from the host");
		return;
	case CH_OPEN:
		handle_open(f);
		return;
	default:
		handle_stream_frame(f);
		return;
	}
}

static void chan_process(void)
{
	struct gbuf *in = &ch.in;

	while (in->len > 0 && ch.fd >= 0) {
		struct ch_frame f;
		int r;

		if (!ch.session) {
			/* Drop everything up to a HELLO; keep a tail that may start one. */
			long off = ch_find_hello(gbuf_data(in), in->len);
			if (off < 0) {
				size_t keep = CH_HEADER_LEN + CH_MAGIC_LEN - 1;
				if (in->len > keep)
					gbuf_consume(in, in->len - keep);
				break;
			}
			gbuf_consume(in, (size_t)off);
		}
		r = ch_frame_decode(gbuf_data(in), in->len, &f);
		if (r == 0)
			break;
		if (r < 0) {
			struct ch_frame h = {
			        .type = gbuf_data(in)[0],
			        .stream = ch_get_u32(gbuf_data(in) + 4),
			        .len = ch_get_u32(gbuf_data(in) + 8),
			};
			proto_error(&h, r == -EMSGSIZE ? "frame too long" : "malformed frame");
			gbuf_consume(in, 1);
			continue;
		}
		handle_frame(&f);
		gbuf_consume(in, (size_t)r);
	}
	if (in->off > 0 && in->off + in->len > in->cap - CH_MAX_FRAME) {
		memmove(in->p, in->p + in->off, in->len);
		in->off = 0;
	}
}

static void chan_read(void)
{
	struct gbuf *in = &ch.in;
	size_t room;
	ssize_t n;

	if (in->off > 0 && in->off + in->len == in->cap) {
		memmove(in->p, in->p + in->off, in->len);
		in->off = 0;
	}
	room = in->cap - in->off - in->len;
	if (room == 0)
		return;
	n = read(ch.fd, in->p + in->off + in->len, room);
	if (n > 0) {
		in->len += (size_t)n;
		chan_process();
	} else if (n == 0) {
		chan_lost(ch.session ? "the host disconnected" : NULL, false);
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		chan_lost(strerror(errno), true);
	}
}

static void chan_event(void *ctx, short revents)
{
	(void)ctx;
	if (revents & POLLOUT)
		chan_flush();
	if (ch.fd >= 0 && (revents & (POLLIN | POLLHUP | POLLERR)))
		chan_read();
	if (ch.fd >= 0 && (revents & POLLNVAL))
		chan_lost("invalid file descriptor", true);
}

void chan_poll(void)
{
	short ev = 0;

	if (ch.fd < 0 || (ch.kind == T_DEV && !ch.host_up))
		return;
	if (outq_bytes < CHAN_READ_LIMIT)
		ev |= POLLIN;
	if (ch.head)
		ev |= POLLOUT;
	if (ev)
		poll_add(ch.fd, ev, chan_event, NULL);
}

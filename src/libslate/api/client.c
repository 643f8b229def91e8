/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <curl/curl.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <sodium.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/client.h"
#include "api/dial.h"
#include "api/protocol.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"
#include "version.h"

/* Request bodies may carry a secret on its way to the vault: wiped before they are freed. */
static void free_wipe(char *s)
{
	if (s) {
		sodium_memzero(s, strlen(s));
		free(s);
	}
}
DEFINE_TRIVIAL_CLEANUP_FUNC(char *, free_wipe);

#define MAX_CONNS 4

/*
 * Over ssh, curl connects to a listening socket of the client's own (an abstract address the
 * kernel picks) and ssh gets the accepted end: curl must make the connection itself, as libcurl
 * 7.88 connects even a socket CURLOPT_SOCKOPTFUNCTION calls connected. A connection is only
 * taken from a peer that is this very process (SO_PEERCRED).
 */
struct api_client {
	struct api_endpoint ep;
	char name[512]; /* ep for messages */
	CURL *curl;
	int listener;        /* ssh only: what curl connects to, else -1 */
	char abstract[16];   /* its address, without the leading NUL */
	curl_socket_t fresh; /* the socket curl opened for the connection it is making */
	/* The connections curl opened over ssh and has not closed yet: its fd, ssh's pid. */
	struct api_conn conns[MAX_CONNS];
	int dial_error;      /* starting ssh failed for the last call: the error, or 0 */
	char dial_why[1024]; /* and its message */
	int ssh_status;      /* wait status of the last ssh that ended */
	bool ssh_ended;      /* ... and whether there was one */
};

struct call_state {
	struct buf *data; /* the reply body, or the unfinished stream line */
	bool stream;      /* reply is application/x-ndjson */
	bool header_seen_version;
	char daemon_api_version[16];
	api_event_fn on_event;
	void *userdata;
	struct json_object *final; /* a stream's result or error event */
	int error;                 /* set when a stream cannot be parsed */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	(void)curl_global_init(CURL_GLOBAL_DEFAULT);
}

_printf_(3, 4) static int set_error(struct api_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		memset(err, 0, sizeof(*err));
		err->code = code;
		va_start(ap, fmt);
		(void)vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	}
	return code;
}

int api_client_new_endpoint(const struct api_endpoint *ep, struct api_client **ret)
{
	struct api_client *c;

	(void)pthread_once(&curl_once, curl_init_once);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->ep = *ep;
	c->listener = -1;
	c->fresh = CURL_SOCKET_BAD;
	(void)api_endpoint_name(ep, c->name, sizeof(c->name));
	for (size_t i = 0; i < MAX_CONNS; i++)
		c->conns[i] = API_CONN_NULL;
	c->curl = curl_easy_init();
	if (!c->curl) {
		api_client_free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

int api_client_new(const char *socket_path, struct api_client **ret)
{
	struct api_endpoint ep;
	int r = api_endpoint_unix(socket_path, &ep);

	return r < 0 ? r : api_client_new_endpoint(&ep, ret);
}

void api_client_free(struct api_client *c)
{
	if (!c)
		return;
	/* Closes curl's connections (close_socket() below) and so reaps their ssh. */
	if (c->curl)
		curl_easy_cleanup(c->curl);
	for (size_t i = 0; i < MAX_CONNS; i++)
		(void)api_conn_close(&c->conns[i]);
	(void)safe_close(c->listener);
	free(c);
}

const char *api_client_socket(const struct api_client *c)
{
	return c->name;
}

/* The listening socket curl connects to; its address in c->abstract. Returns 0 or -errno. */
static int ssh_listener(struct api_client *c)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	socklen_t len = sizeof(sa_family_t);
	_cleanup_close_ int fd = -1;
	size_t n;

	if (c->listener >= 0)
		return 0;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* An address of sa_family_t alone: the kernel picks a free abstract name (unix(7)). */
	if (bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, MAX_CONNS) < 0)
		return -errno;
	len = sizeof(sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		return -errno;
	n = len - offsetof(struct sockaddr_un, sun_path);
	if (n < 2 || n - 1 >= sizeof(c->abstract) || sa.sun_path[0] != '\0')
		return -EINVAL;
	memcpy(c->abstract, sa.sun_path + 1, n - 1);
	c->abstract[n - 1] = '\0';
	c->listener = TAKE_FD(fd);
	return 0;
}

static curl_socket_t open_socket(void *p, curlsocktype purpose, struct curl_sockaddr *addr)
{
	struct api_client *c = p;
	int fd;

	if (purpose != CURLSOCKTYPE_IPCXN)
		return CURL_SOCKET_BAD;
	fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
	c->fresh = fd < 0 ? CURL_SOCKET_BAD : fd;
	return c->fresh;
}

/* A connection curl made to the listener, from this process, or -1. */
static int accept_own(int listener)
{
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			return -1;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
		    cred.pid == getpid())
			return fd;
		(void)close(fd); /* someone else's: never handed to ssh */
	}
}

/* After curl connected, before the request: a new connection gets its ssh. */
static int on_connected(void *p, char *conn_ip, char *local_ip, int conn_port, int local_port)
{
	struct api_client *c = p;
	_cleanup_close_ int theirs = -1;
	size_t i;
	pid_t pid;
	int r;

	(void)conn_ip;
	(void)local_ip;
	(void)conn_port;
	(void)local_port;
	if (c->fresh == CURL_SOCKET_BAD)
		return CURL_PREREQFUNC_OK; /* a connection curl reused: its ssh runs */
	for (i = 0; i < MAX_CONNS && c->conns[i].fd >= 0; i++)
		;
	theirs = accept_own(c->listener);
	if (i == MAX_CONNS || theirs < 0) {
		c->dial_error = i == MAX_CONNS ? -EMFILE : -EIO;
		(void)snprintf(c->dial_why, sizeof(c->dial_why), "cannot connect to %s: %s",
		               c->name, i == MAX_CONNS ? "too many connections" : strerror(errno));
		return CURL_PREREQFUNC_ABORT;
	}
	r = api_ssh_start(&c->ep, theirs, &pid, c->dial_why, sizeof(c->dial_why));
	if (r < 0) {
		c->dial_error = r;
		return CURL_PREREQFUNC_ABORT;
	}
	c->conns[i] = (struct api_conn){.fd = c->fresh, .pid = pid};
	c->fresh = CURL_SOCKET_BAD;
	return CURL_PREREQFUNC_OK;
}

static int close_socket(void *p, curl_socket_t fd)
{
	struct api_client *c = p;

	if (fd == c->fresh)
		c->fresh = CURL_SOCKET_BAD;
	for (size_t i = 0; i < MAX_CONNS; i++) {
		if (c->conns[i].fd != fd)
			continue;
		c->ssh_ended = c->conns[i].pid > 0;
		if (c->ssh_ended)
			c->ssh_status = api_conn_close(&c->conns[i]);
		else
			(void)api_conn_close(&c->conns[i]);
		return 0;
	}
	return close(fd);
}

/* The transport failed: reaps every ssh (their connections stay curl's to close). */
static void reap_all(struct api_client *c)
{
	for (size_t i = 0; i < MAX_CONNS; i++) {
		struct api_conn only_pid = {.fd = -1, .pid = c->conns[i].pid};

		if (only_pid.pid <= 0)
			continue;
		c->ssh_ended = true;
		c->ssh_status = api_conn_close(&only_pid);
		c->conns[i].pid = 0;
	}
}

static size_t on_header(char *line, size_t size, size_t n, void *p)
{
	struct call_state *st = p;
	size_t len = size * n;
	static const char vh[] = API_VERSION_HEADER ":";
	static const char ct[] = "Content-Type:";

	if (len > sizeof(vh) && strncasecmp(line, vh, sizeof(vh) - 1) == 0) {
		const char *v = line + sizeof(vh) - 1;
		size_t vl;

		v += strspn(v, " \t");
		vl = strcspn(v, "\r\n");
		if (vl >= sizeof(st->daemon_api_version))
			vl = sizeof(st->daemon_api_version) - 1;
		memcpy(st->daemon_api_version, v, vl);
		st->daemon_api_version[vl] = '\0';
		st->header_seen_version = true;
	} else if (len > sizeof(ct) && strncasecmp(line, ct, sizeof(ct) - 1) == 0) {
		st->stream = strstr(line, API_CONTENT_NDJSON) != NULL;
	}
	return len;
}

/* Handles each complete line of an event stream. */
static int stream_lines(struct call_state *st)
{
	for (;;) {
		const uint8_t *p = buf_ptr(st->data);
		const uint8_t *nl = memchr(p, '\n', buf_len(st->data));
		struct json_object *ev = NULL;
		const char *type;
		size_t len;
		int r;

		if (!nl)
			return 0;
		len = (size_t)(nl - p);
		r = json_parse_object((const char *)p, len, API_MAX_EVENT, &ev);
		(void)buf_consume(st->data, len + 1);
		if (r < 0)
			return r;
		if (json_get_string(ev, "type", &type) < 0) {
			json_object_put(ev);
			return SLATE_ERR_INVALID_FORMAT;
		}
		if (streq(type, API_EVENT_PROGRESS)) {
			r = st->on_event ? st->on_event(ev, st->userdata) : 0;
			json_object_put(ev);
			if (r < 0)
				return r;
		} else if (streq(type, API_EVENT_RESULT) || streq(type, API_EVENT_ERROR)) {
			json_object_put(st->final);
			st->final = ev;
		} else {
			json_object_put(ev); /* unknown event types are for newer clients */
		}
	}
}

static size_t on_data(char *p, size_t size, size_t n, void *userdata)
{
	struct call_state *st = userdata;
	size_t len = size * n;

	if (buf_put(st->data, p, len) < 0) {
		st->error = SLATE_ERR_TOO_LARGE;
		return 0; /* aborts the transfer */
	}
	if (st->stream) {
		int r = stream_lines(st);
		if (r < 0) {
			st->error = r;
			return 0;
		}
		/* An unfinished line longer than an event may be is not an event. */
		if (buf_len(st->data) > API_MAX_EVENT) {
			st->error = SLATE_ERR_TOO_LARGE;
			return 0;
		}
	}
	return len;
}

static int error_from_reply(struct json_object *o, unsigned status, struct api_error *err)
{
	const char *code = NULL, *message = NULL;
	int r = status == 403 ? -EPERM : status == 404 ? -ENOENT : -EIO;

	if (api_error_parse(o, &code, &message) < 0)
		return set_error(err, r, "slated answered with HTTP status %u", status);
	if (streq(code, API_ERR_API_VERSION))
		r = SLATE_ERR_PROTOCOL_VERSION;
	(void)set_error(err, r, "%s", message);
	if (err) {
		err->status = status;
		(void)snprintf(err->kind, sizeof(err->kind), "%s", code);
	}
	return r;
}

int api_client_call(struct api_client *c, const char *method, const char *path,
                    struct json_object *body, api_event_fn on_event, void *userdata,
                    struct json_object **ret, struct api_error *err)
{
	_cleanup_(free_wipep) char *body_text = NULL;
	_cleanup_json_ struct json_object *doc = NULL;
	struct curl_slist *headers = NULL;
	struct call_state st = {.on_event = on_event, .userdata = userdata};
	char url[512], vh[64];
	long status = 0;
	CURLcode cc;
	int r;

	if (strlen(path) > 400 || path[0] != '/')
		return set_error(err, -EINVAL, "invalid API path");
	(void)snprintf(url, sizeof(url), "http://slated%s", path);
	(void)snprintf(vh, sizeof(vh), "%s: %d", API_VERSION_HEADER, SLATE_API_VERSION);
	st.data = buf_new(API_MAX_REPLY);
	if (!st.data)
		return set_error(err, -ENOMEM, "out of memory");

	curl_easy_reset(c->curl);
	c->dial_error = 0;
	c->ssh_ended = false;
	if (c->ep.ssh) {
		r = ssh_listener(c);
		if (r < 0) {
			buf_free(st.data);
			return set_error(err, r, "cannot connect to %s: %s", c->name, strerror(-r));
		}
		(void)curl_easy_setopt(c->curl, CURLOPT_ABSTRACT_UNIX_SOCKET, c->abstract);
		(void)curl_easy_setopt(c->curl, CURLOPT_OPENSOCKETFUNCTION, open_socket);
		(void)curl_easy_setopt(c->curl, CURLOPT_OPENSOCKETDATA, c);
		(void)curl_easy_setopt(c->curl, CURLOPT_PREREQFUNCTION, on_connected);
		(void)curl_easy_setopt(c->curl, CURLOPT_PREREQDATA, c);
		(void)curl_easy_setopt(c->curl, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
		(void)curl_easy_setopt(c->curl, CURLOPT_CLOSESOCKETDATA, c);
	} else {
		(void)curl_easy_setopt(c->curl, CURLOPT_UNIX_SOCKET_PATH, c->ep.socket);
	}
	(void)curl_easy_setopt(c->curl, CURLOPT_URL, url);
	(void)curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
	(void)curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
	(void)curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
	(void)curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, &st);
	(void)curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_data);
	(void)curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &st);
	(void)curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, 10L);
	/* No proxy may ever see this request, whatever the environment says. */
	(void)curl_easy_setopt(c->curl, CURLOPT_PROXY, "");
	headers = curl_slist_append(headers, vh);
	headers = curl_slist_append(headers, "Accept: " API_CONTENT_JSON ", " API_CONTENT_NDJSON);
	if (body) {
		r = json_to_string_dup(body, false, &body_text);
		if (r < 0) {
			curl_slist_free_all(headers);
			buf_free(st.data);
			return set_error(err, r, "out of memory");
		}
		headers = curl_slist_append(headers, "Content-Type: " API_CONTENT_JSON);
		(void)curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body_text);
		(void)curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body_text));
	}
	(void)curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers);

	cc = curl_easy_perform(c->curl);
	curl_slist_free_all(headers);
	(void)curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);

	if (c->dial_error < 0) {
		r = set_error(err, c->dial_error, "%s", c->dial_why);
		goto out;
	}
	if (cc == CURLE_COULDNT_CONNECT ||
	    (cc != CURLE_OK && status == 0 && !st.header_seen_version)) {
		char why[sizeof(err->message)];

		reap_all(c);
		if (c->ep.ssh) {
			api_ssh_status_explain(&c->ep, c->ssh_ended ? c->ssh_status : 0, why,
			                       sizeof(why));
			r = -ECONNREFUSED;
		} else {
			r = api_socket_explain(c->ep.socket, curl_easy_strerror(cc), why,
			                       sizeof(why));
		}
		r = set_error(err, r, "%s", why);
		goto out;
	}
	if (!st.header_seen_version) {
		r = set_error(err, SLATE_ERR_PROTOCOL_VERSION,
		              "%s does not answer like slated (no %s header)", c->name,
		              API_VERSION_HEADER);
		goto out;
	}
	if (!streq(st.daemon_api_version, STRINGIFY(SLATE_API_VERSION))) {
		r = set_error(err, SLATE_ERR_PROTOCOL_VERSION,
		              "slated speaks API version %s, this slate %s speaks %d: use a slate "
		              "client that matches the daemon",
		              st.daemon_api_version, SLATE_VERSION, SLATE_API_VERSION);
		goto out;
	}
	if (cc != CURLE_OK && st.error == 0) {
		r = set_error(err, -EIO, "talking to slated at %s: %s", c->name,
		              curl_easy_strerror(cc));
		goto out;
	}
	if (st.error < 0) {
		r = set_error(err, st.error, "slated sent an invalid reply: %s",
		              slate_strerror(st.error));
		goto out;
	}

	if (st.stream) {
		const char *type;

		if (buf_len(st.data) > 0) {
			r = set_error(err, SLATE_ERR_MESSAGE_INCOMPLETE,
			              "slated's event stream ended in the middle of a line");
			goto out;
		}
		if (!st.final) {
			r = set_error(err, SLATE_ERR_MESSAGE_INCOMPLETE,
			              "slated's event stream ended without a result");
			goto out;
		}
		(void)json_get_string(st.final, "type", &type);
		if (streq(type, API_EVENT_ERROR)) {
			r = error_from_reply(st.final, 500, err);
			goto out;
		}
		if (ret)
			*ret = TAKE_PTR(st.final);
		r = 0;
		goto out;
	}

	if (buf_len(st.data) > 0) {
		r = json_parse_bounded((const char *)buf_ptr(st.data), buf_len(st.data),
		                       API_MAX_REPLY, &doc);
		if (r < 0) {
			r = set_error(err, r, "slated sent invalid JSON: %s", slate_strerror(r));
			goto out;
		}
	}
	if (status < 200 || status > 299) {
		r = error_from_reply(doc, (unsigned)status, err);
		goto out;
	}
	if (ret)
		*ret = TAKE_PTR(doc);
	r = 0;
out:
	json_object_put(st.final);
	buf_free(st.data);
	return r;
}

int api_socket_probe(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return 0;
}

/* Whether this process has gid among its groups (the ones it runs with, not /etc/group's). */
static bool in_group(gid_t gid)
{
	gid_t groups[256];
	int n;

	if (getegid() == gid)
		return true;
	n = getgroups((int)ELEMENTSOF(groups), groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

/* Whether /etc/group (or NSS) lists user as a member of gr: then a new login has it. */
static bool group_lists(const struct group *gr, const char *user)
{
	for (char **m = gr ? gr->gr_mem : NULL; m && *m && user; m++)
		if (streq(*m, user))
			return true;
	return false;
}

int api_socket_explain(const char *socket_path, const char *detail, char *buf, size_t len)
{
	static const char start_hint[] =
	        "start it with 'systemctl start slated.socket' or 'slated --foreground', or "
	        "point --socket/SLATE_SOCKET at a running one";
	int r = api_socket_probe(socket_path);
	char gname[64], uname[64];
	struct passwd *pw;
	struct group *gr;
	struct stat st;

	if (r != -EACCES && r != -EPERM) {
		/* Nothing there, nothing listening, or a failure curl saw and we did not. */
		(void)snprintf(buf, len, "cannot reach slated at %s (%s); %s", socket_path,
		               r < 0 ? strerror(-r) : detail, start_hint);
		return -ECONNREFUSED;
	}
	if (stat(socket_path, &st) < 0) {
		/* The socket itself cannot even be looked at: a directory above it is closed. */
		(void)snprintf(buf, len,
		               "cannot reach slated at %s: permission denied on a directory above "
		               "it (slated's runtime directory must be searchable by its users)",
		               socket_path);
		return -EACCES;
	}
	gr = getgrgid(st.st_gid);
	if (gr)
		(void)snprintf(gname, sizeof(gname), "%s", gr->gr_name);
	else
		(void)snprintf(gname, sizeof(gname), "%u", (unsigned)st.st_gid);
	pw = getpwuid(geteuid());
	if (pw)
		(void)snprintf(uname, sizeof(uname), "%s", pw->pw_name);
	else
		(void)snprintf(uname, sizeof(uname), "%u", (unsigned)geteuid());
	if (in_group(st.st_gid)) {
		(void)snprintf(buf, len,
		               "cannot reach slated at %s: permission denied, although %s is in "
		               "its group %s: the socket is mode %04o",
		               socket_path, uname, gname, (unsigned)(st.st_mode & 07777));
		return -EACCES;
	}
	if (st.st_gid == 0) {
		/* A slated started where no group "slate" exists and without --socket-group. */
		(void)snprintf(buf, len,
		               "cannot reach slated at %s: permission denied: the socket is mode "
		               "%04o, group %s, so only root may use it (start slated with "
		               "--socket-group GROUP, or make the group slate, to let users in)",
		               socket_path, (unsigned)(st.st_mode & 07777), gname);
		return -EACCES;
	}
	if (group_lists(gr, uname))
		/* usermod was run, but this session started before it. */
		(void)snprintf(buf, len,
		               "cannot reach slated at %s: permission denied: the socket is mode "
		               "%04o, group %s, and this session of %s is not in group %s yet: log "
		               "in again (or run 'newgrp %s')",
		               socket_path, (unsigned)(st.st_mode & 07777), gname, uname, gname,
		               gname);
	else
		(void)snprintf(buf, len,
		               "cannot reach slated at %s: permission denied: the socket is mode "
		               "%04o, group %s, and %s is not in group %s (an administrator adds "
		               "you with 'usermod -aG %s %s'; then log in again)",
		               socket_path, (unsigned)(st.st_mode & 07777), gname, uname, gname,
		               gname, uname);
	return -EACCES;
}

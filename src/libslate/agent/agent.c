/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/keys.h"
#include "agent/openssh.h"
#include "agent/proto.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"
#include "workspace/workspace.h"

#define AGENTS_DIR "ssh-agent"
#define BACKEND_TIMEOUT_MS 30000
#define REAPER_INTERVAL_S 15

/* What the agent holds for one workspace; entries live as long as the agent. */
struct agent_ws {
	struct agent_ws *next;
	char name[WORKSPACE_NAME_MAX + 1];
	pthread_mutex_t lock; /* everything below */
	bool loaded;
	struct stat st; /* keys.json as loaded; st_ino 0: there was none */
	struct agent_keyset *ks;
	uint8_t *sk; /* the managed secret key (sodium_malloc, read-only), or NULL */
	struct openssh_agent *backend;
	uint64_t gen;     /* bumped whenever backend changes */
	unsigned n_conns; /* under agent->lock */
};

struct agent_conn {
	struct agent *a;
	struct agent_ws *w;
	struct agent_conn *next; /* in a->conns, unless detached */
	int fd;                  /* the guest's stream; -1 when detached */
	int backend_fd;          /* to w's private agent, or -1 */
	uint64_t backend_gen;
};

struct agent {
	struct agent_config cfg;
	char *runtime_dir;
	int agents_dirfd; /* <runtime>/ssh-agent, 0700, or -1 */
	pthread_mutex_t lock;
	pthread_cond_t idle;   /* n_conns dropped */
	pthread_cond_t wakeup; /* for the reaper */
	struct agent_ws *ws;
	struct agent_conn *conns;
	unsigned n_conns;
	bool stopping;
	bool reaper_started;
	pthread_t reaper;
};

static bool stopping(struct agent *a)
{
	return __atomic_load_n(&a->stopping, __ATOMIC_ACQUIRE);
}

/* ---- per-workspace state ---- */

static struct agent_ws *ws_get_locked(struct agent *a, const char *name)
{
	struct agent_ws *w;

	for (w = a->ws; w; w = w->next)
		if (streq(w->name, name))
			return w;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	(void)snprintf(w->name, sizeof(w->name), "%s", name);
	(void)pthread_mutex_init(&w->lock, NULL);
	w->next = a->ws;
	a->ws = w;
	return w;
}

static struct agent_ws *ws_get(struct agent *a, const char *name)
{
	struct agent_ws *w;

	pthread_mutex_lock(&a->lock);
	w = ws_get_locked(a, name);
	pthread_mutex_unlock(&a->lock);
	return w;
}

/* Forgets keys, the unsealed secret and the private agent. w->lock held. */
static void ws_drop(struct agent_ws *w)
{
	agent_keyset_free(w->ks);
	w->ks = NULL;
	if (w->sk) {
		sodium_free(w->sk);
		w->sk = NULL;
	}
	if (w->backend) {
		openssh_agent_stop(w->backend);
		w->backend = NULL;
		log_ws(LOG_DEBUG, w->name, "stopped the private ssh-agent of %s", w->name);
	}
	w->gen++;
	w->loaded = false;
	w->st = (struct stat){0};
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int keys_stat(struct agent *a, const char *name, struct stat *ret)
{
	char path[WORKSPACE_NAME_MAX + sizeof("/" AGENT_SSH_DIR "/" AGENT_KEYS_FILE)];

	if (a->cfg.workspaces_dirfd < 0)
		return -ENOENT;
	(void)snprintf(path, sizeof(path), "%s/" AGENT_SSH_DIR "/" AGENT_KEYS_FILE, name);
	if (fstatat(a->cfg.workspaces_dirfd, path, ret, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

/* Brings w up to date with ssh/keys.json: one stat when nothing changed. w->lock held. */
static int ws_refresh(struct agent *a, struct agent_ws *w)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;
	_cleanup_close_ int wfd = -1;
	struct stat st;
	int r;

	r = keys_stat(a, w->name, &st);
	if (r == -ENOENT || r == -ENOTDIR) {
		if (w->loaded && w->st.st_ino == 0)
			return 0;
		ws_drop(w);
		w->ks = agent_keyset_new();
		if (!w->ks)
			return -ENOMEM;
		w->loaded = true;
		return 0;
	}
	if (r < 0)
		return r;
	if (w->loaded && same_file(&w->st, &st))
		return 0;
	ws_drop(w);
	r = fs_open_dir_at(a->cfg.workspaces_dirfd, w->name, &wfd);
	if (r >= 0)
		r = agent_keyset_load(wfd, &ks);
	if (r < 0)
		return r;
	w->ks = TAKE_PTR(ks);
	w->st = st;
	w->loaded = true;
	return 0;
}

/* Unseals the managed key when it is not in memory. w->lock held. */
static int ws_managed_secret(struct agent *a, struct agent_ws *w, const struct agent_key *k)
{
	_cleanup_buf_secure_ struct buf *plain = NULL;
	_cleanup_close_ int wfd = -1;
	uint8_t pk[crypto_sign_ed25519_PUBLICKEYBYTES];
	int r;

	if (w->sk)
		return 0;
	r = fs_open_dir_at(a->cfg.workspaces_dirfd, w->name, &wfd);
	if (r < 0)
		return r;
	r = agent_keys_unseal(wfd, a->cfg.install, w->name, k, &plain);
	if (r < 0)
		return r;
	if (buf_len(plain) != crypto_sign_ed25519_SECRETKEYBYTES)
		return SLATE_ERR_INVALID_FORMAT;
	/* The secret must belong to the public key the workspace lists. */
	(void)crypto_sign_ed25519_sk_to_pk(pk, buf_ptr(plain));
	if (k->blob_len < sizeof(pk) ||
	    sodium_memcmp(pk, k->blob + k->blob_len - sizeof(pk), sizeof(pk)) != 0)
		return SLATE_ERR_KEY_NOT_TRUSTED;
	w->sk = sodium_malloc(crypto_sign_ed25519_SECRETKEYBYTES);
	if (!w->sk)
		return -ENOMEM;
	memcpy(w->sk, buf_ptr(plain), crypto_sign_ed25519_SECRETKEYBYTES);
	(void)sodium_mprotect_readonly(w->sk);
	return 0;
}

/* Starts w's private agent with every imported key when it does not run. w->lock held. */
static int ws_backend(struct agent *a, struct agent_ws *w, struct slate_error *err)
{
	_cleanup_(openssh_agent_stopp) struct openssh_agent *b = NULL;
	_cleanup_close_ int wfd = -1;
	unsigned n = 0;
	int r;

	if (w->backend)
		return 0;
	if (stopping(a))
		return slate_error_errno(err, -ESHUTDOWN, "slated is stopping");
	if (a->agents_dirfd < 0)
		return slate_error_errno(err, -ENOTDIR, "no runtime directory for private agents");
	r = fs_open_dir_at(a->cfg.workspaces_dirfd, w->name, &wfd);
	if (r < 0)
		return slate_error_errno(err, r, "opening the directory of workspace %s", w->name);
	r = openssh_agent_start(a->agents_dirfd, w->name, &b, err);
	if (r < 0)
		return r;
	for (size_t i = 0; w->ks && i < w->ks->n; i++) {
		_cleanup_buf_secure_ struct buf *key = NULL;
		const struct agent_key *k = &w->ks->keys[i];

		if (k->kind != AGENT_KEY_IMPORTED)
			continue;
		r = agent_keys_unseal(wfd, a->cfg.install, w->name, k, &key);
		if (r < 0)
			return slate_error_errno(err, r, "cannot unseal %s", k->fingerprint);
		r = openssh_agent_add(b, buf_ptr(key), buf_len(key), err);
		if (r < 0)
			return r;
		n++;
	}
	w->backend = TAKE_PTR(b);
	w->gen++;
	log_ws(LOG_DEBUG, w->name, "started a private ssh-agent for %s with %u imported keys",
	       w->name, n);
	return 0;
}

/* ---- I/O ---- */

/* Reads n bytes by deadline. Returns the count read (short only at EOF), or -errno. */
static ssize_t recv_exact(int fd, uint8_t *p, size_t n, int64_t deadline)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - time_mono_ms();
		ssize_t k;
		int pr;

		if (left <= 0)
			return -ETIMEDOUT;
		pr = poll(&pfd, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (pr < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (pr == 0)
			continue;
		k = read(fd, p + got, n - got);
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (k == 0)
			break;
		got += (size_t)k;
	}
	return (ssize_t)got;
}

/*
 * Reads one frame into in (emptied first). Returns 1, 0 at a clean EOF between frames, or < 0:
 * SLATE_ERR_TOO_LARGE / SLATE_ERR_INVALID_FORMAT for a length refused before reading on,
 * SLATE_ERR_MESSAGE_INCOMPLETE for a frame cut short, -ETIMEDOUT.
 */
static int frame_recv(int fd, struct buf *in, int idle_ms, int frame_ms)
{
	uint8_t hdr[4], *p;
	uint32_t len;
	ssize_t n;
	int r;

	(void)buf_reset(in);
	n = recv_exact(fd, hdr, 1, time_mono_ms() + idle_ms);
	if (n <= 0)
		return (int)n;
	n = recv_exact(fd, hdr + 1, 3, time_mono_ms() + frame_ms);
	if (n < 0)
		return (int)n;
	if (n < 3)
		return SLATE_ERR_MESSAGE_INCOMPLETE;
	len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	r = agent_frame_length_check(len);
	if (r < 0)
		return r;
	r = buf_reserve(in, len, &p);
	if (r < 0)
		return r;
	n = recv_exact(fd, p, len, time_mono_ms() + frame_ms);
	if (n < 0)
		return (int)n;
	if ((size_t)n < len)
		return SLATE_ERR_MESSAGE_INCOMPLETE;
	return 1;
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* ---- messages ---- */

static int reply_identities(struct agent_conn *c, struct buf *out)
{
	_cleanup_buf_ struct buf *body = buf_new(AGENT_MAX_FRAME);
	struct agent_ws *w = c->w;
	uint32_t n = 0;
	int r;

	if (!body)
		return -ENOMEM;
	pthread_mutex_lock(&w->lock);
	r = ws_refresh(c->a, w);
	if (r >= 0)
		n = (uint32_t)w->ks->n;
	if (r >= 0)
		r = buf_put_u8(body, SSH_AGENT_IDENTITIES_ANSWER);
	if (r >= 0)
		r = buf_put_u32(body, n);
	/* The managed key first: the one clients should try. */
	for (int pass = 0; r >= 0 && pass < 2; pass++)
		for (size_t i = 0; r >= 0 && i < n; i++) {
			const struct agent_key *k = &w->ks->keys[i];

			if ((pass == 0) != (k->kind == AGENT_KEY_MANAGED))
				continue;
			r = buf_put_string(body, k->blob, k->blob_len);
			if (r >= 0)
				r = buf_put_cstring(body, k->comment ? k->comment : "");
		}
	pthread_mutex_unlock(&w->lock);
	if (r < 0) {
		log_ws(LOG_DEBUG, w->name, "ssh-agent %s: cannot list keys: %s", w->name,
		       slate_strerror(r));
		return agent_put_failure(out);
	}
	return agent_frame_put(out, buf_ptr(body), buf_len(body));
}

/* Signs with the managed key's secret (a copy of it, wiped afterwards). */
static int sign_managed(const uint8_t sk[64], const struct agent_sign_request *req, struct buf *out)
{
	_cleanup_buf_ struct buf *sig = buf_new(256), *body = buf_new(512);
	uint8_t s[crypto_sign_ed25519_BYTES];
	int r;

	if (!sig || !body)
		return -ENOMEM;
	(void)crypto_sign_ed25519_detached(s, NULL, req->data, req->data_len, sk);
	if ((r = agent_ed25519_signature(s, sig)) < 0 ||
	    (r = buf_put_u8(body, SSH_AGENT_SIGN_RESPONSE)) < 0 ||
	    (r = buf_put_string(body, buf_ptr(sig), buf_len(sig))) < 0)
		return r;
	return agent_frame_put(out, buf_ptr(body), buf_len(body));
}

/*
 * Sends the request, as it came, to the private agent and passes on a well-formed signature.
 * Returns 1 with the reply frame in out, 0 when the private agent refused (nothing in out), or
 * < 0 when the connection to it broke (closed here; the caller sends a failure).
 */
static int sign_forward(struct agent_conn *c, const uint8_t *msg, size_t len, struct buf *out,
                        char alg[AGENT_MAX_KEY_TYPE])
{
	_cleanup_buf_ struct buf *in = buf_new(AGENT_MAX_FRAME);
	uint8_t hdr[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
	                  (uint8_t)len};
	int r;

	if (!in)
		return -ENOMEM;
	r = send_all(c->backend_fd, hdr, sizeof(hdr));
	if (r >= 0)
		r = send_all(c->backend_fd, msg, len);
	if (r >= 0)
		r = frame_recv(c->backend_fd, in, BACKEND_TIMEOUT_MS, BACKEND_TIMEOUT_MS);
	if (r == 0)
		r = -ECONNRESET;
	if (r < 0)
		goto broken;
	if (buf_ptr(in)[0] == SSH_AGENT_FAILURE && buf_len(in) == 1)
		return 0;
	r = agent_sign_response_parse(buf_ptr(in), buf_len(in), alg);
	if (r < 0)
		goto broken;
	r = agent_frame_put(out, buf_ptr(in), buf_len(in));
	return r < 0 ? r : 1;
broken:
	c->backend_fd = safe_close(c->backend_fd);
	return r < 0 ? r : SLATE_ERR_INVALID_FORMAT;
}

static void audit_sign(struct agent_conn *c, const struct agent_key *k, const char *comment,
                       const struct agent_sign_request *req, const char *alg)
{
	_cleanup_json_ struct json_object *ev = NULL;

	log_ws(LOG_DEBUG, c->w->name, "ssh-agent %s: signed %zu bytes with %s (%s)", c->w->name,
	       req->data_len, k->fingerprint, alg);
	if (!c->a->cfg.audit)
		return;
	ev = json_object_new_object();
	if (!ev || json_add_string(ev, "fingerprint", k->fingerprint) < 0 ||
	    json_add_string(ev, "key_type", k->type) < 0 ||
	    json_add_string(ev, "comment", comment) < 0 ||
	    json_add_string(ev, "key", k->kind == AGENT_KEY_MANAGED ? "managed" : "imported") < 0 ||
	    json_add_int64(ev, "bytes", (int64_t)req->data_len) < 0 ||
	    json_add_int64(ev, "flags", req->flags) < 0 ||
	    json_add_string(ev, "algorithm", alg) < 0)
		return;
	c->a->cfg.audit(c->w->name, ev, c->a->cfg.userdata);
}

static int reply_sign(struct agent_conn *c, const uint8_t *msg, size_t len, struct buf *out)
{
	struct agent_ws *w = c->w;
	struct agent_sign_request req;
	char alg[AGENT_MAX_KEY_TYPE] = AGENT_ED25519_TYPE, comment[AGENT_MAX_COMMENT + 1] = "";
	struct agent_key info = {0};
	const struct agent_key *k;
	uint8_t sk[crypto_sign_ed25519_SECRETKEYBYTES];
	int r;

	r = agent_sign_request_parse(msg, len, &req);
	if (r < 0) {
		log_ws(LOG_DEBUG, w->name, "ssh-agent %s: malformed sign request: %s", w->name,
		       slate_strerror(r));
		return agent_put_failure(out);
	}
	if (req.flags & ~AGENT_SIGN_FLAGS_KNOWN) {
		log_ws(LOG_DEBUG, w->name, "ssh-agent %s: sign request with unknown flags %#x",
		       w->name, req.flags);
		return agent_put_failure(out);
	}

	pthread_mutex_lock(&w->lock);
	r = ws_refresh(c->a, w);
	k = r >= 0 ? agent_keyset_find(w->ks, req.key, req.key_len) : NULL;
	if (!k) {
		pthread_mutex_unlock(&w->lock);
		if (r < 0)
			log_ws(LOG_DEBUG, w->name, "ssh-agent %s: cannot load its SSH keys: %s",
			       w->name, slate_strerror(r));
		else
			log_ws(LOG_DEBUG, w->name,
			       "ssh-agent %s: sign request for a key it does not hold", w->name);
		return agent_put_failure(out);
	}
	/* What the audit needs, copied out before the lock goes (the blob stays in req). */
	info.kind = k->kind;
	memcpy(info.type, k->type, sizeof(info.type));
	memcpy(info.fingerprint, k->fingerprint, sizeof(info.fingerprint));
	(void)snprintf(comment, sizeof(comment), "%s", k->comment ? k->comment : "");

	if (k->kind == AGENT_KEY_MANAGED) {
		r = ws_managed_secret(c->a, w, k);
		if (r >= 0)
			memcpy(sk, w->sk, sizeof(sk));
		pthread_mutex_unlock(&w->lock);
		if (r < 0) {
			log_ws(LOG_WARNING, w->name, "ssh-agent %s: cannot unseal its key: %s",
			       w->name, slate_strerror(r));
			return agent_put_failure(out);
		}
		r = sign_managed(sk, &req, out);
		sodium_memzero(sk, sizeof(sk));
		if (r < 0)
			return agent_put_failure(out);
	} else {
		struct slate_error err = {0};

		r = ws_backend(c->a, w, &err);
		if (r >= 0 && (c->backend_fd < 0 || c->backend_gen != w->gen)) {
			c->backend_fd = safe_close(c->backend_fd);
			r = openssh_agent_connect(w->backend);
			if (r >= 0) {
				c->backend_fd = r;
				c->backend_gen = w->gen;
			}
		}
		pthread_mutex_unlock(&w->lock);
		if (r < 0) {
			log_ws(LOG_WARNING, w->name, "ssh-agent %s: private agent: %s", w->name,
			       err.code ? slate_error_text(&err) : slate_strerror(r));
			return agent_put_failure(out);
		}
		r = sign_forward(c, msg, len, out, alg);
		if (r <= 0) {
			log_ws(LOG_DEBUG, w->name, "ssh-agent %s: the private agent refused: %s",
			       w->name, r < 0 ? slate_strerror(r) : "failure");
			return agent_put_failure(out);
		}
	}
	audit_sign(c, &info, comment, &req, alg);
	return 0;
}

int agent_conn_handle(struct agent_conn *c, const uint8_t *msg, size_t len, struct buf *out)
{
	if (!msg || len == 0 || len > AGENT_MAX_FRAME)
		return SLATE_ERR_INVALID_FORMAT;
	switch (msg[0]) {
	case SSH_AGENTC_REQUEST_IDENTITIES:
		if (len != 1)
			return agent_put_failure(out);
		return reply_identities(c, out);
	case SSH_AGENTC_SIGN_REQUEST:
		return reply_sign(c, msg, len, out);
	default:
		/* Add, remove, lock, unlock, smartcard, constrained adds, extensions: none. */
		log_ws(LOG_DEBUG, c->w->name, "ssh-agent %s: refused %s (type %u)", c->w->name,
		       agent_message_name(msg[0]), msg[0]);
		return agent_put_failure(out);
	}
}

/* ---- connections ---- */

static void conn_end(struct agent_conn *c)
{
	struct agent *a = c->a;

	pthread_mutex_lock(&a->lock);
	for (struct agent_conn **p = &a->conns; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	a->n_conns--;
	c->w->n_conns--;
	pthread_cond_broadcast(&a->idle);
	pthread_mutex_unlock(&a->lock);
	safe_close(c->backend_fd);
	safe_close(c->fd);
	free(c);
}

int agent_conn_begin(struct agent *a, int fd, const char *workspace, struct agent_conn **ret)
{
	struct agent_conn *c;
	struct agent_ws *w;
	int r = 0;

	if (workspace_name_check(workspace) < 0) {
		safe_close(fd);
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		safe_close(fd);
		return -ENOMEM;
	}
	pthread_mutex_lock(&a->lock);
	w = a->stopping ? NULL : ws_get_locked(a, workspace);
	if (a->stopping)
		r = -ESHUTDOWN;
	else if (!w)
		r = -ENOMEM;
	else if (a->n_conns >= AGENT_MAX_CONNS || w->n_conns >= AGENT_MAX_CONNS_PER_WORKSPACE)
		r = -EMFILE;
	if (r == 0) {
		*c = (struct agent_conn){
		        .a = a, .w = w, .fd = fd, .backend_fd = -1, .next = a->conns};
		a->conns = c;
		a->n_conns++;
		w->n_conns++;
	}
	pthread_mutex_unlock(&a->lock);
	if (r < 0) {
		if (r == -EMFILE)
			log_ws(LOG_WARNING, workspace, "ssh-agent %s: too many connections",
			       workspace);
		free(c);
		safe_close(fd);
		return r;
	}
	*ret = c;
	return 0;
}

void agent_conn_run(struct agent_conn *c)
{
	_cleanup_buf_ struct buf *in = buf_new(AGENT_MAX_FRAME),
	                         *out = buf_new(AGENT_MAX_FRAME + 4);
	int r;

	while (in && out) {
		r = frame_recv(c->fd, in, AGENT_IDLE_TIMEOUT_MS, AGENT_FRAME_TIMEOUT_MS);
		if (r <= 0) {
			if (r < 0)
				log_ws(LOG_DEBUG, c->w->name, "ssh-agent %s: closing: %s",
				       c->w->name, slate_strerror(r));
			break;
		}
		(void)buf_reset(out);
		r = agent_conn_handle(c, buf_ptr(in), buf_len(in), out);
		if (r < 0) {
			(void)buf_reset(out);
			if (agent_put_failure(out) < 0)
				break;
		}
		if (send_all(c->fd, buf_ptr(out), buf_len(out)) < 0)
			break;
	}
	conn_end(c);
}

void agent_serve(struct agent *a, int fd, const char *workspace)
{
	struct agent_conn *c;

	if (agent_conn_begin(a, fd, workspace, &c) >= 0)
		agent_conn_run(c);
}

int agent_conn_new_detached(struct agent *a, const char *workspace, struct agent_conn **ret)
{
	struct agent_conn *c;

	if (workspace_name_check(workspace) < 0)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (struct agent_conn){.a = a, .fd = -1, .backend_fd = -1};
	c->w = ws_get(a, workspace);
	if (!c->w) {
		free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

void agent_conn_free_detached(struct agent_conn *c)
{
	if (!c)
		return;
	safe_close(c->backend_fd);
	free(c);
}

/* ---- the agent ---- */

/* Stops private agents (and drops secrets) of workspaces whose keys changed or went. */
static void *reaper_main(void *arg)
{
	struct agent *a = arg;

	pthread_mutex_lock(&a->lock);
	while (!a->stopping) {
		struct timespec ts;

		(void)clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += REAPER_INTERVAL_S;
		(void)pthread_cond_timedwait(&a->wakeup, &a->lock, &ts);
		if (a->stopping)
			break;
		for (struct agent_ws *w = a->ws; w; w = w->next) {
			struct stat st;
			int r;

			if (pthread_mutex_trylock(&w->lock) != 0)
				continue;
			if (w->backend || w->sk) {
				r = keys_stat(a, w->name, &st);
				if (r < 0 || !same_file(&st, &w->st))
					ws_drop(w);
			}
			pthread_mutex_unlock(&w->lock);
		}
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

int agent_new(const struct agent_config *cfg, struct agent **ret)
{
	struct agent *a;
	int r;

	if (!cfg || !ret)
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->cfg = *cfg;
	a->agents_dirfd = -1;
	(void)pthread_mutex_init(&a->lock, NULL);
	(void)pthread_cond_init(&a->idle, NULL);
	(void)pthread_cond_init(&a->wakeup, NULL);
	if (cfg->runtime_dir) {
		_cleanup_close_ int rfd = -1;

		a->runtime_dir = strdup(cfg->runtime_dir);
		a->cfg.runtime_dir = a->runtime_dir;
		rfd = open(cfg->runtime_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (rfd >= 0 && (mkdirat(rfd, AGENTS_DIR, 0700) == 0 || errno == EEXIST)) {
			a->agents_dirfd = openat(rfd, AGENTS_DIR,
			                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (a->agents_dirfd >= 0) {
				(void)fchmod(a->agents_dirfd, 0700);
				/* Sockets of private agents an earlier slated left (its agents exit on
				 * their own within 10 s of it going). */
				openssh_agent_sweep(a->agents_dirfd);
			}
		}
		if (a->agents_dirfd < 0)
			log_warning_errno(-errno,
			                  "cannot use %s/" AGENTS_DIR
			                  ": imported SSH keys will not sign",
			                  cfg->runtime_dir);
	}
	r = pthread_create(&a->reaper, NULL, reaper_main, a);
	if (r != 0) {
		agent_free(a);
		return -r;
	}
	a->reaper_started = true;
	*ret = a;
	return 0;
}

void agent_free(struct agent *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	__atomic_store_n(&a->stopping, true, __ATOMIC_RELEASE);
	for (struct agent_conn *c = a->conns; c; c = c->next)
		(void)shutdown(c->fd, SHUT_RDWR);
	pthread_cond_broadcast(&a->wakeup);
	pthread_mutex_unlock(&a->lock);
	if (a->reaper_started)
		(void)pthread_join(a->reaper, NULL);
	/* Private agents go first: a connection waiting on one sees its socket close. */
	for (struct agent_ws *w = a->ws; w; w = w->next) {
		pthread_mutex_lock(&w->lock);
		ws_drop(w);
		pthread_mutex_unlock(&w->lock);
	}
	pthread_mutex_lock(&a->lock);
	while (a->n_conns > 0)
		(void)pthread_cond_wait(&a->idle, &a->lock);
	pthread_mutex_unlock(&a->lock);
	while (a->ws) {
		struct agent_ws *w = a->ws;

		a->ws = w->next;
		ws_drop(w);
		(void)pthread_mutex_destroy(&w->lock);
		free(w);
	}
	safe_close(a->agents_dirfd);
	(void)pthread_mutex_destroy(&a->lock);
	(void)pthread_cond_destroy(&a->idle);
	(void)pthread_cond_destroy(&a->wakeup);
	free(a->runtime_dir);
	free(a);
}

void agent_forget(struct agent *a, const char *workspace)
{
	struct agent_ws *w = NULL;

	if (!a || !workspace)
		return;
	pthread_mutex_lock(&a->lock);
	for (w = a->ws; w; w = w->next)
		if (streq(w->name, workspace))
			break;
	pthread_mutex_unlock(&a->lock);
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	ws_drop(w);
	pthread_mutex_unlock(&w->lock);
}

/* ---- key operations ---- */

static int open_ws(struct agent *a, const char *workspace, int *ret_fd)
{
	int r = workspace_name_check(workspace);

	if (r < 0)
		return r;
	if (a->cfg.workspaces_dirfd < 0)
		return -ENODEV;
	return fs_open_dir_at(a->cfg.workspaces_dirfd, workspace, ret_fd);
}

int agent_generate(struct agent *a, const char *workspace, const char *comment, const uint8_t *seed,
                   struct json_object **ret)
{
	_cleanup_close_ int wfd = -1;
	char host[256] = "localhost", def[WORKSPACE_NAME_MAX + 300];
	int r;

	r = open_ws(a, workspace, &wfd);
	if (r < 0)
		return r;
	if (!comment) {
		(void)gethostname(host, sizeof(host) - 1);
		host[sizeof(host) - 1] = '\0';
		(void)snprintf(def, sizeof(def), "slate:%s@%s", workspace, host);
		comment = def;
	}
	r = agent_keys_generate(wfd, a->cfg.install, workspace, comment, seed, ret);
	if (r >= 0)
		agent_forget(a, workspace);
	return r;
}

int agent_import(struct agent *a, const char *workspace, const void *key, size_t len,
                 const char *passphrase, struct json_object **ret, struct slate_error *err)
{
	_cleanup_buf_secure_ struct buf *plain = NULL;
	_cleanup_json_ struct json_object *info = NULL;
	_cleanup_free_ char *line = NULL, *comment = NULL;
	_cleanup_free_ uint8_t *blob = NULL;
	_cleanup_close_ int wfd = -1;
	char fp[AGENT_FINGERPRINT_MAX];
	struct agent_ws *w;
	size_t blob_len;
	int r;

	r = open_ws(a, workspace, &wfd);
	if (r < 0)
		return slate_error_errno(err, r, "workspace %s", workspace);
	if (!a->cfg.install)
		return slate_error_set(err, -ENOKEY, "the host master key is not loaded");
	r = openssh_key_normalize(key, len, passphrase, &plain, &line, err);
	if (r < 0)
		return r;
	r = agent_public_line_parse(line, &blob, &blob_len, &comment);
	if (r < 0)
		return slate_error_set(err, -EINVAL,
		                       "ssh-keygen printed a public key slate cannot read");
	r = agent_keys_add_imported(wfd, a->cfg.install, workspace, buf_ptr(plain), buf_len(plain),
	                            blob, blob_len, comment, &info);
	if (r < 0)
		return slate_error_errno(err, r, "storing the key");
	/* The private agent starts afresh with every imported key: it must take this one. */
	(void)agent_fingerprint(blob, blob_len, fp);
	w = ws_get(a, workspace);
	if (!w)
		r = slate_error_errno(err, -ENOMEM, "importing the key");
	else {
		pthread_mutex_lock(&w->lock);
		ws_drop(w);
		r = ws_refresh(a, w);
		if (r < 0)
			(void)slate_error_errno(err, r, "loading the SSH keys of %s", workspace);
		else
			r = ws_backend(a, w, err);
		if (r < 0)
			ws_drop(w);
		pthread_mutex_unlock(&w->lock);
	}
	if (r < 0) {
		(void)agent_keys_remove(wfd, fp);
		return r;
	}
	if (ret)
		*ret = TAKE_PTR(info);
	return 0;
}

struct json_object *agent_keys_describe(int workspaces_dirfd, const char *workspace)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;
	_cleanup_close_ int wfd = -1;

	if (workspaces_dirfd < 0 || workspace_name_check(workspace) < 0 ||
	    fs_open_dir_at(workspaces_dirfd, workspace, &wfd) < 0 ||
	    agent_keyset_load(wfd, &ks) < 0)
		return json_object_new_array();
	return agent_keyset_json(ks);
}

int agent_describe(struct agent *a, const char *workspace, struct json_object **ret)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;
	_cleanup_close_ int wfd = -1;
	struct json_object *o;
	int r;

	r = open_ws(a, workspace, &wfd);
	if (r < 0)
		return r;
	r = agent_keyset_load(wfd, &ks);
	if (r < 0)
		return r;
	o = agent_keyset_json(ks);
	if (!o)
		return -ENOMEM;
	*ret = o;
	return 0;
}

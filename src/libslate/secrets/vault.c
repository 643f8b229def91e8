/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "secrets/vault.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "workspace/workspace.h"

#define VAULT_MAX_VALUES 3
/* The flags byte of a stored secret (vault.h); vaults written before these existed hold 0. */
#define VAULT_FLAG_BODY 0x01u       /* secret->body */
#define VAULT_FLAG_QUERY 0x02u      /* secret->query follows the file */
#define VAULT_FLAG_PLAIN_HTTP 0x04u /* secret->plain_http */
#define GLOBAL_LOCK_WAIT_MS 10000

/* ---- the plaintext format ---- */

/* One secret's stored parts; strings point into the plaintext or are owned copies (names). */
struct parts {
	char *key, *kind, *env, *file, *query;
	uint8_t flags;
	char *hosts[SECRET_HOSTS_MAX];
	size_t n_hosts;
	char *names[VAULT_MAX_VALUES];
	struct buf *reals[VAULT_MAX_VALUES]; /* read-only views into the plaintext */
	size_t n_values;
};

static void parts_clear(struct parts *p)
{
	free(p->key);
	free(p->kind);
	free(p->env);
	free(p->file);
	free(p->query);
	for (size_t i = 0; i < p->n_hosts; i++)
		free(p->hosts[i]);
	for (size_t i = 0; i < p->n_values; i++) {
		free(p->names[i]);
		buf_free(p->reals[i]);
	}
	*p = (struct parts){0};
}

static int parse_one(struct buf *b, struct parts *p)
{
	const uint8_t *real;
	size_t real_len;
	uint32_t n;
	int r;

	if ((r = buf_get_cstring(b, &p->key, NULL)) < 0 ||
	    (r = buf_get_cstring(b, &p->kind, NULL)) < 0 || (r = buf_get_u8(b, &p->flags)) < 0 ||
	    (r = buf_get_cstring(b, &p->env, NULL)) < 0 ||
	    (r = buf_get_cstring(b, &p->file, NULL)) < 0)
		return r;
	if ((p->flags & ~(VAULT_FLAG_BODY | VAULT_FLAG_QUERY | VAULT_FLAG_PLAIN_HTTP)) != 0)
		return SLATE_ERR_INVALID_FORMAT;
	if ((p->flags & VAULT_FLAG_QUERY) && (r = buf_get_cstring(b, &p->query, NULL)) < 0)
		return r;
	if ((r = buf_get_u32(b, &n)) < 0)
		return r;
	if (n == 0 || n > SECRET_HOSTS_MAX)
		return SLATE_ERR_INVALID_FORMAT;
	for (; p->n_hosts < n; p->n_hosts++)
		if ((r = buf_get_cstring(b, &p->hosts[p->n_hosts], NULL)) < 0)
			return r;
	if ((r = buf_get_u32(b, &n)) < 0)
		return r;
	if (n == 0 || n > VAULT_MAX_VALUES)
		return SLATE_ERR_INVALID_FORMAT;
	for (; p->n_values < n; p->n_values++) {
		if ((r = buf_get_cstring(b, &p->names[p->n_values], NULL)) < 0)
			return r;
		r = buf_get_string_direct(b, &real, &real_len);
		if (r >= 0)
			p->reals[p->n_values] = buf_from(real, real_len);
		if (r < 0 || !p->reals[p->n_values]) {
			free(p->names[p->n_values]);
			p->names[p->n_values] = NULL;
			return r < 0 ? r : -ENOMEM;
		}
	}
	return 0;
}

int vault_parse(const void *plain, size_t len, const unsigned char *salt, bool global,
                struct secret_set **ret, struct slate_error *err)
{
	_cleanup_(secret_set_freep) struct secret_set *set = secret_set_new();
	_cleanup_buf_ struct buf *b = buf_from(plain, len);
	uint8_t magic[sizeof(VAULT_MAGIC) - 1];
	uint32_t n;
	int r;

	if (!set || !b)
		return slate_error_errno(err, -ENOMEM, "reading the vault");
	if (buf_get(b, magic, sizeof(magic)) < 0 || memcmp(magic, VAULT_MAGIC, sizeof(magic)) != 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "not a slate vault");
	if (buf_get_u32(b, &n) < 0 || n > SECRET_SET_MAX)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "bad secret count");
	for (uint32_t i = 0; i < n; i++) {
		struct parts p = {0};
		struct secret *s = NULL;
		enum secret_kind kind;
		struct slate_error why = {0};

		r = parse_one(b, &p);
		if (r == -ENOMEM) {
			parts_clear(&p);
			return slate_error_errno(err, r, "secret %u", i + 1);
		}
		if (r < 0) {
			parts_clear(&p);
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "secret %u: %s",
			                       i + 1, slate_strerror(r));
		}
		if (secret_kind_from_string(p.kind, &kind) < 0) {
			parts_clear(&p);
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "secret %u: unknown kind", i + 1);
		}
		r = secret_from_parts(
		        p.key, kind, (const char *const *)p.hosts, p.n_hosts, *p.env ? p.env : NULL,
		        *p.file ? p.file : NULL, global, (const char *const *)p.names,
		        (const struct buf *const *)p.reals, p.n_values, salt, &s, &why);
		if (r >= 0) {
			r = secret_set_subst(s, p.flags & VAULT_FLAG_BODY, p.query, &why);
			s->plain_http = (p.flags & VAULT_FLAG_PLAIN_HTTP) != 0;
			if (r < 0)
				secret_free(TAKE_PTR(s));
		}
		parts_clear(&p);
		if (r < 0) /* a secret that does not pass secret_new's checks is not ours */
			return slate_error_set(err, r == -ENOMEM ? r : SLATE_ERR_INVALID_FORMAT,
			                       "%s", slate_error_text(&why));
		if (secret_set_find(set, s->key) >= 0) {
			r = slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                    "secret %s appears twice", s->key);
			secret_free(s);
			return r;
		}
		r = secret_set_put(set, s, NULL);
		if (r < 0) {
			(void)slate_error_errno(err, r, "secret %s", s->key);
			secret_free(s);
			return r;
		}
	}
	if (buf_len(b) != 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "trailing bytes");
	*ret = TAKE_PTR(set);
	return 0;
}

int vault_serialize(const struct secret_set *s, struct buf **ret)
{
	_cleanup_buf_secure_ struct buf *b = buf_new(VAULT_MAX_FILE);
	int r;

	if (!b)
		return -ENOMEM;
	if ((r = buf_put(b, VAULT_MAGIC, sizeof(VAULT_MAGIC) - 1)) < 0 ||
	    (r = buf_put_u32(b, (uint32_t)s->n)) < 0)
		return r;
	for (size_t i = 0; i < s->n; i++) {
		const struct secret *x = &s->v[i];
		uint8_t flags = (x->body ? VAULT_FLAG_BODY : 0) |
		                (x->query ? VAULT_FLAG_QUERY : 0) |
		                (x->plain_http ? VAULT_FLAG_PLAIN_HTTP : 0);

		if ((r = buf_put_cstring(b, x->key)) < 0 ||
		    (r = buf_put_cstring(b, secret_kind_name(x->kind))) < 0 ||
		    (r = buf_put_u8(b, flags)) < 0 ||
		    (r = buf_put_cstring(b, x->env ? x->env : "")) < 0 ||
		    (r = buf_put_cstring(b, x->file ? x->file : "")) < 0 ||
		    (x->query && (r = buf_put_cstring(b, x->query)) < 0) ||
		    (r = buf_put_u32(b, (uint32_t)x->n_hosts)) < 0)
			return r;
		for (size_t j = 0; j < x->n_hosts; j++)
			if ((r = buf_put_cstring(b, x->hosts[j])) < 0)
				return r;
		if ((r = buf_put_u32(b, (uint32_t)x->n_values)) < 0)
			return r;
		for (size_t j = 0; j < x->n_values; j++)
			if ((r = buf_put_cstring(b, x->values[j].name)) < 0 ||
			    (r = buf_put_string(b, buf_ptr(x->values[j].real),
			                        buf_len(x->values[j].real))) < 0)
				return r;
	}
	*ret = TAKE_PTR(b);
	return 0;
}

/* ---- sealed files ---- */

int vault_read_at(const struct install *in, int dirfd, const char *file, const char *purpose,
                  bool global, struct secret_set **ret, struct slate_error *err)
{
	_cleanup_buf_ struct buf *sealed = NULL;
	_cleanup_buf_secure_ struct buf *plain = NULL;
	int r;

	if (!in)
		return slate_error_set(err, -ENOKEY, "the host master key is not loaded");
	r = fs_read_file_at(dirfd, file, VAULT_MAX_FILE, &sealed);
	if (r == -ENOENT) {
		*ret = secret_set_new();
		return *ret ? 0 : slate_error_errno(err, -ENOMEM, "reading %s", file);
	}
	if (r < 0)
		return slate_error_errno(err, r, "reading %s", file);
	r = install_unseal(in, purpose, buf_ptr(sealed), buf_len(sealed), &plain);
	if (r == SLATE_ERR_SIGNATURE_INVALID)
		return slate_error_set(
		        err, r,
		        "%s does not open with this installation's master key for %s: it was "
		        "damaged, tampered with, or copied from elsewhere",
		        file, purpose);
	if (r < 0)
		return slate_error_errno(err, r, "%s", file);
	r = vault_parse(buf_ptr(plain), buf_len(plain), install_salt(in), global, ret, err);
	if (r < 0)
		return slate_error_wrap(err, r, "%s", file);
	return 0;
}

int vault_write_at(const struct install *in, int dirfd, const char *file, const char *purpose,
                   const struct secret_set *s)
{
	_cleanup_buf_secure_ struct buf *plain = NULL;
	_cleanup_buf_ struct buf *sealed = NULL;
	int r;

	if (!in)
		return -ENOKEY;
	r = vault_serialize(s, &plain);
	if (r < 0)
		return r;
	r = install_seal(in, purpose, buf_ptr(plain), buf_len(plain), &sealed);
	if (r < 0)
		return r;
	return fs_write_atomic_at(dirfd, file, buf_ptr(sealed), buf_len(sealed), 0600);
}

/* ---- where the vaults live ---- */

struct where {
	int dirfd;
	char file[64];
	char purpose[128];
	char lock[64];
	bool global;
};

static void where_done(struct where *w)
{
	if (w->dirfd >= 0)
		(void)close(w->dirfd);
	w->dirfd = -1;
}

/* Opens the directory of the vault; create makes <state>/secrets (0700) when it is missing. */
static int where_open(struct workspace_store *st, int state_dirfd, uid_t owner,
                      const char *workspace, bool create, struct where *w, struct slate_error *err)
{
	int r;

	*w = (struct where){.dirfd = -1};
	if (workspace) {
		_cleanup_free_ char *path = NULL;

		if (workspace_name_check(workspace) < 0)
			return slate_error_set(err, -EINVAL, "invalid workspace name '%s'",
			                       workspace);
		path = workspace_dir_path(st, workspace);
		if (!path)
			return slate_error_errno(err, -ENOMEM, "workspace %s", workspace);
		r = fs_open_dir_at(AT_FDCWD, path, &w->dirfd);
		if (r < 0)
			return slate_error_errno(err, r, "workspace %s", workspace);
		(void)snprintf(w->file, sizeof(w->file), "%s", VAULT_FILE);
		(void)snprintf(w->purpose, sizeof(w->purpose), "vault:%s", workspace);
		return 0;
	}
	w->global = true;
	if (create && mkdirat(state_dirfd, VAULT_GLOBAL_DIR, 0700) < 0 && errno != EEXIST)
		return slate_error_errno(err, -errno, "creating %s", VAULT_GLOBAL_DIR);
	r = fs_open_dir_at(state_dirfd, VAULT_GLOBAL_DIR, &w->dirfd);
	if (r < 0 && !(r == -ENOENT && !create))
		return slate_error_errno(err, r, "opening %s", VAULT_GLOBAL_DIR);
	if (w->dirfd >= 0) {
		struct stat s;
		if (fstat(w->dirfd, &s) < 0)
			return slate_error_errno(err, -errno, "%s", VAULT_GLOBAL_DIR);
		/* Only slated reads the global vaults: whatever made the directory, it is 0700. */
		if ((s.st_mode & 077) != 0 && fchmodat(state_dirfd, VAULT_GLOBAL_DIR, 0700, 0) < 0)
			return slate_error_errno(err, -errno, "%s: cannot make it 0700",
			                         VAULT_GLOBAL_DIR);
	}
	(void)snprintf(w->file, sizeof(w->file), "global-%u.enc", (unsigned)owner);
	(void)snprintf(w->lock, sizeof(w->lock), "global-%u.lock", (unsigned)owner);
	(void)snprintf(w->purpose, sizeof(w->purpose), "vault-global:%u", (unsigned)owner);
	return 0;
}

/* Takes the vault's lock: the workspace's own lock, or the global vault's lock file (waiting up
 * to GLOBAL_LOCK_WAIT_MS). The lock is released by closing *ret_fd. */
static int lock_vault(struct workspace_store *st, int state_dirfd, const char *workspace,
                      uid_t owner, int *ret_fd, struct slate_error *err)
{
	_cleanup_close_ int dfd = -1;
	char name[64];
	int r;

	if (workspace) {
		r = workspace_lock(st, workspace, ret_fd);
		return r < 0 ? slate_error_errno(err, r, "locking workspace %s", workspace) : 0;
	}
	if (mkdirat(state_dirfd, VAULT_GLOBAL_DIR, 0700) < 0 && errno != EEXIST)
		return slate_error_errno(err, -errno, "creating %s", VAULT_GLOBAL_DIR);
	r = fs_open_dir_at(state_dirfd, VAULT_GLOBAL_DIR, &dfd);
	if (r < 0)
		return slate_error_errno(err, r, "opening %s", VAULT_GLOBAL_DIR);
	(void)snprintf(name, sizeof(name), "global-%u.lock", (unsigned)owner);
	for (int waited = 0;; waited += 10) {
		r = fs_lock_at(dfd, name, ret_fd);
		if (r != -EWOULDBLOCK || waited >= GLOBAL_LOCK_WAIT_MS)
			break;
		(void)nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
	}
	if (r < 0)
		return slate_error_errno(err, r, "locking the global vault of uid %u",
		                         (unsigned)owner);
	return 0;
}

int vault_read(const struct install *in, struct workspace_store *st, int state_dirfd, uid_t owner,
               const char *workspace, struct secret_set **ret, struct slate_error *err)
{
	struct where w;
	int r;

	if (!in)
		return slate_error_set(err, -ENOKEY, "the host master key is not loaded");
	r = where_open(st, state_dirfd, owner, workspace, false, &w, err);
	if (r < 0)
		return r;
	if (w.dirfd < 0) { /* no global vault yet */
		*ret = secret_set_new();
		return *ret ? 0 : slate_error_errno(err, -ENOMEM, "reading the global vault");
	}
	r = vault_read_at(in, w.dirfd, w.file, w.purpose, w.global, ret, err);
	where_done(&w);
	return r;
}

/* Read, change, write: under the vault's lock. op NULL puts sec, else removes key. */
static int vault_change(const struct install *in, struct workspace_store *st, int state_dirfd,
                        uid_t owner, const char *workspace, struct secret *sec, const char *key,
                        bool *ret_replaced, struct slate_error *err)
{
	_cleanup_(secret_set_freep) struct secret_set *set = NULL;
	_cleanup_close_ int lock = -1;
	struct where w = {.dirfd = -1};
	int r;

	if (!in) {
		r = slate_error_set(err, -ENOKEY, "the host master key is not loaded");
		goto out;
	}
	r = lock_vault(st, state_dirfd, workspace, owner, &lock, err);
	if (r < 0)
		goto out;
	/* The workspace directory is opened under its lock: a delete that ran first is seen. */
	r = where_open(st, state_dirfd, owner, workspace, true, &w, err);
	if (r < 0)
		goto out;
	r = vault_read_at(in, w.dirfd, w.file, w.purpose, w.global, &set, err);
	if (r < 0)
		goto out;
	if (sec) {
		r = secret_set_put(set, sec, ret_replaced);
		if (r >= 0)
			sec = NULL; /* the set holds it now */
		if (r < 0) {
			if (r == -E2BIG)
				(void)slate_error_set(err, r, "a vault holds at most %d secrets",
				                      SECRET_SET_MAX);
			else
				(void)slate_error_errno(err, r, "storing secret %s", sec->key);
			goto out;
		}
	} else {
		r = secret_set_remove(set, key);
		if (r < 0) {
			(void)slate_error_set(err, r, "no secret named %s", key);
			goto out;
		}
	}
	if (set->n == 0) {
		/* Nothing left: no file at all. */
		if (unlinkat(w.dirfd, w.file, 0) < 0 && errno != ENOENT) {
			r = slate_error_errno(err, -errno, "removing %s", w.file);
			goto out;
		}
		r = fs_fsync_dir(w.dirfd);
	} else
		r = vault_write_at(in, w.dirfd, w.file, w.purpose, set);
	if (r < 0)
		(void)slate_error_errno(err, r, "writing %s", w.file);
out:
	secret_free(sec);
	where_done(&w);
	return r;
}

int vault_put(const struct install *in, struct workspace_store *st, int state_dirfd, uid_t owner,
              const char *workspace, struct secret *sec, bool *ret_replaced,
              struct slate_error *err)
{
	return vault_change(in, st, state_dirfd, owner, workspace, sec, NULL, ret_replaced, err);
}

int vault_remove(const struct install *in, struct workspace_store *st, int state_dirfd, uid_t owner,
                 const char *workspace, const char *key, struct slate_error *err)
{
	return vault_change(in, st, state_dirfd, owner, workspace, NULL, key, NULL, err);
}

int vault_load_set(const struct install *in, struct workspace_store *st, int state_dirfd,
                   uid_t owner, const char *workspace, bool with_placeholders,
                   struct secret_set **ret, struct slate_error *err)
{
	_cleanup_(secret_set_freep) struct secret_set *g = NULL, *w = NULL;
	int r;

	if (!in)
		return slate_error_set(err, -ENOKEY, "the host master key is not loaded");
	r = vault_read(in, st, state_dirfd, owner, NULL, &g, err);
	if (r < 0)
		return r;
	if (workspace) {
		r = vault_read(in, st, state_dirfd, owner, workspace, &w, err);
		if (r < 0)
			return r;
	}
	if (!with_placeholders) /* nothing needs them: not kept */
		for (size_t k = 0; k < 2; k++) {
			struct secret_set *x = k ? w : g;
			for (size_t i = 0; x && i < x->n; i++)
				for (size_t j = 0; j < x->v[i].n_values; j++) {
					free(x->v[i].values[j].placeholder);
					x->v[i].values[j].placeholder = NULL;
				}
		}
	r = secret_set_merge(TAKE_PTR(g), TAKE_PTR(w), ret);
	return r < 0 ? slate_error_errno(err, r, "merging the secrets") : 0;
}

int vault_describe_json(const struct install *in, struct workspace_store *st, int state_dirfd,
                        uid_t owner, const char *workspace, struct json_object **ret,
                        struct slate_error *err)
{
	_cleanup_(secret_set_freep) struct secret_set *set = NULL;
	_cleanup_json_ struct json_object *arr = NULL;
	int r;

	r = vault_load_set(in, st, state_dirfd, owner, workspace, false, &set, err);
	if (r < 0)
		return r;
	arr = json_object_new_array();
	if (!arr)
		return slate_error_errno(err, -ENOMEM, "describing the secrets");
	for (size_t i = 0; i < set->n; i++) {
		struct json_object *o = NULL;
		r = secret_to_json(&set->v[i], false, &o);
		if (r < 0)
			return slate_error_errno(err, r, "describing the secrets");
		if (json_object_array_add(arr, o) < 0) {
			json_object_put(o);
			return slate_error_errno(err, -ENOMEM, "describing the secrets");
		}
	}
	*ret = TAKE_PTR(arr);
	return 0;
}

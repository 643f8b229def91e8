/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Catalogs decided on: the signature, the channel, rollback and expiry (catalog_verify), the
 * trusted keys, the rollback state and the artifacts' checks (doc/catalog.md). The parser is
 * catalog-parse.c. */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "image/catalog-internal.h"
#include "image/catalog.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

#define STATE_FORMAT "slate-catalog-state"
#define STATE_FORMAT_VERSION 1
#define STATE_FILE "state.json"
#define CURRENT_FILE "current.json"
#define CURRENT_SIG_FILE "current.sig"
#define KEYS_DIR "keys"
#define STATE_FILE_MAX 4096

struct catalog_trust {
	struct sign_public_key *keys;
	size_t n;
};

struct catalog_artifact_check {
	EVP_MD_CTX *md;
	uint64_t size;
	uint64_t done;
	bool failed;
	uint8_t sha256[32];
	char sha256_hex[65];
};

/* The rollback rules, shared by catalog_verify() and catalog_state_accept(). */
static int check_rollback(const struct catalog_state *last, const struct catalog *c,
                          struct slate_error *err)
{
	if (!last || !streq(last->channel, c->channel))
		return 0;
	if (c->version < last->version)
		return slate_error_set(err, SLATE_ERR_ROLLBACK,
		                       "rollback: catalog version %" PRId64
		                       " is older than the last accepted version %" PRId64,
		                       c->version, last->version);
	if (c->version == last->version && sodium_memcmp(c->sha256, last->sha256, 32) != 0)
		return slate_error_set(err, SLATE_ERR_VERSION_REUSED,
		                       "catalog version %" PRId64
		                       " was already accepted with different contents",
		                       c->version);
	return 0;
}

int catalog_verify(const struct catalog_trust *trust, const char *channel, const uint8_t *bytes,
                   size_t len, const uint8_t *sig, size_t sig_len, const struct catalog_state *last,
                   int64_t now, struct catalog **ret, struct slate_error *err)
{
	_cleanup_catalog_ struct catalog *c = NULL;
	const struct sign_public_key *k;
	uint8_t raw[SIGN_SIGNATURE_BYTES];
	char key_id[SIGN_KEY_ID_LEN + 1];
	char t1[32], t2[32];
	int r;

	if (!trust || (!bytes && len > 0))
		return slate_error_set(err, -EINVAL, "invalid arguments");
	if (sign_channel_check(channel) < 0)
		return slate_error_set(err, -EINVAL, "invalid channel name");
	/* Endless data: before the signature check, which would otherwise hash all of it. */
	if (len > CATALOG_MAX_SIZE)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE,
		                       "catalog is %zu bytes, more than the %u allowed", len,
		                       CATALOG_MAX_SIZE);
	if (!sig || sig_len == 0)
		return slate_error_set(err, SLATE_ERR_SIGNATURE_MISSING,
		                       "catalog is not signed (no signature)");
	r = sign_signature_parse(sig, sig_len, key_id, raw, err);
	if (r < 0)
		return r;
	k = catalog_trust_find(trust, key_id);
	if (!k)
		return slate_error_set(err, SLATE_ERR_KEY_NOT_TRUSTED,
		                       "signed by key %s, which is not trusted", key_id);
	r = sign_verify_detached(k, channel, bytes, len, raw);
	if (r == SLATE_ERR_SIGNATURE_INVALID)
		return slate_error_set(err, r,
		                       "bad signature by key %s for channel \"%s\" (the catalog "
		                       "changed after signing, or was signed for another channel)",
		                       key_id, channel);
	if (r < 0)
		return slate_error_errno(err, r, "cannot verify");

	r = catalog_parse(bytes, len, &c, err);
	if (r < 0)
		return r;
	if (!streq(c->channel, channel))
		return slate_error_set(err, SLATE_ERR_WRONG_CHANNEL,
		                       "catalog is for channel \"%s\", not \"%s\"", c->channel,
		                       channel);
	if (now >= c->expires)
		return slate_error_set(err, SLATE_ERR_EXPIRED, "catalog expired at %s (now is %s)",
		                       catalog_time_str(c->expires, t1), catalog_time_str(now, t2));
	r = check_rollback(last, c, err);
	if (r < 0)
		return r;

	c->sig = malloc(sig_len);
	if (!c->sig)
		return -ENOMEM;
	memcpy(c->sig, sig, sig_len);
	c->sig_len = sig_len;
	memcpy(c->key_id, key_id, sizeof(key_id));
	*ret = TAKE_PTR(c);
	return 0;
}

int catalog_trust_new(struct catalog_trust **ret)
{
	struct catalog_trust *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	*ret = t;
	return 0;
}

void catalog_trust_free(struct catalog_trust *t)
{
	if (!t)
		return;
	free(t->keys);
	free(t);
}

size_t catalog_trust_count(const struct catalog_trust *t)
{
	return t->n;
}

const struct sign_public_key *catalog_trust_find(const struct catalog_trust *t, const char *id)
{
	if (!id)
		return NULL;
	for (size_t i = 0; i < t->n; i++)
		if (streq(t->keys[i].id, id))
			return &t->keys[i];
	return NULL;
}

int catalog_trust_add(struct catalog_trust *t, const struct sign_public_key *k)
{
	const struct sign_public_key *old = catalog_trust_find(t, k->id);
	struct sign_public_key *n;

	if (old)
		/* Two different keys under one 64-bit ID would make the ID ambiguous. */
		return memcmp(old->key, k->key, sizeof(k->key)) == 0 ? 0 : -EEXIST;
	n = reallocarray(t->keys, t->n + 1, sizeof(*t->keys));
	if (!n)
		return -ENOMEM;
	t->keys = n;
	t->keys[t->n++] = *k;
	return 0;
}

static int only_pub(const struct dirent *de)
{
	size_t n = strlen(de->d_name);
	return de->d_name[0] != '.' && n > 4 && streq(de->d_name + n - 4, ".pub");
}

static int add_key_file(struct catalog_trust *t, int dirfd, const char *name, const char *shown,
                        struct slate_error *err)
{
	struct sign_public_key k;
	int r;

	r = sign_public_key_load_at(dirfd, name, &k, err);
	if (r < 0)
		return r;
	r = catalog_trust_add(t, &k);
	if (r < 0)
		return slate_error_set(err, r, "%s: key ID %s is taken by another trusted key",
		                       shown, k.id);
	return 0;
}

int catalog_trust_add_path(struct catalog_trust *t, int dirfd, const char *path,
                           struct slate_error *err)
{
	_cleanup_close_ int dfd = -1;
	struct dirent **names = NULL;
	size_t before = t->n;
	struct stat st;
	int n, r = 0;

	if (!path || !*path)
		return -EINVAL;
	if (fstatat(dirfd, path, &st, 0) < 0)
		return slate_error_errno(err, -errno, "%s", path);
	if (!S_ISDIR(st.st_mode))
		return add_key_file(t, dirfd, path, path, err);

	dfd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return slate_error_errno(err, -errno, "%s", path);
	n = scandirat(dfd, ".", &names, only_pub, alphasort);
	if (n < 0)
		return slate_error_errno(err, -errno, "%s", path);
	for (int i = 0; i < n; i++) {
		if (r == 0) {
			_cleanup_free_ char *shown = fs_path_join(path, names[i]->d_name);
			struct slate_error e = {};

			r = add_key_file(t, dfd, names[i]->d_name, shown ? shown : path, &e);
			if (r < 0)
				(void)slate_error_set(err, r, "%s/%s", path,
				                      e.code ? slate_error_text(&e)
				                             : slate_strerror(r));
		}
		free(names[i]);
	}
	free(names);
	if (r < 0)
		t->n = before; /* all of the directory or nothing */
	return r;
}

static int open_state_dir(int state_dirfd, bool create, int *ret_fd)
{
	int fd;

	if (create && mkdirat(state_dirfd, CATALOG_STATE_SUBDIR, 0755) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(state_dirfd, CATALOG_STATE_SUBDIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

int catalog_trust_add_state_keys(struct catalog_trust *t, int state_dirfd, struct slate_error *err)
{
	_cleanup_close_ int dfd = -1;
	struct stat st;
	int r;

	r = open_state_dir(state_dirfd, false, &dfd);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR);
	if (fstatat(dfd, KEYS_DIR, &st, 0) < 0)
		return errno == ENOENT ? 0
		                       : slate_error_set(err, -errno,
		                                         CATALOG_STATE_SUBDIR "/" KEYS_DIR ": %m");
	return catalog_trust_add_path(t, dfd, KEYS_DIR, err);
}

int catalog_state_lock(int state_dirfd, int *ret_fd)
{
	_cleanup_close_ int dfd = -1;
	int r;

	r = open_state_dir(state_dirfd, true, &dfd);
	if (r < 0)
		return r;
	return fs_lock_at(dfd, ".lock", ret_fd);
}

static int state_load_at(int dfd, struct catalog_state *ret, struct slate_error *err)
{
	static const char *const members[] = {"format", "formatVersion", "channel",    "version",
	                                      "sha256", "keyId",         "acceptedAt", NULL};
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	struct catalog_state s = {};
	struct catalog_artifact a = {};
	const char *format = NULL, *channel = NULL, *key_id = NULL;
	int64_t fv = 0;
	int r;

	r = fs_read_file_at(dfd, STATE_FILE, STATE_FILE_MAX, &b);
	if (r == -ENOENT)
		return -ENOENT;
	if (r < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR "/" STATE_FILE);
	r = json_parse_object((const char *)buf_ptr(b), buf_len(b), STATE_FILE_MAX, &o);
	if (r < 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       CATALOG_STATE_SUBDIR "/" STATE_FILE ": %s",
		                       slate_strerror(r));
	if ((r = catalog_check_members(o, STATE_FILE, members, err)) < 0 ||
	    (r = catalog_get_text(o, STATE_FILE, "format", true, 64, TEXT_URL, &format, err)) < 0 ||
	    (r = catalog_get_int(o, STATE_FILE, "formatVersion", 0, &fv, err)) < 0 ||
	    (r = catalog_get_text(o, STATE_FILE, "channel", true, SIGN_CHANNEL_MAX, TEXT_URL,
	                          &channel, err)) < 0 ||
	    (r = catalog_get_int(o, STATE_FILE, "version", 1, &s.version, err)) < 0 ||
	    (r = catalog_get_sha256(o, STATE_FILE, &a, err)) < 0 ||
	    (r = catalog_get_text(o, STATE_FILE, "keyId", true, SIGN_KEY_ID_LEN, TEXT_URL, &key_id,
	                          err)) < 0 ||
	    (r = catalog_get_time(o, STATE_FILE, "acceptedAt", &s.accepted_at, err)) < 0)
		return r;
	if (!streq(format, STATE_FORMAT) || fv != STATE_FORMAT_VERSION ||
	    sign_channel_check(channel) < 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       CATALOG_STATE_SUBDIR "/" STATE_FILE
		                                            ": not a version %d catalog state",
		                       STATE_FORMAT_VERSION);
	memcpy(s.channel, channel, strlen(channel) + 1);
	memcpy(s.key_id, key_id, strlen(key_id) + 1);
	memcpy(s.sha256, a.sha256, sizeof(s.sha256));
	*ret = s;
	return 0;
}

int catalog_state_load(int state_dirfd, struct catalog_state *ret, struct slate_error *err)
{
	_cleanup_close_ int dfd = -1;
	int r;

	r = open_state_dir(state_dirfd, false, &dfd);
	if (r == -ENOENT)
		return -ENOENT;
	if (r < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR);
	return state_load_at(dfd, ret, err);
}

static bool catalog_has_key(const struct catalog *c, const char *file_name)
{
	for (size_t i = 0; i < c->n_keys; i++)
		if (strlen(file_name) == SIGN_KEY_ID_LEN + 4 &&
		    strneq(file_name, c->keys[i].id, SIGN_KEY_ID_LEN) &&
		    streq(file_name + SIGN_KEY_ID_LEN, ".pub"))
			return true;
	return false;
}

/* Removes every keys/ *.pub that c does not list. */
static int keys_remove_unlisted(int kfd, const struct catalog *c)
{
	struct dirent **names = NULL;
	int n, r = 0;

	n = scandirat(kfd, ".", &names, only_pub, alphasort);
	if (n < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		if (r == 0 && !catalog_has_key(c, names[i]->d_name) &&
		    unlinkat(kfd, names[i]->d_name, 0) < 0 && errno != ENOENT)
			r = -errno;
		free(names[i]);
	}
	free(names);
	if (r < 0)
		return r;
	return fs_fsync_dir(kfd);
}

static int state_json(const struct catalog *c, int64_t now, char **ret)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	char hex[65], when[32];
	int r;

	if (!o)
		return -ENOMEM;
	(void)sodium_bin2hex(hex, sizeof(hex), c->sha256, sizeof(c->sha256));
	r = catalog_time_format(now, when, sizeof(when));
	if (r < 0)
		return r;
	if ((r = json_add_string(o, "format", STATE_FORMAT)) < 0 ||
	    (r = json_add_int64(o, "formatVersion", STATE_FORMAT_VERSION)) < 0 ||
	    (r = json_add_string(o, "channel", c->channel)) < 0 ||
	    (r = json_add_int64(o, "version", c->version)) < 0 ||
	    (r = json_add_string(o, "sha256", hex)) < 0 ||
	    (r = json_add_string(o, "keyId", c->key_id)) < 0 ||
	    (r = json_add_string(o, "acceptedAt", when)) < 0)
		return r;
	return json_to_string_dup(o, true, ret);
}

int catalog_state_accept(int state_dirfd, const struct catalog *c, int64_t now,
                         struct slate_error *err)
{
	_cleanup_close_ int dfd = -1, kfd = -1;
	_cleanup_free_ char *state = NULL;
	struct catalog_state last;
	int r;

	if (!c || !c->sig || !c->key_id[0] || !c->bytes)
		return slate_error_set(err, -EINVAL, "only a verified catalog can be accepted");
	r = open_state_dir(state_dirfd, true, &dfd);
	if (r < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR);
	r = state_load_at(dfd, &last, err);
	if (r < 0 && r != -ENOENT)
		return r;
	r = check_rollback(r == 0 ? &last : NULL, c, err);
	if (r < 0)
		return r;
	r = state_json(c, now, &state);
	if (r < 0)
		return slate_error_errno(err, r, "cannot record the state");

	if (mkdirat(dfd, KEYS_DIR, 0755) < 0 && errno != EEXIST)
		return slate_error_errno(err, -errno, CATALOG_STATE_SUBDIR "/" KEYS_DIR);
	kfd = openat(dfd, KEYS_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (kfd < 0)
		return slate_error_errno(err, -errno, CATALOG_STATE_SUBDIR "/" KEYS_DIR);
	/* Keys the new catalog drops stop being trusted before it is committed... */
	r = keys_remove_unlisted(kfd, c);
	if (r < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR "/" KEYS_DIR);

	/* state.json last: it is what a later verification compares against. */
	if ((r = fs_write_atomic_at(dfd, CURRENT_SIG_FILE, c->sig, c->sig_len, 0644)) < 0 ||
	    (r = fs_write_atomic_at(dfd, CURRENT_FILE, c->bytes, c->len, 0644)) < 0 ||
	    (r = fs_write_atomic_at(dfd, STATE_FILE, state, strlen(state), 0644)) < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR ": cannot write");

	/* ...and keys it introduces are trusted only after it is. */
	for (size_t i = 0; i < c->n_keys; i++) {
		_cleanup_free_ char *text = NULL;
		char name[SIGN_KEY_ID_LEN + 5];

		r = sign_public_key_format(&c->keys[i], &text);
		if (r < 0)
			return slate_error_set(err, r, "%s", slate_strerror(r));
		(void)snprintf(name, sizeof(name), "%s.pub", c->keys[i].id);
		r = fs_write_atomic_at(kfd, name, text, strlen(text), 0644);
		if (r < 0)
			return slate_error_errno(err, r, CATALOG_STATE_SUBDIR "/" KEYS_DIR "/%s",
			                         name);
	}
	return 0;
}

int catalog_state_load_current(int state_dirfd, struct catalog **ret, struct slate_error *err)
{
	_cleanup_close_ int dfd = -1;
	_cleanup_buf_ struct buf *b = NULL, *sb = NULL;
	_cleanup_catalog_ struct catalog *c = NULL;
	struct catalog_state s;
	uint8_t h[32];
	int r;

	r = open_state_dir(state_dirfd, false, &dfd);
	if (r < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR);
	r = state_load_at(dfd, &s, err);
	if (r == -ENOENT)
		return slate_error_set(err, r, "no catalog was accepted yet");
	if (r < 0)
		return r;
	r = fs_read_file_at(dfd, CURRENT_FILE, CATALOG_MAX_SIZE, &b);
	if (r < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR "/" CURRENT_FILE);
	crypto_hash_sha256(h, buf_ptr(b), buf_len(b));
	if (memcmp(h, s.sha256, sizeof(h)) != 0)
		return slate_error_set(
		        err, SLATE_ERR_DIGEST_MISMATCH,
		        CATALOG_STATE_SUBDIR
		        "/" CURRENT_FILE " is not the catalog " STATE_FILE
		        " records (an interrupted update?); update the catalog again");
	r = fs_read_file_at(dfd, CURRENT_SIG_FILE, SIGN_SIG_FILE_MAX, &sb);
	if (r < 0)
		return slate_error_errno(err, r, CATALOG_STATE_SUBDIR "/" CURRENT_SIG_FILE);
	r = catalog_parse(buf_ptr(b), buf_len(b), &c, err);
	if (r < 0)
		return r;
	c->sig = malloc(buf_len(sb) ? buf_len(sb) : 1);
	if (!c->sig)
		return -ENOMEM;
	memcpy(c->sig, buf_ptr(sb), buf_len(sb));
	c->sig_len = buf_len(sb);
	memcpy(c->key_id, s.key_id, sizeof(c->key_id));
	*ret = TAKE_PTR(c);
	return 0;
}

int catalog_artifact_check_new(const struct catalog_artifact *a,
                               struct catalog_artifact_check **ret)
{
	struct catalog_artifact_check *c;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->md = EVP_MD_CTX_new();
	if (!c->md || EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) != 1) {
		catalog_artifact_check_free(c);
		return SLATE_ERR_CRYPTO;
	}
	c->size = a->size;
	memcpy(c->sha256, a->sha256, sizeof(c->sha256));
	memcpy(c->sha256_hex, a->sha256_hex, sizeof(c->sha256_hex));
	*ret = c;
	return 0;
}

void catalog_artifact_check_free(struct catalog_artifact_check *c)
{
	if (!c)
		return;
	EVP_MD_CTX_free(c->md);
	free(c);
}

int catalog_artifact_check_update(struct catalog_artifact_check *c, const void *p, size_t n,
                                  struct slate_error *err)
{
	if (c->failed)
		return slate_error_set(err, SLATE_ERR_SIZE_MISMATCH,
		                       "more than the declared %" PRIu64 " bytes", c->size);
	/* Refused before a byte of the excess is hashed or handed on. */
	if (n > c->size - c->done) {
		c->failed = true;
		return slate_error_set(err, SLATE_ERR_SIZE_MISMATCH,
		                       "more than the declared %" PRIu64 " bytes", c->size);
	}
	if (n > 0 && EVP_DigestUpdate(c->md, p, n) != 1)
		return slate_error_set(err, SLATE_ERR_CRYPTO, "SHA-256 failed");
	c->done += n;
	return 0;
}

int catalog_artifact_check_final(struct catalog_artifact_check *c, struct slate_error *err)
{
	uint8_t h[EVP_MAX_MD_SIZE];
	unsigned hlen = 0;
	char hex[65];

	if (c->failed)
		return slate_error_set(err, SLATE_ERR_SIZE_MISMATCH,
		                       "more than the declared %" PRIu64 " bytes", c->size);
	if (c->done != c->size)
		return slate_error_set(err, SLATE_ERR_SIZE_MISMATCH,
		                       "%" PRIu64 " bytes, fewer than the declared %" PRIu64,
		                       c->done, c->size);
	if (EVP_DigestFinal_ex(c->md, h, &hlen) != 1 || hlen != 32)
		return slate_error_set(err, SLATE_ERR_CRYPTO, "SHA-256 failed");
	c->failed = true; /* the context is spent */
	if (memcmp(h, c->sha256, 32) != 0) {
		(void)sodium_bin2hex(hex, sizeof(hex), h, 32);
		return slate_error_set(err, SLATE_ERR_DIGEST_MISMATCH,
		                       "SHA-256 %s differs from the declared %s", hex,
		                       c->sha256_hex);
	}
	return 0;
}

int catalog_artifact_check_fd(const struct catalog_artifact *a, int fd, struct slate_error *err)
{
	_cleanup_(catalog_artifact_check_freep) struct catalog_artifact_check *c = NULL;
	_cleanup_free_ uint8_t *chunk = NULL;
	const size_t chunk_size = 256 * 1024;
	struct stat st;
	off_t pos;
	int r;

	if (fstat(fd, &st) < 0)
		return slate_error_set(err, -errno, "%m");
	if (S_ISREG(st.st_mode)) {
		pos = lseek(fd, 0, SEEK_CUR);
		if (pos >= 0 && st.st_size > pos && (uint64_t)(st.st_size - pos) > a->size)
			return slate_error_set(err, SLATE_ERR_SIZE_MISMATCH,
			                       "%" PRIu64 " bytes, more than the declared %" PRIu64,
			                       (uint64_t)(st.st_size - pos), a->size);
	}
	r = catalog_artifact_check_new(a, &c);
	if (r < 0)
		return slate_error_set(err, r, "%s", slate_strerror(r));
	chunk = malloc(chunk_size);
	if (!chunk)
		return -ENOMEM;
	for (;;) {
		/* Never ask for more than one byte past the declared size. */
		uint64_t left = a->size - c->done + 1;
		size_t want = left < chunk_size ? (size_t)left : chunk_size;
		ssize_t n = read(fd, chunk, want);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return slate_error_set(err, -errno, "%m");
		if (n == 0)
			break;
		r = catalog_artifact_check_update(c, chunk, (size_t)n, err);
		if (r < 0)
			return r;
	}
	return catalog_artifact_check_final(c, err);
}

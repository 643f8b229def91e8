/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/keys.h"
#include "secrets/install.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

#define KEYS_VERSION 1
#define IMPORTED_PREFIX "imported-"

static void key_clear(struct agent_key *k)
{
	free(k->blob);
	free(k->comment);
	k->blob = NULL;
	k->comment = NULL;
}

struct agent_keyset *agent_keyset_new(void)
{
	return calloc(1, sizeof(struct agent_keyset));
}

void agent_keyset_free(struct agent_keyset *ks)
{
	if (!ks)
		return;
	for (size_t i = 0; i < ks->n; i++)
		key_clear(&ks->keys[i]);
	free(ks->keys);
	free(ks);
}

static bool file_name_ok(enum agent_key_kind kind, const char *f)
{
	size_t n = strlen(f), p = strlen(IMPORTED_PREFIX);

	if (kind == AGENT_KEY_MANAGED)
		return streq(f, AGENT_MANAGED_FILE);
	/* imported-<16 hex>.key */
	if (n != p + 16 + 4 || !strneq(f, IMPORTED_PREFIX, p) || !streq(f + n - 4, ".key"))
		return false;
	for (size_t i = p; i < p + 16; i++)
		if (!((f[i] >= '0' && f[i] <= '9') || (f[i] >= 'a' && f[i] <= 'f')))
			return false;
	return true;
}

/* Fills k from its parts; the blob is copied. */
static int key_fill(struct agent_key *k, enum agent_key_kind kind, const uint8_t *blob,
                    size_t blob_len, const char *comment, const char *file, int64_t created)
{
	int r;

	*k = (struct agent_key){.kind = kind, .created = created};
	if (strlen(file) >= sizeof(k->file) || !file_name_ok(kind, file))
		return SLATE_ERR_INVALID_FORMAT;
	if (comment && !agent_comment_ok(comment))
		return SLATE_ERR_INVALID_FORMAT;
	r = agent_key_blob_type(blob, blob_len, k->type);
	if (r < 0)
		return r;
	if (kind == AGENT_KEY_MANAGED && !streq(k->type, AGENT_ED25519_TYPE))
		return SLATE_ERR_INVALID_FORMAT;
	r = agent_fingerprint(blob, blob_len, k->fingerprint);
	if (r < 0)
		return r;
	(void)snprintf(k->file, sizeof(k->file), "%s", file);
	k->blob = malloc(blob_len);
	if (!k->blob)
		return -ENOMEM;
	memcpy(k->blob, blob, blob_len);
	k->blob_len = blob_len;
	if (comment && *comment) {
		k->comment = strdup(comment);
		if (!k->comment) {
			key_clear(k);
			return -ENOMEM;
		}
	}
	return 0;
}

static int keyset_append(struct agent_keyset *ks, struct agent_key *k)
{
	struct agent_key *n;

	if (ks->n >= AGENT_MAX_KEYS)
		return -E2BIG;
	n = realloc(ks->keys, (ks->n + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	ks->keys = n;
	ks->keys[ks->n++] = *k;
	*k = (struct agent_key){0};
	return 0;
}

static int key_from_json(struct json_object *o, struct agent_key *ret)
{
	const char *kind, *type, *pub, *file, *comment = NULL;
	_cleanup_free_ uint8_t *blob = NULL;
	size_t blob_len, pub_len;
	const char *end;
	int64_t created = 0;
	enum agent_key_kind k;
	int r;

	if (!json_object_is_type(o, json_type_object) || json_get_string(o, "kind", &kind) < 0 ||
	    json_get_string(o, "type", &type) < 0 || json_get_string(o, "public", &pub) < 0 ||
	    json_get_string(o, "file", &file) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	r = json_get_string(o, "comment", &comment);
	if (r < 0 && r != -ENOENT)
		return SLATE_ERR_INVALID_FORMAT;
	r = json_get_int64(o, "created", &created);
	if (r < 0 && r != -ENOENT)
		return SLATE_ERR_INVALID_FORMAT;
	if (streq(kind, "managed"))
		k = AGENT_KEY_MANAGED;
	else if (streq(kind, "imported"))
		k = AGENT_KEY_IMPORTED;
	else
		return SLATE_ERR_INVALID_FORMAT;
	pub_len = strlen(pub);
	if (pub_len == 0 ||
	    pub_len > sodium_base64_ENCODED_LEN(AGENT_MAX_KEY_BLOB, sodium_base64_VARIANT_ORIGINAL))
		return SLATE_ERR_INVALID_FORMAT;
	blob = malloc(pub_len);
	if (!blob)
		return -ENOMEM;
	if (sodium_base642bin(blob, pub_len, pub, pub_len, NULL, &blob_len, &end,
	                      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    end != pub + pub_len)
		return SLATE_ERR_INVALID_FORMAT;
	r = key_fill(ret, k, blob, blob_len, comment, file, created);
	if (r < 0)
		return r;
	if (!streq(ret->type, type)) {
		key_clear(ret);
		return SLATE_ERR_INVALID_FORMAT;
	}
	return 0;
}

int agent_keyset_parse(const char *data, size_t len, struct agent_keyset **ret)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *arr;
	int64_t version;
	size_t n;
	int r;

	r = json_parse_object(data, len, AGENT_KEYS_JSON_MAX, &o);
	if (r < 0)
		return r;
	if (json_get_int64(o, "version", &version) < 0 || version != KEYS_VERSION ||
	    json_get_array(o, "keys", &arr) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	n = json_object_array_length(arr);
	if (n > AGENT_MAX_KEYS)
		return SLATE_ERR_INVALID_FORMAT;
	ks = agent_keyset_new();
	if (!ks)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct agent_key k;

		r = key_from_json(json_object_array_get_idx(arr, i), &k);
		if (r < 0)
			return r;
		/* One managed key; no key twice; no file twice. */
		for (size_t j = 0; j < ks->n; j++)
			if ((k.kind == AGENT_KEY_MANAGED &&
			     ks->keys[j].kind == AGENT_KEY_MANAGED) ||
			    (k.blob_len == ks->keys[j].blob_len &&
			     memcmp(k.blob, ks->keys[j].blob, k.blob_len) == 0) ||
			    streq(k.file, ks->keys[j].file)) {
				key_clear(&k);
				return SLATE_ERR_INVALID_FORMAT;
			}
		r = keyset_append(ks, &k);
		if (r < 0) {
			key_clear(&k);
			return r;
		}
	}
	*ret = TAKE_PTR(ks);
	return 0;
}

int agent_keyset_load(int ws_dirfd, struct agent_keyset **ret)
{
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_close_ int dfd = -1;
	int r;

	r = fs_open_dir_at(ws_dirfd, AGENT_SSH_DIR, &dfd);
	if (r == -ENOENT)
		goto empty;
	if (r < 0)
		return r;
	r = fs_read_file_at(dfd, AGENT_KEYS_FILE, AGENT_KEYS_JSON_MAX, &b);
	if (r == -ENOENT)
		goto empty;
	if (r == -EFBIG)
		return SLATE_ERR_TOO_LARGE;
	if (r < 0)
		return r;
	return agent_keyset_parse((const char *)buf_ptr(b), buf_len(b), ret);
empty:
	*ret = agent_keyset_new();
	return *ret ? 0 : -ENOMEM;
}

static struct json_object *key_record(const struct agent_key *k)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_free_ char *b64 = NULL;
	size_t n = sodium_base64_ENCODED_LEN(k->blob_len, sodium_base64_VARIANT_ORIGINAL);

	b64 = malloc(n);
	if (!o || !b64)
		return NULL;
	(void)sodium_bin2base64(b64, n, k->blob, k->blob_len, sodium_base64_VARIANT_ORIGINAL);
	if (json_add_string(o, "kind", k->kind == AGENT_KEY_MANAGED ? "managed" : "imported") < 0 ||
	    json_add_string(o, "type", k->type) < 0 || json_add_string(o, "public", b64) < 0 ||
	    json_add_string(o, "file", k->file) < 0 || json_add_int64(o, "created", k->created) < 0)
		return NULL;
	if (k->comment && json_add_string(o, "comment", k->comment) < 0)
		return NULL;
	return TAKE_PTR(o);
}

int agent_keyset_format(const struct agent_keyset *ks, char **ret)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct json_object *arr = json_object_new_array();

	if (!o || !arr || json_add(o, "keys", arr) < 0 ||
	    json_add_int64(o, "version", KEYS_VERSION) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < ks->n; i++) {
		struct json_object *k = key_record(&ks->keys[i]);
		if (!k || json_object_array_add(arr, k) < 0) {
			json_object_put(k);
			return -ENOMEM;
		}
	}
	return json_to_string_dup(o, true, ret);
}

const struct agent_key *agent_keyset_find(const struct agent_keyset *ks, const uint8_t *blob,
                                          size_t len)
{
	if (!ks)
		return NULL;
	for (size_t i = 0; i < ks->n; i++)
		if (ks->keys[i].blob_len == len && memcmp(ks->keys[i].blob, blob, len) == 0)
			return &ks->keys[i];
	return NULL;
}

const struct agent_key *agent_keyset_managed(const struct agent_keyset *ks)
{
	if (!ks)
		return NULL;
	for (size_t i = 0; i < ks->n; i++)
		if (ks->keys[i].kind == AGENT_KEY_MANAGED)
			return &ks->keys[i];
	return NULL;
}

struct json_object *agent_key_json(const struct agent_key *k)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_free_ char *line = NULL;

	if (!o || agent_public_line(k->blob, k->blob_len, k->comment, &line) < 0)
		return NULL;
	if (json_add_string(o, "kind", k->kind == AGENT_KEY_MANAGED ? "managed" : "imported") < 0 ||
	    json_add_string(o, "type", k->type) < 0 ||
	    json_add_string(o, "fingerprint", k->fingerprint) < 0 ||
	    json_add_string(o, "comment", k->comment ? k->comment : "") < 0 ||
	    json_add_string(o, "public_key", line) < 0 ||
	    json_add_int64(o, "created", k->created) < 0)
		return NULL;
	return TAKE_PTR(o);
}

struct json_object *agent_keyset_json(const struct agent_keyset *ks)
{
	_cleanup_json_ struct json_object *arr = json_object_new_array();

	if (!arr)
		return NULL;
	for (int pass = 0; ks && pass < 2; pass++)
		for (size_t i = 0; i < ks->n; i++) {
			struct json_object *k;

			if ((pass == 0) != (ks->keys[i].kind == AGENT_KEY_MANAGED))
				continue;
			k = agent_key_json(&ks->keys[i]);
			if (!k || json_object_array_add(arr, k) < 0) {
				json_object_put(k);
				return NULL;
			}
		}
	return TAKE_PTR(arr);
}

/* ssh/, made 0700 when missing; *ret_fd is an O_PATH fd of it. */
static int ssh_dir(int ws_dirfd, int *ret_fd)
{
	if (mkdirat(ws_dirfd, AGENT_SSH_DIR, 0700) < 0 && errno != EEXIST)
		return -errno;
	return fs_open_dir_at(ws_dirfd, AGENT_SSH_DIR, ret_fd);
}

static int purpose_of(const char *workspace, const char *file, char *buf, size_t len)
{
	int n = snprintf(buf, len, "ssh-key:%s/%s", workspace, file);

	return n < 0 || (size_t)n >= len ? -EINVAL : 0;
}

static int seal_to(int dfd, const struct install *in, const char *workspace, const char *file,
                   const void *plain, size_t len)
{
	_cleanup_buf_ struct buf *sealed = NULL;
	char purpose[160];
	int r;

	r = purpose_of(workspace, file, purpose, sizeof(purpose));
	if (r < 0)
		return r;
	r = install_seal(in, purpose, plain, len, &sealed);
	if (r < 0)
		return r;
	return fs_write_atomic_at(dfd, file, buf_ptr(sealed), buf_len(sealed), 0600);
}

static int save_keyset(int dfd, const struct agent_keyset *ks)
{
	_cleanup_free_ char *text = NULL;
	int r;

	r = agent_keyset_format(ks, &text);
	if (r < 0)
		return r;
	return fs_write_atomic_at(dfd, AGENT_KEYS_FILE, text, strlen(text), 0600);
}

/* Opens the workspace's ssh/ (in *ret_dfd) and writes ks there. */
static int save_keyset_in(int ws_dirfd, const struct agent_keyset *ks, int *ret_dfd)
{
	_cleanup_close_ int dfd = -1;
	int r;

	r = fs_open_dir_at(ws_dirfd, AGENT_SSH_DIR, &dfd);
	if (r < 0)
		return r;
	r = save_keyset(dfd, ks);
	if (r < 0)
		return r;
	*ret_dfd = TAKE_FD(dfd);
	return 0;
}

/* Adds k (taken over) to the workspace's keys.json, refusing a key it holds already. */
static int add_key(int dfd, struct agent_keyset *ks, struct agent_key *k, struct json_object **ret)
{
	_cleanup_json_ struct json_object *info = NULL;
	int r;

	if (agent_keyset_find(ks, k->blob, k->blob_len) ||
	    (k->kind == AGENT_KEY_MANAGED && agent_keyset_managed(ks))) {
		key_clear(k);
		return -EEXIST;
	}
	info = agent_key_json(k);
	r = keyset_append(ks, k);
	if (r < 0) {
		key_clear(k);
		return r;
	}
	if (!info)
		return -ENOMEM;
	r = save_keyset(dfd, ks);
	if (r < 0)
		return r;
	if (ret)
		*ret = TAKE_PTR(info);
	return 0;
}

int agent_keys_generate(int ws_dirfd, const struct install *in, const char *workspace,
                        const char *comment, const uint8_t *seed, struct json_object **ret)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;
	_cleanup_buf_ struct buf *blob = NULL;
	_cleanup_close_ int dfd = -1;
	uint8_t pk[crypto_sign_ed25519_PUBLICKEYBYTES];
	uint8_t *sk = NULL;
	struct agent_key k;
	int r;

	if (!in)
		return -ENOKEY;
	r = agent_keyset_load(ws_dirfd, &ks);
	if (r < 0)
		return r;
	if (agent_keyset_managed(ks))
		return -EEXIST;
	if (ks->n >= AGENT_MAX_KEYS)
		return -E2BIG;
	r = ssh_dir(ws_dirfd, &dfd);
	if (r < 0)
		return r;
	sk = sodium_malloc(crypto_sign_ed25519_SECRETKEYBYTES);
	if (!sk)
		return -ENOMEM;
	if (seed)
		(void)crypto_sign_ed25519_seed_keypair(pk, sk, seed);
	else
		(void)crypto_sign_ed25519_keypair(pk, sk);
	r = seal_to(dfd, in, workspace, AGENT_MANAGED_FILE, sk, crypto_sign_ed25519_SECRETKEYBYTES);
	sodium_free(sk);
	if (r < 0)
		return r;
	blob = buf_new(AGENT_MAX_KEY_BLOB);
	if (!blob)
		return -ENOMEM;
	r = agent_ed25519_blob(pk, blob);
	if (r < 0)
		return r;
	r = key_fill(&k, AGENT_KEY_MANAGED, buf_ptr(blob), buf_len(blob), comment,
	             AGENT_MANAGED_FILE, (int64_t)time(NULL));
	if (r < 0)
		return r;
	return add_key(dfd, ks, &k, ret);
}

int agent_keys_add_imported(int ws_dirfd, const struct install *in, const char *workspace,
                            const void *key, size_t key_len, const uint8_t *blob, size_t blob_len,
                            const char *comment, struct json_object **ret)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;
	_cleanup_close_ int dfd = -1;
	uint8_t h[crypto_hash_sha256_BYTES];
	char file[64], hex[17];
	struct agent_key k;
	int r;

	if (!in)
		return -ENOKEY;
	if (key_len == 0 || key_len > AGENT_SEALED_MAX / 2)
		return SLATE_ERR_TOO_LARGE;
	r = agent_keyset_load(ws_dirfd, &ks);
	if (r < 0)
		return r;
	if (agent_keyset_find(ks, blob, blob_len))
		return -EEXIST;
	if (ks->n >= AGENT_MAX_KEYS)
		return -E2BIG;
	(void)crypto_hash_sha256(h, blob, blob_len);
	(void)sodium_bin2hex(hex, sizeof(hex), h, 8);
	(void)snprintf(file, sizeof(file), IMPORTED_PREFIX "%s.key", hex);
	r = key_fill(&k, AGENT_KEY_IMPORTED, blob, blob_len, comment, file, (int64_t)time(NULL));
	if (r < 0)
		return r;
	for (size_t i = 0; i < ks->n; i++)
		if (streq(ks->keys[i].file, file)) {
			key_clear(&k);
			return -EEXIST;
		}
	r = ssh_dir(ws_dirfd, &dfd);
	if (r >= 0)
		r = seal_to(dfd, in, workspace, file, key, key_len);
	if (r < 0) {
		key_clear(&k);
		return r;
	}
	return add_key(dfd, ks, &k, ret);
}

int agent_keys_remove(int ws_dirfd, const char *fingerprint)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;
	_cleanup_close_ int dfd = -1;
	char file[64] = "";
	size_t j = 0;
	int r;

	r = agent_keyset_load(ws_dirfd, &ks);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ks->n; i++) {
		if (streq(ks->keys[i].fingerprint, fingerprint)) {
			(void)snprintf(file, sizeof(file), "%s", ks->keys[i].file);
			key_clear(&ks->keys[i]);
			continue;
		}
		ks->keys[j++] = ks->keys[i];
	}
	if (!file[0])
		return -ENOENT;
	ks->n = j;
	r = save_keyset_in(ws_dirfd, ks, &dfd);
	if (r < 0)
		return r;
	if (unlinkat(dfd, file, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int agent_keys_unseal(int ws_dirfd, const struct install *in, const char *workspace,
                      const struct agent_key *k, struct buf **ret)
{
	_cleanup_buf_ struct buf *sealed = NULL;
	_cleanup_close_ int dfd = -1;
	char purpose[160];
	int r;

	if (!in)
		return -ENOKEY;
	r = purpose_of(workspace, k->file, purpose, sizeof(purpose));
	if (r < 0)
		return r;
	r = fs_open_dir_at(ws_dirfd, AGENT_SSH_DIR, &dfd);
	if (r < 0)
		return r;
	r = fs_read_file_at(dfd, k->file, AGENT_SEALED_MAX, &sealed);
	if (r == -EFBIG)
		return SLATE_ERR_TOO_LARGE;
	if (r < 0)
		return r;
	return install_unseal(in, purpose, buf_ptr(sealed), buf_len(sealed), ret);
}

int agent_keys_keep_imported(int ws_dirfd)
{
	_cleanup_(agent_keyset_freep) struct agent_keyset *ks = NULL;
	_cleanup_close_ int dfd = -1;
	char **names = NULL;
	size_t j = 0, n = 0;
	int r;

	if (agent_keyset_load(ws_dirfd, &ks) < 0)
		return 0;
	for (size_t i = 0; i < ks->n; i++) {
		if (ks->keys[i].kind != AGENT_KEY_IMPORTED) {
			key_clear(&ks->keys[i]);
			continue;
		}
		ks->keys[j++] = ks->keys[i];
	}
	ks->n = j;
	if (j == 0)
		return 0;
	/* The list first: from here on the generated key is not one, whatever is left. */
	r = save_keyset_in(ws_dirfd, ks, &dfd);
	if (r < 0)
		return r;
	r = fs_list_names_at(dfd, &names, &n);
	if (r < 0)
		return r;
	for (size_t k = 0; k < n && r == 0; k++) {
		bool keep = streq(names[k], AGENT_KEYS_FILE);

		for (size_t i = 0; i < ks->n && !keep; i++)
			keep = streq(names[k], ks->keys[i].file);
		/* slate makes no directories there; one that is there (EISDIR) is not a key. */
		if (!keep && unlinkat(dfd, names[k], 0) < 0 && errno != ENOENT && errno != EISDIR)
			r = -errno;
	}
	fs_names_free(names, n);
	if (r < 0)
		return r;
	r = fs_fsync_dir(dfd);
	if (r < 0)
		return r;
	return (int)ks->n;
}

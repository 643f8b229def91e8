/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "image/catalog.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/hex.h"
#include "util/json.h"

#define STATE_FORMAT "slate-catalog-state"
#define STATE_FORMAT_VERSION 1
#define STATE_FILE "state.json"
#define CURRENT_FILE "current.json"
#define CURRENT_SIG_FILE "current.sig"
#define KEYS_DIR "keys"
#define STATE_FILE_MAX 4096
/* The largest time we write or read: 9999-12-31T23:59:59Z. */
#define TIME_MAX INT64_C(253402300799)

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

/* ---- names, times ---------------------------------------------------------------------- */

int catalog_id_check(const char *id)
{
	/* The same rules as channel names (and the image store's ids). */
	return sign_channel_check(id);
}

int catalog_time_parse(const char *s, int64_t *ret)
{
	static const char pattern[] = "dddd-dd-ddTdd:dd:ddZ";
	unsigned v[6] = {}, field = 0;
	struct tm tm, back;
	time_t t;

	if (!s || strlen(s) != sizeof(pattern) - 1)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(pattern) - 1; i++) {
		if (pattern[i] == 'd') {
			if (s[i] < '0' || s[i] > '9')
				return -EINVAL;
			v[field] = v[field] * 10 + (unsigned)(s[i] - '0');
		} else {
			if (s[i] != pattern[i])
				return -EINVAL;
			field++;
		}
	}
	if (v[0] < 1970)
		return -EINVAL;
	tm = (struct tm){.tm_year = (int)v[0] - 1900,
	                 .tm_mon = (int)v[1] - 1,
	                 .tm_mday = (int)v[2],
	                 .tm_hour = (int)v[3],
	                 .tm_min = (int)v[4],
	                 .tm_sec = (int)v[5]};
	back = tm;
	/* timegm() normalises what is out of range (February 30th, 24:00, a leap second): a date
	 * that does not come back the same is no date. */
	t = timegm(&back);
	if (t == (time_t)-1 || back.tm_year != tm.tm_year || back.tm_mon != tm.tm_mon ||
	    back.tm_mday != tm.tm_mday || back.tm_hour != tm.tm_hour || back.tm_min != tm.tm_min ||
	    back.tm_sec != tm.tm_sec)
		return -EINVAL;
	*ret = (int64_t)t;
	return 0;
}

int catalog_time_format(int64_t t, char *buf, size_t size)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (size < 21)
		return -ENOBUFS;
	if (t < 0 || t > TIME_MAX || !gmtime_r(&tt, &tm))
		return -ERANGE;
	(void)strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return 0;
}

/* For messages: t as a timestamp, or as a number when it is out of range. */
static const char *time_str(int64_t t, char buf[32])
{
	if (catalog_time_format(t, buf, 32) < 0)
		(void)snprintf(buf, 32, "%" PRId64, t);
	return buf;
}

const char *catalog_error_name(int code)
{
	switch (code) {
	case 0:
		return "ok";
	case SLATE_ERR_SIGNATURE_MISSING:
		return "signature_missing";
	case SLATE_ERR_SIGNATURE_FORMAT:
		return "signature_malformed";
	case SLATE_ERR_KEY_NOT_TRUSTED:
		return "key_not_trusted";
	case SLATE_ERR_SIGNATURE_INVALID:
		return "bad_signature";
	case SLATE_ERR_ROLLBACK:
		return "rollback";
	case SLATE_ERR_VERSION_REUSED:
		return "version_reused";
	case SLATE_ERR_EXPIRED:
		return "expired";
	case SLATE_ERR_TOO_LARGE:
		return "too_large";
	case SLATE_ERR_WRONG_CHANNEL:
		return "wrong_channel";
	case SLATE_ERR_PROTOCOL_VERSION:
		return "unsupported_format_version";
	case SLATE_ERR_INVALID_FORMAT:
	case SLATE_ERR_JSON_TYPE:
	case SLATE_ERR_JSON_DEPTH:
		return "malformed";
	case SLATE_ERR_SIZE_MISMATCH:
		return "size_mismatch";
	case SLATE_ERR_DIGEST_MISMATCH:
		return "digest_mismatch";
	case SLATE_ERR_KEY_PERMISSIONS:
		return "key_permissions";
	default:
		return "error";
	}
}

/* ---- strict field readers -------------------------------------------------------------- */

enum text_kind {
	TEXT_PLAIN,   /* any UTF-8 text without control characters (C0, DEL, C1) */
	TEXT_COMMAND, /* like TEXT_PLAIN, and tab and newline */
	TEXT_URL,     /* printable ASCII without space, not empty: URLs and other tokens */
	TEXT_CMDLINE, /* printable ASCII */
};

static bool text_ok(const char *s, enum text_kind kind)
{
	const unsigned char *p = (const unsigned char *)s;

	if ((kind == TEXT_URL) && !*p)
		return false;
	for (; *p; p++) {
		switch (kind) {
		case TEXT_URL:
			if (*p <= 0x20 || *p >= 0x7f)
				return false;
			break;
		case TEXT_CMDLINE:
			if (*p < 0x20 || *p >= 0x7f)
				return false;
			break;
		case TEXT_COMMAND:
		case TEXT_PLAIN:
			if (kind == TEXT_COMMAND && (*p == '\t' || *p == '\n'))
				break;
			/* A terminal obeys C1 controls (U+0080..U+009F, UTF-8 C2 80..C2 9F) too. */
			if (*p < 0x20 || *p == 0x7f || (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
				return false;
			break;
		}
	}
	return true;
}

/* A name for messages: the key itself when it is short and printable. */
static const char *key_str(const char *k)
{
	size_t n = strlen(k);

	if (n == 0 || n > 64 || !text_ok(k, TEXT_URL))
		return "(unprintable name)";
	return k;
}

#define DOT(where) (where)[0] ? "." : ""

static int check_members(struct json_object *o, const char *where, const char *const allowed[],
                         struct catalog_error *err)
{
	json_object_object_foreach (o, k, v) {
		bool known = false;

		(void)v;
		for (size_t i = 0; allowed[i]; i++)
			if (streq(k, allowed[i]))
				known = true;
		if (!known)
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                         "%s%sunknown member \"%s\"", where,
			                         where[0] ? ": " : "", key_str(k));
	}
	return 0;
}

static int field_error(struct catalog_error *err, int r, const char *where, const char *key,
                       const char *what)
{
	if (r == -ENOENT)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s%s%s: missing", where,
		                         DOT(where), key);
	if (r == SLATE_ERR_JSON_TYPE)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s%s%s: not %s", where,
		                         DOT(where), key, what);
	return catalog_error_set(err, r == -ERANGE ? SLATE_ERR_INVALID_FORMAT : r, "%s%s%s: %s",
	                         where, DOT(where), key,
	                         r == -ERANGE ? "out of range" : slate_strerror(r));
}

static int get_text(struct json_object *o, const char *where, const char *key, bool required,
                    size_t max, enum text_kind kind, const char **ret, struct catalog_error *err)
{
	const char *s = NULL;
	int r;

	r = json_get_string(o, key, &s);
	if (r == -ENOENT && !required)
		return 0;
	if (r < 0)
		return field_error(err, r, where, key, "a string");
	if (strlen(s) > max)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "%s%s%s: longer than %zu bytes", where, DOT(where), key,
		                         max);
	if (!text_ok(s, kind))
		return catalog_error_set(
		        err, SLATE_ERR_INVALID_FORMAT, "%s%s%s: %s", where, DOT(where), key,
		        kind == TEXT_URL       ? "empty, or not printable ASCII without spaces"
		        : kind == TEXT_CMDLINE ? "contains characters other than printable ASCII"
		                               : "contains control characters");
	*ret = s;
	return 0;
}

static int dup_text(struct json_object *o, const char *where, const char *key, size_t max,
                    enum text_kind kind, char **ret, struct catalog_error *err)
{
	const char *s = NULL;
	char *d;
	int r;

	r = get_text(o, where, key, true, max, kind, &s, err);
	if (r < 0)
		return r;
	d = strdup(s);
	if (!d)
		return -ENOMEM;
	*ret = d;
	return 0;
}

static int get_int(struct json_object *o, const char *where, const char *key, int64_t min,
                   int64_t *ret, struct catalog_error *err)
{
	int64_t v = 0;
	int r;

	r = json_get_int64(o, key, &v);
	if (r < 0)
		return field_error(err, r, where, key, "an integer");
	if (v < min)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "%s%s%s: %" PRId64 " is below the minimum %" PRId64, where,
		                         DOT(where), key, v, min);
	*ret = v;
	return 0;
}

static int get_time(struct json_object *o, const char *where, const char *key, int64_t *ret,
                    struct catalog_error *err)
{
	const char *s = NULL;
	int r;

	r = get_text(o, where, key, true, 64, TEXT_URL, &s, err);
	if (r < 0)
		return r;
	if (catalog_time_parse(s, ret) < 0)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "%s%s%s: \"%s\" is not an RFC 3339 UTC time of the form "
		                         "YYYY-MM-DDTHH:MM:SSZ",
		                         where, DOT(where), key, s);
	return 0;
}

static int get_object(struct json_object *o, const char *where, const char *key,
                      struct json_object **ret, struct catalog_error *err)
{
	int r = json_get_object(o, key, ret);
	return r < 0 ? field_error(err, r, where, key, "an object") : 0;
}

static int get_sha256(struct json_object *o, const char *where, struct catalog_artifact *a,
                      struct catalog_error *err)
{
	const char *s = NULL;
	int r;

	r = get_text(o, where, "sha256", true, 64, TEXT_URL, &s, err);
	if (r < 0)
		return r;
	if (strlen(s) != 64 || hex_decode(s, 32, a->sha256, HEX_LOWER) < 0)
		goto bad;
	memcpy(a->sha256_hex, s, 65);
	return 0;
bad:
	return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
	                         "%s.sha256: not 64 lowercase hexadecimal digits", where);
}

/* url, sha256 and size; the caller checks the object's members. */
static int parse_artifact(struct json_object *o, const char *where, struct catalog_artifact *a,
                          struct catalog_error *err)
{
	int64_t size = 0;
	int r;

	r = dup_text(o, where, "url", CATALOG_URL_MAX, TEXT_URL, &a->url, err);
	if (r < 0)
		return r;
	r = get_sha256(o, where, a, err);
	if (r < 0)
		return r;
	r = get_int(o, where, "size", 1, &size, err);
	if (r < 0)
		return r;
	a->size = (uint64_t)size;
	return 0;
}

static int parse_file_artifact(struct json_object *parent, const char *where, const char *key,
                               struct catalog_artifact *a, struct catalog_error *err)
{
	static const char *const members[] = {"url", "sha256", "size", NULL};
	struct json_object *o = NULL;
	char w[128];
	int r;

	r = get_object(parent, where, key, &o, err);
	if (r < 0)
		return r;
	(void)snprintf(w, sizeof(w), "%s.%s", where, key);
	r = check_members(o, w, members, err);
	if (r < 0)
		return r;
	return parse_artifact(o, w, a, err);
}

static int parse_enum(struct json_object *o, const char *where, const char *key,
                      const char *const names[], int *ret, struct catalog_error *err)
{
	const char *s = NULL;
	int r;

	r = get_text(o, where, key, true, 64, TEXT_URL, &s, err);
	if (r < 0)
		return r;
	for (int i = 0; names[i]; i++)
		if (streq(s, names[i])) {
			*ret = i;
			return 0;
		}
	return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s.%s: unknown value \"%s\"",
	                         where, key, s);
}

static int parse_disk(struct json_object *parent, const char *where, struct catalog_image *img,
                      struct catalog_error *err)
{
	static const char *const members[] = {"url",         "sha256", "size", "uncompressedSize",
	                                      "compression", "format", NULL};
	/* In the order of the enums. */
	static const char *const compressions[] = {"none", "gzip", "zstd", "xz", NULL};
	static const char *const formats[] = {"raw", "qcow2", NULL};
	struct json_object *o = NULL;
	int64_t usize = 0;
	int v = 0, r;
	char w[128];

	r = get_object(parent, where, "disk", &o, err);
	if (r < 0)
		return r;
	(void)snprintf(w, sizeof(w), "%s.disk", where);
	r = check_members(o, w, members, err);
	if (r < 0)
		return r;
	r = parse_artifact(o, w, &img->disk, err);
	if (r < 0)
		return r;
	r = get_int(o, w, "uncompressedSize", 1, &usize, err);
	if (r < 0)
		return r;
	img->uncompressed_size = (uint64_t)usize;
	r = parse_enum(o, w, "compression", compressions, &v, err);
	if (r < 0)
		return r;
	img->compression = (enum catalog_compression)v;
	r = parse_enum(o, w, "format", formats, &v, err);
	if (r < 0)
		return r;
	img->format = (enum catalog_disk_format)v;
	if (img->compression == CATALOG_COMPRESSION_NONE &&
	    img->uncompressed_size != img->disk.size)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "%s: uncompressedSize must equal size when compression is "
		                         "\"none\"",
		                         w);
	return 0;
}

static int parse_boot(struct json_object *parent, const char *where, struct catalog_image *img,
                      struct catalog_error *err)
{
	static const char *const firmware_members[] = {"type", NULL};
	static const char *const kernel_members[] = {"type", "kernel", "initrd", "cmdline", NULL};
	static const char *const types[] = {"firmware", "kernel", NULL};
	struct json_object *o = NULL;
	int type = 0, r;
	char w[128];

	r = get_object(parent, where, "boot", &o, err);
	if (r < 0)
		return r;
	(void)snprintf(w, sizeof(w), "%s.boot", where);
	r = parse_enum(o, w, "type", types, &type, err);
	if (r < 0)
		return r;
	img->boot = (enum catalog_boot_type)type;
	r = check_members(
	        o, w, img->boot == CATALOG_BOOT_KERNEL ? kernel_members : firmware_members, err);
	if (r < 0 || img->boot == CATALOG_BOOT_FIRMWARE)
		return r;
	r = parse_file_artifact(o, w, "kernel", &img->kernel, err);
	if (r < 0)
		return r;
	r = parse_file_artifact(o, w, "initrd", &img->initrd, err);
	if (r < 0)
		return r;
	return dup_text(o, w, "cmdline", CATALOG_TEXT_MAX, TEXT_CMDLINE, &img->cmdline, err);
}

/* RFC 4122 text form, lowercase: 8-4-4-4-12 hex digits, version 1-8, the RFC 4122 variant. */
static bool uuid_ok(const char *s)
{
	if (strlen(s) != 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (hex_digit((unsigned char)s[i], HEX_LOWER) < 0) {
			return false;
		}
	}
	return s[14] >= '1' && s[14] <= '8' && strchr("89ab", s[19]);
}

static int parse_steps(struct json_object *parent, const char *where, struct catalog_image *img,
                       struct catalog_error *err)
{
	static const char *const members[] = {"uuid", "seq", "description", "command", NULL};
	struct json_object *a = NULL;
	size_t n;
	int r;

	r = json_get_array(parent, "postinstall", &a);
	if (r == -ENOENT)
		return 0; /* optional: no steps */
	if (r < 0)
		return field_error(err, r, where, "postinstall", "an array");
	n = json_object_array_length(a);
	if (n > CATALOG_MAX_STEPS)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "%s.postinstall: more than %u steps", where,
		                         CATALOG_MAX_STEPS);
	if (n == 0)
		return 0;
	img->steps = calloc(n, sizeof(*img->steps));
	if (!img->steps)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *o = json_object_array_get_idx(a, i);
		struct catalog_step *st = &img->steps[i];
		const char *uuid = NULL;
		char w[160];

		(void)snprintf(w, sizeof(w), "%s.postinstall[%zu]", where, i);
		if (!json_object_is_type(o, json_type_object))
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s: not an object",
			                         w);
		img->n_steps = i + 1;
		r = check_members(o, w, members, err);
		if (r < 0)
			return r;
		r = get_text(o, w, "uuid", true, 36, TEXT_URL, &uuid, err);
		if (r < 0)
			return r;
		if (!uuid_ok(uuid))
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                         "%s.uuid: \"%s\" is not a lowercase RFC 4122 UUID",
			                         w, uuid);
		memcpy(st->uuid, uuid, sizeof(st->uuid));
		for (size_t j = 0; j < i; j++)
			if (streq(img->steps[j].uuid, st->uuid))
				return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
				                         "%s.uuid: %s is used by step %zu too", w,
				                         st->uuid, j);
		r = get_int(o, w, "seq", 0, &st->seq, err);
		if (r < 0)
			return r;
		if (i > 0 && st->seq <= img->steps[i - 1].seq)
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                         "%s.seq: %" PRId64
			                         " is not above the previous step's %" PRId64,
			                         w, st->seq, img->steps[i - 1].seq);
		r = dup_text(o, w, "description", CATALOG_TEXT_MAX, TEXT_PLAIN, &st->description,
		             err);
		if (r < 0)
			return r;
		r = dup_text(o, w, "command", CATALOG_COMMAND_MAX, TEXT_COMMAND, &st->command, err);
		if (r < 0)
			return r;
		if (!st->command[0])
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s.command: empty",
			                         w);
	}
	return 0;
}

static int parse_image(struct json_object *o, size_t idx, struct catalog *c,
                       struct catalog_image *img, struct catalog_error *err)
{
	static const char *const members[] = {"id",   "version",     "description", "disk",
	                                      "boot", "postinstall", NULL};
	char w[64];
	int r;

	(void)snprintf(w, sizeof(w), "images[%zu]", idx);
	if (!json_object_is_type(o, json_type_object))
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s: not an object", w);
	r = check_members(o, w, members, err);
	if (r < 0)
		return r;
	r = dup_text(o, w, "id", CATALOG_ID_MAX, TEXT_URL, &img->id, err);
	if (r < 0)
		return r;
	if (catalog_id_check(img->id) < 0)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "%s.id: \"%s\" does not match [a-z0-9][a-z0-9._-]{0,63} "
		                         "(without \"..\")",
		                         w, img->id);
	for (size_t j = 0; j < idx; j++)
		if (streq(c->images[j].id, img->id))
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                         "%s.id: \"%s\" is also images[%zu]", w, img->id,
			                         j);
	r = get_int(o, w, "version", 1, &img->version, err);
	if (r < 0)
		return r;
	r = dup_text(o, w, "description", CATALOG_TEXT_MAX, TEXT_PLAIN, &img->description, err);
	if (r < 0)
		return r;
	r = parse_disk(o, w, img, err);
	if (r < 0)
		return r;
	r = parse_boot(o, w, img, err);
	if (r < 0)
		return r;
	return parse_steps(o, w, img, err);
}

static int parse_keys(struct json_object *top, struct catalog *c, struct catalog_error *err)
{
	static const char *const members[] = {"type", "key", "comment", NULL};
	struct json_object *a = NULL;
	size_t n;
	int r;

	r = json_get_array(top, "keys", &a);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return field_error(err, r, "", "keys", "an array");
	n = json_object_array_length(a);
	if (n > CATALOG_MAX_KEYS)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT, "keys: more than %u keys",
		                         CATALOG_MAX_KEYS);
	if (n == 0)
		return 0;
	c->keys = calloc(n, sizeof(*c->keys));
	if (!c->keys)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *o = json_object_array_get_idx(a, i);
		const char *type = NULL, *b64 = NULL, *comment = "";
		uint8_t raw[SIGN_PUBLIC_KEY_BYTES];
		char w[32];

		(void)snprintf(w, sizeof(w), "keys[%zu]", i);
		if (!json_object_is_type(o, json_type_object))
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s: not an object",
			                         w);
		r = check_members(o, w, members, err);
		if (r < 0)
			return r;
		r = get_text(o, w, "type", true, 16, TEXT_URL, &type, err);
		if (r < 0)
			return r;
		if (!streq(type, "ed25519"))
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                         "%s.type: unknown key type \"%s\"", w, type);
		r = get_text(o, w, "key", true, 64, TEXT_URL, &b64, err);
		if (r < 0)
			return r;
		r = get_text(o, w, "comment", false, SIGN_COMMENT_MAX, TEXT_CMDLINE, &comment, err);
		if (r < 0)
			return r;
		if (sign_base64_decode(b64, strlen(b64), raw, sizeof(raw)) < 0)
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                         "%s.key: not 32 bytes of base64", w);
		r = sign_public_key_from_raw(raw, comment, &c->keys[i]);
		if (r < 0)
			return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                         "%s.key: not a valid Ed25519 public key", w);
		for (size_t j = 0; j < i; j++)
			if (streq(c->keys[j].id, c->keys[i].id))
				return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
				                         "%s: key %s is also keys[%zu]", w,
				                         c->keys[i].id, j);
		c->n_keys = i + 1;
	}
	return 0;
}

static int parse_top(struct json_object *top, struct catalog *c, struct catalog_error *err)
{
	static const char *const members[] = {"format",  "formatVersion", "channel",
	                                      "version", "signedAt",      "expires",
	                                      "images",  "keys",          NULL};
	struct json_object *images = NULL;
	const char *format = NULL;
	int64_t fv = 0;
	size_t n;
	int r;

	/* The format marker first: "not a catalog" says more than any member's complaint. */
	r = get_text(top, "", "format", true, 64, TEXT_URL, &format, err);
	if (r < 0)
		return r;
	if (!streq(format, CATALOG_FORMAT))
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "format: \"%s\" is not \"" CATALOG_FORMAT "\"", format);
	r = get_int(top, "", "formatVersion", 0, &fv, err);
	if (r < 0)
		return r;
	/* Before the member check, so a newer catalog says why we cannot read it. */
	if (fv != CATALOG_FORMAT_VERSION)
		return catalog_error_set(err, SLATE_ERR_PROTOCOL_VERSION,
		                         "formatVersion %" PRId64
		                         " is not supported (this is format "
		                         "version %d)",
		                         fv, CATALOG_FORMAT_VERSION);
	r = check_members(top, "", members, err);
	if (r < 0)
		return r;
	r = dup_text(top, "", "channel", SIGN_CHANNEL_MAX, TEXT_URL, &c->channel, err);
	if (r < 0)
		return r;
	if (sign_channel_check(c->channel) < 0)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "channel: \"%s\" does not match [a-z0-9][a-z0-9._-]{0,63} "
		                         "(without \"..\")",
		                         c->channel);
	r = get_int(top, "", "version", 1, &c->version, err);
	if (r < 0)
		return r;
	r = get_time(top, "", "signedAt", &c->signed_at, err);
	if (r < 0)
		return r;
	r = get_time(top, "", "expires", &c->expires, err);
	if (r < 0)
		return r;
	if (c->expires <= c->signed_at)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "expires: not after signedAt");

	r = json_get_array(top, "images", &images);
	if (r < 0)
		return field_error(err, r, "", "images", "an array");
	n = json_object_array_length(images);
	if (n > CATALOG_MAX_IMAGES)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "images: more than %u images", CATALOG_MAX_IMAGES);
	if (n > 0) {
		c->images = calloc(n, sizeof(*c->images));
		if (!c->images)
			return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		/* Counted first, so that catalog_free() frees what a failure leaves half done. */
		c->n_images = i + 1;
		r = parse_image(json_object_array_get_idx(images, i), i, c, &c->images[i], err);
		if (r < 0)
			return r;
	}
	return parse_keys(top, c, err);
}

/*
 * json-c keeps the last of duplicate members silently, so {"version":1,"version":9} would read
 * differently here than in a tool that keeps the first. Every ':' outside a string in the text
 * is one member; when the tree holds fewer, some member was given twice.
 */
static size_t count_members_text(const uint8_t *p, size_t len)
{
	bool in_string = false;
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (in_string) {
			if (p[i] == '\\')
				i++;
			else if (p[i] == '"')
				in_string = false;
		} else if (p[i] == '"') {
			in_string = true;
		} else if (p[i] == ':') {
			n++;
		}
	}
	return n;
}

static size_t count_members_tree(struct json_object *o)
{
	size_t n = 0;

	if (json_object_is_type(o, json_type_array)) {
		for (size_t i = 0, len = json_object_array_length(o); i < len; i++)
			n += count_members_tree(json_object_array_get_idx(o, i));
	} else if (json_object_is_type(o, json_type_object)) {
		json_object_object_foreach (o, k, v) {
			(void)k;
			n += 1 + count_members_tree(v);
		}
	}
	return n;
}

void catalog_free(struct catalog *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_images; i++) {
		struct catalog_image *img = &c->images[i];

		free(img->id);
		free(img->description);
		free(img->disk.url);
		free(img->kernel.url);
		free(img->initrd.url);
		free(img->cmdline);
		for (size_t j = 0; j < img->n_steps; j++) {
			free(img->steps[j].description);
			free(img->steps[j].command);
		}
		free(img->steps);
	}
	free(c->images);
	free(c->keys);
	free(c->channel);
	free(c->bytes);
	free(c->sig);
	free(c);
}

int catalog_parse(const uint8_t *bytes, size_t len, struct catalog **ret, struct catalog_error *err)
{
	_cleanup_catalog_ struct catalog *c = NULL;
	_cleanup_json_ struct json_object *top = NULL;
	int r;

	if (!bytes && len > 0)
		return -EINVAL;
	if (len > CATALOG_MAX_SIZE)
		return catalog_error_set(err, SLATE_ERR_TOO_LARGE,
		                         "catalog is %zu bytes, more than the %u allowed", len,
		                         CATALOG_MAX_SIZE);
	r = json_parse_object((const char *)bytes, len, CATALOG_MAX_SIZE, &top);
	if (r == SLATE_ERR_JSON_TYPE)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "malformed catalog: not a JSON object");
	if (r < 0)
		return catalog_error_set(err, r == -ENOMEM ? r : SLATE_ERR_INVALID_FORMAT,
		                         "malformed catalog: not strict JSON (%s)",
		                         slate_strerror(r));
	if (count_members_text(bytes, len) != count_members_tree(top))
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         "malformed catalog: an object has a member twice");

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	r = parse_top(top, c, err);
	if (r < 0) {
		if (r == -ENOMEM)
			(void)catalog_error_set(err, r, "out of memory");
		else if (err && r != SLATE_ERR_PROTOCOL_VERSION) {
			char why[sizeof(err->message)];

			memcpy(why, err->message, sizeof(why));
			(void)catalog_error_set(err, r, "malformed catalog: %s", why);
		}
		return r;
	}
	c->bytes = malloc(len ? len : 1);
	if (!c->bytes)
		return -ENOMEM;
	memcpy(c->bytes, bytes, len);
	c->len = len;
	crypto_hash_sha256(c->sha256, bytes, len);
	*ret = TAKE_PTR(c);
	return 0;
}

int catalog_peek_channel(const uint8_t *bytes, size_t len, char **ret)
{
	_cleanup_json_ struct json_object *top = NULL;
	const char *s = NULL;
	char *d;
	int r;

	r = json_parse_object((const char *)bytes, len, CATALOG_MAX_SIZE, &top);
	if (r < 0)
		return r;
	r = json_get_string(top, "channel", &s);
	if (r < 0)
		return r;
	if (sign_channel_check(s) < 0)
		return SLATE_ERR_INVALID_FORMAT;
	d = strdup(s);
	if (!d)
		return -ENOMEM;
	*ret = d;
	return 0;
}

const struct catalog_image *catalog_find_image(const struct catalog *c, const char *id)
{
	for (size_t i = 0; i < c->n_images; i++)
		if (streq(c->images[i].id, id))
			return &c->images[i];
	return NULL;
}

/* The rollback rules, shared by catalog_verify() and catalog_state_accept(). */
static int check_rollback(const struct catalog_state *last, const struct catalog *c,
                          struct catalog_error *err)
{
	if (!last || !streq(last->channel, c->channel))
		return 0;
	if (c->version < last->version)
		return catalog_error_set(err, SLATE_ERR_ROLLBACK,
		                         "rollback: catalog version %" PRId64
		                         " is older than the last accepted version %" PRId64,
		                         c->version, last->version);
	if (c->version == last->version && sodium_memcmp(c->sha256, last->sha256, 32) != 0)
		return catalog_error_set(err, SLATE_ERR_VERSION_REUSED,
		                         "catalog version %" PRId64
		                         " was already accepted with different contents",
		                         c->version);
	return 0;
}

int catalog_verify(const struct catalog_trust *trust, const char *channel, const uint8_t *bytes,
                   size_t len, const uint8_t *sig, size_t sig_len, const struct catalog_state *last,
                   int64_t now, struct catalog **ret, struct catalog_error *err)
{
	_cleanup_catalog_ struct catalog *c = NULL;
	const struct sign_public_key *k;
	uint8_t raw[SIGN_SIGNATURE_BYTES];
	char key_id[SIGN_KEY_ID_LEN + 1];
	char t1[32], t2[32];
	int r;

	if (!trust || (!bytes && len > 0))
		return catalog_error_set(err, -EINVAL, "invalid arguments");
	if (sign_channel_check(channel) < 0)
		return catalog_error_set(err, -EINVAL, "invalid channel name");
	/* Endless data: before the signature check, which would otherwise hash all of it. */
	if (len > CATALOG_MAX_SIZE)
		return catalog_error_set(err, SLATE_ERR_TOO_LARGE,
		                         "catalog is %zu bytes, more than the %u allowed", len,
		                         CATALOG_MAX_SIZE);
	if (!sig || sig_len == 0)
		return catalog_error_set(err, SLATE_ERR_SIGNATURE_MISSING,
		                         "catalog is not signed (no signature)");
	r = sign_signature_parse(sig, sig_len, key_id, raw, err);
	if (r < 0)
		return r;
	k = catalog_trust_find(trust, key_id);
	if (!k)
		return catalog_error_set(err, SLATE_ERR_KEY_NOT_TRUSTED,
		                         "signed by key %s, which is not trusted", key_id);
	r = sign_verify_detached(k, channel, bytes, len, raw);
	if (r == SLATE_ERR_SIGNATURE_INVALID)
		return catalog_error_set(
		        err, r,
		        "bad signature by key %s for channel \"%s\" (the catalog "
		        "changed after signing, or was signed for another channel)",
		        key_id, channel);
	if (r < 0)
		return catalog_error_set(err, r, "cannot verify: %s", slate_strerror(r));

	r = catalog_parse(bytes, len, &c, err);
	if (r < 0)
		return r;
	if (!streq(c->channel, channel))
		return catalog_error_set(err, SLATE_ERR_WRONG_CHANNEL,
		                         "catalog is for channel \"%s\", not \"%s\"", c->channel,
		                         channel);
	if (now >= c->expires)
		return catalog_error_set(err, SLATE_ERR_EXPIRED,
		                         "catalog expired at %s (now is %s)",
		                         time_str(c->expires, t1), time_str(now, t2));
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

/* ---- trust ------------------------------------------------------------------------------ */

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
                        struct catalog_error *err)
{
	struct sign_public_key k;
	int r;

	r = sign_public_key_load_at(dirfd, name, &k, err);
	if (r < 0)
		return r;
	r = catalog_trust_add(t, &k);
	if (r < 0)
		return catalog_error_set(err, r, "%s: key ID %s is taken by another trusted key",
		                         shown, k.id);
	return 0;
}

int catalog_trust_add_path(struct catalog_trust *t, int dirfd, const char *path,
                           struct catalog_error *err)
{
	_cleanup_close_ int dfd = -1;
	struct dirent **names = NULL;
	size_t before = t->n;
	struct stat st;
	int n, r = 0;

	if (!path || !*path)
		return -EINVAL;
	if (fstatat(dirfd, path, &st, 0) < 0)
		return catalog_error_set(err, -errno, "%s: %m", path);
	if (!S_ISDIR(st.st_mode))
		return add_key_file(t, dirfd, path, path, err);

	dfd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return catalog_error_set(err, -errno, "%s: %m", path);
	n = scandirat(dfd, ".", &names, only_pub, alphasort);
	if (n < 0)
		return catalog_error_set(err, -errno, "%s: %m", path);
	for (int i = 0; i < n; i++) {
		if (r == 0) {
			_cleanup_free_ char *shown = fs_path_join(path, names[i]->d_name);
			struct catalog_error e = {};

			r = add_key_file(t, dfd, names[i]->d_name, shown ? shown : path, &e);
			if (r < 0)
				(void)catalog_error_set(err, r, "%s/%s", path, e.message);
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

int catalog_trust_add_state_keys(struct catalog_trust *t, int state_dirfd,
                                 struct catalog_error *err)
{
	_cleanup_close_ int dfd = -1;
	struct stat st;
	int r;

	r = open_state_dir(state_dirfd, false, &dfd);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR ": %s", slate_strerror(r));
	if (fstatat(dfd, KEYS_DIR, &st, 0) < 0)
		return errno == ENOENT
		               ? 0
		               : catalog_error_set(err, -errno,
		                                   CATALOG_STATE_SUBDIR "/" KEYS_DIR ": %m");
	return catalog_trust_add_path(t, dfd, KEYS_DIR, err);
}

/* ---- rollback state --------------------------------------------------------------------- */

int catalog_state_lock(int state_dirfd, int *ret_fd)
{
	_cleanup_close_ int dfd = -1;
	int r;

	r = open_state_dir(state_dirfd, true, &dfd);
	if (r < 0)
		return r;
	return fs_lock_at(dfd, ".lock", ret_fd);
}

static int state_load_at(int dfd, struct catalog_state *ret, struct catalog_error *err)
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
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR "/" STATE_FILE ": %s",
		                         slate_strerror(r));
	r = json_parse_object((const char *)buf_ptr(b), buf_len(b), STATE_FILE_MAX, &o);
	if (r < 0)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         CATALOG_STATE_SUBDIR "/" STATE_FILE ": %s",
		                         slate_strerror(r));
	if ((r = check_members(o, STATE_FILE, members, err)) < 0 ||
	    (r = get_text(o, STATE_FILE, "format", true, 64, TEXT_URL, &format, err)) < 0 ||
	    (r = get_int(o, STATE_FILE, "formatVersion", 0, &fv, err)) < 0 ||
	    (r = get_text(o, STATE_FILE, "channel", true, SIGN_CHANNEL_MAX, TEXT_URL, &channel,
	                  err)) < 0 ||
	    (r = get_int(o, STATE_FILE, "version", 1, &s.version, err)) < 0 ||
	    (r = get_sha256(o, STATE_FILE, &a, err)) < 0 ||
	    (r = get_text(o, STATE_FILE, "keyId", true, SIGN_KEY_ID_LEN, TEXT_URL, &key_id, err)) <
	            0 ||
	    (r = get_time(o, STATE_FILE, "acceptedAt", &s.accepted_at, err)) < 0)
		return r;
	if (!streq(format, STATE_FORMAT) || fv != STATE_FORMAT_VERSION ||
	    sign_channel_check(channel) < 0)
		return catalog_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                         CATALOG_STATE_SUBDIR "/" STATE_FILE
		                                              ": not a version %d catalog state",
		                         STATE_FORMAT_VERSION);
	memcpy(s.channel, channel, strlen(channel) + 1);
	memcpy(s.key_id, key_id, strlen(key_id) + 1);
	memcpy(s.sha256, a.sha256, sizeof(s.sha256));
	*ret = s;
	return 0;
}

int catalog_state_load(int state_dirfd, struct catalog_state *ret, struct catalog_error *err)
{
	_cleanup_close_ int dfd = -1;
	int r;

	r = open_state_dir(state_dirfd, false, &dfd);
	if (r == -ENOENT)
		return -ENOENT;
	if (r < 0)
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR ": %s", slate_strerror(r));
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
                         struct catalog_error *err)
{
	_cleanup_close_ int dfd = -1, kfd = -1;
	_cleanup_free_ char *state = NULL;
	struct catalog_state last;
	int r;

	if (!c || !c->sig || !c->key_id[0] || !c->bytes)
		return catalog_error_set(err, -EINVAL, "only a verified catalog can be accepted");
	r = open_state_dir(state_dirfd, true, &dfd);
	if (r < 0)
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR ": %s", slate_strerror(r));
	r = state_load_at(dfd, &last, err);
	if (r < 0 && r != -ENOENT)
		return r;
	r = check_rollback(r == 0 ? &last : NULL, c, err);
	if (r < 0)
		return r;
	r = state_json(c, now, &state);
	if (r < 0)
		return catalog_error_set(err, r, "cannot record the state: %s", slate_strerror(r));

	if (mkdirat(dfd, KEYS_DIR, 0755) < 0 && errno != EEXIST)
		return catalog_error_set(err, -errno, CATALOG_STATE_SUBDIR "/" KEYS_DIR ": %m");
	kfd = openat(dfd, KEYS_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (kfd < 0)
		return catalog_error_set(err, -errno, CATALOG_STATE_SUBDIR "/" KEYS_DIR ": %m");
	/* Keys the new catalog drops stop being trusted before it is committed... */
	r = keys_remove_unlisted(kfd, c);
	if (r < 0)
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR "/" KEYS_DIR ": %s",
		                         slate_strerror(r));

	/* state.json last: it is what a later verification compares against. */
	if ((r = fs_write_atomic_at(dfd, CURRENT_SIG_FILE, c->sig, c->sig_len, 0644)) < 0 ||
	    (r = fs_write_atomic_at(dfd, CURRENT_FILE, c->bytes, c->len, 0644)) < 0 ||
	    (r = fs_write_atomic_at(dfd, STATE_FILE, state, strlen(state), 0644)) < 0)
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR ": cannot write: %s",
		                         slate_strerror(r));

	/* ...and keys it introduces are trusted only after it is. */
	for (size_t i = 0; i < c->n_keys; i++) {
		_cleanup_free_ char *text = NULL;
		char name[SIGN_KEY_ID_LEN + 5];

		r = sign_public_key_format(&c->keys[i], &text);
		if (r < 0)
			return catalog_error_set(err, r, "%s", slate_strerror(r));
		(void)snprintf(name, sizeof(name), "%s.pub", c->keys[i].id);
		r = fs_write_atomic_at(kfd, name, text, strlen(text), 0644);
		if (r < 0)
			return catalog_error_set(err, r,
			                         CATALOG_STATE_SUBDIR "/" KEYS_DIR "/%s: %s", name,
			                         slate_strerror(r));
	}
	return 0;
}

int catalog_state_load_current(int state_dirfd, struct catalog **ret, struct catalog_error *err)
{
	_cleanup_close_ int dfd = -1;
	_cleanup_buf_ struct buf *b = NULL, *sb = NULL;
	_cleanup_catalog_ struct catalog *c = NULL;
	struct catalog_state s;
	uint8_t h[32];
	int r;

	r = open_state_dir(state_dirfd, false, &dfd);
	if (r < 0)
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR ": %s", slate_strerror(r));
	r = state_load_at(dfd, &s, err);
	if (r == -ENOENT)
		return catalog_error_set(err, r, "no catalog was accepted yet");
	if (r < 0)
		return r;
	r = fs_read_file_at(dfd, CURRENT_FILE, CATALOG_MAX_SIZE, &b);
	if (r < 0)
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR "/" CURRENT_FILE ": %s",
		                         slate_strerror(r));
	crypto_hash_sha256(h, buf_ptr(b), buf_len(b));
	if (memcmp(h, s.sha256, sizeof(h)) != 0)
		return catalog_error_set(
		        err, SLATE_ERR_DIGEST_MISMATCH,
		        CATALOG_STATE_SUBDIR
		        "/" CURRENT_FILE " is not the catalog " STATE_FILE
		        " records (an interrupted update?); update the catalog again");
	r = fs_read_file_at(dfd, CURRENT_SIG_FILE, SIGN_SIG_FILE_MAX, &sb);
	if (r < 0)
		return catalog_error_set(err, r, CATALOG_STATE_SUBDIR "/" CURRENT_SIG_FILE ": %s",
		                         slate_strerror(r));
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

/* ---- artifacts -------------------------------------------------------------------------- */

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
                                  struct catalog_error *err)
{
	if (c->failed)
		return catalog_error_set(err, SLATE_ERR_SIZE_MISMATCH,
		                         "more than the declared %" PRIu64 " bytes", c->size);
	/* Refused before a byte of the excess is hashed or handed on. */
	if (n > c->size - c->done) {
		c->failed = true;
		return catalog_error_set(err, SLATE_ERR_SIZE_MISMATCH,
		                         "more than the declared %" PRIu64 " bytes", c->size);
	}
	if (n > 0 && EVP_DigestUpdate(c->md, p, n) != 1)
		return catalog_error_set(err, SLATE_ERR_CRYPTO, "SHA-256 failed");
	c->done += n;
	return 0;
}

int catalog_artifact_check_final(struct catalog_artifact_check *c, struct catalog_error *err)
{
	uint8_t h[EVP_MAX_MD_SIZE];
	unsigned hlen = 0;
	char hex[65];

	if (c->failed)
		return catalog_error_set(err, SLATE_ERR_SIZE_MISMATCH,
		                         "more than the declared %" PRIu64 " bytes", c->size);
	if (c->done != c->size)
		return catalog_error_set(err, SLATE_ERR_SIZE_MISMATCH,
		                         "%" PRIu64 " bytes, fewer than the declared %" PRIu64,
		                         c->done, c->size);
	if (EVP_DigestFinal_ex(c->md, h, &hlen) != 1 || hlen != 32)
		return catalog_error_set(err, SLATE_ERR_CRYPTO, "SHA-256 failed");
	c->failed = true; /* the context is spent */
	if (memcmp(h, c->sha256, 32) != 0) {
		(void)sodium_bin2hex(hex, sizeof(hex), h, 32);
		return catalog_error_set(err, SLATE_ERR_DIGEST_MISMATCH,
		                         "SHA-256 %s differs from the declared %s", hex,
		                         c->sha256_hex);
	}
	return 0;
}

int catalog_artifact_check_fd(const struct catalog_artifact *a, int fd, struct catalog_error *err)
{
	_cleanup_(catalog_artifact_check_freep) struct catalog_artifact_check *c = NULL;
	_cleanup_free_ uint8_t *chunk = NULL;
	const size_t chunk_size = 256 * 1024;
	struct stat st;
	off_t pos;
	int r;

	if (fstat(fd, &st) < 0)
		return catalog_error_set(err, -errno, "%m");
	if (S_ISREG(st.st_mode)) {
		pos = lseek(fd, 0, SEEK_CUR);
		if (pos >= 0 && st.st_size > pos && (uint64_t)(st.st_size - pos) > a->size)
			return catalog_error_set(err, SLATE_ERR_SIZE_MISMATCH,
			                         "%" PRIu64
			                         " bytes, more than the declared %" PRIu64,
			                         (uint64_t)(st.st_size - pos), a->size);
	}
	r = catalog_artifact_check_new(a, &c);
	if (r < 0)
		return catalog_error_set(err, r, "%s", slate_strerror(r));
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
			return catalog_error_set(err, -errno, "%m");
		if (n == 0)
			break;
		r = catalog_artifact_check_update(c, chunk, (size_t)n, err);
		if (r < 0)
			return r;
	}
	return catalog_artifact_check_final(c, err);
}

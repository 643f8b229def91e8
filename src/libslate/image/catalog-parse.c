/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Catalogs read: the strict parser of the format (doc/catalog.md, "The format"), its times
 * and names, and the strict field readers the rollback state's reader shares. */

#include <inttypes.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "image/catalog-internal.h"
#include "image/catalog.h"
#include "util/error.h"
#include "util/hex.h"
#include "util/json.h"

/* The largest time we write or read: 9999-12-31T23:59:59Z. */
#define TIME_MAX INT64_C(253402300799)

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
const char *catalog_time_str(int64_t t, char buf[32])
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

int catalog_check_members(struct json_object *o, const char *where, const char *const allowed[],
                          struct slate_error *err)
{
	json_object_object_foreach (o, k, v) {
		bool known = false;

		(void)v;
		for (size_t i = 0; allowed[i]; i++)
			if (streq(k, allowed[i]))
				known = true;
		if (!known)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "%s%sunknown member \"%s\"", where,
			                       where[0] ? ": " : "", key_str(k));
	}
	return 0;
}

static int field_error(struct slate_error *err, int r, const char *where, const char *key,
                       const char *what)
{
	if (r == -ENOENT)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s%s%s: missing", where,
		                       DOT(where), key);
	if (r == SLATE_ERR_JSON_TYPE)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s%s%s: not %s", where,
		                       DOT(where), key, what);
	return slate_error_set(err, r == -ERANGE ? SLATE_ERR_INVALID_FORMAT : r, "%s%s%s: %s",
	                       where, DOT(where), key,
	                       r == -ERANGE ? "out of range" : slate_strerror(r));
}

int catalog_get_text(struct json_object *o, const char *where, const char *key, bool required,
                     size_t max, enum text_kind kind, const char **ret, struct slate_error *err)
{
	const char *s = NULL;
	int r;

	r = json_get_string(o, key, &s);
	if (r == -ENOENT && !required)
		return 0;
	if (r < 0)
		return field_error(err, r, where, key, "a string");
	if (strlen(s) > max)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "%s%s%s: longer than %zu bytes", where, DOT(where), key,
		                       max);
	if (!text_ok(s, kind))
		return slate_error_set(
		        err, SLATE_ERR_INVALID_FORMAT, "%s%s%s: %s", where, DOT(where), key,
		        kind == TEXT_URL       ? "empty, or not printable ASCII without spaces"
		        : kind == TEXT_CMDLINE ? "contains characters other than printable ASCII"
		                               : "contains control characters");
	*ret = s;
	return 0;
}

static int dup_text(struct json_object *o, const char *where, const char *key, size_t max,
                    enum text_kind kind, char **ret, struct slate_error *err)
{
	const char *s = NULL;
	char *d;
	int r;

	r = catalog_get_text(o, where, key, true, max, kind, &s, err);
	if (r < 0)
		return r;
	d = strdup(s);
	if (!d)
		return -ENOMEM;
	*ret = d;
	return 0;
}

int catalog_get_int(struct json_object *o, const char *where, const char *key, int64_t min,
                    int64_t *ret, struct slate_error *err)
{
	int64_t v = 0;
	int r;

	r = json_get_int64(o, key, &v);
	if (r < 0)
		return field_error(err, r, where, key, "an integer");
	if (v < min)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "%s%s%s: %" PRId64 " is below the minimum %" PRId64, where,
		                       DOT(where), key, v, min);
	*ret = v;
	return 0;
}

int catalog_get_time(struct json_object *o, const char *where, const char *key, int64_t *ret,
                     struct slate_error *err)
{
	const char *s = NULL;
	int r;

	r = catalog_get_text(o, where, key, true, 64, TEXT_URL, &s, err);
	if (r < 0)
		return r;
	if (catalog_time_parse(s, ret) < 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "%s%s%s: \"%s\" is not an RFC 3339 UTC time of the form "
		                       "YYYY-MM-DDTHH:MM:SSZ",
		                       where, DOT(where), key, s);
	return 0;
}

static int get_object(struct json_object *o, const char *where, const char *key,
                      struct json_object **ret, struct slate_error *err)
{
	int r = json_get_object(o, key, ret);
	return r < 0 ? field_error(err, r, where, key, "an object") : 0;
}

int catalog_get_sha256(struct json_object *o, const char *where, struct catalog_artifact *a,
                       struct slate_error *err)
{
	const char *s = NULL;
	int r;

	r = catalog_get_text(o, where, "sha256", true, 64, TEXT_URL, &s, err);
	if (r < 0)
		return r;
	if (strlen(s) != 64 || hex_decode(s, 32, a->sha256, HEX_LOWER) < 0)
		goto bad;
	memcpy(a->sha256_hex, s, 65);
	return 0;
bad:
	return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
	                       "%s.sha256: not 64 lowercase hexadecimal digits", where);
}

/* url, sha256 and size; the caller checks the object's members. */
static int parse_artifact(struct json_object *o, const char *where, struct catalog_artifact *a,
                          struct slate_error *err)
{
	int64_t size = 0;
	int r;

	r = dup_text(o, where, "url", CATALOG_URL_MAX, TEXT_URL, &a->url, err);
	if (r < 0)
		return r;
	r = catalog_get_sha256(o, where, a, err);
	if (r < 0)
		return r;
	r = catalog_get_int(o, where, "size", 1, &size, err);
	if (r < 0)
		return r;
	a->size = (uint64_t)size;
	return 0;
}

static int parse_file_artifact(struct json_object *parent, const char *where, const char *key,
                               struct catalog_artifact *a, struct slate_error *err)
{
	static const char *const members[] = {"url", "sha256", "size", NULL};
	struct json_object *o = NULL;
	char w[128];
	int r;

	r = get_object(parent, where, key, &o, err);
	if (r < 0)
		return r;
	(void)snprintf(w, sizeof(w), "%s.%s", where, key);
	r = catalog_check_members(o, w, members, err);
	if (r < 0)
		return r;
	return parse_artifact(o, w, a, err);
}

static int parse_enum(struct json_object *o, const char *where, const char *key,
                      const char *const names[], int *ret, struct slate_error *err)
{
	const char *s = NULL;
	int r;

	r = catalog_get_text(o, where, key, true, 64, TEXT_URL, &s, err);
	if (r < 0)
		return r;
	for (int i = 0; names[i]; i++)
		if (streq(s, names[i])) {
			*ret = i;
			return 0;
		}
	return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s.%s: unknown value \"%s\"", where,
	                       key, s);
}

static int parse_disk(struct json_object *parent, const char *where, struct catalog_image *img,
                      struct slate_error *err)
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
	r = catalog_check_members(o, w, members, err);
	if (r < 0)
		return r;
	r = parse_artifact(o, w, &img->disk, err);
	if (r < 0)
		return r;
	r = catalog_get_int(o, w, "uncompressedSize", 1, &usize, err);
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
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "%s: uncompressedSize must equal size when compression is "
		                       "\"none\"",
		                       w);
	return 0;
}

static int parse_boot(struct json_object *parent, const char *where, struct catalog_image *img,
                      struct slate_error *err)
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
	r = catalog_check_members(
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
                       struct slate_error *err)
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
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
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
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s: not an object",
			                       w);
		img->n_steps = i + 1;
		r = catalog_check_members(o, w, members, err);
		if (r < 0)
			return r;
		r = catalog_get_text(o, w, "uuid", true, 36, TEXT_URL, &uuid, err);
		if (r < 0)
			return r;
		if (!uuid_ok(uuid))
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "%s.uuid: \"%s\" is not a lowercase RFC 4122 UUID",
			                       w, uuid);
		memcpy(st->uuid, uuid, sizeof(st->uuid));
		for (size_t j = 0; j < i; j++)
			if (streq(img->steps[j].uuid, st->uuid))
				return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
				                       "%s.uuid: %s is used by step %zu too", w,
				                       st->uuid, j);
		r = catalog_get_int(o, w, "seq", 0, &st->seq, err);
		if (r < 0)
			return r;
		if (i > 0 && st->seq <= img->steps[i - 1].seq)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
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
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s.command: empty",
			                       w);
	}
	return 0;
}

static int parse_image(struct json_object *o, size_t idx, struct catalog *c,
                       struct catalog_image *img, struct slate_error *err)
{
	static const char *const members[] = {"id",   "version",     "description", "disk",
	                                      "boot", "postinstall", NULL};
	char w[64];
	int r;

	(void)snprintf(w, sizeof(w), "images[%zu]", idx);
	if (!json_object_is_type(o, json_type_object))
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s: not an object", w);
	r = catalog_check_members(o, w, members, err);
	if (r < 0)
		return r;
	r = dup_text(o, w, "id", CATALOG_ID_MAX, TEXT_URL, &img->id, err);
	if (r < 0)
		return r;
	if (catalog_id_check(img->id) < 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "%s.id: \"%s\" does not match [a-z0-9][a-z0-9._-]{0,63} "
		                       "(without \"..\")",
		                       w, img->id);
	for (size_t j = 0; j < idx; j++)
		if (streq(c->images[j].id, img->id))
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "%s.id: \"%s\" is also images[%zu]", w, img->id, j);
	r = catalog_get_int(o, w, "version", 1, &img->version, err);
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

static int parse_keys(struct json_object *top, struct catalog *c, struct slate_error *err)
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
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "keys: more than %u keys",
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
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s: not an object",
			                       w);
		r = catalog_check_members(o, w, members, err);
		if (r < 0)
			return r;
		r = catalog_get_text(o, w, "type", true, 16, TEXT_URL, &type, err);
		if (r < 0)
			return r;
		if (!streq(type, "ed25519"))
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "%s.type: unknown key type \"%s\"", w, type);
		r = catalog_get_text(o, w, "key", true, 64, TEXT_URL, &b64, err);
		if (r < 0)
			return r;
		r = catalog_get_text(o, w, "comment", false, SIGN_COMMENT_MAX, TEXT_CMDLINE,
		                     &comment, err);
		if (r < 0)
			return r;
		if (sign_base64_decode(b64, strlen(b64), raw, sizeof(raw)) < 0)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "%s.key: not 32 bytes of base64", w);
		r = sign_public_key_from_raw(raw, comment, &c->keys[i]);
		if (r < 0)
			return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
			                       "%s.key: not a valid Ed25519 public key", w);
		for (size_t j = 0; j < i; j++)
			if (streq(c->keys[j].id, c->keys[i].id))
				return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
				                       "%s: key %s is also keys[%zu]", w,
				                       c->keys[i].id, j);
		c->n_keys = i + 1;
	}
	return 0;
}

static int parse_top(struct json_object *top, struct catalog *c, struct slate_error *err)
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
	r = catalog_get_text(top, "", "format", true, 64, TEXT_URL, &format, err);
	if (r < 0)
		return r;
	if (!streq(format, CATALOG_FORMAT))
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "format: \"%s\" is not \"" CATALOG_FORMAT "\"", format);
	r = catalog_get_int(top, "", "formatVersion", 0, &fv, err);
	if (r < 0)
		return r;
	/* Before the member check, so a newer catalog says why we cannot read it. */
	if (fv != CATALOG_FORMAT_VERSION)
		return slate_error_set(err, SLATE_ERR_PROTOCOL_VERSION,
		                       "formatVersion %" PRId64 " is not supported (this is format "
		                       "version %d)",
		                       fv, CATALOG_FORMAT_VERSION);
	r = catalog_check_members(top, "", members, err);
	if (r < 0)
		return r;
	r = dup_text(top, "", "channel", SIGN_CHANNEL_MAX, TEXT_URL, &c->channel, err);
	if (r < 0)
		return r;
	if (sign_channel_check(c->channel) < 0)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "channel: \"%s\" does not match [a-z0-9][a-z0-9._-]{0,63} "
		                       "(without \"..\")",
		                       c->channel);
	r = catalog_get_int(top, "", "version", 1, &c->version, err);
	if (r < 0)
		return r;
	r = catalog_get_time(top, "", "signedAt", &c->signed_at, err);
	if (r < 0)
		return r;
	r = catalog_get_time(top, "", "expires", &c->expires, err);
	if (r < 0)
		return r;
	if (c->expires <= c->signed_at)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "expires: not after signedAt");

	r = json_get_array(top, "images", &images);
	if (r < 0)
		return field_error(err, r, "", "images", "an array");
	n = json_object_array_length(images);
	if (n > CATALOG_MAX_IMAGES)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "images: more than %u images",
		                       CATALOG_MAX_IMAGES);
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

int catalog_parse(const uint8_t *bytes, size_t len, struct catalog **ret, struct slate_error *err)
{
	_cleanup_catalog_ struct catalog *c = NULL;
	_cleanup_json_ struct json_object *top = NULL;
	int r;

	if (!bytes && len > 0)
		return -EINVAL;
	if (len > CATALOG_MAX_SIZE)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE,
		                       "catalog is %zu bytes, more than the %u allowed", len,
		                       CATALOG_MAX_SIZE);
	r = json_parse_object((const char *)bytes, len, CATALOG_MAX_SIZE, &top);
	if (r == SLATE_ERR_JSON_TYPE)
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "malformed catalog: not a JSON object");
	if (r < 0)
		return slate_error_set(err, r == -ENOMEM ? r : SLATE_ERR_INVALID_FORMAT,
		                       "malformed catalog: not strict JSON (%s)",
		                       slate_strerror(r));
	if (!json_members_unique((const char *)bytes, len, top))
		return slate_error_set(err, SLATE_ERR_INVALID_FORMAT,
		                       "malformed catalog: an object has a member twice");

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	r = parse_top(top, c, err);
	if (r < 0) {
		if (r == -ENOMEM)
			(void)slate_error_set(err, r, "out of memory");
		else if (r != SLATE_ERR_PROTOCOL_VERSION)
			(void)slate_error_wrap(err, r, "malformed catalog");
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

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * slate-catalog: the publisher's tool for image catalogs (keygen, sign, verify). All the logic is
 * in libslate's image/catalog-parse.c, image/catalog.c and image/sign.c; this file parses
 * arguments and prints.
 * Exit status: 0 success, 1 a failed operation (for verify: anything but a good signature by a
 * trusted key on a well-formed, unexpired catalog), 2 bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "image/catalog.h"
#include "image/expand.h"
#include "image/sign.h"
#include "image/verify.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "version.h"

#define EXIT_USAGE 2

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: slate-catalog COMMAND [ARG]...\n"
	        "Publisher's tool for slate image catalogs (see slate-catalog(1), "
	        "slate-catalog(5)).\n\n"
	        "Commands:\n"
	        "  keygen SECRET_KEY PUBLIC_KEY [--comment TEXT]\n"
	        "                 make an Ed25519 key pair (the secret key file is mode 0600)\n"
	        "  sign --key SECRET_KEY [--channel NAME] CATALOG\n"
	        "                 check CATALOG and write its detached signature CATALOG.sig\n"
	        "  verify [--trusted PUBKEY_OR_DIR]... [--channel NAME] [--now TIME] [--json]\n"
	        "         CATALOG [SIG]\n"
	        "                 exit 0 only for a good signature by a trusted key on a\n"
	        "                 well-formed catalog that has not expired\n"
	        "  pack [--level N (9)] [--json] RAW_IMAGE OUTPUT\n"
	        "                 compress a raw disk image into a zstd artifact of independent\n"
	        "                 4 MiB frames (what slate image pull expands fastest) and print\n"
	        "                 the catalog's size, uncompressedSize and sha256 for it\n\n"
	        "Options:\n"
	        "  -h, --help     this help\n"
	        "  -V, --version  print the version\n");
}

static int fail(const char *cmd, const char *fmt, ...) _printf_(2, 3);
static int fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "slate-catalog: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_FAILURE;
}

static int usage_error(const char *cmd, const char *fmt, ...) _printf_(2, 3);
static int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "slate-catalog: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'slate-catalog --help'.\n");
	return EXIT_USAGE;
}

/* Handles what every subcommand shares: --help, and unknown or incomplete options. */
static int common_option(const char *cmd, int c, char **argv)
{
	if (c == 'h') {
		usage(stdout);
		return EXIT_SUCCESS;
	}
	if (c == ':')
		return usage_error(cmd, "option '%s' needs an argument", argv[optind - 1]);
	return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
}

static int cmd_keygen(int argc, char **argv)
{
	static const struct option longopts[] = {
	        {"comment", required_argument, NULL, 'c'},
	        {"help", no_argument, NULL, 'h'},
	        {},
	};
	_cleanup_secret_key_ struct sign_secret_key *k = NULL;
	_cleanup_free_ char *line = NULL;
	struct slate_error err = {};
	const char *comment = NULL;
	int c, r;

	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) >= 0) {
		if (c == 'c')
			comment = optarg;
		else
			return common_option("keygen", c, argv);
	}
	if (argc - optind != 2)
		return usage_error("keygen", "want SECRET_KEY PUBLIC_KEY");
	if (comment && sign_comment_check(comment) < 0)
		return usage_error("keygen", "--comment: at most %d printable ASCII characters",
		                   SIGN_COMMENT_MAX);

	r = sign_secret_key_generate(comment, &k);
	if (r < 0)
		return fail("keygen", "%s", slate_strerror(r));
	r = sign_keygen_write_at(AT_FDCWD, argv[optind], argv[optind + 1], k, &err);
	if (r < 0)
		return fail("keygen", "%s", err.code ? slate_error_text(&err) : slate_strerror(r));
	r = sign_public_key_format(sign_secret_key_public(k), &line);
	if (r < 0)
		return fail("keygen", "%s", slate_strerror(r));
	printf("key ID %s\n%s", sign_secret_key_public(k)->id, line);
	return EXIT_SUCCESS;
}

static int read_catalog(const char *cmd, const char *path, struct buf **ret)
{
	int r = fs_read_file_at(AT_FDCWD, path, CATALOG_MAX_SIZE, ret);

	if (r == -EFBIG)
		return fail(cmd, "%s: catalog is larger than the %u bytes allowed", path,
		            CATALOG_MAX_SIZE);
	if (r < 0)
		return fail(cmd, "%s: %s", path, slate_strerror(r));
	return EXIT_SUCCESS;
}

static int cmd_sign(int argc, char **argv)
{
	static const struct option longopts[] = {
	        {"key", required_argument, NULL, 'k'},
	        {"channel", required_argument, NULL, 'c'},
	        {"help", no_argument, NULL, 'h'},
	        {},
	};
	_cleanup_secret_key_ struct sign_secret_key *k = NULL;
	_cleanup_catalog_ struct catalog *cat = NULL;
	_cleanup_buf_ struct buf *b = NULL;
	_cleanup_free_ char *sig_text = NULL, *sig_path = NULL;
	const char *key_path = NULL, *channel = NULL, *path;
	uint8_t sig[SIGN_SIGNATURE_BYTES];
	struct slate_error err = {};
	char when[32];
	int c, r;

	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) >= 0) {
		if (c == 'k')
			key_path = optarg;
		else if (c == 'c')
			channel = optarg;
		else
			return common_option("sign", c, argv);
	}
	if (!key_path)
		return usage_error("sign", "--key SECRET_KEY is required");
	if (argc - optind != 1)
		return usage_error("sign", "want one CATALOG");
	if (channel && sign_channel_check(channel) < 0)
		return usage_error("sign", "--channel: \"%s\" is not a channel name", channel);
	path = argv[optind];

	/* Only a catalog the verifier would take gets signed. */
	r = read_catalog("sign", path, &b);
	if (r != EXIT_SUCCESS)
		return r;
	r = catalog_parse(buf_ptr(b), buf_len(b), &cat, &err);
	if (r < 0)
		return fail("sign", "%s: %s", path,
		            err.code ? slate_error_text(&err) : slate_strerror(r));
	if (channel && !streq(channel, cat->channel))
		return fail("sign", "%s: catalog is for channel \"%s\", not \"%s\"", path,
		            cat->channel, channel);
	if ((int64_t)time(NULL) >= cat->expires) {
		(void)catalog_time_format(cat->expires, when, sizeof(when));
		return fail("sign", "%s: catalog expired at %s; refusing to sign it", path, when);
	}

	r = sign_secret_key_load_at(AT_FDCWD, key_path, &k, &err);
	if (r < 0)
		return fail("sign", "%s", err.code ? slate_error_text(&err) : slate_strerror(r));
	r = sign_detached(k, cat->channel, buf_ptr(b), buf_len(b), sig);
	if (r < 0)
		return fail("sign", "%s", slate_strerror(r));
	/* Check our own work before anyone else has to. */
	r = sign_verify_detached(sign_secret_key_public(k), cat->channel, buf_ptr(b), buf_len(b),
	                         sig);
	if (r < 0)
		return fail("sign", "the new signature does not verify: %s", slate_strerror(r));
	r = sign_signature_format(sign_secret_key_public(k)->id, sig, &sig_text);
	if (r < 0)
		return fail("sign", "%s", slate_strerror(r));
	if (asprintf(&sig_path, "%s.sig", path) < 0)
		return fail("sign", "%s", slate_strerror(-ENOMEM));
	r = fs_write_atomic_at(AT_FDCWD, sig_path, sig_text, strlen(sig_text), 0644);
	if (r < 0)
		return fail("sign", "%s: %s", sig_path, slate_strerror(r));
	printf("%s: channel %s, version %" PRId64 ", signed with key %s\n", sig_path, cat->channel,
	       cat->version, sign_secret_key_public(k)->id);
	return EXIT_SUCCESS;
}

static void print_verify_json(const struct catalog *cat, const struct catalog_trust *trust,
                              const struct slate_error *err)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_free_ char *text = NULL;
	char t[32];

	if (!o)
		return;
	if (!cat) {
		struct json_object *e = json_object_new_object();

		(void)json_add_bool(o, "valid", false);
		if (!e)
			return;
		(void)json_add_string(e, "code", catalog_error_name(err->code));
		(void)json_add_string(e, "message", slate_error_text(err));
		(void)json_add(o, "error", e);
	} else {
		const struct sign_public_key *k = catalog_trust_find(trust, cat->key_id);
		struct json_object *images = json_object_new_array();

		(void)json_add_bool(o, "valid", true);
		(void)json_add_string(o, "channel", cat->channel);
		(void)json_add_int64(o, "version", cat->version);
		(void)json_add_string(o, "keyId", cat->key_id);
		if (k && k->comment[0])
			(void)json_add_string(o, "keyComment", k->comment);
		(void)catalog_time_format(cat->signed_at, t, sizeof(t));
		(void)json_add_string(o, "signedAt", t);
		(void)catalog_time_format(cat->expires, t, sizeof(t));
		(void)json_add_string(o, "expires", t);
		if (!images)
			return;
		for (size_t i = 0; i < cat->n_images; i++) {
			struct json_object *img = json_object_new_object();
			if (!img)
				break;
			(void)json_add_string(img, "id", cat->images[i].id);
			(void)json_add_int64(img, "version", cat->images[i].version);
			(void)json_object_array_add(images, img);
		}
		(void)json_add(o, "images", images);
		(void)json_add_int64(o, "keys", (int64_t)cat->n_keys);
	}
	if (json_to_string_dup(o, true, &text) == 0)
		fputs(text, stdout);
}

static int cmd_verify(int argc, char **argv)
{
	static const struct option longopts[] = {
	        {"trusted", required_argument, NULL, 't'},
	        {"channel", required_argument, NULL, 'c'},
	        {"now", required_argument, NULL, 'n'},
	        {"json", no_argument, NULL, 'j'},
	        {"help", no_argument, NULL, 'h'},
	        {},
	};
	_cleanup_trust_ struct catalog_trust *trust = NULL;
	_cleanup_catalog_ struct catalog *cat = NULL;
	_cleanup_buf_ struct buf *b = NULL, *sb = NULL;
	_cleanup_free_ char *sig_path = NULL, *peeked = NULL;
	_cleanup_free_ const char **trusted = NULL;
	const char *channel = NULL, *path, *now_arg = NULL;
	struct slate_error err = {};
	size_t n_trusted = 0;
	int64_t now = (int64_t)time(NULL);
	bool json = false;
	int c, r;

	trusted = calloc((size_t)argc + 1, sizeof(*trusted));
	if (!trusted)
		return fail("verify", "%s", slate_strerror(-ENOMEM));
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) >= 0) {
		if (c == 't')
			trusted[n_trusted++] = optarg;
		else if (c == 'c')
			channel = optarg;
		else if (c == 'n')
			now_arg = optarg;
		else if (c == 'j')
			json = true;
		else
			return common_option("verify", c, argv);
	}
	if (argc - optind < 1 || argc - optind > 2)
		return usage_error("verify", "want CATALOG [SIG]");
	if (channel && sign_channel_check(channel) < 0)
		return usage_error("verify", "--channel: \"%s\" is not a channel name", channel);
	if (now_arg && catalog_time_parse(now_arg, &now) < 0)
		return usage_error(
		        "verify", "--now: \"%s\" is not of the form YYYY-MM-DDTHH:MM:SSZ", now_arg);
	if (n_trusted == 0)
		trusted[n_trusted++] = CATALOG_TRUSTED_KEYS_DIR;
	path = argv[optind];
	if (argc - optind == 2)
		sig_path = strdup(argv[optind + 1]);
	else if (asprintf(&sig_path, "%s.sig", path) < 0)
		sig_path = NULL;
	if (!sig_path)
		return fail("verify", "%s", slate_strerror(-ENOMEM));

	r = catalog_trust_new(&trust);
	if (r < 0)
		return fail("verify", "%s", slate_strerror(r));
	for (size_t i = 0; i < n_trusted; i++) {
		r = catalog_trust_add_path(trust, AT_FDCWD, trusted[i], &err);
		if (r < 0)
			goto out;
	}

	r = fs_read_file_at(AT_FDCWD, path, CATALOG_MAX_SIZE, &b);
	if (r == -EFBIG) {
		r = slate_error_set(&err, SLATE_ERR_TOO_LARGE,
		                    "%s: catalog is larger than the %u bytes allowed", path,
		                    CATALOG_MAX_SIZE);
		goto out;
	}
	if (r < 0) {
		(void)slate_error_errno(&err, r, "%s", path);
		goto out;
	}
	r = fs_read_file_at(AT_FDCWD, sig_path, SIGN_SIG_FILE_MAX, &sb);
	if (r == -ENOENT) {
		r = slate_error_set(&err, SLATE_ERR_SIGNATURE_MISSING,
		                    "catalog is not signed: no signature file %s", sig_path);
		goto out;
	}
	if (r == -EFBIG) {
		r = slate_error_set(&err, SLATE_ERR_SIGNATURE_FORMAT,
		                    "%s: malformed signature: larger than %u bytes", sig_path,
		                    SIGN_SIG_FILE_MAX);
		goto out;
	}
	if (r < 0) {
		(void)slate_error_errno(&err, r, "%s", sig_path);
		goto out;
	}

	/* A consumer pins its channel; the publisher may check against the catalog's own. */
	if (!channel) {
		r = catalog_peek_channel(buf_ptr(b), buf_len(b), &peeked);
		if (r < 0) {
			struct catalog *tmp = NULL;

			/* Say exactly what is wrong with it. */
			r = catalog_parse(buf_ptr(b), buf_len(b), &tmp, &err);
			catalog_free(tmp);
			if (r == 0)
				r = slate_error_set(&err, SLATE_ERR_INVALID_FORMAT,
				                    "malformed catalog: no channel");
			goto out;
		}
		channel = peeked;
	}
	r = catalog_verify(trust, channel, buf_ptr(b), buf_len(b), buf_ptr(sb), buf_len(sb), NULL,
	                   now, &cat, &err);

out:
	if (r < 0) {
		if (err.code == 0)
			(void)slate_error_set(&err, r, "%s", slate_strerror(r));
		if (json)
			print_verify_json(NULL, NULL, &err);
		return fail("verify", "%s", slate_error_text(&err));
	}
	if (json) {
		print_verify_json(cat, trust, NULL);
	} else {
		const struct sign_public_key *k = catalog_trust_find(trust, cat->key_id);
		char t[32];

		(void)catalog_time_format(cat->expires, t, sizeof(t));
		printf("good signature by trusted key %s%s%s%s\n"
		       "channel %s, version %" PRId64 ", expires %s, %zu image%s\n",
		       cat->key_id, k && k->comment[0] ? " (" : "", k ? k->comment : "",
		       k && k->comment[0] ? ")" : "", cat->channel, cat->version, t, cat->n_images,
		       cat->n_images == 1 ? "" : "s");
	}
	return EXIT_SUCCESS;
}

static int cmd_pack(int argc, char **argv)
{
	static const struct option longopts[] = {
	        {"level", required_argument, NULL, 'l'},
	        {"json", no_argument, NULL, 'j'},
	        {"help", no_argument, NULL, 'h'},
	        {},
	};
	_cleanup_free_ char *tmp = NULL;
	_cleanup_close_ int in = -1;
	_cleanup_close_ int out = -1;
	uint64_t raw = 0, packed = 0;
	uint8_t sha[32];
	char hex[65];
	bool json = false;
	int c, r, level = 9;

	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) >= 0) {
		if (c == 'l') {
			char *end;
			long v;
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 1 || v > ZSTD_maxCLevel())
				return usage_error("pack", "--level takes 1..%d", ZSTD_maxCLevel());
			level = (int)v;
		} else if (c == 'j') {
			json = true;
		} else {
			return common_option("pack", c, argv);
		}
	}
	if (argc - optind != 2)
		return usage_error("pack", "want RAW_IMAGE OUTPUT");
	const char *src = argv[optind], *dst = argv[optind + 1];
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return fail("pack", "%s: %s", src, strerror(errno));
	/* Written under a temporary name and renamed: OUTPUT is whole or absent. */
	if (asprintf(&tmp, "%s.tmp-XXXXXX", dst) < 0)
		return fail("pack", "%s", strerror(ENOMEM));
	out = mkostemp(tmp, O_CLOEXEC);
	if (out < 0)
		return fail("pack", "%s: %s", dst, strerror(errno));
	r = expand_pack_zstd(in, out, level, &raw, &packed, sha);
	if (r >= 0 && fsync(out) < 0)
		r = -errno;
	if (r >= 0 && fchmod(out, 0644) < 0)
		r = -errno;
	if (r >= 0 && rename(tmp, dst) < 0)
		r = -errno;
	if (r < 0) {
		(void)unlink(tmp);
		return fail("pack", "%s: %s", dst, slate_strerror(r));
	}
	verify_hex(sha, hex);
	if (json)
		printf("{\"size\": %" PRIu64 ", \"uncompressedSize\": %" PRIu64
		       ", \"sha256\": \"%s\", \"compression\": \"zstd\"}\n",
		       packed, raw, hex);
	else
		printf("%s: %" PRIu64 " bytes from %" PRIu64 " (zstd, level %d, %u MiB frames)\n"
		       "size %" PRIu64 "\nuncompressedSize %" PRIu64 "\nsha256 %s\n",
		       dst, packed, raw, level, EXPAND_PACK_FRAME >> 20, packed, raw, hex);
	return EXIT_SUCCESS;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {},
	};
	const char *cmd;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hV", longopts, NULL)) >= 0) {
		switch (c) {
		case 'h':
			usage(stdout);
			return EXIT_SUCCESS;
		case 'V':
			printf("slate-catalog %s\n", SLATE_VERSION);
			return EXIT_SUCCESS;
		default:
			fprintf(stderr, "slate-catalog: unknown option '%s'\n", argv[optind - 1]);
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = argv[optind];
	/* Each command parses its own arguments, with its name as argv[0]. */
	argc -= optind;
	argv += optind;
	optind = 0; /* 0, not 1: makes glibc's getopt start over */
	if (streq(cmd, "keygen"))
		return cmd_keygen(argc, argv);
	if (streq(cmd, "sign"))
		return cmd_sign(argc, argv);
	if (streq(cmd, "verify"))
		return cmd_verify(argc, argv);
	if (streq(cmd, "pack"))
		return cmd_pack(argc, argv);
	fprintf(stderr, "slate-catalog: unknown command '%s'\n", cmd);
	usage(stderr);
	return EXIT_USAGE;
}

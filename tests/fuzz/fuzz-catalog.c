/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for image/catalog and image/sign: the same input goes to the catalog parser
 * (whose every promise about what it accepts is checked), the signature file parser and the
 * public key parser (one-line and PEM), whose accepted inputs must survive a round trip.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "image/catalog.h"
#include "image/sign.h"
#include "util/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool is_lower_hex(const char *s, size_t n)
{
	if (strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static void check_artifact(const struct catalog_artifact *a)
{
	static const char hex[] = "0123456789abcdef";

	if (!a->url || !a->url[0] || a->size < 1 || a->size > INT64_MAX ||
	    !is_lower_hex(a->sha256_hex, 64))
		abort();
	for (size_t i = 0; i < 32; i++)
		if (a->sha256_hex[2 * i] != hex[a->sha256[i] >> 4] ||
		    a->sha256_hex[2 * i + 1] != hex[a->sha256[i] & 15])
			abort();
}

static void check_catalog(const struct catalog *c, const uint8_t *data, size_t size)
{
	if (c->len != size || memcmp(c->bytes, data, size) != 0 || c->sig || c->key_id[0])
		abort();
	if (sign_channel_check(c->channel) < 0 || c->version < 1 || c->expires <= c->signed_at)
		abort();
	if (c->n_images > CATALOG_MAX_IMAGES || c->n_keys > CATALOG_MAX_KEYS)
		abort();
	for (size_t i = 0; i < c->n_images; i++) {
		const struct catalog_image *img = &c->images[i];

		if (catalog_id_check(img->id) < 0 || catalog_find_image(c, img->id) != img)
			abort(); /* a bad id, or a duplicate found first */
		if (img->version < 1 || !img->description)
			abort();
		check_artifact(&img->disk);
		if (img->uncompressed_size < 1 || (img->compression == CATALOG_COMPRESSION_NONE &&
		                                   img->uncompressed_size != img->disk.size))
			abort();
		if (img->boot == CATALOG_BOOT_KERNEL) {
			check_artifact(&img->kernel);
			check_artifact(&img->initrd);
			if (!img->cmdline)
				abort();
		} else if (img->boot != CATALOG_BOOT_FIRMWARE || img->kernel.url || img->cmdline) {
			abort();
		}
		if (img->n_steps > CATALOG_MAX_STEPS)
			abort();
		for (size_t j = 0; j < img->n_steps; j++) {
			const struct catalog_step *st = &img->steps[j];

			if (strlen(st->uuid) != 36 || !st->command[0] || !st->description)
				abort();
			if (j > 0 && (st->seq <= img->steps[j - 1].seq ||
			              streq(st->uuid, img->steps[j - 1].uuid)))
				abort();
		}
	}
	for (size_t i = 0; i < c->n_keys; i++)
		for (size_t j = 0; j < i; j++)
			if (streq(c->keys[i].id, c->keys[j].id))
				abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct catalog *c = NULL;
	struct slate_error err = {};
	struct sign_public_key k = {}, back = {};
	char key_id[SIGN_KEY_ID_LEN + 1] = "";
	uint8_t sig[SIGN_SIGNATURE_BYTES];
	char *text = NULL;
	int r;

	r = catalog_parse(data, size, &c, &err);
	if (r == 0) {
		check_catalog(c, data, size);
		catalog_free(c);
	} else if (c || (r != -ENOMEM && (err.code != r || !err.msg[0]))) {
		abort(); /* output touched on failure, or a refusal without its reason */
	}

	/* A signature file that parses is exactly what sign_signature_format() writes. */
	if (sign_signature_parse(data, size, key_id, sig, &err) == 0) {
		if (sign_signature_format(key_id, sig, &text) < 0)
			abort();
		if (!(strlen(text) == size || strlen(text) == size + 1) ||
		    memcmp(text, data, strlen(text) - 1) != 0)
			abort();
		free(text);
		text = NULL;
	}

	/* A public key that parses formats and parses again to the same key. */
	if (sign_public_key_parse((const char *)data, size, &k, &err) == 0) {
		if (sign_public_key_format(&k, &text) < 0 ||
		    sign_public_key_parse(text, strlen(text), &back, NULL) < 0 ||
		    memcmp(k.key, back.key, sizeof(k.key)) != 0 || !streq(k.id, back.id) ||
		    !streq(k.comment, back.comment))
			abort();
		free(text);
	}
	return 0;
}

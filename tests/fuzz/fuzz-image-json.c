/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for image.json (image/store.c): the metadata of every installed base
 * image. The parser is static, so the module is compiled in here. Accepted metadata must
 * satisfy what the store relies on and survive a write/read round trip unchanged.
 */

#include "image/store.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_(image_info_freep) struct image_info *i = NULL, *back = NULL, *named = NULL;
	_cleanup_free_ char *text = NULL, *again = NULL;

	if (info_parse((const char *)data, size, NULL, &i) < 0)
		return 0;
	if (image_id_check(i->id) < 0 || !sha256_hex_ok(i->sha256) || i->version < 1 ||
	    (int64_t)i->size < 0 || (i->cmdline && !text_ok(i->cmdline)) ||
	    (i->description && !text_ok(i->description)))
		abort();
	/* Read for the directory it names, it is accepted too; for another one, never. */
	if (info_parse((const char *)data, size, i->id, &named) < 0)
		abort();
	if (info_parse((const char *)data, size, "another-id", &back) >= 0 &&
	    !streq(i->id, "another-id"))
		abort();
	image_info_free(TAKE_PTR(back));

	if (info_to_json(i, &text) < 0)
		abort();
	if (info_parse(text, strlen(text), i->id, &back) < 0)
		abort();
	if (info_to_json(back, &again) < 0 || !streq(text, again))
		abort();
	return 0;
}

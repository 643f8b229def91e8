/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the MAC registry reader (workspace/mac.c, .macs.json). The parser is
 * static, so the module is compiled in here. An accepted registry must be sorted, hold only
 * valid addresses and names, no address twice, and come back the same after a write.
 */

#include "workspace/mac.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct registry r = {0}, back = {0};
	_cleanup_json_ struct json_object *o = NULL, *macs = NULL;
	_cleanup_free_ char *text = NULL;

	if (registry_parse((const char *)data, size, &r) < 0)
		return 0;
	for (size_t i = 0; i < r.n; i++) {
		if (mac_check(r.e[i].mac) < 0 || workspace_name_check(r.e[i].name) < 0)
			abort();
		if (i > 0 && strcmp(r.e[i - 1].mac, r.e[i].mac) >= 0)
			abort(); /* unsorted or a duplicate: bsearch would miss entries */
		if (registry_find(&r, r.e[i].mac) != &r.e[i])
			abort();
	}

	/* registry_write()'s JSON, without the file, must parse back to the same entries. */
	o = json_object_new_object();
	macs = json_object_new_object();
	if (!o || !macs || json_add_int64(o, "formatVersion", 1) < 0)
		abort();
	if (json_add(o, "macs", TAKE_PTR(macs)) < 0)
		abort();
	{
		struct json_object *m = NULL;
		if (json_get_object(o, "macs", &m) < 0)
			abort();
		for (size_t i = 0; i < r.n; i++)
			if (json_add_string(m, r.e[i].mac, r.e[i].name) < 0)
				abort();
	}
	if (json_to_string_dup(o, true, &text) < 0)
		abort();
	if (registry_parse(text, strlen(text), &back) < 0 || back.n != r.n)
		abort();
	for (size_t i = 0; i < r.n; i++)
		if (!streq(back.e[i].mac, r.e[i].mac) || !streq(back.e[i].name, r.e[i].name))
			abort();
	registry_done(&back);
	registry_done(&r);
	return 0;
}

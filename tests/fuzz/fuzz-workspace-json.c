/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for workspace.json (workspace/state.c): strict parsing of whatever a
 * workspace directory holds. What is accepted must satisfy the invariants the verbs rely on
 * (valid name, MAC and shares) and survive a write/read round trip unchanged.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/macro.h"
#include "workspace/internal.h"
#include "workspace/mac.h"
#include "workspace/workspace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_(workspace_freep) struct workspace *w = NULL, *back = NULL;
	_cleanup_free_ char *text = NULL, *again = NULL;

	if (ws_state_from_json((const char *)data, size, &w) < 0)
		return 0;
	if (!w || workspace_name_check(w->name) < 0 || mac_check(w->mac) < 0 || !w->image_id ||
	    w->n_shares > WS_MAX_SHARES || (w->n_shares > 0 && !w->shares))
		abort();
	for (size_t i = 0; i < w->n_shares; i++)
		if (!w->shares[i].host_dir || w->shares[i].host_dir[0] != '/')
			abort();

	/* What we accepted, we must be able to write, and read back to the same text. */
	if (ws_state_to_json(w, &text) < 0)
		abort();
	if (ws_state_from_json(text, strlen(text), &back) < 0)
		abort();
	if (ws_state_to_json(back, &again) < 0 || !streq(text, again))
		abort();
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later */

/*
 * libFuzzer target for the vault's plaintext parser (secrets/vault.c, what install_unseal hands
 * it). What is accepted must hold the invariants the proxy and provisioning rely on (a checked
 * key, a known kind with the values that kind needs, normalised hosts, a placeholder per value
 * that never contains its real value) and must serialise back to exactly the same bytes.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "secrets/secrets.h"
#include "secrets/vault.h"
#include "util/buf.h"
#include "util/host.h"
#include "util/macro.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned char salt[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
	_cleanup_(secret_set_freep) struct secret_set *set = NULL;
	_cleanup_buf_secure_ struct buf *again = NULL;
	struct slate_error err = {0};

	if (vault_parse(data, size, salt, false, &set, &err) < 0)
		return 0;
	if (!set || set->n > SECRET_SET_MAX)
		abort();
	for (size_t i = 0; i < set->n; i++) {
		const struct secret *s = &set->v[i];

		if (secret_key_check(s->key) < 0 || !secret_kind_name(s->kind) || s->n_hosts == 0 ||
		    s->n_hosts > SECRET_HOSTS_MAX || s->n_values == 0 ||
		    (s->env && secret_env_check(s->env) < 0) ||
		    (s->file && secret_file_check(s->file) < 0))
			abort();
		for (size_t j = 0; j < s->n_hosts; j++) {
			char h[HOST_BUF];
			if (host_normalize(s->hosts[j], h, sizeof(h)) < 0 || !streq(h, s->hosts[j]))
				abort();
		}
		for (size_t j = 0; j < s->n_values; j++) {
			const struct secret_value *v = &s->values[j];
			if (!v->placeholder || !v->real || !v->forbidden ||
			    memmem(v->placeholder, strlen(v->placeholder), buf_ptr(v->real),
			           buf_len(v->real)))
				abort();
		}
		for (size_t k = 0; k < i; k++)
			if (streq(set->v[k].key, s->key))
				abort();
	}
	/* What we accepted we write back byte for byte. */
	if (vault_serialize(set, &again) < 0 || buf_len(again) != size ||
	    memcmp(buf_ptr(again), data, size) != 0)
		abort();
	return 0;
}

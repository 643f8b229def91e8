/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The per-installation egress CA that the proxy's TLS interception issues leaf certificates
 * from. Created once in the install directory (secrets/install.h):
 *   egress-ca.key  its P-256 private key, PEM, 0600 (refused when open to group or others)
 *   egress-ca.crt  its certificate, PEM, 0644: what guests put in their trust store
 * Leaf certificates are P-256, valid for EGRESS_LEAF_LIFETIME_S (an hour of clock skew
 * allowed before), name exactly one host (a DNS name or an IP address in subjectAltName), and
 * are kept in memory only: one per host, reissued when less than a quarter of their life is
 * left, at most EGRESS_LEAF_CACHE of them.
 */

#include <openssl/ssl.h>

#include "util/macro.h"

#define EGRESS_CA_KEY "egress-ca.key"
#define EGRESS_CA_CERT "egress-ca.crt"
#define EGRESS_CA_LIFETIME_DAYS 3650
#define EGRESS_LEAF_LIFETIME_S (24 * 3600)
#define EGRESS_LEAF_CACHE 1024

struct egress_ca;

/* Loads the CA from dirfd, creating it when neither file exists (a certificate that does not
 * match the key is made again from the key). Returns 0, SLATE_ERR_KEY_PERMISSIONS, -errno. */
int egress_ca_open(int dirfd, struct egress_ca **ret);
void egress_ca_free(struct egress_ca *ca);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct egress_ca *, egress_ca_free);

/* The CA certificate in PEM (valid as long as ca). */
const char *egress_ca_pem(const struct egress_ca *ca);

/* Puts a leaf certificate for host (normalised name or IP literal) and its key on ssl, from
 * the cache or newly issued. Thread-safe. Returns 0 or SLATE_ERR_CRYPTO/-ENOMEM. */
int egress_ca_use_leaf(struct egress_ca *ca, const char *host, SSL *ssl);

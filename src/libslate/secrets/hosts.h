/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Host names as secrets are bound to them and as the egress proxy compares them. A normalised
 * host is lower case, has no trailing dot, and is made of IDNA A-labels (libidn2, IDNA2008
 * with the TR46 non-transitional mapping: "Bücher.Example." -> "xn--bcher-kva.example"), each
 * label 1-63 characters of [a-z0-9_-] not starting or ending with '-', at most 253 in all. An
 * IP literal (IPv4 dotted quad, IPv6 with or without brackets) stays an IP literal, written the
 * way inet_ntop() does, without brackets. Wildcards, ports, paths, user info and empty labels are
 * refused, never guessed at.
 */

#include <stdbool.h>
#include <stddef.h>

#define SECRET_HOST_MAX_LEN 253

/*
 * Normalises in into a new string in *ret. On failure returns -EINVAL and, when err is
 * non-NULL, says precisely what is wrong with it (the host itself is quoted: it is not secret).
 */
int secret_host_normalize(const char *in, char **ret, char *err, size_t errlen);
/* Whether h (normalised) is an IP literal. */
bool secret_host_is_ip(const char *h);

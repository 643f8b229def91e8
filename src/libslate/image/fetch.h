/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Downloads with libcurl: file://, http:// and https:// only (redirects to http(s) only, at most
 * 5), with connect and stall timeouts. A transfer resumes from an offset with a Range request
 * (a server that ignores it and sends the whole file is handled: the bytes already had are
 * skipped), and never takes more than a declared size: the transfer stops the moment one byte
 * too many arrives (endless data), and a Content-Length already over it is refused before the
 * body. Retries are the caller's (image/pull.c), which re-fetches the catalog between tries.
 *
 * https:// servers are verified against the system's CA store (the peer's certificate chain and
 * its name), TLS 1.2 at least; a certificate that does not verify is -EKEYREJECTED and never
 * retried. Integrity does not rest on it (everything is checked against the signed catalog); it
 * keeps what a host fetches private on the network.
 *
 * Functions return >= 0 or -errno / slate_err; err (may be NULL) says what failed.
 */

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/error.h"

#define FETCH_MAX_REDIRECTS 5
#define FETCH_CONNECT_TIMEOUT_S 30
/* A transfer slower than 1 byte/s for this long is dropped (and may be resumed). */
#define FETCH_STALL_TIMEOUT_S 60

/* Receives the bytes in order; returns < 0 to stop the transfer with that error. */
typedef int (*fetch_write_fn)(const void *p, size_t n, void *ud);

struct fetch_request {
	const char *url;
	uint64_t offset;   /* bytes already had: ask for the rest (Range: bytes=offset-) */
	uint64_t max_size; /* the declared size: offset + bytes received never exceed it */
	fetch_write_fn write;
	void *ud;
	/* Tests only: trust the CA certificates in this PEM file instead of the system's store
	 * (NULL: the system's store). */
	const char *ca_file;
};

/*
 * One transfer of req->url from req->offset. Returns 0 when the server sent the whole rest,
 * SLATE_ERR_SIZE_MISMATCH the moment more than max_size would arrive, the write function's
 * error, -ENOENT for 404/410 or a missing file, -EACCES for 401/403, -EPROTONOSUPPORT for
 * another scheme, -EKEYREJECTED for a TLS certificate that does not verify (untrusted, expired,
 * or not for this host name), and -ECONNRESET/-ETIMEDOUT/-EIO for transport failures
 * (fetch_retryable()).
 */
int fetch_once(const struct fetch_request *req, struct slate_error *err);
/* Returns whether a fetch_once() error is worth another try (connection lost, timeout, 5xx). */
int fetch_retryable(int r);

/*
 * Reads a small document: url (any supported scheme) or a local path (no "://"), refusing more
 * than max bytes without reading them. *ret gets a new buffer.
 */
int fetch_document(const char *url_or_path, size_t max, struct buf **ret, struct slate_error *err);

/*
 * Resolves ref against base (RFC 3986): an absolute ref is returned as it is. A local path as
 * base is taken as file://. Returns a new string in *ret.
 */
int fetch_resolve_url(const char *base, const char *ref, char **ret);
/* Turns a local path into a file:// URL (made absolute), or copies a URL. */
int fetch_to_url(const char *url_or_path, char **ret);

/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/fetch.h"
#include "util/error.h"
#include "util/fs.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(CURL *, curl_easy_cleanup);
DEFINE_TRIVIAL_CLEANUP_FUNC(CURLU *, curl_url_cleanup);
static inline void curl_freep(char **p)
{
	curl_free(*p);
}

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_result;

static void global_init(void)
{
	global_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct xfer {
	const struct fetch_request *req;
	CURL *curl;
	uint64_t have; /* offset + bytes handed on */
	uint64_t skip; /* bytes to drop: the server ignored our Range */
	bool started;  /* the first body byte arrived */
	int error;     /* why the write callback stopped the transfer */
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct xfer *x = ud;
	const uint8_t *p = (const uint8_t *)ptr;
	size_t n = size * nmemb;
	int r;

	if (!x->started) {
		long code = 0;

		x->started = true;
		(void)curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
		/* 200 to a Range request: the whole file comes again, drop what we have. */
		if (x->req->offset > 0 && code == 200)
			x->skip = x->req->offset;
	}
	if (x->skip > 0) {
		size_t k = x->skip < n ? (size_t)x->skip : n;
		p += k;
		n -= k;
		x->skip -= k;
	}
	if (n == 0)
		return size * nmemb;
	if (x->req->max_size && n > x->req->max_size - x->have) {
		/* Not one byte past the declared size is handed on (endless data). */
		x->error = SLATE_ERR_SIZE_MISMATCH;
		return 0;
	}
	r = x->req->write(p, n, x->req->ud);
	if (r < 0) {
		x->error = r;
		return 0;
	}
	x->have += n;
	return size * nmemb;
}

int fetch_retryable(int r)
{
	return r == -ECONNRESET || r == -ETIMEDOUT || r == -EAGAIN || r == -ECONNREFUSED ||
	       r == -EPIPE || r == -EHOSTUNREACH;
}

static int map_http(long code)
{
	if (code == 404 || code == 410)
		return -ENOENT;
	if (code == 401 || code == 403)
		return -EACCES;
	if (code >= 500 || code == 408 || code == 429)
		return -EAGAIN;
	return -EIO;
}

static int map_curl(CURLcode c)
{
	switch (c) {
	case CURLE_UNSUPPORTED_PROTOCOL:
		return -EPROTONOSUPPORT;
	case CURLE_URL_MALFORMAT:
		return -EINVAL;
	case CURLE_FILE_COULDNT_READ_FILE:
		return -ENOENT;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return -ECONNRESET;
	case CURLE_FILESIZE_EXCEEDED:
		return SLATE_ERR_SIZE_MISMATCH;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		return -EKEYREJECTED;
	default:
		return -EIO;
	}
}

int fetch_once(const struct fetch_request *req, struct slate_error *err)
{
	_cleanup_(curl_easy_cleanupp) CURL *curl = NULL;
	char cerr[CURL_ERROR_SIZE] = "", range[32];
	struct xfer x = {.req = req};
	long code = 0;
	CURLcode c;
	int r;

	if (!req || !req->url || !req->write || (req->max_size && req->offset > req->max_size))
		return slate_error_set(err, -EINVAL, "bad download request");
	(void)pthread_once(&global_once, global_init);
	if (global_result != CURLE_OK)
		return slate_error_set(err, -ENOMEM, "libcurl: %s",
		                       curl_easy_strerror(global_result));
	if (req->max_size && req->offset == req->max_size)
		return 0; /* nothing left to fetch */
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
	curl = curl_easy_init();
	if (!curl)
		return slate_error_set(err, -ENOMEM, "libcurl: out of memory");
	x.curl = curl;
	x.have = req->offset;

	if (curl_easy_setopt(curl, CURLOPT_URL, req->url) != CURLE_OK)
		return slate_error_set(err, -EINVAL, "%s: not a URL libcurl accepts", req->url);
#if LIBCURL_VERSION_NUM >= 0x075500
	(void)curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "file,http,https");
	(void)curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
	(void)curl_easy_setopt(curl, CURLOPT_PROTOCOLS,
	                       (long)(CURLPROTO_FILE | CURLPROTO_HTTP | CURLPROTO_HTTPS));
	(void)curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS,
	                       (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	(void)curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	(void)curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
	(void)curl_easy_setopt(curl, CURLOPT_MAXREDIRS, (long)FETCH_MAX_REDIRECTS);
	(void)curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
	(void)curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, (long)FETCH_CONNECT_TIMEOUT_S);
	(void)curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	(void)curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, (long)FETCH_STALL_TIMEOUT_S);
	(void)curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, cerr);
	(void)curl_easy_setopt(curl, CURLOPT_USERAGENT, "slate/" PACKAGE_VERSION);
	/* libcurl's defaults, spelled out: the chain and the host name are checked. */
	(void)curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
	(void)curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
	(void)curl_easy_setopt(curl, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
	if (req->ca_file && curl_easy_setopt(curl, CURLOPT_CAINFO, req->ca_file) != CURLE_OK)
		return slate_error_set(err, -EINVAL, "%s: cannot use CA file %s", req->url,
		                       req->ca_file);
	/* Artifacts are compressed already and hashed as served: no transfer encoding games. */
	(void)curl_easy_setopt(curl, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	(void)curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L * 1024L);
	(void)curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	(void)curl_easy_setopt(curl, CURLOPT_WRITEDATA, &x);
	if (req->max_size)
		/* A Content-Length over the declared size is refused before the body. */
		(void)curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)req->max_size);
	if (req->offset > 0) {
		/* CURLOPT_RANGE rather than RESUME_FROM: a 200 with the whole file is then ours to
		 * handle (on_body skips what we have) instead of a failed transfer. */
		(void)snprintf(range, sizeof(range), "%" PRIu64 "-", req->offset);
		(void)curl_easy_setopt(curl, CURLOPT_RANGE, range);
	}

	c = curl_easy_perform(curl);
	if (c == CURLE_OK)
		return 0;
	if (c == CURLE_WRITE_ERROR && x.error < 0 && err && err->code == x.error && err->msg[0])
		return x.error; /* the write function said why */
	if (c == CURLE_WRITE_ERROR && x.error < 0) {
		if (x.error == SLATE_ERR_SIZE_MISMATCH)
			return slate_error_set(err, x.error,
			                       "%s: more than the declared %" PRIu64
			                       " bytes: download stopped",
			                       req->url, req->max_size);
		return slate_error_errno(err, x.error, "%s", req->url);
	}
	if (c == CURLE_HTTP_RETURNED_ERROR) {
		(void)curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
		r = map_http(code);
		return slate_error_set(err, r, "%s: the server answered %ld", req->url, code);
	}
	r = map_curl(c);
	if (r == -EKEYREJECTED)
		return slate_error_set(err, r,
		                       "%s: the server's TLS certificate is not trusted: %s",
		                       req->url, cerr[0] ? cerr : curl_easy_strerror(c));
	if (r == SLATE_ERR_SIZE_MISMATCH)
		return slate_error_set(err, r,
		                       "%s: the server announced more than the declared %" PRIu64
		                       " bytes: download refused",
		                       req->url, req->max_size);
	return slate_error_set(err, r, "%s: %s", req->url, cerr[0] ? cerr : curl_easy_strerror(c));
}

static int buf_writer(const void *p, size_t n, void *ud)
{
	return buf_put(ud, p, n);
}

static bool is_url(const char *s)
{
	return strstr(s, "://") != NULL;
}

int fetch_document(const char *url_or_path, size_t max, struct buf **ret, struct slate_error *err)
{
	_cleanup_buf_ struct buf *b = NULL;
	struct fetch_request req;
	int r;

	if (!url_or_path || !*url_or_path || !ret)
		return slate_error_set(err, -EINVAL, "no document named");
	if (!is_url(url_or_path)) {
		r = fs_read_file_at(AT_FDCWD, url_or_path, max, &b);
		if (r == -EFBIG)
			return slate_error_set(err, SLATE_ERR_TOO_LARGE,
			                       "%s: larger than %zu bytes: refused unread",
			                       url_or_path, max);
		if (r < 0)
			return slate_error_errno(err, r, "%s", url_or_path);
		*ret = TAKE_PTR(b);
		return 0;
	}
	b = buf_new(max);
	if (!b)
		return slate_error_set(err, -ENOMEM, "out of memory");
	req = (struct fetch_request){
	        .url = url_or_path, .max_size = max, .write = buf_writer, .ud = b};
	r = fetch_once(&req, err);
	if (r == SLATE_ERR_SIZE_MISMATCH)
		return slate_error_set(err, SLATE_ERR_TOO_LARGE,
		                       "%s: larger than %zu bytes: refused", url_or_path, max);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(b);
	return 0;
}

int fetch_to_url(const char *url_or_path, char **ret)
{
	_cleanup_(curl_url_cleanupp) CURLU *u = NULL;
	_cleanup_(curl_freep) char *out = NULL;
	char real[PATH_MAX];
	char *s;

	if (!url_or_path || !*url_or_path || !ret)
		return -EINVAL;
	if (is_url(url_or_path)) {
		s = strdup(url_or_path);
		if (!s)
			return -ENOMEM;
		*ret = s;
		return 0;
	}
	if (!realpath(url_or_path, real))
		return -errno;
	/* Through curl_url, so that spaces and the like are escaped. */
	u = curl_url();
	if (!u || curl_url_set(u, CURLUPART_SCHEME, "file", 0) != CURLUE_OK ||
	    curl_url_set(u, CURLUPART_PATH, real, CURLU_URLENCODE) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_URL, &out, 0) != CURLUE_OK)
		return -ENOMEM;
	s = strdup(out);
	if (!s)
		return -ENOMEM;
	*ret = s;
	return 0;
}

int fetch_resolve_url(const char *base, const char *ref, char **ret)
{
	_cleanup_(curl_url_cleanupp) CURLU *u = NULL;
	_cleanup_(curl_freep) char *out = NULL;
	_cleanup_free_ char *base_url = NULL;
	char *s;
	int r;

	if (!ref || !*ref || !ret)
		return -EINVAL;
	if (is_url(ref) || !base) {
		s = strdup(ref);
		if (!s)
			return -ENOMEM;
		*ret = s;
		return 0;
	}
	r = fetch_to_url(base, &base_url);
	if (r < 0)
		return r;
	u = curl_url();
	if (!u)
		return -ENOMEM;
	if (curl_url_set(u, CURLUPART_URL, base_url, 0) != CURLUE_OK)
		return -EINVAL;
	/* A relative URL set on a handle holding one is resolved against it (RFC 3986). */
	if (curl_url_set(u, CURLUPART_URL, ref, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_URL, &out, 0) != CURLUE_OK)
		return -EINVAL;
	s = strdup(out);
	if (!s)
		return -ENOMEM;
	*ret = s;
	return 0;
}

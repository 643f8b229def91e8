/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Strict HTTP/1.1 heads and chunked bodies (RFC 9112); see http.h for what is refused. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy/http.h"
#include "util/error.h"
#include "util/hex.h"

/* Refuses the message: the status to answer with in *ret_status, the reason in err. */
static int fail(unsigned *ret_status, struct slate_error *err, unsigned status, const char *reason)
{
	if (ret_status)
		*ret_status = status;
	return slate_error_set(err, SLATE_ERR_INVALID_FORMAT, "%s", reason);
}

bool http_is_tchar(int c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Field values and reason phrases: HTAB, SP, VCHAR, obs-text. */
static bool is_field_char(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

void http_head_free(struct http_head *h)
{
	if (!h)
		return;
	free(h->fields);
	free(h->mem);
	free(h);
}

/*
 * Finds the end of a head in the unread bytes of in, checking every byte once. Returns the
 * head's length (> 0), 0 when incomplete, or an error.
 */
static int head_scan(struct http_reader *r, const struct buf *in, bool request, size_t *ret_len,
                     unsigned *ret_status, struct slate_error *err)
{
	const uint8_t *p = buf_ptr(in);
	size_t len = buf_len(in);
	unsigned too_long_line = request ? 414 : 502, too_big = request ? 431 : 502,
	         bad = request ? 400 : 502;

	/* Every limit is checked at the byte that crosses it, so that where a piece of input
	 * ends never changes the verdict. */
	for (size_t i = r->scanned; i < len; i++) {
		uint8_t c = p[i];

		if (i >= HTTP_MAX_HEAD)
			return fail(ret_status, err, too_big, "message head too large");
		if (r->start_line_end == 0 && c != '\r' && c != '\n' && !r->last_cr &&
		    i - r->line_start >= HTTP_MAX_REQUEST_LINE)
			return fail(ret_status, err, too_long_line, "start line too long");
		if (c == 0)
			return fail(ret_status, err, bad, "NUL byte in the message head");
		if (r->last_cr) {
			size_t line_len;
			if (c != '\n')
				return fail(ret_status, err, bad, "bare CR in the message head");
			r->last_cr = false;
			line_len = i - 1 - r->line_start;
			if (line_len == 0) {
				if (r->start_line_end == 0) {
					/* An empty line before the start line (RFC 9112 2.2). */
					if (++r->leading > HTTP_MAX_LEADING_CRLF)
						return fail(ret_status, err, bad,
						            "too many empty lines");
					r->line_start = i + 1;
					continue;
				}
				r->scanned = i + 1;
				*ret_len = i + 1;
				return 1;
			}
			if (r->start_line_end == 0)
				r->start_line_end = i + 1;
			r->line_start = i + 1;
			continue;
		}
		if (c == '\n')
			return fail(ret_status, err, bad,
			            "bare LF in the message head (lines end in CRLF)");
		if (c == '\r')
			r->last_cr = true;
	}
	r->scanned = len;
	return 0;
}

/* Splits the NUL-terminated copy of a head (CRLF line ends guaranteed by head_scan) into its
 * start line and its fields. */
static int split_fields(struct http_head *h, char *fields_start, unsigned bad, unsigned *ret_status,
                        struct slate_error *err)
{
	size_t n = 0, cap = 0;
	char *line = fields_start;

	while (*line) {
		char *eol = strstr(line, "\r\n"), *colon, *v, *end;
		if (!eol)
			return fail(ret_status, err, bad, "malformed field line");
		if (eol == line)
			break; /* the empty line that ends the head */
		*eol = '\0';
		if (is_ows(*line))
			return fail(ret_status, err, bad,
			            "obs-fold (a field line starting with whitespace)");
		colon = line;
		while (*colon && http_is_tchar((unsigned char)*colon))
			colon++;
		if (colon == line)
			return fail(ret_status, err, bad, "empty or invalid field name");
		if (*colon != ':')
			return fail(ret_status, err, bad,
			            is_ows(*colon) ? "whitespace between a field name and its colon"
			                           : "invalid character in a field name");
		*colon = '\0';
		v = colon + 1;
		for (char *q = v; *q; q++)
			if (!is_field_char((unsigned char)*q))
				return fail(ret_status, err, bad,
				            "control character in a field value");
		while (is_ows(*v))
			v++;
		end = v + strlen(v);
		while (end > v && is_ows(end[-1]))
			*--end = '\0';
		if (n == HTTP_MAX_FIELDS)
			return fail(ret_status, err, bad == 400 ? 431 : bad,
			            "too many header fields");
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct http_field *nf;
			if (ncap > HTTP_MAX_FIELDS)
				ncap = HTTP_MAX_FIELDS;
			nf = realloc(h->fields, ncap * sizeof(*nf));
			if (!nf)
				return -ENOMEM;
			h->fields = nf;
			cap = ncap;
		}
		h->fields[n++] = (struct http_field){.name = line, .value = v};
		line = eol + 2;
	}
	h->n_fields = n;
	return 0;
}

const char *http_head_get(const struct http_head *h, const char *name, size_t *ret_count)
{
	const char *v = NULL;
	size_t count = 0;

	for (size_t i = 0; i < h->n_fields; i++)
		if (strcasecmp(h->fields[i].name, name) == 0) {
			if (!v)
				v = h->fields[i].value;
			count++;
		}
	if (ret_count)
		*ret_count = count;
	return v;
}

/*
 * Walks the comma-separated list elements of value (RFC 9110 5.6.1): calls fn with each element,
 * trimmed. Empty elements are passed too (length 0), so that callers can refuse them.
 */
typedef int (*list_fn)(const char *e, size_t len, void *userdata);
static int list_walk(const char *value, list_fn fn, void *userdata)
{
	const char *p = value;

	for (;;) {
		const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
		const char *s = p, *e = end;
		int r;
		while (s < e && is_ows(*s))
			s++;
		while (e > s && is_ows(e[-1]))
			e--;
		r = fn(s, (size_t)(e - s), userdata);
		if (r != 0)
			return r;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

struct has_ctx {
	const char *token;
};
static int has_fn(const char *e, size_t len, void *userdata)
{
	struct has_ctx *c = userdata;
	return len == strlen(c->token) && strncasecmp(e, c->token, len) == 0;
}

bool http_list_has(const char *value, const char *token)
{
	struct has_ctx c = {token};
	return value && list_walk(value, has_fn, &c) > 0;
}

/* Transfer-Encoding: every element over every field, in order. */
struct te_ctx {
	unsigned n;
	bool chunked_seen, chunked_last, bad;
};
static int te_fn(const char *e, size_t len, void *userdata)
{
	struct te_ctx *c = userdata;

	if (len == 0) {
		c->bad = true; /* "chunked," or ",chunked": refused, not guessed at */
		return 1;
	}
	for (size_t i = 0; i < len; i++)
		if (!http_is_tchar((unsigned char)e[i])) {
			c->bad = true; /* parameters or junk */
			return 1;
		}
	c->n++;
	c->chunked_last = len == 7 && strncasecmp(e, "chunked", 7) == 0;
	if (c->chunked_last) {
		if (c->chunked_seen) {
			c->bad = true; /* chunked twice */
			return 1;
		}
		c->chunked_seen = true;
	}
	return 0;
}

struct cl_ctx {
	bool have, bad;
	uint64_t v;
};
static int cl_fn(const char *e, size_t len, void *userdata)
{
	struct cl_ctx *c = userdata;
	uint64_t v = 0;

	if (len == 0 || len > 19) {
		c->bad = true;
		return 1;
	}
	for (size_t i = 0; i < len; i++) {
		if (e[i] < '0' || e[i] > '9') {
			c->bad = true;
			return 1;
		}
		v = v * 10 + (uint64_t)(e[i] - '0');
	}
	if (v > HTTP_MAX_CONTENT_LENGTH || (c->have && v != c->v)) {
		c->bad = true;
		return 1;
	}
	c->have = true;
	c->v = v;
	return 0;
}

/* Content-Length and Transfer-Encoding into h->framing (RFC 9112 6.3). */
static int framing(struct http_head *h, const char *request_method, unsigned *ret_status,
                   struct slate_error *err)
{
	struct te_ctx te = {0};
	struct cl_ctx cl = {0};
	unsigned bad = h->response ? 502 : 400;
	bool have_te = false;

	for (size_t i = 0; i < h->n_fields; i++) {
		const char *n = h->fields[i].name;
		if (strcasecmp(n, "transfer-encoding") == 0) {
			have_te = true;
			(void)list_walk(h->fields[i].value, te_fn, &te);
		} else if (strcasecmp(n, "content-length") == 0)
			(void)list_walk(h->fields[i].value, cl_fn, &cl);
	}
	if (cl.bad)
		return fail(ret_status, err, bad, "invalid or conflicting Content-Length");
	if (have_te && te.bad)
		return fail(ret_status, err, bad, "invalid Transfer-Encoding");
	if (have_te && cl.have)
		return fail(ret_status, err, bad, "both Transfer-Encoding and Content-Length");
	if (have_te && h->version_minor == 0)
		return fail(ret_status, err, bad, "Transfer-Encoding in an HTTP/1.0 message");

	if (h->response) {
		if ((h->status >= 100 && h->status < 200) || h->status == 204 || h->status == 304 ||
		    (request_method && strcmp(request_method, "HEAD") == 0)) {
			h->framing = HTTP_BODY_NONE;
			return 0;
		}
		if (have_te)
			h->framing = te.chunked_last && te.n == 1 ? HTTP_BODY_CHUNKED
			                                          : HTTP_BODY_UNTIL_CLOSE;
		else if (cl.have) {
			h->framing = HTTP_BODY_LENGTH;
			h->content_length = cl.v;
		} else
			h->framing = HTTP_BODY_UNTIL_CLOSE;
		return 0;
	}
	if (have_te) {
		if (!te.chunked_last)
			return fail(ret_status, err, 400,
			            "chunked is not the final transfer coding");
		if (te.n != 1)
			return fail(ret_status, err, 501, "transfer codings other than chunked");
		h->framing = HTTP_BODY_CHUNKED;
	} else if (cl.have) {
		h->framing = cl.v > 0 ? HTTP_BODY_LENGTH : HTTP_BODY_NONE;
		h->content_length = cl.v;
	} else
		h->framing = HTTP_BODY_NONE;
	return 0;
}

static void connection_options(struct http_head *h)
{
	bool close = false, keep = false, upgrade = false;

	for (size_t i = 0; i < h->n_fields; i++)
		if (strcasecmp(h->fields[i].name, "connection") == 0) {
			close |= http_list_has(h->fields[i].value, "close");
			keep |= http_list_has(h->fields[i].value, "keep-alive");
			upgrade |= http_list_has(h->fields[i].value, "upgrade");
		}
	h->keep_alive = !close && (h->version_minor >= 1 || keep);
	if (h->framing == HTTP_BODY_UNTIL_CLOSE)
		h->keep_alive = false;
	h->upgrade = upgrade && http_head_get(h, "upgrade", NULL) != NULL;
}

/* "HTTP/1.x" at p: 1 and the minor version, 0 for another HTTP version, < 0 for junk. */
static int parse_version(const char *p, unsigned *ret_minor)
{
	if (strncmp(p, "HTTP/", 5) != 0)
		return -1;
	p += 5;
	if (p[0] < '0' || p[0] > '9' || p[1] != '.' || p[2] < '0' || p[2] > '9' || p[3] != '\0')
		return -1;
	if (p[0] != '1' || p[2] > '1')
		return 0;
	*ret_minor = (unsigned)(p[2] - '0');
	return 1;
}

static int parse_common(struct http_reader *r, struct buf *in, bool request,
                        const char *request_method, struct http_head **ret, unsigned *ret_status,
                        struct slate_error *err)
{
	_cleanup_(http_head_freep) struct http_head *h = NULL;
	size_t head_len = 0, skip;
	unsigned bad = request ? 400 : 502;
	char *line, *eol, *sp1, *sp2;
	int r2, v;

	r2 = head_scan(r, in, request, &head_len, ret_status, err);
	if (r2 <= 0)
		return r2;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->response = !request;
	h->head_len = head_len;
	skip = 2 * r->leading;
	h->mem = malloc(head_len - skip + 1);
	if (!h->mem)
		return -ENOMEM;
	memcpy(h->mem, buf_ptr(in) + skip, head_len - skip);
	h->mem[head_len - skip] = '\0';

	line = h->mem;
	eol = strstr(line, "\r\n");
	if (!eol)
		return fail(ret_status, err, bad, "malformed start line");
	*eol = '\0';
	for (char *q = line; *q; q++)
		if (!is_field_char((unsigned char)*q))
			return fail(ret_status, err, bad, "control character in the start line");
	if (request) {
		/* method SP request-target SP HTTP-version, single spaces (RFC 9112 3). */
		sp1 = strchr(line, ' ');
		if (!sp1 || sp1 == line)
			return fail(ret_status, err, 400, "malformed request line");
		*sp1 = '\0';
		for (char *q = line; *q; q++)
			if (!http_is_tchar((unsigned char)*q))
				return fail(ret_status, err, 400, "invalid method");
		sp2 = strchr(sp1 + 1, ' ');
		if (!sp2 || sp2 == sp1 + 1)
			return fail(ret_status, err, 400, "malformed request line");
		*sp2 = '\0';
		for (char *q = sp1 + 1; *q; q++)
			if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f)
				return fail(ret_status, err, 400,
				            "invalid character in the request target");
		v = parse_version(sp2 + 1, &h->version_minor);
		if (v < 0)
			return fail(ret_status, err, 400, "malformed HTTP version");
		if (v == 0)
			return fail(ret_status, err, 505,
			            "only HTTP/1.0 and HTTP/1.1 are supported");
		h->method = line;
		h->target = sp1 + 1;
	} else {
		/* HTTP-version SP status-code SP [reason-phrase] */
		char *code;
		sp1 = strchr(line, ' ');
		if (!sp1)
			return fail(ret_status, err, 502, "malformed status line");
		*sp1 = '\0';
		v = parse_version(line, &h->version_minor);
		if (v <= 0)
			return fail(ret_status, err, 502,
			            "unsupported HTTP version in the response");
		code = sp1 + 1;
		if (code[0] < '1' || code[0] > '9' || code[1] < '0' || code[1] > '9' ||
		    code[2] < '0' || code[2] > '9' || (code[3] != ' ' && code[3] != '\0'))
			return fail(ret_status, err, 502, "malformed status code");
		h->status =
		        (unsigned)((code[0] - '0') * 100 + (code[1] - '0') * 10 + code[2] - '0');
		h->reason = code[3] ? code + 4 : code + 3;
	}

	r2 = split_fields(h, eol + 2, bad, ret_status, err);
	if (r2 < 0)
		return r2;
	if (request) {
		size_t n_host = 0;
		const char *expect;
		h->host = http_head_get(h, "host", &n_host);
		if (n_host > 1)
			return fail(ret_status, err, 400, "more than one Host field");
		if (n_host == 0 && h->version_minor >= 1)
			return fail(ret_status, err, 400, "no Host field");
		expect = http_head_get(h, "expect", NULL);
		if (expect) {
			if (strcasecmp(expect, "100-continue") != 0)
				return fail(ret_status, err, 417, "unsupported expectation");
			h->expect_continue = true;
		}
	}
	r2 = framing(h, request_method, ret_status, err);
	if (r2 < 0)
		return r2;
	connection_options(h);

	(void)buf_consume(in, head_len);
	http_reader_reset(r);
	*ret = TAKE_PTR(h);
	return 1;
}

int http_parse_request(struct http_reader *r, struct buf *in, struct http_head **ret,
                       unsigned *ret_status, struct slate_error *err)
{
	return parse_common(r, in, true, NULL, ret, ret_status, err);
}

int http_parse_response(struct http_reader *r, struct buf *in, const char *request_method,
                        struct http_head **ret, unsigned *ret_status, struct slate_error *err)
{
	return parse_common(r, in, false, request_method, ret, ret_status, err);
}

/* ---- chunked ---- */

enum {
	CK_SIZE = 0,  /* first hex digit */
	CK_SIZE_MORE, /* more hex digits, or what follows them */
	CK_EXT,       /* chunk extensions up to CR */
	CK_SIZE_LF,
	CK_DATA,
	CK_DATA_CR,
	CK_DATA_LF,
	CK_TRAILER_START, /* start of a trailer line, or the final CRLF */
	CK_TRAILER_NAME,
	CK_TRAILER_VALUE,
	CK_TRAILER_LF,
	CK_END_LF,
	CK_DONE,
};

int http_chunked_feed(struct http_chunked *c, const uint8_t *p, size_t len, size_t *ret_consumed,
                      const uint8_t **ret_data, size_t *ret_data_len)
{
	size_t i = 0;

	*ret_data = NULL;
	*ret_data_len = 0;
	while (i < len) {
		uint8_t b = p[i];
		int h;

		switch (c->state) {
		case CK_SIZE:
		case CK_SIZE_MORE:
			h = hex_digit(b, 0);
			if (h >= 0) {
				if (c->remaining != 0 || h != 0)
					c->digits++;
				if (c->digits > 15)
					return SLATE_ERR_INVALID_FORMAT; /* 2^60 is enough */
				c->remaining = c->remaining * 16 + (uint64_t)h;
				c->state = CK_SIZE_MORE;
			} else if (c->state == CK_SIZE) {
				return SLATE_ERR_INVALID_FORMAT;
			} else if (b == '\r') {
				c->state = CK_SIZE_LF;
			} else if (b == ';' || is_ows((char)b)) {
				c->state = CK_EXT;
			} else
				return SLATE_ERR_INVALID_FORMAT;
			break;
		case CK_EXT:
			/* BWS ";" name ["=" value], loosely: any field character up to CR. */
			if (b == '\r')
				c->state = CK_SIZE_LF;
			else if (!is_field_char(b))
				return SLATE_ERR_INVALID_FORMAT;
			break;
		case CK_SIZE_LF:
			if (b != '\n')
				return SLATE_ERR_INVALID_FORMAT;
			c->line_len = 0;
			c->digits = 0;
			c->state = c->remaining ? CK_DATA : CK_TRAILER_START;
			i++;
			continue;
		case CK_DATA: {
			size_t n = len - i;
			if ((uint64_t)n > c->remaining)
				n = (size_t)c->remaining;
			c->remaining -= n;
			if (c->remaining == 0)
				c->state = CK_DATA_CR;
			*ret_data = p + i;
			*ret_data_len = n;
			*ret_consumed = i + n;
			return 0;
		}
		case CK_DATA_CR:
			if (b != '\r')
				return SLATE_ERR_INVALID_FORMAT;
			c->state = CK_DATA_LF;
			break;
		case CK_DATA_LF:
			if (b != '\n')
				return SLATE_ERR_INVALID_FORMAT;
			c->state = CK_SIZE;
			i++;
			continue;
		case CK_TRAILER_START:
			if (b == '\r')
				c->state = CK_END_LF;
			else if (http_is_tchar(b))
				c->state = CK_TRAILER_NAME;
			else
				return SLATE_ERR_INVALID_FORMAT; /* obs-fold, junk */
			break;
		case CK_TRAILER_NAME:
			if (b == ':')
				c->state = CK_TRAILER_VALUE;
			else if (!http_is_tchar(b))
				return SLATE_ERR_INVALID_FORMAT;
			break;
		case CK_TRAILER_VALUE:
			if (b == '\r')
				c->state = CK_TRAILER_LF;
			else if (!is_field_char(b))
				return SLATE_ERR_INVALID_FORMAT;
			break;
		case CK_TRAILER_LF:
			if (b != '\n')
				return SLATE_ERR_INVALID_FORMAT;
			c->state = CK_TRAILER_START;
			break;
		case CK_END_LF:
			if (b != '\n')
				return SLATE_ERR_INVALID_FORMAT;
			c->state = CK_DONE;
			*ret_consumed = i + 1;
			return 1;
		default:
			return SLATE_ERR_INVALID_FORMAT;
		}
		/* Bytes of framing lines (not data) are bounded. */
		if (c->state >= CK_TRAILER_START) {
			if (++c->trailer_len > HTTP_MAX_TRAILER)
				return SLATE_ERR_INVALID_FORMAT;
		} else if (++c->line_len > HTTP_MAX_CHUNK_LINE)
			return SLATE_ERR_INVALID_FORMAT;
		i++;
	}
	*ret_consumed = i;
	return c->state == CK_DONE ? 1 : 0;
}

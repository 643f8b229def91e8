/* SPDX-License-Identifier: GPL-2.0-or-later */

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
/* We send CODE_FILE= and friends of our caller; without this sd-journal.h adds log.c's own. */
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-journal.h>

#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

/* Enough for the secrets of every running workspace; more than this is a bug somewhere. */
#define LOG_FORBID_MAX 256
#define LOG_FORBID_LEN_MAX 65536
#define LOG_IDENT_MAX 64
#define REDACTED "[redacted]"

struct forbidden {
	void *p; /* sodium_malloc()ed, PROT_NONE except while the lock is held for a scan */
	size_t len;
	unsigned refs; /* the same secret may be registered by several owners */
};

/* Everything below is guarded by log_lock, except max_level which is atomic. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static bool log_opened;
static char log_ident[LOG_IDENT_MAX];
static enum log_target log_target = LOG_TARGET_STDERR;
static struct forbidden forbidden[LOG_FORBID_MAX];
static size_t n_forbidden;
static int log_max_level = LOG_INFO;
#define JOURNAL_SOCKET "/run/systemd/journal/socket"
static const char *journal_socket = JOURNAL_SOCKET;

static bool journal_stream_is_stderr(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	int consumed = 0;

	if (!e || sscanf(e, "%llu:%llu%n", &dev, &ino, &consumed) != 2 || e[consumed] != '\0')
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/*
 * sd_journal_sendv() returns success when journald's socket does not exist (it "fails silently
 * if the journal is not available"), so AUTO must look for it first: a process that systemd
 * did not start but that inherited INVOCATION_ID, or one in a container without journald,
 * would otherwise log nowhere.
 */
static bool journal_available(void)
{
	return access(journal_socket, F_OK) == 0;
}

static enum log_target resolve_target(enum log_target target)
{
	const char *inv;

	if (target == LOG_TARGET_STDERR || target == LOG_TARGET_JOURNAL)
		return target;
	if (!journal_available())
		return LOG_TARGET_STDERR;
	if (journal_stream_is_stderr())
		return LOG_TARGET_JOURNAL;
	inv = getenv("INVOCATION_ID");
	if (inv && *inv)
		return LOG_TARGET_JOURNAL;
	return LOG_TARGET_STDERR;
}

void log_set_journal_socket(const char *path)
{
	(void)pthread_mutex_lock(&log_lock);
	journal_socket = path ? path : JOURNAL_SOCKET;
	(void)pthread_mutex_unlock(&log_lock);
}

/* Called with log_lock held. */
static void log_open_locked(const char *ident, enum log_target target)
{
	if (!ident || !*ident)
		ident = program_invocation_short_name;
	(void)snprintf(log_ident, sizeof(log_ident), "%s", ident ? ident : "slate");
	log_target = resolve_target(target);
	log_opened = true;
}

void log_open(const char *ident, enum log_target target)
{
	(void)pthread_mutex_lock(&log_lock);
	log_open_locked(ident, target);
	(void)pthread_mutex_unlock(&log_lock);
}

enum log_target log_get_target(void)
{
	enum log_target t;

	(void)pthread_mutex_lock(&log_lock);
	if (!log_opened)
		log_open_locked(NULL, LOG_TARGET_AUTO);
	t = log_target;
	(void)pthread_mutex_unlock(&log_lock);
	return t;
}

void log_set_max_level(int level)
{
	if (level < LOG_EMERG)
		level = LOG_EMERG;
	if (level > LOG_DEBUG)
		level = LOG_DEBUG;
	__atomic_store_n(&log_max_level, level, __ATOMIC_RELAXED);
}

int log_get_max_level(void)
{
	return __atomic_load_n(&log_max_level, __ATOMIC_RELAXED);
}

int log_level_from_string(const char *s)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {
	        {"emerg", LOG_EMERG},  {"alert", LOG_ALERT},   {"crit", LOG_CRIT},
	        {"err", LOG_ERR},      {"error", LOG_ERR},     {"warning", LOG_WARNING},
	        {"warn", LOG_WARNING}, {"notice", LOG_NOTICE}, {"info", LOG_INFO},
	        {"debug", LOG_DEBUG},
	};

	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		if (strcasecmp(s, names[i].name) == 0)
			return names[i].level;
	if (s[0] >= '0' && s[0] <= '7' && s[1] == '\0')
		return s[0] - '0';
	return -EINVAL;
}

/* Called with log_lock held: finds a registered secret with exactly these bytes. */
static struct forbidden *forbidden_find(const void *secret, size_t len)
{
	for (size_t i = 0; i < n_forbidden; i++) {
		struct forbidden *f = &forbidden[i];
		bool same;

		if (f->len != len)
			continue;
		(void)sodium_mprotect_readonly(f->p);
		same = sodium_memcmp(f->p, secret, len) == 0;
		(void)sodium_mprotect_noaccess(f->p);
		if (same)
			return f;
	}
	return NULL;
}

int log_forbid(const void *secret, size_t len)
{
	struct forbidden *f;
	void *p;
	int r = 0;

	if (!secret || len == 0)
		return -EINVAL;
	if (len > LOG_FORBID_LEN_MAX)
		return -E2BIG;
	if (sodium_init() < 0)
		return -ENOMEM;

	(void)pthread_mutex_lock(&log_lock);
	f = forbidden_find(secret, len);
	if (f) {
		if (f->refs == UINT_MAX)
			r = -E2BIG;
		else
			f->refs++;
		goto out;
	}
	if (n_forbidden >= LOG_FORBID_MAX) {
		r = -E2BIG;
		goto out;
	}
	p = sodium_malloc(len);
	if (!p) {
		r = -ENOMEM;
		goto out;
	}
	memcpy(p, secret, len);
	(void)sodium_mprotect_noaccess(p);
	forbidden[n_forbidden++] = (struct forbidden){.p = p, .len = len, .refs = 1};
out:
	(void)pthread_mutex_unlock(&log_lock);
	return r;
}

void log_unforbid(const void *secret, size_t len)
{
	struct forbidden *f;

	if (!secret || len == 0)
		return;
	(void)pthread_mutex_lock(&log_lock);
	f = forbidden_find(secret, len);
	if (f && --f->refs == 0) {
		/* sodium_free() wipes the bytes before unmapping them. */
		(void)sodium_mprotect_readwrite(f->p);
		sodium_free(f->p);
		*f = forbidden[--n_forbidden];
		forbidden[n_forbidden] = (struct forbidden){0};
	}
	(void)pthread_mutex_unlock(&log_lock);
}

/*
 * Called with log_lock held. Returns msg with every byte covered by an occurrence of any
 * registered secret replaced, each covered run by one "[redacted]". Marking bytes first and
 * replacing afterwards also hides secrets that overlap each other in the message, which
 * replacing one secret after the other would cut in half. Returns NULL when out of memory.
 */
static char *redact_locked(const char *msg, size_t len)
{
	_cleanup_free_ bool *mask = NULL;
	size_t runs = 0, outlen, o = 0;
	bool any = false;
	char *out;

	if (n_forbidden > 0 && len > 0) {
		mask = calloc(len, sizeof(bool));
		if (!mask)
			return NULL;
	}
	for (size_t i = 0; i < n_forbidden && len > 0; i++) {
		const struct forbidden *f = &forbidden[i];
		const char *at = msg;

		if (f->len > len)
			continue;
		(void)sodium_mprotect_readonly(f->p);
		while ((size_t)(at - msg) <= len - f->len) {
			const char *hit = memmem(at, len - (size_t)(at - msg), f->p, f->len);
			if (!hit)
				break;
			memset(mask + (hit - msg), true, f->len);
			any = true;
			/* Step one byte, not past the hit: occurrences may overlap themselves. */
			at = hit + 1;
		}
		(void)sodium_mprotect_noaccess(f->p);
	}

	if (!any)
		return strndup(msg, len);

	for (size_t i = 0; i < len; i++)
		if (mask[i] && (i == 0 || !mask[i - 1]))
			runs++;
	/* Each run is at least one byte long and becomes sizeof(REDACTED)-1 bytes. */
	if (runs > (SIZE_MAX - len - 1) / (sizeof(REDACTED) - 1))
		return NULL;
	outlen = len + runs * (sizeof(REDACTED) - 1);
	out = malloc(outlen + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		if (!mask[i]) {
			out[o++] = msg[i];
			continue;
		}
		if (i == 0 || !mask[i - 1]) {
			memcpy(out + o, REDACTED, sizeof(REDACTED) - 1);
			o += sizeof(REDACTED) - 1;
		}
	}
	out[o] = '\0';
	return out;
}

/* The optional journald fields of a line; NULL members are left out. */
struct log_fields {
	const char *message_id;
	const char *workspace;
	const char *domain;
	const char *image;
};

static bool id128_ok(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return false;
	return n == 32;
}

/* Called with log_lock held. Adds "NAME=value" (value redacted) as iov[*n]. */
static int add_field(struct iovec *iov, size_t *n, char **store, const char *name,
                     const char *value)
{
	_cleanup_free_ char *v = NULL;

	if (!value)
		return 0;
	v = redact_locked(value, strlen(value));
	if (!v || asprintf(store, "%s=%s", name, v) < 0) {
		*store = NULL;
		return -ENOMEM;
	}
	iov[(*n)++] = (struct iovec){*store, strlen(*store)};
	return 0;
}

/* Called with log_lock held. Returns 0 when journald took the message. */
static int write_journal(int level, int error, const struct log_fields *fields, const char *file,
                         int line, const char *func, const char *msg)
{
	_cleanup_free_ char *m = NULL, *f = NULL, *fn = NULL, *ws = NULL, *dom = NULL, *img = NULL;
	char prio[32], ln[32], id[sizeof("SYSLOG_IDENTIFIER=") + LOG_IDENT_MAX], errbuf[32];
	char mid[sizeof("MESSAGE_ID=") + 32];
	struct iovec iov[12];
	size_t n = 0;

	if (error != 0) {
		if (asprintf(&m, "MESSAGE=%s: %s", msg, slate_strerror(error)) < 0)
			m = NULL;
	} else if (asprintf(&m, "MESSAGE=%s", msg) < 0)
		m = NULL;
	if (!m)
		return -ENOMEM;
	iov[n++] = (struct iovec){m, strlen(m)};

	(void)snprintf(prio, sizeof(prio), "PRIORITY=%i", level);
	iov[n++] = (struct iovec){prio, strlen(prio)};
	(void)snprintf(id, sizeof(id), "SYSLOG_IDENTIFIER=%s", log_ident);
	iov[n++] = (struct iovec){id, strlen(id)};
	if (file) {
		if (asprintf(&f, "CODE_FILE=%s", file) < 0)
			return -ENOMEM;
		iov[n++] = (struct iovec){f, strlen(f)};
		(void)snprintf(ln, sizeof(ln), "CODE_LINE=%i", line);
		iov[n++] = (struct iovec){ln, strlen(ln)};
	}
	if (func) {
		if (asprintf(&fn, "CODE_FUNC=%s", func) < 0)
			return -ENOMEM;
		iov[n++] = (struct iovec){fn, strlen(fn)};
	}
	/* ERRNO= is for real errno values only; slate_err codes live above that range. */
	if (error != 0 && error > -SLATE_ERR_BASE) {
		(void)snprintf(errbuf, sizeof(errbuf), "ERRNO=%i", -error);
		iov[n++] = (struct iovec){errbuf, strlen(errbuf)};
	}
	/* A malformed ID would only confuse journalctl's catalog: leave it out. */
	if (fields->message_id && id128_ok(fields->message_id)) {
		(void)snprintf(mid, sizeof(mid), "MESSAGE_ID=%s", fields->message_id);
		iov[n++] = (struct iovec){mid, strlen(mid)};
	}
	if (add_field(iov, &n, &ws, "WORKSPACE", fields->workspace) < 0 ||
	    add_field(iov, &n, &dom, "DOMAIN", fields->domain) < 0 ||
	    add_field(iov, &n, &img, "IMAGE", fields->image) < 0)
		return -ENOMEM;
	return sd_journal_sendv(iov, (int)n);
}

/* Called with log_lock held. One write(), so concurrent writers cannot interleave a line. */
static void write_stderr(int error, const char *msg)
{
	_cleanup_free_ char *line = NULL;
	int n;

	if (error != 0)
		n = asprintf(&line, "%s: %s: %s\n", log_ident, msg, slate_strerror(error));
	else
		n = asprintf(&line, "%s: %s\n", log_ident, msg);
	if (n < 0)
		return;
	(void)fs_write_all(STDERR_FILENO, line, (size_t)n);
}

static int log_vinternal(int level, int error, const struct log_fields *fields, const char *file,
                         int line, const char *func, const char *fmt, va_list ap)
{
	_cleanup_free_ char *raw = NULL, *msg = NULL;
	int saved_errno = errno, n;

	/* -abs() without the overflow at INT_MIN; slate_err codes are already negative. */
	if (error > 0)
		error = -error;
	if ((level & LOG_PRIMASK) > log_get_max_level())
		return error;

	n = vasprintf(&raw, fmt, ap);
	if (n < 0)
		raw = NULL; /* its contents are undefined on failure */

	(void)pthread_mutex_lock(&log_lock);
	if (!log_opened)
		log_open_locked(NULL, LOG_TARGET_AUTO);
	if (n >= 0)
		msg = redact_locked(raw, (size_t)n);
	/* The unredacted text may hold a secret; do not leave it in freed heap. */
	if (raw)
		sodium_memzero(raw, (size_t)n);
	if (!msg) {
		/* Never fall back to the unredacted text. */
		msg = strdup("(log message lost: out of memory)");
		if (!msg)
			goto out;
	}
	if (log_target != LOG_TARGET_JOURNAL ||
	    write_journal(level & LOG_PRIMASK, error, fields, file, line, func, msg) < 0)
		write_stderr(error, msg);
out:
	(void)pthread_mutex_unlock(&log_lock);
	errno = saved_errno;
	return error;
}

int log_internal(int level, int error, const char *workspace, const char *file, int line,
                 const char *func, const char *fmt, ...)
{
	const struct log_fields fields = {.workspace = workspace};
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = log_vinternal(level, error, &fields, file, line, func, fmt, ap);
	va_end(ap);
	return r;
}

int log_event_internal(int level, const char *message_id, const char *workspace, const char *domain,
                       const char *image, const char *file, int line, const char *func,
                       const char *fmt, ...)
{
	const struct log_fields fields = {
	        .message_id = message_id, .workspace = workspace, .domain = domain, .image = image};
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = log_vinternal(level, 0, &fields, file, line, func, fmt, ap);
	va_end(ap);
	return r;
}

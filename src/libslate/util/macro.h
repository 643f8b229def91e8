/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Cleanup attributes and small helpers shared by every module (after systemd's macro.h). */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _warn_unused_result_ __attribute__((warn_unused_result))
#define _noreturn_ __attribute__((noreturn))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/* Hand ownership over: returns the value and leaves NULL (or -1) behind. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p_ = (p);                                                           \
		(p) = NULL;                                                                        \
		_p_;                                                                               \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd_ = (fd);                                                                   \
		(fd) = -1;                                                                         \
		_fd_;                                                                              \
	})

/* Convert a libc "-1 and errno" result into "-errno" in one place. */
#define RET_NERRNO(expr)                                                                           \
	({                                                                                         \
		__typeof__(expr) _r_ = (expr);                                                     \
		_r_ < 0 ? -errno : (int)_r_;                                                       \
	})

static inline void freep(void *p)
{
	free(*(void **)p);
}

/* close() that keeps errno, for cleanup paths. */
static inline int safe_close(int fd)
{
	if (fd >= 0) {
		int saved = errno;
		(void)close(fd);
		errno = saved;
	}
	return -1;
}
static inline void closep(int *fd)
{
	(void)safe_close(*fd);
}
static inline void fclosep(FILE **f)
{
	if (*f)
		(void)fclose(*f);
}

#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Define a NULL-accepting pointer destructor "funcp" for "func". */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                    \
	static inline void func##p(type *p)                                                        \
	{                                                                                          \
		if (*p)                                                                            \
			func(*p);                                                                  \
	}

#define streq(a, b) (strcmp((a), (b)) == 0)
#define strneq(a, b, n) (strncmp((a), (b), (n)) == 0)

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

#include <dirent.h>
DEFINE_TRIVIAL_CLEANUP_FUNC(DIR *, closedir);

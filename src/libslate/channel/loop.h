/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A small event loop on io_uring (liburing), run by one thread: fd interest with callbacks,
 * one-shot timers, and a locked queue of closures that any thread may post (an eventfd wakes
 * the loop). Everything but loop_post() and loop_call_sync() is for the loop's own thread.
 *
 * fd interest is level-triggered with the exact mask asked for. io_uring's poll always adds
 * POLLRDHUP to the mask, which would make a half-closed socket (the user's shutdown(SHUT_WR))
 * complete every poll at once; so the fds sit in an epoll set with their exact masks, and the
 * ring polls that set (and waits with the next timer's deadline).
 */

#include <stdbool.h>
#include <stdint.h>

struct loop;
struct loop_io;
struct loop_timer;

/* revents: POLLIN, POLLOUT, POLLHUP, POLLERR (poll.h values). */
typedef void (*loop_io_fn)(struct loop *l, int fd, uint32_t revents, void *userdata);
typedef void (*loop_timer_fn)(struct loop *l, void *userdata);
typedef void (*loop_call_fn)(void *userdata);

/* Returns 0 or -errno (-ENOSYS etc. when io_uring is not available). */
int loop_new(struct loop **ret);
/* Frees l; closures still queued are dropped without being called. NULL is fine. */
void loop_free(struct loop *l);
/* Runs until loop_quit(). Returns 0 or -errno. */
int loop_run(struct loop *l);
void loop_quit(struct loop *l);
/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t loop_now_ms(void);

/*
 * Watches fd for events (POLLIN/POLLOUT; POLLHUP and POLLERR are always reported while the
 * mask is not 0). A mask of 0 keeps the registration but takes fd out of the set, so that a
 * hung-up fd does not wake the loop until it is wanted again. The fd stays the caller's.
 */
int loop_io_add(struct loop *l, int fd, uint32_t events, loop_io_fn fn, void *userdata,
                struct loop_io **ret);
int loop_io_update(struct loop_io *io, uint32_t events);
/* Forgets io (call it before closing the fd). Safe from any callback, its own included. */
void loop_io_remove(struct loop_io *io);

/* Calls fn once, after ms milliseconds. The handle is valid until fn runs or it is cancelled. */
int loop_timer_add(struct loop *l, uint64_t ms, loop_timer_fn fn, void *userdata,
                   struct loop_timer **ret);
void loop_timer_cancel(struct loop *l, struct loop_timer *t);

/* From any thread: runs fn(userdata) on the loop's thread soon. Returns 0 or -ENOMEM. */
int loop_post(struct loop *l, loop_call_fn fn, void *userdata);
/* From any thread: runs fn(userdata) on the loop's thread and waits until it returned (runs it
 * at once when called on the loop's thread). Returns 0 or -ENOMEM. */
int loop_call_sync(struct loop *l, loop_call_fn fn, void *userdata);
/* Whether the caller is the thread running l. */
bool loop_is_current(struct loop *l);

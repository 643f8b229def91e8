/* SPDX-License-Identifier: GPL-2.0-or-later */

/* The channel manager's event loop: io_uring waits, epoll holds exact fd masks (loop.h). */

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "channel/loop.h"
#include "util/macro.h"
#include "util/time.h"

#define LOOP_RING_ENTRIES 16
#define LOOP_BATCH 64
#define LOOP_TAG_EPOLL 1

struct loop_io {
	struct loop *loop;
	int fd;
	uint32_t events;
	bool in_set;
	bool dead;
	loop_io_fn fn;
	void *userdata;
	struct loop_io *next_dead;
};

struct loop_timer {
	uint64_t when;
	loop_timer_fn fn;
	void *userdata;
	struct loop_timer *next;
};

struct closure {
	loop_call_fn fn;
	void *userdata;
	struct closure *next;
};

struct loop {
	struct io_uring ring;
	bool ring_ok;
	int epfd, efd;
	bool ep_armed;
	bool quit;
	struct loop_io *efd_io;
	struct loop_timer *timers; /* sorted by when */
	struct loop_io *dead;      /* removed while events may still name them */
	pthread_mutex_t lock;      /* guards the closure queue */
	struct closure *q_head, *q_tail;
};

uint64_t loop_now_ms(void)
{
	return (uint64_t)time_mono_ms();
}

static void on_wakeup(struct loop *l, int fd, uint32_t revents, void *userdata)
{
	struct closure *q;
	uint64_t v;

	(void)read(fd, &v, sizeof(v));
	pthread_mutex_lock(&l->lock);
	q = l->q_head;
	l->q_head = l->q_tail = NULL;
	pthread_mutex_unlock(&l->lock);
	while (q) {
		struct closure *next = q->next;
		q->fn(q->userdata);
		free(q);
		q = next;
	}
}

int loop_new(struct loop **ret)
{
	struct loop *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	l->epfd = l->efd = -1;
	pthread_mutex_init(&l->lock, NULL);
	r = io_uring_queue_init(LOOP_RING_ENTRIES, &l->ring, 0);
	if (r < 0)
		goto fail;
	l->ring_ok = true;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->epfd < 0 || l->efd < 0) {
		r = -errno;
		goto fail;
	}
	r = loop_io_add(l, l->efd, POLLIN, on_wakeup, NULL, &l->efd_io);
	if (r < 0)
		goto fail;
	*ret = l;
	return 0;
fail:
	loop_free(l);
	return r;
}

static void free_dead(struct loop *l)
{
	while (l->dead) {
		struct loop_io *io = l->dead;
		l->dead = io->next_dead;
		free(io);
	}
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	if (l->efd_io)
		loop_io_remove(l->efd_io);
	free_dead(l);
	while (l->timers) {
		struct loop_timer *t = l->timers;
		l->timers = t->next;
		free(t);
	}
	while (l->q_head) {
		struct closure *q = l->q_head;
		l->q_head = q->next;
		free(q);
	}
	if (l->ring_ok)
		io_uring_queue_exit(&l->ring);
	(void)safe_close(l->epfd);
	(void)safe_close(l->efd);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

void loop_quit(struct loop *l)
{
	l->quit = true;
}

/* The loop this thread runs, if any. */
static __thread struct loop *current_loop;

bool loop_is_current(struct loop *l)
{
	return current_loop == l;
}

static int io_apply(struct loop_io *io, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = io};
	struct loop *l = io->loop;

	if (events == 0) {
		if (io->in_set && epoll_ctl(l->epfd, EPOLL_CTL_DEL, io->fd, NULL) < 0)
			return -errno;
		io->in_set = false;
	} else if (!io->in_set) {
		if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, io->fd, &ev) < 0)
			return -errno;
		io->in_set = true;
	} else if (events != io->events) {
		if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, io->fd, &ev) < 0)
			return -errno;
	}
	io->events = events;
	return 0;
}

int loop_io_add(struct loop *l, int fd, uint32_t events, loop_io_fn fn, void *userdata,
                struct loop_io **ret)
{
	struct loop_io *io = calloc(1, sizeof(*io));
	int r;

	if (!io)
		return -ENOMEM;
	*io = (struct loop_io){.loop = l, .fd = fd, .fn = fn, .userdata = userdata};
	r = io_apply(io, events);
	if (r < 0) {
		free(io);
		return r;
	}
	*ret = io;
	return 0;
}

int loop_io_update(struct loop_io *io, uint32_t events)
{
	if (io->dead)
		return -ESTALE;
	return io_apply(io, events);
}

void loop_io_remove(struct loop_io *io)
{
	if (!io || io->dead)
		return;
	(void)io_apply(io, 0);
	io->dead = true;
	io->next_dead = io->loop->dead;
	io->loop->dead = io;
}

int loop_timer_add(struct loop *l, uint64_t ms, loop_timer_fn fn, void *userdata,
                   struct loop_timer **ret)
{
	struct loop_timer *t = calloc(1, sizeof(*t)), **p;

	if (!t)
		return -ENOMEM;
	*t = (struct loop_timer){.when = loop_now_ms() + ms, .fn = fn, .userdata = userdata};
	for (p = &l->timers; *p && (*p)->when <= t->when; p = &(*p)->next)
		;
	t->next = *p;
	*p = t;
	if (ret)
		*ret = t;
	return 0;
}

void loop_timer_cancel(struct loop *l, struct loop_timer *t)
{
	for (struct loop_timer **p = &l->timers; *p; p = &(*p)->next)
		if (*p == t) {
			*p = t->next;
			free(t);
			return;
		}
}

int loop_post(struct loop *l, loop_call_fn fn, void *userdata)
{
	struct closure *q = malloc(sizeof(*q));
	uint64_t one = 1;

	if (!q)
		return -ENOMEM;
	*q = (struct closure){.fn = fn, .userdata = userdata};
	pthread_mutex_lock(&l->lock);
	if (l->q_tail)
		l->q_tail->next = q;
	else
		l->q_head = q;
	l->q_tail = q;
	pthread_mutex_unlock(&l->lock);
	(void)write(l->efd, &one, sizeof(one));
	return 0;
}

struct sync_call {
	loop_call_fn fn;
	void *userdata;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
};

static void run_sync(void *p)
{
	struct sync_call *s = p;

	s->fn(s->userdata);
	pthread_mutex_lock(&s->lock);
	s->done = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

int loop_call_sync(struct loop *l, loop_call_fn fn, void *userdata)
{
	struct sync_call s = {.fn = fn, .userdata = userdata};
	int r;

	if (loop_is_current(l)) {
		fn(userdata);
		return 0;
	}
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.cond, NULL);
	r = loop_post(l, run_sync, &s);
	if (r == 0) {
		pthread_mutex_lock(&s.lock);
		while (!s.done)
			pthread_cond_wait(&s.cond, &s.lock);
		pthread_mutex_unlock(&s.lock);
	}
	pthread_cond_destroy(&s.cond);
	pthread_mutex_destroy(&s.lock);
	return r;
}

static void run_timers(struct loop *l)
{
	uint64_t now = loop_now_ms();

	while (l->timers && l->timers->when <= now && !l->quit) {
		struct loop_timer *t = l->timers;
		l->timers = t->next;
		t->fn(l, t->userdata);
		free(t);
	}
}

static void dispatch_epoll(struct loop *l)
{
	struct epoll_event evs[LOOP_BATCH];
	int n = epoll_wait(l->epfd, evs, LOOP_BATCH, 0);

	for (int i = 0; i < n && !l->quit; i++) {
		struct loop_io *io = evs[i].data.ptr;
		/* An earlier callback of this batch may have removed it or narrowed its mask. */
		if (io->dead || !io->in_set)
			continue;
		uint32_t rev = evs[i].events & (io->events | POLLHUP | POLLERR);
		if (rev)
			io->fn(l, io->fd, rev, io->userdata);
	}
}

int loop_run(struct loop *l)
{
	current_loop = l;
	while (!l->quit) {
		struct io_uring_cqe *cqe = NULL;
		struct __kernel_timespec ts;
		bool epoll_ready = false;
		unsigned head, seen = 0;
		int r;

		if (!l->ep_armed) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
			if (!sqe) {
				current_loop = NULL;
				return -EBUSY; /* cannot happen: at most one is ever queued */
			}
			io_uring_prep_poll_add(sqe, l->epfd, POLLIN);
			io_uring_sqe_set_data64(sqe, LOOP_TAG_EPOLL);
			l->ep_armed = true;
		}
		if (l->timers) {
			uint64_t now = loop_now_ms(), when = l->timers->when;
			uint64_t ms = when > now ? when - now : 0;
			ts.tv_sec = (long long)(ms / 1000);
			ts.tv_nsec = (long long)(ms % 1000) * 1000000;
			r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
		} else {
			r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, NULL, NULL);
		}
		if (r < 0 && r != -ETIME && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
			current_loop = NULL;
			return r;
		}
		io_uring_for_each_cqe(&l->ring, head, cqe)
		{
			if (io_uring_cqe_get_data64(cqe) == LOOP_TAG_EPOLL) {
				l->ep_armed = false;
				epoll_ready = true;
			}
			seen++;
		}
		io_uring_cq_advance(&l->ring, seen);
		if (epoll_ready)
			dispatch_epoll(l);
		run_timers(l);
		free_dead(l);
	}
	current_loop = NULL;
	return 0;
}

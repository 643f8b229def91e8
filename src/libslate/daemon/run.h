/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* `slate run` (daemon/run.c). */

#include <stdbool.h>

struct daemon_ctx;
struct daemon_create_spec;
struct exec_first;

struct daemon_run_spec {
	const char *name;
	const struct daemon_create_spec *create; /* NULL: the workspace exists */
	bool rm;              /* delete the workspace this run created, whatever happens */
	unsigned keepalive_s; /* while the start waits, repeat its last progress this often */
};

/*
 * A run on a client connection (fd, its REQUEST already read into first): creates the workspace
 * (spec->create), starts it, runs the command in an exec session, and with rm deletes what it
 * created before the client hears the end (the command's EXIT, or why it failed). Progress and
 * errors reach the client as PROGRESS and ERROR records.
 */
void daemon_run(struct daemon_ctx *d, const struct daemon_run_spec *spec, int fd,
                const struct exec_first *first);

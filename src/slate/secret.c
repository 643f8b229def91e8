/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate secret: placeholder until its issue lands. */
#include <stdlib.h>

#include "slate.h"

int cmd_secret(struct slate_ctx *ctx, int argc, char **argv)
{
	(void)ctx;
	(void)argc;
	(void)argv;
	return slate_fail("secret", "not implemented yet");
}

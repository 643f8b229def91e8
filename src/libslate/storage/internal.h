/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* What the storage files share and nobody outside storage/ should see. */

#include "storage/storage.h"
#include "util/macro.h"

struct storage {
	enum storage_kind kind;
	int state_fd;      /* the state directory, O_RDONLY|O_DIRECTORY */
	int images_fd;     /* images/ on the clone-capable filesystem */
	int workspaces_fd; /* workspaces/ on the same filesystem */
	char *state_path;  /* absolute, canonical */
	char *root_path;   /* the directory holding images/ and workspaces/: state dir or pool */
	char *images_path;
	char *workspaces_path;
};

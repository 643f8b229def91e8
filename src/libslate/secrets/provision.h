/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * What a guest is given of a secret set: placeholders only, as environment variables and files.
 * slate-guest writes them at start (environment for exec sessions and login shells, files with
 * the modes given). The rendering, from the secrets' env and file settings:
 *   env               VAR=placeholder; for aws, env is a prefix: <P>_ACCESS_KEY_ID,
 *                     <P>_SECRET_ACCESS_KEY and <P>_SESSION_TOKEN
 *   ~/.env            VAR=placeholder lines (VAR: the secret's env, else its key; aws as above)
 *   ~/.git-credentials  https://x-access-token:placeholder@host per bound host (gitlab: oauth2)
 *   ~/.config/gh/hosts.yml  host: oauth_token: placeholder, git_protocol: https, per host
 *   ~/.aws/credentials  [default] (then [KEY] for further aws secrets) aws_access_key_id,
 *                     aws_secret_access_key, aws_session_token
 *   any other path    the bare placeholder (one line per secret)
 * Several secrets pointing at one file make one file. A later secret's variable replaces an
 * earlier one of the same name (the set lists global secrets first).
 */

#include <json-c/json.h>

#include "secrets/secrets.h"

#define PROVISION_FILE_MODE 0600

/*
 * Renders s for a guest whose user's home is guest_home (e.g. "/home/slate", or "~" to leave
 * "~/..." paths for slate-guest to resolve against its workspace user's home):
 *   {"env": {"VAR": "placeholder", ...},
 *    "files": [{"path": "/home/slate/.git-credentials", "mode": 384, "content": "..."}, ...]}
 * files sorted by path. Secrets without placeholders are skipped. Returns 0 or a negative error.
 */
int provision_render(const struct secret_set *s, const char *guest_home, struct json_object **ret);

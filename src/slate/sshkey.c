/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slate ssh-key generate|show|import: host-held keys for the workspace's sign-only agent. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/openssh.h"
#include "slate.h"
#include "util/json.h"
#include "workspace/workspace.h"

#define PASSPHRASE_TRIES 3

static const char usage_text[] =
        "Usage: slate ssh-key generate NAME\n"
        "       slate ssh-key show NAME\n"
        "       slate ssh-key import NAME FILE [--passphrase-file FILE]\n"
        "\n"
        "Keys for the workspace's sign-only SSH agent: inside the guest, $SSH_AUTH_SOCK lists\n"
        "them and signs with them; their private bytes stay on the host, sealed under the\n"
        "host's master key, and never enter the guest.\n"
        "\n"
        "generate makes the workspace's own ed25519 key pair and prints its public key (the\n"
        "comment names the workspace), ready to paste into a forge. show prints the public\n"
        "keys the agent offers, the generated one first. import takes an OpenSSH private key\n"
        "of any type OpenSSH supports (FILE \"-\": standard input); a key protected by a\n"
        "passphrase asks for it on the terminal, or reads the first line of --passphrase-file.\n"
        "The passphrase is needed once: the key is stored without it, sealed.\n"
        "'slate wipe-home' and 'slate rm' destroy the workspace's keys.\n";

static int call(struct slate_ctx *ctx, const char *method, const char *path,
                struct json_object *body, struct json_object **ret, struct api_error *err)
{
	_cleanup_(api_client_freep) struct api_client *client = NULL;

	if (slate_client(ctx, &client) < 0) {
		*err = (struct api_error){.code = -ECONNREFUSED};
		err->message[0] = '\0';
		return -1;
	}
	return api_client_call(client, method, path, body, NULL, NULL, ret, err);
}

static void print_key_line(struct json_object *key)
{
	const char *line = NULL;

	if (json_get_string(key, "public_key", &line) >= 0)
		printf("%s\n", line);
}

static int generate_cmd(struct slate_ctx *ctx, const char *name)
{
	_cleanup_json_ struct json_object *reply = NULL;
	char path[128 + WORKSPACE_NAME_MAX];
	struct api_error err;

	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/ssh-key", name);
	if (call(ctx, "POST", path, NULL, &reply, &err) < 0)
		return err.message[0] ? slate_api_fail("ssh-key generate", &err) : EXIT_FAILURE;
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	print_key_line(reply);
	return EXIT_SUCCESS;
}

static int show_cmd(struct slate_ctx *ctx, const char *name)
{
	_cleanup_json_ struct json_object *reply = NULL;
	char path[128 + WORKSPACE_NAME_MAX];
	struct json_object *keys;
	struct api_error err;
	size_t n;

	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/ssh-key", name);
	if (call(ctx, "GET", path, NULL, &reply, &err) < 0)
		return err.message[0] ? slate_api_fail("ssh-key show", &err) : EXIT_FAILURE;
	if (ctx->json)
		return slate_print_json(reply), EXIT_SUCCESS;
	if (json_get_array(reply, "keys", &keys) < 0)
		return slate_fail("ssh-key show", "slated's reply has no key list");
	n = json_object_array_length(keys);
	if (n == 0)
		return slate_fail("ssh-key show",
		                  "workspace '%s' has no SSH key ('slate ssh-key generate %s' or "
		                  "'slate ssh-key import %s FILE')",
		                  name, name, name);
	for (size_t i = 0; i < n; i++)
		print_key_line(json_object_array_get_idx(keys, i));
	return EXIT_SUCCESS;
}

/* Reads a whole file (or stdin for "-") into secure memory, NUL-terminated. */
static int read_secret_file(const char *what, const char *file, size_t max, char **ret,
                            size_t *ret_len)
{
	_cleanup_close_ int fd = -1;
	char *p;
	size_t n = 0;

	if (streq(file, "-"))
		fd = dup(STDIN_FILENO);
	else
		fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return slate_fail("ssh-key import", "%s %s: %s", what, file, strerror(errno)),
		       -errno;
	p = sodium_malloc(max + 2);
	if (!p)
		return slate_fail("ssh-key import", "out of memory"), -ENOMEM;
	for (;;) {
		ssize_t k = read(fd, p + n, max + 1 - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int e = errno;
			sodium_free(p);
			return slate_fail("ssh-key import", "reading %s %s: %s", what, file,
			                  strerror(e)),
			       -e;
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n > max) {
			sodium_free(p);
			return slate_fail("ssh-key import", "%s %s is larger than %zu bytes", what,
			                  file, max),
			       -EFBIG;
		}
	}
	p[n] = '\0';
	if (memchr(p, '\0', n)) {
		sodium_free(p);
		return slate_fail("ssh-key import", "%s %s is not text", what, file), -EINVAL;
	}
	*ret = p;
	*ret_len = n;
	return 0;
}

/* The first line of --passphrase-file, in secure memory. */
static int read_passphrase_file(const char *file, char **ret)
{
	char *p;
	size_t n;
	int r;

	r = read_secret_file("passphrase file", file, OPENSSH_PASSPHRASE_MAX + 2, &p, &n);
	if (r < 0)
		return r;
	p[strcspn(p, "\r\n")] = '\0';
	*ret = p;
	return 0;
}

/* Asks on the terminal, without echo. Returns 0, or -ENOTTY when there is no terminal. */
static int ask_passphrase(const char *file, char **ret)
{
	_cleanup_close_ int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
	struct termios saved, quiet;
	char *p;
	size_t n = 0;
	bool restore = false;

	if (fd < 0)
		return -ENOTTY;
	p = sodium_malloc(OPENSSH_PASSPHRASE_MAX + 2);
	if (!p)
		return -ENOMEM;
	dprintf(fd, "Enter passphrase for %s: ", file);
	if (tcgetattr(fd, &saved) == 0) {
		quiet = saved;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		restore = tcsetattr(fd, TCSAFLUSH, &quiet) == 0;
	}
	while (n < OPENSSH_PASSPHRASE_MAX + 1) {
		char c;
		ssize_t k = read(fd, &c, 1);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 || c == '\n' || c == '\r')
			break;
		p[n++] = c;
	}
	p[n] = '\0';
	if (restore)
		(void)tcsetattr(fd, TCSAFLUSH, &saved);
	dprintf(fd, "\n");
	*ret = p;
	return 0;
}

static void free_secret(char **p)
{
	if (*p)
		sodium_free(*p);
	*p = NULL;
}

/* Wipes a JSON string's bytes in place (json-c keeps its own copy of the value). */
static void wipe_member(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		sodium_memzero((void *)json_object_get_string(v),
		               (size_t)json_object_get_string_len(v));
}

static int import_cmd(struct slate_ctx *ctx, const char *name, const char *file,
                      const char *passphrase_file)
{
	_cleanup_(free_secret) char *key = NULL, *pass = NULL;
	_cleanup_json_ struct json_object *body = NULL;
	char path[128 + WORKSPACE_NAME_MAX];
	size_t key_len = 0;
	struct api_error err;
	int r;

	if (sodium_init() < 0)
		return slate_fail("ssh-key import", "libsodium cannot start");
	if (read_secret_file("key file", file, OPENSSH_KEY_MAX, &key, &key_len) < 0)
		return EXIT_FAILURE;
	if (passphrase_file && read_passphrase_file(passphrase_file, &pass) < 0)
		return EXIT_FAILURE;
	(void)snprintf(path, sizeof(path), "/v1/workspaces/%s/ssh-key/import", name);
	for (unsigned tries = 0;; tries++) {
		_cleanup_json_ struct json_object *reply = NULL;

		json_object_put(body);
		body = json_object_new_object();
		if (!body ||
		    json_add(body, "key", json_object_new_string_len(key, (int)key_len)) < 0 ||
		    (pass && json_add_string(body, "passphrase", pass) < 0))
			return slate_fail("ssh-key import", "out of memory");
		r = call(ctx, "POST", path, body, &reply, &err);
		wipe_member(body, "key");
		wipe_member(body, "passphrase");
		if (r >= 0) {
			if (ctx->json)
				return slate_print_json(reply), EXIT_SUCCESS;
			print_key_line(reply);
			return EXIT_SUCCESS;
		}
		if (!err.message[0])
			return EXIT_FAILURE;
		/* A protected key: ask on the terminal (never with --passphrase-file given). */
		if (passphrase_file || tries >= PASSPHRASE_TRIES ||
		    !(streq(err.kind, AGENT_API_ERR_PASSPHRASE_REQUIRED) ||
		      streq(err.kind, AGENT_API_ERR_PASSPHRASE_INCORRECT)))
			return slate_api_fail("ssh-key import", &err);
		if (streq(err.kind, AGENT_API_ERR_PASSPHRASE_INCORRECT))
			fprintf(stderr, "slate: ssh-key import: %s\n", err.message);
		free_secret(&pass);
		r = ask_passphrase(streq(file, "-") ? "the key" : file, &pass);
		if (r == -ENOTTY)
			return slate_fail("ssh-key import",
			                  "%s, and there is no terminal to ask on: use "
			                  "--passphrase-file FILE",
			                  err.message);
		if (r < 0)
			return slate_fail("ssh-key import", "out of memory");
	}
}

int cmd_ssh_key(struct slate_ctx *ctx, int argc, char **argv)
{
	enum { OPT_PASSFILE = 1 };
	static const struct option longopts[] = {
	        SLATE_COMMON_OPTS,
	        {"passphrase-file", required_argument, NULL, OPT_PASSFILE},
	        {},
	};
	const char *passphrase_file = NULL, *sub, *name;
	int c, nargs;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		if (slate_common_option(ctx, c, optarg))
			continue;
		switch (c) {
		case OPT_PASSFILE:
			passphrase_file = optarg;
			break;
		default:
			return slate_help_or_unknown(ctx, "ssh-key", c, usage_text, argv);
		}
	}
	nargs = argc - optind;
	if (nargs < 1)
		return slate_usage_error(ctx, "ssh-key: generate, show or import?");
	sub = argv[optind];
	if (!streq(sub, "generate") && !streq(sub, "show") && !streq(sub, "import"))
		return slate_usage_error(ctx,
		                         "ssh-key: unknown subcommand '%s' (generate, show, "
		                         "import)",
		                         sub);
	if (nargs < 2)
		return slate_usage_error(ctx, "ssh-key %s: give the workspace NAME", sub);
	name = argv[optind + 1];
	if (workspace_name_check(name) < 0)
		return slate_usage_error(ctx, "ssh-key %s: invalid name '%s': %s", sub, name,
		                         WORKSPACE_NAME_RULE);
	if (streq(sub, "import")) {
		if (nargs != 3)
			return slate_usage_error(ctx, "ssh-key import: give NAME and the key FILE");
		return import_cmd(ctx, name, argv[optind + 2], passphrase_file);
	}
	if (nargs != 2)
		return slate_usage_error(ctx, "ssh-key %s: unexpected argument '%s'", sub,
		                         argv[optind + 2]);
	if (passphrase_file)
		return slate_usage_error(ctx, "ssh-key %s: --passphrase-file is for import", sub);
	return streq(sub, "generate") ? generate_cmd(ctx, name) : show_cmd(ctx, name);
}

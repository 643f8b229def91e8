/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slated: the slate daemon. All logic lives in libslate; this file wires it together. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <libvirt/libvirt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "api/routes.h"
#include "api/server.h"
#include "channel/channels.h"
#include "image/postinstall.h"
#include "image/store.h"
#include "secrets/install.h"
#include "storage/storage.h"
#include "util/conf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/size.h"
#include "version.h"
#include "vm/kvm.h"
#include "workspace/workspace.h"

struct options {
	bool foreground;
	const char *config;
	char *state_dir;
	char *runtime_dir;
	char *libvirt_uri;
	char *log_level;
	char *storage;
	char *pool_size;
	char *trusted_keys;
	char *channel;
	char *catalog_url;
	char *core_dumps;
};

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: slated [OPTION]...\n"
	        "The slate daemon: one virtual machine per workspace, through libvirt.\n\n"
	        "  -f, --foreground        stay in the foreground, log to stderr (or journald)\n"
	        "  -c, --config FILE       configuration file (default %s/slate.conf)\n"
	        "      --state-dir DIR     state directory (default %s)\n"
	        "      --runtime-dir DIR   runtime directory, holds slated.sock (default %s)\n"
	        "      --libvirt-uri URI   libvirt connection (default qemu:///system)\n"
	        "      --log-level LEVEL   err, warning, notice, info or debug (default info)\n"
	        "      --probe-kvm         only say whether QEMU can run guests under KVM here:\n"
	        "                          exit 0 when it can, 1 when /dev/kvm exists but it\n"
	        "                          cannot, 2 when there is no usable /dev/kvm\n"
	        "  -h, --help              this help\n"
	        "  -V, --version           print the version\n",
	        SLATE_SYSCONF_DIR, SLATE_STATE_DIR, SLATE_RUNTIME_DIR);
}

/*
 * slated --probe-kvm: the probe slated itself runs before it picks an accelerator, for scripts
 * (.ci/setup) that must know whether to hide /dev/kvm from libvirtd. Prints one line.
 */
static int probe_kvm(void)
{
	struct stat st;
	int usable;

	log_set_max_level(LOG_WARNING);
	usable = vm_kvm_usable(NULL);
	printf("%s: %s\n", usable ? "usable" : "unusable", vm_kvm_reason());
	if (usable)
		return 0;
	return stat("/dev/kvm", &st) == 0 && S_ISCHR(st.st_mode) ? 1 : 2;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	enum { OPT_STATE = 256, OPT_RUNTIME, OPT_URI, OPT_LOG, OPT_PROBE_KVM };
	static const struct option longopts[] = {
	        {"foreground", no_argument, NULL, 'f'},
	        {"config", required_argument, NULL, 'c'},
	        {"state-dir", required_argument, NULL, OPT_STATE},
	        {"runtime-dir", required_argument, NULL, OPT_RUNTIME},
	        {"libvirt-uri", required_argument, NULL, OPT_URI},
	        {"log-level", required_argument, NULL, OPT_LOG},
	        {"probe-kvm", no_argument, NULL, OPT_PROBE_KVM},
	        {"help", no_argument, NULL, 'h'},
	        {"version", no_argument, NULL, 'V'},
	        {},
	};
	int c;

	while ((c = getopt_long(argc, argv, "fc:hV", longopts, NULL)) >= 0) {
		switch (c) {
		case 'f':
			o->foreground = true;
			break;
		case 'c':
			o->config = optarg;
			break;
		case OPT_STATE:
			free(o->state_dir);
			o->state_dir = strdup(optarg);
			break;
		case OPT_RUNTIME:
			free(o->runtime_dir);
			o->runtime_dir = strdup(optarg);
			break;
		case OPT_URI:
			free(o->libvirt_uri);
			o->libvirt_uri = strdup(optarg);
			break;
		case OPT_LOG:
			free(o->log_level);
			o->log_level = strdup(optarg);
			break;
		case OPT_PROBE_KVM:
			exit(probe_kvm());
		case 'h':
			usage(stdout);
			exit(EXIT_SUCCESS);
		case 'V':
			printf("slated %s (API version %d)\n", SLATE_VERSION, SLATE_API_VERSION);
			exit(EXIT_SUCCESS);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "slated: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* Settings from the file fill in what the command line left unset. */
static int apply_config(struct options *o)
{
	_cleanup_conf_ struct conf *cf = NULL;
	const char *path = o->config ? o->config : SLATE_SYSCONF_DIR "/slate.conf";
	struct conf_error err = {0};
	const char *v;
	int r;

	/* Unknown keys and bad values are errors, named as compilers do: FILE:LINE: why. */
	r = conf_load(path, &cf, &err);
	if (r < 0 && !(r == -ENOENT && !o->config)) {
		if (err.line > 0)
			log_error("%s:%u: %s", path, err.line, err.message);
		else
			log_error("cannot read configuration %s: %s", path,
			          err.message[0] ? err.message : slate_strerror(r));
		return r;
	}
	/* Without a file, every setting has its default (the table in util/conf.c). */
#define FILL(field, key)                                                                           \
	if (!o->field && (v = conf_value(cf, key)))                                                \
		o->field = strdup(v);
	FILL(state_dir, "state-dir");
	FILL(runtime_dir, "runtime-dir");
	FILL(libvirt_uri, "libvirt-uri");
	FILL(log_level, "log-level");
	FILL(storage, "storage");
	FILL(pool_size, "pool-size");
	FILL(trusted_keys, "trusted-keys");
	FILL(channel, "channel");
	FILL(catalog_url, "catalog-url");
	FILL(core_dumps, "core-dumps");
#undef FILL
	return 0;
}

/*
 * Opens workspace storage. A storage that cannot be opened (no loop devices, say) does not stop
 * the daemon: `slate doctor` and the workspace verbs then say why. Bad settings do.
 */
static int open_storage(const struct options *o, int state_fd, struct daemon_ctx *ctx)
{
	struct storage_config cfg = {.mode = STORAGE_MODE_AUTO};
	static char why[512];
	int r;

	if (o->storage) {
		if (streq(o->storage, "qcow2"))
			cfg.mode = STORAGE_MODE_QCOW2;
		else if (streq(o->storage, "pool"))
			cfg.mode = STORAGE_MODE_POOL;
		else if (!streq(o->storage, "auto"))
			return log_error_errno(-EINVAL, "storage = %s: use auto, pool or qcow2",
			                       o->storage);
	}
	if (o->pool_size) {
		r = size_parse(o->pool_size, &cfg.pool_size);
		if (r < 0 || cfg.pool_size < (256ull << 20))
			return log_error_errno(-EINVAL, "pool-size = %s: a size of at least 256M",
			                       o->pool_size);
	}
	_cleanup_free_ char *detail = NULL;

	r = storage_open_err(state_fd, o->state_dir, &cfg, &ctx->storage, &detail);
	if (r >= 0) {
		/* Installer VMs a crash left running go first: their scratch files are in the store. */
		int k = postinstall_sweep(ctx->storage, o->libvirt_uri);
		if (k < 0)
			log_warning("cannot look for leftover installer domains (libvirt %s): %s",
			            o->libvirt_uri, slate_strerror(k));
		r = image_store_sweep(ctx->storage);
		if (r >= 0)
			r = workspace_store_open(ctx->storage, &ctx->workspaces);
	}
	if (r < 0) {
		(void)snprintf(why, sizeof(why), "opening storage in %s: %s", o->state_dir,
		               detail ? detail : slate_strerror(r));
		log_error("%s; workspace verbs will fail until this is fixed", why);
		ctx->storage_error = why;
		workspace_store_free(ctx->workspaces);
		ctx->workspaces = NULL;
		storage_close(ctx->storage);
		ctx->storage = NULL;
		return 0;
	}
	return 0;
}

/*
 * Detaches from the terminal. The parent exits only when the child reports that it serves
 * (or why it cannot), so "slated && slate version" never races.
 */
static int daemonize(int *ret_notify_fd)
{
	int p[2];
	pid_t pid;
	char c = 1;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		(void)close(p[1]);
		if (read(p[0], &c, 1) != 1)
			c = 1;
		_exit(c == 0 ? EXIT_SUCCESS : EXIT_FAILURE);
	}
	(void)close(p[0]);
	if (setsid() < 0)
		return -errno;
	*ret_notify_fd = p[1];
	return 0;
}

static void detach_stdio(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return;
	(void)dup2(fd, STDIN_FILENO);
	(void)dup2(fd, STDOUT_FILENO);
	(void)dup2(fd, STDERR_FILENO);
	if (fd > STDERR_FILENO)
		(void)close(fd);
}

/*
 * slated's heap holds secret values on their way through (API requests, the JSON parser, the
 * proxy's and OpenSSL's buffers), not only in the guarded allocations that MADV_DONTDUMP keeps out
 * of a core. So the daemon makes no core dump at all, unless slate.conf says core-dumps = yes: a
 * core size limit of 0 that it cannot raise again (file cores; systemd-coredump honours it too)
 * and not dumpable (which also keeps other users from ptrace and /proc/PID/mem). Before any
 * secret is read, and before the fork that detaches, so the daemon inherits it; programs slated
 * runs are dumpable again after execve(), with the limit of 0.
 */
static int no_core_dumps(void)
{
	const struct rlimit zero = {0, 0};

	if (setrlimit(RLIMIT_CORE, &zero) < 0)
		return -errno;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return -errno;
	return 0;
}

int main(int argc, char **argv)
{
	struct options o = {0};
	_cleanup_(api_server_stopp) struct api_server *server = NULL;
	_cleanup_close_ int state_fd = -1, lock_fd = -1;
	int notify_fd = -1, listen_fd = -1, r, sig;
	struct daemon_ctx ctx = {0};
	const struct api_route *routes;
	struct api_server_config cfg;
	_cleanup_free_ char *sock = NULL;
	struct group *gr;
	size_t n_routes;
	sigset_t mask;

	log_open("slated", LOG_TARGET_AUTO);
	if (parse_args(argc, argv, &o) < 0)
		return 2;
	if (apply_config(&o) < 0)
		return EXIT_FAILURE;
	if (!o.core_dumps || streq(o.core_dumps, "no")) {
		r = no_core_dumps();
		if (r < 0)
			return log_error_errno(r, "cannot turn core dumps off"), EXIT_FAILURE;
	} else
		log_warning("core-dumps = yes: a crash writes slated's memory, secret values "
		            "included, wherever the kernel's core_pattern says");
	if (!o.state_dir)
		o.state_dir = strdup(SLATE_STATE_DIR);
	if (!o.runtime_dir)
		o.runtime_dir = strdup(SLATE_RUNTIME_DIR);
	if (!o.libvirt_uri)
		o.libvirt_uri = strdup("qemu:///system");
	if (!o.state_dir || !o.runtime_dir || !o.libvirt_uri)
		return log_error_errno(-ENOMEM, "out of memory"), EXIT_FAILURE;
	if (o.log_level) {
		r = log_level_from_string(o.log_level);
		if (r < 0) {
			log_error("unknown log level '%s'", o.log_level);
			return 2;
		}
		log_set_max_level(r);
	}

	r = fs_mkdir_p(o.state_dir, 0700);
	if (r < 0)
		return log_error_errno(r, "cannot create state directory %s", o.state_dir),
		       EXIT_FAILURE;
	r = fs_mkdir_p(o.runtime_dir, 0755);
	if (r < 0)
		return log_error_errno(r, "cannot create runtime directory %s", o.runtime_dir),
		       EXIT_FAILURE;
	state_fd = open(o.state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (state_fd < 0)
		return log_error_errno(-errno, "cannot open state directory %s", o.state_dir),
		       EXIT_FAILURE;
	/* One daemon per state directory: two would corrupt each other's workspaces. */
	r = fs_lock_at(state_fd, "slated.lock", &lock_fd);
	if (r == -EWOULDBLOCK) {
		log_error("another slated already serves state directory %s", o.state_dir);
		return EXIT_FAILURE;
	}
	if (r < 0)
		return log_error_errno(r, "cannot lock %s/slated.lock", o.state_dir), EXIT_FAILURE;

	/*
	 * Socket activation: systemd (or systemd-socket-activate) hands us the listening socket as
	 * fd 3. Taken before detaching, since LISTEN_PID names this process and not a child. Any
	 * other set of fds is a broken unit, not a reason to replace its socket with one of ours.
	 */
	r = sd_listen_fds(1);
	if (r > 1 || r < 0 ||
	    (r == 1 && sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0)) {
		log_error("socket activation: expected one listening unix stream socket (%s)",
		          r < 0 ? slate_strerror(r) : "got something else");
		return EXIT_FAILURE;
	}
	if (r == 1)
		listen_fd = SD_LISTEN_FDS_START;

	if (!o.foreground) {
		r = daemonize(&notify_fd);
		if (r < 0)
			return log_error_errno(r, "cannot detach"), EXIT_FAILURE;
	}

	if (virInitialize() < 0)
		return log_error("cannot initialise libvirt"), EXIT_FAILURE;

	(void)sd_notifyf(0, "STATUS=opening storage in %s", o.state_dir);
	r = open_storage(&o, state_fd, &ctx);
	if (r < 0)
		return EXIT_FAILURE;

	/* Signals are taken synchronously below; threads inherit the mask. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	(void)pthread_sigmask(SIG_BLOCK, &mask, NULL);

	sock = fs_path_join(o.runtime_dir, "slated.sock");
	if (!sock)
		return EXIT_FAILURE;
	gr = getgrnam("slate");
	ctx = (struct daemon_ctx){
	        .storage = ctx.storage,
	        .workspaces = ctx.workspaces,
	        .storage_error = ctx.storage_error,
	        .state_dir = o.state_dir,
	        .runtime_dir = o.runtime_dir,
	        .libvirt_uri = o.libvirt_uri,
	        .state_dirfd = state_fd,
	        .started = time(NULL),
	        .trusted_keys = o.trusted_keys ? o.trusted_keys : SLATE_SYSCONF_DIR "/trusted-keys",
	        .channel = o.channel ? o.channel : "stable",
	        .catalog_url = o.catalog_url};
	/* The guest channels, then domain events, the KVM probe, and domains that kept running
	 * while slated was away (their channels are connected again). */
	r = channels_new(&ctx.channels);
	if (r < 0)
		log_error_errno(r, "cannot start the guest channels (exec and shells will fail)");
	/* Vaults and host-held SSH keys need the master key; without it those verbs fail, the
	 * rest works. The services register on the channels before any guest connects. */
	r = install_open(state_fd, NULL, &ctx.install);
	if (r < 0)
		log_error_errno(r, "cannot open %s/install (secrets and SSH keys will fail)",
		                o.state_dir);
	if (agent_service_start(&ctx) < 0)
		log_error("cannot start the SSH agent service");
	if (proxy_service_start(&ctx) < 0)
		log_error("cannot start the egress proxy service");
	(void)sd_notify(0, "STATUS=picking up running workspaces");
	(void)vm_daemon_start(&ctx);
	routes = routes_table(&n_routes);
	cfg = (struct api_server_config){.socket_path = sock,
	                                 .listen_fd = listen_fd,
	                                 .socket_mode = 0660,
	                                 .socket_gid = gr ? gr->gr_gid : (gid_t)-1,
	                                 .routes = routes,
	                                 .n_routes = n_routes,
	                                 .userdata = &ctx};
	r = api_server_start(&cfg, &server);
	if (r < 0) {
		log_error_errno(r, "cannot serve on %s", sock);
		if (notify_fd >= 0)
			(void)fs_write_all(notify_fd, "\1", 1);
		return EXIT_FAILURE;
	}
	log_info("slated %s serving %s (state %s, libvirt %s)", SLATE_VERSION,
	         listen_fd >= 0 ? "the socket systemd passed" : sock, o.state_dir, o.libvirt_uri);
	(void)sd_notifyf(0, "READY=1\nSTATUS=serving %s%s%s\nMAINPID=%d",
	                 listen_fd >= 0 ? "the socket systemd passed" : sock,
	                 ctx.storage_error ? "; workspace verbs fail: " : "",
	                 ctx.storage_error ? ctx.storage_error : "", (int)getpid());
	if (notify_fd >= 0) {
		(void)fs_write_all(notify_fd, "", 1);
		(void)close(notify_fd);
		detach_stdio();
	}

	for (;;) {
		if (sigwait(&mask, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			log_info("SIGHUP: nothing to reload yet");
			continue;
		}
		break;
	}
	log_info("signal %d: shutting down", sig);
	/* Domains belong to libvirt: they keep running, and the next start picks them up. */
	(void)sd_notify(0, "STOPPING=1\nSTATUS=stopping; running workspaces keep running");
	api_server_stop(TAKE_PTR(server));
	proxy_service_stop(&ctx);
	agent_service_stop(&ctx);
	vm_daemon_stop(&ctx);
	install_free(TAKE_PTR(ctx.install));
	channels_free(TAKE_PTR(ctx.channels));
	workspace_store_free(ctx.workspaces);
	storage_close(ctx.storage);
	free(o.state_dir);
	free(o.runtime_dir);
	free(o.libvirt_uri);
	free(o.log_level);
	free(o.storage);
	free(o.pool_size);
	free(o.trusted_keys);
	free(o.channel);
	free(o.catalog_url);
	free(o.core_dumps);
	return EXIT_SUCCESS;
}

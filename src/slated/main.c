/* SPDX-License-Identifier: GPL-2.0-or-later */
/* slated: the slate daemon. All logic lives in libslate; this file wires it together. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <libvirt/libvirt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "agent/keys.h"
#include "api/client.h"
#include "api/routes.h"
#include "api/server.h"
#include "channel/channels.h"
#include "daemon/agent.h"
#include "daemon/browser.h"
#include "daemon/domains.h"
#include "daemon/egress.h"
#include "daemon/limits.h"
#include "daemon/snapshot.h"
#include "helper/client.h"
#include "image/postinstall.h"
#include "image/store.h"
#include "secrets/install.h"
#include "storage/rmtree.h"
#include "storage/storage.h"
#include "util/conf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/size.h"
#include "version.h"
#include "vm/domain.h"
#include "vm/kvm.h"
#include "workspace/workspace.h"

struct options {
	bool foreground;
	bool cleanup;
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
	char *socket_group;
	char *helper_socket;
	char *max_running;
	char *memory_budget;
	char *when_full;
	char *queue_timeout;
	char *boot_snapshots;
	char *browser_image;
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
	        "      --socket-group GROUP  the group that may use slated.sock (default: slate,\n"
	        "                          when that group exists; else root only)\n"
	        "      --libvirt-uri URI   libvirt connection (default qemu:///system)\n"
	        "      --log-level LEVEL   err, warning, notice, info or debug (default info)\n"
	        "      --helper-socket FILE  the socket of a slated-helper started separately\n"
	        "                          (systemd: slated-helper.socket); default: start one\n"
	        "                          of its own, from beside slated or from %s\n"
	        "      --boot-snapshots MODE  auto, use or off: fresh workspaces start from\n"
	        "                          booted snapshots of their image (slate.conf(5))\n"
	        "      --browser-image ID  the image of workspaces' browser VMs (slate.conf(5))\n"
	        "      --cleanup           serve nothing: unmount the state directory's storage\n"
	        "                          pool and remove the runtime directory, when no\n"
	        "                          slated and no domain uses them, and say what it did\n"
	        "      --probe-kvm         only say whether QEMU can run guests under KVM here:\n"
	        "                          exit 0 when it can, 1 when /dev/kvm exists but it\n"
	        "                          cannot, 2 when there is no usable /dev/kvm\n"
	        "  -h, --help              this help\n"
	        "  -V, --version           print the version\n",
	        SLATE_SYSCONF_DIR, SLATE_STATE_DIR, SLATE_RUNTIME_DIR, SLATE_LIBEXEC_DIR);
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
	enum {
		OPT_STATE = 256,
		OPT_RUNTIME,
		OPT_URI,
		OPT_LOG,
		OPT_PROBE_KVM,
		OPT_SOCKET_GROUP,
		OPT_CLEANUP,
		OPT_HELPER_SOCKET,
		OPT_BOOT_SNAPSHOTS,
		OPT_BROWSER_IMAGE
	};
	static const struct option longopts[] = {
	        {"foreground", no_argument, NULL, 'f'},
	        {"config", required_argument, NULL, 'c'},
	        {"state-dir", required_argument, NULL, OPT_STATE},
	        {"runtime-dir", required_argument, NULL, OPT_RUNTIME},
	        {"libvirt-uri", required_argument, NULL, OPT_URI},
	        {"log-level", required_argument, NULL, OPT_LOG},
	        {"probe-kvm", no_argument, NULL, OPT_PROBE_KVM},
	        {"socket-group", required_argument, NULL, OPT_SOCKET_GROUP},
	        {"cleanup", no_argument, NULL, OPT_CLEANUP},
	        {"helper-socket", required_argument, NULL, OPT_HELPER_SOCKET},
	        {"boot-snapshots", required_argument, NULL, OPT_BOOT_SNAPSHOTS},
	        {"browser-image", required_argument, NULL, OPT_BROWSER_IMAGE},
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
		case OPT_SOCKET_GROUP:
			free(o->socket_group);
			o->socket_group = strdup(optarg);
			break;
		case OPT_CLEANUP:
			o->cleanup = true;
			break;
		case OPT_BOOT_SNAPSHOTS:
			free(o->boot_snapshots);
			o->boot_snapshots = strdup(optarg);
			break;
		case OPT_BROWSER_IMAGE:
			free(o->browser_image);
			o->browser_image = strdup(optarg);
			break;
		case OPT_HELPER_SOCKET:
			free(o->helper_socket);
			o->helper_socket = strdup(optarg);
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
	struct slate_error err = {0};
	const char *v;
	int r;

	/* Unknown keys and bad values are errors, named as compilers do: FILE:LINE: why. */
	r = conf_load(path, &cf, &err);
	if (r < 0 && !(r == -ENOENT && !o->config)) {
		log_error("%s", err.code ? slate_error_text(&err) : slate_strerror(r));
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
	FILL(socket_group, "socket-group");
	FILL(max_running, "max-running");
	FILL(memory_budget, "memory-budget");
	FILL(when_full, "when-full");
	FILL(queue_timeout, "queue-timeout");
	FILL(boot_snapshots, "boot-snapshots");
	FILL(browser_image, "browser-image");
#undef FILL
	return 0;
}

/*
 * The pool's privileged steps, as slated-helper does them (helper/client.h), or, when no helper
 * could be started, a refusal that says why: slated does not mount anything itself (under
 * systemd it could not: it has no loop devices, and its mounts stay in its own namespace).
 */
static struct storage_privops privops;
static char helper_why[512];

static int no_helper(void *userdata, const char *state_path, struct slate_error *err)
{
	return slate_error_set(err, -ENOTCONN,
	                       "the storage pool of %s needs slated-helper, and there is none: %s",
	                       state_path, (const char *)userdata);
}

/*
 * Connects to the helper --helper-socket names (systemd's slated-helper.socket), or starts one
 * for the state directory over a socketpair: before anything else, while slated still has the
 * privileges the helper needs. Returns NULL when there is none (helper_why says why); privops
 * is set either way.
 */
static struct helper *start_helper(const struct options *o)
{
	_cleanup_free_ char *canon = NULL, *bin = NULL;
	struct helper *h = NULL;
	int r;

	if (o->helper_socket) {
		struct slate_error err = {0};

		r = helper_connect(o->helper_socket, &h, &err);
		if (r < 0)
			(void)snprintf(helper_why, sizeof(helper_why), "%s",
			               slate_error_text(&err));
	} else {
		canon = realpath(o->state_dir, NULL);
		r = canon ? helper_find_binary(&bin) : -errno;
		/* SLATE_VIRTIOFSD: the virtiofsd tests run, as api/vm.c has it. */
		if (r >= 0)
			r = helper_spawn(bin, canon, o->log_level, getenv("SLATE_VIRTIOFSD"), &h);
		if (r == -ENOENT && canon)
			(void)snprintf(helper_why, sizeof(helper_why),
			               "no slated-helper beside slated or in %s",
			               SLATE_LIBEXEC_DIR);
		else if (r < 0)
			(void)snprintf(helper_why, sizeof(helper_why), "cannot start %s: %s",
			               bin ? bin : "slated-helper", slate_strerror(r));
	}
	if (!h) {
		log_error("%s; the storage pool cannot be mounted and shares cannot be served",
		          helper_why);
		privops = (struct storage_privops){
		        .pool_mount = no_helper, .pool_unmount = no_helper, .userdata = helper_why};
		return NULL;
	}
	log_debug("privileged acts go to %s", helper_describe(h));
	helper_storage_privops(h, &privops);
	return h;
}

/*
 * Opens workspace storage. A storage that cannot be opened (no loop devices, say) does not stop
 * the daemon: `slate doctor` and the workspace verbs then say why. Bad settings do.
 */
static int open_storage(const struct options *o, int state_fd, struct daemon_ctx *ctx)
{
	struct storage_config cfg = {.mode = STORAGE_MODE_AUTO, .privops = &privops};
	/* wipe-home keeps the SSH keys the user imported (agent/keys.h). */
	static const struct workspace_hooks ws_hooks = {.keep_ssh_keys = agent_keys_keep_imported};
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
	struct slate_error err = {0};

	r = storage_open(state_fd, o->state_dir, &cfg, &ctx->storage, &err);
	if (r >= 0) {
		/* Installer VMs a crash left running go first: their scratch files are in the store. */
		int k = postinstall_sweep(ctx->storage, o->libvirt_uri);
		if (k < 0)
			log_warning("cannot look for leftover installer domains (libvirt %s): %s",
			            o->libvirt_uri, slate_strerror(k));
		r = image_store_sweep(ctx->storage);
		if (r >= 0)
			r = workspace_store_open(ctx->storage, &ws_hooks, &ctx->workspaces);
	}
	if (r < 0) {
		(void)snprintf(why, sizeof(why), "opening storage in %s: %.400s", o->state_dir,
		               err.msg[0] ? err.msg : slate_strerror(r));
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

/* Creates the missing parents of the state directory dir, traversable by everyone. */
static int state_dir_parents(const char *dir)
{
	_cleanup_free_ char *p = strdup(dir);
	char *slash;

	if (!p)
		return -ENOMEM;
	slash = strrchr(p, '/');
	if (!slash || slash == p)
		return 0;
	*slash = '\0';
	return fs_mkdir_p(p, 0711);
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

/* SLATED_IDLE_TIMEOUT_S: how long a connection may stay silent (slated(8); tests shorten it). */
static unsigned idle_timeout_from_env(void)
{
	const char *v = getenv("SLATED_IDLE_TIMEOUT_S");
	char *end;
	long n;

	if (!v)
		return 0;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < 1 || n > 3600) {
		log_warning("SLATED_IDLE_TIMEOUT_S=%s: whole seconds, 1 to 3600; using the default",
		            v);
		return 0;
	}
	return (unsigned)n;
}

/*
 * The group of slated.sock: --socket-group / socket-group (a name or a gid, which must exist),
 * else "slate" when that group exists, else none: (gid_t)-1 leaves the socket root's, so only
 * root may use it. *ret_name gets the group's name ("" for none).
 */
static int socket_group_resolve(const char *spec, gid_t *ret_gid, char *ret_name, size_t len)
{
	struct group *gr;
	unsigned long n;
	char *end;

	ret_name[0] = '\0';
	if (!spec) {
		gr = getgrnam("slate");
		*ret_gid = gr ? gr->gr_gid : (gid_t)-1;
		if (gr)
			(void)snprintf(ret_name, len, "%s", gr->gr_name);
		return 0;
	}
	errno = 0;
	n = strtoul(spec, &end, 10);
	if (*spec >= '0' && *spec <= '9' && !*end && !errno && n < (unsigned long)(gid_t)-1) {
		gr = getgrgid((gid_t)n);
		*ret_gid = (gid_t)n;
		(void)snprintf(ret_name, len, "%s", gr ? gr->gr_name : spec);
		return 0;
	}
	gr = getgrnam(spec);
	if (!gr)
		return log_error_errno(-ENOENT, "socket group '%s': no such group (groupadd %s)",
		                       spec, spec);
	*ret_gid = gr->gr_gid;
	(void)snprintf(ret_name, len, "%s", gr->gr_name);
	return 0;
}

/* Whether <state>/pool is a mount point (the pool's mount, normally). */
static bool pool_mounted(int state_fd)
{
	struct stat a, b;

	return fstat(state_fd, &a) == 0 &&
	       fstatat(state_fd, "pool", &b, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(b.st_mode) &&
	       a.st_dev != b.st_dev;
}

/*
 * Unmounts the loop-backed pool of the state directory when no domain and nothing else uses
 * it; running workspaces keep theirs mounted. msg says what happened. Returns 1 when it
 * unmounted the pool, 0 when none was mounted, < 0 when it stays mounted.
 */
static int release_pool(int state_fd, const char *state_dir, const char *uri, char *msg, size_t len)
{
	_cleanup_free_ char *canon = NULL, *pool = NULL;
	struct slate_error why = {0};
	char first[256] = "";
	int n, r;

	if (!pool_mounted(state_fd)) {
		(void)snprintf(msg, len, "no storage pool is mounted on %s/pool", state_dir);
		return 0;
	}
	canon = realpath(state_dir, NULL);
	if (!canon)
		return (void)snprintf(msg, len, "cannot resolve %s: %s", state_dir,
		                      strerror(errno)),
		       -errno;
	pool = fs_path_join(canon, "pool");
	if (!pool)
		return -ENOMEM;
	/* QEMU may run in libvirt's own mount namespace, where it does not keep ours busy. */
	n = vm_domains_using(uri, pool, first, sizeof(first));
	if (n < 0) {
		(void)snprintf(msg, len,
		               "the storage pool %s stays mounted: cannot ask libvirt (%s) whether "
		               "a domain uses it",
		               pool, uri);
		return n;
	}
	if (n > 0) {
		(void)snprintf(
		        msg, len,
		        "the storage pool %s stays mounted: %d running domain%s (%s%s) use%s "
		        "it",
		        pool, n, n == 1 ? "" : "s", first, n == 1 ? "" : ", ...",
		        n == 1 ? "s" : "");
		return -EBUSY;
	}
	r = storage_pool_unmount(state_fd, canon, &privops, &why);
	if (r == -EBUSY)
		(void)snprintf(msg, len,
		               "the storage pool %s stays mounted: something has files open in it "
		               "('fuser -vm %s' says what)",
		               pool, pool);
	else if (r < 0)
		(void)snprintf(msg, len, "the storage pool %s stays mounted: %.900s", pool,
		               why.msg[0] ? why.msg : slate_strerror(r));
	else if (r > 0)
		(void)snprintf(msg, len, "unmounted the storage pool %s (%s/pool.img stays)", pool,
		               canon);
	else
		(void)snprintf(msg, len, "no storage pool is mounted on %s", pool);
	return r;
}

/*
 * Removes the runtime directory when no slated serves its socket and no domain uses it: only
 * what slated makes there (a stale slated.sock, vm/ and ssh-agent/), then the directory itself if that left it empty. Returns 1 when it is
 * gone, 0 when it was not there, < 0 when it stays (msg says why).
 */
static int cleanup_runtime_dir(const char *dir, const char *uri, char *msg, size_t len)
{
	static const char *const made[] = {"vm", "ssh-agent"};
	_cleanup_free_ char *sock = fs_path_join(dir, "slated.sock");
	_cleanup_close_ int fd = -1;
	char first[256] = "";
	int n, r;

	if (!sock)
		return -ENOMEM;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		(void)snprintf(msg, len, "there is no runtime directory %s", dir);
		return 0;
	}
	if (fd < 0)
		return (void)snprintf(msg, len, "cannot open the runtime directory %s: %s", dir,
		                      strerror(errno)),
		       -errno;
	if (api_socket_probe(sock) == 0) {
		(void)snprintf(msg, len, "the runtime directory %s stays: a slated serves %s", dir,
		               sock);
		return -EBUSY;
	}
	n = vm_domains_using(uri, dir, first, sizeof(first));
	if (n != 0) {
		(void)snprintf(msg, len, "the runtime directory %s stays: %s%s", dir,
		               n < 0 ? "cannot ask libvirt whether a domain uses it" : "domain ",
		               n < 0 ? "" : first);
		return n < 0 ? n : -EBUSY;
	}
	if (unlinkat(fd, "slated.sock", 0) < 0 && errno != ENOENT)
		return (void)snprintf(msg, len, "cannot remove %s: %s", sock, strerror(errno)),
		       -errno;
	/* vm/: channel sockets, console logs, share mount points; ssh-agent/: the sockets of
	 * private agents, which exit within seconds of slated. */
	for (size_t i = 0; i < ELEMENTSOF(made); i++) {
		r = rmtree_at(fd, made[i]);
		if (r == -EBUSY) {
			(void)snprintf(msg, len,
			               "the runtime directory %s stays: something is still mounted "
			               "below %s/%s (a share of a workspace)",
			               dir, dir, made[i]);
			return r;
		}
		if (r < 0 && r != -ENOENT)
			return (void)snprintf(msg, len, "cannot remove %s/%s: %s", dir, made[i],
			                      slate_strerror(r)),
			       r;
	}
	if (rmdir(dir) < 0) {
		r = -errno;
		(void)snprintf(msg, len, "the runtime directory %s stays: %s%s", dir,
		               r == -ENOTEMPTY ? "it holds files slated did not make" : "",
		               r == -ENOTEMPTY ? "" : strerror(-r));
		return r;
	}
	(void)snprintf(msg, len, "removed the runtime directory %s", dir);
	return 1;
}

/*
 * slated --cleanup: what a stopped slated leaves behind, removed when nothing uses it. One line
 * per thing. Exit 0 when nothing is left, 1 when something stays.
 */
static int run_cleanup(const struct options *o)
{
	_cleanup_(helper_freep) struct helper *helper = NULL;
	_cleanup_close_ int state_fd = -1, lock_fd = -1;
	char msg[1024];
	int r, status = EXIT_SUCCESS;

	state_fd = open(o->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (state_fd < 0 && errno != ENOENT)
		return log_error_errno(-errno, "cannot open state directory %s", o->state_dir),
		       EXIT_FAILURE;
	if (state_fd >= 0) {
		/* The lock also keeps a slated from starting (and mounting) meanwhile. */
		r = fs_lock_at(state_fd, "slated.lock", &lock_fd);
		if (r == -EWOULDBLOCK) {
			log_error("a slated serves state directory %s: stop it first, nothing "
			          "was cleaned up",
			          o->state_dir);
			return EXIT_FAILURE;
		}
		if (r < 0)
			return log_error_errno(r, "cannot lock %s/slated.lock", o->state_dir),
			       EXIT_FAILURE;
		/* Only a mounted pool needs the helper. */
		if (pool_mounted(state_fd))
			helper = start_helper(o);
		r = release_pool(state_fd, o->state_dir, o->libvirt_uri, msg, sizeof(msg));
	} else {
		r = 0;
		(void)snprintf(msg, sizeof(msg), "there is no state directory %s", o->state_dir);
	}
	/* What was done (or had nothing to do) on standard output, what stays on standard error. */
	if (r < 0) {
		fprintf(stderr, "slated: %s\n", msg);
		status = EXIT_FAILURE;
	} else
		printf("%s\n", msg);
	r = cleanup_runtime_dir(o->runtime_dir, o->libvirt_uri, msg, sizeof(msg));
	if (r < 0) {
		fprintf(stderr, "slated: %s\n", msg);
		status = EXIT_FAILURE;
	} else
		printf("%s\n", msg);
	return status;
}

int main(int argc, char **argv)
{
	struct options o = {0};
	_cleanup_(api_server_stopp) struct api_server *server = NULL;
	struct helper *helper = NULL;
	_cleanup_close_ int state_fd = -1, lock_fd = -1;
	int notify_fd = -1, listen_fd = -1, r, sig;
	struct daemon_ctx ctx = {0};
	struct daemon_limits limits;
	struct slate_error limits_err = {0};
	const struct api_route *routes;
	struct api_server_config cfg;
	_cleanup_free_ char *sock = NULL;
	char group_name[64], pool_msg[1024];
	struct slate_error install_err = {0};
	_cleanup_free_ char *pool_state = NULL;
	gid_t socket_gid = (gid_t)-1;
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
	if (o.cleanup)
		return run_cleanup(&o);
	if (socket_group_resolve(o.socket_group, &socket_gid, group_name, sizeof(group_name)) < 0)
		return EXIT_FAILURE;

	/*
	 * Missing parents of the state directory (--state-dir /tmp/slate/state) are made 0711, not
	 * 0700: QEMU, running as its own user, must reach the disks below them, as it may through
	 * the state directory itself (fs_make_traversable).
	 */
	r = state_dir_parents(o.state_dir);
	if (r >= 0)
		r = fs_mkdir_p(o.state_dir, 0700);
	if (r < 0)
		return log_error_errno(r, "cannot create state directory %s", o.state_dir),
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
	/* The helper first: it gets this process's privileges, untouched by what follows. */
	helper = start_helper(&o);
	/* Only now: a slated refused above must leave nothing behind. */
	r = fs_mkdir_p(o.runtime_dir, 0755);
	if (r < 0)
		return log_error_errno(r, "cannot create runtime directory %s", o.runtime_dir),
		       EXIT_FAILURE;

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
	        .catalog_url = o.catalog_url,
	        .helper = helper,
	        .helper_error = helper ? NULL : helper_why};
	r = daemon_limits_init(&limits, o.max_running, o.memory_budget, o.when_full,
	                       o.queue_timeout, &limits_err);
	if (r < 0) {
		log_error("%s", slate_error_text(&limits_err));
		return EXIT_FAILURE;
	}
	ctx.limits = &limits;
	if (snapshot_mode_parse(o.boot_snapshots ? o.boot_snapshots : "auto", &ctx.boot_snapshots) <
	    0) {
		log_error("boot-snapshots = %s: auto, use or off", o.boot_snapshots);
		return EXIT_FAILURE;
	}
	ctx.browser_image = o.browser_image;
	if (limits.max_running || limits.memory_budget_mib)
		log_info("limits: max-running %u, memory-budget %" PRIu64 " MiB, when full: %s",
		         limits.max_running, limits.memory_budget_mib,
		         limits.queue ? "queue" : "refuse");
	/* The guest channels, then domain events, the KVM probe, and domains that kept running
	 * while slated was away (their channels are connected again). */
	r = channels_new(&ctx.channels);
	if (r < 0)
		log_error_errno(r, "cannot start the guest channels (exec and shells will fail)");
	/* Vaults and host-held SSH keys need the master key; without it those verbs fail, the
	 * rest works. The services register on the channels before any guest connects. */
	r = install_open(state_fd, NULL, &ctx.install, &install_err);
	if (r < 0) /* the message ends with the reason: not log_error_errno, which adds it again */
		log_error("cannot open %s/install (secrets and SSH keys will fail): %s",
		          o.state_dir, slate_error_text(&install_err));
	if (daemon_agent_start(&ctx) < 0)
		log_error("cannot start the SSH agent service");
	if (daemon_egress_start(&ctx) < 0)
		log_error("cannot start the egress proxy service");
	if (daemon_browser_init(&ctx) < 0)
		log_error("cannot register the browser VMs' DevTools service");
	(void)sd_notify(0, "STATUS=picking up running workspaces");
	(void)daemon_domains_start(&ctx);
	routes = routes_table(&n_routes);
	cfg = (struct api_server_config){.socket_path = sock,
	                                 .idle_timeout_s = idle_timeout_from_env(),
	                                 .listen_fd = listen_fd,
	                                 .socket_mode = 0660,
	                                 .socket_gid = socket_gid,
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
	if (listen_fd >= 0 && o.socket_group)
		log_notice("socket-group = %s does not apply to the socket systemd passed: its "
		           "SocketGroup= (slated.socket) does",
		           o.socket_group);
	else if (listen_fd < 0)
		log_info("%s: mode 0660, %s%s%s", sock, group_name[0] ? "group " : "",
		         group_name[0] ? group_name : "no socket group (root only)",
		         group_name[0] ? " (and root)" : "");
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
	/* Snapshot domains are slated's own, not workspaces: none outlives it. */
	daemon_snapshot_stop(&ctx);
	/* So are browser VMs: Chromium closes (writing its profile), then the domain goes. */
	daemon_browser_stop_all(&ctx);
	api_server_stop(TAKE_PTR(server));
	daemon_egress_stop(&ctx);
	daemon_agent_stop(&ctx);
	daemon_domains_stop(&ctx);
	install_free(TAKE_PTR(ctx.install));
	channels_free(TAKE_PTR(ctx.channels));
	workspace_store_free(ctx.workspaces);
	if (ctx.storage && storage_get_kind(ctx.storage) == STORAGE_POOL)
		pool_state = strdup(storage_state_path(ctx.storage));
	storage_close(ctx.storage);
	/* The pool goes with slated unless a running workspace (or anything) still uses it. */
	if (pool_state) {
		r = release_pool(state_fd, pool_state, o.libvirt_uri, pool_msg, sizeof(pool_msg));
		if (r < 0)
			log_notice("%s; 'slated --cleanup' unmounts it once nothing does",
			           pool_msg);
		else
			log_info("%s", pool_msg);
	}
	helper_free(helper);
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
	free(o.socket_group);
	free(o.helper_socket);
	free(o.max_running);
	free(o.memory_budget);
	free(o.when_full);
	free(o.queue_timeout);
	free(o.boot_snapshots);
	free(o.browser_image);
	return EXIT_SUCCESS;
}

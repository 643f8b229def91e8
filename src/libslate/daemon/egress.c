/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A workspace's egress policy on disk, and the egress proxy's channel service (daemon/egress.h):
 * every "http-proxy" stream a guest opens is served by proxy_serve() on the stream's own thread
 * (channels.h gives each stream one), with the workspace's secrets from its vault, its policy
 * from <workspace>/egress.json, leaks marking it compromised and pausing it, and every request
 * going to its audit trail.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "channel/channels.h"
#include "daemon/browser.h"
#include "daemon/daemon.h"
#include "daemon/egress.h"
#include "daemon/exec.h"
#include "proxy/policy.h"
#include "proxy/proxy.h"
#include "secrets/install.h"
#include "secrets/vault.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/macro.h"
#include "vm/domain.h"
#include "workspace/audit.h"
#include "workspace/workspace.h"

/* Serialises read-modify-write of egress.json files (slated is their only writer). */
static pthread_mutex_t policy_lock = PTHREAD_MUTEX_INITIALIZER;

int daemon_ws_dirfd(struct daemon_ctx *d, const char *name, int *ret)
{
	_cleanup_free_ char *path = NULL;
	int r = workspace_name_check(name);

	if (r < 0)
		return r;
	path = workspace_dir_path(d->workspaces, name);
	if (!path)
		return -ENOMEM;
	return fs_open_dir_at(AT_FDCWD, path, ret);
}

int daemon_egress_save(struct daemon_ctx *d, const char *name, const struct egress_policy *p)
{
	_cleanup_close_ int dfd = -1;
	int r = daemon_ws_dirfd(d, name, &dfd);

	if (r < 0)
		return r;
	pthread_mutex_lock(&policy_lock);
	r = egress_policy_save_at(dfd, p);
	pthread_mutex_unlock(&policy_lock);
	return r;
}

int daemon_egress_load(struct daemon_ctx *d, const char *name, struct egress_policy **ret)
{
	_cleanup_close_ int dfd = -1;
	int r = daemon_ws_dirfd(d, name, &dfd);

	if (r < 0)
		return r;
	return egress_policy_load_at(dfd, ret);
}

int daemon_egress_update(struct daemon_ctx *d, const char *name, const char *action,
                         const char *host, struct egress_policy **ret)
{
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	_cleanup_close_ int dfd = -1;
	int r = daemon_ws_dirfd(d, name, &dfd);

	if (r < 0)
		return r;
	pthread_mutex_lock(&policy_lock);
	r = egress_policy_load_at(dfd, &p);
	if (r >= 0)
		r = egress_policy_apply(p, action, host);
	if (r >= 0)
		r = egress_policy_save_at(dfd, p);
	pthread_mutex_unlock(&policy_lock);
	if (r >= 0)
		*ret = TAKE_PTR(p);
	return r;
}

/* ---- the egress proxy service ---- */

/*
 * Test-only settings, read from slated's environment when the service starts (doc/
 * egress-proxy.md): an extra CA file upstream servers may chain to, and HOST:PORT:ADDR:PORT
 * overrides of where a name connects. Never set them in production.
 */
#define ENV_TEST_CA_FILE "SLATE_PROXY_TEST_CA_FILE"
#define ENV_TEST_CONNECT_TO "SLATE_PROXY_TEST_CONNECT_TO"

/*
 * One per process (d->proxy points here). It outlives the proxy: the channels may still hand a
 * stream to proxy_stream() after the service stopped, which then just closes it.
 */
struct proxy_service {
	struct daemon_ctx *d;
	struct proxy *proxy;
	pthread_mutex_t lock;
	pthread_cond_t idle;
	unsigned active;
	bool stopped;
};
static struct proxy_service service = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                       .idle = PTHREAD_COND_INITIALIZER};

/* ---- the proxy's hooks ---- */

static int hook_load(void *userdata, const char *ws, struct secret_set **ret_secrets,
                     struct egress_policy **ret_policy, char *why, size_t why_len)
{
	struct proxy_service *svc = userdata;
	struct daemon_ctx *d = svc->d;
	_cleanup_(workspace_freep) struct workspace *w = NULL;
	_cleanup_(egress_policy_freep) struct egress_policy *policy = NULL;
	struct slate_error err = {0};
	int r;

	if (!d->workspaces)
		return snprintf(why, why_len, "workspace storage is unavailable"), -ENODEV;
	r = workspace_load(d->workspaces, ws, &w);
	if (r < 0)
		return snprintf(why, why_len, "workspace %s: %s", ws, slate_strerror(r)), r;
	if (w->compromised)
		return snprintf(why, why_len,
		                "workspace %s is compromised (a placeholder was sent to %s); it "
		                "has no network until it is wiped",
		                ws, w->compromised_host ? w->compromised_host : "?"),
		       -EPERM;
	r = daemon_egress_load(d, ws, &policy);
	if (r < 0)
		return snprintf(why, why_len, "cannot read the egress policy of %s: %s", ws,
		                slate_strerror(r)),
		       r;
	/* Without its placeholders leak detection would be blind: no secrets, no egress. */
	r = vault_load_set(d->install, d->workspaces, d->state_dirfd, w->owner, ws, true,
	                   ret_secrets, &err);
	if (r < 0)
		return snprintf(why, why_len, "cannot open the secrets of %s: %s", ws,
		                slate_error_text(&err)),
		       r;
	*ret_policy = TAKE_PTR(policy);
	return 0;
}

static void hook_release(void *userdata, struct secret_set *s)
{
	(void)userdata;
	secret_set_free(s);
}

/* Pauses the workspace's domain: the guest stops at once, its memory kept for inspection. */
static void pause_domain(struct daemon_ctx *d, const char *ws)
{
	_cleanup_(virConnectClosep) virConnectPtr conn = NULL;
	_cleanup_(virDomainFreep) virDomainPtr dom = NULL;
	enum vm_state st;

	if (vm_connect(d->libvirt_uri, &conn) < 0 || vm_domain_lookup(conn, ws, &dom) < 0) {
		log_ws(LOG_WARNING, ws, "cannot pause %s after a leak: %s", ws, vm_last_error());
		return;
	}
	if (vm_domain_get_state(dom, &st) >= 0 && st == VM_STATE_RUNNING &&
	    virDomainSuspend(dom) < 0)
		log_ws(LOG_WARNING, ws, "cannot pause %s after a leak: %s", ws, vm_last_error());
}

static void hook_leak(void *userdata, const struct proxy_leak *l)
{
	struct proxy_service *svc = userdata;
	struct daemon_ctx *d = svc->d;
	_cleanup_close_ int lock_fd = -1;
	int r;

	log_ws(LOG_WARNING, l->workspace,
	       "workspace %s sent the placeholder of secret %s (%s%sin the %s) towards %s:%u, a "
	       "host it is not bound to: blocked; marking it compromised and pausing it",
	       l->workspace, l->secret, l->encoding ? l->encoding : "", l->encoding ? ", " : "",
	       l->where, l->host, (unsigned)l->port);
	if (!d->workspaces)
		return;
	r = workspace_lock(d->workspaces, l->workspace, &lock_fd);
	if (r >= 0)
		r = workspace_mark_compromised(d->workspaces, l->workspace, l->host);
	if (r < 0)
		log_ws(LOG_ERR, l->workspace, "cannot mark %s compromised: %s", l->workspace,
		       slate_strerror(r));
}

static void hook_contain(void *userdata, const struct proxy_leak *l)
{
	struct proxy_service *svc = userdata;

	pause_domain(svc->d, l->workspace);
	/* Its browser VM too: the leak may have been the browser's, which speaks for it. */
	daemon_browser_pause(svc->d, l->workspace);
	/* Its exec sessions end now, saying why, even when domain events are unavailable. */
	exec_sessions_kick(l->workspace, "paused (a leak)");
}

static void hook_audit(void *userdata, const char *ws, const char *type, struct json_object *ev)
{
	struct proxy_service *svc = userdata;
	int r;

	if (!svc->d->workspaces)
		return;
	r = audit_append(svc->d->workspaces, ws, type, ev);
	if (r < 0)
		log_ws(LOG_WARNING, ws, "cannot append to the audit trail of %s: %s", ws,
		       slate_strerror(r));
}

static void proxy_stream(int fd, const char *ws, void *userdata)
{
	struct proxy_service *svc = userdata;
	bool go;

	pthread_mutex_lock(&svc->lock);
	go = !svc->stopped && svc->proxy;
	if (go)
		svc->active++;
	pthread_mutex_unlock(&svc->lock);
	if (go) {
		proxy_serve(svc->proxy, fd, ws);
		pthread_mutex_lock(&svc->lock);
		if (--svc->active == 0)
			pthread_cond_broadcast(&svc->idle);
		pthread_mutex_unlock(&svc->lock);
	}
	(void)close(fd);
}

int daemon_egress_start(struct daemon_ctx *d)
{
	struct proxy_hooks hooks = {.load = hook_load,
	                            .release = hook_release,
	                            .leak = hook_leak,
	                            .contain = hook_contain,
	                            .audit = hook_audit,
	                            .userdata = &service};
	struct proxy_config cfg = {0};
	struct proxy *p = NULL;
	int r;

	if (!d->channels)
		return 0; /* no guest can reach us anyway */
	if (!d->install)
		return log_error_errno(-ENOKEY, "the egress proxy needs the install directory "
		                                "(its CA lives there): guests get no network");
	(void)signal(SIGPIPE, SIG_IGN);
	cfg.ca_dirfd = install_dirfd(d->install);
	cfg.extra_ca_file = getenv(ENV_TEST_CA_FILE);
	cfg.connect_to = getenv(ENV_TEST_CONNECT_TO);
	if (cfg.extra_ca_file || cfg.connect_to)
		log_warning("egress proxy test settings in effect (%s%s%s): not for production",
		            cfg.extra_ca_file ? ENV_TEST_CA_FILE : "",
		            cfg.extra_ca_file && cfg.connect_to ? ", " : "",
		            cfg.connect_to ? ENV_TEST_CONNECT_TO : "");
	service.d = d;
	r = proxy_new(&cfg, &hooks, &p);
	if (r < 0)
		return log_error_errno(r, "cannot start the egress proxy: %s", slate_strerror(r));
	pthread_mutex_lock(&service.lock);
	service.proxy = p;
	service.stopped = false;
	pthread_mutex_unlock(&service.lock);
	/* A workspace's browser VM (daemon/browser.h) goes out through its workspace's policy and
	 * secret bindings: the stream is told that workspace's name. */
	r = channels_register_for(d->channels, "http-proxy",
	                          CHANNEL_ROLE_WORKSPACE | CHANNEL_ROLE_BROWSER, proxy_stream,
	                          &service);
	if (r < 0 && r != -EEXIST) {
		log_error_errno(r, "cannot register the egress proxy on the guest channels");
		pthread_mutex_lock(&service.lock);
		service.proxy = NULL;
		pthread_mutex_unlock(&service.lock);
		proxy_free(p);
		return r;
	}
	d->proxy = &service;
	log_debug("egress proxy ready (CA %s/%s)", "install", "egress-ca.crt");
	return 0;
}

void daemon_egress_stop(struct daemon_ctx *d)
{
	struct proxy *p;

	if (!d->proxy)
		return;
	pthread_mutex_lock(&service.lock);
	service.stopped = true;
	p = service.proxy;
	pthread_mutex_unlock(&service.lock);
	/* proxy_free shuts every live connection down and waits for them; streams that were
	 * just starting see the proxy stopping and return. */
	if (p)
		proxy_shutdown(p);
	pthread_mutex_lock(&service.lock);
	while (service.active > 0)
		pthread_cond_wait(&service.idle, &service.lock);
	service.proxy = NULL;
	pthread_mutex_unlock(&service.lock);
	proxy_free(p);
	d->proxy = NULL;
}

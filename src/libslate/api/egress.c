/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Egress policy routes (GET/POST /workspaces/:name/egress) and the egress proxy's channel
 * service: every "http-proxy" stream a guest opens is served by proxy_serve() on the stream's
 * own thread (channels.h gives each stream one), with the workspace's secrets from its vault,
 * its policy from <workspace>/egress.json, leaks marking it compromised and pausing it, and
 * every request going to its audit trail.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/protocol.h"
#include "api/routes.h"
#include "channel/channels.h"
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
#include "vm/domain.h"
#include "workspace/audit.h"
#include "workspace/workspace.h"

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
	_cleanup_close_ int dfd = -1;
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
	r = daemon_ws_dirfd(d, ws, &dfd);
	if (r >= 0)
		r = egress_policy_load_at(dfd, &policy);
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

int proxy_service_start(struct daemon_ctx *d)
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
	r = channels_register(d->channels, "http-proxy", proxy_stream, &service);
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

void proxy_service_stop(struct daemon_ctx *d)
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

/* ---- routes ---- */

static int reply_policy(struct api_reply *reply, const char *name, const struct egress_policy *p)
{
	_cleanup_json_ struct json_object *o = NULL;
	int r = egress_policy_to_json(p, &o);

	if (r < 0 || json_add_string(o, "workspace", name) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

int handle_egress_get(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0];
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	_cleanup_close_ int dfd = -1;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return 0;
	r = daemon_ws_dirfd(d, name, &dfd);
	if (r >= 0)
		r = egress_policy_load_at(dfd, &p);
	if (r < 0)
		return api_reply_error(reply, 500, API_ERR_FAILED,
		                       "cannot read the egress policy of %s: %s", name,
		                       slate_strerror(r));
	return reply_policy(reply, name, p);
}

int api_egress_from_json(struct json_object *o, struct egress_policy **ret, struct api_reply *reply)
{
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	struct json_object *rules = NULL;
	const char *def = "allow-all";
	int r;

	if (!json_object_is_type(o, json_type_object) ||
	    (json_object_object_get_ex(o, "default", NULL) &&
	     json_get_string(o, "default", &def) < 0) ||
	    (json_object_object_get_ex(o, "rules", NULL) && json_get_array(o, "rules", &rules) < 0))
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "egress: {\"default\": \"allow-all\"|\"deny-all\", "
		                       "\"rules\": [{\"action\": \"allow\"|\"deny\", \"host\"}]}"),
		       -EINVAL;
	if (!streq(def, "allow-all") && !streq(def, "deny-all"))
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "egress: the default is allow-all or deny-all, not '%s'",
		                       def),
		       -EINVAL;
	r = egress_policy_new(&p);
	if (r >= 0)
		r = egress_policy_apply(p, def, NULL);
	if (r < 0)
		return r;
	for (size_t i = 0; rules && i < json_object_array_length(rules); i++) {
		struct json_object *x = json_object_array_get_idx(rules, i);
		const char *action = NULL, *host = NULL;

		if (json_get_string(x, "action", &action) < 0 ||
		    json_get_string(x, "host", &host) < 0 ||
		    (!streq(action, "allow") && !streq(action, "deny")))
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "egress rule %zu: {\"action\": \"allow\"|\"deny\", "
			                       "\"host\": HOST}",
			                       i + 1),
			       -EINVAL;
		/* The same checks as `slate egress NAME allow|deny HOST`. */
		r = egress_policy_apply(p, action, host);
		if (r == -EINVAL)
			return api_reply_error(
			               reply, 400, API_ERR_BAD_REQUEST,
			               "--%s %s: invalid host: a host name, an IP address or "
			               "a network (10.0.0.0/8)",
			               action, host),
			       -EINVAL;
		if (r == -E2BIG)
			return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
			                       "egress: at most %u rules", EGRESS_MAX_RULES),
			       -EINVAL;
		if (r < 0)
			return r;
	}
	*ret = TAKE_PTR(p);
	return 0;
}

int handle_egress_set(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *name = req->params[0], *action = NULL, *host = NULL;
	_cleanup_(egress_policy_freep) struct egress_policy *p = NULL;
	int r;

	if (api_need_workspaces(d, reply) < 0 || api_load_visible(d, req, name, NULL, reply) < 0)
		return 0;
	if (!req->body || json_get_string(req->body, "action", &action) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "the body needs \"action\": allow-all, deny-all, allow or "
		                       "deny");
	r = json_get_string(req->body, "host", &host);
	if (r < 0 && r != -ENOENT)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "\"host\" must be a string");
	if ((streq(action, "allow") || streq(action, "deny")) && !host)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "%s needs a host", action);
	if ((streq(action, "allow-all") || streq(action, "deny-all")) && host)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "%s takes no host", action);

	r = daemon_egress_update(d, name, action, host, &p);
	if (r == -EINVAL)
		return api_reply_error(
		        reply, 400, API_ERR_BAD_REQUEST, "%s",
		        !streq(action, "allow") && !streq(action, "deny") &&
		                        !streq(action, "allow-all") && !streq(action, "deny-all")
		                ? "unknown action: allow-all, deny-all, allow HOST or deny HOST"
		                : "invalid host: a host name, an IP address or a network "
		                  "(10.0.0.0/8)");
	if (r == -E2BIG)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "the egress policy of %s has %u rules already", name,
		                       EGRESS_MAX_RULES);
	if (r < 0)
		return api_reply_error(reply, 500, API_ERR_FAILED,
		                       "cannot update the egress policy of %s: %s", name,
		                       slate_strerror(r));
	log_ws(LOG_INFO, name, "egress policy of %s: %s%s%s", name, action, host ? " " : "",
	       host ? host : "");
	return reply_policy(reply, name, p);
}

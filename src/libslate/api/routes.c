/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <fcntl.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/exec.h"
#include "api/protocol.h"
#include "api/routes.h"
#include "daemon/domains.h"
#include "storage/reflink.h"
#include "storage/storage.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "version.h"
#include "vm/define-time.h"
#include "vm/kvm.h"
#include "vm/qemu-user.h"

static struct json_object *caller_json(const struct api_caller *c)
{
	struct json_object *o = json_object_new_object();

	if (o && (json_add_int64(o, "uid", c->uid) < 0 || json_add_int64(o, "gid", c->gid) < 0 ||
	          json_add_int64(o, "pid", c->pid) < 0)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static int handle_version(struct api_request *req, struct api_reply *reply)
{
	const struct daemon_ctx *d = req->userdata;
	_cleanup_json_ struct json_object *o = json_object_new_object();

	if (!o || json_add_string(o, "version", SLATE_VERSION) < 0 ||
	    json_add_int64(o, "api_version", SLATE_API_VERSION) < 0 ||
	    json_add_int64(o, "pid", getpid()) < 0 ||
	    json_add_int64(o, "uptime_s", (int64_t)(time(NULL) - d->started)) < 0 ||
	    json_add(o, "caller", caller_json(&req->caller)) < 0)
		return -ENOMEM;
	return api_reply_json(reply, 200, TAKE_PTR(o));
}

/* One line of the system check: emitted as a progress event and kept for the result. */
static int check_emit(struct api_stream *s, struct json_object *checks, const char *name,
                      const char *status, const char *fmt, ...) _printf_(5, 6);
static int check_emit(struct api_stream *s, struct json_object *checks, const char *name,
                      const char *status, const char *fmt, ...)
{
	char detail[1024];
	struct json_object *c;
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	c = json_object_new_object();
	if (!c || json_add_string(c, "check", name) < 0 ||
	    json_add_string(c, "status", status) < 0 || json_add_string(c, "detail", detail) < 0) {
		json_object_put(c);
		return -ENOMEM;
	}
	if (json_object_array_add(checks, json_object_get(c)) < 0) {
		json_object_put(c);
		return -ENOMEM;
	}
	/* A client that left does not stop the check; its result is simply not read. */
	(void)api_stream_progress(s, c);
	return 0;
}

/* /dev/kvm existing proves nothing: the accelerator is what the probe found (vm/kvm.h). */
static void check_kvm(struct api_stream *s, struct json_object *checks, const struct daemon_ctx *d)
{
	struct stat st;

	if (vm_kvm_usable(d->libvirt_uri) > 0)
		(void)check_emit(s, checks, "kvm", "ok", "KVM runs guests (%s)", vm_kvm_reason());
	else if (stat("/dev/kvm", &st) == 0 && S_ISCHR(st.st_mode))
		(void)check_emit(s, checks, "kvm", "warn",
		                 "/dev/kvm is present but KVM cannot run guests (%s): guests run "
		                 "under TCG emulation, much slower",
		                 vm_kvm_reason());
	else
		(void)check_emit(s, checks, "kvm", "warn",
		                 "no usable /dev/kvm (%s): guests run under TCG emulation, much "
		                 "slower",
		                 vm_kvm_reason());
}

/* Every start defines a domain: how long one takes, and why when it is slow. */
static void check_define(struct api_stream *s, struct json_object *checks,
                         const struct daemon_ctx *d)
{
	const char *env = getenv("SLATE_DOCTOR_DEFINE_WARN_S");
	struct vm_define_facts f = {.warn_s = VM_DEFINE_WARN_S};
	struct vm_qemu_user u;
	char detail[1024], err[512] = "", view[256] = "";
	bool warn, have_user;
	int r;

	if (env) {
		char *end;
		double v = strtod(env, &end);
		if (end != env && !*end && v >= 0)
			f.warn_s = v;
	}
	r = vm_define_time(d->libvirt_uri, VM_DEFINE_WAIT_S, &f.secs, &f.probes, err, sizeof(err));
	if (r < 0 && r != -ETIMEDOUT) {
		(void)check_emit(s, checks, "define", "warn",
		                 "cannot define a throwaway domain: %s", err);
		return;
	}
	f.finished = r == 0;
	if (!f.finished)
		f.secs = VM_DEFINE_WAIT_S;
	have_user = vm_qemu_user_load(d->libvirt_uri, NULL, &u) > 0;
	f.qemu_user = have_user ? u.name : NULL;
	f.view = vm_libvirtd_kvm_view(have_user ? &u : NULL, view, sizeof(view));
	f.view_desc = view;
	f.kvm_usable = vm_kvm_usable(d->libvirt_uri) > 0;
	warn = vm_define_verdict(&f, detail, sizeof(detail));
	if (warn)
		log_warning("doctor: %s", detail);
	(void)check_emit(s, checks, "define", warn ? "warn" : "ok", "%s", detail);
}

/*
 * QEMU must reach the images below the state directory. slated makes the state directory and
 * what is under it searchable at each start, never what is above it: that is what is checked.
 */
static int check_qemu_access(struct api_stream *s, struct json_object *checks,
                             const struct daemon_ctx *d)
{
	_cleanup_free_ char *parent = realpath(d->state_dir, NULL);
	char detail[1024], *slash;
	int r;

	if (!parent)
		parent = strdup(d->state_dir);
	if (!parent)
		return -ENOMEM;
	slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = '\0';
	else if (slash)
		slash[1] = '\0';
	r = daemon_check_qemu_access(d, parent, detail, sizeof(detail));
	(void)check_emit(s, checks, "qemu-access",
	                 r == 0  ? "ok"
	                 : r > 0 ? "fail"
	                         : "warn",
	                 "%s%s", detail, r > 0 ? "; every start fails" : "");
	return r;
}

static int system_check(struct api_stream *s, void *arg)
{
	const struct daemon_ctx *d = arg;
	_cleanup_json_ struct json_object *checks = json_object_new_array();
	_cleanup_json_ struct json_object *result = json_object_new_object();
	unsigned failed = 0;
	virConnectPtr conn;
	int r;

	if (!checks || !result)
		return -ENOMEM;

	r = faccessat(d->state_dirfd, ".", W_OK, AT_EACCESS);
	if (r < 0)
		failed++;
	(void)check_emit(s, checks, "state-dir", r < 0 ? "fail" : "ok", "%s on %s%s", d->state_dir,
	                 reflink_fs_name(d->state_dirfd), r < 0 ? " is not writable" : "");

	r = check_qemu_access(s, checks, d);
	if (r > 0)
		failed++;

	r = reflink_supported_at(d->state_dirfd);
	(void)check_emit(s, checks, "reflink", r > 0 ? "ok" : "warn", "%s",
	                 r > 0    ? "FICLONE works in the state directory"
	                 : r == 0 ? "no reflinks here: workspaces need a loop-backed btrfs pool"
	                          : slate_strerror(r));

	if (d->storage)
		(void)check_emit(s, checks, "storage", "ok", "%s: images in %s, workspaces in %s",
		                 storage_kind_name(storage_get_kind(d->storage)),
		                 storage_images_path(d->storage),
		                 storage_workspaces_path(d->storage));
	else {
		failed++;
		(void)check_emit(s, checks, "storage", "fail", "%s",
		                 d->storage_error ? d->storage_error : "not opened");
	}

	conn = virConnectOpen(d->libvirt_uri);
	if (conn) {
		unsigned long hv = 0, lib = 0;
		(void)virConnectGetVersion(conn, &hv);
		(void)virConnectGetLibVersion(conn, &lib);
		(void)check_emit(s, checks, "libvirt", "ok",
		                 "%s: libvirt %lu.%lu.%lu, %s %lu.%lu.%lu", d->libvirt_uri,
		                 lib / 1000000, lib / 1000 % 1000, lib % 1000,
		                 virConnectGetType(conn) ? virConnectGetType(conn) : "hypervisor",
		                 hv / 1000000, hv / 1000 % 1000, hv % 1000);
		(void)virConnectClose(conn);
		check_define(s, checks, d);
	} else {
		virErrorPtr e = virGetLastError();
		failed++;
		(void)check_emit(s, checks, "libvirt", "fail", "cannot connect to %s: %s",
		                 d->libvirt_uri, e && e->message ? e->message : "unknown error");
	}

	check_kvm(s, checks, d);
	{
		char dd[1024];
		int dr = daemon_check_domains((struct daemon_ctx *)d, dd, sizeof(dd));
		(void)check_emit(s, checks, "domains", dr == 0 ? "ok" : "warn", "%s", dd);
	}
	r = vm_vsock_usable() ? 0 : -ENODEV;
	(void)check_emit(s, checks, "vsock", r == 0 ? "ok" : "warn", "%s",
	                 r == 0 ? "/dev/vhost-vsock is present"
	                        : "no /dev/vhost-vsock: the guest channel uses virtio-serial");

	if (json_add(result, "checks", TAKE_PTR(checks)) < 0 ||
	    json_add_int64(result, "failed", failed) < 0)
		return -ENOMEM;
	return api_stream_result(s, TAKE_PTR(result));
}

static int handle_system_check(struct api_request *req, struct api_reply *reply)
{
	return api_reply_stream(reply, system_check, req->userdata, NULL);
}

static const struct api_route routes[] = {
        {"GET", "/version", handle_version},
        {"GET", "/system/check", handle_system_check},
        {"POST", "/system/residue", handle_system_residue},
        {"GET", "/workspaces", handle_workspace_list},
        {"POST", "/workspaces", handle_workspace_create},
        {"GET", "/workspaces/:name", handle_workspace_get},
        {"DELETE", "/workspaces/:name", handle_workspace_delete},
        {"POST", "/workspaces/:name/reset", handle_workspace_reset},
        {"POST", "/workspaces/:name/wipe-home", handle_workspace_wipe_home},
        {"POST", "/workspaces/:name/wipe", handle_workspace_wipe},
        {"POST", "/workspaces/:name/start", handle_workspace_start},
        {"POST", "/workspaces/:name/stop", handle_workspace_stop},
        {"POST", "/workspaces/:name/probe", handle_workspace_probe},
        {"POST", "/workspaces/:name/console", handle_workspace_console},
        {"POST", "/workspaces/:name/exec", handle_workspace_exec},
        {"POST", "/run", handle_run},
        {"GET", "/workspaces/:name/checkpoints", handle_checkpoint_list},
        {"POST", "/workspaces/:name/checkpoints/:id/revert", handle_checkpoint_revert},
        {"GET", "/workspaces/:name/ssh-key", handle_sshkey_get},
        {"POST", "/workspaces/:name/ssh-key", handle_sshkey_generate},
        {"POST", "/workspaces/:name/ssh-key/import", handle_sshkey_import},
        {"GET", "/secrets", handle_secret_list},
        {"POST", "/secrets", handle_secret_set},
        {"DELETE", "/secrets/:key", handle_secret_delete},
        {"GET", "/workspaces/:name/egress", handle_egress_get},
        {"POST", "/workspaces/:name/egress", handle_egress_set},
        {"GET", "/workspaces/:name/trace", handle_trace},
        {"GET", "/workspaces/:name/browser", handle_browser_get},
        {"POST", "/workspaces/:name/browser", handle_browser_start},
        {"DELETE", "/workspaces/:name/browser", handle_browser_stop},
        {"GET", "/workspaces/:name/browser/screenshot", handle_browser_screenshot},
        {"POST", "/workspaces/:name/browser/view", handle_browser_view},
        {"DELETE", "/workspaces/:name/browser/view", handle_browser_view_stop},
        {"GET", "/images", handle_image_list},
        {"POST", "/images", handle_image_import},
        {"POST", "/images/verify", handle_image_verify},
        {"POST", "/images/:id/pull", handle_image_pull},
        {"POST", "/images/:id/snapshot", handle_image_snapshot},
        {"GET", "/catalog", handle_catalog_get},
        {"POST", "/catalog/update", handle_catalog_update},
};

const struct api_route *routes_table(size_t *ret_n)
{
	*ret_n = ELEMENTSOF(routes);
	return routes;
}

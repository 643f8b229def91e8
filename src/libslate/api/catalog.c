/* SPDX-License-Identifier: GPL-2.0-or-later */
/* /v1/catalog and the catalog side of /v1/images: update, show, pull, verify. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/access.h"
#include "api/protocol.h"
#include "api/render.h"
#include "api/routes.h"
#include "image/catalog.h"
#include "image/pull.h"
#include "image/store.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"

static const char *const compression_names[] = {"none", "gzip", "zstd", "xz"};

static void pull_config(const struct daemon_ctx *d, struct pull_config *ret)
{
	*ret = (struct pull_config){.storage = d->storage,
	                            .state_dirfd = d->state_dirfd,
	                            .trusted_keys = d->trusted_keys ? d->trusted_keys
	                                                            : CATALOG_TRUSTED_KEYS_DIR,
	                            .channel = d->channel ? d->channel : "stable",
	                            .catalog_url = d->catalog_url,
	                            .state_dir = d->state_dir,
	                            .libvirt_uri = d->libvirt_uri};
}

/* The error code a script can test: the catalog's names for its refusals. */
static const char *error_code(int r)
{
	if (r <= -SLATE_ERR_BASE && r > SLATE_ERR_LAST_)
		return catalog_error_name(r);
	if (r == -ENOENT)
		return API_ERR_NOT_FOUND;
	if (r == -EACCES || r == -EPERM)
		return API_ERR_PERMISSION;
	if (r == -EKEYREJECTED)
		return "certificate_not_trusted"; /* https: the server's certificate did not verify */
	if (r == PULL_ERR_CONSENT)
		return "consent_required";
	if (r == PULL_ERR_POSTINSTALL)
		return "postinstall_failed";
	return API_ERR_FAILED;
}

/* Progress events, at most five a second (and every phase change). */
struct job {
	struct daemon_ctx *d;
	char *id;
	char *from;
	bool consent_all;     /* accept_postinstall: true */
	char **consent_uuids; /* accept_postinstall: [uuid, ...] */
	size_t n_consent_uuids;
	struct api_stream *stream;
	int64_t last; /* time_mono_ms() of the last event sent */
	const char *last_phase;
	const char *last_artifact;
};

static void job_free(void *p)
{
	struct job *j = p;

	if (!j)
		return;
	free(j->id);
	free(j->from);
	for (size_t i = 0; i < j->n_consent_uuids; i++)
		free(j->consent_uuids[i]);
	free(j->consent_uuids);
	free(j);
}

static void on_progress(const struct pull_progress *p, void *ud)
{
	struct job *j = ud;
	struct json_object *o;
	int64_t now = time_mono_ms();
	bool changed = j->last_phase != p->phase || j->last_artifact != p->artifact;

	if (!changed && !p->detail && p->done < p->total && now - j->last < 200)
		return;
	j->last = now;
	j->last_phase = p->phase;
	j->last_artifact = p->artifact;
	o = json_object_new_object();
	if (!o || json_add_string(o, "phase", p->phase) < 0 ||
	    (p->artifact && json_add_string(o, "artifact", p->artifact) < 0) ||
	    (p->detail && json_add_string(o, "detail", p->detail) < 0) ||
	    json_add_int64(o, "done", (int64_t)p->done) < 0 ||
	    json_add_int64(o, "total", (int64_t)p->total) < 0 ||
	    (p->attempt && json_add_int64(o, "attempt", p->attempt) < 0) ||
	    (p->resumed && json_add_bool(o, "resumed", true) < 0)) {
		json_object_put(o);
		return;
	}
	(void)api_stream_progress(j->stream, o);
}

static struct json_object *artifact_json(const struct catalog_artifact *a)
{
	struct json_object *o = json_object_new_object();

	if (o && (json_add_string(o, "url", a->url) < 0 ||
	          json_add_string(o, "sha256", a->sha256_hex) < 0 ||
	          json_add_int64(o, "size", (int64_t)a->size) < 0)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static struct json_object *catalog_json(const struct daemon_ctx *d, const struct catalog *c)
{
	_cleanup_json_ struct json_object *o = json_object_new_object();
	_cleanup_free_ char *source = NULL;
	struct json_object *images = json_object_new_array();
	char signed_at[32] = "", expires[32] = "";

	if (!o || !images || json_add(o, "images", images) < 0)
		return NULL;
	(void)catalog_time_format(c->signed_at, signed_at, sizeof(signed_at));
	(void)catalog_time_format(c->expires, expires, sizeof(expires));
	(void)catalog_source_get(d->state_dirfd, &source);
	if (json_add_string(o, "channel", c->channel) < 0 ||
	    json_add_int64(o, "version", c->version) < 0 ||
	    json_add_string(o, "signedAt", signed_at) < 0 ||
	    json_add_string(o, "expires", expires) < 0 ||
	    json_add_bool(o, "expired", c->expires <= (int64_t)time(NULL)) < 0 ||
	    json_add_string(o, "keyId", c->key_id) < 0 ||
	    (source && json_add_string(o, "source", source) < 0))
		return NULL;
	for (size_t i = 0; i < c->n_images; i++) {
		const struct catalog_image *im = &c->images[i];
		struct json_object *e = json_object_new_object(), *steps = json_object_new_array();
		_cleanup_json_ struct json_object *applied = NULL;
		struct image_info *info = NULL;

		if (!e || json_object_array_add(images, e) < 0) {
			json_object_put(e);
			json_object_put(steps);
			return NULL;
		}
		if (json_add(e, "postinstall", steps) < 0 || json_add_string(e, "id", im->id) < 0 ||
		    json_add_int64(e, "version", im->version) < 0 ||
		    json_add_string(e, "description", im->description) < 0 ||
		    json_add(e, "disk", artifact_json(&im->disk)) < 0 ||
		    json_add_string(e, "compression", compression_names[im->compression]) < 0 ||
		    json_add_string(e, "format",
		                    im->format == CATALOG_DISK_QCOW2 ? "qcow2" : "raw") < 0 ||
		    json_add_int64(e, "uncompressedSize", (int64_t)im->uncompressed_size) < 0 ||
		    json_add_string(e, "boot",
		                    im->boot == CATALOG_BOOT_KERNEL ? "kernel" : "firmware") < 0)
			return NULL;
		/* "applied": recorded as applied to the installed image (no consent needed). */
		if (image_applied_steps(d->storage, im->id, &applied) < 0)
			return NULL;
		for (size_t k = 0; k < im->n_steps; k++) {
			struct json_object *s = json_object_new_object();
			if (!s || json_object_array_add(steps, s) < 0) {
				json_object_put(s);
				return NULL;
			}
			if (json_add_string(s, "uuid", im->steps[k].uuid) < 0 ||
			    json_add_int64(s, "seq", im->steps[k].seq) < 0 ||
			    json_add_string(s, "description", im->steps[k].description) < 0 ||
			    json_add_string(s, "command", im->steps[k].command) < 0 ||
			    json_add_bool(s, "applied",
			                  image_step_applied(applied, &im->steps[k])) < 0)
				return NULL;
		}
		if (d->storage && image_store_get(d->storage, im->id, &info) >= 0) {
			(void)json_add_bool(e, "installed", true);
			(void)json_add_bool(e, "installed_local", info->local);
			image_info_free(info);
		} else
			(void)json_add_bool(e, "installed", false);
	}
	return TAKE_PTR(o);
}

int handle_catalog_get(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	_cleanup_catalog_ struct catalog *c = NULL;
	struct slate_error err = {};
	struct json_object *o;
	int r;

	r = catalog_state_load_current(d->state_dirfd, &c, &err);
	if (r == -ENOENT)
		return api_reply_error(reply, 404, API_ERR_NOT_FOUND,
		                       "no catalog accepted yet: run slate catalog update");
	if (r < 0)
		return api_reply_error(reply, 500, error_code(r), "%s",
		                       err.code ? slate_error_text(&err) : slate_strerror(r));
	o = catalog_json(d, c);
	if (!o)
		return -ENOMEM;
	return api_reply_json(reply, 200, o);
}

static int update_run(struct api_stream *s, void *arg)
{
	struct job *j = arg;
	_cleanup_catalog_ struct catalog *c = NULL;
	struct slate_error err = {};
	struct pull_config cfg;
	struct json_object *o;
	int r;

	j->stream = s;
	pull_config(j->d, &cfg);
	(void)api_stream_progress(s, NULL);
	r = catalog_update(&cfg, j->from, &c, &err);
	if (r < 0) {
		const char *text = err.code ? slate_error_text(&err) : slate_strerror(r);

		/* The checks' refusals (signature, rollback, expiry...) are security events. */
		log_event(LOG_WARNING, r <= -SLATE_ERR_BASE ? SLATE_MESSAGE_CATALOG_REFUSED : NULL,
		          NULL, NULL, NULL, "catalog update refused: %s", text);
		return api_stream_error(s, error_code(r), text);
	}
	o = catalog_json(j->d, c);
	if (!o)
		return -ENOMEM;
	return api_stream_result(s, o);
}

int handle_catalog_update(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *from = NULL;
	struct job *j;

	if (req->body)
		(void)json_get_string(req->body, "from", &from);
	/* slated reads the source as root: only root may name one. Others update from the
	 * configured source, which the signature check makes safe to repeat. */
	if (from && req->caller.uid != 0)
		return api_reply_error(reply, 403, API_ERR_PERMISSION,
		                       "only root may name a catalog source (--from)");
	if (from && !strstr(from, "://") && from[0] != '/')
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "from: a URL or an absolute path");
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	if (from && !(j->from = strdup(from))) {
		job_free(j);
		return -ENOMEM;
	}
	return api_reply_stream(reply, update_run, j, job_free);
}

static int pull_run(struct api_stream *s, void *arg)
{
	struct job *j = arg;
	_cleanup_catalog_ struct catalog *c = NULL;
	_cleanup_json_ struct json_object *o = NULL, *applied = NULL;
	struct pull_consent consent = {.all = j->consent_all,
	                               .uuids = (const char *const *)j->consent_uuids,
	                               .n_uuids = j->n_consent_uuids};
	struct pull_result res = {0};
	struct slate_error err = {};
	struct json_object *steps;
	struct pull_config cfg;
	int r;

	j->stream = s;
	pull_config(j->d, &cfg);
	r = image_pull(&cfg, j->id, &consent, on_progress, j, &res, &err);
	if (r < 0) {
		const char *text = err.code ? slate_error_text(&err) : slate_strerror(r);

		log_event(LOG_WARNING, r <= -SLATE_ERR_BASE ? SLATE_MESSAGE_CATALOG_REFUSED : NULL,
		          NULL, NULL, j->id, "pull of image %s refused: %s", j->id, text);
		return api_stream_error(s, error_code(r), text);
	}
	o = api_image_json(res.info, false);
	steps = json_object_new_array();
	if (!o || !steps || json_add(o, "postinstall_pending", steps) < 0 ||
	    json_add_bool(o, "up_to_date", res.up_to_date) < 0 ||
	    json_add_int64(o, "downloaded", (int64_t)res.downloaded) < 0 ||
	    json_add_bool(o, "postinstall_run", res.n_applied > 0) < 0 ||
	    json_add_int64(o, "postinstall_applied", (int64_t)res.n_applied) < 0) {
		pull_result_done(&res);
		return -ENOMEM;
	}
	/* Steps of the accepted catalog still not applied to the installed image (none after a
	 * pull that succeeded, unless the catalog changed meanwhile). */
	if (catalog_state_load_current(j->d->state_dirfd, &c, NULL) >= 0 &&
	    image_applied_steps(j->d->storage, j->id, &applied) >= 0) {
		const struct catalog_image *im = catalog_find_image(c, j->id);
		for (size_t k = 0; im && k < im->n_steps; k++) {
			struct json_object *st;
			if (image_step_applied(applied, &im->steps[k]))
				continue;
			st = json_object_new_object();
			if (!st || json_object_array_add(steps, st) < 0) {
				json_object_put(st);
				break;
			}
			(void)json_add_string(st, "uuid", im->steps[k].uuid);
			(void)json_add_int64(st, "seq", im->steps[k].seq);
			(void)json_add_string(st, "description", im->steps[k].description);
			(void)json_add_string(st, "command", im->steps[k].command);
		}
	}
	pull_result_done(&res);
	return api_stream_result(s, TAKE_PTR(o));
}

int handle_image_pull(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *id = req->params[0];
	struct json_object *accept = NULL;
	struct job *j;

	if (api_need_images(d, reply) < 0)
		return 0;
	if (image_id_check(id) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "invalid image id '%s'",
		                       id);
	/* Installing a base every workspace of the host may use: root's decision. */
	if (req->caller.uid != 0)
		return api_reply_error(reply, 403, API_ERR_PERMISSION, "only root may pull images");
	/* accept_postinstall: true (every step), or the uuids of the steps the user accepted. */
	if (req->body)
		(void)json_object_object_get_ex(req->body, "accept_postinstall", &accept);
	if (accept && !json_object_is_type(accept, json_type_boolean) &&
	    (!json_object_is_type(accept, json_type_array) ||
	     json_object_array_length(accept) > CATALOG_MAX_STEPS))
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
		                       "accept_postinstall: true, or an array of at most %d step "
		                       "uuids",
		                       CATALOG_MAX_STEPS);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	if (!(j->id = strdup(id))) {
		job_free(j);
		return -ENOMEM;
	}
	if (accept && json_object_is_type(accept, json_type_boolean))
		j->consent_all = json_object_get_boolean(accept);
	else if (accept) {
		size_t n = json_object_array_length(accept);
		j->consent_uuids = calloc(n ? n : 1, sizeof(*j->consent_uuids));
		for (size_t k = 0; j->consent_uuids && k < n; k++) {
			struct json_object *u = json_object_array_get_idx(accept, k);
			if (!json_object_is_type(u, json_type_string) ||
			    json_object_get_string_len(u) != 36) {
				job_free(j);
				return api_reply_error(reply, 400, API_ERR_BAD_REQUEST,
				                       "accept_postinstall: step uuids");
			}
			j->consent_uuids[k] = strdup(json_object_get_string(u));
			if (!j->consent_uuids[k])
				break;
			j->n_consent_uuids++;
		}
		if (j->n_consent_uuids != n) {
			job_free(j);
			return -ENOMEM;
		}
	}
	return api_reply_stream(reply, pull_run, j, job_free);
}

static int verify_run(struct api_stream *s, void *arg)
{
	struct job *j = arg;
	_cleanup_json_ struct json_object *o = json_object_new_object();
	struct image_verify_result *res = NULL;
	struct json_object *arr = json_object_new_array();
	struct pull_config cfg;
	size_t n = 0, failed = 0;
	int r;

	j->stream = s;
	if (!o || !arr || json_add(o, "images", arr) < 0)
		return -ENOMEM;
	pull_config(j->d, &cfg);
	r = image_verify(&cfg, j->id, on_progress, j, &res, &n);
	if (r < 0) {
		char msg[256];
		(void)snprintf(msg, sizeof(msg), "%s%s%s", j->id ? j->id : "images",
		               r == -ENOENT ? ": not installed" : ": ",
		               r == -ENOENT ? "" : slate_strerror(r));
		return api_stream_error(s, error_code(r), msg);
	}
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_new_object();
		char digest[API_DIGEST_TEXT_MAX];
		if (!e || json_object_array_add(arr, e) < 0) {
			json_object_put(e);
			free(res);
			return -ENOMEM;
		}
		if (!res[i].ok)
			failed++;
		(void)json_add_string(e, "id", res[i].id);
		(void)json_add_bool(e, "ok", res[i].ok);
		(void)json_add_bool(e, "local", res[i].local);
		(void)json_add_string(e, "catalog", res[i].catalog);
		(void)json_add_string(e, "digest", api_digest_text(res[i].actual, digest));
		if (res[i].image_version)
			(void)json_add_int64(e, "image_version", res[i].image_version);
		if (!res[i].ok) {
			(void)json_add_string(e, "file", res[i].file);
			if (res[i].error < 0)
				(void)json_add_string(e, "error", slate_strerror(res[i].error));
			else
				(void)json_add_string(e, "expected",
				                      api_digest_text(res[i].expected, digest));
		}
	}
	free(res);
	if (json_add_int64(o, "failed", (int64_t)failed) < 0)
		return -ENOMEM;
	return api_stream_result(s, TAKE_PTR(o));
}

int handle_image_verify(struct api_request *req, struct api_reply *reply)
{
	struct daemon_ctx *d = req->userdata;
	const char *id = NULL;
	struct job *j;

	if (api_need_images(d, reply) < 0)
		return 0;
	if (req->body)
		(void)json_get_string(req->body, "id", &id);
	if (id && image_id_check(id) < 0)
		return api_reply_error(reply, 400, API_ERR_BAD_REQUEST, "invalid image id '%s'",
		                       id);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->d = d;
	if (id && !(j->id = strdup(id))) {
		job_free(j);
		return -ENOMEM;
	}
	return api_reply_stream(reply, verify_run, j, job_free);
}

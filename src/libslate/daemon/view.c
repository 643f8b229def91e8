/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The daemon's view of a workspace's VM (daemon/view.h). */
#include <stdint.h>

#include "channel/channels.h"
#include "daemon/daemon.h"
#include "daemon/view.h"
#include "util/json.h"
#include "vm/domain.h"
#include "vm/kvm.h"

int daemon_vm_view_json(struct daemon_ctx *d, const char *name, int active, struct json_object *o)
{
	const char *accel = NULL;
	enum vm_state st;

	if (active > 0 && vm_workspace_state_uri(d->libvirt_uri, name, &st) >= 0 &&
	    (st == VM_STATE_SUSPENDED || st == VM_STATE_PAUSED))
		(void)json_add_string(o, "state", vm_state_name(st));
	if (active <= 0 || vm_workspace_accel(d->libvirt_uri, name, &accel) < 0)
		accel = vm_accel_name(vm_kvm_usable(d->libvirt_uri) > 0);
	if (active > 0 && d->channels) {
		struct channel_info ci;
		struct json_object *c;
		if (channels_info(d->channels, name, &ci) >= 0 && (c = json_object_new_object())) {
			(void)json_add_bool(c, "connected", ci.connected);
			(void)json_add_bool(c, "ready", ci.ready);
			(void)json_add_int64(c, "streams", ci.streams);
			(void)json_add_int64(c, "sessions", (int64_t)ci.sessions);
			(void)json_add_int64(c, "errors", (int64_t)ci.errors);
			(void)json_add_int64(c, "bytes_in", (int64_t)ci.bytes_in);
			(void)json_add_int64(c, "bytes_out", (int64_t)ci.bytes_out);
			if (ci.last_error[0])
				(void)json_add_string(c, "last_error", ci.last_error);
			if (ci.last_event[0])
				(void)json_add_string(c, "last_event", ci.last_event);
			(void)json_add(o, "channel", c);
		}
	}
	return json_add_string(o, "accelerator", accel);
}

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# cleanup.sh: what the spike made: its domains, its slated and workspaces, the btrfs loop mount.
. "$(dirname "$0")/env.sh"
for dom in $(virsh -q -c qemu:///system list --all --name | grep -E '^slate-(snap-|ws[0-9]|sa$|sb$)'); do
    v destroy "$dom" >/dev/null 2>&1
    v undefine --managed-save "$dom" >/dev/null 2>&1
done
if [ -S "$RUN/slated.sock" ]; then
    s rm sa --yes >/dev/null 2>&1; s rm sb --yes >/dev/null 2>&1
fi
[ -f "$SP/slated.pid" ] && kill "$(cat "$SP/slated.pid")" 2>/dev/null
sleep 1
mountpoint -q "$FS" && umount "$FS"
rm -rf "$SP"

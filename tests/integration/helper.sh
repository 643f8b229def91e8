#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Privilege separation (doc/helper.md; doc/security.md, "Host side"): slated without CAP_SYS_ADMIN (gone from its bounding
# set; slated.service keeps it only for the confined qemu-img of qcow2 pulls) and in a slave
# mount namespace of its own, as slated.service runs it, with slated-helper started separately
# before (slated --helper-socket), still creates a workspace on the
# loop-backed pool, starts it, and deletes it; the pool the helper mounts is seen in the host's
# mount namespace (where libvirt's QEMU finds it) and in slated's, and a clean stop unmounts it
# through the helper. The control: the same confined slated with a helper of its own (which has
# no CAP_SYS_ADMIN either) cannot mount the pool and says why, so the first part did not pass by
# slated mounting anything itself.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image
command -v unshare >/dev/null || skip "unshare not found (apt-get install util-linux)"
command -v setpriv >/dev/null || skip "setpriv not found (apt-get install util-linux)"

state=$(realpath -m "$work/state")
helper_pid=
ws=priv-$$
on_exit detach_loops "$state/pool.img"
on_exit unmount "$state/pool"
on_exit stop_bg helper_pid
on_exit destroy_domains "slate-$ws"
on_exit stop_slated

# The pool whatever filesystem $TMPDIR is on.
mkdir -p "$state"
printf 'storage = pool\n' >"$work/slate.conf"

# slated as slated.service runs it, for this test: no CAP_SYS_ADMIN at all, and a mount
# namespace of its own that receives the host's mounts (slave) and sends none back. Each
# program execs the next, so start_slated's pid is slated's.
cat >"$work/slated-confined" <<EOF
#!/bin/sh
exec unshare --mount --propagation slave \\
    setpriv --bounding-set -sys_admin --inh-caps -sys_admin -- "$top_builddir/slated" "\$@"
EOF
chmod +x "$work/slated-confined"
slated=$work/slated-confined

# The helper first, with the privileges slated will not have.
"$top_builddir/slated-helper" --state-dir "$state" --listen "$work/helper.sock" \
    --log-level debug 2>>"$work/helper.log" &
helper_pid=$!
for _ in $(seq 100); do
    [ -S "$work/helper.sock" ] && break
    kill -0 "$helper_pid" 2>/dev/null || { cat "$work/helper.log"; fail "slated-helper died"; }
    sleep 0.05
done
[ -S "$work/helper.sock" ] || fail "slated-helper did not listen on $work/helper.sock"
[ "$(stat -c %a "$work/helper.sock")" = 600 ] || fail "the helper's socket is not 0600"

start_slated -- --config "$work/slate.conf" --helper-socket "$work/helper.sock"
# Really confined: CAP_SYS_ADMIN (bit 21) in neither its bounding nor its effective set, and
# another mount namespace than ours.
capbnd=$(awk '/^CapBnd:/ {print $2}' "/proc/$daemon_pid/status")
capeff=$(awk '/^CapEff:/ {print $2}' "/proc/$daemon_pid/status")
((((16#$capbnd >> 21) & 1) == 0)) || fail "slated still has CAP_SYS_ADMIN in its bounding set ($capbnd)"
((((16#$capeff >> 21) & 1) == 0)) || fail "slated still has CAP_SYS_ADMIN ($capeff)"
[ "$(readlink "/proc/$daemon_pid/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] ||
    fail "slated runs in the test's mount namespace"
log "slated $daemon_pid: CapBnd $capbnd, CapEff $capeff, $(readlink "/proc/$daemon_pid/ns/mnt")"

# The pool, mounted by the helper in the host's namespace, is in slated's too.
mountpoint -q "$state/pool" || fail "the pool is not mounted in the host's mount namespace"
grep -q " $state/pool " "/proc/$daemon_pid/mountinfo" || fail "slated does not see the pool"
grep -q "POOL_MOUNT: attached and mounted $state/pool.img" "$work/helper.log" ||
    fail "the helper's log does not say it mounted the pool: $(tail -5 "$work/helper.log")"
findmnt -n -o OPTIONS "$state/pool" | grep -q user_subvol_rm_allowed ||
    fail "the pool is not mounted with user_subvol_rm_allowed: $(findmnt -n -o OPTIONS "$state/pool")"

# A workspace on it: create, start, stop, delete.
import_test_image
s create "$ws" --memory 512 --cpus 1 --home-size 1G >/dev/null
wsdir=$(find "$state/pool/workspaces" -mindepth 1 -maxdepth 1 -name "*$ws*" | head -1)
[ -n "$wsdir" ] || wsdir=$state/pool/workspaces/$ws
[ -f "$wsdir/disk.img" ] || fail "no disk.img in $wsdir"
s start "$ws" >"$work/out" 2>"$work/progress" || fail "start: $(cat "$work/progress")"
grep -q "^started $ws in" "$work/out" || fail "start output: $(cat "$work/out")"
[ "$(v domstate "slate-$ws")" = running ] || fail "virsh domstate: $(v domstate "slate-$ws")"
s stop "$ws" --force >/dev/null
s rm "$ws" --yes >/dev/null
[ -e "$wsdir" ] && fail "rm left $wsdir (a subvolume slated could not delete?)"
s ls --json | python3 -c 'import json,sys; assert not json.load(sys.stdin)["workspaces"]' ||
    fail "the workspace is still listed"

# A clean stop unmounts the pool, through the helper.
stop_slated
mountpoint -q "$state/pool" && fail "the pool stays mounted after a clean stop"
grep -q "POOL_UNMOUNT: unmounted the pool of $state" "$work/helper.log" ||
    fail "the helper's log does not say it unmounted the pool"
grep -q "unmounted the storage pool $state/pool" "$work/slated.log" ||
    fail "slated's log does not say the pool was unmounted"
stop_bg helper_pid

# The control: without --helper-socket the confined slated starts a helper of its own, as
# confined as itself, and the pool cannot be mounted: slated did not do it before either.
start_slated -- --config "$work/slate.conf"
expect_fail 1 "this needs CAP_SYS_ADMIN" s create "$ws-2"
mountpoint -q "$state/pool" && fail "a confined slated got the pool mounted without a helper"
s doctor --json >"$work/doctor.json" || true
grep -q "cannot mount /dev/loop[0-9]* ($state/pool.img) on $state/pool: Operation not permitted (this needs CAP_SYS_ADMIN)" "$work/doctor.json" ||
    fail "doctor does not say why: $(cat "$work/doctor.json")"
stop_slated

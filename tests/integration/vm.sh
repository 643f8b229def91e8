#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# One libvirt domain per workspace, through the real daemon and client, on the test image (TCG
# where KVM does not run guests): start (ready line), virsh's view (metadata, no interface), the
# console both ways, stop (ACPI then destroy), --force, --suspend and resume, rm refusing a
# running workspace, a guest-initiated poweroff noticed through domain events, kill -9 of slated
# while a domain runs (picked up again), a compromised workspace refusing to start until wiped,
# start after a wipe re-cloning the disk, and base drift refused without --reset-to-base/--as-is.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail
# Cold boots only: the boot's progress and console ready line are what it checks.
export SLATE_TEST_SNAPSHOTS=

ensure_libvirt
ensure_test_image

state_of() { s describe "$1" --json | jget state; }
# console NAME COMMAND: types COMMAND on the serial console, prints what came back.
console() {
    { sleep 0.3; printf '\n%s\n' "$2"; sleep 1.5; } | timeout 30 "$slate" --socket "$work/run/slated.sock" console "$1" | tr -d '\r'
}
# Unique per run: another checkout's make check may drive the same libvirtd at the same time.
ws=vmt-$$
on_exit destroy_domains "slate-$ws"
on_exit stop_slated

mnt=$(make_loop_fs btrfs vm 2G)
state=$mnt/state
start_slated
import_test_image
s create $ws --memory 512 --cpus 1 --home-size 1G >/dev/null

# Start: returns once the guest is ready; virsh sees the domain, slate's metadata, no NIC.
t0=$SECONDS
s start $ws >"$work/out" 2>"$work/progress" || fail "start: $(cat "$work/progress")"
log "first boot: $(cat "$work/out") (wall $((SECONDS - t0)) s)"
grep -q "^started $ws in" "$work/out" || fail "start output: $(cat "$work/out")"
grep -q "booting" "$work/progress" || fail "no progress shown: $(cat "$work/progress")"
[ "$(state_of $ws)" = running ] || fail "describe does not say running"
accel=$(s describe $ws --json | jget accelerator)
case "$accel" in kvm | tcg) ;; *) fail "accelerator '$accel'" ;; esac
[ "$(v domstate slate-$ws)" = running ] || fail "virsh domstate: $(v domstate slate-$ws)"
v list --name | grep -qx slate-$ws || fail "virsh list lacks slate-$ws"
v dumpxml slate-$ws >"$work/dom.xml"
grep -q "<slate:workspace xmlns:slate=\"https://slate.dev/xmlns/libvirt/1\" name=\"$ws\"" "$work/dom.xml" ||
    fail "dumpxml lacks slate's metadata"
grep -q "<interface" "$work/dom.xml" && fail "the domain has a network interface"
grep -q "cache='none'.*discard='unmap' detect_zeroes='unmap'" "$work/dom.xml" || fail "disk driver options"
grep -q "name='org.slate.channel.0'" "$work/dom.xml" || fail "no guest channel"
grep -q "freePageReporting='on'" "$work/dom.xml" || fail "no free page reporting"
[ "$(v domuuid slate-$ws)" = "$(s describe $ws --json | jget uuid)" ] || fail "domain UUID is not the workspace's"
grep -q "slate-guest .*: ready" "$work/run/vm/$ws/console.log" || fail "console log lacks the ready line"

# rm, reset and wipe refuse a running workspace and name slate stop.
expect_fail 1 "is running: stop it first (slate stop)" s rm $ws --yes
expect_fail 1 "is running: stop it first (slate stop)" s reset $ws --yes
s start $ws | grep -q "already running" || fail "a second start is not a no-op"

# The console, both ways; a file written now survives a stop.
console $ws 'echo kept >/root/marker; sync; echo console-$((6*7))' >"$work/console.out"
grep -q "^console-42" "$work/console.out" || fail "console round trip: $(cat "$work/console.out")"

# Stop: the test image's busybox init ignores the ACPI button, so this powers off after 2 s.
s stop $ws --timeout 2 | grep -q "stopped $ws" || fail "stop output"
[ "$(state_of $ws)" = stopped ] || fail "stopped workspace says $(state_of $ws)"
v domstate slate-$ws >/dev/null 2>&1 && fail "a stopped workspace keeps its domain defined"

# Start again: the disk is the workspace's own (the marker is there); then --force.
s start $ws >/dev/null
console $ws 'cat /root/marker' | grep -q "^kept" || fail "the marker did not survive a stop"
s stop $ws --force | grep -q "powered off" || fail "stop --force output"
[ "$(state_of $ws)" = stopped ] || fail "after --force"

# Suspend and resume: the next start restores the memory instead of booting.
s start $ws >/dev/null
console $ws 'export SLATE_MEM=remembered' >/dev/null
t0=$(date +%s%N)
s stop $ws --suspend | grep -q "suspended $ws" || fail "stop --suspend output"
log "managed save: $((($(date +%s%N) - t0) / 1000000)) ms"
[ "$(state_of $ws)" = suspended ] || fail "suspended workspace says $(state_of $ws)"
[ "$(v domstate slate-$ws)" = "shut off" ] || fail "virsh domstate of a suspended domain"
expect_fail 1 "is running: stop it first" s reset $ws --yes
s start $ws | grep -q "^resumed $ws" || fail "start did not resume"
console $ws 'echo "mem=$SLATE_MEM"' | grep -q "^mem=remembered" || fail "resume lost the shell's memory"

# kill -9 of slated while the domain runs: it keeps running and is picked up again.
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=
[ "$(v domstate slate-$ws)" = running ] || fail "the domain died with slated"
start_slated
grep -q "picked up running domain slate-$ws" "$work/slated.log" || fail "not picked up"
[ "$(state_of $ws)" = running ] || fail "after restart: $(state_of $ws)"
# A clean stop (SIGTERM, what systemctl stop and restart send) leaves it running too, and the
# next slated picks it up again and can still reach its console.
picked=$(grep -c "picked up running domain slate-$ws" "$work/slated.log")
stop_slated
grep -q "shutting down" "$work/slated.log" || fail "slated did not stop cleanly"
[ "$(v domstate slate-$ws)" = running ] || fail "the domain died with a clean stop of slated"
start_slated
[ "$(grep -c "picked up running domain slate-$ws" "$work/slated.log")" -gt "$picked" ] ||
    fail "not picked up after a clean restart"
[ "$(state_of $ws)" = running ] || fail "after a clean restart: $(state_of $ws)"
console $ws 'echo "still $((6 * 7))"' | grep -q "^still 42" || fail "no console after a clean restart"

# A poweroff from inside the guest is noticed (domain events) and the domain is undefined.
console $ws 'poweroff -f' >/dev/null || true
for _ in $(seq 50); do
    v domstate slate-$ws >/dev/null 2>&1 || break
    sleep 0.2
done
grep -q "slate-$ws stopped (the guest powered off)" "$work/slated.log" || fail "guest poweroff not noticed"
[ "$(state_of $ws)" = stopped ] || fail "after guest poweroff: $(state_of $ws)"
v domstate slate-$ws >/dev/null 2>&1 && fail "the powered-off domain is still defined"

# A compromised workspace refuses to start until wiped; after the wipe, start re-clones.
# mark_compromised NAME: what the proxy's leak hook persists, written while slated is stopped.
mark_compromised() {
    python3 - "$state/workspaces/$1/workspace.json" <<'PY'
import json, sys
p = sys.argv[1]; w = json.load(open(p))
w.update(compromised=True, compromisedAt=1, compromisedHost="evil.example")
open(p, "w").write(json.dumps(w))
PY
}
# Caught while running: the leak detector pauses the guest. It shows as compromised (not paused),
# and stop powers it off at once instead of pressing the power button of a paused CPU.
s start $ws >/dev/null
stop_slated
mark_compromised "$ws"
v suspend slate-$ws >/dev/null
start_slated
[ "$(state_of $ws)" = compromised ] || fail "a paused, quarantined workspace says $(state_of $ws)"
t0=$SECONDS
s stop $ws >/dev/null 2>"$work/err" || fail "stop of a quarantined workspace: $(cat "$work/err")"
[ $((SECONDS - t0)) -lt 10 ] || fail "stop of a paused, quarantined guest took $((SECONDS - t0)) s"
log "stop of a paused, quarantined guest: $((SECONDS - t0)) s"
v domstate slate-$ws >/dev/null 2>&1 && fail "the quarantined domain is still there after stop"
[ "$(state_of $ws)" = compromised ] || fail "a stopped, quarantined workspace says $(state_of $ws)"
expect_fail 1 "slate wipe $ws" s start $ws
v domstate slate-$ws >/dev/null 2>&1 && fail "a compromised workspace got a domain"
# Half a wipe is not enough: the home alone (the disk is still the one that leaked), then the disk
# alone (the home is still there)...
s wipe-home $ws --yes >/dev/null
expect_fail 1 "slate wipe $ws" s start $ws
v domstate slate-$ws >/dev/null 2>&1 && fail "a compromised workspace with only its home wiped got a domain"
python3 - "$state/workspaces/$ws/workspace.json" <<'PY'
import json, sys
p = sys.argv[1]; w = json.load(open(p))
assert w["compromised"] is True, w
PY
s wipe $ws --yes >/dev/null
# Wiped: no longer shown as compromised, and describe no longer asks for a wipe.
[ "$(state_of $ws)" = stopped ] || fail "a wiped workspace says $(state_of $ws)"
s describe $ws >"$work/out"
grep -q COMPROMISED "$work/out" && fail "describe still asks to wipe a wiped workspace: $(cat "$work/out")"
grep -q "^leak: .*wiped since" "$work/out" || fail "describe does not say the leak was wiped: $(cat "$work/out")"
s create "$ws-h" --home-size 1G >/dev/null
stop_slated
mark_compromised "$ws-h"
start_slated
s reset "$ws-h" --yes >/dev/null
expect_fail 1 "slate wipe $ws-h" s start "$ws-h"
v domstate "slate-$ws-h" >/dev/null 2>&1 && fail "a compromised workspace with only its disk reset got a domain"
s rm "$ws-h" --yes >/dev/null
# ...and the whole wipe (disk and home) is.
s start $ws >/dev/null || fail "start after wipe"
console $ws 'ls /root/marker' | grep -q "No such file" || fail "start after wipe did not re-clone the disk"
s stop $ws --force >/dev/null

# Base drift: a replaced image makes start ask for --reset-to-base or --as-is.
import_test_image --replace
expect_fail 1 "reset-to-base.*as-is" s start $ws
s start $ws --as-is >/dev/null 2>&1 || fail "start --as-is"
s stop $ws --force >/dev/null
s rm $ws --yes >/dev/null
# Other runs' domains may be orphans to this daemon; none may be ours.
s doctor --json | python3 -c 'import json,sys; c={x["check"]:x for x in json.load(sys.stdin)["checks"]}; assert "slate-"+sys.argv[1]+" " not in c["domains"]["detail"], c["domains"]' "$ws" ||
    fail "doctor reports $ws's domain as an orphan"
stop_slated
echo "vm: all checks passed"

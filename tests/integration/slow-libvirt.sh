#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A slow libvirt: slated talks to libvirtd through tests/integration/slow-libvirt.py,
# which holds every domain definition back for a while, as a libvirtd re-probing QEMU on each
# lookup does (~100 s on hosts where /dev/kvm exists but KVM cannot run guests). slated's API
# connections are dropped after SLATED_IDLE_TIMEOUT_S of silence (shortened here to 6 s; the
# definition is held 14 s), so:
# * `slate start` must see keep-alives (its last step again, "still waiting") at least every 5 s
#   and succeed: the stream is never cut, the client never gives up;
# * a client killed while the definition is held leaves no half state: slated finishes the start
#   (the guest ends up running, not paused, and a command runs in it) or undoes it;
# * `slate stop` streams keep-alives the same way;
# * a libvirt connection lost in the middle of a start (the proxy closes it after passing the
#   start on; libvirtd goes on starting QEMU) makes the start fail and leaves no domain running
#   or paused behind it; the next start works;
# * `slate run` shows the same keep-alives for its start.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

proxy_pid=
hold_s=14
ws1=slow1-$$
ws2=slow2-$$
ws3=slow3-$$
ws4=slow4-$$
domstate() { virsh -q -c qemu:///system domstate "slate-$1" 2>/dev/null | head -1 || true; }
on_exit destroy_domains "slate-$ws1" "slate-$ws2" "slate-$ws3" "slate-$ws4"
on_exit stop_slated
on_exit stop_bg proxy_pid

libvirt_sock=/var/run/libvirt/libvirt-sock
[ "$SLATE_TEST_URI" = qemu:///system ] && [ -S "$libvirt_sock" ] ||
    skip "needs qemu:///system on $libvirt_sock to put a slow proxy in front of"
trigger=$work/hold-definitions
python3 "$top_srcdir/tests/integration/slow-libvirt.py" "$work/libvirt.sock" "$libvirt_sock" \
    "$hold_s" "$trigger" >"$work/proxy.log" 2>&1 &
# shellcheck disable=SC2034 # stop_bg reads it
proxy_pid=$!
for _ in $(seq 100); do grep -q ready "$work/proxy.log" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$work/proxy.log" || fail "slow-libvirt.py did not start: $(cat "$work/proxy.log")"

mnt=$(make_loop_fs btrfs slow 2G)
state=$mnt/state
start_slated SLATED_IDLE_TIMEOUT_S=6 -- --libvirt-uri "qemu+unix:///system?socket=$work/libvirt.sock"
import_test_image
s create "$ws1" --memory 256 --cpus 1 --home-size 256M >/dev/null
s create "$ws2" --memory 256 --cpus 1 --home-size 256M >/dev/null
s create "$ws3" --memory 256 --cpus 1 --home-size 256M >/dev/null
touch "$trigger"

# 0. The doctor times a definition (held 14 s here: over its 3 s threshold, within the 20 s it
#    waits) and warns that every start waits as long; its throwaway domain is undefined.
s doctor --json >"$work/doctor.json" || fail "doctor through a slow libvirt: $(cat "$work/doctor.json")"
python3 - "$work/doctor.json" "$hold_s" <<'PY' || fail "doctor's define check: $(cat "$work/doctor.json")"
import json, re, sys
d = {x["check"]: x for x in json.load(open(sys.argv[1]))["checks"]}["define"]
m = re.match(r"libvirt took (\d+\.\d+) s to define a throwaway domain \(warn above 3\.0 s\)",
             d["detail"])
assert d["status"] == "warn" and m and float(m.group(1)) >= int(sys.argv[2]) - 1, d
assert ", and every start waits as long: " in d["detail"], d
PY
! virsh -q -c qemu:///system list --all --name | grep -q "^slated-doctor-$daemon_pid-" ||
    fail "the doctor left its throwaway domain defined"

# 1. A start through a definition held 14 s, with connections dropped after 6 s of silence.
t0=$SECONDS
s start "$ws1" >"$work/out" 2>"$work/start.err" || fail "start through a slow libvirt failed \
after $((SECONDS - t0)) s: $(cat "$work/start.err")"
grep -q '^held' "$work/proxy.log" || fail "the definition was not held back (proxy not in the path?)"
sed 's/^/#   /' "$work/start.err" >&2
grep -q 'defining: .*(still waiting, [0-9]* s)' "$work/start.err" ||
    fail "no keep-alive while libvirt defined the domain: $(cat "$work/start.err")"
# No gap of 5 s or more between two lines of progress.
awk -F'[][s]' '/^\[/ { t = $2 + 0; if (NR > 1 && t - last >= 5) { print "gap", last, t; bad = 1 } last = t }
    END { exit bad }' "$work/start.err" >"$work/gaps" || fail "progress gaps of 5 s or more: $(cat "$work/gaps")"
[ "$(domstate "$ws1")" = running ] || fail "after start: $(domstate "$ws1")"
log "start through a ${hold_s} s definition: $((SECONDS - t0)) s, keep-alives every <5 s"

# 2. stop streams keep-alives as well (the guest takes a while to power off) and succeeds.
s stop "$ws1" >/dev/null 2>"$work/stop.err" || fail "stop: $(cat "$work/stop.err")"

# 3. The client killed while the definition is held: slated finishes the start (running, not
#    paused, a command runs in it) or undoes it (no domain); never defined and paused.
held_before=$(grep -c '^held' "$work/proxy.log")
s start "$ws2" >/dev/null 2>"$work/start2.err" &
client=$!
for _ in $(seq 100); do
    [ "$(grep -c '^held' "$work/proxy.log")" -gt "$held_before" ] && break
    sleep 0.1
done
sleep 2
kill -9 "$client" 2>/dev/null || true
wait "$client" 2>/dev/null || true
log "client killed while libvirt held the definition"
end=$((SECONDS + 300))
while [ $SECONDS -lt $end ]; do
    grep -q "booted slate-$ws2\|start $ws2: \|failed after its client went away" "$work/slated.log" && break
    sleep 1
done
# The last steps (terminal proof, provisioning, checkpoint) follow the boot.
for _ in $(seq 120); do
    grep -q "proven-boot checkpoint .* of $ws2\|no proven-boot checkpoint of $ws2\|failed after its client went away\|start $ws2: " \
        "$work/slated.log" && break
    sleep 1
done
st=$(domstate "$ws2")
case "$st" in
running)
    out=$(s exec "$ws2" -- echo alive 2>&1) || fail "the orphaned start left a guest that runs no command: $out"
    [ "$out" = alive ] || fail "exec after the orphaned start: $out"
    log "orphaned start finished: running, exec works"
    ;;
"" | "shut off")
    s ls --json | grep -q "\"$ws2\"" || fail "the workspace itself is gone"
    log "orphaned start undone: $st"
    ;;
*) fail "after the client went away mid-start the domain is '$st' (want running, or undone)" ;;
esac
s stop --force "$ws2" >/dev/null 2>&1 || true

# 4. The libvirt connection lost mid-start.
echo cut >"$trigger"
if s start "$ws3" >/dev/null 2>"$work/start3.err"; then
    fail "start succeeded although its libvirt connection was cut"
fi
grep -q '^cut' "$work/proxy.log" || fail "the proxy never cut a start: $(cat "$work/start3.err")"
log "start with its libvirt connection cut: $(tail -1 "$work/start3.err")"
sleep 3 # libvirtd finishes the start it was asked for, unobserved
st=$(domstate "$ws3")
case "$st" in
"" | "shut off") ;;
*) fail "a start that lost libvirt left the domain '$st' (want none, or shut off)" ;;
esac
rm -f "$trigger"
s start "$ws3" >/dev/null 2>"$work/start3.err" || fail "start after the cut one: $(cat "$work/start3.err")"
[ "$(domstate "$ws3")" = running ] || fail "after the second start: $(domstate "$ws3")"
s stop --force "$ws3" >/dev/null 2>&1 || true

# 5. `slate run` reports its start the same way (PROGRESS records on its upgraded connection,
#    shown when stderr is a terminal: script(1) gives it one), and runs the command.
touch "$trigger"
script -qec "'$slate' --socket '$work/run/slated.sock' run --rm --name '$ws4' -- echo ran-through-slow-libvirt" \
    /dev/null >"$work/run.out" 2>&1 </dev/null || fail "run through a slow libvirt: $(cat "$work/run.out")"
rm -f "$trigger"
grep -q 'ran-through-slow-libvirt' "$work/run.out" || fail "run's command did not run: $(cat "$work/run.out")"
grep -q 'defining: .*(still waiting, [0-9]* s)' "$work/run.out" ||
    fail "run showed no keep-alive while libvirt defined the domain: $(cat "$work/run.out")"

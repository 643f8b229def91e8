#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Many jobs at once on one host: 8 concurrent `slate run --rm` on the test image under TCG all
# finish with their own output and exit status, each in a VM of its own (distinct boot IDs), and
# afterwards nothing is left: no workspace, domain, loop device, workspace directory, channel
# socket or virtiofsd. Then slate.conf's per-host limits: with max-running = 2 and
# when-full = refuse a third start is refused with a message naming the limit; with
# when-full = queue the extra jobs wait for a slot (never more than 2 domains at once) and all
# finish; a memory budget too small for one more workspace refuses it the same way.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

n=8
names=()
for i in $(seq $n); do names+=("cj$$-$i"); done
doms=()
for x in "${names[@]}" "cq$$-1" "cq$$-2" "cq$$-3" "cq$$-4" "cr$$-1" "cr$$-2" "cr$$-3" "cm$$-1" "cm$$-2"; do
    doms+=("slate-$x")
done
on_exit destroy_domains "${doms[@]}"
on_exit stop_slated

mnt=$(make_loop_fs btrfs conc 6G)
state=$mnt/state
start_slated
import_test_image

loops_before=$(losetup -a | wc -l)
t0=$SECONDS
pids=()
for i in $(seq $n); do
    s run --rm --name "cj$$-$i" -- sh -c "echo job $i; cat /proc/sys/kernel/random/boot_id; exit $((i % 3))" \
        >"$work/job$i.out" 2>"$work/job$i.err" &
    pids+=($!)
done
for i in $(seq $n); do
    rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    [ $rc = $((i % 3)) ] || fail "job $i exited $rc, want $((i % 3)): $(cat "$work/job$i.err")"
    [ "$(head -1 "$work/job$i.out")" = "job $i" ] || fail "job $i printed: $(cat "$work/job$i.out")"
done
log "$n concurrent run --rm jobs finished in $((SECONDS - t0)) s"
boot_ids=$(for i in $(seq $n); do sed -n 2p "$work/job$i.out"; done | sort -u | wc -l)
[ "$boot_ids" = $n ] || fail "$n jobs ran in $boot_ids VMs"

# Nothing left behind.
[ "$(s ls --json | jget workspaces | tr -d '[] \n')" = "" ] || fail "workspaces left: $(s ls)"
for d in "${doms[@]}"; do
    v dominfo "$d" >/dev/null 2>&1 && fail "domain $d left behind"
done
[ "$(losetup -a | wc -l)" = "$loops_before" ] || fail "loop devices left: $(losetup -a)"
left=$(ls "$state/workspaces" 2>/dev/null | grep "^cj$$-" || true)
[ -z "$left" ] || fail "workspace directories left: $left"
left=$(ls "$work/run/vm" 2>/dev/null | grep "^cj$$-" || true)
[ -z "$left" ] || fail "runtime directories left: $left"
pgrep -f "virtiofsd.*cj$$-" >/dev/null && fail "a virtiofsd was left"

# Per-host limits: slated restarted with max-running = 2.
restart_with() {
    stop_slated
    printf '%s\n' "$@" >"$work/slate.conf"
    start_slated -- --config "$work/slate.conf"
}
restart_with "max-running = 2" "when-full = refuse"
s create cr$$-1 --memory 256 >/dev/null
s create cr$$-2 --memory 256 >/dev/null
s create cr$$-3 --memory 256 >/dev/null
s start cr$$-1 >/dev/null 2>&1 || fail "start cr$$-1 under the limit"
s start cr$$-2 >/dev/null 2>&1 || fail "start cr$$-2 under the limit"
expect_fail --slate-form 1 "max-running = 2" s start cr$$-3
v dominfo slate-cr$$-3 >/dev/null 2>&1 && fail "the refused start defined a domain"
s stop --force cr$$-2 >/dev/null 2>&1
s start cr$$-3 >/dev/null 2>&1 || fail "start cr$$-3 once a slot was free: $(cat "$work/err")"
s stop --force cr$$-1 >/dev/null 2>&1
s stop --force cr$$-3 >/dev/null 2>&1

# Queueing: four jobs, two slots; all finish, never more than two domains at once.
restart_with "max-running = 2" "when-full = queue"
pids=()
# Each job holds its slot for 15 s after its boot: under load slated makes the four workspaces one
# after another, and with a shorter job the first two were gone before the last two asked.
for i in 1 2 3 4; do
    s run --rm --name "cq$$-$i" -- sh -c "echo q$i; sleep 15" >"$work/q$i.out" 2>"$work/q$i.err" &
    pids+=($!)
done
peak=0
while kill -0 "${pids[@]}" 2>/dev/null; do
    c=$(v list --name | grep -c "^slate-cq$$-" || true)
    [ "$c" -gt "$peak" ] && peak=$c
    sleep 0.2
done
for i in 1 2 3 4; do
    rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    [ $rc = 0 ] || fail "queued job $i exited $rc: $(cat "$work/q$i.err")"
    grep -q "^q$i$" "$work/q$i.out" || fail "queued job $i printed: $(cat "$work/q$i.out")"
done
[ "$peak" -le 2 ] || fail "$peak domains ran at once under max-running = 2"
# The count slated gives may be higher than the domains that run: a start in flight is counted
# both as a start and, once defined, as a domain (conservative: never more than the limit run).
grep -q "waiting for a slot: [0-9]* workspaces run or start, max-running = 2" "$work/slated.log" ||
    fail "slated never said a start waited for a slot: $(grep -E "cq$$-[0-9]: (waiting|starting)|slot|admit" "$work/slated.log" | tail -20)"
log "queued: 4 jobs through 2 slots, peak $peak domains"

# A memory budget that fits one 256 MiB workspace and not two.
restart_with "memory-budget = 400M" "when-full = refuse"
s create cm$$-1 --memory 256 >/dev/null
s create cm$$-2 --memory 256 >/dev/null
s start cm$$-1 >/dev/null 2>&1 || fail "start cm$$-1 within the budget"
expect_fail --slate-form 1 "memory-budget" s start cm$$-2
s stop --force cm$$-1 >/dev/null 2>&1

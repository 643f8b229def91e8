#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Nothing hangs (slate(1), "EXIT STATUS"): `slate exec`, `shell` and `run` end promptly, saying why and
# with their own exit status, when the workspace is paused (250), quarantined after a leak (251),
# stopped (252) or its guest stops answering (253); exec on a paused workspace ends at once; a
# second Ctrl-C (130) or a SIGTERM (143) ends the client at once even when the guest's command
# ignores them, and so does a SIGHUP (129) unless it is ignored (nohup). One boot of the test
# image under TCG serves every case.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

ws=hang$$
dom=slate-$ws
passed=
dump_log() {
    local rc=0
    [ -z "$passed" ] || return 0
    tail -40 "$work/slated.log" >&2 2>/dev/null || true
    if [ -n "$daemon_pid" ] && ! kill -0 "$daemon_pid" 2>/dev/null; then
        wait "$daemon_pid" 2>/dev/null || rc=$?
        log "slated is gone (exit status $rc)"
    fi
}
on_exit destroy_domains "$dom"
on_exit stop_slated
on_exit dump_log

# A guest that stops answering is declared so after 6 s here (30 s by default).
start_daemon() { start_slated SLATE_EXEC_TEST_UNRESPONSIVE_MS=6000; }

# bg NAME SLATE-ARG...: the client in the background (stdout/stderr in $work/NAME.out/.err),
# its pid in $bg_pid; returns once the command printed "up".
bg() {
    local name=$1
    shift
    "$slate" --socket "$work/run/slated.sock" "$@" >"$work/$name.out" 2>"$work/$name.err" &
    bg_pid=$!
    for _ in $(seq 600); do
        grep -q up "$work/$name.out" 2>/dev/null && return 0
        kill -0 $bg_pid 2>/dev/null || break
        sleep 0.1
    done
    fail "$name: the command never got going: $(cat "$work/$name.out" "$work/$name.err")"
}
# ends_within S NAME WANT PATTERN: the client $bg_pid must end within S seconds with status WANT
# and PATTERN in its stderr; logs how long it took (since $t0, in ms).
ends_within() {
    local s=$1 name=$2 want=$3 pat=$4 rc=0
    for _ in $(seq $((s * 10))); do
        kill -0 $bg_pid 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 $bg_pid 2>/dev/null; then
        kill -9 $bg_pid
        wait $bg_pid 2>/dev/null || true
        fail "$name: the client still ran after $s s: $(cat "$work/$name.err")"
    fi
    wait $bg_pid || rc=$?
    [ "$rc" = "$want" ] || fail "$name: exited $rc, want $want: $(cat "$work/$name.err")"
    [ -z "$pat" ] || grep -q -- "$pat" "$work/$name.err" || fail "$name: stderr lacks '$pat': $(cat "$work/$name.err")"
    log "$name: ended with $rc after $(($(date +%s%3N) - t0)) ms: $(head -c 300 "$work/$name.err")"
}
exec_works() {
    for _ in $(seq 300); do s exec $ws -- true 2>"$work/works.err" && return 0; sleep 0.2; done
    fail "exec does not work again after $1: $(cat "$work/works.err")"
}
# mark_compromised: what the proxy's leak hook persists (workspace.json kept aside for unmark).
mark_compromised() {
    cp "$state/workspaces/$ws/workspace.json" "$work/workspace.json"
    python3 - "$state/workspaces/$ws/workspace.json" <<'PY'
import json, os, sys
p = sys.argv[1]; w = json.load(open(p))
w.update(compromised=True, compromisedAt=1, compromisedHost="evil.example")
open(p + ".tmp", "w").write(json.dumps(w))
os.rename(p + ".tmp", p)
PY
}
unmark_compromised() {
    cp "$work/workspace.json" "$state/workspaces/$ws/workspace.json.tmp"
    mv "$state/workspaces/$ws/workspace.json.tmp" "$state/workspaces/$ws/workspace.json"
}

mnt=$(make_loop_fs btrfs hang 3G)
state=$mnt/state
start_daemon
import_test_image
s create $ws --memory 512 --cpus 1 --home-size 1G >/dev/null
s start $ws >/dev/null 2>"$work/start.err" || fail "start: $(cat "$work/start.err")"

# A second Ctrl-C ends the client at once (130), though the command ignores SIGINT; the first is
# passed on (the command says it got it).
bg int exec $ws -- sh -c 'trap "echo got-int" INT; echo up; while :; do sleep 1; done'
kill -INT $bg_pid
for _ in $(seq 100); do grep -q got-int "$work/int.out" && break; sleep 0.1; done
grep -q got-int "$work/int.out" || fail "the first SIGINT did not reach the command"
t0=$(date +%s%3N)
kill -INT $bg_pid
ends_within 5 int 130 "interrupted again"
# SIGTERM ends it at once (143), though the command ignores SIGTERM.
bg term exec $ws -- sh -c 'trap "" TERM INT HUP; echo up; sleep 120'
t0=$(date +%s%3N)
kill -TERM $bg_pid
ends_within 5 term 143 ""
# SIGHUP too (129), unless it is ignored, as under nohup: then the client stays.
bg hup exec $ws -- sh -c 'trap "" TERM INT HUP; echo up; sleep 120'
t0=$(date +%s%3N)
kill -HUP $bg_pid
ends_within 5 hup 129 ""
(trap '' HUP; exec "$slate" --socket "$work/run/slated.sock" exec $ws -- sh -c 'echo up; sleep 120') \
    >"$work/nohup.out" 2>"$work/nohup.err" &
bg_pid=$!
for _ in $(seq 600); do grep -q up "$work/nohup.out" 2>/dev/null && break; sleep 0.1; done
kill -HUP $bg_pid
sleep 2
kill -0 $bg_pid 2>/dev/null || fail "SIGHUP ended a client that ignores it (nohup)"
t0=$(date +%s%3N)
kill -TERM $bg_pid
ends_within 5 nohup 143 ""

# Paused under a running command: exec ends (250) and says so; exec on the paused workspace ends
# at once the same way; once resumed, exec works again.
bg pause exec $ws -- sh -c 'echo up; sleep 120'
t0=$(date +%s%3N)
v suspend $dom >/dev/null
ends_within 20 pause 250 "$ws is paused"
t0=$(date +%s%3N)
rc=0
timeout 60 "$slate" --socket "$work/run/slated.sock" exec $ws -- true >"$work/out" 2>"$work/err" || rc=$?
[ "$rc" = 250 ] && grep -q "is paused" "$work/err" ||
    fail "exec on a paused workspace: rc $rc: $(cat "$work/err")"
log "exec on a paused workspace: ended after $(($(date +%s%3N) - t0)) ms"
# shell (a PTY, stdin from a terminal) ends the same way.
mkfifo "$work/shell.in"
sleep 300 >"$work/shell.in" &
holder=$!
v resume $dom >/dev/null
exec_works "resume"
script -qefc "$slate --socket $work/run/slated.sock shell $ws" /dev/null <"$work/shell.in" \
    >"$work/shell.out" 2>&1 &
bg_pid=$!
for _ in $(seq 600); do [ -s "$work/shell.out" ] && break; sleep 0.1; done
sleep 1
t0=$(date +%s%3N)
v suspend $dom >/dev/null
cp /dev/null "$work/shell.err"
ends_within 20 shell 250 ""
grep -q "is paused" "$work/shell.out" || fail "shell: no message: $(tail -c 300 "$work/shell.out")"
kill $holder 2>/dev/null || true
v resume $dom >/dev/null
exec_works "resume"

# Quarantined (what the leak detector does: mark it compromised, then pause it): 251, and the
# message points at the trace of leaks.
bg leak exec $ws -- sh -c 'echo up; sleep 120'
t0=$(date +%s%3N)
mark_compromised
v suspend $dom >/dev/null
ends_within 20 leak 251 "slate trace $ws --leaks"
unmark_compromised
v resume $dom >/dev/null
exec_works "the quarantine test"

# A guest that stops answering (slate-guest stopped; it continues 40 s later): 253.
bg mute exec --user root $ws -- sh -c 'p=$(pidof slate-guest)
(sleep 40; kill -CONT $p) </dev/null >/dev/null 2>&1 &
echo up; sleep 2; kill -STOP $p; sleep 120'
t0=$(date +%s%3N)
ends_within 40 mute 253 "has not answered"
exec_works "slate-guest continued"

# Stopped under running commands (an exec and a run): both end (252) and say so.
bg stop exec $ws -- sh -c 'echo up; sleep 120'
stop_pid=$bg_pid
bg run run --name $ws -- sh -c 'echo up; sleep 120'
t0=$(date +%s%3N)
s stop --force $ws >/dev/null
ends_within 20 run 252 "$ws stopped"
bg_pid=$stop_pid
ends_within 20 stop 252 "$ws stopped"
s rm $ws --yes >/dev/null
stop_slated
passed=yes
log "exec-hang tests passed"

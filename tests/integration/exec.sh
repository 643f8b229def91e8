#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The guest channel end to end, on the test image under TCG, through the real daemon, client and
# slate-guest over the virtio-serial fallback: start returning after the terminal proof (and
# leaving a proven-boot checkpoint), exit statuses (0, 1, 3, 127, 126, killed by a signal), stdout
# and stderr apart, large output, binary data both ways, stdin EOF, a PTY's window size seen by
# `stty size`, signals from the client, --timeout, 20 concurrent execs, slated killed and
# restarted mid-session, a guest writing garbage into the channel (slated survives, counts it,
# reconnects), `run --rm` deleting its workspace after success, failure and a client killed
# mid-run, and a checkpoint revert bringing back a file deleted after the checkpoint.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

exists() { s ls --json | python3 -c 'import json,sys; print(any(w["name"]==sys.argv[1] for w in json.load(sys.stdin)["workspaces"]))' "$1"; }
unmount_shares() {
    local m
    for m in $(awk -v d="$work/run/" 'index($2, d) == 1 {print $2}' /proc/mounts); do
        umount -l "$m" 2>/dev/null || true
    done
}
ws=ext$$
on_exit unmount_shares
# The workspace and run --rm's three below.
on_exit destroy_domains "slate-$ws" "slate-rr$$" "slate-rf$$" "slate-rk$$"
on_exit stop_slated

mnt=$(make_loop_fs btrfs exec 3G)
state=$mnt/state
start_slated
import_test_image
mkdir -p "$work/ro/src" "$work/rw/src"
echo original >"$work/ro/src/file"
# virtiofs passes uids through: the workspace user (1000) writes as 1000 on the host.
chown 1000:1000 "$work/rw/src"
s create $ws --memory 512 --cpus 1 --home-size 1G --share "$work/ro/src:ro" \
    --share "$work/rw/src" >/dev/null

# exec on a stopped workspace: a clear error.
want_status 1 s exec $ws -- true
grep -q "not running" "$work/err" || fail "exec on a stopped workspace: $(cat "$work/err")"

# start returns after the terminal proof, and that boot left a checkpoint.
s start $ws --json >"$work/start.json" 2>"$work/err" || fail "start: $(cat "$work/err")"
proof=$(jget proof_s <"$work/start.json")
cp1=$(jget checkpoint <"$work/start.json")
pause=$(jget checkpoint_pause_ms <"$work/start.json")
log "start: terminal proof ${proof}s, checkpoint $cp1, domain paused ${pause} ms"
s checkpoint ls $ws | grep -q "^$cp1 " || fail "checkpoint ls lacks $cp1: $(s checkpoint ls $ws)"

# Shares: mounted at ~/<basename> (the repeated basename gets -2); the read-only one cannot be
# written even by root in the guest; the other one can, and the host sees it.
[ "$(s exec $ws -- cat src/file)" = original ] || fail "the read-only share is not at ~/src"
want_status 1 s exec --user root $ws -- sh -c 'echo x >/home/slate/src/file'
s exec --user root $ws -- sh -c 'mount -o remount,rw /home/slate/src; echo x >/home/slate/src/new' \
    >/dev/null 2>&1 || true
[ "$(cat "$work/ro/src/file")" = original ] && [ ! -e "$work/ro/src/new" ] ||
    fail "the guest wrote to a read-only share"
s exec $ws -- sh -c 'echo from-guest >src-2/made'
[ "$(cat "$work/rw/src/made")" = from-guest ] || fail "the read-write share at ~/src-2"

# Options go before or after NAME alike (slate(1)); only what follows "--" (or the command's first
# word) is the command.
[ "$(s exec $ws --user root -- id -u)" = 0 ] || fail "exec NAME --user root: $(cat "$work/err" 2>/dev/null)"
[ "$(s exec $ws --workdir /tmp --timeout 30 -- pwd)" = /tmp ] || fail "exec NAME --workdir /tmp"
[ "$(echo piped | s exec $ws -i cat)" = piped ] || fail "exec NAME -i CMD (no --)"
[ "$(s exec $ws -- sh -c 'echo "$1"' x --user)" = --user ] || fail "an option after -- is the command's"
[ "$(s exec $ws id -un --user 2>/dev/null || true)" != root ] || fail "an option after the command word went to slate"

# Exit statuses.
want_status 0 s exec $ws -- true
want_status 1 s exec $ws -- false
want_status 3 s exec $ws -- sh -c 'exit 3'
want_status 127 s exec $ws -- no-such-command
grep -q "no-such-command" "$work/err" || fail "127 without a message: $(cat "$work/err")"
want_status 126 s exec $ws -- /etc/passwd
want_status 137 s exec $ws -- sh -c 'kill -9 $$'
want_status 143 s exec $ws -- sh -c 'kill -TERM $$; sleep 5'

# stdout and stderr apart; arguments arrive intact.
s exec $ws -- sh -c 'echo out; echo err >&2; printf "%s|" "$@"' x 'a b' '' 'c"d' >"$work/out" 2>"$work/err"
[ "$(cat "$work/err")" = err ] || fail "stderr: $(cat "$work/err")"
[ "$(cat "$work/out")" = "out
a b||c\"d|" ] || fail "stdout/args: $(cat "$work/out")"
# The environment is clean, the user is the workspace user unless asked, cwd their home.
[ "$(s exec $ws -- sh -c 'echo $USER:$HOME:$(pwd)')" = "slate:/home/slate:/home/slate" ] ||
    fail "default user: $(s exec $ws -- sh -c 'echo $USER:$HOME:$(pwd)')"
[ "$(s exec --user root --workdir /tmp $ws -- sh -c 'id -u; pwd')" = "0
/tmp" ] || fail "--user root --workdir"

# Large output (32 MiB) arrives whole; binary data both ways.
n=$(s exec $ws -- sh -c 'head -c 33554432 /dev/zero | tr "\0" x' | wc -c)
[ "$n" = 33554432 ] || fail "large output: $n bytes"
head -c 3000000 /dev/urandom >"$work/bin"
s exec -i $ws -- cat <"$work/bin" >"$work/bin.back"
cmp "$work/bin" "$work/bin.back" || fail "binary data did not survive the round trip"
want=$(sha256sum <"$work/bin" | cut -d' ' -f1)
got=$(s exec -i $ws -- sha256sum <"$work/bin" | cut -d' ' -f1)
[ "$want" = "$got" ] || fail "sha256 in the guest: $got, want $want"
# stdin EOF: without -i the command reads end of file at once; with -i when ours ends.
[ "$(timeout 30 "$slate" --socket "$work/run/slated.sock" exec $ws -- wc -c)" = 0 ] ||
    fail "stdin EOF without -i"
[ "$(printf abc | s exec -i $ws -- wc -c)" = 3 ] || fail "stdin EOF with -i"

# A PTY: `stty size` sees the client terminal's size; output goes to stdout.
out=$(script -qec "stty rows 33 cols 101; $slate --socket $work/run/slated.sock exec -t $ws -- stty size" /dev/null </dev/null | tr -d '\r')
case "$out" in *"33 101"*) ;; *) fail "stty size on the PTY: '$out'" ;; esac
[ "$(s exec -t $ws -- sh -c 'test -t 0 && test -t 1 && echo tty' | tr -d '\r')" = tty ] ||
    fail "-t: not a terminal"

# A signal from the client reaches the command (SIGINT, as Ctrl-C would send).
# (Run directly, not through s(): $! must be the client's pid.)
"$slate" --socket "$work/run/slated.sock" exec $ws -- sh -c 'trap "echo got-int; exit 7" INT; sleep 20 & wait' >"$work/sig.out" 2>&1 &
cpid=$!
sleep 2
kill -INT $cpid
rc=0
wait $cpid || rc=$?
[ "$rc" = 7 ] && grep -q got-int "$work/sig.out" || fail "SIGINT forwarding: rc $rc, $(cat "$work/sig.out")"
# --timeout kills the command.
t0=$SECONDS
want_status 137 s exec --timeout 2 $ws -- sleep 30
[ $((SECONDS - t0)) -lt 15 ] || fail "--timeout 2 took $((SECONDS - t0)) s"

# 20 concurrent execs, each with its own output.
pids=()
for i in $(seq 20); do
    s exec $ws -- sh -c "sleep 1; echo job-$i" >"$work/par.$i" 2>&1 &
    pids+=($!)
done
wait "${pids[@]}" # (not a bare wait: slated is a child of this shell too)
for i in $(seq 20); do
    [ "$(cat "$work/par.$i")" = "job-$i" ] || fail "concurrent exec $i: $(cat "$work/par.$i")"
done

# slated killed mid-session: the client says so; the guest's command is killed; after the
# restart the channel is picked up again and exec works.
"$slate" --socket "$work/run/slated.sock" exec $ws -- sh -c 'echo started; exec sleep 300' >"$work/long.out" 2>"$work/long.err" &
cpid=$!
for _ in $(seq 100); do grep -q started "$work/long.out" 2>/dev/null && break; sleep 0.1; done
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null || true
rc=0
wait $cpid || rc=$?
[ "$rc" = 1 ] || fail "client after slated died: rc $rc"
grep -q "connection to slated lost" "$work/long.err" || fail "client message: $(cat "$work/long.err")"
start_slated
for _ in $(seq 100); do s exec $ws -- true 2>/dev/null && break; sleep 0.2; done
want_status 0 s exec $ws -- true
s exec $ws -- sh -c 'ps' | grep -q 'sleep 300' && fail "the orphaned command still runs"

# A guest writing garbage into the channel: slated logs and counts it, stays up, reconnects.
s exec --user root $ws -- sh -c '
port=$(dirname "$(grep -l org.slate.channel.0 /sys/class/virtio-ports/*/name)")
setsid sh -c "sleep 1; killall slate-guest; head -c 300000 /dev/urandom >/dev/${port##*/}" \
    </dev/null >/dev/null 2>&1 &' || true
for _ in $(seq 150); do
    [ "$(s describe $ws --json | jget channel.errors 2>/dev/null)" -ge 1 ] 2>/dev/null && break
    sleep 0.2
done
errors=$(s describe $ws --json | jget channel.errors)
[ "$errors" -ge 1 ] || fail "garbage was not counted as a channel error"
kill -0 "$daemon_pid" || fail "slated died on garbage"
for _ in $(seq 150); do s exec $ws -- true 2>/dev/null && break; sleep 0.2; done
want_status 0 s exec $ws -- true
grep -q "protocol" "$work/slated.log" || fail "slated did not log the protocol error"

# Checkpoint revert: a file written, a boot that proves and checkpoints it, the file deleted,
# the revert brings it back.
s exec --user root $ws -- sh -c 'echo precious >/root/keep; sync'
s stop --force $ws >/dev/null
s start $ws --json >"$work/start2.json"
cp2=$(jget checkpoint <"$work/start2.json")
[ "$cp2" != "$cp1" ] || fail "the second boot made no new checkpoint"
s exec --user root $ws -- sh -c 'rm /root/keep; sync'
s stop --force $ws >/dev/null
want_status 2 s checkpoint revert $ws "$cp2" </dev/null # asks first; no terminal: refused
s checkpoint revert $ws "$cp2" --yes >/dev/null
s start $ws >/dev/null
[ "$(s exec --user root $ws -- cat /root/keep)" = precious ] || fail "revert did not restore /root/keep"
s stop --force $ws >/dev/null

# run --rm: the workspace goes after success, after failure, and when the client is killed.
want_status 0 s run --rm --name rr$$ -- uname -a
grep -q Linux "$work/out" || fail "run output: $(cat "$work/out")"
[ "$(exists rr$$)" = False ] || fail "run --rm left rr$$ behind after success"
want_status 5 s run --rm --name rf$$ -- sh -c 'exit 5'
[ "$(exists rf$$)" = False ] || fail "run --rm left rf$$ behind after failure"
"$slate" --socket "$work/run/slated.sock" run --rm --name rk$$ -- sh -c 'echo up; sleep 300' >"$work/rk.out" 2>&1 &
cpid=$!
for _ in $(seq 600); do grep -q up "$work/rk.out" 2>/dev/null && break; sleep 0.1; done
grep -q up "$work/rk.out" || fail "run never got going: $(cat "$work/rk.out")"
kill -9 $cpid
wait $cpid 2>/dev/null || true
for _ in $(seq 150); do [ "$(exists rk$$)" = False ] && break; sleep 0.2; done
[ "$(exists rk$$)" = False ] || fail "run --rm left rk$$ behind after the client was killed"
virsh -q -c "$SLATE_TEST_URI" list --all --name | grep -q "^slate-r[rfk]$$" &&
    fail "run --rm left a domain behind"
# A default name is unique, and --rm refuses to take over an existing workspace.
want_status 1 s run --rm --name $ws -- true
grep -q "exists already" "$work/err" || fail "run --rm on an existing workspace: $(cat "$work/err")"
log "exec tests passed"

#!/bin/bash
# slated and slate as built, over a real socket: version round trip, --json, socket mode,
# SO_PEERCRED as another user, one instance per state dir, detach mode, SIGTERM, and
# `slate doctor` against real libvirt and real btrfs/XFS/ext4 state directories.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt

work=$(mktemp -d /tmp/slate-daemon-test.XXXXXX)
pids=()
cleanup_daemon() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    # A slated killed in the middle leaves its loop-backed storage pool mounted.
    findmnt -rn -o TARGET | { grep "^$work/" || true; } | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf "$work" || true
}
trap 'cleanup_daemon; harness_cleanup' EXIT

slated=$top_builddir/slated
slate=$top_builddir/slate

start_daemon() { # state-dir runtime-dir [args...]
    local state=$1 run=$2
    shift 2
    "$slated" --foreground --state-dir "$state" --runtime-dir "$run" "$@" 2>>"$work/slated.log" &
    pids+=($!)
    for _ in $(seq 100); do
        [ -S "$run/slated.sock" ] && return 0
        sleep 0.05
    done
    cat "$work/slated.log"
    fail "slated did not create $run/slated.sock"
}

# The define check warns from 0 s on, so that its cause and remedy are shown on any host.
SLATE_DOCTOR_DEFINE_WARN_S=0 start_daemon "$work/state" "$work/run"
sock=$work/run/slated.sock
main_pid=${pids[0]}

# $work is 0700 (mktemp -d): QEMU, running as its own user, cannot reach the state directory.
# The doctor says which directory blocks which user and how to fix it.
qemu_as=$(qemu_user)
if [ -n "$qemu_as" ]; then
    set +e
    "$slate" --socket "$sock" doctor >"$work/doctor"; rc=$?
    set -e
    [ $rc = 1 ] && grep -q "^FAIL  qemu-access QEMU runs as user $qemu_as (uid [0-9]*, gid [0-9]*) and cannot search $work (root:root, mode 0700): 'chmod o+x $work'" "$work/doctor" ||
        fail "doctor with the state directory in a 0700 directory: rc=$rc $(cat "$work/doctor")"
else
    log "QEMU runs as root here: no user to be blocked by a 0700 directory"
fi
chmod 0755 "$work"

# Version round trip, human and --json, through --socket and SLATE_SOCKET.
out=$("$slate" --socket "$sock" version)
grep -q "^daemon: slated [0-9.]* (API version 1, pid $main_pid" <<<"$out" || fail "version: $out"
json=$(SLATE_SOCKET=$sock "$slate" version --json)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["daemon_api_version"]==1 and d["daemon_pid"]==int(sys.argv[2]), d' "$json" "$main_pid" \
    || fail "version --json: $json"

# The socket is 0660: root and the slate group only.
mode=$(stat -c %a "$sock")
[ "$mode" = 660 ] || fail "socket mode is $mode, want 660"

# SO_PEERCRED: the daemon reports the uid the kernel saw. nobody cannot even connect (0660).
if command -v setpriv >/dev/null; then
    chmod 0755 "$work" "$work/run"
    if setpriv --reuid=65534 --regid=65534 --clear-groups "$slate" --socket "$sock" version 2>"$work/nobody.err"; then
        fail "uid 65534 reached a 0660 root socket"
    fi
    # The cause is named (permission denied, and the socket's group), not "start slated".
    grep -q "^slate: version: cannot reach slated at $sock: permission denied: the socket is mode 0660, group $(stat -c %G "$sock")" "$work/nobody.err" &&
        ! grep -q "start it with" "$work/nobody.err" || fail "nobody: $(cat "$work/nobody.err")"
    chmod 0666 "$sock"
    caller=$(setpriv --reuid=65534 --regid=65534 --clear-groups curl -s --unix-socket "$sock" http://slated/v1/version)
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["caller"]["uid"]==65534, d' "$caller" \
        || fail "SO_PEERCRED: $caller"
    chmod 0660 "$sock"
fi

# The socket's group: --socket-group or slate.conf's socket-group, a group that must
# exist. A user outside it is told so, with the group named; a member gets in; a member whose
# session predates the usermod is told to log in again.
grp=slt-g$$
user=slt-u$$
add_test_group "$grp"
add_test_user "$user"
set +e
"$slated" --foreground --state-dir "$work/state-g" --runtime-dir "$work/run-g" \
    --socket-group "nosuch-$$" 2>"$work/err"
rc=$?
set -e
[ $rc = 1 ] && grep -q "socket group 'nosuch-$$': no such group" "$work/err" || fail "unknown socket group: rc=$rc $(cat "$work/err")"
printf 'socket-group = %s\n' "$grp" >"$work/group.conf"
start_daemon "$work/state-g" "$work/run-g" --config "$work/group.conf"
gsock=$work/run-g/slated.sock
[ "$(stat -c '%a %G' "$gsock")" = "660 $grp" ] || fail "socket-group: $(stat -c '%a %G' "$gsock")"
chmod 0755 "$work" "$work/run-g"
as_user "$user" "$slate" --socket "$gsock" version 2>"$work/err" && fail "$user reached a socket of group $grp"
grep -qF "permission denied: the socket is mode 0660, group $grp, and $user is not in group $grp (an administrator adds you with 'usermod -aG $grp $user'" "$work/err" ||
    fail "outsider: $(cat "$work/err")"
usermod -aG "$grp" "$user"
setpriv --reuid="$user" --regid=nogroup --clear-groups "$slate" --socket "$gsock" version 2>"$work/err" &&
    fail "a session without group $grp got in"
grep -qF "this session of $user is not in group $grp yet: log in again" "$work/err" || fail "stale session: $(cat "$work/err")"
as_user "$user" "$slate" --socket "$gsock" version >/dev/null || fail "member of $grp refused"
caller=$(as_user "$user" curl -s --unix-socket "$gsock" http://slated/v1/version)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["caller"]["uid"]==int(sys.argv[2]), d' "$caller" "$(id -u "$user")" ||
    fail "member of $grp: $caller"
kill "${pids[-1]}"
wait "${pids[-1]}" || fail "slated with a socket group exited with $?"
unset 'pids[-1]'

# Bad usage: exit 2, usage on stderr. Failed operation: exit 1, "slate: what: why".
set +e
"$slate" frobnicate 2>"$work/err"; rc=$?
set -e
[ $rc = 2 ] && grep -q "unknown command 'frobnicate'" "$work/err" || fail "unknown command: rc=$rc"
set +e
"$slate" version --frob 2>"$work/err"; rc=$?
set -e
[ $rc = 2 ] || fail "unknown flag: rc=$rc"
# Command groups name all their subcommands when none or a wrong one is given, and -h works
# before the subcommand; nothing reaches slated (the socket does not exist).
for g in "image:ls, import, pull, verify or snapshot?:ls, import, pull, verify, snapshot" \
    "secret:set, ls or rm?:set, ls, rm" "catalog:update or show?:update, show"; do
    IFS=: read -r grp none all <<<"$g"
    set +e
    "$slate" --socket "$work/none.sock" "$grp" 2>"$work/err"; rc=$?
    set -e
    [ $rc = 2 ] && grep -qF "slate: $grp: $none" "$work/err" && grep -qF "slate $grp --help" "$work/err" \
        || fail "$grp without a subcommand: rc=$rc $(cat "$work/err")"
    set +e
    "$slate" --socket "$work/none.sock" "$grp" frob 2>"$work/err"; rc=$?
    set -e
    [ $rc = 2 ] && grep -qF "slate: $grp: unknown subcommand 'frob' ($all)" "$work/err" \
        || fail "$grp frob: rc=$rc $(cat "$work/err")"
    "$slate" "$grp" -h | grep -q "^Usage: slate $grp " || fail "$grp -h"
done
set +e
"$slate" --socket "$work/none.sock" version 2>"$work/err"; rc=$?
set -e
[ $rc = 1 ] && grep -q "^slate: version: cannot reach slated at $work/none.sock" "$work/err" \
    || fail "unreachable: rc=$rc $(cat "$work/err")"

# A second instance on the same state directory is refused, and the first keeps serving.
set +e
"$slated" --foreground --state-dir "$work/state" --runtime-dir "$work/run2" 2>"$work/err"; rc=$?
set -e
[ $rc = 1 ] && grep -q "another slated already serves" "$work/err" || fail "second instance: rc=$rc"
[ -e "$work/run2" ] && fail "a refused second slated created its runtime directory $work/run2"
"$slate" --socket "$sock" version >/dev/null || fail "first instance died"

# Hostile clients do not hurt it.
head -c 100000 /dev/urandom | socat -u - "UNIX-CONNECT:$sock" 2>/dev/null || true
printf 'GET /v1/version HTTP/1.1\r\nHost: x\r\n' | socat -t 0.2 - "UNIX-CONNECT:$sock" >/dev/null 2>&1 || true
status=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$sock" -H 'Slate-Api-Version: 2' http://slated/v1/version)
[ "$status" = 400 ] || fail "api version header mismatch answered $status"
status=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$sock" http://slated/v2/version)
[ "$status" = 404 ] || fail "/v2 answered $status"
"$slate" --socket "$sock" version >/dev/null || fail "slated died after hostile clients"

# The streamed system check: progress lines first, and reflink support told apart by filesystem.
"$slate" --socket "$sock" doctor >"$work/doctor" || fail "doctor failed: $(cat "$work/doctor")"
grep -q '^ok    libvirt ' "$work/doctor" || fail "doctor libvirt: $(cat "$work/doctor")"
[ -z "$qemu_as" ] || grep -q "^ok    qemu-access QEMU (user $qemu_as) can reach $work\$" "$work/doctor" ||
    fail "doctor qemu-access: $(cat "$work/doctor")"
# KVM as slated's probe found it, not "/dev/kvm is present" (the reason may differ from run to
# run: QEMU aborts, or exits with status 1).
kvm_rc=0
kvm_line=$("$slated" --probe-kvm) || kvm_rc=$?
case $kvm_rc in
0) want='^ok    kvm        KVM runs guests (' ;;
1) want='^warn  kvm        /dev/kvm is present but KVM cannot run guests (' ;;
*) want='^warn  kvm        no usable /dev/kvm (' ;;
esac
grep -qF -- "${want#^}" "$work/doctor" || fail "doctor kvm (probe: $kvm_line): $(cat "$work/doctor")"
# The define is timed; over the threshold (0 here) the doctor names the cause and the remedy.
grep -Eq '^warn  define     libvirt (took [0-9]+\.[0-9]+ s to define|did not define) a throwaway domain.* \(warn above 0\.0 s\), and every start waits as long: ' "$work/doctor" ||
    fail "doctor define: $(cat "$work/doctor")"
if [ "$kvm_rc" = 1 ]; then
    grep -q '^warn  define .*, and every start waits as long: \(KVM cannot run guests here, but\|libvirt is re-reading\|libvirtd answers slowly\)' "$work/doctor" ||
        fail "doctor define names no cause: $(cat "$work/doctor")"
fi
# The throwaway domains go (this slated's: others may be measuring right now), at once or, when
# the doctor stopped waiting, once their define ends.
for _ in $(seq 120); do
    virsh -q -c qemu:///system list --all --name | grep -q "^slated-doctor-$main_pid-" || break
    sleep 0.5
done
! virsh -q -c qemu:///system list --all --name | grep -q "^slated-doctor-$main_pid-" ||
    fail "the doctor left its throwaway domain: $(virsh -q -c qemu:///system list --all --name)"
for fs in btrfs xfs; do
    mnt=$(make_loop_fs "$fs" "doctor-$fs" 400M)
    start_daemon "$mnt/state" "$work/run-$fs"
    "$slate" --socket "$work/run-$fs/slated.sock" doctor --json >"$work/doctor-$fs.json"
    python3 - "$work/doctor-$fs.json" "$fs" <<'PY' || fail "doctor on $fs: $(cat "$work/doctor-$fs.json")"
import json, sys
d = json.load(open(sys.argv[1]))
c = {x["check"]: x for x in d["checks"]}
assert c["reflink"]["status"] == "ok", c
assert sys.argv[2] in c["state-dir"]["detail"], c
PY
    kill "${pids[-1]}"
    wait "${pids[-1]}"
done

# Detached mode: the parent returns once the daemon serves.
"$slated" --state-dir "$work/state-bg" --runtime-dir "$work/run-bg"
"$slate" --socket "$work/run-bg/slated.sock" --json version >"$work/bg.json"
bg_pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["daemon_pid"])' "$work/bg.json")
kill "$bg_pid"
for _ in $(seq 100); do kill -0 "$bg_pid" 2>/dev/null || break; sleep 0.05; done
kill -0 "$bg_pid" 2>/dev/null && fail "detached slated ignored SIGTERM"
[ -e "$work/run-bg/slated.sock" ] && fail "detached slated left its socket behind"

# SIGTERM: clean exit, socket removed.
kill -TERM "$main_pid"
wait "$main_pid" || fail "slated exited with $? on SIGTERM"
[ -e "$sock" ] && fail "slated left its socket behind"
pids=("${pids[@]:1}")
echo "daemon: all checks passed"

# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Helpers for the integration tests. tests/integration/run-one sources this file and then the test
# script, in one bash with "set -euo pipefail". Everything a test sets up (mounts, loop devices,
# files) is registered with on_exit as it is made, and the EXIT trap undoes it in reverse order
# whether the test passes, fails, skips or is interrupted.

: "${top_srcdir:?top_srcdir must be set (make check exports it)}"
: "${top_builddir:?top_builddir must be set (make check exports it)}"
SLATE_TEST_URI=${SLATE_TEST_URI:-qemu:///system}
export SLATE_TEST_URI

# Messages go to stderr, so that helpers can report from inside $(...) (make_loop_fs does); make
# check keeps both streams in the test's .log.
log() { printf '# %s\n' "$*" >&2; }
skip() {
    printf 'SKIP: %s\n' "$*" >&2
    exit 77
}
fail() {
    printf 'FAIL: %s\n' "$*" >&2
    exit 1
}

# The test's scratch directory. libvirtd may run QEMU as an unprivileged user that has to reach
# images below it, so it is world-traversable (0755), not 0700.
test_tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/slate-itest.XXXXXX")
chmod 0755 "$test_tmpdir"
# Cleanups live in a file, not a variable, so that helpers run in $(...) subshells can register
# theirs too. One command per line, already quoted for eval; run last line first.
_cleanup_file=$test_tmpdir/.cleanup
: >"$_cleanup_file"

on_exit() {
    printf '%s\n' "$(printf '%q ' "$@")" >>"$_cleanup_file"
}

# harness_cleanup: undo everything registered with on_exit, newest first, and remove the scratch
# directory. It is the EXIT trap; a test that sets its own EXIT trap must call it from there:
#   trap 'my_cleanup; harness_cleanup' EXIT
# shellcheck disable=SC2317 # invoked by the traps below
harness_cleanup() {
    local rc=$? cmd
    trap '' INT TERM HUP
    set +e
    if [ -f "$_cleanup_file" ]; then
        while IFS= read -r cmd; do
            eval "$cmd" || log "cleanup failed: $cmd"
        done < <(tac "$_cleanup_file")
    fi
    # How this test's workspaces started (issue 25: most guest tests restore a booted snapshot).
    if [ -f "$test_tmpdir/slated.log" ]; then
        log "starts: $(grep -c 'restored slate-.* from booted snapshot' "$test_tmpdir/slated.log") restored," \
            "$(grep -c '^slated: booted slate-' "$test_tmpdir/slated.log") booted"
    fi
    # SLATE_TEST_KEEP_LOGS=DIR keeps the test's logs (slated.log among them) for a look after.
    if [ -n "${SLATE_TEST_KEEP_LOGS:-}" ]; then
        mkdir -p "$SLATE_TEST_KEEP_LOGS" &&
            find "$test_tmpdir" -maxdepth 1 -name '*.log' -exec cp -t "$SLATE_TEST_KEEP_LOGS" {} +
    fi
    rm -rf "$test_tmpdir"
    return "$rc"
}
trap harness_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ensure_libvirt: make sure libvirtd answers on $SLATE_TEST_URI, starting virtlogd and libvirtd
# when this host has no systemd to do it; skip the test when that is not possible.
ensure_libvirt() {
    command -v virsh >/dev/null || skip "virsh not found (apt-get install libvirt-clients)"
    virsh -q -c "$SLATE_TEST_URI" version >/dev/null 2>&1 && return 0
    [ "$SLATE_TEST_URI" = qemu:///system ] || skip "libvirt at $SLATE_TEST_URI does not answer"
    command -v libvirtd >/dev/null || skip "libvirtd not installed (apt-get install libvirt-daemon-system)"
    log "libvirtd does not answer; starting it"
    # .ci/libvirtd hides /dev/kvm from libvirtd where KVM cannot run guests.
    if [ -f "$top_srcdir/.ci/libvirtd" ]; then
        SLATED=$top_builddir/slated bash "$top_srcdir/.ci/libvirtd" >&2 || skip "could not start libvirtd"
    elif [ -d /run/systemd/system ]; then
        systemctl start virtlogd.socket libvirtd.socket libvirtd.service >/dev/null 2>&1 ||
            skip "systemctl could not start libvirtd"
    else
        # No systemd as PID 1 (containers, CI): run the daemons ourselves. They stay up after the
        # test; later tests reuse them.
        local daemon
        for daemon in virtlogd libvirtd; do
            if ! kill -0 "$(cat "/run/$daemon.pid" 2>/dev/null)" 2>/dev/null; then
                "$daemon" -d || skip "$daemon could not start"
            fi
        done
    fi
    for _ in $(seq 60); do
        virsh -q -c "$SLATE_TEST_URI" version >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    skip "libvirtd did not answer on $SLATE_TEST_URI within 30 s"
}

# ensure_test_image: sets test_image_dir to a built test image. $SLATE_TEST_IMAGE_DIR names a
# prebuilt one; otherwise "make test-image" builds it or, when its inputs are unchanged, does
# nothing.
ensure_test_image() {
    if [ -n "${SLATE_TEST_IMAGE_DIR:-}" ]; then
        test_image_dir=$SLATE_TEST_IMAGE_DIR
    else
        test_image_dir=$top_builddir/images/test/out
        log "make test-image"
        if ! make -s -C "$top_builddir" test-image >"$test_tmpdir/test-image.log" 2>&1; then
            sed 's/^/#   /' "$test_tmpdir/test-image.log" | tail -n 30
            fail "make test-image failed"
        fi
        sed 's/^/#   /' "$test_tmpdir/test-image.log"
    fi
    local f
    for f in disk.img vmlinuz initrd.img; do
        [ -f "$test_image_dir/$f" ] || fail "$test_image_dir/$f is missing"
    done
}

# ensure_browser_image: sets browser_image_dir to a built browser image (images/browser/README.md).
# $SLATE_TEST_BROWSER_IMAGE_DIR names a prebuilt one; otherwise "make browser-image" builds it or,
# when its inputs are unchanged, does nothing. Skips where it cannot be built (no network or apt,
# not Debian amd64): those messages are the builder's; anything else is a broken recipe and fails.
ensure_browser_image() {
    if [ -n "${SLATE_TEST_BROWSER_IMAGE_DIR:-}" ]; then
        browser_image_dir=$SLATE_TEST_BROWSER_IMAGE_DIR
    else
        browser_image_dir=$top_builddir/images/browser/out
        log "make browser-image"
        if ! make -s -C "$top_builddir" browser-image >"$test_tmpdir/browser-image.log" 2>&1; then
            sed 's/^/#   /' "$test_tmpdir/browser-image.log" | tail -n 20
            if grep -qE "apt-get (download .*|update) failed|apt's package lists are missing|not found: apt-get install|amd64 hosts only|unknown Debian package|apt knows no installable version" \
                "$test_tmpdir/browser-image.log"; then
                skip "the browser image cannot be built here (see above)"
            fi
            fail "make browser-image failed"
        fi
        grep '^build: wrote\|up to date' "$test_tmpdir/browser-image.log" | sed 's/^/#   /' >&2 || true
    fi
    local f
    for f in disk.img vmlinuz initrd.img; do
        [ -f "$browser_image_dir/$f" ] || fail "$browser_image_dir/$f is missing"
    done
}

# make_loop_fs btrfs|xfs NAME SIZE: make a sparse SIZE image file, mkfs it, loop-mount it under the
# test's scratch directory and echo the mount point. Unmounting and detaching are registered
# before anything can fail. XFS needs at least 300 MiB; btrfs is fine from 256 MiB.
make_loop_fs() {
    local type=$1 name=$2 size=$3 img mnt
    local -a mkfs
    case "$type" in
    btrfs) mkfs=(mkfs.btrfs -q -f) ;;
    xfs) mkfs=(mkfs.xfs -q -f -m reflink=1) ;;
    *) fail "make_loop_fs: unsupported file system '$type'" ;;
    esac
    command -v "${mkfs[0]}" >/dev/null ||
        skip "${mkfs[0]} not found (apt-get install $([ "$type" = xfs ] && echo xfsprogs || echo btrfs-progs))"
    grep -qw "$type" /proc/filesystems || modprobe "$type" 2>/dev/null ||
        skip "the kernel does not support $type"
    img=$test_tmpdir/$name.img
    mnt=$test_tmpdir/$name
    rm -f "$img"
    truncate -s "$size" "$img"
    on_exit rm -f "$img"
    "${mkfs[@]}" "$img" >"$test_tmpdir/$name.mkfs.log" 2>&1 ||
        fail "${mkfs[*]} $img: $(tail -n 3 "$test_tmpdir/$name.mkfs.log")"
    mkdir -p "$mnt"
    on_exit detach_loops "$img"
    on_exit unmount "$mnt"
    # mount -o loop sets the loop device to clear itself when the last user goes away.
    mount -t "$type" -o loop "$img" "$mnt" || skip "cannot loop-mount $type (no free loop device?)"
    chmod 0755 "$mnt"
    echo "$mnt"
}

# unmount DIR: unmount it if mounted, lazily when it stays busy.
unmount() {
    mountpoint -q "$1" 2>/dev/null || return 0
    for _ in 1 2 3 4 5; do
        umount "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    umount -l "$1"
}

# detach_loops FILE: detach every loop device still backed by FILE.
detach_loops() {
    local dev
    for dev in $(losetup -n -O NAME -j "$1" 2>/dev/null); do
        losetup -d "$dev" 2>/dev/null || true
    done
}

# qemu_user: echo the user libvirt runs QEMU as with qemu:///system (the last "user = ..." in
# qemu.conf, else Debian's default), or nothing when that user is root or does not exist, so that
# a test of what that user cannot reach has nothing to test.
qemu_user() {
    local u
    u=$(sed -n 's/^[[:space:]]*user[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' \
        /etc/libvirt/qemu.conf 2>/dev/null | tail -n 1)
    u=${u:-libvirt-qemu}
    case "$u" in +*) u=$(getent passwd "${u#+}" | cut -d: -f1) ;; esac
    [ -n "$u" ] && [ "$(id -u "$u" 2>/dev/null || echo 0)" != 0 ] && echo "$u"
    return 0
}

# add_test_group NAME / add_test_user NAME [GROUP]...: a throwaway group, and a user without home
# or login shell (primary group nogroup, member of the GROUPs), for the tests that need someone
# other than root; removed on exit (register the group first: the user goes first). Names must be
# unique per test run ($$ helps). useradd waits while another holds the lock on /etc/passwd.
_retry_useradd() {
    local out=$test_tmpdir/useradd.err
    for _ in $(seq 40); do
        "$@" 2>"$out" && return 0
        grep -qi "lock" "$out" || break
        sleep 0.25
    done
    log "$1 failed: $(cat "$out")"
    return 1
}
add_test_group() {
    command -v groupadd >/dev/null || skip "groupadd not found (apt-get install passwd)"
    _retry_useradd groupadd "$1" || skip "cannot add the test group $1"
    on_exit _retry_useradd groupdel "$1"
}
add_test_user() {
    local name=$1 groups
    shift
    command -v useradd >/dev/null || skip "useradd not found (apt-get install passwd)"
    command -v setpriv >/dev/null || skip "setpriv not found (apt-get install util-linux)"
    groups=$(
        IFS=,
        echo "$*"
    )
    _retry_useradd useradd -M -N -g nogroup -s /usr/sbin/nologin ${groups:+-G "$groups"} "$name" ||
        skip "cannot add the test user $name"
    on_exit _retry_useradd userdel "$name"
}
# as_user NAME COMMAND...: run COMMAND as that user, with the groups a new login of theirs has.
as_user() {
    local name=$1
    shift
    setpriv --reuid="$name" --regid="$(id -g "$name")" --init-groups "$@"
}

# stop_bg NAME...: SIGTERM the background process whose pid is in the variable NAME (each pid, for
# an array), wait for it and empty NAME; nothing when NAME is empty or unset. The variable is
# read when stop_bg runs, so "on_exit stop_bg server_pid" stops whatever runs then, and never
# signals a pid that a test stopped (and the kernel may have handed out again) before.
stop_bg() {
    local _sb_name _sb_pid
    for _sb_name in "$@"; do
        declare -p "$_sb_name" >/dev/null 2>&1 || continue
        local -n _sb_ref=$_sb_name
        for _sb_pid in ${_sb_ref[@]+"${_sb_ref[@]}"}; do
            [ -n "$_sb_pid" ] || continue
            kill "$_sb_pid" 2>/dev/null || true
            wait "$_sb_pid" 2>/dev/null || true
        done
        # shellcheck disable=SC2178 # a scalar or an array, whichever NAME is
        if [[ $(declare -p "$_sb_name") == "declare -a"* ]]; then _sb_ref=(); else _sb_ref=''; fi
        unset -n _sb_ref
    done
}

# wait_file FILE [PID [LOG]]: wait up to 10 s for FILE to exist and not be empty (the port file a
# server writes once it listens). Fails when it does not, and at once when the process PID ends
# first; shows LOG (the server's output) either way.
wait_file() {
    local file=$1 pid=${2:-} out=${3:-} rc=0
    for _ in $(seq 200); do
        [ -s "$file" ] && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            [ -s "$file" ] && return 0
            wait "$pid" 2>/dev/null || rc=$?
            [ -z "$out" ] || cat "$out" >&2 || true
            fail "$file did not appear: process $pid ended (exit status $rc)"
        fi
        sleep 0.05
    done
    [ -z "$out" ] || cat "$out" >&2 || true
    fail "$file did not appear within 10 s"
}

# pick_python: sets py to the distribution's python3 when there is one (a version manager's
# shim costs 0.2 s a call), else to python3 from PATH.
pick_python() {
    py=python3
    [ -x /usr/bin/python3 ] && py=/usr/bin/python3
    return 0
}

# need_proxy_listen: sets listen to tests/unit/proxy-listen (the proxy core on a 127.0.0.1
# listener), building it when it is not there.
need_proxy_listen() {
    listen=$top_builddir/tests/unit/proxy-listen
    [ -x "$listen" ] || make -s -C "$top_builddir" tests/unit/proxy-listen >/dev/null ||
        fail "cannot build tests/unit/proxy-listen"
}

# need_aws_cli: sets py to a python3 that imports botocore and aws to the AWS CLI; skips the
# test when either is missing.
need_aws_cli() {
    py=/usr/bin/python3
    [ -x "$py" ] || py=$(command -v python3) || skip "python3 not found"
    "$py" -c 'import botocore' 2>/dev/null ||
        skip "botocore not importable by $py (apt-get install python3-botocore)"
    aws=/usr/bin/aws
    [ -x "$aws" ] || aws=$(command -v aws) ||
        skip "the AWS CLI is not installed (apt-get install awscli)"
}

# start_http_peers DIR: proxy-peer.py as an HTTPS server (DIR/srv.pem from make_test_certs) and
# as a plain HTTP server, their request logs DIR/tls.log and DIR/plain.log (emptied once they
# listen); adds their pids to the array pids and sets tp and pp to their ports.
start_http_peers() {
    local dir=$1 peer=$top_srcdir/tests/integration/proxy-peer.py
    $py "$peer" http --port-file "$dir/tls.port" --cert "$dir/srv.pem" --key "$dir/srv.key" \
        --log "$dir/tls.log" &
    pids+=($!)
    $py "$peer" http --port-file "$dir/plain.port" --log "$dir/plain.log" &
    pids+=($!)
    wait_file "$dir/tls.port"
    wait_file "$dir/plain.port"
    tp=$(cat "$dir/tls.port")
    pp=$(cat "$dir/plain.port")
    : >"$dir/tls.log"
    : >"$dir/plain.log"
}

# start_proxy_listen DIR CONNECT-TO: $listen (need_proxy_listen) with DIR/secrets.json and
# DIR/policy.json, trusting DIR/ca.pem upstream and sending HOST:PORT as CONNECT-TO says; its
# placeholders in DIR/ph.json, events in DIR/events.jsonl, output in DIR/proxy.log. Adds its pid
# to the array pids and sets px to its port.
start_proxy_listen() {
    local dir=$1
    "$listen" --state "$dir/install" --secrets "$dir/secrets.json" --placeholders "$dir/ph.json" \
        --policy "$dir/policy.json" --events "$dir/events.jsonl" --ca-file "$dir/ca.pem" \
        --connect-to "$2" --port-file "$dir/proxy.port" >"$dir/proxy.log" 2>&1 &
    pids+=($!)
    wait_file "$dir/proxy.port" "$!" "$dir/proxy.log"
    px=$(cat "$dir/proxy.port")
}

# catalog_test_setup: for a test that publishes images from a local HTTP server: sc (the
# slate-catalog tool), srv (the directory served), $work/keys and $work/run made, and
# server_pid (empty until the test starts the server), stopped at exit.
catalog_test_setup() {
    sc=$top_builddir/slate-catalog
    srv=$work/srv
    mkdir -p "$srv" "$work/keys" "$work/run"
    server_pid=
    on_exit stop_bg server_pid
}

# size FILE, sha FILE: an artifact's size and SHA-256, as a catalog entry declares them. sha uses
# Python's hashlib (OpenSSL, SHA extensions): coreutils 9.1's sha256sum takes ~22 s on the test
# image's 4 GiB disk, hashlib ~4 s.
size() { stat -c %s "$1"; }
sha() {
    python3 -c 'import hashlib, sys
h = hashlib.sha256(); f = open(sys.argv[1], "rb")
for b in iter(lambda: f.read(1 << 20), b""): h.update(b)
print(h.hexdigest())' "$1"
}

# write_catalog FILE VERSION EXPIRES IMAGE-ENTRIES...: an unsigned catalog of the channel
# "stable" (doc/catalog.md) in FILE, holding the given image entries (JSON objects).
write_catalog() {
    local f=$1 v=$2 exp=$3 first=1
    shift 3
    {
        printf '{"format": "slate-catalog", "formatVersion": 1, "channel": "stable",\n'
        printf ' "version": %s, "signedAt": "2019-01-01T00:00:00Z", "expires": "%s",\n "images": [\n' "$v" "$exp"
        for e in "$@"; do
            [ $first = 1 ] || printf ',\n'
            first=0
            printf '%s' "$e"
        done
        printf '\n]}\n'
    } >"$f"
}

# make_test_certs DIR CA-NAME SERVER-NAME SAN: a throwaway CA (DIR/ca.pem, DIR/ca.key) and a
# server certificate it signed (DIR/srv.pem, DIR/srv.key) for SERVER-NAME with the
# subjectAltName SAN ("DNS:a.test,IP:127.0.0.1"), both P-256 and good for two days; fails saying
# what openssl said.
make_test_certs() {
    local dir=$1 ca=$2 name=$3 san=$4
    command -v openssl >/dev/null || skip "openssl not found (apt-get install openssl)"
    {
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
            -keyout "$dir/ca.key" -out "$dir/ca.pem" -subj "/CN=$ca" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" &&
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/srv.key" \
                -out "$dir/srv.csr" -subj "/CN=$name" &&
            printf 'subjectAltName=%s\nbasicConstraints=CA:false\nextendedKeyUsage=serverAuth\n' \
                "$san" >"$dir/srv.ext" &&
            openssl x509 -req -in "$dir/srv.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
                -CAcreateserial -out "$dir/srv.pem" -days 2 -extfile "$dir/srv.ext"
    } >"$dir/certs.log" 2>&1 || fail "making test certificates in $dir: $(tail -n 5 "$dir/certs.log")"
}

# ---- scanning disk images and memory dumps ----

# has_bytes FILE VALUE...: whether FILE holds any VALUE (exit 0) or none (1); any other status is
# a failed scan. It reads only the file's data extents (SEEK_DATA/SEEK_HOLE), in chunks: a 64 GiB
# sparse home.img is a few MiB to read. (grep would take a run of gigabytes without a newline
# for one line, and be killed for its memory: a status that reads as "no match".)
has_bytes() {
    python3 - "$@" <<'PYEOF'
import os, sys
vals = [v.encode() for v in sys.argv[2:]]
keep = max(map(len, vals)) - 1
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
off = 0
while off < size:
    try:
        data = os.lseek(fd, off, os.SEEK_DATA)
    except OSError:
        break  # ENXIO: no data after off
    hole = os.lseek(fd, data, os.SEEK_HOLE)
    tail = b""
    while data < hole:
        buf = os.pread(fd, min(4 << 20, hole - data), data)
        if not buf:
            break
        chunk = tail + buf
        if any(v in chunk for v in vals):
            sys.exit(0)
        tail = chunk[-keep:]
        data += len(buf)
    off = hole
sys.exit(1)
PYEOF
}

# lacks_bytes FILE WHAT VALUE...: fails the test when FILE holds any VALUE, or when the scan
# itself fails (never read as "not found").
lacks_bytes() {
    local file=$1 what=$2 rc=0
    shift 2
    has_bytes "$file" "$@" || rc=$?
    case $rc in
    0) fail "a real value is in $what" ;;
    1) ;;
    *) fail "scanning $what ($file) failed: status $rc" ;;
    esac
}

# holds_bytes FILE WHAT VALUE...: fails the test unless FILE holds a VALUE (a scan's positive
# control: it finds what it looks for).
holds_bytes() {
    local file=$1 what=$2 rc=0
    shift 2
    has_bytes "$file" "$@" || rc=$?
    [ "$rc" = 0 ] || fail "the scan of $what does not even find the placeholder (status $rc)"
}

# ---- JSON, exit statuses, libvirt domains ----

# jget PATH: print the value at PATH in the JSON document on stdin. PATH is keys and list
# indices joined by dots ("images.0.id"); booleans print as true/false, lists and objects as
# Python prints them ("[]" for an empty list).
jget() {
    python3 -c 'import json,sys; d=json.load(sys.stdin)
for k in sys.argv[1].split("."): d = d[int(k)] if isinstance(d, list) else d[k]
print(d if not isinstance(d, bool) else str(d).lower())' "$1"
}

# status COMMAND...: run COMMAND and print its exit status; its stdout and stderr are left in
# $work/out and $work/err, stdin passes through.
status() {
    local rc=0
    "$@" >"$work/out" 2>"$work/err" || rc=$?
    echo "$rc"
}

# want_status RC COMMAND...: COMMAND must exit RC (output left as status leaves it).
want_status() {
    local want=$1 got
    shift
    got=$(status "$@")
    [ "$got" = "$want" ] || fail "'$*' exited $got, want $want; stderr: $(cat "$work/err")"
}

# expect_fail [--slate-form] RC PATTERN COMMAND...: COMMAND must exit RC ("nonzero": any status
# but 0) with PATTERN (a grep regular expression) in its stderr; with --slate-form, its stderr
# must also hold a line in the client's "slate: <what>: <why>" form. Its stdout and stderr are
# left in $work/out and $work/err; stdin passes through.
expect_fail() {
    local form='' want pat rc=0
    if [ "$1" = --slate-form ]; then
        form=yes
        shift
    fi
    want=$1 pat=$2
    shift 2
    "$@" >"$work/out" 2>"$work/err" || rc=$?
    if [ "$want" = nonzero ]; then
        [ "$rc" != 0 ] || fail "'$*' exited 0, want a failure: $(cat "$work/err")"
    else
        [ "$rc" = "$want" ] || fail "'$*' exited $rc, want $want: $(cat "$work/err")"
    fi
    grep -q -- "$pat" "$work/err" || fail "'$*': stderr lacks '$pat': $(cat "$work/err")"
    [ -z "$form" ] || grep -q "^slate: " "$work/err" ||
        fail "'$*': error not in the 'slate: <what>: <why>' form: $(cat "$work/err")"
}

# v ARG...: virsh on $SLATE_TEST_URI.
v() { virsh -q -c "$SLATE_TEST_URI" "$@"; }

# destroy_domains DOMAIN...: destroy each libvirt domain and undefine it with its managed save,
# quietly, whether it runs, is defined or is not there at all. A test registers it with on_exit
# before stop_slated, so that it runs once slated is gone.
destroy_domains() {
    local d
    for d in "$@"; do
        v destroy "$d" >/dev/null 2>&1 || true
        v undefine --managed-save "$d" >/dev/null 2>&1 || true
    done
}

# ---- a slated of the test's own ----
# $slated and $slate are the built ones and $work the scratch directory; a test may point them
# elsewhere (helper.sh runs slated confined). The test sets $state, the state directory.
slated=$top_builddir/slated
slate=$top_builddir/slate
work=$test_tmpdir
daemon_pid=
# shellcheck disable=SC2154 # $state is the calling test's

# start_slated [NAME=VALUE]... [-- SLATED_ARG...]: start "$slated --foreground" on $state with its
# runtime directory $work/run and debug log appended to $work/slated.log, booted snapshots used
# but never made unasked (--boot-snapshots use; SLATE_TEST_BOOT_SNAPSHOTS overrides), in the background, with
# the given variables in its environment; sets daemon_pid and returns once the API socket is
# there. Fails (showing the log's tail) when slated dies or never listens.
start_slated() {
    local -a envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        envs+=("$1")
        shift
    done
    [ "${1:-}" = -- ] && shift
    rm -f "$work/run/slated.sock"
    env "${envs[@]}" "$slated" --foreground --state-dir "$state" --runtime-dir "$work/run" \
        --log-level debug --boot-snapshots "${SLATE_TEST_BOOT_SNAPSHOTS:-use}" "$@" \
        2>>"$work/slated.log" &
    daemon_pid=$!
    for _ in $(seq 200); do
        [ -S "$work/run/slated.sock" ] && return 0
        kill -0 "$daemon_pid" 2>/dev/null || { tail -20 "$work/slated.log"; fail "slated died"; }
        sleep 0.05
    done
    tail -20 "$work/slated.log"
    fail "slated did not come up"
}

# stop_slated: SIGTERM the slated start_slated started and wait for it to end (nothing when none
# runs); clears daemon_pid.
stop_slated() { stop_bg daemon_pid; }

# s ARG...: the slate client on that slated's socket.
s() { "$slate" --socket "$work/run/slated.sock" "$@"; }

# import_test_image [ARG...]: import the test image (ensure_test_image) into that slated as the
# image "test", booting its kernel and initramfs with the serial console; ARGs go to
# `slate image import` (--replace). Then it gives the image a booted snapshot of each shape in
# $SLATE_TEST_SNAPSHOTS ("MEMxCPUS ...", default 512x1, the shape most tests use), so that their
# fresh workspaces start by restoring it; SLATE_TEST_SNAPSHOTS= (empty) runs a test with cold
# boots only, as does SLATE_TEST_BOOT_SNAPSHOTS=off. A test that needs cold boots sets it empty.
# shellcheck disable=SC2154 # test_image_dir: ensure_test_image sets it
import_test_image() {
    s image import test "$test_image_dir/disk.img" --kernel "$test_image_dir/vmlinuz" \
        --initrd "$test_image_dir/initrd.img" --cmdline "console=ttyS0" "$@" >/dev/null
    local shape
    for shape in ${SLATE_TEST_SNAPSHOTS-512x1}; do
        test_snapshot "$shape"
    done
}

# test_snapshot MEMxCPUS: `slate image snapshot test` of that shape, made once per build and
# kept in $snapshot_cache by its key: the key covers the image's digest, the shape, the domain
# template and the slate, libvirt and QEMU versions, so slated takes a cached one only where it
# would have made the same (it answers "already" for it) and makes a new one otherwise. A cached
# one has the test image's digest and the snapshot's domain XML, never a workspace's data.
snapshot_cache=${SLATE_TEST_SNAPSHOT_CACHE:-$top_builddir/tests/integration/snapshot-cache}
test_snapshot() {
    local shape=$1 dir key d
    dir=$(find "$state" -path '*/images/test' -type d | head -1)
    [ -n "$dir" ] || fail "no store of image test under $state"
    mkdir -p "$dir/snapshots" "$snapshot_cache"
    # A rebuilt slated may have another template or version: its older entries go.
    find "$snapshot_cache" -mindepth 1 -maxdepth 1 ! -newer "$top_builddir/slated" \
        -exec rm -rf {} + 2>/dev/null || true
    for d in "$snapshot_cache"/*/; do
        [ -f "$d/snapshot.json" ] || continue
        cp -a --reflink=auto "${d%/}" "$dir/snapshots/" || fail "copying cached snapshot $d"
    done
    s image snapshot test --memory "${shape%x*}" --cpus "${shape#*x}" >"$work/snap.out" \
        2>"$work/snap.err" || fail "image snapshot $shape failed: $(cat "$work/snap.err")"
    key=$(grep -o 'snapshot [0-9a-f]\{16\}' "$work/snap.out" | cut -d' ' -f2)
    [ -n "$key" ] || fail "image snapshot $shape: no key in '$(cat "$work/snap.out")'"
    # Only the key slated chose stays in the store, and the cache keeps it.
    for d in "$dir/snapshots"/*/; do
        d=${d%/}
        [ "$(basename "$d")" = "$key" ] || [ ! -f "$snapshot_cache/$(basename "$d")/snapshot.json" ] ||
            rm -rf "$d"
    done
    if [ ! -d "$snapshot_cache/$key" ]; then
        rm -rf "$snapshot_cache/.tmp-$$"
        cp -a --reflink=auto "$dir/snapshots/$key" "$snapshot_cache/.tmp-$$" &&
            mv -T "$snapshot_cache/.tmp-$$" "$snapshot_cache/$key" 2>/dev/null ||
            rm -rf "$snapshot_cache/.tmp-$$"
    fi
    log "booted snapshot $shape: $(cat "$work/snap.out")"
}

# restored_check: fails unless slated restored at least one workspace from a booted snapshot and
# fell back to a cold boot nowhere (for the tests run with SLATE_TEST_SNAPSHOTS; later starts of
# a used disk boot, as they should).
restored_check() {
    grep -q "restored slate-.* from booted snapshot" "$work/slated.log" ||
        fail "no workspace was restored from a booted snapshot"
    if grep -E "booting cold" "$work/slated.log" >&2; then
        fail "a workspace booted cold where it should have restored"
    fi
}

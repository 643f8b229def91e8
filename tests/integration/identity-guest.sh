#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# slate-guest --identity (doc/guest-channel.md, "slate-guest --identity (after a restore)") in a
# running workspace of the test image, driven by hand through `slate exec --user root -i`: the
# clock set back to 2001 comes back to the host's time; the hostname, /etc/hostname and the
# 127.0.1.1 line of /etc/hosts take the new name; every run writes a new 32-digit machine id; the
# RNG seed is taken (RNDADDENTROPY must succeed); a home that is not mounted is mounted again
# from /dev/vdb with the user's files, one that is stays as it is; malformed lines are exit status
# 2 with "error ..." and change nothing; the workspace user gets an error.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

ws=idn$$
on_exit destroy_domains "slate-$ws"
on_exit stop_slated

mnt=$(make_loop_fs btrfs identity 2G)
# shellcheck disable=SC2034 # start_slated reads it
state=$mnt/state
start_slated
import_test_image
s create $ws --memory 512 --cpus 1 --home-size 512M >/dev/null
s start $ws >/dev/null

root() { s exec --user root $ws -- sh -c "$1"; }
# identity [--user USER]: slate-guest --identity with stdin; its output and exit status as given.
identity() { s exec --user "${1:-root}" -i $ws -- slate-guest --identity; }
seed() { head -c 64 /dev/urandom | od -An -v -tx1 | tr -d ' \n'; }
# line NAME: the request as slated writes it, with the host's time now.
line() {
    local t
    t=$(date +%s.%N)
    printf 'identity %s %s %s %s\n' "$1" "${t%.*}" "$((10#${t#*.}))" "$(seed)"
}
# run_ok NAME: one run that must print "ok".
run_ok() {
    local out
    out=$(line "$1" | identity 2>&1) || fail "identity $1 failed: $out"
    case $out in ok | "ok "*) ;; *) fail "identity $1 printed: $out" ;; esac
}

s exec $ws -- sh -c 'echo "written before $$" >~/kept; sync'
kept=$(s exec $ws -- cat /home/slate/kept)
# The first start of a fresh disk ran the identity step already (doc/vm.md): the test image's
# empty machine-id is replaced and the hostname is the workspace's.
grep -Eqx '[0-9a-f]{32}' <(root 'cat /etc/machine-id') || fail "the start gave no machine-id"
[ "$(root hostname)" = "$ws" ] || fail "the start did not set the hostname: $(root hostname)"
urandom() { root 'head -c 32 /dev/urandom | od -An -tx1'; }
rand_before=$(urandom)

# (a) the clock: set back to 2001, then the host's time (and the home, mounted at boot, stays).
root 'date -s @1000000000 >/dev/null'
g=$(root 'date +%s')
[ "$g" -lt 1000000100 ] || fail "the guest's clock was not set back: $g"
run_ok "ws-$$-one"
h0=$(date +%s)
g=$(root 'date +%s')
h1=$(date +%s)
if [ "$g" -lt $((h0 - 2)) ] || [ "$g" -gt $((h1 + 2)) ]; then
    fail "guest clock $g, host $h0..$h1"
fi
log "clock: guest $g, host $h0..$h1"
[ "$(root "grep -c ' /home/slate ' /proc/mounts")" = 1 ] || fail "the mounted home was mounted again"

# (b) the hostname.
[ "$(root hostname)" = "ws-$$-one" ] || fail "hostname: $(root hostname)"
[ "$(root 'cat /etc/hostname')" = "ws-$$-one" ] || fail "/etc/hostname: $(root 'cat /etc/hostname')"
hosts=$(root 'cat /etc/hosts')
[ "$(grep -c '^127\.0\.1\.1[[:space:]]' <<<"$hosts")" = 1 ] || fail "/etc/hosts: $hosts"
grep -qx "127.0.1.1 ws-$$-one" <<<"$hosts" || fail "/etc/hosts has no 127.0.1.1 ws-$$-one: $hosts"
grep -qx "127.0.0.1 localhost" <<<"$hosts" || fail "/etc/hosts lost its localhost line: $hosts"

# (c) the machine id: 32 lower-case hex digits, mode 0444, new on every run.
id1=$(root 'cat /etc/machine-id')
[[ $id1 =~ ^[0-9a-f]{32}$ ]] || fail "machine-id: '$id1'"
root 'ls -l /etc/machine-id' | grep -q '^-r--r--r-- ' || fail "machine-id mode: $(root 'ls -l /etc/machine-id')"
run_ok "ws-$$-two"
id2=$(root 'cat /etc/machine-id')
if ! [[ $id2 =~ ^[0-9a-f]{32}$ ]] || [ "$id2" = "$id1" ]; then
    fail "second machine-id: '$id2' after '$id1'"
fi
[ "$(root hostname)" = "ws-$$-two" ] || fail "second hostname: $(root hostname)"
grep -qx "127.0.1.1 ws-$$-two" <<<"$(root 'cat /etc/hosts')" || fail "/etc/hosts: $(root 'cat /etc/hosts')"

# (d) the RNG: the runs above succeeded, so RNDADDENTROPY did; and urandom moved on.
[ "$(urandom)" != "$rand_before" ] || fail "/dev/urandom gave the same bytes twice"

# (e) the home: unmounted, it is mounted again from /dev/vdb, with what the user wrote.
root 'sync; umount /home/slate'
! root "grep -q ' /home/slate ' /proc/mounts" || fail "/home/slate still mounted after umount"
! root 'test -e /home/slate/kept' || fail "kept is there with the home unmounted"
run_ok "ws-$$-three"
root "grep -q '^/dev/vdb /home/slate ext4 ' /proc/mounts" || fail "home not mounted: $(root 'cat /proc/mounts')"
[ "$(s exec $ws -- cat /home/slate/kept)" = "$kept" ] || fail "the user's file is not back"
s exec $ws -- sh -c 'echo again >~/again && sync' || fail "the remounted home is not writable by the user"

# (f) malformed lines: exit status 2, "error ...", nothing changed.
id3=$(root 'cat /etc/machine-id')
t=$(date +%s)
good_seed=$(seed)
bad() {
    local what=$1 rc=0 out
    out=$(printf '%s' "$2" | identity 2>&1) || rc=$?
    [ "$rc" = 2 ] || fail "$what: exit status $rc ($out)"
    [[ $out == error* ]] || fail "$what: output '$out'"
    log "$what: $out"
}
bad "bad hostname" "identity Bad_Name $t 0 $good_seed"$'\n'
bad "hostname with a leading dash" "identity -ws $t 0 $good_seed"$'\n'
bad "short seed" "identity ws-bad $t 0 ${good_seed:2}"$'\n'
bad "upper-case seed" "identity ws-bad $t 0 ${good_seed^^}"$'\n'
bad "nanoseconds out of range" "identity ws-bad $t 1000000000 $good_seed"$'\n'
bad "garbage" $'hello world\n'
bad "no newline" "identity ws-bad $t 0 $good_seed"
bad "empty input" ""
bad "overlong line" "identity $(printf 'a%.0s' $(seq 600)) $t 0 $good_seed"$'\n'
[ "$(root hostname)" = "ws-$$-three" ] || fail "a malformed line changed the hostname"
[ "$(root 'cat /etc/machine-id')" = "$id3" ] || fail "a malformed line changed the machine id"

# (g) not root: an error, nothing changed.
rc=0
out=$(line "ws-$$-user" | identity slate 2>&1) || rc=$?
if [ "$rc" = 0 ] || [[ $out != error* ]]; then
    fail "as the user: exit status $rc ($out)"
fi
log "as the user: exit status $rc, $out"
[ "$(root hostname)" = "ws-$$-three" ] || fail "the user's run changed the hostname"

s stop $ws >/dev/null

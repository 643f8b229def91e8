#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Shares that cannot reach past their directory (doc/security.md, "Shares"), on the test
# image under TCG through the real daemon, client, virtiofsd and guest:
# * a share's last component, or a parent component, swapped for a symbolic link between create
#   and start, read-write and read-only: start refuses, naming the component, and no guest ever
#   sees the target; with the real directories back the guest sees only them;
# * a share whose directory changed owner: start refuses;
# * guest root on a read-write share owned by a host user: what it creates belongs to that user,
#   chown fails, setuid and setgid bits are refused, mknod of a device fails; the
#   workspace user's writes belong to that user too; the read-only share stays read-only for root.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

on_exit stop_slated
ws=sh$$
owner=slsh$$
add_test_user "$owner"
ouid=$(id -u "$owner")

mnt=$(make_loop_fs btrfs shares 3G)
state=$mnt/state
start_slated
import_test_image
cleanup_ws() {
    s stop --force $ws >/dev/null 2>&1 || true
    s rm --yes $ws >/dev/null 2>&1 || true
    destroy_domains "slate-$ws"
}
on_exit cleanup_ws

# The host tree: four shares (read-write and read-only, swapped at the last component or at a
# parent), each with a marker; "target" is what a swap points at, with a secret in it.
top=$work/t
mkdir -p "$top/rwl" "$top/rwp/x" "$top/rol" "$top/rop/x" "$top/target/x" "$top/owned"
chmod 0755 "$work" "$top"
for d in rwl rwp/x rol rop/x; do echo "real-$d" >"$top/$d/marker"; done
echo host-secret >"$top/target/marker"
echo host-secret >"$top/target/x/marker"
# The read-write shares are the test user's: a directory root owns is shared read-only only.
chown "$owner" "$top/rwl" "$top/rwp/x" "$top/target" "$top/target/x"
expect_fail 1 "a directory root owns can be shared read-only only" \
    s create ${ws}r --share "$top/rol"
# The owned share: the test user's (mode 0755): the guest's workspace user writes it because the
# owner's files are the workspace user's in the guest.
chown "$owner" "$top/owned"
chmod 0755 "$top/owned"
s create $ws --memory 512 --cpus 1 --home-size 1G \
    --share "$top/rwl:/mnt/rwl" --share "$top/rwp/x:/mnt/rwp" \
    --share "$top/rol:/mnt/rol:ro" --share "$top/rop/x:/mnt/rop:ro" \
    --share "$top/owned:/mnt/owned" >/dev/null

# swap DIR: DIR becomes a symbolic link to the target (its real self kept as DIR.real).
swap() { mv "$top/$1" "$top/$1.real" && ln -s "$top/target${2:-}" "$top/$1"; }
unswap() { rm "$top/$1" && mv "$top/$1.real" "$top/$1"; }
not_running() {
    local st
    st=$(s ls --json | python3 -c 'import json,sys
print([w["state"] for w in json.load(sys.stdin)["workspaces"] if w["name"]==sys.argv[1]][0])' $ws)
    [ "$st" != running ] || fail "$ws runs after a refused start"
}
for c in "rwl:" "rwp:/x" "rol:" "rop:/x"; do
    d=${c%%:*} sub=${c#*:}
    swap "$d" ""
    expect_fail 1 "$top/$d is now a symbolic link" s start $ws
    not_running
    unswap "$d"
    log "start refused with $d swapped for a symbolic link: $(tail -n 1 "$work/err")"
done

# A share that changed owner since create is refused too.
chown 0 "$top/owned"
expect_fail 1 "now belongs to uid 0, not to uid $ouid" s start $ws
chown "$owner" "$top/owned"

# With the real directories back, the guest sees them and nothing of the target.
s start $ws >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"
for p in rwl rwp rol rop; do
    got=$(s exec $ws -- cat /mnt/$p/marker)
    case "$got" in real-*) ;; *) fail "/mnt/$p/marker in the guest: '$got'" ;; esac
done
s exec --user root $ws -- sh -c 'grep -r host-secret /mnt 2>/dev/null' &&
    fail "the guest sees the target's secret"

# A swap while it runs changes nothing for the running guest (virtiofsd holds the directory), and
# the next start refuses.
swap rwl ""
[ "$(s exec $ws -- cat /mnt/rwl/marker)" = real-rwl ] || fail "a swap reached the running guest"
s stop $ws >/dev/null
expect_fail 1 "$top/rwl is now a symbolic link" s start $ws
unswap rwl
s start $ws >/dev/null 2>"$work/err" || fail "start again: $(cat "$work/err")"

# Guest root on the owned share (uid $ouid on the host).
o=$top/owned
s exec --user root $ws -- sh -c 'echo x >/mnt/owned/by-root' || fail "guest root cannot write the share"
[ "$(stat -c %u "$o/by-root")" = "$ouid" ] ||
    fail "a file guest root created belongs to uid $(stat -c %u "$o/by-root") on the host, not $ouid"
s exec $ws -- sh -c 'echo y >/mnt/owned/by-user' || fail "the workspace user cannot write the share"
[ "$(stat -c %u "$o/by-user")" = "$ouid" ] ||
    fail "the workspace user's file belongs to uid $(stat -c %u "$o/by-user"), not $ouid"
[ "$(cat "$o/by-user")" = y ] || fail "the host reads '$(cat "$o/by-user")'"
s exec $ws -- stat -c %u /mnt/owned/by-root >"$work/out"
[ "$(cat "$work/out")" = 1000 ] || fail "the owner's file is uid $(cat "$work/out") in the guest, not the workspace user's"
for u in 0:0 1234:1234; do
    s exec --user root $ws -- chown $u /mnt/owned/by-root >/dev/null 2>&1 &&
        fail "guest root chowned a share file to $u"
    [ "$(stat -c %u "$o/by-root")" = "$ouid" ] || fail "chown $u reached the host"
done
# No set-id bits from the guest: chmod, and a file created with them.
s exec --user root $ws -- sh -c 'cp /bin/busybox /mnt/owned/suid && chmod 4755 /mnt/owned/suid' \
    >/dev/null 2>&1 && fail "guest root made a setuid program in the share"
s exec --user root $ws -- chmod 2755 /mnt/owned/suid >/dev/null 2>&1 &&
    fail "guest root made a setgid program in the share"
[ "$(stat -c %u "$o/suid")" = "$ouid" ] || fail "the copied program belongs to $(stat -c %u "$o/suid")"
[ -z "$(find "$o" -perm /6000)" ] || fail "set-id files in the share: $(find "$o" -perm /6000 -ls)"
s exec --user root $ws -- mknod /mnt/owned/blk b 8 0 >/dev/null 2>&1 &&
    fail "guest root made a block device in the share"
[ ! -b "$o/blk" ] || fail "a block device appeared in the share on the host"
s exec --user root $ws -- mknod /mnt/owned/chr c 1 3 >/dev/null 2>&1 &&
    fail "guest root made a character device in the share"
[ ! -c "$o/chr" ] || fail "a character device appeared in the share on the host"
# Read-only stays read-only for guest root, remount or not.
s exec --user root $ws -- sh -c 'echo x >/mnt/rol/new' >/dev/null 2>&1 &&
    fail "guest root wrote to a read-only share"
s exec --user root $ws -- sh -c 'mount -o remount,rw /mnt/rol; echo x >/mnt/rol/new' \
    >/dev/null 2>&1 || true
[ ! -e "$top/rol/new" ] || fail "guest root wrote to a read-only share after a remount"
# Each share's daemon runs as its directory's owner, in a user namespace of its own: the owned
# share (the fifth, share4) as the test user.
for f in "$work"/run/vm/$ws/fs-*.pid; do
    pid=$(cut -d' ' -f1 "$f")
    [ "$(readlink "/proc/$pid/ns/user")" != "$(readlink /proc/self/ns/user)" ] ||
        fail "virtiofsd $pid ($f) runs in the host's user namespace"
done
pid=$(cut -d' ' -f1 "$work/run/vm/$ws/fs-share4.pid")
u=$(awk '/^Uid:/ {print $3}' "/proc/$pid/status")
[ "$u" = "$ouid" ] || fail "the owned share's virtiofsd runs as uid $u, not $ouid"
s stop $ws >/dev/null
for f in "$work"/run/vm/$ws/fs-*.pid; do
    [ -e "$f" ] && fail "$f stays after stop"
done
log "guest root on a share owned by uid $ouid: files uid $ouid, chown, set-id bits and mknod refused"

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Installer domains a crashed slated left behind (doc/catalog.md, "Postinstall steps"): at start, slated destroys the
# "slate.install-<id>-<6 hex>" domains whose files lie in a staging directory of its own image
# store (<state>/images/.tmp-<id>-XXXXXX) and removes that directory, and leaves alone:
#   * a domain of the same shape whose files lie in another state directory (another private
#     slated's installer: tests run several at once);
#   * a domain named like ours whose files are only partly in our store (one disk elsewhere);
#   * a domain of ours by its files but not named like an installer.
# The leftovers are real transient libvirt domains, created paused (nothing boots).
# Run through tests/integration/run-one, which sources lib.sh.
# shellcheck disable=SC2154 # lib.sh and make check set these
set -euo pipefail

ensure_libvirt
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not found"

tag=$(printf '%06x' $(($$ % 16777216)))
mine=slate.install-sweep.img-$tag
other=slate.install-sweep.img-$(printf '%06x' $((($$ + 1) % 16777216)))
mixed=slate.install-sweep.img-$(printf '%06x' $((($$ + 2) % 16777216)))
misnamed=slate.installer-sweep-$tag
all=("$mine" "$other" "$mixed" "$misnamed")
on_exit destroy_domains "${all[@]}"
on_exit stop_slated

start_daemon() { start_slated -- --libvirt-uri "$SLATE_TEST_URI"; }

mnt=$(make_loop_fs btrfs sweep 512M)
state=$mnt/state
# A first start makes the store (and tells where its images live), then slated goes away as a
# crash would leave it: the domains below are what its installer would have left running.
start_daemon
stop_slated
images=$(realpath "$state")/images
[ -d "$images" ] || fail "no image store at $images"
otherimages=$work/other-state/images
mkdir -p "$otherimages"

# stage DIR NAME: a staging directory with a disk and a console file, as postinstall makes them.
stage() {
    mkdir -p "$1/$2"
    chmod 0711 "$1/$2"
    truncate -s 16M "$1/$2/disk.img"
    truncate -s 1M "$1/$2/steps.img"
}
# define NAME DISK STEPS CONSOLE: a transient domain started paused.
define() {
    cat >"$work/$1.xml" <<EOF
<domain type="qemu">
  <name>$1</name>
  <memory unit="MiB">32</memory>
  <vcpu>1</vcpu>
  <os><type arch="x86_64" machine="pc">hvm</type></os>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <disk type="file" device="disk"><driver name="qemu" type="raw"/>
      <source file="$2"/><target dev="vda" bus="virtio"/></disk>
    <disk type="file" device="disk"><driver name="qemu" type="raw"/>
      <source file="$3"/><target dev="vdb" bus="virtio"/><readonly/></disk>
    <serial type="file"><source path="$4"/><target port="0"/></serial>
    <controller type="usb" model="none"/>
    <memballoon model="none"/>
  </devices>
</domain>
EOF
    virsh -q -c "$SLATE_TEST_URI" create --paused "$work/$1.xml" >"$work/virsh.out" 2>&1 ||
        fail "virsh create $1: $(cat "$work/virsh.out")"
}
exists() { virsh -q -c "$SLATE_TEST_URI" domstate "$1" >/dev/null 2>&1; }

s_mine=.tmp-sweep.img-abc123
s_other=.tmp-sweep.img-def456
s_mixed=.tmp-sweep.img-ghi789
s_misnamed=.tmp-sweep.img-jkl012
stage "$images" $s_mine
stage "$otherimages" $s_other
stage "$images" $s_mixed
stage "$images" $s_misnamed
# QEMU may run as another user: it must reach the files (slated does the same for its installer).
chmod o+x "$state" "$images"
define "$mine" "$images/$s_mine/disk.img" "$images/$s_mine/steps.img" "$images/$s_mine/console.log"
define "$other" "$otherimages/$s_other/disk.img" "$otherimages/$s_other/steps.img" \
    "$otherimages/$s_other/console.log"
define "$mixed" "$images/$s_mixed/disk.img" "$otherimages/$s_other/steps.img" \
    "$images/$s_mixed/console.log"
define "$misnamed" "$images/$s_misnamed/disk.img" "$images/$s_misnamed/steps.img" \
    "$images/$s_misnamed/console.log"
for d in "${all[@]}"; do
    [ "$(virsh -q -c "$SLATE_TEST_URI" domstate "$d")" = paused ] || fail "$d is not paused"
done
log "leftover domains: $mine (ours), $other (another state directory), $mixed, $misnamed"

start_daemon
if exists "$mine"; then fail "the leftover installer domain $mine is still there"; fi
[ ! -e "$images/$s_mine" ] || fail "its staging directory $images/$s_mine is still there"
grep -q "removed installer domain $mine and $images/$s_mine" "$work/slated.log" ||
    fail "the removal was not logged: $(grep -i install "$work/slated.log" | tail -5)"
exists "$other" || fail "the installer domain of another state directory was removed"
[ "$(virsh -q -c "$SLATE_TEST_URI" domstate "$other")" = paused ] || fail "$other was disturbed"
[ -f "$otherimages/$s_other/disk.img" ] || fail "another state directory's staging files went"
exists "$mixed" || fail "a domain with a disk outside this store was removed"
exists "$misnamed" || fail "a domain not named like an installer was removed"
grep -q "installer domain $other: not of state directory" "$work/slated.log" ||
    fail "the other store's domain was not considered"
stop_slated

# A second start finds nothing more to do, and does not touch the others.
start_daemon
grep -c "removed installer domain" "$work/slated.log" | grep -qx 1 || fail "removed twice?"
exists "$other" || fail "the second start removed $other"
stop_slated
log "ok: $mine removed with its staging directory; $other, $mixed and $misnamed left alone"

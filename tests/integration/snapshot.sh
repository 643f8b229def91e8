#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Starts from a booted snapshot (doc/vm.md, "Starts from a booted snapshot"), on the test image
# under TCG, on btrfs:
# * `slate image snapshot` boots the image once and saves it; `image ls` shows it; the state it
#   saved holds no workspace's name, placeholder, real secret value or egress CA certificate,
#   although a provisioned workspace with a secret runs beside it while it is made;
# * two fresh workspaces start by restoring it (the start says so) and are different machines:
#   /dev/urandom, machine-id and boot_id differ right after start, each has its own hostname,
#   the host's time, and its own home (mounted, its real size);
# * what a cold boot gives holds after a restore: the proven-boot checkpoint, a home that
#   survives stop/start (the second start boots: the disk is no longer fresh), reset and wipe
#   (the next start restores again; wipe's home is new), and `slate probe` finds no foreign
#   bytes;
# * --cold boots; a shape without a snapshot boots; a broken snapshot boots (one log line why);
# * boot-snapshots = auto makes the missing snapshot in the background after a cold start, and
#   the next fresh workspace restores it; a new image version drops the old snapshots.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail
# It makes its snapshots itself: none from the test cache.
export SLATE_TEST_SNAPSHOTS=

ensure_libvirt
ensure_test_image

wa=snapalpha$$ wb=snapbravo$$ wc=snapcold$$ wd=snapbroken$$ wsec=snapsecret$$ ws384=snapstop$$
ws256=snapsmall$$ ws256b=snapsmallb$$ wsh=snapshape$$
on_exit destroy_domains "slate-$wa" "slate-$wb" "slate-$wc" "slate-$wd" "slate-$wsec" \
    "slate-$ws256" "slate-$ws256b" "slate-$wsh" "slate-$ws384"
on_exit stop_slated

mnt=$(make_loop_fs btrfs snapshot 4G)
state=$mnt/state
start_slated
import_test_image

# startj NAME [ARG...]: slate start --json, the document in $work/NAME.start.json.
startj() {
    local n=$1
    shift
    s start "$n" --json "$@" >"$work/$n.start.json" || {
        tail -30 "$work/slated.log"
        fail "start $n: $(cat "$work/$n.start.json")"
    }
}
restored() { jget restored <"$work/$1.start.json"; }

log "a provisioned workspace with a secret runs while the snapshot is made"
real=ghp_SNAPSHOTREALVALUE$$abcdefghijklmnopqrstu
s create "$wsec" --memory 512 --cpus 1 --home-size 64M >/dev/null
printf '%s\n' "$real" | s secret set "$wsec" GH_TOKEN --kind github --host github.com --json \
    >"$work/set.json" || fail "secret set: $(cat "$work/set.json")"
ph=$(python3 -c 'import json,sys; print(list(json.load(sys.stdin)["placeholders"].values())[0])' \
    <"$work/set.json")
startj "$wsec" --cold
[ "$(restored "$wsec")" = false ] || fail "--cold restored"
s exec "$wsec" -- grep -q -- "$ph" /run/slate/env || fail "the guest lacks the placeholder"

log "slate image snapshot"
s image snapshot test --memory 512 --cpus 1 --json >"$work/snap.json" ||
    fail "image snapshot: $(cat "$work/snap.json")"
key=$(jget key <"$work/snap.json")
[ "$(jget existed <"$work/snap.json")" = false ] || fail "the snapshot existed before"
log "snapshot $key: $(jget total_s <"$work/snap.json") s, $(jget state_bytes <"$work/snap.json") bytes"
s image ls | grep -q "^test .* 512Mx1$" || fail "image ls does not show the snapshot: $(s image ls)"
s image snapshot test --memory 512 --cpus 1 --json | grep -q '"existed": true' ||
    fail "a second snapshot of the same shape was made again"
sav=$state/images/test/snapshots/$key/state.sav
[ -f "$sav" ] && [ -f "$state/images/test/snapshots/$key/disk.img" ] || fail "no $sav"
if s image snapshot test --memory 64 --json >/dev/null 2>&1; then fail "a 64 MiB snapshot was accepted"; fi

log "the saved state holds nothing of any workspace"
holds_bytes "$sav" "the saved state" "slate-guest"
lacks_bytes "$sav" "the saved state (placeholder)" "$ph"
lacks_bytes "$sav" "the saved state (secret)" "$real"
lacks_bytes "$sav" "the saved state (workspace name)" "$wsec"
ca_line=$(sed -n 2p "$state/install/egress-ca.crt")
lacks_bytes "$sav" "the saved state (egress CA)" "$ca_line"
s stop --force "$wsec" >/dev/null

log "two fresh workspaces restore it and are different machines"
for w in "$wa" "$wb"; do
    s create "$w" --memory 512 --cpus 1 --home-size 1G >/dev/null
    startj "$w"
    [ "$(restored "$w")" = true ] || fail "$w was not restored: $(cat "$work/$w.start.json")"
    [ "$(jget snapshot <"$work/$w.start.json")" = "$key" ] || fail "$w: another snapshot"
    log "$w restored in $(jget boot_s <"$work/$w.start.json") s"
    s exec --user root "$w" -- sh -c 'head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n"; echo
cat /etc/machine-id /proc/sys/kernel/random/boot_id; hostname; date +%s
df -k /home/slate | tail -n 1; grep " /home/slate " /proc/mounts' >"$work/$w.id"
    host_now=$(date +%s)
    cat "$work/$w.id" >&2
    [ "$(sed -n 4p "$work/$w.id")" = "$w" ] || fail "$w: hostname is $(sed -n 4p "$work/$w.id")"
    guest_now=$(sed -n 5p "$work/$w.id")
    [ $((host_now - guest_now)) -le 3 ] && [ $((guest_now - host_now)) -le 3 ] ||
        fail "$w: guest time $guest_now, host $host_now"
    [ "$(sed -n 6p "$work/$w.id" | awk '{print $2}')" -gt 900000 ] ||
        fail "$w: /home/slate is not its 1 GiB home: $(sed -n 6p "$work/$w.id")"
    sed -n 7p "$work/$w.id" | grep -q "^/dev/vdb /home/slate ext4" || fail "$w: home not mounted"
    grep -q "restored slate-$w from booted snapshot $key" "$work/slated.log" ||
        fail "slated did not log the restore of $w"
done
for i in 1 2 3; do
    [ "$(sed -n ${i}p "$work/$wa.id")" != "$(sed -n ${i}p "$work/$wb.id")" ] ||
        fail "line $i (urandom, machine-id, boot_id) is the same in both: $(sed -n ${i}p "$work/$wa.id")"
done
grep -Eq '^[0-9a-f]{32}$' <(sed -n 2p "$work/$wa.id") || fail "machine-id: $(sed -n 2p "$work/$wa.id")"

log "a restored workspace behaves as a booted one"
s checkpoint ls "$wa" | grep -q "proven boot" || fail "no proven-boot checkpoint: $(s checkpoint ls "$wa")"
s exec "$wa" -- sh -c 'echo kept >~/note; sync'
s stop "$wa" >/dev/null
startj "$wa"
[ "$(restored "$wa")" = false ] || fail "a used disk was restored over"
[ "$(s exec "$wa" -- cat /home/slate/note)" = kept ] || fail "the home lost its file"
[ "$(s exec "$wa" -- hostname)" = "$wa" ] || fail "the hostname did not stay"
s stop "$wa" >/dev/null
s reset "$wa" --yes >/dev/null
startj "$wa"
[ "$(restored "$wa")" = true ] || fail "a reset workspace did not restore"
[ "$(s exec "$wa" -- cat /home/slate/note)" = kept ] || fail "reset lost the home"
s stop --force "$wa" >/dev/null
s wipe "$wa" --yes >/dev/null
startj "$wa"
[ "$(restored "$wa")" = true ] || fail "a wiped workspace did not restore"
if s exec "$wa" -- test -e /home/slate/note; then fail "wipe kept the home"; fi
[ "$(s exec "$wa" -- hostname)" = "$wa" ] || fail "the wiped workspace lost its identity"
s probe "$wb" --regions 32 >"$work/probe.out" 2>&1 || {
    cat "$work/probe.out"
    fail "the probe of a restored workspace is not clean"
}
s stop --force "$wa" >/dev/null
s stop --force "$wb" >/dev/null

log "--cold, a shape without a snapshot, a broken snapshot: cold boots"
s create "$wc" --memory 512 --cpus 1 --home-size 64M >/dev/null
startj "$wc" --cold
[ "$(restored "$wc")" = false ] || fail "--cold restored"
[ "$(s exec "$wc" -- hostname)" = "$wc" ] || fail "a fresh cold boot has no identity"
s stop --force "$wc" >/dev/null
s create "$wsh" --memory 256 --cpus 1 --home-size 64M >/dev/null
startj "$wsh"
[ "$(restored "$wsh")" = false ] || fail "256 MiB restored a 512 MiB snapshot"
s stop --force "$wsh" >/dev/null
cp "$sav" "$work/state.sav.good"
printf 'NotASaveImageXXX' | dd of="$sav" conv=notrunc status=none
s create "$wd" --memory 512 --cpus 1 --home-size 64M >/dev/null
startj "$wd"
[ "$(restored "$wd")" = false ] || fail "a broken snapshot was restored"
grep -q "start $wd: booting cold: .*state.sav" "$work/slated.log" || fail "no log line says why"
s exec "$wd" -- true
s stop --force "$wd" >/dev/null
cp "$work/state.sav.good" "$sav"

log "boot-snapshots = auto makes the missing one in the background"
stop_slated
start_slated -- --boot-snapshots auto
s create "$ws256" --memory 256 --cpus 1 --home-size 64M >/dev/null
startj "$ws256"
[ "$(restored "$ws256")" = false ] || fail "$ws256 restored a snapshot that did not exist"
# image ls shows it being made (its step), then made.
seen_making=
for _ in $(seq 240); do
    s image ls >"$work/ls.out"
    grep -q "256Mx1(making:[a-z]*)" "$work/ls.out" && seen_making=$(grep -o "256Mx1([^)]*)" "$work/ls.out")
    grep -q "256Mx1\($\|,\)" "$work/ls.out" && break
    sleep 0.5
done
grep -q "256Mx1\($\|,\)" "$work/ls.out" || { tail -20 "$work/slated.log"; fail "no 256 MiB snapshot was made"; }
[ -n "$seen_making" ] || fail "image ls never showed the background snapshot being made"
log "image ls showed $seen_making while it was made"
# slated stopping while it makes one in the background cuts it short: no snapshot domain and
# no staging directory outlive it (a demo's slated used to leave the domain running).
s create "$ws384" --memory 384 --cpus 1 --home-size 64M >/dev/null
startj "$ws384"
for _ in $(seq 120); do
    s image ls | grep -q "384Mx1(making:" && break
    sleep 0.25
done
s image ls | grep -q "384Mx1(making:" || fail "the 384 MiB snapshot was not being made"
stop_slated
if v list --name | grep -q "^slate\.snapshot-"; then
    fail "a snapshot domain outlived slated: $(v list --name)"
fi
if ls -a "$state/images/test/snapshots" | grep -q "^\.tmp-"; then
    fail "a staging directory outlived slated: $(ls -a "$state/images/test/snapshots")"
fi
grep -q "cutting short the booted snapshots being made" "$work/slated.log" ||
    fail "slated did not say it cut the snapshot short"
start_slated -- --boot-snapshots auto
s stop --force "$ws384" >/dev/null 2>&1 || true
s create "$ws256b" --memory 256 --cpus 1 --home-size 64M >/dev/null
startj "$ws256b"
[ "$(restored "$ws256b")" = true ] || fail "the snapshot made in the background was not used"
s stop --force "$ws256" >/dev/null
s stop --force "$ws256b" >/dev/null

log "a new version of the image drops its snapshots"
import_test_image --replace
s image ls | grep -q "^test .* -$" || fail "the replaced image kept its snapshots: $(s image ls)"

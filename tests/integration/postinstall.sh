#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Postinstall steps end to end, through the real daemon, client, libvirt and QEMU: the test image
# served as a catalog image by an HTTP server on 127.0.0.1, in a catalog signed with a key slated
# trusts, and its own kernel and initramfs as the installer (<state>/installer).
#
#   * consent: steps not applied before are listed; without a terminal and without --yes the
#     client refuses; the daemon itself refuses a pull whose consent does not cover every step
#     (no consent at all, or only some uuids); nothing is installed or changed by a refusal;
#   * success: the steps run in seq order, as root, chrooted into a clone of the base, with
#     slate-guest offered at /run/slate-install; the clone is installed with the version bumped
#     by one, the steps are recorded as applied (no consent asked again, a second pull is up to
#     date), `slate image verify` passes, a workspace made before sees base drift on start, a
#     workspace made after has the marker, and `slate run` in it prints it;
#   * failure: a later step that writes to the image and exits 3 leaves the base unchanged
#     (version, hash, marker), shows its output, exits 1, and leaves no staging directory or
#     installer domain behind;
#   * a new image version with steps applied before: downloaded afresh, its steps run again on
#     the new disk without asking again.
#
# Run through tests/integration/run-one, which sources lib.sh.
# shellcheck disable=SC2154
set -euo pipefail

ensure_libvirt
ensure_test_image
command -v python3 >/dev/null || skip "python3 not found (apt-get install python3)"
command -v zstd >/dev/null || skip "zstd not found (apt-get install zstd)"
command -v debugfs >/dev/null || skip "debugfs not found (apt-get install e2fsprogs)"
command -v curl >/dev/null || skip "curl not found (apt-get install curl)"

catalog_test_setup

# Installer domains whose disks are ours (never another test's), and our workspaces' domains.
cleanup_domains() {
    local d
    for d in $(v list --all --name 2>/dev/null || true); do
        case "$d" in
        slate.install-*)
            v domblklist "$d" 2>/dev/null | grep -qF "$work/" || continue
            ;;
        slate-pi*$$) ;;
        *) continue ;;
        esac
        destroy_domains "$d"
    done
}
on_exit cleanup_domains
on_exit stop_slated

# api METHOD PATH BODY: the daemon's own answer, without the client's consent handling.
api() {
    curl -sS --unix-socket "$work/run/slated.sock" -H 'Slate-Api-Version: 1' \
        -H 'Content-Type: application/json' -X "$1" "http://slate$2" --data "$3"
}
version() { s image ls --json | python3 -c 'import json,sys
print(next(i["version"] for i in json.load(sys.stdin)["images"] if i["id"] == "test"))'; }
no_staging() {
    local d
    for d in "$state"/images/.tmp-*; do
        [ ! -e "$d" ] || fail "a staging directory was left behind: $d"
    done
}
# marker FILE: /etc/marker in the ext4 disk image FILE, read on the host (no VM).
marker() { debugfs -R 'cat /etc/marker' "$1" 2>/dev/null; }

# The artifacts: the test image's disk compressed with zstd, its kernel and initrd.
zstd -q -T0 -1 "$test_image_dir/disk.img" -o "$srv/disk.img.zst"
cp "$test_image_dir/vmlinuz" "$test_image_dir/initrd.img" "$srv/"
disk_size=$(size "$srv/disk.img.zst") disk_sha=$(sha "$srv/disk.img.zst")
raw_size=$(size "$test_image_dir/disk.img")
k_size=$(size "$srv/vmlinuz") k_sha=$(sha "$srv/vmlinuz")
i_size=$(size "$srv/initrd.img") i_sha=$(sha "$srv/initrd.img")

u1=6a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a21
u2=6a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a22
u3=6a1f0c2e-3b4d-4e5f-8a6b-7c8d9e0f1a23
# Step 1 checks where and how it runs, then writes the marker; step 2 needs step 1 done first.
# shellcheck disable=SC2016 # expanded in the installer, not here
step1='set -e; [ "$(id -u)" = 0 ]; [ "$SLATE_INSTALL_DIR" = /run/slate-install ]
test -x /run/slate-install/slate-guest; test -x /usr/bin/slate-guest; test ! -e /etc/marker
echo "marker from postinstall" >/etc/marker; echo step one ran'
step2='grep -q "marker from postinstall" /etc/marker && echo second >>/etc/marker'
step3='echo tampered >/etc/marker; echo about to fail; echo oops on stderr >&2; exit 3'
step_json() { # UUID SEQ DESCRIPTION COMMAND
    python3 -c 'import json,sys
print(json.dumps({"uuid": sys.argv[1], "seq": int(sys.argv[2]), "description": sys.argv[3],
                  "command": sys.argv[4]}))' "$@"
}
s1=$(step_json $u1 10 "write the marker" "$step1")
s2=$(step_json $u2 20 "append to the marker" "$step2")
s3=$(step_json $u3 30 "fail on purpose" "$step3")
publish() { # VERSION STEPS-JSON [IMAGE-VERSION]
    cat >"$srv/stable.json" <<EOF
{"format": "slate-catalog", "formatVersion": 1, "channel": "stable", "version": $1,
 "signedAt": "2019-01-01T00:00:00Z", "expires": "2099-01-01T00:00:00Z",
 "images": [{
  "id": "test", "version": ${3:-1}, "description": "the slate test image, from a catalog",
  "disk": {"url": "disk.img.zst", "size": $disk_size, "uncompressedSize": $raw_size,
           "sha256": "$disk_sha", "compression": "zstd", "format": "raw"},
  "boot": {"type": "kernel",
           "kernel": {"url": "vmlinuz", "size": $k_size, "sha256": "$k_sha"},
           "initrd": {"url": "initrd.img", "size": $i_size, "sha256": "$i_sha"},
           "cmdline": "console=ttyS0"},
  "postinstall": [$2]}]}
EOF
    rm -f "$srv/stable.json.sig"
    "$sc" sign --key "$work/pub.secret" --channel stable "$srv/stable.json" >/dev/null
    s catalog update --from "$url/stable.json" >/dev/null || fail "catalog update to version $1"
}

"$sc" keygen "$work/pub.secret" "$work/keys/publisher.pub" >/dev/null
python3 "$top_srcdir/tests/unit/fetch-server.py" "$srv" "$work/port" "$work/requests.log" &
server_pid=$!
wait_file "$work/port" "$server_pid"
url=http://127.0.0.1:$(cat "$work/port")

# The daemon on a loop-mounted btrfs, with the test image's kernel and initramfs as installer.
mnt=$(make_loop_fs btrfs postinstall 3G)
state=$mnt/state
mkdir -p "$state/installer"
cp "$test_image_dir/vmlinuz" "$test_image_dir/initrd.img" "$top_builddir/slate-guest" "$state/installer/"
printf 'trusted-keys = %s\nchannel = stable\n' "$work/keys" >"$work/slate.conf"
start_slated -- --config "$work/slate.conf"
img=$state/images/test

# Version 1 of the catalog has no steps: no consent is needed; a workspace is made from it.
publish 1 ""
s image pull test </dev/null >"$work/out" 2>"$work/err" || fail "pull without steps: $(cat "$work/err")"
[ "$(version)" = 1 ] || fail "first pull: version $(version)"
s create piold$$ --image test >/dev/null
[ -z "$(marker "$img/disk.img")" ] || fail "the catalog's disk already has a marker"

# Version 2 adds two steps. Without a terminal and without --yes: listed, refused, nothing done.
publish 2 "$s1, $s2"
expect_fail 2 "pass --yes" s image pull test </dev/null
if ! grep -q "write the marker" "$work/out" || ! grep -q "append to the marker" "$work/out"; then
    fail "the pending steps were not listed: $(cat "$work/out")"
fi
# The daemon refuses on its own: no consent, or consent that misses a step.
api POST /v1/images/test/pull '{}' | grep -q '"consent_required"' || fail "the daemon ran steps without consent"
api POST /v1/images/test/pull "{\"accept_postinstall\": [\"$u1\"]}" | grep -q '"consent_required"' ||
    fail "the daemon ran a step that was not accepted"
[ "$(version)" = 1 ] || fail "a refused pull changed the image"

# --yes: both steps run in the installer VM; the clone is installed as version 2.
start=$(date +%s%N)
s image pull test --yes >"$work/out" 2>"$work/err" ||
    fail "pull --yes: $(cat "$work/err"; tail -20 "$work/slated.log")"
log "postinstall of 2 steps took $((($(date +%s%N) - start) / 1000000)) ms"
grep -q "postinstall step 1 of 2: write the marker" "$work/err" || fail "no step progress: $(cat "$work/err")"
grep -q "2 postinstall steps applied" "$work/out" || fail "pull output: $(cat "$work/out")"
[ "$(version)" = 2 ] || fail "postinstall did not bump the version: $(version)"
[ "$(marker "$img/disk.img")" = "marker from postinstall
second" ] || fail "the image lacks the steps' changes: '$(marker "$img/disk.img")'"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["postinstall"]
assert [s["uuid"] for s in p["applied"]] == sys.argv[2:] and not p["pending"], p' \
    "$img/catalog.json" $u1 $u2 || fail "applied steps not recorded"
s image verify test | grep -q "^test: OK" || fail "verify after postinstall: $(s image verify test 2>&1)"
no_staging
# The hash slated recorded (image verify just proved the disk has it); hashing 4 GiB here would
# take a minute.
good_sha=$(s image ls --json | jget images.0.digest)

# Applied steps need no consent again; a second pull has nothing to do.
s image pull test </dev/null >"$work/out" 2>"$work/err" || fail "second pull: $(cat "$work/err")"
grep -q "up to date" "$work/out" || fail "second pull: $(cat "$work/out")"
[ "$(s catalog show --json | jget images.0.postinstall.1.applied)" = true ] || fail "catalog show: not applied"

# Base drift: the workspace made from version 1 is not started silently.
expect_fail 1 "reset-to-base" s start piold$$
grep -q "as-is" "$work/err" || fail "drift: $(cat "$work/err")"
# A workspace made now has the marker, and a VM of the new base shows it.
s create pinew$$ --image test >/dev/null
[ "$(marker "$state/workspaces/pinew$$/disk.img")" = "marker from postinstall
second" ] || fail "a new workspace lacks the marker"
[ "$(s run --rm --image test --name pirun$$ -- cat /etc/marker 2>"$work/err")" = "marker from postinstall
second" ] || fail "slate run did not see the marker: $(cat "$work/err")"

# Version 3 adds a failing step: only it is listed; it fails; the base stays as it was.
publish 3 "$s1, $s2, $s3"
expect_fail 2 "pass --yes" s image pull test </dev/null
grep -q "fail on purpose" "$work/out" || fail "the new step was not listed"
grep -q "write the marker" "$work/out" && fail "an applied step was listed for consent again"
expect_fail 1 "exited with status 3" s image pull test --yes
for want in "fail on purpose" "about to fail" "oops on stderr" "$u3" "unchanged"; do
    grep -qF -- "$want" "$work/err" || fail "the failure output lacks '$want': $(cat "$work/err")"
done
[ "$(version)" = 2 ] || fail "a failed step changed the version: $(version)"
[ "$(s image ls --json | jget images.0.digest)" = "$good_sha" ] || fail "a failed step changed the base"
[ "$(marker "$img/disk.img")" = "marker from postinstall
second" ] || fail "a failed step's write reached the base"
s image verify test | grep -q "^test: OK" || fail "the base does not verify after a failed step"
no_staging
for d in $(virsh -q -c "$SLATE_TEST_URI" list --name | grep '^slate\.install-' || true); do
    virsh -q -c "$SLATE_TEST_URI" domblklist "$d" 2>/dev/null | grep -qF "$work/" &&
        fail "installer domain $d is still running"
done

# A new image version whose steps were all applied before: no consent is asked again; the fresh
# disk is downloaded, installed (version 3) and gets the steps (version 4).
publish 4 "$s1, $s2" 2
s image pull test </dev/null >"$work/out" 2>"$work/err" || fail "pull of a new image version: $(cat "$work/err")"
# The steps' progress lines say they ran (the version and the marker below prove it; a line per
# step is not guaranteed when both steps end within one console read).
grep -q "postinstall step [12] of 2" "$work/err" || fail "the steps did not run on the new disk: $(cat "$work/err")"
[ "$(version)" = 4 ] || fail "new image version: local version $(version), want 4"
[ "$(marker "$img/disk.img")" = "marker from postinstall
second" ] || fail "the new disk lacks the steps' changes"
s rm piold$$ --yes >/dev/null
s rm pinew$$ --yes >/dev/null
stop_slated
stop_bg server_pid

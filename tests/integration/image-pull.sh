#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Catalog images end to end, through the real daemon and client: the locally built test image
# served as a catalog image (zstd-compressed disk, kernel, initrd) by an HTTP server on 127.0.0.1,
# in a catalog signed with a key from `slate-catalog keygen` that slated trusts through its
# trusted-keys directory. catalog update, image pull (sparse expansion), image ls (signed),
# create from it, image verify (postinstall steps: tests/integration/postinstall.sh); then the
# attacks:
# a flipped byte in the installed disk (verify fails), a wrong artifact (pull refused, base
# unchanged), an endless artifact (stopped at the declared size), a dropped connection (the retry
# resumes with a Range request, seen in the server's log), rollback, expired, unsigned and
# untrusted catalogs (refused). Run through tests/integration/run-one, which sources lib.sh.
# shellcheck disable=SC2154
set -euo pipefail

ensure_libvirt
ensure_test_image
command -v python3 >/dev/null || skip "python3 not found (apt-get install python3)"
command -v zstd >/dev/null || skip "zstd not found (apt-get install zstd)"

catalog_test_setup
on_exit stop_slated

# The artifacts: the test image's disk compressed with zstd, its kernel and initrd as they are.
log "compressing the test image's disk"
zstd -q -T0 -3 "$test_image_dir/disk.img" -o "$srv/disk.img.zst"
cp "$test_image_dir/vmlinuz" "$test_image_dir/initrd.img" "$srv/"
head -c 3000000 /dev/urandom >"$srv/wrong.bin"
# The disk digest image.json records (doc/catalog.md), computed independently: every byte read.
digest1m() {
    python3 - "$1" <<'PY'
import hashlib, struct, sys
f = open(sys.argv[1], "rb"); n = 0; hs = []
while True:
    b = f.read(1 << 20)
    if not b:
        break
    n += len(b); hs.append(hashlib.sha256(b).digest())
print("sha256-1m:" + hashlib.sha256(b"slate-sha256-1m\0" + struct.pack("<Q", n) + b"".join(hs)).hexdigest())
PY
}
# The offset of the first hole of a file that has one.
first_hole() {
    python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); print(os.lseek(fd, 0, os.SEEK_HOLE))' "$1"
}
disk_size=$(size "$srv/disk.img.zst") disk_sha=$(sha "$srv/disk.img.zst")
raw_size=$(size "$test_image_dir/disk.img")
k_size=$(size "$srv/vmlinuz") k_sha=$(sha "$srv/vmlinuz")
i_size=$(size "$srv/initrd.img") i_sha=$(sha "$srv/initrd.img")

# image_entry ID VERSION DISK-URL [DISK-SIZE [DISK-SHA]]
image_entry() {
    cat <<EOF2
    {
      "id": "$1", "version": $2, "description": "the slate test image, from a catalog",
      "disk": {"url": "$3", "size": ${4:-$disk_size}, "uncompressedSize": $raw_size,
               "sha256": "${5:-$disk_sha}", "compression": "zstd", "format": "raw"},
      "boot": {"type": "kernel",
               "kernel": {"url": "vmlinuz", "size": $k_size, "sha256": "$k_sha"},
               "initrd": {"url": "initrd.img", "size": $i_size, "sha256": "$i_sha"},
               "cmdline": "console=ttyS0"}
    }
EOF2
}
publish() { # VERSION EXPIRES [KEY] IMAGES... -> $srv/stable.json(.sig)
    local v=$1 exp=$2 key=$3
    shift 3
    write_catalog "$srv/stable.json" "$v" "$exp" "$@"
    rm -f "$srv/stable.json.sig"
    case $key in
    none) ;;
    *.pem) # OpenSSL, an independent Ed25519 implementation (and it signs expired catalogs)
        local keyid
        keyid=$(openssl pkey -in "$key" -pubout -outform DER | tail -c 32 |
            openssl dgst -sha256 -binary | head -c 8 | od -An -tx1 | tr -d ' \n')
        { printf 'slate-catalog-v1\0channel=stable\0'; cat "$srv/stable.json"; } >"$work/msg"
        openssl pkeyutl -sign -rawin -inkey "$key" -in "$work/msg" -out "$work/sig.bin"
        printf 'slate-catalog-sig-v1 %s %s\n' "$keyid" "$(base64 -w0 "$work/sig.bin")" >"$srv/stable.json.sig"
        ;;
    *) "$sc" sign --key "$key" --channel stable "$srv/stable.json" >/dev/null ;;
    esac
}

"$sc" keygen "$work/pub.secret" "$work/keys/publisher.pub" >/dev/null
"$sc" keygen "$work/other.secret" "$work/other.pub" >/dev/null
command -v openssl >/dev/null || skip "openssl not found (apt-get install openssl)"
openssl genpkey -algorithm ed25519 -out "$work/ossl.pem" 2>/dev/null
openssl pkey -in "$work/ossl.pem" -pubout -out "$work/keys/openssl.pub"

# The server: 127.0.0.1 only, an ephemeral port; its log shows every request's Range header.
python3 "$top_srcdir/tests/unit/fetch-server.py" "$srv" "$work/port" "$work/requests.log" &
server_pid=$!
wait_file "$work/port" "$server_pid"
url=http://127.0.0.1:$(cat "$work/port")

# The daemon, trusting the publisher's key, on a loop-mounted btrfs.
mnt=$(make_loop_fs btrfs pull 3G)
cat >"$work/slate.conf" <<EOF2
trusted-keys = $work/keys
channel = stable
EOF2
state=$mnt/state
start_slated -- --config "$work/slate.conf"

# catalog update, pull, ls, create, verify.
publish 5 2099-01-01T00:00:00Z "$work/pub.secret" "$(image_entry test 1 disk.img.zst)" \
    "$(image_entry flaky 1 drop/disk.img.zst)" \
    "$(image_entry endless 1 disk.img.zst | sed "s|\"url\": \"vmlinuz\", \"size\": $k_size|\"url\": \"endless\", \"size\": 1048576|")" \
    "$(image_entry wrong 1 wrong.bin "$(size "$srv/wrong.bin")")"
s catalog update --from "$url/stable.json" | grep -q "catalog stable version 5" ||
    fail "catalog update: $(s catalog update --from "$url/stable.json" 2>&1)"
[ "$(s catalog show --json | jget version)" = 5 ] || fail "catalog show"
s image pull test --yes >"$work/pull.out" 2>"$work/pull.err" ||
    fail "image pull: $(cat "$work/pull.err"; tail -5 "$work/slated.log")"
grep -q "^pulled image test: local version 1" "$work/pull.out" || fail "pull output: $(cat "$work/pull.out")"
json=$(s image ls --json)
[ "$(jget images.0.id <<<"$json")" = test ] || fail "image ls: $json"
[ "$(jget images.0.local <<<"$json")" = false ] || fail "pulled image marked local"
[ "$(jget images.0.signed <<<"$json")" = true ] || fail "pulled image not marked signed"
s image ls | grep -q "^test .*catalog/signed" || fail "image ls text: $(s image ls)"
img=$mnt/state/images/test
[ "$(sha "$img/disk.img")" = "$(sha "$test_image_dir/disk.img")" ] || fail "installed disk differs from the test image"
[ "$(jget images.0.digest <<<"$json")" = "$(digest1m "$test_image_dir/disk.img")" ] ||
    fail "recorded digest: $(jget images.0.digest <<<"$json")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["digest"].startswith("sha256-1m:") and "sha256" not in d, d' \
    "$img/image.json" || fail "image.json: $(cat "$img/image.json")"
# Sparse: no more allocated than the test image's own data (plus 8 MiB of slack for file system
# granularity), not its 4 GiB; the image grows with what it ships, so the bound follows it.
src_kib=$(du -k "$test_image_dir/disk.img" | cut -f1)
[ "$(du -k "$img/disk.img" | cut -f1)" -lt $((src_kib + 8 * 1024)) ] ||
    fail "the disk was not expanded sparsely: $(du -h "$img/disk.img"), the source holds ${src_kib} KiB"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); p=d["postinstall"]; assert not p["pending"] and not p["applied"], p' \
    "$img/catalog.json" || fail "the image's source record"
s image pull test --yes | grep -q "up to date" || fail "a second pull downloaded again"
s create ws1 --image test >/dev/null
s image verify | grep -q "^test: OK" || fail "verify: $(s image verify 2>&1)"
s image verify test --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["failed"]==0 and d["images"][0]["catalog"]=="current", d' ||
    fail "verify --json"

# A dropped connection: the second try resumes with a Range request.
: >"$work/requests.log"
s image pull flaky --yes >/dev/null 2>"$work/err" || fail "pull with a dropped connection: $(cat "$work/err")"
grep -q "^GET /drop/disk.img.zst -$" "$work/requests.log" || fail "no first request: $(cat "$work/requests.log")"
grep -q "^GET /drop/disk.img.zst bytes=[1-9][0-9]*-$" "$work/requests.log" ||
    fail "the retry did not resume with Range: $(cat "$work/requests.log")"
grep -q "^GET /stable.json " "$work/requests.log" || fail "the catalog was not fetched again between tries"
s image verify flaky | grep -q "^flaky: OK" || fail "verify of the resumed image"

# An endless artifact: stopped at the declared size, nothing installed.
expect_fail 1 "more than the declared 1048576 bytes" s image pull endless --yes
[ ! -e "$mnt/state/images/endless" ] || fail "an endless artifact was installed"
# A wrong artifact: refused, nothing installed; a replaced image stays as it was.
expect_fail 1 "differs from the declared" s image pull wrong --yes
[ ! -e "$mnt/state/images/wrong" ] || fail "a wrong artifact was installed"
publish 6 2099-01-01T00:00:00Z "$work/pub.secret" \
    "$(image_entry test 2 wrong.bin "$(size "$srv/wrong.bin")")"
s catalog update >/dev/null
expect_fail 1 "differs from the declared" s image pull test --yes
[ "$(s image ls --json | jget images.1.version)" = 1 ] || fail "the base changed after a refused pull"
s image verify test | grep -q "^test: OK" || fail "the base does not verify after a refused pull"
ls "$mnt/state/images" | grep -q "^\.tmp-" && fail "a staging directory was left behind"

# Tampering with the installed disk: verify fails.
chmod u+w "$img/disk.img"
printf '\x5a' | dd of="$img/disk.img" bs=1 seek=$((1 << 20)) conv=notrunc status=none
expect_fail 1 "failed verification" s image verify test
grep -q "^test: FAILED: disk.img has sha256-1m:" "$work/out" || fail "verify output: $(cat "$work/out")"
# One byte written into a hole (nothing the digest reads there): verify fails too.
fimg=$mnt/state/images/flaky
hole=$(first_hole "$fimg/disk.img")
[ "$hole" -lt "$(size "$fimg/disk.img")" ] || fail "the pulled disk has no hole"
chmod u+w "$fimg/disk.img"
printf '\x01' | dd of="$fimg/disk.img" bs=1 seek=$((hole + 1)) conv=notrunc status=none
expect_fail 1 "failed verification" s image verify flaky
# Zero again, but written (no longer a hole): the same content verifies.
printf '\x00' | dd of="$fimg/disk.img" bs=1 seek=$((hole + 1)) conv=notrunc status=none
s image verify flaky | grep -q "^flaky: OK" || fail "verify after a hole became written zeros"
# An image.json from before the block digest (the plain SHA-256 of disk.img) still verifies, the
# old way, and still catches a changed byte.
chmod u+w "$fimg/image.json"
python3 - "$fimg/image.json" "$(sha "$fimg/disk.img")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); del d["digest"]; d["sha256"] = sys.argv[2]
open(sys.argv[1], "w").write(json.dumps(d))
PY
s image verify flaky | grep -q "^flaky: OK (sha256:$(sha "$fimg/disk.img")" ||
    fail "verify of an older image.json: $(s image verify flaky 2>&1)"
printf '\x02' | dd of="$fimg/disk.img" bs=1 seek=$((hole + 1)) conv=notrunc status=none
expect_fail 1 "failed verification" s image verify flaky

# Catalog refusals: rollback, expired, unsigned, untrusted.
publish 4 2099-01-01T00:00:00Z "$work/pub.secret" "$(image_entry test 1 disk.img.zst)"
expect_fail 1 "rollback\|lower than" s catalog update
publish 7 2020-01-01T00:00:00Z "$work/ossl.pem" "$(image_entry test 1 disk.img.zst)"
expect_fail 1 "expired" s catalog update
# The same catalog unexpired, signed by OpenSSL with a trusted key, is fine.
publish 7 2099-01-01T00:00:00Z "$work/ossl.pem" "$(image_entry test 1 disk.img.zst)"
s catalog update | grep -q "version 7" || fail "an OpenSSL-signed catalog was refused"
publish 8 2099-01-01T00:00:00Z none "$(image_entry test 1 disk.img.zst)"
expect_fail 1 "signature" s catalog update
publish 8 2099-01-01T00:00:00Z "$work/other.secret" "$(image_entry test 1 disk.img.zst)"
expect_fail 1 "not trusted" s catalog update
# Endless data: a catalog is at most 4 MiB, enforced while it downloads (not after), whether the
# server says nothing of the size or announces 1 TiB.
expect_fail 1 "larger than 4194304 bytes" timeout 30 "$slate" --socket "$work/run/slated.sock" catalog update --from "$url/endless"
expect_fail 1 "4194304 bytes" timeout 30 "$slate" --socket "$work/run/slated.sock" catalog update --from "$url/endless-cl"
[ "$(s catalog show --json | jget version)" = 7 ] || fail "a refused catalog replaced the accepted one"
# Only root names a source.
chmod 0755 "$work/run"
chmod 0666 "$work/run/slated.sock"
expect_fail 1 "only root" setpriv --reuid=65534 --regid=65534 --clear-groups "$slate" --socket "$work/run/slated.sock" catalog update --from "$url/stable.json"
s rm ws1 --yes >/dev/null
stop_slated
stop_bg server_pid

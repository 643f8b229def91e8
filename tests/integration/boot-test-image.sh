#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The harness end to end: loop-mounted btrfs and XFS with working reflinks, libvirtd, the test
# image, and TCG/KVM boots through images/test/boot that report the guest command's output and
# exit status. tests/integration/run-one sources it after lib.sh (which sets top_srcdir,
# test_tmpdir and, through ensure_test_image, test_image_dir).
# shellcheck disable=SC2154

ensure_libvirt
ensure_test_image
boot=$top_srcdir/images/test/boot

for fs in btrfs xfs; do
    mnt=$(make_loop_fs "$fs" "$fs" 320M)
    mountpoint -q "$mnt" || fail "$fs: $mnt is not a mount point"
    head -c 1M /dev/urandom >"$mnt/data"
    cp --reflink=always "$mnt/data" "$mnt/clone" || fail "$fs: cp --reflink=always failed"
    cmp -s "$mnt/data" "$mnt/clone" || fail "$fs: the reflinked copy differs"
    log "$fs on $mnt: reflink copy ok"
done
btrfs_mnt=$test_tmpdir/btrfs

# 1. A command's output and status, and slate-guest's ready line on the serial console.
start=$SECONDS
rc=0
out=$("$boot" --image-dir "$test_image_dir" --serial-log "$test_tmpdir/serial-1.log" \
    -- echo hello-from-guest) || rc=$?
log "boot 1 took $((SECONDS - start)) s"
[ "$rc" = 0 ] || fail "echo in the guest exited with $rc (console: $(tail -n 5 "$test_tmpdir/serial-1.log" 2>/dev/null))"
[ "$out" = hello-from-guest ] || fail "guest output was '$out', expected 'hello-from-guest'"
grep -E '^slate-guest [^ ]+: ready$' "$test_tmpdir/serial-1.log" >/dev/null ||
    fail "no 'slate-guest VERSION: ready' line on the serial console"
log "guest said '$out'; $(grep -E '^slate-guest ' "$test_tmpdir/serial-1.log")"

# 2. A failing command's status, booting from an image reflinked onto btrfs and with the run's
#    private copies (reflinks again) there too.
mkdir -p "$btrfs_mnt/image" "$btrfs_mnt/tmp"
for f in disk.img vmlinuz initrd.img; do
    cp --reflink=auto --sparse=always "$test_image_dir/$f" "$btrfs_mnt/image/$f"
done
before=$(stat -c '%s %Y %Z' "$btrfs_mnt/image/disk.img")
start=$SECONDS
rc=0
out=$(TMPDIR=$btrfs_mnt/tmp "$boot" --image-dir "$btrfs_mnt/image" -- sh -c 'echo failing; exit 3') ||
    rc=$?
log "boot 2 took $((SECONDS - start)) s"
[ "$rc" = 3 ] || fail "sh -c 'exit 3' in the guest gave status $rc, expected 3"
[ "$out" = failing ] || fail "guest output was '$out', expected 'failing'"
[ -z "$(ls -A "$btrfs_mnt/tmp")" ] || fail "images/test/boot left files behind: $(ls -A "$btrfs_mnt/tmp")"
# Comparing 4 GiB costs seconds; size, mtime and ctime show any write (or chown by libvirt).
[ "$(stat -c '%s %Y %Z' "$btrfs_mnt/image/disk.img")" = "$before" ] || fail "the booted image was modified"
log "guest exit status 3 passed through"

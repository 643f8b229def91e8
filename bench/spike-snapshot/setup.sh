#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A btrfs loop file system for reflinks, a slated of our own on it, the test image imported.
set -euo pipefail
. "$(dirname "$0")/env.sh"
mkdir -p "$FS" "$RUN"
if ! mountpoint -q "$FS"; then
    truncate -s 16G "$SP/fs.img"
    mkfs.btrfs -q -f "$SP/fs.img"
    mount -o loop "$SP/fs.img" "$FS"
    chmod 0755 "$FS"
fi
rm -f "$RUN/slated.sock"
"$slated" --foreground --state-dir "$STATE" --runtime-dir "$RUN" --log-level debug 2>>"$SP/slated.log" &
echo $! >"$SP/slated.pid"
for _ in $(seq 200); do [ -S "$RUN/slated.sock" ] && break; sleep 0.05; done
s image ls | grep -q '^test' || s image import test "$IMG/disk.img" --kernel "$IMG/vmlinuz" \
    --initrd "$IMG/initrd.img" --cmdline console=ttyS0 >/dev/null
s image ls

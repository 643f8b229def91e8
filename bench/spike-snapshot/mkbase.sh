#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# mkbase.sh TAG MEM_MIB [save flags...]: boot a pristine clone of the test image as domain
# slate-snap-TAG (transient, the template's XML from $SP/sa-save.xml with <genid/>), its vdb a
# 16 MiB placeholder of zeros (init cannot mount it: no home), wait for slate-guest's ready line,
# then virsh save into $FS/TAG/base.sav; the disk as saved is kept as $FS/TAG/base-disk.img.
set -euo pipefail
. "$(dirname "$0")/env.sh"
tag=$1 mem=$2
shift 2
d=$FS/$tag
rm -rf "$d"; mkdir -p "$d"; chmod 0755 "$d"
cp --reflink=always "$STATE/images/test/disk.img" "$d/disk.img"
chmod 0600 "$d/disk.img"
[ -z "${PREP:-}" ] || $PREP "$d/disk.img"
truncate -s 16M "$d/placeholder.img"
python3 "$SP/mkxml.py" "$SP/sa-save.xml" "$d/base.xml" --name "slate-snap-$tag" --uuid "$(cat /proc/sys/kernel/random/uuid)" \
    --meta-ws "snap-$tag" --memory "$mem" --genid "${GENID:-auto}" \
    --vda "$d/disk.img" --vdb "$d/placeholder.img" --log "$d/console.log" --chan "$d/chan.sock"
t0=$(ms)
v create "$d/base.xml" >/dev/null
until grep -q 'slate-guest .*: ready' "$d/console.log" 2>/dev/null; do
    [ $(($(ms) - t0)) -lt 120000 ] || { tail "$d/console.log"; exit 1; }
    sleep 0.05
done
t1=$(ms)
sleep "${SETTLE:-1}"
# PRESAVE: a command the guest runs over the channel just before the save.
[ -z "${PRESAVE:-}" ] || python3 "$SP/gexec.py" "$d/chan.sock" "$PRESAVE"
t2=$(ms)
v save "slate-snap-$tag" "$d/base.sav" "$@" >/dev/null
t3=$(ms)
cp --reflink=always "$d/disk.img" "$d/base-disk.img"
echo "mkbase $tag mem=$mem boot_to_ready_ms=$((t1 - t0)) save_ms=$((t3 - t2)) save_flags='$*' size=$(stat -c %s "$d/base.sav") on_disk=$(du -k "$d/base.sav" | cut -f1)KiB"

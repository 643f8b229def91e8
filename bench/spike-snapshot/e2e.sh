#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# e2e.sh TAG N: what slated would do to start workspace "wsN" from the booted base $FS/TAG:
# the disk cloned from the saved disk, a fresh 1 GiB ext4 home, the workspace's own domain XML
# (name, UUID, metadata, disks, console log, channel) written into a copy of the save image
# (rehdr.py --align: the stream cloned with FICLONERANGE), virsh restore, virsh blockresize of vdb
# to its real size (the guest sees the new capacity), then over the channel one exec that steps the
# clock, reseeds the RNG with host bytes, mounts the home and sets the hostname, then a login
# shell's proof. Times each step from the start (ms).
set -euo pipefail
. "$(dirname "$0")/env.sh"
cd "$SP"
tag=$1 n=$2
d=$FS/$tag w=$FS/$tag/ws$n
rm -rf "$w"; mkdir -p "$w"; chmod 0755 "$w"
truncate -s 1G "$w/home.img"; mkfs.ext4 -q -F -E root_owner=1000:1000 "$w/home.img"; chmod 0600 "$w/home.img"
[ -f "$d/aligned.sav" ] || python3 rehdr.py "$d/base.sav" <(v save-image-dumpxml "$d/base.sav") "$d/aligned.sav" --align >/dev/null
v save-image-dumpxml "$d/aligned.sav" >"$w/save.xml"
uuid=$(cat /proc/sys/kernel/random/uuid)
t0=$(ms)
cp --reflink=always "$d/base-disk.img" "$w/disk.img"
python3 mkxml.py "$w/save.xml" "$w/ws.xml" --name "slate-ws$n" --uuid "$uuid" --meta-ws "ws$n" --meta-uuid "$uuid" \
    --vda "$w/disk.img" --vdb "$w/home.img" --log "$w/console.log" --chan "$w/chan.sock"
python3 rehdr.py "$d/aligned.sav" "$w/ws.xml" "$w/ws.sav" --align >"$w/rehdr.out"
t1=$(ms)
v restore "$w/ws.sav" >/dev/null
t2=$(ms)
v blockresize "slate-ws$n" vdb "$(stat -c %s "$w/home.img")B" >/dev/null
t3=$(ms)
now=$(date +%s.%N)
ent=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
python3 gexec.py "$w/chan.sock" --t0 "$t0" "date -s @${now%.*} >/dev/null; /usr/local/bin/reseed $ent >/dev/null 2>&1; blockdev --flushbufs /dev/vdb; mount -t ext4 -o nosuid,nodev /dev/vdb /home/slate && hostname ws$n && echo home=\$(df -k /home/slate | tail -1 | awk '{print \$2}')" 2>"$w/g1.err"
t4=$(ms)
python3 gexec.py "$w/chan.sock" --t0 "$t0" "su - slate -c 'echo proof-\$((6*7)) \$(hostname) \$(date +%s)'" 2>"$w/g2.err"
t5=$(ms)
echo "e2e $tag ws$n: prepare(clone+xml+rehdr) $((t1 - t0)) restore $((t2 - t1)) blockresize $((t3 - t2)) setup-exec $((t4 - t3)) proof $((t5 - t4)) total $((t5 - t0)) ms; host $(date +%s); $(cat "$w/rehdr.out" | sed 's/rehdr: //'); $(sed 's/gexec: //' "$w/g1.err")"

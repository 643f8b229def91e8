#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# restore1.sh TAG [XML] [virsh restore flags]: the disk reset to base-disk.img, $FS/TAG/base.sav
# restored (with --xml XML when given), then one exec over the channel; prints the virsh restore
# wall time and the ms from the restore's start to the exec's answer. Leaves the domain running.
set -euo pipefail
. "$(dirname "$0")/env.sh"
tag=$1 xml=${2:-}
shift; [ $# -gt 0 ] && shift
d=$FS/$tag
cp --reflink=always "$d/base-disk.img" "$d/disk.img"
sync -f "$d" 2>/dev/null || true
sock=$d/chan.sock
[ -z "$xml" ] || sock=$(sed -n "s|.*source mode=.bind. path=.\([^'\"]*\).*|\1|p" "$xml" | head -1)
t0=$(ms)
v restore "$d/base.sav" ${xml:+--xml "$xml"} "$@" >/dev/null
t1=$(ms)
python3 "$SP/gexec.py" "$sock" --t0 "$t0" "${CMD:-true}" 2>"$d/gexec.err"
t2=$(ms)
echo "restore $tag restore_ms=$((t1 - t0)) exec_answer_ms=$((t2 - t0)) $(cat "$d/gexec.err")"

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# bench.sh: booted bases of 512 and 2048 MiB, saved with and without --bypass-cache; each restored
# 3 times (virsh restore wall time, then `true` and a login-shell echo over the channel); the save
# files' sizes and what gzip/xz/zstd would make of them.
set -euo pipefail
. "$(dirname "$0")/env.sh"
cd "$SP"
for mem in 512 2048; do
    for bc in "" --bypass-cache; do
        tag=m$mem${bc:+b}
        ./mkbase.sh "$tag" "$mem" $bc
        for i in 1 2 3; do
            CMD=true ./restore1.sh "$tag" "" $bc
            python3 gexec.py "$FS/$tag/chan.sock" 'su - slate -c "echo proof-\$((6*7))" 2>&1 | tail -1' 2>&1 | tr '\n' ' '
            echo
            v destroy "slate-snap-$tag" >/dev/null
        done
    done
done

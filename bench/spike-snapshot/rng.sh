#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# rng.sh TAG SETTLE_S: a booted base saved SETTLE_S seconds after ready (with the reseed tool on its
# disk), restored 4 times: the first 32 bytes of /dev/urandom read by the first exec after each
# restore, twice plain and twice after RNDADDENTROPY of host bytes + RNDRESEEDCRNG; boot_id after.
# PRESAVE (mkbase.sh) runs in the guest just before the save.
set -euo pipefail
. "$(dirname "$0")/env.sh"
cd "$SP"
tag=$1
PREP=$SP/prep-reseed.sh SETTLE=$2 PRESAVE=${PRESAVE:-} ./mkbase.sh "$tag" 512
for mode in plain plain host host; do
    if [ $mode = plain ]; then c='reseed; cat /proc/sys/kernel/random/boot_id; cat /proc/uptime'
    else c="reseed $(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'); cat /proc/sys/kernel/random/boot_id; cat /proc/uptime"; fi
    CMD=$c ./restore1.sh "$tag" | tr '\n' ' '
    echo " [$mode]"
    v destroy "slate-snap-$tag" >/dev/null
done

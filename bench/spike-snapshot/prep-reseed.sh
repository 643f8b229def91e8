#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# prep-reseed.sh DISK: put the static reseed tool into the guest's /usr/local/bin.
set -euo pipefail
m=$(mktemp -d)
mount -o loop "$1" "$m"
install -D -m 0755 "$(dirname "$0")/reseed" "$m/usr/local/bin/reseed"
umount "$m"
rmdir "$m"

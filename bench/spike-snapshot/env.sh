# SPDX-License-Identifier: GPL-2.0-or-later
# Common settings for the snapshot spike scripts (sourced).
WT=${WT:-/work/wt-snapspike}
SP=/tmp/snapspike
FS=$SP/fs            # btrfs loop mount: reflinks
STATE=$FS/state
RUN=$SP/run
IMG=${IMG:-/work/main/images/test/out}
slated=$WT/slated
slate=$WT/slate
s() { "$slate" --socket "$RUN/slated.sock" "$@"; }
v() { virsh -q -c qemu:///system "$@"; }
ms() { date +%s%3N; }

#!/bin/sh
# slate-step uuid=5c54dad5-ef0e-4407-9b8c-9ab4fd437d2a
# slate-step seq=10
# slate-step description=Grow the root file system to fill the 24 GiB disk
#
# make-entry extended the upstream disk to 24 GiB and grew partition 1 (the root, the last one on
# the disk) to its end. The file system follows here, once, online, in the installer: no
# workspace spends its first boot (and its own copy-on-write blocks) on it.
set -eu
root=$(findmnt -n -o SOURCE /)
case "$root" in
/dev/vd?[0-9]*) ;;
*)
    echo "unexpected root device '$root'" >&2
    exit 1
    ;;
esac
resize2fs "$root"
df -h /

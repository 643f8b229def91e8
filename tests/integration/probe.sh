#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# slate probe (doc/residue.md) in real guests, both directions:
#  - on btrfs, XFS (reflink), the loop pool and qcow2 storage a fresh workspace holds no foreign
#    byte: both disks probed (regions written and compared on each), exit 0, and the probe
#    leaves the guest's data and file systems as they were (files read back the same, e2fsck
#    finds nothing, the file systems take writes again);
#  - a home on a block device allocated without zeroing (a loop device over a file a previous
#    tenant filled with a marker, an ext4 made on it with nodiscard: the dm-thin
#    skip_block_zeroing case without dm-thin, which this kernel may lack) makes slate probe
#    report the marker, with its device and offset, and exit 3;
#  - slate-guest refuses a region its file system uses, whatever the host asks;
#  - free blocks of a base that deleted a file hold the base's bytes: compared against the
#    digests slated sends, clean;
#  - slate doctor --residue passes on btrfs, and leaves no workspace behind.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

marker=SLATE-RESIDUE-MARKER
kinds=(btrfs reflink pool qcow2 leak used)
doms=()
for k in "${kinds[@]}"; do doms+=("slate-pb$$-$k"); done
residue_domains() {
    local d
    for d in $(v list --all --name 2>/dev/null | grep '^slate-residue-' || true); do
        destroy_domains "$d"
    done
}
on_exit residue_domains
on_exit destroy_domains "${doms[@]}"
on_exit stop_slated

bmnt=$(make_loop_fs btrfs pb-btrfs 3G)
xmnt=$(make_loop_fs xfs pb-xfs 6G)

# ws_dir NAME: the workspace's directory on this slated's storage.
ws_dir() {
    if [ -d "$state/pool/workspaces/$1" ]; then
        echo "$state/pool/workspaces/$1"
    else
        echo "$state/workspaces/$1"
    fi
}

# probe_json NAME WANT_RC: slate probe NAME --json into $work/probe.json, exiting WANT_RC.
probe_json() {
    local rc=0
    s probe "$1" --json --marker "$marker" >"$work/probe.json" 2>"$work/probe.err" || rc=$?
    [ "$rc" = "$2" ] ||
        fail "slate probe $1 exited $rc, want $2: $(cat "$work/probe.err") $(head -c 3000 "$work/probe.json")"
}

# check_clean KIND: the probe result in $work/probe.json is clean and covered both disks.
check_clean() {
    python3 - "$1" "$work/probe.json" <<'EOF'
import json, sys
kind, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
assert r["clean"] and r["complete"] and r["foreign_bytes"] == 0, r
assert r["storage"] == kind, (r["storage"], kind)
for d in r["devices"]:
    name = d["device"]
    assert d["probed"], d
    assert d["filesystems"], d
    # Regions written and compared on each disk, spread over it.
    assert d["written"] >= 64, d
    assert d["compared"] >= 64, d
    assert d["foreign_bytes"] == 0 and not d["hits"] and not d["errors"], d
    print(f"# {kind} {name}: {d['free_regions']} free regions, {d['written']} written, "
          f"{d['compared']} compared (classes {d['classes']}), guest {d['guest_ms']} ms")
print(f"# {kind}: probe took {r['seconds']:.1f} s")
EOF
}

# keep_sums NAME: checksums of a file on each disk, written before the probe.
keep_sums() {
    s exec --user root "$1" -- sh -c 'echo 1 >/proc/sys/vm/drop_caches; sha256sum /var/tmp/keep /home/slate/keep'
}

backend() {
    local kind=$1 conf=$2 dir=$3 name=pb$$-$1 d before after
    state=$dir/state-$kind
    printf '%s\n' "$conf" >"$work/slate-$kind.conf"
    start_slated -- --config "$work/slate-$kind.conf"
    import_test_image
    s create "$name" --memory 512 --cpus 1 >/dev/null
    s start "$name" >/dev/null 2>"$work/start.err" || fail "start $name: $(cat "$work/start.err")"
    s exec --user root "$name" -- sh -c 'head -c 4194304 /dev/urandom >/var/tmp/keep &&
        head -c 4194304 /dev/urandom >/home/slate/keep && sync' || fail "writing the files to keep"
    before=$(keep_sums "$name")
    probe_json "$name" 0
    check_clean "$kind"
    after=$(keep_sums "$name")
    [ "$before" = "$after" ] || fail "$kind: files changed across the probe: $before / $after"
    # Thawed: both file systems take writes again.
    timeout 30 "$slate" --socket "$work/run/slated.sock" exec --user root "$name" -- \
        sh -c 'echo x >/var/tmp/after && echo x >/home/slate/after && sync' ||
        fail "$kind: the file systems do not take writes after the probe"
    s stop "$name" >/dev/null 2>&1
    d=$(ws_dir "$name")
    e2fsck -fn "$d/home.img" >"$work/fsck.log" 2>&1 || fail "$kind: home.img after the probe: $(cat "$work/fsck.log")"
    if [ "$kind" != qcow2 ]; then
        e2fsck -fn "$d/disk.img" >"$work/fsck.log" 2>&1 ||
            fail "$kind: disk.img after the probe: $(cat "$work/fsck.log")"
    else
        qemu-img convert -O raw "$d/disk.img" "$work/disk-raw.img"
        e2fsck -fn "$work/disk-raw.img" >"$work/fsck.log" 2>&1 ||
            fail "$kind: disk.img after the probe: $(cat "$work/fsck.log")"
        rm -f "$work/disk-raw.img"
    fi
    log "$kind: clean, files and file systems intact"
    s rm --yes "$name" >/dev/null
    stop_slated
}

backend btrfs "storage = auto" "$bmnt"
backend reflink "storage = auto" "$xmnt"
backend qcow2 "storage = qcow2" "$xmnt"
backend pool "storage = pool
pool-size = 2G" "$xmnt"

# ---- the bug reproduced: a home allocated on a device without zeroing ----
state=$bmnt/state-btrfs
start_slated -- --config "$work/slate-btrfs.conf"
name=pb$$-leak
s create "$name" --memory 512 --cpus 1 >/dev/null
dirty=$work/dirty.img
{ yes "$marker .env AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY" || true; } | head -c 192M >"$dirty"
loop=$(losetup -f --show "$dirty")
on_exit losetup -d "$loop"
# ext4 made on the dirty device as a tenant's would be, and nothing zeroes its free blocks.
mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0,root_owner=1000:1000 \
    -L slate-home "$loop"
d=$(ws_dir "$name")
rm -f "$d/home.img"
mknod "$d/home.img" b "$(stat -c %t "$loop" | xargs printf '%d')" \
    "$(stat -c %T "$loop" | xargs printf '%d')"
s start "$name" >/dev/null 2>"$work/start.err" || fail "start $name: $(cat "$work/start.err")"
probe_json "$name" 3
python3 - "$work/probe.json" "$marker" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
marker = sys.argv[2]
assert not r["clean"] and r["foreign_bytes"] > 0 and r["marker_hits"] > 0, r
vda, vdb = r["devices"]
assert vda["foreign_bytes"] == 0 and vda["written"] > 0, vda
assert vdb["classes"]["unknown"] > 0, vdb
assert vdb["foreign_bytes"] > 0 and vdb["hits"], vdb
h = vdb["hits"][0]
assert h["offset"] % 65536 == 0 and h["bytes"] > 0 and h["markers"] > 0, h
assert any(marker[:16] in x["sample"] or x["markers"] > 0 for x in vdb["hits"]), vdb["hits"]
# The write pass itself sees the 60 KiB after its 4 KiB.
w = [x for x in vdb["hits"] if x["pass"] == "write"]
assert w and all(x["first"] >= 4096 for x in w), w
print(f"# leak: vdb {vdb['foreign_bytes']} foreign bytes in {vdb['regions_with_foreign_bytes']} regions, "
      f"marker {vdb['marker_hits']} times, first hit at {h['offset']} ({h['pass']}): {h['sample']!r}")
EOF
s probe "$name" --marker "$marker" >"$work/probe.txt" 2>&1 || true
grep -q "FOREIGN" "$work/probe.txt" || fail "slate probe's text does not say FOREIGN: $(cat "$work/probe.txt")"
grep -q "vdb at [0-9]* (write pass)" "$work/probe.txt" || fail "no device and offset: $(cat "$work/probe.txt")"

# ---- slate-guest refuses a region its file system uses (offset 0: vda's superblock) ----
size=$(s exec --user root "$name" -- cat /sys/class/block/vda/size)
printf 'SLATE-PROBE 1\ndevice vda %s\nscan\nregion vda 0 w -\nregion vda 65536 c zero\nend\n' \
    "$((size * 512))" | s exec -i --user root "$name" -- slate-guest --probe >"$work/guest.out" ||
    fail "slate-guest --probe: $(cat "$work/guest.out")"
grep -q "^refused vda 0 " "$work/guest.out" || fail "offset 0 was not refused: $(cat "$work/guest.out")"
grep -q "^refused vda 65536 " "$work/guest.out" || fail "offset 65536 was not refused: $(cat "$work/guest.out")"
grep -q "^write vda 0 " "$work/guest.out" && fail "slate-guest wrote into vda's superblock region"
s stop "$name" >/dev/null
e2fsck -fn "$loop" >"$work/fsck.log" 2>&1 || fail "the leaky home after the probe: $(cat "$work/fsck.log")"
s rm --yes "$name" >/dev/null
log "leak: the marker was found, with its device and offset"

# ---- free blocks that hold the base's bytes: compared against the base's digests ----
# A base whose file system deleted a file (as image builds do): its blocks are free but hold data.
cp --sparse=always "$test_image_dir/disk.img" "$work/used.img"
head -c 16777216 /dev/urandom >"$work/junk"
debugfs -w -R "write $work/junk junk" "$work/used.img" >/dev/null 2>&1
debugfs -w -R "rm junk" "$work/used.img" >/dev/null 2>&1
e2fsck -fn "$work/used.img" >/dev/null 2>&1 || fail "the used base is not a clean ext4"
s image import used "$work/used.img" --kernel "$test_image_dir/vmlinuz" \
    --initrd "$test_image_dir/initrd.img" --cmdline "console=ttyS0" >/dev/null
rm -f "$work/used.img" "$work/junk"
name=pb$$-used
s create "$name" --image used --memory 512 >/dev/null
s start "$name" >/dev/null 2>"$work/start.err" || fail "start $name: $(cat "$work/start.err")"
probe_json "$name" 0
python3 - "$work/probe.json" <<'EOF2'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["clean"] and r["complete"], r
vda = r["devices"][0]
assert vda["classes"]["base"] > 0, vda
# Base extents are compared only: more compares than writes on vda.
# Base extents are compared only: as many of them as regions asked for (256) when there are.
assert vda["compared"] - vda["written"] >= min(256, vda["classes"]["base"]), vda
print(f"# used base: vda {vda['classes']['base']} free regions still the base's, "
      f"{vda['compared'] - vda['written']} of them compared against the base's digests, clean")
EOF2
s stop "$name" >/dev/null 2>&1
s rm --yes "$name" >/dev/null

# ---- slate doctor --residue ----
rc=0
s doctor --residue --image test --fill 64 --regions 64 --json >"$work/residue.json" 2>"$work/residue.err" || rc=$?
[ "$rc" = 0 ] || fail "doctor --residue exited $rc: $(cat "$work/residue.err") $(head -c 3000 "$work/residue.json")"
python3 - "$work/residue.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["pass"] and r["storage"] == "btrfs" and r["fill_mib"] == 64, r
assert r["foreign_bytes"] == 0 and r["marker_hits"] == 0, r
assert all(d["written"] > 0 and d["compared"] > 0 for d in r["devices"]), r
print(f"# doctor --residue on btrfs: pass in {r['total_seconds']:.1f} s (probe {r['seconds']:.1f} s)")
EOF
s ls --json | grep -q residue- && fail "doctor --residue left a workspace: $(s ls)"
stop_slated

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# slate-guest --probe (doc/residue.md, "The guest side of the protocol") in a running workspace of
# the test image, driven through `slate exec --user root` by tests/integration/probe-guest.py:
# 256 regions per device (write, compare with zeros, both, compare with digests) come back clean
# on a fresh workspace and with their time; written regions of home.img are holes again; regions
# outside the guest's own free list are refused; a deleted file's blocks are found (marker hits)
# and left as they were; files written before read back identically after; a malformed line is
# exit status 2 and thaws; a probe whose client is killed, and one
# SIGKILLed in the guest (its watchdog), leave /home thawed within seconds; both ext4 file
# systems are clean (e2fsck -fn) once the workspace is stopped.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

ws=prb$$
on_exit destroy_domains "slate-$ws"
on_exit stop_slated

mnt=$(make_loop_fs btrfs probe 3G)
state=$mnt/state
start_slated
import_test_image
s create $ws --memory 512 --cpus 1 --home-size 1G >/dev/null
s start $ws >/dev/null
wsdir=$(dirname "$(find "$state" -path "*/$ws/workspace.json" | head -1)")
if [ ! -f "$wsdir/disk.img" ] || [ ! -f "$wsdir/home.img" ]; then
    fail "no disk.img/home.img in $wsdir"
fi

s exec $ws -- sh -c 'head -c 3000000 /dev/urandom >~/before; sync'
s exec --user root $ws -- sh -c 'head -c 3000000 /dev/urandom >/root/before; sync'
sums() {
    s exec --user root $ws -- sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches; sha256sum /home/slate/before /root/before'
}
before=$(sums)
alloc() { du -B1 "$wsdir/home.img" | cut -f1; }
alloc_before=$(alloc)

vda=$(stat -c %s "$wsdir/disk.img")
vdb=$(stat -c %s "$wsdir/home.img")
# shellcheck disable=SC2154 # slate and work: lib.sh
probe() { "$slate" --socket "$work/run/slated.sock" exec $ws --user root -i -- slate-guest --probe; }
# shellcheck disable=SC2154 # top_srcdir: run-one
drive=$top_srcdir/tests/integration/probe-guest.py

# 256 regions per device, every mode, and three the guest must refuse on each.
DEVS="vda:$vda vdb:$vdb" N=256 REFUSE=1 MARKER=SLATE-RESIDUE python3 "$drive" \
    "$slate" --socket "$work/run/slated.sock" exec $ws --user root -i -- slate-guest --probe \
    >"$work/probe.out" 2>&1 || { cat "$work/probe.out"; fail "the probe failed"; }
grep -v -e ' clean$' -e ' differs 16 0 0 0 0*$' "$work/probe.out" >&2
for d in vda vdb; do
    grep -q "^< device $d $(eval echo "\$$d") [1-9]" "$work/probe.out" || fail "no file system found on $d"
    grep -q "^< fs $d .* ext4 /" "$work/probe.out" || fail "no ext4 fs line for $d"
    # 256 regions: w, cz, wcz, cd, cx cycled; cx (wrong digests) must differ, the rest be clean.
    [ "$(grep -c "^< write $d [0-9]* clean$" "$work/probe.out")" -ge 100 ] || fail "$d: too few clean writes"
    [ "$(grep -c "^< compare $d [0-9]* clean$" "$work/probe.out")" -ge 150 ] || fail "$d: too few clean compares"
    [ "$(grep -c "^< compare $d [0-9]* differs 16 0 0 0 " "$work/probe.out")" -ge 50 ] ||
        fail "$d: wrong digests did not differ (or differed oddly)"
    grep -q "^< refused $d [0-9]* not free in the guest's file system$" "$work/probe.out" ||
        fail "$d: a used region was not refused"
    grep -q "^< refused $d [0-9]* not aligned to 64 KiB$" "$work/probe.out" || fail "$d: unaligned not refused"
    grep -q "^< refused $d $(eval echo "\$$d") outside the device$" "$work/probe.out" ||
        fail "$d: a region past the end was not refused"
    done_line=$(grep "^< done $d " "$work/probe.out") || fail "no done line for $d"
    log "$d: ${done_line#< }"
done
! grep -E "^< (write [^ ]+ [0-9]+ foreign|error)" "$work/probe.out" || fail "foreign bytes or errors on a fresh workspace"
grep -q "^< end$" "$work/probe.out" || fail "no end line"
[ "$(sums)" = "$before" ] || fail "files written before the probe changed"
log "home.img allocated: $alloc_before bytes before the probe, $(alloc) after"
# Zeros go back as zeros the host can make a hole of again (fallocate PUNCH_HOLE on the device:
# WRITE_ZEROES that may unmap; BLKZEROOUT may not): every written region of the fresh home.img,
# which was a hole, is one again.
python3 - "$wsdir/home.img" "$work/probe.out" <<'PY' || fail "written regions of home.img are no longer holes"
import os, re, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
offs = [int(m.group(1)) for m in re.finditer(r"^< write vdb (\d+) ", open(sys.argv[2]).read(), re.M)]
def hole(off):
    try:
        return os.lseek(fd, off, os.SEEK_DATA) >= off + 65536
    except OSError:
        return True
bad = [o for o in offs if not hole(o)]
print(f"# home.img: {len(offs) - len(bad)}/{len(offs)} written regions are holes again", file=sys.stderr)
sys.exit(1 if bad or not offs else 0)
PY

# The guest's own deleted data stands in for another tenant's: a file's blocks, found as the free
# regions it took, read back through the probe once it is deleted (compare differs, marker hits,
# the write probe finds it past the first 4 KiB), and hold it still after (put back exactly).
mark=SLATE-RESIDUE-MARK
drive_vdb() { DEVS="vdb:$vdb" python3 "$drive" "$slate" --socket "$work/run/slated.sock" exec $ws --user root -i -- slate-guest --probe; }
N=0 FREE_OUT=$work/free1 drive_vdb >/dev/null || fail "the scan before the file failed"
s exec $ws -- sh -c "yes $mark | head -c 2000000 >~/residue; sync"
N=0 FREE_OUT=$work/free2 drive_vdb >/dev/null || fail "the scan with the file failed"
s exec $ws -- sh -c 'rm ~/residue; sync'
sort "$work/free1" >"$work/f1"
sort "$work/free2" >"$work/f2"
comm -23 "$work/f1" "$work/f2" >"$work/taken"
[ "$(wc -l <"$work/taken")" -ge 8 ] || fail "the file took only $(wc -l <"$work/taken") free regions"
for i in 1 2; do
    PICK=$work/taken MODES=wcz MARKER=$mark drive_vdb >"$work/residue$i.out" || fail "the residue probe failed"
    grep -E "^< (compare|write) " "$work/residue$i.out" >"$work/residue$i.lines" || true
done
hits=$(grep -c "^< compare vdb [0-9]* differs [0-9]* [0-9]* [0-9]* [1-9][0-9]* " "$work/residue1.out" || true)
whits=$(grep -c "^< write vdb [0-9]* foreign [0-9]* [0-9]* [1-9][0-9]* " "$work/residue1.out" || true)
log "residue: $(wc -l <"$work/taken") regions the file took: $hits compares and $whits writes found it with marker hits"
if [ "$hits" -lt 8 ] || [ "$whits" -lt 8 ]; then
    cat "$work/residue1.out"
    fail "the probe did not find the deleted file's bytes"
fi
cmp -s "$work/residue1.lines" "$work/residue2.lines" || fail "the deleted file's bytes changed across a probe"

# A malformed line: "error - ...", exit status 2, and /home thawed.
printf 'SLATE-PROBE 1\ndevice vdb %s\nscan\nregion vdb 0 x -\n' "$vdb" | probe >"$work/bad.out" 2>&1 && fail "a malformed line was accepted"
grep -q "^error - bad region mode$" "$work/bad.out" || fail "malformed: $(cat "$work/bad.out")"
timeout 30 "$slate" --socket "$work/run/slated.sock" exec $ws -- sh -c 'echo z >~/bad && sync' ||
    fail "/home still frozen after a malformed request"

# start_frozen: a probe of vdb that stops at ready, with /home frozen; sets ppid (the client) and
# waits until a write to /home in the guest is seen waiting.
start_frozen() {
    rm -f "$work/fifo" "$work/k.out"
    mkfifo "$work/fifo"
    probe <"$work/fifo" >"$work/k.out" 2>&1 &
    ppid=$!
    exec 7>"$work/fifo"
    printf 'SLATE-PROBE 1\ndevice vdb %s\nscan\n' "$vdb" >&7
    for _ in $(seq 600); do grep -q '^ready$' "$work/k.out" && break; sleep 0.1; done
    grep -q '^ready$' "$work/k.out" || fail "no ready: $(cat "$work/k.out")"
    # A new name each time: removing an old one would itself wait for the thaw.
    wn=$((wn + 1))
    [ "$(s exec $ws -- sh -c "(echo x >~/w$wn) >/dev/null 2>&1 & sleep 2; [ -e ~/w$wn ] && echo written || echo waiting")" = waiting ] ||
        fail "a write to /home went through while the probe held it frozen"
}
wn=0
# thawed_within WHAT: a write to /home succeeds within 30 s; logs how long it took.
thawed_within() {
    local t0=$SECONDS
    timeout 30 "$slate" --socket "$work/run/slated.sock" exec $ws -- sh -c 'echo y >~/after && sync' ||
        fail "/home still frozen 30 s after $1"
    log "$1: /home writable again after $((SECONDS - t0)) s"
}

# The client killed: the guest's exec service hangs the probe up; it thaws.
start_frozen
kill -9 "$ppid"
exec 7>&-
wait "$ppid" 2>/dev/null || true
thawed_within "the probe's client was killed"

# The probe SIGKILLed in the guest: its watchdog (in a session of its own) thaws.
start_frozen
# The probe is the --probe process whose parent is not one (the watchdog's is the probe).
# shellcheck disable=SC2016 # expanded by the guest's shell
# All found first: once the probe is gone, the watchdog's parent is no longer a probe either.
s exec --user root $ws -- sh -c 'k=; for p in /proc/[0-9]*; do
    grep -q -- "--prob[e]" $p/cmdline 2>/dev/null || continue
    pp=$(awk "{print \$4}" $p/stat); grep -q -- "--prob[e]" /proc/$pp/cmdline 2>/dev/null || k="$k ${p#/proc/}"
done; [ -n "$k" ] && kill -9 $k'
thawed_within "the probe was SIGKILLed in the guest"
exec 7>&-
wait "$ppid" 2>/dev/null || true
sleep 2
left=$(s exec --user root $ws -- sh -c 'grep -l -- "--prob[e]" /proc/[0-9]*/cmdline 2>/dev/null || true')
[ -z "$left" ] || fail "probe processes left in the guest: $left"

[ "$(sums)" = "$before" ] || fail "files written before the probes changed"
s stop $ws >/dev/null
e2fsck -fn "$wsdir/home.img" >"$work/fsck.out" 2>&1 || { cat "$work/fsck.out"; fail "home.img is not clean"; }
if grep -q "^< fs vda 0 $vda ext4 /$" "$work/probe.out"; then
    e2fsck -fn "$wsdir/disk.img" >"$work/fsck.out" 2>&1 || { cat "$work/fsck.out"; fail "disk.img is not clean"; }
fi
log "e2fsck -fn: clean"

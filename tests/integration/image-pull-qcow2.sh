#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# qcow2 catalog disks through the real daemon and client, from a signed catalog served on
# 127.0.0.1 (firmware boot: no kernel, no libvirt, no VM). Good images (compressed clusters, zlib
# and zstd, version 2 and 3) are converted to exactly their raw bytes. Then the images a signed
# catalog must never be able to use to read the host (doc/security.md, "Catalog"): an external data file naming a
# host file full of a marker, one naming slated's own master key, the external-data bit without
# the name, a backing file, an unknown incompatible feature, encryption, a truncated header and
# a header extension running past the cluster. Each pull fails with an error naming what was
# refused, installs nothing, leaves no staging directory, and neither the marker nor the master
# key's bytes appear anywhere in the state directory. Run through tests/integration/run-one.
# shellcheck disable=SC2154
set -euo pipefail

command -v python3 >/dev/null || skip "python3 not found (apt-get install python3)"
command -v qemu-img >/dev/null || skip "qemu-img not found (apt-get install qemu-utils)"
command -v qemu-io >/dev/null || skip "qemu-io not found (apt-get install qemu-utils)"

catalog_test_setup
on_exit stop_slated

# craft IN OUT EDIT [ARG]: a copy of qcow2 IN with its header edited by hand, where qemu-img
# cannot make the file (doc: QEMU's docs/interop/qcow2.txt; numbers are big-endian).
craft() {
    python3 - "$@" <<'PY'
import struct, sys
src, dst, edit = sys.argv[1:4]
arg = sys.argv[4] if len(sys.argv) > 4 else None
b = bytearray(open(src, "rb").read())
hlen = struct.unpack_from(">I", b, 100)[0]
cluster = 1 << struct.unpack_from(">I", b, 20)[0]
def extensions():
    off, out = hlen, []
    while True:
        t, n = struct.unpack_from(">II", b, off)
        if t == 0:
            return out
        out.append((t, bytes(b[off + 8:off + 8 + n])))
        off += 8 + ((n + 7) & ~7)
def write_extensions(exts):
    area = b"".join(struct.pack(">II", t, len(d)) + d + b"\0" * (-len(d) % 8) for t, d in exts)
    area += b"\0" * 8
    b[hlen:hlen + len(area)] = area
if edit == "data-file-name":      # the external data file now names arg
    write_extensions([(t, arg.encode() if t == 0x44415441 else d) for t, d in extensions()])
elif edit == "drop-data-file-name":  # the bit stays, the name goes
    write_extensions([(t, d) for t, d in extensions() if t != 0x44415441])
elif edit == "incompatible":      # set incompatible feature bit arg
    v = struct.unpack_from(">Q", b, 72)[0] | (1 << int(arg))
    struct.pack_into(">Q", b, 72, v)
elif edit == "truncate":          # keep the first arg bytes
    del b[int(arg):]
elif edit == "extension-past-cluster":  # an unknown extension claiming the rest of the cluster
    exts = extensions()
    off = hlen + sum(8 + ((len(d) + 7) & ~7) for _, d in exts)
    struct.pack_into(">II", b, off, 0x12345678, cluster - off)
else:
    sys.exit("unknown edit " + edit)
open(dst, "wb").write(b)
PY
}

# ---- the artifacts ----
# A host file that must never reach an image: 1 MiB of a marker no image holds.
marker=SLATE-HOST-SECRET-$$-$RANDOM
python3 -c 'import sys; m = (sys.argv[1] + "\n").encode(); open(sys.argv[2], "wb").write((m * (1048576 // len(m) + 1))[:1048576])' \
    "$marker" "$work/host-secret"
# The good image's raw bytes: patterns and holes, some compressible.
truncate -s 8M "$work/good.raw"
qemu-io -f raw -c 'write -P 0x5a 0 1M' -c 'write -P 0xa5 3M 64k' -c 'write -P 0x11 7M 4k' \
    "$work/good.raw" >/dev/null
qemu-img convert -q -c -f raw -O qcow2 "$work/good.raw" "$srv/good.qcow2"
qemu-img convert -q -c -f raw -O qcow2 -o compression_type=zstd "$work/good.raw" "$srv/zstd.qcow2"
qemu-img convert -q -f raw -O qcow2 -o compat=0.10 "$work/good.raw" "$srv/v2.qcow2"

# An external data file that names the host secret. qemu-img create writes the data file (it
# would wipe a real secret), so it makes a scratch one and the name is changed afterwards.
qemu-img create -q -f qcow2 -o data_file="$work/scratch.data",data_file_raw=on "$work/df.qcow2" 1M
craft "$work/df.qcow2" "$srv/datafile.qcow2" data-file-name "$work/host-secret"
# The same, naming this daemon's own master key (made when slated starts, below).
mnt=$(make_loop_fs btrfs pullq 1G)
craft "$work/df.qcow2" "$srv/masterkey.qcow2" data-file-name "$mnt/state/install/master.key"
# The data file bit without the name (qemu-img would ask for a data-file option).
craft "$work/df.qcow2" "$srv/datafile-bit.qcow2" drop-data-file-name
# A backing file: the host secret as a raw backing image.
qemu-img create -q -f qcow2 -b "$work/host-secret" -F raw "$srv/backing.qcow2" 1M
# An incompatible feature no implementation knows (bit 7).
craft "$srv/good.qcow2" "$srv/unknown-bit.qcow2" incompatible 7
# The dirty bit: refcounts to repair, i.e. a write to the image before use.
craft "$srv/good.qcow2" "$srv/dirty.qcow2" incompatible 0
# LUKS encryption.
qemu-img create -q -f qcow2 --object secret,id=sec0,data=slate-test \
    -o encrypt.format=luks,encrypt.key-secret=sec0 "$srv/encrypted.qcow2" 1M
# A file shorter than its header, and an extension running past the first cluster.
craft "$srv/good.qcow2" "$srv/truncated.qcow2" truncate 90
craft "$srv/good.qcow2" "$srv/badext.qcow2" extension-past-cluster

# image_entry ID FILE: a firmware-booted image whose disk is $srv/FILE, uncompressed qcow2.
image_entry() {
    local f=$srv/$2
    cat <<EOF2
    {
      "id": "$1", "version": 1, "description": "qcow2 test image $1",
      "disk": {"url": "$2", "size": $(size "$f"), "uncompressedSize": $(size "$f"),
               "sha256": "$(sha "$f")", "compression": "none", "format": "qcow2"},
      "boot": {"type": "firmware"}
    }
EOF2
}
refused=(datafile masterkey datafile-bit backing unknown-bit dirty encrypted truncated badext)
entries=()
for id in good zstd v2 "${refused[@]}"; do
    e=$(image_entry "$id" "$id.qcow2")
    entries+=("$e")
done
write_catalog "$srv/stable.json" 1 2099-01-01T00:00:00Z "${entries[@]}"
"$sc" keygen "$work/pub.secret" "$work/keys/publisher.pub" >/dev/null
"$sc" sign --key "$work/pub.secret" --channel stable "$srv/stable.json" >/dev/null

python3 "$top_srcdir/tests/unit/fetch-server.py" "$srv" "$work/port" "$work/requests.log" &
server_pid=$!
wait_file "$work/port" "$server_pid"
url=http://127.0.0.1:$(cat "$work/port")

cat >"$work/slate.conf" <<EOF2
trusted-keys = $work/keys
channel = stable
EOF2
state=$mnt/state
start_slated -- --config "$work/slate.conf"
[ -s "$mnt/state/install/master.key" ] || fail "slated made no master key at $mnt/state/install/master.key"

s catalog update --from "$url/stable.json" | grep -q "catalog stable version 1" ||
    fail "catalog update: $(s catalog update --from "$url/stable.json" 2>&1)"

# ---- good images: the raw bytes, exactly ----
for id in good zstd v2; do
    s image pull "$id" --yes >"$work/pull.out" 2>"$work/pull.err" ||
        fail "pull $id: $(cat "$work/pull.err"; tail -5 "$work/slated.log")"
    cmp "$mnt/state/images/$id/disk.img" "$work/good.raw" || fail "$id: the converted disk differs from its raw bytes"
    s image verify "$id" 2>/dev/null | grep -q "^$id: OK" || fail "verify $id: $(s image verify "$id" 2>&1)"
done

# ---- refused images ----
expect_refused() { # ID PATTERN
    expect_fail 1 "$2" s image pull "$1" --yes
    grep -q "qcow2 disk refused" "$work/err" || fail "pull $1: not refused by the header check: $(cat "$work/err")"
    [ ! -e "$mnt/state/images/$1" ] || fail "refused image $1 was installed"
}
expect_refused datafile "external data file (\"$work/host-secret\")"
expect_refused masterkey "external data file (\"$mnt/state/install/master.key\")"
expect_refused datafile-bit "external data file (incompatible feature bit 2)"
expect_refused backing "backing file"
expect_refused unknown-bit "unknown incompatible feature bits 0x80"
expect_refused dirty "marked dirty"
expect_refused encrypted "encrypted"
expect_refused truncated "shorter than"
expect_refused badext "past the end of the first cluster"
ls -A "$mnt/state/images" | grep -q "^\.tmp-" && fail "a staging directory was left behind: $(ls -A "$mnt/state/images")"

# Neither the marker nor the master key is anywhere below the state directory (the master key
# itself excepted), and no file under it was made from a refused disk.
python3 - "$mnt/state" "$marker" "$mnt/state/install/master.key" <<'PY' || fail "a host secret reached the state directory"
import os, sys
state, marker, keyfile = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
key = open(keyfile, "rb").read()
bad = []
for root, dirs, files in os.walk(state):
    for name in files:
        p = os.path.join(root, name)
        if p == keyfile or not os.path.isfile(p) or os.path.islink(p):
            continue
        with open(p, "rb") as f:
            tail = b""
            while True:
                block = f.read(1 << 20)
                if not block:
                    break
                window = tail + block  # a secret across two reads is found too
                if marker in window or (len(key) >= 16 and key in window):
                    bad.append(p)
                    break
                tail = window[-max(len(marker), len(key)):]
if bad:
    sys.exit("found in: " + ", ".join(bad))
PY
stop_slated
stop_bg server_pid

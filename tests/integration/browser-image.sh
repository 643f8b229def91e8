#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The browser image (issue 24, images/browser/README.md) as an ordinary kernel-boot image under
# TCG: a workspace of it (1 GiB, 1 vCPU, cold boot) starts; chromium-headless-shell started
# through `slate exec` as the workspace user answers DevTools' /json/version on 127.0.0.1:9223
# (9222 is slate-guest's cdp listener) inside the guest within 120 s, as HeadlessChrome; a
# --screenshot of a red page is a PNG whose every pixel is red, decoded on the host. Logs the cold
# start, exec-to-CDP-ready and screenshot times. Skips when the image cannot be built here (no
# network or apt, not Debian amd64);
# SLATE_TEST_BROWSER_IMAGE_DIR names a prebuilt one.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

# Cold boots only: the times logged are a cold boot's (the image gets no booted snapshot).
# shellcheck disable=SC2034 # lib.sh reads them
SLATE_TEST_SNAPSHOTS='' SLATE_TEST_BOOT_SNAPSHOTS=off

ensure_libvirt

if [ -n "${SLATE_TEST_BROWSER_IMAGE_DIR:-}" ]; then
    browser_dir=$SLATE_TEST_BROWSER_IMAGE_DIR
else
    browser_dir=$top_builddir/images/browser/out
    log "make browser-image"
    if ! make -s -C "$top_builddir" browser-image >"$test_tmpdir/browser-image.log" 2>&1; then
        sed 's/^/#   /' "$test_tmpdir/browser-image.log" | tail -n 20
        # What a host without the network, apt or Debian's amd64 packages says: skip. Anything
        # else is a broken recipe: fail.
        if grep -qE "apt-get (download .*|update) failed|apt's package lists are missing|not found: apt-get install|amd64 hosts only|unknown Debian package|apt knows no installable version" \
            "$test_tmpdir/browser-image.log"; then
            skip "the browser image cannot be built here (see above)"
        fi
        fail "make browser-image failed"
    fi
    grep '^build: wrote\|up to date' "$test_tmpdir/browser-image.log" | sed 's/^/#   /' >&2 || true
fi
for f in disk.img vmlinuz initrd.img; do
    [ -f "$browser_dir/$f" ] || fail "$browser_dir/$f is missing"
done

ws=br$$
on_exit destroy_domains "slate-$ws"
on_exit stop_slated

mnt=$(make_loop_fs btrfs browser 3G)
# shellcheck disable=SC2034 # start_slated reads it
state=$mnt/state
start_slated
s image import browser "$browser_dir/disk.img" --kernel "$browser_dir/vmlinuz" \
    --initrd "$browser_dir/initrd.img" --cmdline "console=ttyS0" >/dev/null ||
    fail "importing the browser image"
s create $ws --image browser --memory 1024 --cpus 1 --home-size 512M >/dev/null
t0=$(date +%s%N)
s start $ws >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"
t1=$(date +%s%N)
ms() { echo "$((($2 - $1) / 1000000))"; }
log "cold start to slate-guest ready: $(ms "$t0" "$t1") ms"
[ "$(s exec $ws -- sed -n 's/^ID=//p' /etc/os-release)" = slate-browser ] ||
    fail "the guest is not the browser image: $(s exec $ws -- cat /etc/os-release)"
[ "$(s exec $ws -- id -u)" = 1000 ] || fail "exec does not run as the workspace user"

# Chromium in a session of its own (the exec's process group is hung up when it ends), its
# output in /tmp; then the guest polls DevTools every 0.1 s and says how long it took on its
# own clock.
t0=$(date +%s%N)
s exec $ws -- sh -c 'setsid chromium-headless-shell --no-sandbox --user-data-dir=/tmp/p \
    --remote-debugging-port=9223 about:blank </dev/null >/tmp/chromium.log 2>&1 &' ||
    fail "starting chromium-headless-shell"
# shellcheck disable=SC2016 # expanded by the guest's shell
s exec --timeout 150 $ws -- sh -c '
    read -r a _ </proc/uptime
    i=0
    until curl -s http://127.0.0.1:9223/json/version >/tmp/version.json; do
        i=$((i + 1))
        [ "$i" -lt 1200 ] || exit 3
        sleep 0.1
    done
    read -r b _ </proc/uptime
    echo "$a $b"' >"$work/poll.out" 2>"$work/err" || {
    s exec $ws -- tail -n 20 /tmp/chromium.log >&2 || true
    fail "DevTools did not answer on 127.0.0.1:9223 within 120 s: $(cat "$work/err")"
}
t1=$(date +%s%N)
read -r a b <"$work/poll.out"
log "exec to CDP-ready: $(ms "$t0" "$t1") ms on the host, $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b - a }') s of polling in the guest"
s exec $ws -- cat /tmp/version.json >"$work/version.json"
grep -q '"Browser": "HeadlessChrome/' "$work/version.json" ||
    fail "/json/version does not say HeadlessChrome: $(cat "$work/version.json")"
grep -q '"webSocketDebuggerUrl": "ws://127.0.0.1:9223/devtools/browser/' "$work/version.json" ||
    fail "/json/version has no ws://127.0.0.1:9223 debugger URL: $(cat "$work/version.json")"
log "$(grep '"Browser"' "$work/version.json" | tr -s ' ')"
log "guest memory with Chromium running: $(s exec $ws -- sh -c 'grep -E "MemTotal|MemAvailable" /proc/meminfo | tr -s " " | paste -sd " "')"

# A screenshot of a red page, by a second Chromium, copied out and decoded here.
t0=$(date +%s%N)
s exec --timeout 120 $ws -- chromium-headless-shell --no-sandbox --screenshot=/tmp/s.png \
    --window-size=200,100 'data:text/html,<body style="background:rgb(255,0,0)">' \
    >"$work/shot.log" 2>&1 || fail "the screenshot failed: $(tail -n 5 "$work/shot.log")"
t1=$(date +%s%N)
log "screenshot: $(ms "$t0" "$t1") ms"
s cp $ws:/tmp/s.png "$work/s.png" 2>"$work/err" || fail "cp ws:/tmp/s.png: $(cat "$work/err")"
python3 - "$work/s.png" <<'EOF' || fail "the screenshot is not a red 200x100 page"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    sys.exit("not a PNG")
pos, idat, ihdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        ihdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
w, h, depth, ctype, _, _, interlace = ihdr
bpp = {2: 3, 6: 4}.get(ctype)
if depth != 8 or bpp is None or interlace:
    sys.exit(f"unsupported PNG: depth {depth}, colour type {ctype}, interlace {interlace}")
raw, stride = zlib.decompress(idat), w * bpp
prev, rows, i = bytearray(stride), [], 0
for _ in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        if f == 1:
            line[x] = (line[x] + a) & 255
        elif f == 2:
            line[x] = (line[x] + b) & 255
        elif f == 3:
            line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line)
    prev = line
red = sum(1 for r in rows for x in range(0, stride, bpp)
          if r[x] >= 250 and r[x + 1] <= 5 and r[x + 2] <= 5)
print(f"# screenshot {w}x{h}, colour type {ctype}: {red} of {w * h} pixels red", file=sys.stderr)
sys.exit(0 if (w, h) == (200, 100) and red == w * h else 1)
EOF

s stop $ws >/dev/null 2>&1 || true
s rm --yes $ws >/dev/null || fail "rm $ws"

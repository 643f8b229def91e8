#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Drives `slate-guest --probe` (doc/residue.md, "The guest side of the protocol") the way slated
will: the request, the scan, then regions picked from the free lists the guest printed, then end.

  probe-guest.py COMMAND...   (COMMAND runs slate-guest --probe, e.g. through slate exec)

Environment: DEVS="vda:SIZE vdb:SIZE", N (regions per device, default 8), MARKER (text), MODES
(comma-separated, cycled: w, cz = c zero, wcz = wc zero, cd = c against the digests of zeros,
cx = c against wrong digests), REFUSE=1 to add per device three regions the guest must refuse
(one in use, one unaligned, one past the end), FREE_OUT=FILE to write the free regions the guest
listed ("DEV OFFSET" lines), PICK=FILE to probe the regions such a file names instead of spreading
N over the free ones. Prints every line the guest sends but the free
lines, with "< " in front; exits with the command's status."""
import hashlib
import os
import subprocess
import sys
import time

R = 65536
devs = [d.split(":") for d in os.environ["DEVS"].split()]
n = int(os.environ.get("N", "8"))
marker = os.environ.get("MARKER", "")
modes = os.environ.get("MODES", "w,cz,wcz,cd,cx").split(",")

p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
req = "SLATE-PROBE 1\n" + "".join(f"device {a} {b}\n" for a, b in devs)
if marker:
    req += "marker " + marker.encode().hex() + "\n"
p.stdin.write(req + "scan\n")
p.stdin.flush()
t0 = time.time()
free = {a: [] for a, _ in devs}
while True:
    line = p.stdout.readline()
    if not line:
        print("# no ready line", flush=True)
        sys.exit(p.wait() or 1)
    line = line.rstrip("\n")
    t = line.split()
    if t[0] == "free":
        s, ln = int(t[2]), int(t[3])
        a = (s + R - 1) // R * R
        while a + R <= s + ln:
            free[t[1]].append(a)
            a += R
    else:
        print("<", line, flush=True)
    if line == "ready":
        break
print(f"# scanned and frozen in {time.time() - t0:.2f}s", flush=True)

if os.environ.get("FREE_OUT"):
    with open(os.environ["FREE_OUT"], "w") as out:
        for a, _ in devs:
            out.writelines(f"{a} {o}\n" for o in free[a])
picked = {a: [] for a, _ in devs}
if os.environ.get("PICK"):
    for line in open(os.environ["PICK"]):
        a, o = line.split()
        picked[a].append(int(o))

zero_digest = hashlib.sha256(bytes(4096)).hexdigest()
args = {"w": "w -", "cz": "c zero", "wcz": "wc zero", "cd": "c " + zero_digest * 16,
        "cx": "c " + "ab" * 32 * 16}
lines = []
for a, size in devs:
    f = free[a]
    print(f"# {a}: {len(f)} free regions", flush=True)
    offs = picked[a] if os.environ.get("PICK") else [f[i * len(f) // n] for i in range(min(n, len(f)))]
    for i, off in enumerate(offs):
        lines.append(f"region {a} {off} {args[modes[i % len(modes)]]}")
    if os.environ.get("REFUSE") and f:
        fs = set(f)
        used = next(o for o in range(0, int(size), R) if o not in fs)
        lines += [f"region {a} {used} w -", f"region {a} {f[0] + 4096} w -",
                  f"region {a} {int(size)} c zero"]
t0 = time.time()
p.stdin.write("".join(x + "\n" for x in lines) + "end\n")
p.stdin.flush()
for line in p.stdout:
    print("<", line.rstrip("\n"), flush=True)
rc = p.wait()
print(f"# {len(lines)} regions answered in {time.time() - t0:.2f}s, status {rc}", flush=True)
sys.exit(rc)

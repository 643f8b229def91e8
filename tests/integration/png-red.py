#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""png-red.py FILE MIN_FRACTION [W H]: exits 0 when FILE is a PNG (8-bit RGB or RGBA, not
interlaced) at least MIN_FRACTION of whose pixels are pure red (and W x H when given). Decoded
here with zlib: the tests need no imaging package."""
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
want = float(sys.argv[2])
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
if len(sys.argv) > 4 and (w, h) != (int(sys.argv[3]), int(sys.argv[4])):
    sys.exit(f"the PNG is {w}x{h}, not {sys.argv[3]}x{sys.argv[4]}")
sys.exit(0 if red >= want * w * h else 1)

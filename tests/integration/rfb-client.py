#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A small RFB (VNC) client for the browser view's tests (doc/browser.md, "Watching and taking
over"): RFB 3.8, security type None, ClientInit shared, ServerInit, SetPixelFormat 32 bpp true
colour, SetEncodings Raw only, FramebufferUpdateRequest, Raw rectangles read into a framebuffer.

  rfb-client.py SOCKET connect                 connects only: prints "ok", or the errno's name
                                               (exit 3 for EACCES, 4 for another error)
  rfb-client.py SOCKET expect COLOUR [click COLOUR] [key KEYSYM COLOUR]
        reads the framebuffer until most of it (90 %) is COLOUR (red, green, blue); then click
        sends a left click in its middle, key a press and release of KEYSYM (0xff0d: Return),
        each followed by reading on until most of the framebuffer is the colour named after it.
        Prints each stage's shares of the colours; exit 1 when a stage times out.
"""
import errno
import os
import socket
import struct
import sys
import time

TIMEOUT_S = float(os.environ.get("RFB_TIMEOUT", "60"))


def recvn(s, n):
    b = bytearray()
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise EOFError(f"the server closed after {len(b)} of {n} bytes")
        b += k
    return bytes(b)


class Client:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(TIMEOUT_S)
        self.s.connect(path)

    def handshake(self):
        s = self.s
        ver = recvn(s, 12)
        if not ver.startswith(b"RFB 003."):
            raise RuntimeError(f"not an RFB server: {ver!r}")
        s.sendall(b"RFB 003.008\n")
        n = recvn(s, 1)[0]
        if n == 0:
            (ln,) = struct.unpack(">I", recvn(s, 4))
            raise RuntimeError(f"refused: {recvn(s, ln)!r}")
        types = recvn(s, n)
        if 1 not in types:
            raise RuntimeError(f"no security type None among {list(types)}")
        s.sendall(bytes([1]))
        (result,) = struct.unpack(">I", recvn(s, 4))
        if result != 0:
            raise RuntimeError(f"SecurityResult {result}")
        s.sendall(bytes([1]))  # ClientInit: shared
        self.w, self.h = struct.unpack(">HH", recvn(s, 4))
        recvn(s, 16)  # the server's pixel format: we set ours
        (ln,) = struct.unpack(">I", recvn(s, 4))
        self.name = recvn(s, ln).decode(errors="replace")
        # SetPixelFormat: 32 bpp, depth 24, little-endian, true colour, 8 bits a channel,
        # red at bit 16, green at 8, blue at 0 (bytes B, G, R, X).
        s.sendall(struct.pack(">B3xBBBBHHHBBB3x", 0, 32, 24, 0, 1, 255, 255, 255, 16, 8, 0))
        s.sendall(struct.pack(">BxHi", 2, 1, 0))  # SetEncodings: Raw only
        self.fb = bytearray(self.w * self.h * 4)

    def request(self, incremental):
        self.s.sendall(struct.pack(">BBHHHH", 3, 1 if incremental else 0, 0, 0, self.w, self.h))

    def read_update(self):
        """Reads server messages until one FramebufferUpdate is applied."""
        s = self.s
        while True:
            t = recvn(s, 1)[0]
            if t == 0:
                (n,) = struct.unpack(">xH", recvn(s, 3))
                for _ in range(n):
                    x, y, w, h, enc = struct.unpack(">HHHHi", recvn(s, 12))
                    if enc != 0:
                        raise RuntimeError(f"a rectangle in encoding {enc}, not Raw")
                    data = recvn(s, w * h * 4)
                    for row in range(h):
                        o = ((y + row) * self.w + x) * 4
                        self.fb[o:o + w * 4] = data[row * w * 4:(row + 1) * w * 4]
                return
            if t == 2:  # Bell
                continue
            if t == 3:  # ServerCutText
                (ln,) = struct.unpack(">3xI", recvn(s, 7))
                recvn(s, ln)
                continue
            if t == 1:  # SetColourMapEntries: not in true colour
                raise RuntimeError("a colour map in true colour")
            raise RuntimeError(f"server message type {t}")

    def shares(self):
        count = {"red": 0, "green": 0, "blue": 0}
        fb = self.fb
        n = self.w * self.h
        for i in range(0, n * 4, 4):
            b, g, r = fb[i], fb[i + 1], fb[i + 2]
            if r > 190 and g < 70 and b < 70:
                count["red"] += 1
            elif g > 150 and r < 70 and b < 70:
                count["green"] += 1
            elif b > 190 and r < 70 and g < 70:
                count["blue"] += 1
        return {k: v / n for k, v in count.items()}

    def wait_for(self, colour, incremental=False):
        deadline = time.monotonic() + TIMEOUT_S
        self.request(incremental)
        while True:
            self.read_update()
            sh = self.shares()
            text = ", ".join(f"{k} {v:.3f}" for k, v in sh.items())
            if sh[colour] >= 0.9:
                return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {colour} frame: {text}")
            self.request(True)

    def key(self, keysym):
        self.s.sendall(struct.pack(">BBxxI", 4, 1, keysym))
        self.s.sendall(struct.pack(">BBxxI", 4, 0, keysym))

    def click(self, x, y):
        self.s.sendall(struct.pack(">BBHH", 5, 0, x, y))  # move there first
        self.s.sendall(struct.pack(">BBHH", 5, 1, x, y))  # left down
        self.s.sendall(struct.pack(">BBHH", 5, 0, x, y))  # and up


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, cmd = sys.argv[1], sys.argv[2]
    try:
        c = Client(path)
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e)))
        sys.exit(3 if e.errno == errno.EACCES else 4)
    if cmd == "connect":
        print("ok")
        return
    args = sys.argv[3:]
    if cmd != "expect" or not args:
        sys.exit(__doc__)
    c.handshake()
    try:
        colour = args.pop(0)
        print(f"{c.w}x{c.h} '{c.name}': {colour} ({c.wait_for(colour)})")
        while args:
            action = args.pop(0)
            if action == "click" and args:
                c.click(c.w // 2, c.h // 2)
                what = "a click"
            elif action == "key" and len(args) >= 2:
                keysym = int(args.pop(0), 0)
                c.key(keysym)
                what = f"key {keysym:#x}"
            else:
                sys.exit(__doc__)
            colour = args.pop(0)
            print(f"after {what}: {colour} ({c.wait_for(colour, True)})")
    except TimeoutError as e:
        print(f"FAIL: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()

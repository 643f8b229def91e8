#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A small Chrome DevTools Protocol client for the browser VM tests (tests/integration/browser.sh).

Every connection to DevTools is a new run of the transport command given after "--", whose
stdin/stdout are the TCP stream: e.g. `slate exec -i WS -- nc 127.0.0.1 9222`, so the bytes leave
from inside the workspace's guest, as an agent's Playwright would. Plain HTTP for /json/*, then a
WebSocket (RFC 6455, written here: the test needs no package) for the page's CDP session.

    cdp-client.py version -- CMD...             prints /json/version
    cdp-client.py navigate URL -- CMD...        navigates the first page, prints its title
    cdp-client.py set-cookie URL NAME VALUE -- CMD...  sets a persistent cookie for URL
    cdp-client.py cookies URL -- CMD...         prints the cookies of URL as NAME=VALUE lines
    cdp-client.py eval EXPR -- CMD...           prints the value of EXPR in the first page
"""

import base64
import json
import os
import select
import struct
import subprocess
import sys
import time

TIMEOUT = float(os.environ.get("CDP_TIMEOUT", "120"))


class Conn:
    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.buf = b""

    def send(self, data):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("DevTools did not answer in time")
        r, _, _ = select.select([self.p.stdout], [], [], left)
        if not r:
            raise TimeoutError("DevTools did not answer in time")
        chunk = os.read(self.p.stdout.fileno(), 65536)
        if not chunk:
            raise EOFError("the connection ended")
        self.buf += chunk

    def read_until(self, sep, deadline):
        while sep not in self.buf:
            self._fill(deadline)
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_n(self, n, deadline):
        while len(self.buf) < n:
            self._fill(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_all(self, deadline):
        try:
            while True:
                self._fill(deadline)
        except EOFError:
            pass
        out, self.buf = self.buf, b""
        return out

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def http(cmd, method, path):
    c = Conn(cmd)
    deadline = time.monotonic() + TIMEOUT
    c.send(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:9222\r\nConnection: close\r\n\r\n".encode())
    head = c.read_until(b"\r\n\r\n", deadline).decode("latin-1")
    status = int(head.split(" ", 2)[1])
    length = None
    for line in head.split("\r\n")[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    body = c.read_n(length, deadline) if length is not None else c.read_all(deadline)
    c.close()
    if status != 200:
        sys.exit(f"{method} {path}: HTTP {status}: {body[:200]!r}")
    return json.loads(body)


class WebSocket:
    def __init__(self, cmd, path):
        self.c = Conn(cmd)
        key = base64.b64encode(os.urandom(16)).decode()
        self.c.send(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:9222\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = self.c.read_until(b"\r\n\r\n", time.monotonic() + TIMEOUT).decode("latin-1")
        if " 101 " not in head.split("\r\n")[0]:
            sys.exit(f"WebSocket upgrade refused: {head!r}")
        self.next_id = 0

    def send_text(self, text):
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            hdr = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.c.send(hdr + mask + masked)

    def recv_message(self, deadline):
        data = b""
        while True:
            b0, b1 = self.c.read_n(2, deadline)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self.c.read_n(2, deadline))[0]
            elif n == 127:
                n = struct.unpack("!Q", self.c.read_n(8, deadline))[0]
            mask = self.c.read_n(4, deadline) if b1 & 0x80 else None
            payload = self.c.read_n(n, deadline)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            op = b0 & 0x0F
            if op == 8:
                raise EOFError("DevTools closed the WebSocket")
            if op in (9, 10):
                continue
            data += payload
            if b0 & 0x80:
                return json.loads(data)

    def call(self, method, params=None, wait_event=None):
        self.next_id += 1
        mid = self.next_id
        self.send_text(json.dumps({"id": mid, "method": method, "params": params or {}}))
        deadline = time.monotonic() + TIMEOUT
        result = None
        seen_event = wait_event is None
        while result is None or not seen_event:
            m = self.recv_message(deadline)
            if m.get("id") == mid:
                if "error" in m:
                    sys.exit(f"{method}: {m['error']}")
                result = m.get("result", {})
            elif wait_event and m.get("method") == wait_event:
                seen_event = True
        return result

    def close(self):
        self.c.close()


def first_page(cmd):
    for t in http(cmd, "GET", "/json/list"):
        if t.get("type") == "page":
            url = t["webSocketDebuggerUrl"]
            return url[url.index("/devtools/"):]
    t = http(cmd, "PUT", "/json/new?about:blank")
    url = t["webSocketDebuggerUrl"]
    return url[url.index("/devtools/"):]


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    i = sys.argv.index("--")
    args, cmd = sys.argv[1:i], sys.argv[i + 1 :]
    if not args or not cmd:
        sys.exit(__doc__)
    op = args[0]
    if op == "version":
        print(json.dumps(http(cmd, "GET", "/json/version")))
        return
    ws = WebSocket(cmd, first_page(cmd))
    try:
        if op == "navigate":
            ws.call("Page.enable")
            ws.call("Page.navigate", {"url": args[1]}, wait_event="Page.loadEventFired")
            r = ws.call("Runtime.evaluate", {"expression": "document.title", "returnByValue": True})
            print(r["result"].get("value", ""))
        elif op == "eval":
            r = ws.call("Runtime.evaluate", {"expression": args[1], "returnByValue": True})
            print(r["result"].get("value", ""))
        elif op == "set-cookie":
            ws.call("Network.enable")
            r = ws.call(
                "Network.setCookie",
                {
                    "url": args[1],
                    "name": args[2],
                    "value": args[3],
                    "expires": time.time() + 30 * 24 * 3600,
                },
            )
            if not r.get("success", True):
                sys.exit("Network.setCookie refused the cookie")
        elif op == "cookies":
            ws.call("Network.enable")
            r = ws.call("Network.getCookies", {"urls": [args[1]]})
            for ck in r.get("cookies", []):
                print(f"{ck['name']}={ck['value']}")
        else:
            sys.exit(f"unknown operation {op}")
    finally:
        ws.close()


if __name__ == "__main__":
    main()

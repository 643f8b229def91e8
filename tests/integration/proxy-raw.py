#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A client that says exactly the bytes a test wants to the egress proxy on 127.0.0.1:PORT.

  send PORT PAYLOAD            PAYLOAD with Python escapes (\\r\\n, \\x00); prints the status code
                               of the answer, or "closed" when the proxy closed without one
  slow PORT URL                a request sent one byte per second, until killed
  chunks PORT URL C1 C2 ...    POST URL with a chunked body, one chunk per argument, each sent
                               in its own write 0.2 s apart; prints the status code
  bigbody PORT URL SIZE AT TOKEN   POST with Content-Length SIZE ('a's) and TOKEN at offset AT,
                               sent in 64 KiB writes; prints the status code or "closed"
  tunnel PORT HOST:PORT DATA   CONNECT, read the 200 and the peer's greeting, send DATA, print
                               "echoed" when it came back, "closed" when the proxy cut it
  ws PORT HOST CAFILE          CONNECT HOST:443, TLS (verifying with CAFILE), GET /ws upgrade;
                               prints the status code, then "echoed" when raw bytes echo back
  tls PORT CONNECT SNI CAFILE  CONNECT to CONNECT, TLS handshake with server name SNI; prints
                               "handshake-ok" or "handshake-failed"
"""
import socket
import ssl
import sys
import time


def unescape(s):
    return s.encode("latin-1").decode("unicode_escape").encode("latin-1")


def connect(port):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=20)
    return s


def status_of(sock):
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    if not data.startswith(b"HTTP/1."):
        return "closed"
    return data.split(b" ", 2)[1].decode()


def read_head(sock):
    """Reads one response head byte by byte, so nothing after it is taken."""
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


def main():
    cmd = sys.argv[1]
    if cmd == "send":
        s = connect(sys.argv[2])
        s.sendall(unescape(sys.argv[3]))
        print(status_of(s))
    elif cmd == "slow":
        s = connect(sys.argv[2])
        host = sys.argv[3].split("/")[2]
        req = ("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (sys.argv[3], host)).encode()
        for b in req:
            s.sendall(bytes([b]))
            time.sleep(1)
    elif cmd == "chunks":
        s = connect(sys.argv[2])
        url = sys.argv[3]
        host = url.split("/")[2]
        s.sendall(("POST %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
                   % (url, host)).encode())
        for c in sys.argv[4:]:
            time.sleep(0.2)
            s.sendall(b"%x\r\n%s\r\n" % (len(c), c.encode()))
        time.sleep(0.2)
        s.sendall(b"0\r\n\r\n")
        print(status_of(s))
    elif cmd == "bigbody":
        s = connect(sys.argv[2])
        url, size, at, token = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
        host = url.split("/")[2]
        body = bytearray(b"a" * size)
        body[at:at + len(token)] = token.encode()
        s.sendall(("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n"
                   % (url, host, size)).encode())
        try:
            for i in range(0, size, 65536):
                s.sendall(body[i:i + 65536])
        except (BrokenPipeError, ConnectionResetError):
            pass
        print(status_of(s))
    elif cmd == "tunnel":
        s = connect(sys.argv[2])
        target = sys.argv[3]
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
        head = read_head(s)
        if b" 200 " not in head.split(b"\r\n")[0]:
            print("refused " + head.split(b"\r\n")[0].decode())
            return
        greeting = b""
        while len(greeting) < 6:
            chunk = s.recv(6 - len(greeting))
            if not chunk:
                break
            greeting += chunk
        if greeting != b"hello\n":
            print("no greeting")
            return
        data = sys.argv[4].encode()
        try:
            s.sendall(data)
            got = b""
            while len(got) < len(data):
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except (ConnectionResetError, BrokenPipeError):
            got = b""
        print("echoed" if got == data else "closed")
    elif cmd == "ws":
        s = connect(sys.argv[2])
        host = sys.argv[3]
        s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host)).encode())
        read_head(s)
        ctx = ssl.create_default_context(cafile=sys.argv[4])
        t = ctx.wrap_socket(s, server_hostname=host)
        t.sendall(("GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                   "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "\r\n" % host).encode())
        head = read_head(t)
        print(head.split(b" ", 2)[1].decode())
        t.sendall(b"raw websocket bytes")
        got = b""
        while len(got) < 19:
            chunk = t.recv(100)
            if not chunk:
                break
            got += chunk
        print("echoed" if got == b"raw websocket bytes" else "not echoed")
    elif cmd == "tls":
        s = connect(sys.argv[2])
        target = sys.argv[3]
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
        read_head(s)
        ctx = ssl.create_default_context(cafile=sys.argv[5])
        ctx.check_hostname = False
        try:
            ctx.wrap_socket(s, server_hostname=sys.argv[4])
            print("handshake-ok")
        except (ssl.SSLError, ConnectionResetError, OSError):
            print("handshake-failed")
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Real peers on 127.0.0.1 for the egress proxy's tests and benchmark.

  proxy-peer.py http --port-file F [--cert C --key K] [--log FILE] [--headers-log FILE]
      HTTP/1.1 (HTTPS with a certificate) server. Any method on any path answers a JSON
      document echoing what arrived: method, path, headers (in order), body. /big?n=N answers
      N zero bytes (Content-Length); /small answers "ok"; /chunked answers a chunked body;
      /ws performs a WebSocket-style upgrade (101) and then echoes raw bytes; /sink reads the
      body and drops it, answering "ok N" (N bytes read). With --log,
      "METHOD PATH" of every whole request that arrived is appended to FILE; a request cut
      short is logged as "INCOMPLETE PATH" and the body bytes it brought go to FILE.partial.
      --headers-log FILE gets each whole request's line and header fields (for tests whose
      client must not see what arrived, such as a guest).
  proxy-peer.py tcp --port-file F --log FILE
      A raw TCP server: sends "hello\\n" first, then echoes; appends what it received to FILE.
"""
import argparse
import json
import os
import socket
import socketserver
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ZEROS = bytes(1 << 20)


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body go in separate writes: without this, Nagle and delayed ACKs add 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _send(self, code, body, ctype="application/json", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0], 16)  # ValueError at EOF: cut short
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n) if n else b""

    def _record(self, what, body=b""):
        if not Echo.log:
            return
        with Echo.lock:
            with open(Echo.log, "a") as f:
                f.write("%s %s\n" % (what, self.path))
            if body:
                with open(Echo.log + ".partial", "ab") as f:
                    f.write(body)

    def _handle(self):
        path = self.path
        if path.startswith("/sink"):
            # A body read and dropped as it comes (bench/egress-proxy's uploads): "ok N".
            n, left = 0, int(self.headers.get("Content-Length", "0") or 0)
            while left > 0:
                got = self.rfile.read(min(left, 1 << 20))
                if not got:
                    break
                n += len(got)
                left -= len(got)
            return self._send(200, b"ok %d" % n, "text/plain")
        try:
            body = b"" if path.startswith("/big") else self._body()
        except (ValueError, ConnectionError, OSError):
            self._record("INCOMPLETE")
            self.close_connection = True
            return
        n = int(self.headers.get("Content-Length", "0") or 0)
        if len(body) < n:
            # Only whole requests count as arrived; what a cut request brought is kept apart.
            self._record("INCOMPLETE", body)
            self.close_connection = True
            return
        self._record(self.command)
        if Echo.headers_log:
            with Echo.lock:
                with open(Echo.headers_log, "a") as f:
                    f.write("%s %s\n%s\n" % (self.command, path, str(self.headers)))
        if path.startswith("/big"):
            n = int(path.split("n=", 1)[1]) if "n=" in path else (1 << 30)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            while n > 0:
                k = min(n, len(ZEROS))
                self.wfile.write(ZEROS[:k])
                n -= k
            return
        if path.startswith("/small"):
            return self._send(200, b"ok", "text/plain")
        if path.startswith("/chunked"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello ", b"chunked ", b"world"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        if path.startswith("/ws") and self.headers.get("Upgrade", "").lower() == "websocket":
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while True:
                data = self.connection.recv(65536)
                if not data:
                    break
                self.connection.sendall(data)
            self.close_connection = True
            return
        doc = {
            "method": self.command,
            "path": path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": body.decode("latin-1"),
        }
        self._send(200, json.dumps(doc).encode())

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _handle


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def write_port(path, port):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, path)


def serve_http(args):
    Echo.log = None if args.log == os.devnull else args.log
    Echo.headers_log = args.headers_log
    Echo.lock = threading.Lock()
    srv = Server(("127.0.0.1", 0), Echo)
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        ctx.set_alpn_protocols(["http/1.1"])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    write_port(args.port_file, srv.server_address[1])
    srv.serve_forever()


class Tcp(socketserver.BaseRequestHandler):
    def handle(self):
        # Every connection is logged, so a test can tell that none was made.
        with Tcp.lock:
            with open(Tcp.log, "ab") as f:
                f.write(b"#connected\n")
        self.request.sendall(b"hello\n")
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            with Tcp.lock:
                with open(Tcp.log, "ab") as f:
                    f.write(data)
            self.request.sendall(data)


class TcpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 2048


def serve_tcp(args):
    Tcp.log = args.log
    Tcp.lock = threading.Lock()
    srv = TcpServer(("127.0.0.1", 0), Tcp)
    write_port(args.port_file, srv.server_address[1])
    srv.serve_forever()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["http", "tcp"])
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--log", default=os.devnull)
    ap.add_argument("--headers-log")
    args = ap.parse_args()
    if args.mode == "http":
        serve_http(args)
    else:
        serve_tcp(args)


if __name__ == "__main__":
    sys.exit(main())

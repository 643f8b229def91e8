#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A small HTTP server on 127.0.0.1 for the download tests (unit and integration).

    fetch-server.py ROOT PORT_FILE LOG_FILE [CERT_FILE KEY_FILE]

Serves files below ROOT with Range support, binds an ephemeral port on 127.0.0.1 only and writes
it to PORT_FILE. With CERT_FILE and KEY_FILE (PEM) it speaks HTTPS instead, with that certificate
(chain) and key. Every request is logged to LOG_FILE as one line: "METHOD PATH RANGE-HEADER".
Special paths:
  /drop/NAME       sends the headers for NAME (whole length), then half the body, then closes the
                   connection; the next request for /drop/NAME behaves normally (a flaky mirror)
  /endless         200 with no Content-Length, then 64 KiB blocks of "A" for ever
  /endless-cl      announces Content-Length 1 TiB, then sends for ever
  /norange/NAME    ignores Range: always 200 and the whole file
  /redirect-file   302 to file:///etc/hostname (must be refused)
  /redirect/NAME   302 to /NAME
"""
import http.server
import os
import ssl
import sys
import threading

root, port_file, log_file = sys.argv[1], sys.argv[2], sys.argv[3]
cert_file, key_file = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else (None, None)
log_lock = threading.Lock()
dropped = set()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client stopped reading (the size cap) or refused our certificate

    def log_message(self, *args):
        pass

    def log(self):
        with log_lock, open(log_file, "a") as f:
            f.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Range", "-")))

    def send_file(self, name, honour_range=True, drop=False):
        path = os.path.join(root, name.lstrip("/"))
        if not os.path.isfile(path):
            self.send_error(404)
            return
        size = os.path.getsize(path)
        start = 0
        rng = self.headers.get("Range")
        if honour_range and rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(size - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        stop = start + (size - start) // 2 if drop else size
        with open(path, "rb") as f:
            f.seek(start)
            left = stop - start
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
        if drop:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)

    def do_GET(self):
        self.log()
        p = self.path.split("?")[0]
        if p.startswith("/drop/"):
            name = p[len("/drop/"):]
            first = name not in dropped
            dropped.add(name)
            self.send_file(name, drop=first)
        elif p in ("/endless", "/endless-cl"):
            self.send_response(200)
            if p == "/endless-cl":
                self.send_header("Content-Length", str(1 << 40))
            else:
                self.close_connection = True
            self.end_headers()
            block = b"A" * 65536
            try:
                while True:
                    self.wfile.write(block)
            except OSError:
                pass
        elif p.startswith("/norange/"):
            self.send_file(p[len("/norange/"):], honour_range=False)
        elif p == "/redirect-file":
            self.send_response(302)
            self.send_header("Location", "file:///etc/hostname")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif p.startswith("/redirect/"):
            self.send_response(302)
            self.send_header("Location", "/" + p[len("/redirect/"):])
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_file(p)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def get_request(self):
        sock, addr = super().get_request()
        if cert_file:
            # The handshake happens in the request's thread (on its first read), so that a
            # client refusing our certificate does not hold up the others.
            sock = tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr


if cert_file:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert_file, key_file)
server = Server(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()

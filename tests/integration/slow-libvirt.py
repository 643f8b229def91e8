#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A slow libvirt for the tests: a unix-socket proxy in front of libvirtd's socket that holds
each domain definition (REMOTE_PROC_DOMAIN_DEFINE_XML and _FLAGS) back for DELAY seconds while
the file TRIGGER exists, and forwards everything else at once (so libvirt's keep-alive pings
still get their answers, as they do from a libvirtd busy re-probing QEMU). When TRIGGER holds
the word "cut", it instead passes a domain start (REMOTE_PROC_DOMAIN_CREATE and _WITH_FLAGS) on
and then closes that connection, as a libvirt connection lost in the middle of a start.

    slow-libvirt.py LISTEN_SOCKET LIBVIRTD_SOCKET DELAY TRIGGER

slated reaches it with --libvirt-uri 'qemu+unix:///system?socket=LISTEN_SOCKET'. It prints
"ready" once it listens and "held N" each time it holds a definition back. Local sockets only.
"""
import os
import socket
import struct
import sys
import threading
import time

REMOTE_PROGRAM = 0x20008086
HELD_PROCS = {11, 350}  # DOMAIN_DEFINE_XML, DOMAIN_DEFINE_XML_FLAGS
CUT_PROCS = {9, 196}  # DOMAIN_CREATE, DOMAIN_CREATE_WITH_FLAGS
MAX_MESSAGE = 32 * 1024 * 1024


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def pump_raw(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def pump_messages(client, upstream, delay, trigger, lock):
    held = 0
    try:
        while True:
            head = recv_exact(client, 4)
            if head is None:
                break
            (length,) = struct.unpack(">I", head)
            if length < 28 or length > MAX_MESSAGE:
                break
            body = recv_exact(client, length - 4)
            if body is None:
                break
            prog, _vers, proc = struct.unpack(">IIi", body[:12])
            message = head + body
            mode = ""
            if prog == REMOTE_PROGRAM and os.path.exists(trigger):
                with open(trigger) as f:
                    mode = f.read().strip() or "hold"
            if mode == "cut" and proc in CUT_PROCS:
                with lock:
                    upstream.sendall(message)
                print("cut", flush=True)
                time.sleep(1)
                break
            if mode == "hold" and proc in HELD_PROCS:
                held += 1
                print(f"held {held}", flush=True)

                def later(m=message):
                    time.sleep(delay)
                    with lock:
                        try:
                            upstream.sendall(m)
                        except OSError:
                            pass

                threading.Thread(target=later, daemon=True).start()
                continue
            with lock:
                upstream.sendall(message)
    except OSError:
        pass
    # Let a held definition still go out before the upstream connection is closed.
    time.sleep(delay if held else 0)
    for s in (client, upstream):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    listen_path, upstream_path, delay, trigger = sys.argv[1:5]
    delay = float(delay)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(listen_path)
    os.chmod(listen_path, 0o600)
    srv.listen(16)
    print("ready", flush=True)
    while True:
        client, _ = srv.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(upstream_path)
        lock = threading.Lock()
        threading.Thread(target=pump_raw, args=(upstream, client), daemon=True).start()
        threading.Thread(target=pump_messages, args=(client, upstream, delay, trigger, lock),
                         daemon=True).start()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
# systemd-notify.py SOCKET LOG: plays systemd's side of sd_notify(3) for the tests. Binds a unix
# datagram socket at SOCKET and appends each message to LOG, followed by a line "--".
import socket
import sys

s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "ab", buffering=0) as log:
    while True:
        log.write(s.recv(65536) + b"\n--\n")

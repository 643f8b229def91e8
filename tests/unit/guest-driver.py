#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Drives slate-guest as the host end of the guest channel (doc/guest-channel.md), over a unix
socket and without a VM: slate-guest runs here, as a subprocess, with --channel SOCKET.

    guest-driver.py PATH-TO-slate-guest [TEST-NAME-PART]...
    guest-driver.py --connect SOCKET [TEST-NAME-PART]...

The second form drives a slate-guest that already runs, in a VM whose virtio-serial port's host
end is SOCKET (the forwarding tests are left out).

Checks exec sessions (status, signals, stdout/stderr, binary data both ways, flow control, PTY,
SIGNAL, TIMEOUT, many at once), the stream rules (unknown service, stream limit), forwarded
connections (http-proxy, ssh-agent, cdp both ways), the browser protocol's refusals, and recovery: host reconnects, garbage and oversized frames,
window violations. Exit status 0 when everything passed."""

import os
import random
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

HELLO, OPEN, OPEN_OK, OPEN_FAIL, DATA, WINDOW, EOF, CLOSE, PING, PONG, EVENT = range(1, 12)
REQUEST, STDIN, STDIN_EOF, RESIZE, SIGNAL = 1, 2, 3, 4, 5
STARTED, STDOUT, STDERR, EXIT, ERROR = 16, 17, 18, 19, 20
F_ARG, F_ENV, F_CWD, F_USER, F_TTY, F_LOGIN, F_TIMEOUT = range(1, 8)
INITIAL_WINDOW = 256 * 1024
MAX_PAYLOAD = 64 * 1024
MAX_WINDOW = 16 * 1024 * 1024
MAX_STREAMS = 256


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def frame(ftype, sid, payload=b""):
    return struct.pack(">BBHII", ftype, 0, 0, sid, len(payload)) + payload


def hello_frame(version=1):
    return frame(HELLO, 0, b"SLATECH1" + struct.pack(">II", version, 0))


def record(rtype, payload=b""):
    return struct.pack(">BI", rtype, len(payload)) + payload


def field(tag, value=b""):
    return struct.pack(">BI", tag, len(value)) + value


def request(args=(), env=(), cwd=None, user=None, tty=None, login=False, timeout=None):
    p = b"".join(field(F_ARG, a.encode() if isinstance(a, str) else a) for a in args)
    p += b"".join(field(F_ENV, e.encode()) for e in env)
    if cwd is not None:
        p += field(F_CWD, cwd.encode())
    if user is not None:
        p += field(F_USER, user.encode())
    if tty is not None:
        p += field(F_TTY, struct.pack(">HH", *tty))
    if login:
        p += field(F_LOGIN)
    if timeout is not None:
        p += field(F_TIMEOUT, struct.pack(">I", timeout))
    return record(REQUEST, p)


class Stream:
    def __init__(self, sid, exec_stream=True):
        self.sid = sid
        self.exec = exec_stream
        self.send_win = 0  # what the guest lets us send
        self.recv_win = 0  # what we let the guest send
        self.opened = None  # True (OPEN_OK), or the OPEN_FAIL reason
        self.service = None
        self.data = bytearray()  # raw bytes (forwarded streams) / unparsed records (exec)
        self.records = []
        self.got_eof = False
        self.got_close = False
        self.sent_close = False
        self.auto_grant = True
        self.pending_grant = 0

    # Records of an exec stream, by kind.
    def out(self, rtype=STDOUT):
        return b"".join(p for t, p in self.records if t == rtype)

    def exit(self):
        for t, p in self.records:
            if t == EXIT:
                return struct.unpack(">BI", p)
        return None

    def error(self):
        for t, p in self.records:
            if t == ERROR:
                return p.decode()
        return None

    def pid(self):
        check(self.records and self.records[0][0] == STARTED, "no STARTED first: %r" % self.records[:1])
        return struct.unpack(">I", self.records[0][1])[0]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Host:
    def __init__(self, guest, tmp, connect=None):
        self.tmp = tmp
        self.connect_path = connect
        self.conn = None
        self.buf = bytearray()
        self.streams = {}
        self.next_sid = 2
        self.events = []
        self.pongs = []
        self.guest_opens = []
        if connect:
            # A slate-guest in a VM, behind a virtio-serial port whose host end is this socket.
            self.proc = None
            return
        self.path = os.path.join(tmp, "channel.sock")
        self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lsock.bind(self.path)
        self.lsock.listen(4)
        self.proxy_port, self.cdp_port, self.devtools_port = free_ports(3)
        self.agent = os.path.join(tmp, "agent", "ssh-agent.sock")
        self.log = open(os.path.join(tmp, "guest.log"), "w+")
        self.proc = subprocess.Popen(
            [guest, "--channel", self.path, "--proxy-port", str(self.proxy_port),
             "--cdp-port", str(self.cdp_port), "--devtools-port", str(self.devtools_port),
             "--agent-socket", self.agent],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            # As the test image's init starts it (in the background of a non-interactive sh):
            # SIGINT ignored, which commands must not inherit.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))

    def close(self):
        if not self.proc:
            return ""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.seek(0)
        return self.log.read()

    def accept(self, timeout=5):
        if self.connect_path:
            deadline = time.monotonic() + timeout
            while True:
                self.conn = socket.socket(socket.AF_UNIX)
                try:
                    self.conn.connect(self.connect_path)
                    break
                except OSError:
                    self.conn.close()
                    if time.monotonic() > deadline:
                        raise Fail("cannot connect to " + self.connect_path)
                    time.sleep(0.2)
            self.conn.setblocking(False)
            self.buf = bytearray()
            self.streams = {}
            return
        self.lsock.settimeout(timeout)
        try:
            self.conn, _ = self.lsock.accept()
        except socket.timeout:
            raise Fail("slate-guest did not connect within %d s" % timeout)
        self.conn.setblocking(False)
        self.buf = bytearray()
        self.streams = {}

    def send(self, data):
        self.conn.setblocking(True)
        self.conn.sendall(data)
        self.conn.setblocking(False)

    def drop(self):
        self.conn.close()
        self.conn = None

    def start_session(self, garbage=b""):
        self.streams = {}
        self.events = []
        self.send(garbage + hello_frame())
        # Frames of an old session may come first: drop everything before the guest's HELLO.
        # A VM may still be booting: its port delivers the HELLO once slate-guest opens it.
        deadline = time.monotonic() + (120 if self.connect_path else 5)
        while True:
            t, sid, p = self.recv_frame(deadline, resync=True)
            if t == HELLO:
                break
        check(p == b"SLATECH1" + struct.pack(">II", 1, 0), "bad HELLO from the guest: %r" % p)
        t, sid, p = self.recv_frame(deadline)
        check((t, sid, p) == (EVENT, 0, b"ready"), "expected EVENT ready, got %r" % ((t, sid, p),))

    def recv_frame(self, deadline, resync=False):
        while True:
            synced = True
            if resync:
                i = self.buf.find(frame(HELLO, 0, b"")[:8] + struct.pack(">I", 16) + b"SLATECH1")
                if i < 0:
                    del self.buf[:max(0, len(self.buf) - 19)]
                    synced = False
                else:
                    del self.buf[:i]
            if synced and len(self.buf) >= 12:
                t, flags, res, sid, n = struct.unpack(">BBHII", self.buf[:12])
                check(flags == 0 and res == 0, "guest frame with flags/reserved set")
                check(n <= MAX_PAYLOAD, "guest frame over 64 KiB")
                if len(self.buf) >= 12 + n:
                    p = bytes(self.buf[12:12 + n])
                    del self.buf[:12 + n]
                    return t, sid, p
            left = deadline - time.monotonic()
            if left <= 0:
                raise Fail("timed out waiting for a frame from the guest")
            r, _, _ = select.select([self.conn], [], [], left)
            if r:
                try:
                    d = self.conn.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    continue
                if not d:
                    raise Fail("slate-guest closed the channel")
                self.buf += d

    def pump(self, deadline):
        """Handles one frame from the guest."""
        t, sid, p = self.recv_frame(deadline)
        if sid == 0:
            check(t in (HELLO, EVENT, PONG), "unexpected channel frame %d" % t)
            if t == EVENT:
                self.events.append(p)
            elif t == PONG:
                self.pongs.append(p)
            else:
                raise Fail("HELLO from the guest in the middle of a session")
            return
        if t == OPEN:
            check(sid % 2 == 1, "guest OPEN with an even id")
            check(sid not in self.streams, "guest OPEN of an id in use")
            s = Stream(sid, exec_stream=False)
            s.recv_win = 0
            s.send_win = struct.unpack(">I", p[:4])[0]
            s.service = p[4:].decode()
            self.streams[sid] = s
            self.guest_opens.append(s)
            return
        s = self.streams.get(sid)
        check(s is not None, "frame %d for unknown stream %d" % (t, sid))
        if t == OPEN_OK:
            s.send_win = struct.unpack(">I", p)[0]
            s.opened = True
        elif t == OPEN_FAIL:
            s.opened = struct.unpack(">I", p[:4])[0]
            s.fail_text = p[4:].decode(errors="replace")
            del self.streams[sid]
        elif t == DATA:
            check(not s.got_eof and not s.got_close, "DATA after EOF/CLOSE")
            check(len(p) <= s.recv_win,
                  "guest sent %d bytes on stream %d with a window of %d" % (len(p), sid, s.recv_win))
            s.recv_win -= len(p)
            s.data += p
            if s.exec:
                while len(s.data) >= 5:
                    rt, n = struct.unpack(">BI", s.data[:5])
                    if len(s.data) < 5 + n:
                        break
                    s.records.append((rt, bytes(s.data[5:5 + n])))
                    del s.data[:5 + n]
            if s.auto_grant:
                self.grant(s, len(p))
            else:
                s.pending_grant += len(p)
        elif t == WINDOW:
            inc = struct.unpack(">I", p)[0]
            check(inc > 0 and s.send_win + inc <= MAX_WINDOW, "bad WINDOW from the guest")
            s.send_win += inc
        elif t == EOF:
            check(not s.got_eof, "EOF twice")
            s.got_eof = True
        elif t == CLOSE:
            check(not s.got_close, "CLOSE twice")
            s.got_close = True
            if not s.sent_close:
                self.send(frame(CLOSE, sid))
                s.sent_close = True
        else:
            raise Fail("unexpected frame type %d" % t)

    def grant(self, s, n):
        if n > 0 and not s.sent_close:
            self.send(frame(WINDOW, s.sid, struct.pack(">I", n)))
            s.recv_win += n

    def wait(self, cond, timeout=10, what="condition"):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() >= deadline:
                raise Fail("timed out waiting for " + what)
            try:
                self.pump(deadline)
            except Fail as e:
                if "timed out" in str(e) and not cond():
                    raise Fail("timed out waiting for " + what)
                if "timed out" not in str(e):
                    raise

    def open(self, service="exec", window=INITIAL_WINDOW):
        sid = self.next_sid
        self.next_sid += 2
        s = Stream(sid)
        s.recv_win = window
        self.streams[sid] = s
        self.send(frame(OPEN, sid, struct.pack(">I", window) + service.encode()))
        return s

    def send_data(self, s, data, timeout=30):
        """Sends stream bytes within the guest's window, handling guest frames meanwhile."""
        deadline = time.monotonic() + timeout
        view = memoryview(data)
        while view and not s.got_close:
            if s.send_win == 0:
                self.pump(deadline)
                continue
            n = min(len(view), s.send_win, MAX_PAYLOAD)
            self.send(frame(DATA, s.sid, bytes(view[:n])))
            s.send_win -= n
            view = view[n:]

    def exec(self, req, stdin=None, eof=True, window=INITIAL_WINDOW):
        s = self.open("exec", window)
        self.wait(lambda: s.opened is not None, what="OPEN_OK")
        check(s.opened is True, "exec OPEN failed: %r" % s.opened)
        self.send_data(s, req)
        if stdin is not None:
            for i in range(0, len(stdin), 60000):
                self.send_data(s, record(STDIN, stdin[i:i + 60000]))
        if eof:
            self.send_data(s, record(STDIN_EOF))
        return s

    def finish(self, s, timeout=20):
        try:
            self.wait(lambda: s.got_close, timeout, "the end of stream %d" % s.sid)
        except Fail as e:
            raise Fail("%s (records so far: %r)" % (e, [(t, p[:80]) for t, p in s.records]))
        return s

    def run(self, args, wait_s=20, **kw):
        stdin = kw.pop("stdin", None)
        return self.finish(self.exec(request(args, **kw), stdin=stdin), wait_s)


def gone(h, pid, timeout=3):
    if h.connect_path:
        # In a VM: ask the guest.
        s = h.run(["sh", "-c", "i=0; while kill -0 %d 2>/dev/null; do i=$((i+1)); "
                   "[ $i -lt %d ] || exit 1; sleep 0.1; done" % (pid, timeout * 10)],
                  wait_s=timeout + 30)
        return s.exit() == (0, 0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


# ---- the tests ----

def t_status(h):
    s = h.run(["true"])
    check(s.records[0][0] == STARTED and s.pid() > 0, "STARTED comes first")
    check(s.records[-1][0] == EXIT, "EXIT comes last")
    check(s.exit() == (0, 0), "true: %r" % (s.exit(),))
    check(h.run(["false"]).exit() == (0, 1), "false")
    check(h.run(["sh", "-c", "exit 3"]).exit() == (0, 3), "exit 3")
    s = h.run(["/nonexistent/command"])
    check(s.exit() == (0, 127), "not found: %r" % (s.exit(),))
    check(b"slate-guest: /nonexistent/command: No such file or directory" in s.out(STDERR),
          "not found message: %r" % s.out(STDERR))
    s = h.run(["no-such-command-anywhere"])
    check(s.exit() == (0, 127), "not in PATH: %r" % (s.exit(),))
    s = h.run(["/etc/passwd"])
    check(s.exit() == (0, 126), "not executable: %r" % (s.exit(),))
    s = h.run(["sh", "-c", "kill -9 $$"])
    check(s.exit() == (1, 9), "killed: %r" % (s.exit(),))


def t_streams_separate(h):
    s = h.run(["sh", "-c", "echo out; echo err >&2; echo out2"])
    check(s.out() == b"out\nout2\n" and s.out(STDERR) == b"err\n",
          "stdout %r stderr %r" % (s.out(), s.out(STDERR)))


def t_environment(h):
    s = h.run(["sh", "-c", 'echo "$PATH|$HOME|$USER|$LOGNAME|$SHELL|$FOO|${TERM-unset}"; pwd'],
              env=["FOO=bar baz", "PATH=/usr/bin:/bin"], cwd="/tmp")
    lines = s.out().decode().splitlines()
    path, home, user, logname, shell, foo, term = lines[0].split("|")
    check(path == "/usr/bin:/bin", "ENV replaces PATH: %r" % path)
    check(user and user == logname and home.startswith("/") and shell, "user env: %r" % lines[0])
    check(foo == "bar baz" and term == "unset", "env: %r" % lines[0])
    check(lines[1] == "/tmp", "CWD: %r" % lines[1])
    s = h.run(["sh", "-c", 'echo "$PATH"; pwd'])
    check(s.out().decode().splitlines()[0] ==
          "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "default PATH")
    home = [l for l in h.run(["sh", "-c", 'echo "$HOME"']).out().decode().splitlines()][0]
    check(s.out().decode().splitlines()[1] in (home, "/"), "default CWD is home")
    # A command sees none of slate-guest's environment: the basics, the guest-local proxy and
    # agent, and what provisioning wrote to /run/slate/env (placeholders; none on this host
    # unless a real guest provisioned it).
    s = h.run(["env"])
    names = sorted(l.split(b"=")[0] for l in s.out().splitlines())
    expected = [b"HOME", b"HTTPS_PROXY", b"HTTP_PROXY", b"LOGNAME", b"NODE_EXTRA_CA_CERTS",
                b"NO_PROXY", b"PATH", b"PIP_CERT", b"REQUESTS_CA_BUNDLE", b"SHELL",
                b"SSH_AUTH_SOCK", b"USER", b"http_proxy", b"https_proxy", b"no_proxy"]
    extra = set()
    if os.path.exists("/run/slate/env"):
        extra = {l.split(b"=")[0] for l in open("/run/slate/env", "rb").read().splitlines()}
    check(sorted(set(expected) | extra) == names, "clean env: %r" % names)
    env = dict(l.split(b"=", 1) for l in s.out().splitlines())
    check(env[b"SSH_AUTH_SOCK"] == b"/run/slate/ssh-agent.sock" and
          env[b"https_proxy"] == b"http://127.0.0.1:3128", "proxy and agent env: %r" % env)
    s = h.run(["true"], cwd="/nonexistent-dir")
    check(s.error() and "/nonexistent-dir" in s.error() and s.exit() is None,
          "missing CWD gives ERROR: %r" % s.records)
    s = h.run(["true"], user="no-such-user-x")
    check(s.error() and "no-such-user-x" in s.error(), "unknown user: %r" % s.records)


def t_large_output_flow_control(h):
    line = b"slate-guest flow control test line\n"
    data = (line * (5 * 1024 * 1024 // len(line) + 1))[:5 * 1024 * 1024]
    s = h.open("exec", INITIAL_WINDOW)
    s.auto_grant = False
    h.wait(lambda: s.opened is not None, what="OPEN_OK")
    h.send_data(s, request(["sh", "-c", "yes '%s' | head -c %d" % (line[:-1].decode(), len(data))])
                + record(STDIN_EOF))
    # No grants: the guest must stop at the initial window.
    deadline = time.monotonic() + (3 if h.connect_path else 0.7)
    while time.monotonic() < deadline:
        try:
            h.pump(deadline)
        except Fail as e:
            if "timed out" not in str(e):
                raise
    check(s.pending_grant <= INITIAL_WINDOW and s.pending_grant > INITIAL_WINDOW // 2,
          "without grants the guest sent %d bytes" % s.pending_grant)
    # Then grant slowly, in small steps.
    deadline = time.monotonic() + 60
    while not s.got_close:
        if s.pending_grant >= 16384 or (s.recv_win < 65536 and s.pending_grant):
            n = min(s.pending_grant, 16384)
            s.pending_grant -= n
            if not h.connect_path:
                time.sleep(0.0005)
            h.grant(s, n)
        h.pump(deadline)
    check(s.out() == data, "5 MiB through cat: %d bytes, equal %s" % (len(s.out()), s.out() == data))
    check(s.exit() == (0, 0), "cat status %r" % (s.exit(),))


def t_binary_both_ways(h):
    data = bytes(range(256)) * 16 + os.urandom(3 * 1024 * 1024 + 12345)
    s = h.exec(request(["cat"]), stdin=data)
    h.finish(s, 60)
    check(s.out() == data, "cat both ways: %d of %d bytes" % (len(s.out()), len(data)))
    check(s.exit() == (0, 0), "cat status")
    # STDIN_EOF ends input; a command that never reads its stdin still ends.
    s = h.run(["sh", "-c", "wc -c"], stdin=b"x" * 100000)
    check(s.out().strip() == b"100000", "wc: %r" % s.out())
    s = h.run(["true"], stdin=os.urandom(2 * 1024 * 1024))
    check(s.exit() == (0, 0), "true with unread stdin")


def t_tty(h):
    s = h.exec(request(["sh", "-c", "stty size; echo $TERM; read x; stty size; test -t 0 && test -t 2 && echo tty"],
                       tty=(30, 100)), eof=False)
    h.wait(lambda: b"xterm-256color" in s.out(), what="stty size on the PTY")
    check(b"30 100" in s.out(), "TTY size: %r" % s.out())
    h.send_data(s, record(RESIZE, struct.pack(">HH", 40, 120)) + record(STDIN, b"\n"))
    h.finish(s)
    out = s.out()
    check(b"40 120" in out and b"tty" in out, "after RESIZE: %r" % out)
    check(not s.out(STDERR), "no STDERR with a PTY")
    check(s.exit() == (0, 0), "tty status %r" % (s.exit(),))
    # SIGWINCH reaches the foreground process group.
    s = h.exec(request(["sh", "-c", "trap 'stty size; exit 7' WINCH; echo ready; while :; do sleep 0.05; done"],
                       tty=(24, 80)), eof=False)
    h.wait(lambda: b"ready" in s.out(), what="trap set")
    h.send_data(s, record(RESIZE, struct.pack(">HH", 50, 160)))
    h.finish(s)
    check(b"50 160" in s.out() and s.exit() == (0, 7), "SIGWINCH: %r %r" % (s.out(), s.exit()))
    # STDIN_EOF on a PTY is the terminal's EOF character.
    s = h.run(["cat"], tty=(24, 80), stdin=b"hello\n")
    check(s.exit() == (0, 0) and b"hello" in s.out(), "cat on a PTY: %r %r" % (s.out(), s.exit()))
    # LOGIN: the user's shell as a login shell ("-sh"); ARGs are ignored.
    s = h.exec(request(["ignored"], login=True, tty=(24, 80)), stdin=b"echo login:$0; exit 5\n",
               eof=False)
    h.finish(s)
    check(b"login:-" in s.out() and s.exit() == (0, 5), "LOGIN: %r %r" % (s.out()[-200:], s.exit()))
    # A background child keeping the terminal open does not hold up EXIT.
    t0 = time.monotonic()
    s = h.run(["sh", "-c", "(trap '' HUP; exec sleep 5) & echo started"], tty=(24, 80))
    check(s.exit() == (0, 0) and b"started" in s.out() and time.monotonic() - t0 < 3,
          "a background child held the PTY session: %.1f s, %r" % (time.monotonic() - t0, s.records))


def t_signal_timeout(h):
    s = h.exec(request(["sleep", "30"]), eof=False)
    h.wait(lambda: s.records, what="STARTED")
    h.send_data(s, record(SIGNAL, struct.pack(">I", 15)))
    h.finish(s, 5)
    check(s.exit() == (1, 15), "SIGTERM: %r" % (s.exit(),))
    # The whole process group gets it.
    s = h.exec(request(["sh", "-c", "sleep 30; echo not-killed"]), eof=False)
    h.wait(lambda: s.records, what="STARTED")
    time.sleep(0.1)
    h.send_data(s, record(SIGNAL, struct.pack(">I", 2)))
    h.finish(s, 5)
    check(s.exit() == (1, 2) and b"not-killed" not in s.out(), "SIGINT: %r" % (s.exit(),))
    t0 = time.monotonic()
    s = h.run(["sleep", "30"], timeout=1)
    check(s.exit() == (1, 9), "TIMEOUT: %r" % (s.exit(),))
    check(0.8 < time.monotonic() - t0 < 4, "TIMEOUT took %.1f s" % (time.monotonic() - t0))


def t_concurrent(h):
    t0 = time.monotonic()
    ss = [h.exec(request(["sh", "-c", "sleep 0.5; echo %d; echo e%d >&2" % (i, i)])) for i in range(20)]
    for s in ss:
        h.finish(s)
    for i, s in enumerate(ss):
        check(s.out() == b"%d\n" % i and s.out(STDERR) == b"e%d\n" % i and s.exit() == (0, 0),
              "concurrent %d: %r" % (i, s.records))
    check(time.monotonic() - t0 < 5, "20 concurrent sessions took %.1f s" % (time.monotonic() - t0))


def t_host_close(h):
    s = h.exec(request(["sleep", "30"]), eof=False)
    h.wait(lambda: s.records, what="STARTED")
    pid = s.pid()
    h.send(frame(CLOSE, s.sid))
    s.sent_close = True
    h.wait(lambda: s.got_close, 5, "CLOSE answered")
    check(gone(h, pid), "host CLOSE: the command %d still runs" % pid)
    # SIGHUP ignored: SIGKILL a second later.
    s = h.exec(request(["sh", "-c", "trap '' HUP; echo ready; sleep 30"]), eof=False)
    h.wait(lambda: b"ready" in s.out(), what="trap set")
    pid = s.pid()
    h.send(frame(CLOSE, s.sid))
    s.sent_close = True
    h.wait(lambda: s.got_close, 5, "CLOSE answered")
    check(not gone(h, pid, 0.5), "SIGKILL came before the second")
    check(gone(h, pid, 3), "SIGHUP-immune command %d still runs" % pid)


def t_bad_records(h):
    s = h.exec(record(STDIN, b"x"), eof=False)
    h.finish(s, 5)
    check(s.error() and s.exit() is None, "STDIN first: %r" % s.records)
    s = h.exec(record(REQUEST, field(99, b"x")), eof=False)
    h.finish(s, 5)
    check(s.error(), "bad REQUEST: %r" % s.records)
    s = h.exec(request(["sleep", "30"]), eof=False)
    h.wait(lambda: s.records, what="STARTED")
    pid = s.pid()
    h.send_data(s, record(STDOUT, b"nope"))
    h.finish(s, 5)
    check(s.error() and s.exit() is None, "STDOUT from the client: %r" % s.records)
    check(gone(h, pid), "a failed session's command still runs")
    s = h.exec(request(["true"]) + record(SIGNAL, struct.pack(">I", 9999)), eof=False)
    h.finish(s, 5)
    check(s.error() is not None or s.exit() is not None, "bad signal")


def t_services(h):
    s = h.open("foo")
    h.wait(lambda: s.opened is not None, what="OPEN_FAIL")
    check(s.opened == 1, "OPEN foo: %r" % s.opened)
    s = h.open("http-proxy")
    h.wait(lambda: s.opened is not None, what="OPEN_FAIL")
    check(s.opened == 1, "the guest accepts no http-proxy streams: %r" % s.opened)
    h.send(frame(PING, 0, b"12345678"))
    h.wait(lambda: h.pongs, what="PONG")
    check(h.pongs[-1] == b"12345678", "PONG")


def t_stream_limit(h):
    ss = [h.open("exec") for _ in range(MAX_STREAMS)]
    h.wait(lambda: all(s.opened is not None for s in ss), what="256 OPEN_OK")
    check(all(s.opened is True for s in ss), "256 streams open")
    extra = h.open("exec")
    h.wait(lambda: extra.opened is not None, what="OPEN_FAIL")
    check(extra.opened == 2, "257th stream: %r" % extra.opened)
    for s in ss:
        h.send(frame(CLOSE, s.sid))
        s.sent_close = True
    h.wait(lambda: all(s.got_close for s in ss), what="CLOSE answers")
    for s in ss:
        del h.streams[s.sid]
    check(h.run(["true"]).exit() == (0, 0), "exec after the limit")


def t_proxy(h):
    n0 = len(h.guest_opens)
    c = socket.create_connection(("127.0.0.1", h.proxy_port), 5)
    h.wait(lambda: len(h.guest_opens) > n0, what="OPEN http-proxy")
    s = h.guest_opens[-1]
    check(s.service == "http-proxy" and s.sid % 2 == 1, "OPEN %r %d" % (s.service, s.sid))
    s.recv_win = INITIAL_WINDOW
    h.send(frame(OPEN_OK, s.sid, struct.pack(">I", INITIAL_WINDOW)))
    up, down, got = os.urandom(1024 * 1024), os.urandom(2 * 1024 * 1024), bytearray()

    def writer():
        c.sendall(up)
        c.shutdown(socket.SHUT_WR)

    def reader():
        while True:
            d = c.recv(65536)
            if not d:
                break
            got.extend(d)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    h.wait(lambda: s.got_eof, 20, "EOF from the proxy connection")
    check(bytes(s.data) == up, "guest to host: %d of %d bytes" % (len(s.data), len(up)))
    h.send_data(s, down)
    h.send(frame(EOF, s.sid))
    h.wait(lambda: s.got_close, 20, "CLOSE after both EOFs")
    for t in threads:
        t.join(10)
    check(bytes(got) == down, "host to guest: %d of %d bytes" % (len(got), len(down)))
    c.close()
    # OPEN_FAIL closes the local connection.
    c = socket.create_connection(("127.0.0.1", h.proxy_port), 5)
    h.wait(lambda: len(h.guest_opens) > n0 + 1, what="second OPEN")
    s = h.guest_opens[-1]
    h.send(frame(OPEN_FAIL, s.sid, struct.pack(">I", 3) + b"unavailable"))
    c.settimeout(5)
    try:
        check(c.recv(10) == b"", "OPEN_FAIL: local connection not closed")
    except ConnectionResetError:
        pass
    c.close()
    # The SSH agent socket.
    check(stat.S_IMODE(os.stat(h.agent).st_mode) == 0o666, "agent socket mode")
    a = socket.socket(socket.AF_UNIX)
    a.connect(h.agent)
    h.wait(lambda: h.guest_opens[-1].service == "ssh-agent", what="OPEN ssh-agent")
    s = h.guest_opens[-1]
    s.recv_win = INITIAL_WINDOW
    h.send(frame(OPEN_OK, s.sid, struct.pack(">I", INITIAL_WINDOW)))
    a.sendall(b"\0\0\0\1\x0b")
    h.wait(lambda: len(s.data) == 5, what="agent request")
    h.send_data(s, b"\0\0\0\1\x05")
    a.settimeout(5)
    check(a.recv(5) == b"\0\0\0\1\x05", "agent answer")
    a.close()
    h.wait(lambda: s.got_eof or s.got_close, what="agent connection end")
    if not s.got_close:
        h.send(frame(EOF, s.sid))
        h.wait(lambda: s.got_close, what="agent CLOSE")


def relay_check(h, s, c, up_n=1024 * 1024, down_n=2 * 1024 * 1024):
    """Bytes both ways between stream s and local socket c, each side half-closing."""
    up, down, got = os.urandom(up_n), os.urandom(down_n), bytearray()

    def writer():
        c.sendall(up)
        c.shutdown(socket.SHUT_WR)

    def reader():
        while True:
            d = c.recv(65536)
            if not d:
                break
            got.extend(d)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    h.wait(lambda: s.got_eof, 20, "EOF from the local connection")
    check(bytes(s.data) == up, "guest to host: %d of %d bytes" % (len(s.data), len(up)))
    h.send_data(s, down)
    h.send(frame(EOF, s.sid))
    h.wait(lambda: s.got_close, 20, "CLOSE after both EOFs")
    for t in threads:
        t.join(10)
    check(bytes(got) == down, "host to guest: %d of %d bytes" % (len(got), len(down)))
    c.close()


def t_cdp(h):
    # The workspace's end: 127.0.0.1:9222 (here --cdp-port) opens a guest "cdp" stream.
    n0 = len(h.guest_opens)
    c = socket.create_connection(("127.0.0.1", h.cdp_port), 5)
    h.wait(lambda: len(h.guest_opens) > n0, what="OPEN cdp")
    s = h.guest_opens[-1]
    check(s.service == "cdp" and s.sid % 2 == 1, "OPEN %r %d" % (s.service, s.sid))
    s.recv_win = INITIAL_WINDOW
    h.send(frame(OPEN_OK, s.sid, struct.pack(">I", INITIAL_WINDOW)))
    relay_check(h, s, c, 300 * 1000, 700 * 1000)
    # The browser VM's end: a host "cdp" stream connects to DevTools (here --devtools-port).
    s = h.open("cdp")
    h.wait(lambda: s.opened is not None, what="OPEN_FAIL")
    check(s.opened == 3 and ("127.0.0.1:%d" % h.devtools_port) in s.fail_text,
          "cdp without DevTools: %r %r" % (s.opened, getattr(s, "fail_text", None)))
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", h.devtools_port))
    ls.listen(4)
    try:
        s = h.open("cdp")
        ls.settimeout(5)
        c, _ = ls.accept()
        h.wait(lambda: s.opened is not None, what="OPEN_OK")
        check(s.opened is True, "cdp with DevTools: %r" % s.opened)
        s.exec = False
        relay_check(h, s, c)
        # The DevTools end goes away first: EOF to the host, and CLOSE once the host's EOF.
        s = h.open("cdp")
        c, _ = ls.accept()
        h.wait(lambda: s.opened is not None, what="OPEN_OK")
        s.exec = False
        c.sendall(b"bye")
        c.close()
        h.wait(lambda: s.got_eof, what="EOF after DevTools closed")
        check(bytes(s.data) == b"bye", "data before the EOF: %r" % bytes(s.data))
        h.send(frame(EOF, s.sid))
        h.wait(lambda: s.got_close, what="CLOSE")
    finally:
        ls.close()


def t_browser_request(h):
    # Only malformed requests: a "start" would set Chromium up on this machine (the agent
    # refuses it unless root; the browser VM's tests are tests/integration's).
    for req, want in ((b"bogus\n", b"error unknown line\n"),
                      (b"window 1x1\n", b"error window wants WxH, each 16..16384\n"),
                      (b"ca 5\nhello", b"error ca: not a PEM certificate\n"),
                      (b"stop\n", b"error stop before start\n"),
                      (b"start\n", b"error must run as root\n" if os.geteuid() else None)):
        if want is None:
            continue
        s = h.open("browser")
        h.wait(lambda: s.opened is not None, what="OPEN_OK")
        check(s.opened is True, "browser OPEN: %r" % s.opened)
        s.exec = False
        h.send_data(s, req)
        h.wait(lambda: s.got_close, what="the browser stream's end")
        check(bytes(s.data) == want and s.got_eof, "%r: %r" % (req, bytes(s.data)))
    # EOF before start: the stream ends, nothing said.
    s = h.open("browser")
    h.wait(lambda: s.opened is not None, what="OPEN_OK")
    s.exec = False
    h.send(frame(EOF, s.sid))
    h.wait(lambda: s.got_close, what="CLOSE after EOF")
    check(bytes(s.data) == b"", "EOF before start: %r" % bytes(s.data))


def t_reconnect(h):
    s = h.exec(request(["sleep", "30"]), eof=False)
    h.wait(lambda: s.records, what="STARTED")
    pid = s.pid()
    h.drop()
    h.accept(5)
    h.start_session()
    check(gone(h, pid), "the old session's command %d survived the reconnection" % pid)
    check(h.run(["true"]).exit() == (0, 0), "exec after a reconnection")


def t_garbage(h):
    # Garbage in the middle of a session: dropped, sessions reset, a new HELLO resyncs.
    s = h.exec(request(["sleep", "30"]), eof=False)
    h.wait(lambda: s.records, what="STARTED")
    pid = s.pid()
    h.send(b"\xee" + os.urandom(5000))
    h.start_session(garbage=os.urandom(3000))
    check(gone(h, pid), "a protocol error left the command %d running" % pid)
    check(h.run(["echo", "hi"]).out() == b"hi\n", "exec after garbage")
    # An oversized frame.
    h.send(frame(DATA, 2, b"")[:8] + struct.pack(">I", 16 << 20) + os.urandom(1000))
    h.start_session()
    check(h.run(["true"]).exit() == (0, 0), "exec after an oversized frame")
    # DATA beyond the window.
    s = h.open("exec")
    h.wait(lambda: s.opened is not None, what="OPEN_OK")
    for _ in range(5):
        h.send(frame(DATA, s.sid, b"\0" * MAX_PAYLOAD))
    h.start_session()
    check(h.run(["true"]).exit() == (0, 0), "exec after a window violation")
    # An OPEN with the guest's parity, and an EVENT from the host.
    h.send(frame(OPEN, 3, struct.pack(">I", 1000) + b"exec"))
    h.start_session()
    h.send(frame(EVENT, 0, b"hello"))
    h.start_session()
    # A HELLO of another version: ignored until a good one.
    h.send(hello_frame(2))
    h.start_session()
    check(h.run(["true"]).exit() == (0, 0), "exec after bad frames")


TESTS = [
    ("exit status", t_status),
    ("stdout and stderr", t_streams_separate),
    ("environment, CWD, user", t_environment),
    ("5 MiB output under slow flow control", t_large_output_flow_control),
    ("binary data both ways", t_binary_both_ways),
    ("PTY, RESIZE, SIGWINCH", t_tty),
    ("SIGNAL and TIMEOUT", t_signal_timeout),
    ("20 concurrent sessions", t_concurrent),
    ("host CLOSE kills the command", t_host_close),
    ("malformed records", t_bad_records),
    ("services and PING", t_services),
    ("stream limit", t_stream_limit),
    ("http-proxy and ssh-agent forwarding", t_proxy),
    ("cdp both ways", t_cdp),
    ("browser request errors", t_browser_request),
    ("host reconnection", t_reconnect),
    ("garbage, oversized frames, protocol errors", t_garbage),
]


def main():
    args = sys.argv[1:]
    connect = None
    if len(args) >= 2 and args[0] == "--connect":
        connect, args = args[1], args[2:]
    elif args:
        guest, args = os.path.abspath(args[0]), args[1:]
    else:
        print(__doc__)
        return 2
    tests = [t for t in TESTS if not args or any(a in t[0] for a in args)]
    if connect:
        # The guest's proxy port and agent socket are not reachable from here.
        tests = [t for t in tests if t[1] is not t_proxy and t[1] is not t_cdp]
    elif not os.access(guest, os.X_OK):
        print("no slate-guest at %s" % guest)
        return 1
    failed = 0
    with tempfile.TemporaryDirectory(prefix="slate-guest-test.") as tmp:
        h = Host(None if connect else guest, tmp, connect)
        try:
            h.accept(60 if connect else 5)
            h.start_session(garbage=b"stale bytes from an old session" + os.urandom(100))
            for name, fn in tests:
                t0 = time.monotonic()
                try:
                    fn(h)
                    print("ok   %s (%.2f s)" % (name, time.monotonic() - t0))
                except Fail as e:
                    failed += 1
                    print("FAIL %s: %s" % (name, e))
                    # Start over from a clean session for the next test.
                    if h.proc and h.proc.poll() is not None:
                        print("slate-guest exited with %d" % h.proc.returncode)
                        break
                    h.drop()
                    h.accept(5)
                    h.start_session()
        except Fail as e:
            failed += 1
            print("FAIL setup: %s" % e)
        finally:
            log = h.close()
        if not connect:
            lines = log.splitlines()
            print("slate-guest's output (%d lines):" % len(lines))
            for line in lines[:60]:
                print("  | " + line)
            if not lines or not lines[0].startswith("slate-guest ") or not lines[0].endswith(": ready"):
                print("FAIL: no ready line first")
                failed += 1
    print("%s: %d of %d tests failed" % ("FAIL" if failed else "PASS", failed, len(tests)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

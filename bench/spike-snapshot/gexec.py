#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""gexec.py SOCKET [--t0 EPOCH_MS] CMD...: the host end of the guest channel (tests/unit/guest-driver.py):
connect, HELLO, run CMD as root (sh -c), print its stdout; on stderr the ms from --t0 (or from the
script's start) to the connection, the guest's HELLO and the exec's EXIT."""
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location(
    "gd", os.path.join(os.environ.get("WT", "/work/wt-snapspike"), "tests/unit/guest-driver.py"))
gd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gd)
args = sys.argv[1:]
sock = args.pop(0)
t0 = time.time() * 1000
if args and args[0] == "--t0":
    args.pop(0)
    t0 = float(args.pop(0))
h = gd.Host(None, "/tmp", connect=sock)
h.accept(30)
tc = time.time() * 1000 - t0
h.start_session()
th = time.time() * 1000 - t0
s = h.run(["sh", "-c", " ".join(args)], wait_s=60, user="root")
te = time.time() * 1000 - t0
sys.stdout.buffer.write(s.out())
sys.stderr.write("gexec: connect %.0f ms, hello %.0f ms, exit %.0f ms, status %r\n" % (tc, th, te, s.exit()))

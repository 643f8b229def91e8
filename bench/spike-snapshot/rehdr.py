#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""rehdr.py BASE.sav NEW.xml OUT.sav [--align]: a copy of a libvirt QEMU save image (header "LibvirtQemudSave",
version 2: magic[16], version, data_len, was_running, compressed, cookieOffset, unused[14]; then
data_len bytes: XML NUL cookie NUL padding; then QEMU's migration stream) whose domain XML is NEW.xml,
padded to the same data_len so the stream keeps its offset (--align: padded so that the stream
starts at a multiple of 4096, the same data_len kept when it already does). The stream is cloned (FICLONERANGE) when
its offset is block aligned, else copied with copy_file_range. Prints how."""
import fcntl, os, struct, sys, time
base, newxml, out = sys.argv[1:4]
align = "--align" in sys.argv[4:]
t0 = time.monotonic()
fi = os.open(base, os.O_RDONLY)
h = os.pread(fi, 92, 0)
assert h[:16] in (b"LibvirtQemudSave",), h[:16]
ver, dlen, running, comp, cookie_off = struct.unpack("<5I", h[16:36])
data = os.pread(fi, dlen, 92)
cookie = data[cookie_off:data.index(b"\0", cookie_off)] if cookie_off else b""
xml = open(newxml, "rb").read().rstrip(b"\0")
nd = xml + b"\0"
new_cookie_off = len(nd) if cookie_off else 0
nd += cookie + b"\0" if cookie_off else b""
ndlen = dlen
if align:
    # The stream at a multiple of 4096 (at least 64 KiB of room, as libvirt leaves, for later edits).
    ndlen = (92 + len(nd) + 65536 + 4095) // 4096 * 4096 - 92
    if (92 + dlen) % 4096 == 0 and dlen >= len(nd):
        ndlen = dlen
if len(nd) > ndlen:
    sys.exit("new XML too large: %d > %d" % (len(nd), ndlen))
nd += b"\0" * (ndlen - len(nd))
nh = h[:16] + struct.pack("<5I", ver, ndlen, running, comp, new_cookie_off) + h[36:92]
fo = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.pwrite(fo, nh + nd, 0)
off = 92 + dlen
noff = 92 + ndlen
size = os.fstat(fi).st_size
how = "copy_file_range"
FICLONERANGE = 0x4020940d
blk = os.statvfs(out).f_bsize
if off % blk == 0 and noff == off:
    # struct file_clone_range { s64 src_fd; u64 src_offset, src_length, dest_offset; }
    fcntl.ioctl(fo, FICLONERANGE, struct.pack("<qQQQ", fi, off, 0, off))
    how = "FICLONERANGE"
else:
    o_in, o_out = off, noff
    while o_in < size:
        n = os.copy_file_range(fi, fo, size - o_in, o_in, o_out)
        if n <= 0:
            break
        o_in += n
        o_out += n
os.close(fo)
print("rehdr: stream at %d -> %d (%s) %d bytes, %s, %.0f ms" % (off, noff, "aligned" if off % blk == 0 else "unaligned", size - off, how, (time.monotonic() - t0) * 1000))

#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Writes the seeds of tests/fuzz/corpus/fuzz-savefile/: small libvirt save images (vm/savefile.h)
laid out as libvirt's qemu_saveimage.c writes them, and a few it would not. Run from the source
tree's top: python3 tests/fuzz/savefile-seeds.py"""

import os
import struct

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz-savefile")
XML = b"<domain type='qemu' id='1'><name>slate-base</name><uuid>x</uuid></domain>"
COOKIE = b"<cookie><cpu mode='custom' match='exact'/></cookie>"
STREAM = b"QEVM\x00\x00\x00\x03" + bytes((i * 37 + 11) & 0xFF for i in range(512))


def image(xml=XML, cookie=COOKIE, pad=64, version=2, compressed=0, magic=b"LibvirtQemudSave",
          data_len=None, cookie_off=None, stream=STREAM):
    data = xml + b"\0"
    off = 0
    if cookie is not None:
        off = len(data)
        data += cookie + b"\0"
    data += b"\0" * pad
    head = magic + struct.pack("<5I", version, len(data) if data_len is None else data_len, 1,
                               compressed, off if cookie_off is None else cookie_off)
    head += b"\0" * 56
    assert len(head) == 92
    return head + data + stream


SEEDS = {
    "valid-cookie": image(),
    "valid-no-cookie": image(cookie=None),
    "valid-aligned": image(pad=4096 - 92 - len(XML) - 1 - len(COOKIE) - 1),
    "valid-no-stream": image(pad=0, stream=b""),
    "bad-magic": image(magic=b"LibvirtQemudPart"),
    "version-3": image(version=3),
    "compressed-zstd": image(compressed=5),
    "cookie-in-xml": image(cookie_off=4),
    "data-past-file": image(data_len=1 << 16, stream=b""),
    "truncated": image()[:92 + 40],
    "header-only": image()[:92],
}

os.makedirs(DIR, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(DIR, name), "wb") as f:
        f.write(data)

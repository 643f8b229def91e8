#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""mkxml.py IN OUT [--name N] [--uuid U] [--vda P] [--vdb P] [--log P] [--chan P] [--genid G|auto|drop]
[--memory MIB] [--meta-ws NAME]: rewrite a libvirt domain XML (save-image-dumpxml or dumpxml)."""
import argparse
import xml.etree.ElementTree as ET

ET.register_namespace("slate", "https://slate.dev/xmlns/libvirt/1")
ap = argparse.ArgumentParser()
ap.add_argument("inp")
ap.add_argument("out")
for o in ("name", "uuid", "vda", "vdb", "log", "chan", "genid", "memory", "meta_ws", "meta_uuid"):
    ap.add_argument("--" + o.replace("_", "-"))
a = ap.parse_args()
t = ET.parse(a.inp)
d = t.getroot()
d.attrib.pop("id", None)
if a.name:
    d.find("name").text = a.name
if a.uuid:
    d.find("uuid").text = a.uuid
if a.memory:
    for tag in ("memory", "currentMemory"):
        e = d.find(tag)
        e.set("unit", "MiB")
        e.text = a.memory
for disk in d.findall("devices/disk"):
    dev = disk.find("target").get("dev")
    val = a.vda if dev == "vda" else a.vdb if dev == "vdb" else None
    if val:
        disk.find("source").set("file", val)
if a.log:
    for tag in ("serial", "console"):
        for e in d.findall("devices/" + tag):
            lg = e.find("log")
            if lg is not None:
                lg.set("file", a.log)
if a.chan:
    for e in d.findall("devices/channel"):
        if e.find("target").get("name") == "org.slate.channel.0":
            e.find("source").set("path", a.chan)
if a.genid:
    g = d.find("genid")
    if a.genid == "drop":
        if g is not None:
            d.remove(g)
    else:
        if g is None:
            g = ET.Element("genid")
            # after <uuid>
            idx = list(d).index(d.find("uuid")) + 1
            d.insert(idx, g)
        g.text = None if a.genid == "auto" else a.genid
ns = "{https://slate.dev/xmlns/libvirt/1}workspace"
for m in d.iter(ns):
    if a.meta_ws:
        m.set("name", a.meta_ws)
    if a.meta_uuid:
        m.set("uuid", a.meta_uuid)
t.write(a.out, encoding="unicode")

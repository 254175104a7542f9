#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_proto: well-formed frames of each kind and a few broken ones."""
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def attr(tag, value):
    return struct.pack("<HI", tag, len(value)) + value


def frame(type_, payload, flags=0, op=1):
    return struct.pack("<IHHI", len(payload), type_, flags, op) + payload


seeds = {
    "hello": frame(1, attr(1, struct.pack("<I", 1))),
    "exec": frame(3, attr(3, b"python3") + attr(3, b"-c") + attr(5, b"A=b") + attr(8, struct.pack("<Q", 120000))),
    "stat": frame(10, attr(14, b"/work/a.csv")),
    "data_eof": frame(32, b"\x00\xffbinary", flags=1),
    "exit": frame(69, attr(23, struct.pack("<I", 3))),
    "two_frames": frame(2, b"") + frame(10, attr(14, b"/x")),
    "nul_in_path": frame(10, attr(14, b"/a\x00b")),
    "attr_overrun": frame(10, struct.pack("<HI", 14, 1000) + b"/x"),
    "truncated": frame(3, attr(3, b"ls"))[:-1],
    "reserved_flag": frame(2, b"", flags=2),
    "oversized": struct.pack("<IHHI", 1 << 30, 3, 0, 1),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)

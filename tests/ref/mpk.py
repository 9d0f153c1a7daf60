"""Minimal msgpack encoder and record-stream writer for the fixture scripts.

Maps of str keys with str/int/float64/bool/bin values, as skpo records use;
streams are written with the `zstd` command (no Python msgpack/zstd needed).
"""
import struct
import subprocess


def pack(v):
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes([v])
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        return b"\xd9" + bytes([len(b)]) + b if len(b) < 256 else b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, bytes):
        if len(v) < 256:
            return b"\xc4" + bytes([len(v)]) + v
        return b"\xc5" + struct.pack(">H", len(v)) + v if len(v) < 65536 else b"\xc6" + struct.pack(">I", len(v)) + v
    if isinstance(v, dict):
        assert len(v) < 16
        return bytes([0x80 | len(v)]) + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(type(v))


def i32s(a):
    return struct.pack("<%di" % len(a), *a)


def f32s(a):
    return struct.pack("<%df" % len(a), *a)


def write_stream(path, recs, tool="make_fixtures.py", level=None, meta=True):
    """A meta record (unless meta=False), then recs, as one checksummed zstd stream at path."""
    head = [{"kind": "meta", "schema": 1, "tool": tool}] if meta else []
    raw = b"".join(pack(r) for r in head + recs)
    opts = ["-%d" % level] if level else []
    subprocess.run(["zstd", "-q", "-f", "--check"] + opts + ["-o", path], input=raw, check=True)

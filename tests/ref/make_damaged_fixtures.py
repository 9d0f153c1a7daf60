#!/usr/bin/env python3
"""Damaged record streams for the input-validation tests (tests/sh/t_damaged.sh).

Each file is otherwise well formed; one record carries one defect a tool must
refuse with `skpo-TOOL: what (where)` and a nonzero exit.
Run from the repository root:  python3 tests/ref/make_damaged_fixtures.py
"""
import math, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpk

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "damaged")
_pack = mpk.pack


def pack(v):  # mpk plus nil
    if v is None:
        return b"\xc0"
    if isinstance(v, dict):
        assert len(v) < 16
        return bytes([0x80 | len(v)]) + b"".join(pack(k) + pack(x) for k, x in v.items())
    return _pack(v)


mpk.pack = pack


def full(i, **kw):
    r = dict(kind="full", pid="p%d" % (i // 2), uid="p%d:1:%d" % (i // 2, i % 2), gid="p%d:1" % (i // 2),
             source="math", prompt=mpk.i32s([1, 2, 3]), tokens=mpk.i32s([4, 5]), logp=mpk.f32s([-0.5, -0.7]),
             reward=1.0 if i % 2 else -1.0, correct=bool(i % 2), adv=0.5 if i % 2 else -0.5, weight=1.0)
    for k, v in kw.items():
        if v is ...:
            del r[k]
        else:
            r[k] = v
    return r


def down(i, **kw):
    r = full(i, **kw)
    r["kind"] = "down"
    r["gid"] = "u%d" % (i // 2)
    return r


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = {
        # skpo-eval reads `reward` when `correct` is absent: a NaN must not count as wrong.
        "nan-reward": [full(0, correct=...), full(1, correct=..., reward=math.nan)],
        "inf-adv": [full(0), full(1, adv=math.inf)],
        "nan-weight": [full(0), full(1, weight=math.nan)],
        "nil-kind": [full(0), dict(full(1), kind=None)],
        "full-no-tokens": [full(0), full(1, tokens=..., logp=...)],
        "full-no-prompt": [full(0), full(1, prompt=...)],
        "down-no-tokens": [down(0), down(1, tokens=..., logp=...)],
    }
    for name, recs in cases.items():
        mpk.write_stream(os.path.join(OUT, name + ".msgpack.zst"), recs, tool="make_damaged_fixtures.py")
        print("wrote", name, file=sys.stderr)


if __name__ == "__main__":
    main()

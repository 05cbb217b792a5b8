#!/usr/bin/env python3
"""Writes crates/kernels/tests/fixtures/half_conversions.json: float32 bit patterns of
every class (zeros, float32 subnormals, float16 subnormals and the smallest of them,
values that round to the float16 and bfloat16 overflow thresholds, ties at both
formats' half-ulps, NaNs with payloads, infinities, and a random sample) with the
float16 bits NumPy and the bfloat16 bits ml_dtypes give for them; and float16 and
bfloat16 bit patterns (every 13th, plus all specials) with the float32 bits they widen to.

    python3 -m pip install numpy ml_dtypes
    python3 scripts/make_half_fixtures.py
"""
import json
import pathlib

import ml_dtypes
import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/kernels/tests/fixtures/half_conversions.json"


def f32_bits(values):
    return [int(b) for b in np.array(values, dtype=np.float32).view(np.uint32)]


def f32_patterns():
    bits = set()
    u = lambda *xs: bits.update(int(x) & 0xFFFFFFFF for x in xs)
    u(0x00000000, 0x80000000)  # signed zeros
    u(0x00000001, 0x007FFFFF, 0x80000001, 0x807FFFFF)  # float32 subnormals
    u(0x7F800000, 0xFF800000)  # infinities
    u(0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0x7FC00001, 0xFF812345)  # NaNs
    u(0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x80800000)  # float32 extremes
    # Around float16's limits: max (65504), the overflow threshold (65520), its
    # smallest normal (2^-14) and subnormal (2^-24), and half of that (2^-25).
    for v in [65504.0, 65519.99, 65520.0, 65536.0, 2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-26]:
        for s in (1, -1):
            b = f32_bits([s * v])[0]
            u(b - 1, b, b + 1)
    # Around bfloat16's largest finite value and the float32 max.
    for b in f32_bits([3.3895314e38, 3.389531e38]):
        u(b - 1, b, b + 1)
    # Ties: for float16, 13 low mantissa bits of float32 are cut; for bfloat16, 16.
    for e in (0x3F800000, 0x40400000, 0x38800000, 0x33800000, 0x47000000):
        for cut in (13, 16):
            half = 1 << (cut - 1)
            for lsb in (0, 1 << cut):
                base = e | lsb
                u(base + half - 1, base + half, base + half + 1, base | (0x80000000))
    rng = np.random.default_rng(20261126)
    u(*rng.integers(0, 1 << 32, size=3000, dtype=np.uint64))
    # Exponents inside float16's range, where most real values are.
    u(*(rng.integers(0x33000000, 0x47800000, size=2000, dtype=np.uint64)))
    return sorted(bits)


def main():
    pats = f32_patterns()
    x = np.array(pats, dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        f16 = x.astype(np.float16).view(np.uint16)
        bf16 = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    narrow = [[int(a), int(b), int(c)] for a, b, c in zip(pats, f16, bf16)]
    specials = [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7C01, 0x7E00,
                0xFE00, 0x007F, 0x0080, 0x7F7F, 0x7F80, 0xFF80, 0x7F81, 0x7FC0, 0xFFFF]
    halves = sorted(set(list(range(0, 1 << 16, 13)) + specials))
    h = np.array(halves, dtype=np.uint16)
    wide_f16 = h.view(np.float16).astype(np.float32).view(np.uint32)
    wide_bf16 = h.view(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32)
    widen = [[int(a), int(b), int(c)] for a, b, c in zip(halves, wide_f16, wide_bf16)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "generator": f"scripts/make_half_fixtures.py (numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__})",
        "narrow": narrow,
        "widen": widen,
    }, separators=(",", ":")) + "\n")
    print(f"{OUT}: {len(narrow)} float32 patterns, {len(widen)} 16-bit patterns")


if __name__ == "__main__":
    main()

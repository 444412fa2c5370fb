#!/usr/bin/env python3
"""Writes tests/fixtures/quant/*.bin: raw GGUF blocks and the f32 values gguf-py's reference
(de)quantizers give for them, so src/kernels/cpu/quant_test.cc can check our dequantizers
(and the Q8_0 / Q8_K quantizers) bit for bit against an independent implementation.

  .venv-tools/bin/python tools/make_quant_fixtures.py   # rerun reproduces the files exactly

Formats gguf-py can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16, F16) are quantized from
fixed-seed random f32 data. For the k-quants (gguf-py can only dequantize them) the blocks are
random bytes with finite f16 super-block scales, dequantized by gguf-py. Q8_K (an activation
format gguf-py lacks) is quantized here with numpy following ggml's quantize_row_q8_K_ref.

File layout (little-endian):
  magic "ZQF1"; u32 name length; name (e.g. "Q4_K"); u64 n (elements);
  u64 n_input; n_input f32 (the data that was quantized; 0 when blocks were built directly);
  u64 raw length; raw block bytes; n f32 (reference dequantized values).
"""
import pathlib
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "quant"
SEED = 20240611


def block_varied_data(rng, n, block):
    """Normal data whose magnitude varies per block, plus an all-zero block and exact ties."""
    x = rng.standard_normal(n).astype(np.float32)
    scales = np.exp(rng.uniform(-6, 3, n // block)).astype(np.float32)
    x = (x.reshape(-1, block) * scales[:, None]).reshape(-1)
    x[:block] = 0.0  # all-zero block: d = 0
    # A block of small integers: x * (1/d) lands on exact .5 ties for the rounding rules.
    x[block : 2 * block] = rng.integers(-254, 255, block).astype(np.float32) / 2.0
    return x.astype(np.float32)


def write(name, n, inputs, raw, deq):
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    deq = np.ascontiguousarray(deq, dtype=np.float32).reshape(-1)
    assert deq.size == n, (name, deq.size, n)
    inputs = np.zeros(0, np.float32) if inputs is None else np.ascontiguousarray(inputs, np.float32)
    nb = name.encode()
    with open(OUT / f"{name.lower()}.bin", "wb") as f:
        f.write(b"ZQF1")
        f.write(struct.pack("<I", len(nb)))
        f.write(nb)
        f.write(struct.pack("<QQ", n, inputs.size))
        f.write(inputs.tobytes())
        f.write(struct.pack("<Q", raw.size))
        f.write(raw.tobytes())
        f.write(deq.tobytes())


def quantized_by_gguf(rng, qtype, n, block):
    x = block_varied_data(rng, n, block)
    raw = quants.quantize(x.reshape(1, -1), qtype)
    deq = quants.dequantize(raw, qtype)
    write(qtype.name, n, x, raw, deq)


def random_f16_scale(rng, count, lo, hi):
    return np.exp(rng.uniform(lo, hi, count)).astype(np.float16).view(np.uint8).reshape(count, 2)


def kquant_from_bytes(rng, qtype, n_blocks):
    block_size, type_size = quants.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n_blocks, type_size), dtype=np.uint8)
    if qtype in (T.Q4_K, T.Q5_K):  # d, dmin first
        raw[:, 0:2] = random_f16_scale(rng, n_blocks, -8, 0)
        raw[:, 2:4] = random_f16_scale(rng, n_blocks, -9, -1)
    elif qtype == T.Q6_K:  # d last
        raw[:, -2:] = random_f16_scale(rng, n_blocks, -10, -2)
    deq = quants.dequantize(raw.reshape(1, -1), qtype)
    write(qtype.name, n_blocks * block_size, None, raw, deq)


def plain_from_bits(rng, qtype, n):
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    if qtype == T.F16:
        bits[(bits & 0x7C00) == 0x7C00] &= 0x3FFF  # keep finite (inf/NaN payloads aside)
        deq = quants.dequantize(bits, qtype)
    else:
        bits[(bits & 0x7F80) == 0x7F80] &= 0x3FFF
        deq = quants.dequantize(bits.view(np.uint8).reshape(1, -1), qtype)
    write(qtype.name, n, None, bits, deq)


def nearest_int(v):
    """ggml's nearest_int: round half to even in f32."""
    return np.rint(v.astype(np.float32)).astype(np.int32)


def q8_k(rng, n_blocks):
    """ggml's quantize_row_q8_K_ref in numpy: iscale = -127/max (signed max-magnitude element,
    first occurrence), q = min(127, nearest_int(iscale*x)), bsums of 16, d = 1/iscale."""
    n = n_blocks * 256
    x = block_varied_data(rng, n, 256).reshape(n_blocks, 256)
    x[2, 7] = -np.abs(x[2]).max() * 1.0  # negative max-magnitude element first ...
    x[2, 9] = -x[2, 7]  # ... and a later tie of the other sign
    dt = np.dtype([("d", "<f4"), ("qs", "i1", 256), ("bsums", "<i2", 16)])
    out = np.zeros(n_blocks, dt)
    deq = np.zeros((n_blocks, 256), np.float32)
    for i in range(n_blocks):
        amax = np.abs(x[i]).max()
        if amax == 0:
            continue
        mx = x[i][np.argmax(np.abs(x[i]) == amax)]
        iscale = np.float32(-127.0) / np.float32(mx)
        q = np.minimum(127, nearest_int(np.float32(iscale) * x[i])).astype(np.int8)
        out[i]["qs"] = q
        out[i]["bsums"] = q.reshape(16, 16).astype(np.int32).sum(axis=1).astype(np.int16)
        out[i]["d"] = np.float32(1.0) / np.float32(iscale)
        deq[i] = out[i]["d"] * q.astype(np.float32)
    write("Q8_K", n, x.reshape(-1), out.view(np.uint8), deq)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        quantized_by_gguf(rng, qtype, 32 * 64, 32)
    for qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        kquant_from_bytes(rng, qtype, 8)
    for qtype in (T.F16, T.BF16):
        plain_from_bits(rng, qtype, 1024)
    q8_k(rng, 8)
    total = sum(p.stat().st_size for p in OUT.glob("*.bin"))
    print(f"wrote {len(list(OUT.glob('*.bin')))} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()

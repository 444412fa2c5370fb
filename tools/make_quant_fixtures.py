#!/usr/bin/env python3
"""Writes tests/fixtures/quant/*.bin: raw GGUF blocks and the f32 values gguf-py's reference
(de)quantizers give for them, so src/kernels/cpu/quant_test.cc can check our dequantizers
(and the Q8_0 / Q8_K quantizers) bit for bit against an independent implementation.

  .venv-tools/bin/python tools/make_quant_fixtures.py   # rerun reproduces the files exactly

Formats gguf-py can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16, F16) are quantized from
fixed-seed random f32 data. For the k-quants (gguf-py can only dequantize them) the blocks are
random bytes with finite f16 super-block scales, dequantized by gguf-py. Q8_K (an activation
format gguf-py lacks) is quantized here with numpy following ggml's quantize_row_q8_K_ref.

When llama-cpp-python is installed (it bundles ggml's CPU backend), ggml_cpu.bin also records
what ggml itself computes on this machine: its activation quantizers' bytes (quantize_row_q8_0,
q8_1, q8_K) and its vec_dot results for every block format, so the tests can check our
quantizers byte for byte and our dot products against ggml's. (Without llama-cpp-python the
existing ggml_cpu.bin is left as it is.)

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


def write_blobs(path, blobs):
    """Named byte strings: magic "ZQB1"; u32 count; per entry u32 name length, name, u64 size,
    bytes."""
    with open(path, "wb") as f:
        f.write(b"ZQB1")
        f.write(struct.pack("<I", len(blobs)))
        for name, data in blobs.items():
            data = np.ascontiguousarray(data).view(np.uint8).reshape(-1).tobytes()
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<Q", len(data)))
            f.write(data)


def load_ggml_cpu():
    import ctypes
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None:
        return None
    lib_dir = pathlib.Path(spec.origin).parent / "lib"
    ctypes.CDLL(str(lib_dir / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(lib_dir / "libggml-cpu.so"))
    lib.ggml_cpu_init()  # fills the f16 conversion tables the kernels use
    return lib


# Must match ggml_cpu.bin's reader in src/kernels/cpu/quant_test.cc.
GGML_K, GGML_ROWS, GGML_TOKENS = 768, 5, 3
GGML_DOTS = {  # weight type -> (vec_dot symbol, activation quantizer, activation block bytes)
    T.Q4_0: ("ggml_vec_dot_q4_0_q8_0", "quantize_row_q8_0", 34),
    T.Q4_1: ("ggml_vec_dot_q4_1_q8_1", "quantize_row_q8_1", 36),
    T.Q5_0: ("ggml_vec_dot_q5_0_q8_0", "quantize_row_q8_0", 34),
    T.Q5_1: ("ggml_vec_dot_q5_1_q8_1", "quantize_row_q8_1", 36),
    T.Q8_0: ("ggml_vec_dot_q8_0_q8_0", "quantize_row_q8_0", 34),
    T.Q4_K: ("ggml_vec_dot_q4_K_q8_K", "quantize_row_q8_K", 292),
    T.Q5_K: ("ggml_vec_dot_q5_K_q8_K", "quantize_row_q8_K", 292),
    T.Q6_K: ("ggml_vec_dot_q6_K_q8_K", "quantize_row_q8_K", 292),
}


def ggml_quantize(lib, fn_name, x, block_elems, block_bytes):
    import ctypes

    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros(x.size // block_elems * block_bytes, np.uint8)
    fn = getattr(lib, fn_name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = None
    fn(x.ctypes.data, out.ctypes.data, x.size)
    return out


def ggml_cpu_fixture(rng):
    import ctypes

    lib = load_ggml_cpu()
    if lib is None:
        print("llama-cpp-python not installed: ggml_cpu.bin left as it is")
        return
    blobs = {"shape": np.array([GGML_K, GGML_ROWS, GGML_TOKENS], np.uint32)}
    for fn_name, elems, nbytes in (("quantize_row_q8_0", 32, 34), ("quantize_row_q8_1", 32, 36),
                                   ("quantize_row_q8_K", 256, 292)):
        x = block_varied_data(rng, 4096, 256)
        x[300:332] = rng.integers(-8, 9, 32).astype(np.float32) * np.float32(0.25)  # ties
        blobs[fn_name + ".input"] = x
        blobs[fn_name + ".ggml"] = ggml_quantize(lib, fn_name, x, elems, nbytes)
    for qtype, (dot_name, quant_name, act_bytes) in GGML_DOTS.items():
        block_size, type_size = quants.GGML_QUANT_SIZES[qtype]
        if qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
            raw = rng.integers(0, 256, (GGML_ROWS * GGML_K // block_size, type_size), dtype=np.uint8)
            if qtype == T.Q6_K:
                raw[:, -2:] = random_f16_scale(rng, raw.shape[0], -10, -2)
            else:
                raw[:, 0:2] = random_f16_scale(rng, raw.shape[0], -8, 0)
                raw[:, 2:4] = random_f16_scale(rng, raw.shape[0], -9, -1)
            w = raw.reshape(GGML_ROWS, -1)
        else:
            w = quants.quantize(block_varied_data(rng, GGML_ROWS * GGML_K, 32).reshape(GGML_ROWS, -1), qtype)
        x = rng.standard_normal((GGML_TOKENS, GGML_K)).astype(np.float32)
        act_elems = 256 if act_bytes == 292 else 32
        act = np.stack([ggml_quantize(lib, quant_name, x[t], act_elems, act_bytes) for t in range(GGML_TOKENS)])
        fn = getattr(lib, dot_name)
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = None
        dots = np.zeros((GGML_ROWS, GGML_TOKENS), np.float32)
        out = np.zeros(1, np.float32)
        w = np.ascontiguousarray(w)
        for r in range(GGML_ROWS):
            for t in range(GGML_TOKENS):
                fn(GGML_K, out.ctypes.data, 0, w[r].ctypes.data, 0, act[t].ctypes.data, 0, 1)
                dots[r, t] = out[0]
        blobs[qtype.name + ".weights"] = w
        blobs[qtype.name + ".x"] = x
        blobs[qtype.name + ".act"] = act
        blobs[qtype.name + ".dots"] = dots
    write_blobs(OUT / "ggml_cpu.bin", blobs)


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
    ggml_cpu_fixture(np.random.default_rng(SEED + 1))
    total = sum(p.stat().st_size for p in OUT.glob("*.bin"))
    print(f"wrote {len(list(OUT.glob('*.bin')))} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Instructions per output element of the multi-token matmul kernels, counted by callgrind.

Wall-clock timings on a shared machine are noisy; instruction counts are not. Each case runs
one iteration of a zen_kernels_bench Gemm benchmark (1 thread) under callgrind, counting only
inside the prefill driver (gemm_rows: panel conversion and tiles; activation quantization is
excluded), and divides by n * tokens. The same for the row-interleaved kernels (packed.h,
counting inside packed_groups) in the second pair of columns.

  python3 bench/gemm_instructions.py [--bench build/zen_kernels_bench] [--filter Q5_0]
  python3 bench/gemm_instructions.py --decode   # one token: instructions per weight, gemv_rows vs packed
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

CASES = [  # dtype, n, k (the default model's shapes; see bench/kernels_bench.cc)
    ("Q5_0", 896, 896), ("Q5_0", 4864, 896),
    ("Q8_0", 896, 896), ("Q8_0", 4864, 896),
    ("Q4_0", 896, 896), ("Q4_0", 4864, 896),
    ("Q4_K", 896, 4864), ("Q6_K", 896, 4864),
]

PACKED_CASES = [("Q5_0", 4864, 896), ("Q8_0", 4864, 896), ("Q4_0", 4864, 896), ("Q4_K", 896, 4864),
                ("Q6_K", 896, 4864)]  # the shapes bench/kernels_bench.cc registers for Packed/
DECODE_CASES = PACKED_CASES + [("NVFP4", 4864, 896), ("FP8", 4864, 896)]  # bench/fpquant_bench.cc


def instructions_per_iteration(bench, name, region, tmp):
    """Instructions callgrind counts inside `region` (a function glob) per iteration of benchmark `name`."""
    out = os.path.join(tmp, "cg.out")
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--toggle-collect={region}", f"--callgrind-out-file={out}",
         bench, f"--benchmark_filter=^{re.escape(name)}", "--benchmark_min_time=0", "--benchmark_format=json"],
        capture_output=True, text=True, check=True)
    iterations = sum(b["iterations"] for b in json.loads(run.stdout)["benchmarks"])
    with open(out) as f:
        total = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
    return total / iterations


def count(bench, dtype, n, k, tokens, tmp, packed=False):
    if packed:
        name, region = f"Packed/{dtype}/n:{n}/k:{k}/threads:1/tokens:{tokens}/dram:0/", "*packed_groups*"
    else:
        name, region = f"Gemm/{dtype}/n:{n}/k:{k}/threads:1/simd:1/tokens:{tokens}/", "*gemm_rows*"
    return instructions_per_iteration(bench, name, region, tmp) / (n * tokens)


def count_decode(bench, dtype, n, k, tmp, packed):
    """Instructions per weight of one decode matmul (1 thread): the per-row GEMV (inside gemv_rows,
    weights L3-resident) or the packed kernels (inside packed_groups)."""
    if packed:
        name, region = f"Packed/{dtype}/n:{n}/k:{k}/threads:1/tokens:1/dram:1/", "*packed_groups*"
    else:  # FP8 has only the per-row (f32) path; its benchmark names end in the scale block
        block = "block:0/" if dtype == "FP8" else ""
        region = "*gemv_avx2*" if dtype in ("FP8", "NVFP4") else "*gemv_rows*"  # f32 paths: fp_gemm's gemv
        name = f"Gemv/{dtype}/n:{n}/k:{k}/threads:1/simd:1/dram:0/{block}"
    return instructions_per_iteration(bench, name, region, tmp) / (n * k)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/zen_kernels_bench")
    ap.add_argument("--filter", default="")
    ap.add_argument("--decode", action="store_true", help="one-token matmuls, instructions per weight")
    args = ap.parse_args()
    if args.decode:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"{'case':28} {'per-row':>8} {'packed':>8}  (instructions per weight, one token)")
            for dtype, n, k in DECODE_CASES:
                if args.filter in dtype:
                    per = [count_decode(args.bench, dtype, n, k, tmp, p) for p in (False, True)[:1 if dtype == "FP8" else 2]]
                    print(f"{dtype} {n}x{k}".ljust(28) + "".join(f" {v:8.3f}" for v in per), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'case':28} {'T=16':>8} {'T=64':>8} {'packed16':>9} {'packed64':>9}  (instructions per output element)")
        for dtype, n, k in CASES:
            if args.filter not in dtype:
                continue
            per = [count(args.bench, dtype, n, k, t, tmp) for t in (16, 64)]
            if (dtype, n, k) in PACKED_CASES:
                per += [count(args.bench, dtype, n, k, t, tmp, packed=True) for t in (16, 64)]
            print(f"{dtype} {n}x{k}".ljust(28) + "".join(f" {v:8.1f}" for v in per), flush=True)


if __name__ == "__main__":
    main()

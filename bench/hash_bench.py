#!/usr/bin/env python3
"""Hashing speed of `zen hash` against `sha256sum` on the same files, alternated in one run
(timings on a shared machine are noisy: each round runs every variant once, and the table
gives the median and the ratio to sha256sum). The files are read once first, so every variant
hashes from the page cache.

    .venv/bin/python bench/hash_bench.py [MODEL ...] [--rounds 5]
"""
import argparse
import pathlib
import re
import statistics
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
ZEN = ROOT / "build" / "zen"


def timed(cmd):
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, out


def weight_files(model):
    out = subprocess.run([str(ZEN), "hash", str(model)], capture_output=True, text=True, check=True).stdout
    folder = model if model.is_dir() else model.parent
    return [folder / m.group(1) for m in re.finditer(r"^[0-9a-f]{64}  (\S+)\t\(weights\)$", out, re.M)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", type=pathlib.Path, default=[ROOT / "models" / "default" / "model.gguf"])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    for model in args.models:
        files = weight_files(model)
        size = sum(f.stat().st_size for f in files)
        for f in files:  # into the page cache
            subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)
        variants = {
            "sha256sum": ["sha256sum", *map(str, files)],
            "zen hash --no-file-hashes --threads 1": [str(ZEN), "hash", str(model), "--no-file-hashes", "--threads", "1"],
            "zen hash --no-file-hashes": [str(ZEN), "hash", str(model), "--no-file-hashes"],
            "zen hash (root + file SHA-256s)": [str(ZEN), "hash", str(model)],
        }
        times = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, cmd in variants.items():
                times[name].append(timed(cmd)[0])
        base = statistics.median(times["sha256sum"])
        print(f"{model} ({size / 1e9:.3f} GB in {len(files)} weight file(s)), median of {args.rounds} rounds, wall time per process:")
        for name, ts in times.items():
            t = statistics.median(ts)
            print(f"  {name:40s} {t:7.3f} s  {size / 1e9 / t:6.2f} GB/s  {base / t:6.2f}x sha256sum")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What a DFlash block or MTP drafting costs on this machine, at chosen acceptance (synthetic).

No trained drafter or MTP head for a model that runs here exists on PyPI, so this measures cost,
not acceptance: the drafter (random weights of the published shape, from
tools/make_dflash_bench_drafter.py) or the checkpoint's MTP head (random, from
tools/make_bench_models.py --sizes 0.8b-mtp) runs for real and the verifier accepts its drafts by
chance at per-position rate a (vLLM's rejection_sample_method "synthetic",
synthetic_acceptance_rates = a, a^2, ...). Output text is therefore not the model's; only the
speed means anything.

Cells: no speculation, then for each a in --acceptance and each controller (adaptive, and fixed
at --k) `zen bench` decode throughput at each --concurrency; one `zen run` per a at concurrency 1
for the proposer's time by part per call (DFlash: draft layers, output head rows, context K/V;
MTP: the head's layer, output head rows) and the target's forward times. Configs alternate within a repeat and repeats rotate the order (timings here are
noisy); the table gives the median over repeats of each cell's decode tok/s over the baseline's
of the same repeat and concurrency.

Run (after tools/make_bench_models.py --sizes 0.8b --quants q4_k_m and the drafter):
  .venv/bin/python bench/spec_cost.py --model models/bench/qwen35-0.8b-q4_k_m.gguf \
      --drafter models/bench/dflash-0.8b [--quantization q8_0] [--concurrency 1,4] [--repeats 2]
  .venv/bin/python bench/spec_cost.py --method mtp --model models/bench/qwen35-0.8b-mtp-q4_k_m.gguf
"""
import argparse
import json
import pathlib
import re
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
ZEN = ROOT / "build" / "zen"


def spec_config(args, a, adaptive):
    rates = [round(a ** (i + 1), 6) for i in range(15)]
    c = {"method": args.method, "adaptive": adaptive, "rejection_sample_method": "synthetic",
         "synthetic_acceptance_rates": rates}
    if args.method == "dflash":
        c["model"] = args.drafter
    if not adaptive:
        c["num_speculative_tokens"] = args.k
    if args.quantization:
        c["quantization"] = args.quantization
    return c


def bench(args, config):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [ZEN, "bench", "--model", args.model, "--concurrency", args.concurrency, "--workloads",
               f"w:{args.prompt_tokens}:{args.output_tokens}", "--repeats", "1", "--no-prefix-table", "--json", out.name]
        if config is not None:
            cmd += ["--speculative-config", json.dumps(config)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        cells = json.loads(pathlib.Path(out.name).read_text())["cells"]
    return {c["concurrency"]: c["decode_tokens_per_second"] for c in cells}


def cost_split(args, a):
    r = subprocess.run([ZEN, "run", "--model", args.model, "--prompt", "a b c d e f g h", "--max-tokens",
                        str(args.output_tokens), "--ignore-eos", "--speculative-config",
                        json.dumps(spec_config(args, a, False))], check=True, capture_output=True, text=True)
    line = next(l for l in r.stderr.splitlines() if l.startswith("proposer time:"))[len("proposer time:"):]
    parts = {k.strip(): v for k, v in re.findall(r"([a-zA-Z/ ]+?) ([0-9.]+)(?: s)?", line)}
    forward = next(l for l in r.stderr.splitlines() if l.startswith("step time by tokens"))
    calls = float(parts.pop("blocks", None) or parts.pop("calls"))
    return {k: 1000 * float(v) / calls for k, v in parts.items()}, forward


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--method", default="dflash", choices=["dflash", "mtp"])
    ap.add_argument("--drafter", help="dflash: the drafter folder")
    ap.add_argument("--quantization", default="", help='"q8_0": requantize the drafter for the int8 kernels')
    ap.add_argument("--acceptance", default="0.2,0.5,0.8")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--k", type=int, default=4, help="k of the fixed (non-adaptive) cells")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    if args.method == "dflash" and not args.drafter:
        ap.error("--method dflash needs --drafter")
    rates = [float(x) for x in args.acceptance.split(",")]
    configs = [("none", None)] + [(f"a={a} {'adaptive' if ad else f'k={args.k}'}", spec_config(args, a, ad))
                                  for a in rates for ad in (True, False)]
    ratios = {}  # (label, concurrency) -> [ratio per repeat]
    for rep in range(args.repeats):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        tps = {label: bench(args, config) for label, config in order}
        for label, by_c in tps.items():
            for c, v in by_c.items():
                ratios.setdefault((label, c), []).append(v / tps["none"][c])
                if label == "none":
                    ratios.setdefault(("none tok/s", c), []).append(v)
    levels = sorted({c for _, c in ratios})
    drafter = f"drafter {args.drafter}{' (q8_0)' if args.quantization else ''}" if args.method == "dflash" else "MTP head"
    print(f"model {args.model}, {drafter}, "
          f"{args.repeats} repeats, decode tok/s over no speculation (median):")
    print(f"{'config':24}" + "".join(f"{'c' + str(c):>10}" for c in levels))
    for label in ["none tok/s"] + [l for l, _ in configs if l != "none"]:
        print(f"{label:24}" + "".join(f"{statistics.median(ratios[(label, c)]):10.2f}" for c in levels))
    for a in rates:
        split, forward = cost_split(args, a)
        print(f"a={a}: per drafting call (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in split.items()) + f"; {forward}")


if __name__ == "__main__":
    main()

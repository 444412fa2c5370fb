#!/usr/bin/env python3
"""Speed of zen against llama.cpp (llama-cpp-python) on the same GGUF files.

For each model both engines get the same prompt (the first N tokens of a real text), the same
thread count, greedy decoding with EOS ignored, f32 KV cache. Repetitions alternate between the
engines (and which goes first) and medians are reported with the ratio zen / llama.cpp (> 1 means
zen is faster). Decode rows also give the roofline share: weight bytes streamed per token x
tok/s / measured memory bandwidth (bench/bandwidth.cc).

  .venv-tools/bin/python bench/vs_llamacpp.py                 # default model + models/bench/*.gguf
  .venv-tools/bin/python bench/vs_llamacpp.py --quick --models 'qwen3-1.7b-*'
See bench/README.md.
"""
import argparse
import contextlib
import fnmatch
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "models/default/model.gguf"
BENCH_DIR = ROOT / "models/bench"
PROMPT_SOURCE = pathlib.Path("/usr/share/common-licenses/GPL-3")


def first_existing(*paths):
    for p in paths:
        if p.exists():
            return p
    return paths[-1]


def find_models(patterns):
    """The default model and every bench model present, or those matching --models patterns
    (a path, a file name, or a glob on the file name)."""
    available = [p for p in [DEFAULT_MODEL] if p.exists()] + sorted(BENCH_DIR.glob("*.gguf"))
    if not patterns:
        return available
    chosen = []
    for pat in patterns:
        if pathlib.Path(pat).is_file():
            chosen.append(pathlib.Path(pat).resolve())
            continue
        hits = [p for p in available if fnmatch.fnmatch(p.name, pat) or fnmatch.fnmatch(p.name, pat + ".gguf")
                or fnmatch.fnmatch(str(p.relative_to(ROOT)), pat)]
        if not hits:
            sys.exit(f"--models: nothing matches {pat!r}; available: {[p.name for p in available]}")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def weight_bytes_per_token(model):
    """Bytes of weights read to decode one token: every tensor except the embedding table (only
    one row of it is read), plus the lm_head once -- output.weight, or the embedding when tied."""
    from gguf import GGUFReader
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(str(model)).tensors}
    total = sum(n for name, n in sizes.items() if name != "token_embd.weight")
    if "output.weight" not in sizes:
        total += sizes.get("token_embd.weight", 0)
    return total


def measure_bandwidth(threads):
    """GB/s of a streaming read with `threads` threads, from zen_bandwidth; None if not built."""
    candidates = [ROOT / "build-lead/zen_bandwidth", ROOT / "build/zen_bandwidth"] + sorted(ROOT.glob("build*/zen_bandwidth"))
    exe = next((p for p in candidates if p.exists()), None)
    if exe is None:
        print("note: zen_bandwidth not built (ninja -C build zen_bandwidth): no roofline column", file=sys.stderr)
        return None
    out = subprocess.run([str(exe), "--threads", str(threads), "--reps", "8"], capture_output=True, text=True, check=True).stdout
    gbps = {int(t): float(g) for t, g in re.findall(r"threads=(\d+) gbps=([\d.]+)", out)}
    return gbps.get(threads, max(gbps.values()))


def zen_once(zen, model, prompt_text, n_decode, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(prompt_text)
        f.flush()
        cmd = [str(zen), "run", "--model", str(model), "--prompt-file", f.name, "--max-tokens", str(n_decode),
               "--ignore-eos", "--threads", str(threads)]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"zen failed on {model.name}: {r.stderr.strip()[-500:]}")
    prefill = re.search(r"prefill: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", r.stderr)
    decode = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", r.stderr)
    return int(prefill.group(1)), float(prefill.group(3)), float(decode.group(3))


def llama_greedy(llm):
    """argmax of the last evaluated token's logits. (Llama.scores is not filled when
    logits_all=False in llama-cpp-python >= 0.3, so read the context's logits directly.)"""
    import numpy as np
    import llama_cpp
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(llm.n_vocab(),))
    return int(logits.argmax())


def llama_once(llm, tokens, n_decode):
    """Prefill tok/s over the prompt, decode tok/s over n_decode - 1 single-token steps (the first
    token comes from the prefill logits), as zen counts them."""
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(tokens)
    t1 = time.perf_counter()
    tok = llama_greedy(llm)
    t2 = time.perf_counter()
    for _ in range(n_decode - 1):
        llm.eval([tok])
        tok = llama_greedy(llm)
    t3 = time.perf_counter()
    return len(tokens) / (t1 - t0), (n_decode - 1) / (t3 - t2)


@contextlib.contextmanager
def quiet_stderr():
    """llama.cpp logs loading details on fd 2 even with verbose=False."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def bench_model(model, args, zen):
    import llama_cpp
    with quiet_stderr():
        llm = llama_cpp.Llama(model_path=str(model), n_threads=args.threads, n_threads_batch=args.threads,
                              n_ctx=args.prompt_tokens + args.decode_tokens + 16, n_batch=512, logits_all=False,
                              type_k=0, type_v=0, verbose=False)  # type 0 = GGML_TYPE_F32, like zen's cache
    # zen tokenizes the text itself; give it text that llama.cpp tokenizes to prompt_tokens ids.
    text = PROMPT_SOURCE.read_text()
    ids = llm.tokenize(text.encode(), add_bos=False, special=False)[: args.prompt_tokens]
    prompt_text = llm.detokenize(ids).decode("utf-8", errors="ignore")
    ids = llm.tokenize(prompt_text.encode(), add_bos=False, special=False)

    zen_pf, zen_dec, ll_pf, ll_dec = [], [], [], []
    n_prompt = None
    for rep in range(args.reps):
        def run_zen():
            nonlocal n_prompt
            n_prompt, pf, dec = zen_once(zen, model, prompt_text, args.decode_tokens, args.threads)
            zen_pf.append(pf)
            zen_dec.append(dec)

        def run_llama():
            pf, dec = llama_once(llm, ids, args.decode_tokens)
            ll_pf.append(pf)
            ll_dec.append(dec)

        order = (run_zen, run_llama) if rep % 2 == 0 else (run_llama, run_zen)
        for step in order:
            step()
    if hasattr(llm, "close"):
        llm.close()  # unmaps the model before the next one loads
    m = statistics.median
    return dict(n_prompt=n_prompt, n_prompt_llama=len(ids), zen_pf=m(zen_pf), ll_pf=m(ll_pf), zen_dec=m(zen_dec),
                ll_dec=m(ll_dec))


def display_name(model):
    if model.parent == BENCH_DIR:
        return model.stem
    return str(model.relative_to(ROOT)) if model.is_relative_to(ROOT) else model.name


def load_average():
    try:
        return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", help="subset: paths, file names or globs (e.g. 'qwen3-0.6b-*')")
    ap.add_argument("--zen", default=str(first_existing(ROOT / "build-lead/zen", ROOT / "build/zen")))
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 rep, 128-token prompt, 32 decode tokens")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.prompt_tokens, args.decode_tokens = 1, 128, 32

    import llama_cpp
    models = find_models(args.models)
    if not models:
        sys.exit("no models: install the default model (tools/install_default_model.sh) or run "
                 "tools/make_bench_models.py")
    zen = pathlib.Path(args.zen)
    load_start = load_average()
    bandwidth_start = measure_bandwidth(args.threads)
    results = []
    for model in models:
        name = display_name(model)
        print(f"[{name}] ...", file=sys.stderr, flush=True)
        try:
            results.append((name, model, bench_model(model, args, zen)))
        except Exception as e:  # keep going: one broken model must not hide the others
            results.append((name, model, e))
    bandwidth_end = measure_bandwidth(args.threads)
    # Other processes only ever lower the probe: the better of the two is the machine's bound.
    bandwidth = max(b for b in (bandwidth_start, bandwidth_end, 0.0) if b is not None) or None
    print(f"zen: {zen}  llama-cpp-python {llama_cpp.__version__}  threads: {args.threads}  "
          f"prompt: {args.prompt_tokens} tokens  decode: {args.decode_tokens} tokens  reps: {args.reps} (medians)")
    print(f"load average: {load_start} at start, {load_average()} at end ({os.cpu_count()} CPUs)  "
          f"read bandwidth ({args.threads} threads): "
          + (f"{bandwidth_start:.2f} GB/s at start, {bandwidth_end:.2f} at end" if bandwidth else "n/a"))
    print_table(results, bandwidth)


def print_table(results, bandwidth):
    header = f"{'model':26}{'phase':9}{'zen tok/s':>11}{'llama tok/s':>13}{'ratio':>7}{'MB/tok':>9}  roofline zen/llama"
    print(header)
    print("-" * len(header))
    ratios_pf, ratios_dec = [], []
    for name, model, r in results:
        if isinstance(r, Exception):
            print(f"{name[:25]:26}error: {r}")
            continue
        wbytes = weight_bytes_per_token(model)
        pf_ratio, dec_ratio = r["zen_pf"] / r["ll_pf"], r["zen_dec"] / r["ll_dec"]
        ratios_pf.append((pf_ratio, name))
        ratios_dec.append((dec_ratio, name))
        note = "" if r["n_prompt"] == r["n_prompt_llama"] else f"  (zen prompt {r['n_prompt']} tokens)"
        print(f"{name[:25]:26}{'prefill':9}{r['zen_pf']:11.2f}{r['ll_pf']:13.2f}{pf_ratio:7.2f}{note}")
        roof = ""
        if bandwidth:
            roof = f"{wbytes * r['zen_dec'] / (bandwidth * 1e9):8.0%} / {wbytes * r['ll_dec'] / (bandwidth * 1e9):.0%}"
        print(f"{'':26}{'decode':9}{r['zen_dec']:11.2f}{r['ll_dec']:13.2f}{dec_ratio:7.2f}{wbytes / 1e6:9.0f}  {roof}")
    if ratios_dec:
        d, p = min(ratios_dec), min(ratios_pf)
        print(f"smallest ratios: decode {d[0]:.2f} ({d[1]})  prefill {p[0]:.2f} ({p[1]})")


if __name__ == "__main__":
    main()

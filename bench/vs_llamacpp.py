#!/usr/bin/env python3
"""Speed of zen against llama.cpp (llama-cpp-python) on the same GGUF files.

For each model both engines get the same prompt (the first N tokens of a real text), the same
thread count, greedy decoding with EOS ignored, f32 KV cache. Repetitions alternate between the
engines (and which goes first) and medians are reported with the ratio zen / llama.cpp (> 1 means
zen is faster). Decode rows also give the roofline share: bytes streamed per token x tok/s /
measured memory bandwidth (bench/bandwidth.cc). The bytes are the weights read once per token plus
the f32 KV cache that attention reads at the average context of the decode (prompt + half the
decoded tokens); both engines read the same, and both columns are printed.

The ModelOpt NVFP4 / FP8 folders of the bench models (models/bench/qwen3-*-{nvfp4,fp8}/) run in
zen against llama.cpp on the GGUF nearest in bits of the same shape (NVFP4 vs Q4_K_M, FP8 vs
Q8_0). Every zen run's peak RSS is checked against weight file size + KV cache + 15%, and zen's
NVFP4 / FP8 decode speed against its own Q4_K_M / Q8_0 speed (target: within 10%).

  .venv-tools/bin/python bench/vs_llamacpp.py                 # default model + models/bench/*
  .venv-tools/bin/python bench/vs_llamacpp.py --quick --models 'qwen3-1.7b-*'
See bench/README.md.
"""
import argparse
import contextlib
import dataclasses
import fnmatch
import functools
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROMPT_SOURCE = pathlib.Path("/usr/share/common-licenses/GPL-3")
# zen's format -> the llama.cpp type nearest in bits per weight (NVFP4 4.5, Q4_K_M ~4.8; FP8 8,
# Q8_0 8.5), whose GGUF of the same shape llama.cpp runs in that row.
PEER_QUANT = {"nvfp4": "q4_k_m", "fp8": "q8_0"}
RSS_MARGIN = 0.15  # issue 3: peak RSS <= weight file size + KV cache + 15%
SPEED_TOLERANCE = 0.10  # issue 3: NVFP4 decode within 10% of Q4_K, FP8 within 10% of Q8_0
KV_BLOCK = 16  # zen's KV pool block size (model/kv_cache.h kDefaultBlockSize)


@dataclasses.dataclass
class Entry:
    """One row: zen runs zen_model (a .gguf or an HF folder), llama.cpp runs llama_model."""
    label: str
    zen_model: pathlib.Path
    llama_model: pathlib.Path

    @property
    def is_folder(self):
        return self.zen_model.is_dir()


def first_existing(*paths):
    for p in paths:
        if p.exists():
            return p
    return paths[-1]


@functools.lru_cache(maxsize=None)
def gguf_summary(path):
    """({tensor name: bytes}, (KV layers, kv heads, head dim), recurrent-state bytes per sequence)
    of a GGUF, parsed once per file (the Qwen vocabulary makes a parse take seconds; the reader
    itself is not kept). Hybrids (qwen35, qwen35moe) keep KV only in every
    full_attention_interval-th layer, and per Gated DeltaNet layer an f32 state: the conv window
    (kernel - 1) x conv channels plus value heads x key dim x value dim."""
    from gguf import GGUFReader
    reader = GGUFReader(str(path))
    fields = reader.fields
    arch = fields["general.architecture"].contents()

    def get(key, default=None):
        return fields[f"{arch}.{key}"].contents() if f"{arch}.{key}" in fields else default

    heads = get("attention.head_count")
    layers, state = get("block_count") - get("nextn_predict_layers", 0), 0
    kv_layers = layers
    if get("ssm.inner_size") is not None:
        interval = get("full_attention_interval", 4)
        kv_layers = sum(1 for i in range(layers) if (i + 1) % interval == 0)
        k_heads, v_heads, k_dim = get("ssm.group_count"), get("ssm.time_step_rank"), get("ssm.state_size")
        inner = get("ssm.inner_size")
        conv_channels = 2 * k_heads * k_dim + inner
        per_layer = (get("ssm.conv_kernel") - 1) * conv_channels + v_heads * k_dim * (inner // v_heads)
        state = (layers - kv_layers) * per_layer * 4
    kv_shape = (kv_layers, get("attention.head_count_kv", heads),
                get("attention.key_length", get("embedding_length") // heads))
    return {t.name: int(t.n_bytes) for t in reader.tensors}, kv_shape, state


def folder_entry(folder):
    """The row of a bench folder qwen3-<size>-<nvfp4|fp8>, paired with <dir>/qwen3-<size>-<peer>.gguf;
    None when the folder's name has no peer format."""
    stem, _, quant = folder.name.rpartition("-")
    if quant not in PEER_QUANT or not (folder / "config.json").exists():
        return None
    peer = folder.parent / f"{stem}-{PEER_QUANT[quant]}.gguf"
    return Entry(f"{folder.name} (vs {PEER_QUANT[quant]})", folder, peer)


def find_models(patterns, models_dir):
    """The default model and every bench model present (GGUF files, then the NVFP4 / FP8 folders),
    or those matching --models patterns (a path, a file or folder name, or a glob on it)."""
    bench_dir = models_dir / "bench"
    default = models_dir / "default/model.gguf"
    available = [Entry(str(default.relative_to(models_dir.parent)) if default.is_relative_to(models_dir.parent)
                       else default.name, default, default)] if default.exists() else []
    available += [Entry(p.stem, p, p) for p in sorted(bench_dir.glob("*.gguf"))]
    available += [e for e in map(folder_entry, sorted(p for p in bench_dir.glob("*") if p.is_dir())) if e]
    if not patterns:
        return available
    chosen = []
    for pat in patterns:
        path = pathlib.Path(pat)
        if path.is_file() or path.is_dir():
            path = path.resolve()
            entry = Entry(path.name, path, path) if path.is_file() else folder_entry(path)
            if entry is None:
                sys.exit(f"--models: {pat} is a folder without config.json or without a -nvfp4 / -fp8 name")
            chosen.append(entry)
            continue
        hits = [e for e in available if fnmatch.fnmatch(e.zen_model.name, pat)
                or fnmatch.fnmatch(e.zen_model.name, pat + ".gguf") or fnmatch.fnmatch(str(e.zen_model), pat)]
        if not hits:
            sys.exit(f"--models: nothing matches {pat!r}; available: {[e.zen_model.name for e in available]}")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def safetensors_sizes(folder):
    """{tensor name: bytes} over the folder's *.safetensors files, from their headers."""
    sizes = {}
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        sizes.update({name: e["data_offsets"][1] - e["data_offsets"][0] for name, e in header.items()
                      if name != "__metadata__"})
    return sizes


def weight_bytes_per_token(model):
    """Bytes of weights read to decode one token: every tensor except the embedding table (only
    one row of it is read), plus the lm_head once -- output.weight / lm_head.weight with its
    scales, or the embedding when tied."""
    if model.is_dir():
        sizes, embed, lm_head = safetensors_sizes(model), "model.embed_tokens.weight", "lm_head.weight"
    else:
        sizes = gguf_summary(model)[0]
        embed, lm_head = "token_embd.weight", "output.weight"
    total = sum(n for name, n in sizes.items() if name != embed)
    if lm_head not in sizes:
        total += sizes.get(embed, 0)
    return total


def weight_file_bytes(model):
    """The weight file (GGUF) or the folder's *.safetensors files."""
    if model.is_dir():
        return sum(p.stat().st_size for p in model.glob("*.safetensors"))
    return model.stat().st_size


def kv_bytes_per_position(model):
    """f32 K and V of one position over every full-attention layer: 2 x layers x kv_heads x
    head_dim x 4 (the CPU default, --kv-cache-quant auto, and the bench's llama.cpp setting)."""
    if model.is_dir():
        c = json.loads((model / "config.json").read_text())
        c = c.get("text_config", c)
        layers = sum(1 for t in c.get("layer_types", ["full_attention"] * c["num_hidden_layers"])
                     if t == "full_attention")
        kv_heads = c.get("num_key_value_heads", c["num_attention_heads"])
        head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    else:
        layers, kv_heads, head_dim = gguf_summary(model)[1]
    return 2 * layers * kv_heads * head_dim * 4


def state_bytes(model):
    """A hybrid's recurrent state per sequence (f32), 0 for other models; GGUF files only (the
    bench's hybrids are GGUF)."""
    return 0 if model.is_dir() else gguf_summary(model)[2]


def kv_cache_bytes(model, n_tokens):
    """What `zen run` allocates for its KV cache: generate() sizes one KvCache for prompt +
    max_tokens, rounded up to whole blocks of 16 tokens."""
    return -(-n_tokens // KV_BLOCK) * KV_BLOCK * kv_bytes_per_position(model)


def kv_read_bytes_per_token(model, n_prompt, n_decode):
    """KV bytes attention reads per decoded token, averaged over the decode: step i (0-based)
    attends over n_prompt + i + 1 positions."""
    return (n_prompt + (n_decode + 1) / 2) * kv_bytes_per_position(model)


def measure_bandwidth(threads, zen):
    """GB/s of a streaming read with `threads` threads, from zen_bandwidth; None if not built."""
    candidates = ([zen.parent / "zen_bandwidth", ROOT / "build-lead/zen_bandwidth", ROOT / "build/zen_bandwidth"]
                  + sorted(ROOT.glob("build*/zen_bandwidth")))
    exe = next((p for p in candidates if p.exists()), None)
    if exe is None:
        print("note: zen_bandwidth not built (ninja -C build zen_bandwidth): no roofline column", file=sys.stderr)
        return None
    out = subprocess.run([str(exe), "--threads", str(threads), "--reps", "8"], capture_output=True, text=True, check=True).stdout
    gbps = {int(t): float(g) for t, g in re.findall(r"threads=(\d+) gbps=([\d.]+)", out)}
    return gbps.get(threads, max(gbps.values()))


# Runs argv[1:] as its child and appends that child's peak RSS (KiB) to stderr. Linux seeds a
# process's ru_maxrss at exec with the high-water RSS of the process it was forked from, so a zen
# forked straight from this script (which holds llama.cpp's mapped model, GBs) would report this
# script's size. Forked from this small launcher instead, the floor is the launcher's ~10 MB.
RSS_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\npeak-rss-kib: {usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measuring_rss(cmd):
    """(exit code, stderr text, peak RSS in bytes of cmd's own process; see RSS_LAUNCHER).
    os.wait4 gives that one child's rusage (RUSAGE_CHILDREN would be the maximum over every
    child ever waited for); ru_maxrss is in KiB on Linux."""
    r = subprocess.run([sys.executable, "-I", "-c", RSS_LAUNCHER, *map(str, cmd)], capture_output=True, text=True)
    m = re.search(r"\npeak-rss-kib: (\d+)\n$", r.stderr)
    if m is None:
        raise RuntimeError(f"RSS launcher failed on {cmd[0]}: {r.stderr.strip()[-500:]}")
    return r.returncode, r.stderr[:m.start()], int(m.group(1)) * 1024


def zen_once(zen, model, prompt_text, n_decode, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(prompt_text)
        f.flush()
        cmd = [str(zen), "run", "--model", str(model), "--prompt-file", f.name, "--max-tokens", str(n_decode),
               "--ignore-eos", "--threads", str(threads)]
        rc, stderr, peak_rss = run_measuring_rss(cmd)
    if rc != 0:
        raise RuntimeError(f"zen failed on {model.name}: {stderr.strip()[-500:]}")
    prefill = re.search(r"prefill: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", stderr)
    decode = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", stderr)
    return int(prefill.group(1)), float(prefill.group(3)), float(decode.group(3)), peak_rss


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


def bench_model(entry, args, zen):
    import llama_cpp
    if not entry.llama_model.exists():
        raise RuntimeError(f"no llama.cpp peer {entry.llama_model.name} (tools/make_bench_models.py)")
    with quiet_stderr():
        llm = llama_cpp.Llama(model_path=str(entry.llama_model), n_threads=args.threads, n_threads_batch=args.threads,
                              n_ctx=args.prompt_tokens + args.decode_tokens + 16, n_batch=512, logits_all=False,
                              type_k=0, type_v=0, verbose=False)  # type 0 = GGML_TYPE_F32, like zen's cache
    # zen tokenizes the text itself; give it text that llama.cpp tokenizes to prompt_tokens ids.
    text = PROMPT_SOURCE.read_text()
    ids = llm.tokenize(text.encode(), add_bos=False, special=False)[: args.prompt_tokens]
    prompt_text = llm.detokenize(ids).decode("utf-8", errors="ignore")
    ids = llm.tokenize(prompt_text.encode(), add_bos=False, special=False)

    zen_pf, zen_dec, ll_pf, ll_dec, zen_rss, zen_peer_dec = [], [], [], [], [], []
    n_prompt = None
    for rep in range(args.reps):
        def run_zen():
            nonlocal n_prompt
            n_prompt, pf, dec, rss = zen_once(zen, entry.zen_model, prompt_text, args.decode_tokens, args.threads)
            zen_pf.append(pf)
            zen_dec.append(dec)
            zen_rss.append(rss)

        def run_llama():
            pf, dec = llama_once(llm, ids, args.decode_tokens)
            ll_pf.append(pf)
            ll_dec.append(dec)

        def run_zen_peer():  # a ModelOpt folder: zen on the peer GGUF too, for the format comparison
            zen_peer_dec.append(zen_once(zen, entry.llama_model, prompt_text, args.decode_tokens, args.threads)[2])

        order = (run_zen, run_llama) if rep % 2 == 0 else (run_llama, run_zen)
        if entry.is_folder:
            order += (run_zen_peer,)
        for step in order:
            step()
    if hasattr(llm, "close"):
        llm.close()  # unmaps the model before the next one loads
    m = statistics.median
    return dict(n_prompt=n_prompt, n_prompt_llama=len(ids), zen_pf=m(zen_pf), ll_pf=m(ll_pf), zen_dec=m(zen_dec),
                ll_dec=m(ll_dec), zen_rss=max(zen_rss), zen_peer_dec=m(zen_peer_dec) if zen_peer_dec else None,
                kv_bytes=kv_cache_bytes(entry.zen_model, n_prompt + args.decode_tokens),
                state_bytes=state_bytes(entry.zen_model),
                # attention reads the KV; a decode step reads and writes the recurrent state
                kv_read=kv_read_bytes_per_token(entry.zen_model, n_prompt, args.decode_tokens)
                + 2 * state_bytes(entry.zen_model))


def load_average():
    try:
        return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", help="subset: paths, file names or globs (e.g. 'qwen3-0.6b-*')")
    ap.add_argument("--zen", default=str(first_existing(ROOT / "build-lead/zen", ROOT / "build/zen")))
    ap.add_argument("--models-dir", default=os.environ.get("ZEN_MODELS_DIR", str(ROOT / "models")),
                    help="folder holding default/model.gguf and bench/ (default: $ZEN_MODELS_DIR, else <repo>/models)")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 rep, 128-token prompt, 32 decode tokens")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.prompt_tokens, args.decode_tokens = 1, 128, 32

    import llama_cpp
    models = find_models(args.models, pathlib.Path(args.models_dir).resolve())
    if not models:
        sys.exit("no models: install the default model (tools/install_default_model.sh) or run "
                 "tools/make_bench_models.py")
    zen = pathlib.Path(args.zen)
    load_start = load_average()
    bandwidth_start = measure_bandwidth(args.threads, zen)
    results = []
    for entry in models:
        print(f"[{entry.label}] ...", file=sys.stderr, flush=True)
        try:
            results.append((entry, bench_model(entry, args, zen)))
        except Exception as e:  # keep going: one broken model must not hide the others
            results.append((entry, e))
    bandwidth_end = measure_bandwidth(args.threads, zen)
    # Other processes only ever lower the probe: the better of the two is the machine's bound.
    bandwidth = max(b for b in (bandwidth_start, bandwidth_end, 0.0) if b is not None) or None
    print(f"zen: {zen}  llama-cpp-python {llama_cpp.__version__}  threads: {args.threads}  "
          f"prompt: {args.prompt_tokens} tokens  decode: {args.decode_tokens} tokens  reps: {args.reps} (medians)")
    print(f"load average: {load_start} at start, {load_average()} at end ({os.cpu_count()} CPUs)  "
          f"read bandwidth ({args.threads} threads): "
          + (f"{bandwidth_start:.2f} GB/s at start, {bandwidth_end:.2f} at end" if bandwidth else "n/a"))
    print_table(results, bandwidth)


NAME_WIDTH = 30


def print_table(results, bandwidth):
    header = (f"{'model':{NAME_WIDTH}}{'phase':9}{'zen tok/s':>11}{'llama tok/s':>13}{'ratio':>7}"
              f"{'MB/tok w+kv':>14}  roofline zen/llama  (kv: KV cache + recurrent state read and written)")
    print(header)
    print("-" * len(header))
    ratios_pf, ratios_dec = [], []
    for entry, r in results:
        name = entry.label
        if isinstance(r, Exception):
            print(f"{name[:NAME_WIDTH - 1]:{NAME_WIDTH}}error: {r}")
            continue
        wbytes = weight_bytes_per_token(entry.zen_model) + r["kv_read"]
        wbytes_llama = (wbytes if entry.llama_model == entry.zen_model
                        else weight_bytes_per_token(entry.llama_model) + r["kv_read"])
        pf_ratio, dec_ratio = r["zen_pf"] / r["ll_pf"], r["zen_dec"] / r["ll_dec"]
        ratios_pf.append((pf_ratio, name))
        ratios_dec.append((dec_ratio, name))
        note = "" if r["n_prompt"] == r["n_prompt_llama"] else f"  (zen prompt {r['n_prompt']} tokens)"
        print(f"{name[:NAME_WIDTH - 1]:{NAME_WIDTH}}{'prefill':9}{r['zen_pf']:11.2f}{r['ll_pf']:13.2f}"
              f"{pf_ratio:7.2f}{note}")
        roof = ""
        if bandwidth:
            roof = (f"{wbytes * r['zen_dec'] / (bandwidth * 1e9):8.0%} / "
                    f"{wbytes_llama * r['ll_dec'] / (bandwidth * 1e9):.0%}")
        mb = f"{(wbytes - r['kv_read']) / 1e6:.0f}+{r['kv_read'] / 1e6:.0f}"
        print(f"{'':{NAME_WIDTH}}{'decode':9}{r['zen_dec']:11.2f}{r['ll_dec']:13.2f}{dec_ratio:7.2f}"
              f"{mb:>14}  {roof}")
    print_memory(results)
    print_format_summary(results)
    if ratios_dec:
        d, p = min(ratios_dec), min(ratios_pf)
        print(f"smallest ratios: decode {d[0]:.2f} ({d[1]})  prefill {p[0]:.2f} ({p[1]})")


def print_memory(results):
    """zen's peak RSS per model against weight file + KV cache + recurrent state + 15%."""
    rows = [(e, r) for e, r in results if not isinstance(r, Exception)]
    if not rows:
        return
    print()
    header = (f"{'zen peak RSS':{NAME_WIDTH}}{'RSS MB':>9}{'weights MB':>12}{'KV+state MB':>13}{'budget MB':>11}"
              f"{'RSS/budget':>12}")
    print(header)
    print("-" * len(header))
    for entry, r in rows:
        weights = weight_file_bytes(entry.zen_model)
        cache = r["kv_bytes"] + r.get("state_bytes", 0)
        budget = (weights + cache) * (1 + RSS_MARGIN)
        mark = "ok" if r["zen_rss"] <= budget else "OVER"
        print(f"{entry.zen_model.name[:NAME_WIDTH - 1]:{NAME_WIDTH}}{r['zen_rss'] / 1e6:9.0f}{weights / 1e6:12.0f}"
              f"{cache / 1e6:13.1f}{budget / 1e6:11.0f}{r['zen_rss'] / budget:11.0%}  {mark}")
    print(f"budget = (weight file + KV cache and recurrent state zen allocates) x {1 + RSS_MARGIN:.2f}")


def print_format_summary(results):
    """zen vs zen: NVFP4 decode / Q4_K_M decode and FP8 / Q8_0 decode per shape, from runs of
    the two files alternated within each repetition (rows run minutes apart would compare the
    machine's drift too)."""
    lines = []
    for entry, r in results:
        if isinstance(r, Exception) or not entry.is_folder:
            continue
        peer = r["zen_peer_dec"]
        ratio = r["zen_dec"] / peer
        mark = "ok" if ratio >= 1 - SPEED_TOLERANCE else "MISS"
        lines.append(f"  {entry.zen_model.name} / {entry.llama_model.stem}: decode {r['zen_dec']:.2f} / "
                     f"{peer:.2f} = {ratio:.2f}  (target >= {1 - SPEED_TOLERANCE:.2f})  {mark}")
    if lines:
        print()
        print("zen decode, ModelOpt format vs the GGUF nearest in bits (same shape, runs alternated):")
        print("\n".join(lines))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Side-by-side speed of zen and llama.cpp (llama-cpp-python) on the same GGUF file.

Both engines get the same prompt tokens (the first N tokens of a real text), the same thread
count, greedy decoding with EOS ignored. Repetitions alternate between the engines and the
medians are reported with the ratio zen / llama.cpp (> 1 means zen is faster).

  .venv-tools/bin/python bench/vs_llamacpp.py [--model models/default/model.gguf]
"""
import argparse
import pathlib
import re
import statistics
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def zen_once(zen, model, prompt_text, n_decode, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(prompt_text)
        f.flush()
        r = subprocess.run([str(zen), "run", "--model", str(model), "--prompt-file", f.name, "--max-tokens",
                            str(n_decode), "--ignore-eos", "--threads", str(threads)],
                           capture_output=True, text=True, check=True)
    prefill = re.search(r"prefill: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", r.stderr)
    decode = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", r.stderr)
    return int(prefill.group(1)), float(prefill.group(3)), float(decode.group(3))


def llama_once(llm, tokens, n_decode):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(tokens)
    t1 = time.perf_counter()
    tok = int(llm.scores[llm.n_tokens - 1].argmax())
    t2 = time.perf_counter()
    for _ in range(n_decode - 1):
        llm.eval([tok])
        tok = int(llm.scores[llm.n_tokens - 1].argmax())
    t3 = time.perf_counter()
    return len(tokens) / (t1 - t0), (n_decode - 1) / (t3 - t2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/default/model.gguf"))
    ap.add_argument("--zen", default=str(ROOT / "build/zen"))
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import llama_cpp
    llm = llama_cpp.Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads,
                          n_ctx=args.prompt_tokens + args.decode_tokens + 16, n_batch=512, logits_all=False,
                          type_k=0, type_v=0, verbose=False)
    text = pathlib.Path("/usr/share/common-licenses/GPL-3").read_text()
    # zen tokenizes the text itself; give it text that llama.cpp tokenizes to prompt_tokens ids.
    ids = llm.tokenize(text.encode(), add_bos=False, special=False)[: args.prompt_tokens]
    prompt_text = llm.detokenize(ids).decode("utf-8", errors="ignore")
    ids = llm.tokenize(prompt_text.encode(), add_bos=False, special=False)

    zen_pf, zen_dec, ll_pf, ll_dec = [], [], [], []
    n_prompt = None
    for _ in range(args.reps):
        n_prompt, pf, dec = zen_once(args.zen, args.model, prompt_text, args.decode_tokens, args.threads)
        zen_pf.append(pf)
        zen_dec.append(dec)
        pf, dec = llama_once(llm, ids, args.decode_tokens)
        ll_pf.append(pf)
        ll_dec.append(dec)
    m = statistics.median
    print(f"model: {args.model}  threads: {args.threads}  prompt: {n_prompt} tokens (llama.cpp {len(ids)})  "
          f"decode: {args.decode_tokens} tokens  reps: {args.reps}  llama-cpp-python {llama_cpp.__version__}")
    print(f"{'':10}{'zen tok/s':>12}{'llama.cpp tok/s':>18}{'ratio':>8}")
    print(f"{'prefill':10}{m(zen_pf):12.2f}{m(ll_pf):18.2f}{m(zen_pf) / m(ll_pf):8.2f}")
    print(f"{'decode':10}{m(zen_dec):12.2f}{m(ll_dec):18.2f}{m(zen_dec) / m(ll_dec):8.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Records llama.cpp's behaviour on the default model as a test fixture.

Writes tests/fixtures/llamacpp/default_model.json with
  - prompts: name, prompt_text, prompt_ids (tokenized with special tokens parsed, BOS per the
    GGUF's add_bos_token), the first 48 greedy token ids and their text; EOS does not stop
    generation, its first position is recorded as eos_position (-1 if none);
  - perplexity: the first 2048 tokens of /usr/share/common-licenses/GPL-3 evaluated in one
    context of 2048; nll_mean and ppl over predictions of tokens 1..2047;
  - speed: llama.cpp prefill tokens/s (512-token prompt) and decode tokens/s (64 tokens) with
    2 threads (informational: benchmarks compare side by side, tests never assert timing);
  - provenance: GGUF sha256, llama-cpp-python version, llama.cpp system info.
Settings: n_threads 2, f32 KV cache (type_k = type_v = GGML_TYPE_F32), no flash attention,
greedy = argmax of llama.cpp's logits (first index on ties, as std::max_element).

Run: .venv-tools/bin/python tools/make_llamacpp_reference.py [model.gguf]
     (default models/default/model.gguf)
"""
import argparse
import hashlib
import json
import math
import os
import re
import sys
import time

import jinja2
import llama_cpp
import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment

GGML_TYPE_F32 = 0
N_THREADS = 2
N_CTX = 4096
N_GENERATE = 48
PPL_TEXT = "/usr/share/common-licenses/GPL-3"
PPL_TOKENS = 2048
SPEED_PROMPT = 512
SPEED_DECODE = 64
REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# (name, text, use the chat template)
PROMPTS = [
    ("chat_code", "Write a Python function that returns the n-th prime number, with a short "
                  "docstring.", True),
    ("english", "The old lighthouse keeper climbed the winding stairs every evening, and", False),
    ("python", 'def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n'
               '    """Merge two sorted lists into one sorted list."""\n', False),
    ("chinese", "请用三句话介绍一下长城的历史。", True),
    ("list", "The planets of the solar system, in order from the Sun:\n1.", False),
    ("math", "A train travels 180 km in 2.5 hours. What is its average speed in km/h? "
             "Explain step by step.", True),
]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def render_chat(template, user_text, bos_token, eos_token):
    """Renders the GGUF chat template as HF transformers does (trim/lstrip blocks, sandbox)."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=[{"role": "user", "content": user_text}], add_generation_prompt=True,
        bos_token=bos_token, eos_token=eos_token)


def open_model(path, n_ctx, logits_all=False):
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_ubatch=512,
                           n_threads=N_THREADS, n_threads_batch=N_THREADS, type_k=GGML_TYPE_F32,
                           type_v=GGML_TYPE_F32, flash_attn=False, logits_all=logits_all,
                           seed=0, verbose=False)


def last_logits(llm):
    """Logits of the last token of the last eval()'d batch: [n_vocab]."""
    ptr = llm._ctx.get_logits_ith(-1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def is_eog(llm, token):
    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, token))


def greedy(llm, prompt_ids, steps):
    """Argmax decoding one token at a time; EOS does not stop it. Returns the tokens and, per
    step, the top-1 minus top-2 logit (small margins mark near-ties)."""
    llm.reset()
    llm.eval(prompt_ids)
    tokens, margins = [], []
    for step in range(steps):
        logits = last_logits(llm)
        token = int(np.argmax(logits))
        top2 = np.partition(logits, -2)[-2:]
        tokens.append(token)
        margins.append(round(float(abs(top2[1] - top2[0])), 4))
        if step + 1 < steps:
            llm.eval([token])
    return tokens, margins


def record_prompts(llm, add_bos):
    template = llm.metadata.get("tokenizer.chat_template")
    bos = llm._model.token_get_text(llm.token_bos()) if llm.token_bos() >= 0 else ""
    eos = llm._model.token_get_text(llm.token_eos())
    cases = []
    for name, text, chat in PROMPTS:
        prompt_text = render_chat(template, text, bos, eos) if chat else text
        ids = llm.tokenize(prompt_text.encode("utf-8"), add_bos=add_bos, special=True)
        start = time.perf_counter()
        generated, margins = greedy(llm, ids, N_GENERATE)
        elapsed = time.perf_counter() - start
        eos_position = next((i for i, t in enumerate(generated) if is_eog(llm, t)), -1)
        text_out = llm.detokenize(generated, prev_tokens=ids, special=True).decode("utf-8", "replace")
        cases.append(dict(name=name, chat_template=chat, user_text=text, prompt_text=prompt_text,
                          prompt_ids=ids, generated_ids=generated, generated_text=text_out,
                          eos_position=eos_position, top2_margins=margins))
        print(f"{name:10} prompt {len(ids):3} tok, eos at {eos_position:3}, "
              f"min margin (first 32) {min(margins[:32]):.4f}, {elapsed:5.1f} s: {text_out[:60]!r}")
    return cases


def log_softmax_nll(logits, targets):
    """Mean negative log-likelihood of targets[i] under logits[i], in float64."""
    x = logits.astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(x).sum(axis=1))
    picked = x[np.arange(len(targets)), targets]
    return float(np.mean(log_z - picked))


def record_perplexity(model_path, add_bos):
    llm = open_model(model_path, PPL_TOKENS, logits_all=True)
    text = open(PPL_TEXT, "rb").read()
    all_ids = llm.tokenize(text, add_bos=add_bos, special=False)
    ids = all_ids[:PPL_TOKENS]
    assert len(ids) == PPL_TOKENS, f"{PPL_TEXT} has only {len(all_ids)} tokens"
    start = time.perf_counter()
    llm.eval(ids)                                  # one context, batches of 512
    elapsed = time.perf_counter() - start
    logits = np.asarray(llm.scores[:PPL_TOKENS])   # [2048, n_vocab]
    nll = log_softmax_nll(logits[:-1], np.asarray(ids[1:]))
    ppl = math.exp(nll)
    print(f"perplexity over {PPL_TOKENS} tokens ({len(all_ids)} in file): nll {nll:.6f}, "
          f"ppl {ppl:.4f}, {PPL_TOKENS / elapsed:.1f} tok/s")
    del llm
    return dict(text_file=PPL_TEXT, text_sha256=sha256_file(PPL_TEXT), add_bos=add_bos,
                tokens_in_file=len(all_ids), n_tokens=PPL_TOKENS, n_predicted=PPL_TOKENS - 1,
                nll_mean=nll, ppl=ppl, token_ids=ids)


def record_speed(model_path, token_ids):
    """Prefill of SPEED_PROMPT tokens, then SPEED_DECODE single-token steps (greedy)."""
    llm = open_model(model_path, N_CTX)
    load_before = os.getloadavg()[0]
    prompt = token_ids[:SPEED_PROMPT]
    llm.eval(prompt[:8])                           # warm-up (first graph build, page faults)
    llm.reset()
    start = time.perf_counter()
    llm.eval(prompt)
    prefill_s = time.perf_counter() - start
    token = int(np.argmax(last_logits(llm)))
    start = time.perf_counter()
    for _ in range(SPEED_DECODE):
        llm.eval([token])
        token = int(np.argmax(last_logits(llm)))
    decode_s = time.perf_counter() - start
    speed = dict(n_threads=N_THREADS, prompt_tokens=SPEED_PROMPT, decode_tokens=SPEED_DECODE,
                 prefill_tok_s=SPEED_PROMPT / prefill_s, decode_tok_s=SPEED_DECODE / decode_s,
                 load_average_1min=round(load_before, 2),
                 note="wall clock around llama_decode calls on the development machine; a "
                      "load average above the thread count means other processes competed")
    print(f"llama.cpp speed: prefill {speed['prefill_tok_s']:.1f} tok/s, "
          f"decode {speed['decode_tok_s']:.1f} tok/s")
    return speed


def to_json(value):
    """Indented JSON with each list of numbers on one line (short, diffable)."""
    lists = []

    def hide(v):
        if isinstance(v, dict):
            return {k: hide(x) for k, x in v.items()}
        if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
            lists.append(v)
            return f"@@int-list-{len(lists) - 1}@@"
        return [hide(x) for x in v] if isinstance(v, list) else v

    text = json.dumps(hide(value), ensure_ascii=False, indent=1)
    return re.sub(r'"@@int-list-(\d+)@@"',
                  lambda m: json.dumps(lists[int(m.group(1))], separators=(",", ":")), text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=os.path.join(REPO, "models/default/model.gguf"))
    parser.add_argument("--out", default=os.path.join(REPO, "tests/fixtures/llamacpp/default_model.json"))
    parser.add_argument("--speed-only", action="store_true",
                        help="re-measure only the speed section of an existing fixture")
    args = parser.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"model not found: {args.model}")
    if args.speed_only:
        with open(args.out, encoding="utf-8") as f:
            fixture = json.load(f)
        fixture["speed"] = record_speed(args.model, fixture["perplexity"]["token_ids"])
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(to_json(fixture) + "\n")
        return

    start = time.time()
    llm = open_model(args.model, N_CTX)
    add_bos = bool(llm._model.add_bos_token())
    cases = record_prompts(llm, add_bos)
    eog_ids = sorted({t for c in cases for t in c["generated_ids"] if is_eog(llm, t)})
    meta = llm.metadata
    del llm
    perplexity = record_perplexity(args.model, add_bos)
    speed = record_speed(args.model, perplexity["token_ids"])

    fixture = dict(
        generator="tools/make_llamacpp_reference.py",
        model=dict(file=os.path.basename(args.model), sha256=sha256_file(args.model),
                   name=meta.get("general.name"), architecture=meta.get("general.architecture")),
        llama_cpp_python=llama_cpp.__version__,
        llama_cpp_system_info=llama_cpp.llama_print_system_info().decode().strip(),
        settings=dict(n_threads=N_THREADS, n_ctx=N_CTX, type_k="f32", type_v="f32",
                      flash_attn=False, sampling="argmax of logits", add_bos=add_bos,
                      n_generate=N_GENERATE, eos_ignored=True),
        eog_ids_seen=eog_ids,
        prompts=cases,
        perplexity=perplexity,
        speed=speed,
    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(to_json(fixture) + "\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes) in {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Random-weight GGUF models with the shapes of real Qwen3 checkpoints, for speed benchmarks.

The weights are random (normal, std 0.02; norms 1.0): the models produce nonsense, but every
tensor has the real shape and type, so speed matches a real checkpoint of the same size and
quantization. The real Qwen3 tokenizer is embedded, so both engines tokenize real text alike.

Files follow llama.cpp's conventions for arch "qwen3" (tensor names, qwen3.* keys, gpt2/qwen2
vocab), written by the `gguf` package; the BF16 master is then quantized by llama.cpp itself
(llama-cpp-python's llama_model_quantize) to Q4_K_M and Q8_0:

  models/bench/qwen3-0.6b-{bf16,q4_k_m,q8_0}.gguf
  models/bench/qwen3-1.7b-{bf16,q4_k_m,q8_0}.gguf

  .venv-tools/bin/python tools/make_bench_models.py [--sizes 0.6b 1.7b] [--out models/bench] [--force]
"""
import argparse
import ctypes
import json
import pathlib
import shutil
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKENIZER_DIR = pathlib.Path("/work/shared/data/tokenizers/qwen3")

# Qwen3 config.json values (hidden, layers, heads, kv heads, head_dim, ffn, vocab; all tied).
SHAPES = {
    "0.6b": dict(hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072, vocab=151936),
    "1.7b": dict(hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=6144, vocab=151936),
}
CONTEXT_LENGTH = 40960
ROPE_THETA = 1_000_000.0
RMS_EPS = 1e-6
WEIGHT_STD = 0.02


def tensor_plan(s):
    """[(name, numpy shape [rows=out, cols=in], is_norm)] in llama.cpp's order."""
    h, hd = s["hidden"], s["head_dim"]
    plan = [("token_embd.weight", (s["vocab"], h), False)]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (h,), True),
            (b + "attn_q.weight", (s["heads"] * hd, h), False),
            (b + "attn_k.weight", (s["kv_heads"] * hd, h), False),
            (b + "attn_v.weight", (s["kv_heads"] * hd, h), False),
            (b + "attn_q_norm.weight", (hd,), True),
            (b + "attn_k_norm.weight", (hd,), True),
            (b + "attn_output.weight", (h, s["heads"] * hd), False),
            (b + "ffn_norm.weight", (h,), True),
            (b + "ffn_gate.weight", (s["ffn"], h), False),
            (b + "ffn_up.weight", (s["ffn"], h), False),
            (b + "ffn_down.weight", (h, s["ffn"]), False),
        ]
    plan.append(("output_norm.weight", (h,), True))  # tied: no output.weight
    return plan


def qwen3_vocab(vocab_size):
    """tokens, token types, merges, special ids as llama.cpp's converter writes them for Qwen."""
    import gguf
    tok = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok["added_tokens"]}
    tokens, types = [], []
    for i in range(vocab_size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:  # config vocab_size pads the tokenizer's 151669 ids up to 151936
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    ids = {a["content"]: a["id"] for a in tok["added_tokens"]}
    config = json.loads((TOKENIZER_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    return tokens, types, merges, ids, config.get("chat_template")


def random_bf16(rng, shape):
    """Normal(0, WEIGHT_STD) rounded to bfloat16, as uint16 bit patterns."""
    x = rng.standard_normal(shape, dtype=np.float32)
    x *= WEIGHT_STD
    bits = x.view(np.uint32)
    bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even (no NaN/Inf in a normal sample)
    return (bits >> 16).astype(np.uint16)


def write_master(path, size, seed):
    import gguf
    s = SHAPES[size]
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name(f"Qwen3 {size.upper()} random-weight bench model")
    w.add_type("model")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_context_length(CONTEXT_LENGTH)
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)

    tokens, types, merges, ids, chat_template = qwen3_vocab(s["vocab"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    if chat_template:
        w.add_chat_template(chat_template)

    # Stream: declare every tensor, write the header, then generate and write one at a time.
    plan = tensor_plan(s)
    for name, shape, is_norm in plan:
        n = int(np.prod(shape))
        if is_norm:
            w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.uint16), n * 2, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape, is_norm in plan:
        w.write_tensor_data(np.ones(shape, np.float32) if is_norm else random_bf16(rng, shape))
    w.close()


def quantize(master, out, ftype):
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(master).encode(), str(out).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({master} -> {out}) failed: {rc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--out", default=str(ROOT / "models/bench"))
    ap.add_argument("--quants", nargs="+", default=["q4_k_m", "q8_0"], choices=["q4_k_m", "q8_0"])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    args = ap.parse_args()

    import llama_cpp
    ftypes = {"q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0}
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for size in args.sizes:
        s = SHAPES[size]
        n_params = sum(int(np.prod(shape)) for _, shape, _ in tensor_plan(s))
        need = n_params * 2 * 2.2  # bf16 master + q8_0 + q4_k_m, with margin
        free = shutil.disk_usage(out_dir).free
        if free < need:
            sys.exit(f"not enough disk for {size}: need ~{need / 1e9:.1f} GB, free {free / 1e9:.1f} GB")
        master = out_dir / f"qwen3-{size}-bf16.gguf"
        if args.force or not master.exists():
            t = time.perf_counter()
            write_master(master, size, args.seed)
            print(f"wrote {master} ({master.stat().st_size / 1e9:.2f} GB, {n_params / 1e9:.3f} B params) "
                  f"in {time.perf_counter() - t:.0f} s", flush=True)
        for q in args.quants:
            out = out_dir / f"qwen3-{size}-{q}.gguf"
            if args.force or not out.exists():
                t = time.perf_counter()
                quantize(master, out, ftypes[q])
                print(f"wrote {out} ({out.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t:.0f} s",
                      flush=True)


if __name__ == "__main__":
    main()

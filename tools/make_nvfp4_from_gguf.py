#!/usr/bin/env python3
"""An NVFP4 (ModelOpt layout) folder with REAL weights, made from the default model's GGUF.

The random-weight bench models (make_bench_models.py) measure speed but say nothing about
accuracy. This dequantizes the default model (Qwen2.5-Coder-0.5B-Instruct Q4_K_M, arch qwen2)
with gguf-py, rounds it to BF16, and quantizes every projection to NVFP4 with the same numpy
ModelOpt formulas as make_bench_models.py (quantize_nvfp4), so `zen perplexity` can compare,
on real text, NVFP4 with f32 activations (--nvfp4-exact) against the default integer path
(activations quantized to int8 per block of 32). The weights are quantized twice (Q4_K_M, then
NVFP4), so the folder's perplexity is worse than the GGUF's; the comparison that matters is
between the two activation paths on the same folder.

The embedding and norms stay BF16 and the q/k/v biases F32; lm_head is the (tied) embedding,
quantized like the other projections (as llama.cpp quantizes the tied output of its Q4_K_M).

  .venv-tools/bin/python tools/make_nvfp4_from_gguf.py [--gguf models/default/model.gguf]
        [--out models/default-nvfp4]
"""
import argparse
import pathlib
import shutil
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_bench_models as mb  # noqa: E402  (the NVFP4 quantizer and the safetensors writer)

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKENIZER_DIR = pathlib.Path("/work/shared/data/tokenizers/qwen2_5")


def hf_name(gguf_name):
    """'blk.3.attn_q.bias' -> 'model.layers.3.self_attn.q_proj.bias'."""
    for suffix in (".weight", ".bias"):
        if gguf_name.endswith(suffix):
            return mb.hf_module(gguf_name.removesuffix(suffix) + ".weight") + suffix
    raise SystemExit(f"{gguf_name}: unexpected tensor name")


def dequantized(reader):
    """{HF name: f32 array [rows, cols] or [n]} of every tensor, as gguf-py dequantizes it."""
    from gguf.quants import dequantize
    return {hf_name(t.name): np.asarray(dequantize(t.data, t.tensor_type), np.float32) for t in reader.tensors}


def config(reader):
    f = {k: reader.fields[k].contents() for k in reader.fields if k.startswith("qwen2.")}
    vocab = next(t for t in reader.tensors if t.name == "token_embd.weight").shape[1]
    layers = int(f["qwen2.block_count"])
    hidden, heads = int(f["qwen2.embedding_length"]), int(f["qwen2.attention.head_count"])
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
        "bos_token_id": int(reader.fields["tokenizer.ggml.bos_token_id"].contents()),
        "eos_token_id": int(reader.fields["tokenizer.ggml.eos_token_id"].contents()),
        "hidden_size": hidden, "intermediate_size": int(f["qwen2.feed_forward_length"]),
        "max_position_embeddings": int(f["qwen2.context_length"]), "num_attention_heads": heads,
        "num_hidden_layers": layers, "num_key_value_heads": int(f["qwen2.attention.head_count_kv"]),
        "rms_norm_eps": float(f["qwen2.attention.layer_norm_rms_epsilon"]),
        "rope_theta": float(f["qwen2.rope.freq_base"]), "tie_word_embeddings": False,
        "vocab_size": int(vocab), "torch_dtype": "bfloat16", "use_sliding_window": False,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=str(ROOT / "models/default/model.gguf"))
    ap.add_argument("--out", default=str(ROOT / "models/default-nvfp4"))
    args = ap.parse_args()
    from gguf import GGUFReader
    reader = GGUFReader(args.gguf)
    tensors = dequantized(reader)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    out = pathlib.Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    writer = mb.SafetensorsWriter(tmp / "model.safetensors")
    linear = {n: w for n, w in tensors.items() if w.ndim == 2 and n != "model.embed_tokens.weight"}
    for name, w in tensors.items():
        if name in linear:
            n, k = w.shape
            module = name.removesuffix(".weight")
            writer.declare(f"{module}.weight", "U8", (n, k // 2), 1)
            writer.declare(f"{module}.weight_scale", "F8_E4M3", (n, k // mb.GROUP), 1)
            writer.declare(f"{module}.weight_scale_2", "F32", (), 4)
        elif name.endswith(".bias"):
            writer.declare(name, "F32", w.shape, 4)
        else:
            writer.declare(name, "BF16", w.shape, 2)
    writer.open()
    errors = []
    for name, w in tensors.items():
        if name in linear:
            module = name.removesuffix(".weight")
            bits = mb.f32_to_bf16_bits(w)
            master = mb.bf16_bits_to_f32(bits)
            scale_2 = mb.nvfp4_scale_2(np.abs(master).max())
            packed, scales = mb.quantize_nvfp4(master, scale_2)
            writer.write(f"{module}.weight", packed)
            writer.write(f"{module}.weight_scale", scales)
            writer.write(f"{module}.weight_scale_2", np.float32(scale_2))
            deq = mb.dequantize_nvfp4(packed, scales, scale_2)
            errors.append(np.linalg.norm(master - deq) / np.linalg.norm(master))
        elif name.endswith(".bias"):
            writer.write(name, w.astype(np.float32))
        else:
            writer.write(name, mb.f32_to_bf16_bits(w))
    writer.close()
    mb.write_folder_files(tmp, config(reader), "NVFP4", TOKENIZER_DIR)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"{out}: {len(linear)} NVFP4 matrices, relative weight error vs the BF16 master "
          f"median {np.median(errors):.4f} (max {max(errors):.4f})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A random-weight DFlash drafter of the published shape, scaled to a target, for cost benchmarks.

z-lab's published drafts (e.g. z-lab/Qwen3.6-27B-DFlash) are 5 Qwen3 decoder layers, 4 sliding
(window 2048) then 1 full, block size 16, 5 target layers tapped, bf16, no embedding or head of
their own. This writes that shape at the target's hidden size, with Qwen3's attention at that
width (hidden 1024: 16 heads, 8 KV heads, head_dim 128, as Qwen3-0.6B) and an MLP of 3 x hidden:

  OUT/config.json        architectures ["DFlashDraftModel"], model_type qwen3, dflash_config
                         {target_layer_ids (spread as the reference's default), mask_token_id,
                         block_size 16}, layer_types, sliding_window 2048
  OUT/model.safetensors  fc.weight [H, 5H], hidden_norm / norm [H], layers.{0..4}.* (BF16)

The weights are normal(0, 0.02) (norms 1.0): the drafts are nonsense, which a benchmark pairs with
synthetic acceptance (--speculative-config rejection_sample_method "synthetic") to measure what a
block costs at a chosen acceptance. Not a fixture: nothing is committed from it.

Run: .venv-tools/bin/python tools/make_dflash_bench_drafter.py --hidden 1024 --vocab 151936 \
         --target-layers 24 --mask-token 151669 --out models/bench/dflash-0.8b
"""
import argparse
import json
import os

import numpy as np

LAYERS = 5
LAYER_TYPES = ["sliding_attention"] * 4 + ["full_attention"]
WINDOW = 2048
BLOCK = 16


def default_taps(target_layers, draft_layers):
    """The reference's build_target_layer_ids: spread over the target's depth."""
    if draft_layers == 1:
        return [target_layers // 2]
    start, end = 1, target_layers - 3
    return [int(round(start + i * (end - start) / (draft_layers - 1))) for i in range(draft_layers)]


def bf16(rng, shape, std=0.02):
    """normal(0, std) as bfloat16 bit patterns (round to nearest even), in a uint16 array."""
    bits = (rng.standard_normal(shape, dtype=np.float32) * std).view(np.uint32)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(np.uint16)


def write_bf16_safetensors(path, tensors):
    """safetensors with BF16 tensors given as uint16 bit patterns (safetensors.numpy has no bf16)."""
    header, offset = {}, 0
    for name, t in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text.encode())
        for t in tensors.values():
            f.write(np.ascontiguousarray(t).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--target-layers", type=int, required=True)
    ap.add_argument("--mask-token", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    H, hd = args.hidden, 128
    heads, kv_heads, inter = H // 64, H // 128, 3 * H
    taps = default_taps(args.target_layers, LAYERS)
    rng = np.random.default_rng(args.seed)
    ones = np.full(H, 0x3F80, dtype=np.uint16)  # 1.0 in bf16
    tensors = {"fc.weight": bf16(rng, (H, LAYERS * H)), "hidden_norm.weight": ones, "norm.weight": ones}
    for l in range(LAYERS):
        p = f"layers.{l}."
        tensors.update({
            p + "input_layernorm.weight": ones, p + "post_attention_layernorm.weight": ones,
            p + "self_attn.q_norm.weight": np.full(hd, 0x3F80, dtype=np.uint16),
            p + "self_attn.k_norm.weight": np.full(hd, 0x3F80, dtype=np.uint16),
            p + "self_attn.q_proj.weight": bf16(rng, (heads * hd, H)),
            p + "self_attn.k_proj.weight": bf16(rng, (kv_heads * hd, H)),
            p + "self_attn.v_proj.weight": bf16(rng, (kv_heads * hd, H)),
            p + "self_attn.o_proj.weight": bf16(rng, (H, heads * hd)),
            p + "mlp.gate_proj.weight": bf16(rng, (inter, H)),
            p + "mlp.up_proj.weight": bf16(rng, (inter, H)),
            p + "mlp.down_proj.weight": bf16(rng, (H, inter)),
        })
    os.makedirs(args.out, exist_ok=True)
    write_bf16_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "dtype": "bfloat16",
        "hidden_size": H, "intermediate_size": inter, "num_hidden_layers": LAYERS,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": hd,
        "vocab_size": args.vocab, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "max_position_embeddings": 262144, "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0},
        "use_sliding_window": True, "sliding_window": WINDOW, "layer_types": LAYER_TYPES, "max_window_layers": 0,
        "tie_word_embeddings": False, "num_target_layers": args.target_layers,
        "dflash_config": {"target_layer_ids": taps, "mask_token_id": args.mask_token, "block_size": BLOCK},
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    params = sum(int(np.prod(t.shape)) for t in tensors.values())
    print(f"{args.out}: {params / 1e6:.1f} M parameters, taps {taps}, block {BLOCK}")


if __name__ == "__main__":
    main()

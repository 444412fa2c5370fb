#!/usr/bin/env python3
"""Two random-weight BF16 checkpoints with the same ACTIVE parameters, for bench/moe_bench.cc.

  <out>/dense  qwen3:     hidden 1024, 6 layers, MLP intermediate 1024
  <out>/moe    qwen3_moe: the same attention and embeddings, every layer sparse: 64 experts of
               intermediate 128, top-8 (Qwen3-30B-A3B's 128 experts / top-8 / 768, scaled down)
Per token both read the same MLP weight bytes (8 x 128 = 1024 intermediate rows); the MoE also
reads its router (64 x 1024). Totals: dense ~92 MB, MoE ~357 MB (BF16). Weights normal(0, 0.02),
norms 1.0; outputs are nonsense, speed is that of a real checkpoint of these shapes.

  .venv-tools/bin/python tools/make_moe_bench_models.py [--out build/moe_bench_models]
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 1024, 6, 16, 8, 64, 8192
DENSE_FFN = 1024
EXPERTS, TOP_K, EXPERT_FFN = 64, 8, 128
assert TOP_K * EXPERT_FFN == DENSE_FFN


def config(moe):
    c = {"architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
         "model_type": "qwen3_moe" if moe else "qwen3", "vocab_size": VOCAB, "hidden_size": HIDDEN,
         "intermediate_size": DENSE_FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
         "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "max_position_embeddings": 4096,
         "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
         "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    if moe:
        c.update(num_experts=EXPERTS, num_experts_per_tok=TOP_K, moe_intermediate_size=EXPERT_FFN,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])
    return c


def tensors(moe, gen):
    def w(*shape):
        return (0.02 * torch.randn(*shape, generator=gen)).to(torch.bfloat16)

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    t = {"model.embed_tokens.weight": w(VOCAB, HIDDEN), "model.norm.weight": ones(HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": ones(HIDDEN), p + "post_attention_layernorm.weight": ones(HIDDEN),
                  p + "self_attn.q_proj.weight": w(HEADS * HEAD_DIM, HIDDEN),
                  p + "self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
                  p + "self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
                  p + "self_attn.o_proj.weight": w(HIDDEN, HEADS * HEAD_DIM),
                  p + "self_attn.q_norm.weight": ones(HEAD_DIM), p + "self_attn.k_norm.weight": ones(HEAD_DIM)})
        if moe:
            t[p + "mlp.gate.weight"] = w(EXPERTS, HIDDEN)
            for e in range(EXPERTS):
                q = p + f"mlp.experts.{e}."
                t.update({q + "gate_proj.weight": w(EXPERT_FFN, HIDDEN), q + "up_proj.weight": w(EXPERT_FFN, HIDDEN),
                          q + "down_proj.weight": w(HIDDEN, EXPERT_FFN)})
        else:
            t.update({p + "mlp.gate_proj.weight": w(DENSE_FFN, HIDDEN), p + "mlp.up_proj.weight": w(DENSE_FFN, HIDDEN),
                      p + "mlp.down_proj.weight": w(HIDDEN, DENSE_FFN)})
    return t


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "build", "moe_bench_models"))
    args = parser.parse_args()
    for name, moe in (("dense", False), ("moe", True)):
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config(moe), f, indent=2)
        t = tensors(moe, torch.Generator().manual_seed(7))
        save_file(t, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        print(f"{folder}: {sum(v.numel() * 2 for v in t.values()) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

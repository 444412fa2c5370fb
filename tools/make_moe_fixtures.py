#!/usr/bin/env python3
"""Builds tiny random-weight Qwen3-MoE checkpoints and their transformers reference outputs.

Same layout and reference contents as tools/make_model_fixtures.py (whose helpers this reuses):
  tests/fixtures/models/<name>/{config.json, generation_config.json, model.safetensors}
  tests/fixtures/models/<name>.reference.safetensors  ("prompt", "logits", "greedy")
so the C++ golden tests pick them up with the dense fixtures. Variants:
  qwen3_moe_f32        every layer sparse, 8 experts, top-2, norm_topk_prob
  qwen3_moe_step2      bf16, 4 layers, decoder_sparse_step 2 with mlp_only_layers [3] (sparse: 1;
                       dense: 0, 2, and 3 which the step alone would make sparse), 6 experts,
                       top-3, no renormalisation (Zen4-style "every other layer sparse")
  qwen3_moe_bf16_tied  bf16 weights, tied embeddings, 4 experts, top-1
  qwen2_moe_shared     Qwen2-MoE (q/k/v bias, no q/k norm): 6 experts, top-2 plus the
                       sigmoid-gated shared expert that Qwen3-Next / Qwen3.5-MoE use; bf16
plus tests/fixtures/models/qwen3_moe_bf16_tied.gguf: the bf16 variant re-exported the way
llama.cpp's converter lays out arch "qwen3moe" (experts stacked as ffn_{gate,up,down}_exps
[E, I, H] / [E, H, I], router ffn_gate_inp, BF16 matrices, F32 norms, qwen3moe.* keys, a
placeholder token list); it shares qwen3_moe_bf16_tied's reference.
plus tests/fixtures/fpquant/qwen3_moe_mixed (with a reference, checked by linear_test's
GoldenFpQuant): ModelOpt MIXED_PRECISION, attention FP8 and every expert NVFP4 (stored per
expert, as ModelOpt exports MoE checkpoints), router, norms, embeddings BF16; quantized with
tools/make_fp_quant_fixtures.py's ModelOpt quantizers, reference from the dequantized weights
(needs nvidia-modelopt, see that script; --no-fpquant skips it). No input_scale tensors
(optional, and not applied by the engine).
A seed is accepted only if (besides the greedy margin of make_model_fixtures) the router is
decisive and spread: in every sparse layer, over the prompt and the greedy steps, the k-th and
(k+1)-th routing probabilities differ by at least MIN_ROUTER_GAP (so f32 rounding cannot swap
an expert), and at least half the experts of every sparse layer receive tokens.

Rerunning reproduces byte-identical files (fixed seeds, one CPU thread).
Run: .venv-tools/bin/python tools/make_moe_fixtures.py
"""
import argparse
import os
import sys
import time
import warnings

import gguf
import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import (GenerationConfig, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mmf  # noqa: E402  (weight init, prompts, greedy loop)

MIN_ROUTER_GAP = 1e-3


def base_config(**overrides):
    cfg = dict(vocab_size=288, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
               mlp_only_layers=[], max_position_embeddings=256, hidden_act="silu",
               rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
               use_cache=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    cfg.update(overrides)
    return cfg


ARCHS = {"qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM), "qwen2_moe": (Qwen2MoeConfig, Qwen2MoeForCausalLM)}

VARIANTS = [
    # name, stored dtype, config overrides (qwen2_moe: "arch"), seed
    ("qwen3_moe_f32", "float32", {}, 501),
    ("qwen3_moe_step2", "bfloat16",
     dict(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3], num_experts=6,
          num_experts_per_tok=3, norm_topk_prob=False), 502),
    ("qwen3_moe_bf16_tied", "bfloat16",
     dict(num_experts=4, num_experts_per_tok=1, tie_word_embeddings=True), 503),
    ("qwen2_moe_shared", "bfloat16",
     dict(arch="qwen2_moe", vocab_size=128, head_dim=None, num_experts=6, num_experts_per_tok=2,
          norm_topk_prob=False, shared_expert_intermediate_size=24), 504),
]


def build_and_save(cfg, dtype, folder, seed):
    cfg = dict(cfg)
    config_cls, model_cls = ARCHS[cfg.pop("arch", "qwen3_moe")]
    if cfg.get("head_dim", 0) is None:
        del cfg["head_dim"]  # hidden_size / num_attention_heads
    config = config_cls(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    mmf.init_weights(model, seed)
    if cfg["tie_word_embeddings"]:
        model.tie_weights()
    model = model.to(mmf.DTYPES[dtype])
    model.config.dtype = dtype
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False)
    if os.path.isdir(folder):
        for f in os.listdir(folder):
            os.remove(os.path.join(folder, f))
    model.save_pretrained(folder)


class RouterProbe:
    """Records every sparse layer's router probabilities during forward passes."""

    def __init__(self, model):
        self.probs = {}  # layer -> list of [T, E]
        self.hooks = []
        for name, mod in model.named_modules():
            if type(mod).__name__.endswith("MoeTopKRouter"):
                layer = int(name.split(".")[2])
                self.hooks.append(mod.register_forward_hook(
                    lambda m, args, out, layer=layer: self.probs.setdefault(layer, []).append(
                        torch.softmax(out[0].float(), dim=-1))))

    def stats(self, k):
        """(smallest k-th minus (k+1)-th probability, fewest experts used in a layer)."""
        gap, used = 1.0, None
        for layer, chunks in self.probs.items():
            p = torch.cat(chunks)
            top = torch.topk(p, min(k + 1, p.shape[1]), dim=-1)
            if p.shape[1] > k:
                gap = min(gap, float((top.values[:, k - 1] - top.values[:, k]).min()))
            n_used = len(torch.unique(top.indices[:, :k]))
            used = n_used if used is None else min(used, n_used)
        return gap, used

    def remove(self):
        for h in self.hooks:
            h.remove()


def make_variant(name, dtype, overrides, base_seed, out_dir):
    cfg = base_config(**overrides)
    folder = os.path.join(out_dir, name)
    k, n_experts = cfg["num_experts_per_tok"], cfg["num_experts"]
    for attempt in range(mmf.MAX_SEED_TRIES):
        seed = base_seed + 1000 * attempt
        build_and_save(cfg, dtype, folder, seed)
        model = mmf.load_f32(folder)
        prompt = mmf.prompt_ids(seed, mmf.PROMPT_LEN, cfg["vocab_size"])
        probe = RouterProbe(model)
        tokens, margin = mmf.greedy(model, prompt, mmf.GREEDY_STEPS)
        gap, used = probe.stats(k)
        probe.remove()
        if margin >= mmf.MIN_GREEDY_MARGIN and gap >= MIN_ROUTER_GAP and 2 * used >= n_experts:
            break
    else:
        sys.exit(f"{name}: no seed gives a decisive greedy path and router")
    assert model.config.model_type == overrides.get("arch", "qwen3_moe")
    mmf.check_greedy_without_cache(model, prompt, tokens)
    logits = mmf.full_logits(model, prompt)
    sparse = [i for i in range(cfg["num_hidden_layers"])
              if type(model.model.layers[i].mlp).__name__.endswith("SparseMoeBlock")]
    ref_path = os.path.join(out_dir, name + ".reference.safetensors")
    mmf.write_reference(ref_path, prompt, logits, tokens, f"tools/make_moe_fixtures.py seed={seed} "
                        f"transformers={transformers.__version__} torch={torch.__version__}")
    return dict(name=name, seed=seed, margin=margin, gap=gap, used=used, experts=n_experts,
                sparse=sparse, bytes=mmf.dir_bytes(folder) + os.path.getsize(ref_path),
                max_logit=float(logits.abs().max()))


GGUF_FROM = "qwen3_moe_bf16_tied"


def write_gguf(folder, path):
    """llama.cpp's qwen3moe layout of the HF checkpoint in `folder` (tied embeddings)."""
    import json
    cfg = json.load(open(os.path.join(folder, "config.json")))
    f = safe_open(os.path.join(folder, "model.safetensors"), "pt")
    E, L = cfg["num_local_experts"], cfg["num_hidden_layers"]
    assert cfg["tie_word_embeddings"] and cfg["norm_topk_prob"] and cfg["decoder_sparse_step"] == 1

    def bf16(name_or_tensor):
        t = f.get_tensor(name_or_tensor) if isinstance(name_or_tensor, str) else name_or_tensor
        assert t.dtype == torch.bfloat16
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)

    def f32(name):
        return f.get_tensor(name).float().numpy()

    w = gguf.GGUFWriter(path, "qwen3moe")
    a = "qwen3moe"
    w.add_uint32(f"{a}.context_length", cfg["max_position_embeddings"])
    w.add_uint32(f"{a}.embedding_length", cfg["hidden_size"])
    w.add_uint32(f"{a}.block_count", L)
    w.add_uint32(f"{a}.attention.head_count", cfg["num_attention_heads"])
    w.add_uint32(f"{a}.attention.head_count_kv", cfg["num_key_value_heads"])
    w.add_uint32(f"{a}.attention.key_length", cfg["head_dim"])
    w.add_uint32(f"{a}.attention.value_length", cfg["head_dim"])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    w.add_float32(f"{a}.rope.freq_base", cfg["rope_parameters"]["rope_theta"])
    w.add_uint32(f"{a}.expert_count", E)
    w.add_uint32(f"{a}.expert_used_count", cfg["num_experts_per_tok"])
    w.add_uint32(f"{a}.expert_feed_forward_length", cfg["moe_intermediate_size"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"<t{i}>" for i in range(cfg["vocab_size"])])
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    BF16 = gguf.GGMLQuantizationType.BF16
    w.add_tensor("token_embd.weight", bf16("model.embed_tokens.weight"), raw_dtype=BF16)
    w.add_tensor("output_norm.weight", f32("model.norm.weight"))
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
    projs = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate": "ffn_gate_inp"}
    for i in range(L):
        hf, blk = f"model.layers.{i}.", f"blk.{i}."
        for src, dst in names.items():
            w.add_tensor(blk + dst + ".weight", f32(hf + src + ".weight"))
        for src, dst in projs.items():
            w.add_tensor(blk + dst + ".weight", bf16(hf + src + ".weight"), raw_dtype=BF16)
        for proj, dst in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
            stacked = torch.stack([f.get_tensor(f"{hf}mlp.experts.{e}.{proj}.weight") for e in range(E)])
            w.add_tensor(blk + dst + ".weight", bf16(stacked), raw_dtype=BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return os.path.getsize(path)


FPQUANT_NAME = "qwen3_moe_mixed"
ATTENTION = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")


@torch.no_grad()
def quantize_moe(model, mfq):
    """Quantizes the model in place (weights <- dequantized values); returns the stored tensors
    and {module: algorithm}."""
    stored, algos = {}, {}
    E = model.config.num_experts
    I = model.config.moe_intermediate_size

    def put(module, algo, w):
        tensors, deq = mfq.QUANTIZERS[algo](w.float())
        algos[module] = algo
        for suffix, t in tensors.items():
            stored[f"{module}.{suffix}"] = t.contiguous()
        return deq

    for pname, p in model.state_dict().items():
        if pname.endswith("experts.gate_up_proj"):
            prefix = pname[:-len(".gate_up_proj")]
            for e in range(E):
                p[e, :I] = put(f"{prefix}.{e}.gate_proj", "NVFP4", p[e, :I])
                p[e, I:] = put(f"{prefix}.{e}.up_proj", "NVFP4", p[e, I:])
        elif pname.endswith("experts.down_proj"):
            prefix = pname[:-len(".down_proj")]
            for e in range(E):
                p[e] = put(f"{prefix}.{e}.down_proj", "NVFP4", p[e])
        elif pname.endswith(".weight") and pname[:-len(".weight")].endswith(ATTENTION):
            p.copy_(put(pname[:-len(".weight")], "FP8", p))
        else:  # embeddings, norms, router, lm_head: BF16 as stored, BF16-rounded reference
            stored[pname] = p.to(torch.bfloat16).contiguous()
            p.copy_(stored[pname].float())
    return stored, algos


def make_fpquant_variant(out_dir, base_seed=601):
    import make_fp_quant_fixtures as mfq  # imports modelopt
    cfg = base_config(num_experts=4, num_experts_per_tok=2)
    for attempt in range(mmf.MAX_SEED_TRIES):
        seed = base_seed + 1000 * attempt
        config = Qwen3MoeConfig(**cfg)
        config._attn_implementation = "eager"
        torch.manual_seed(seed)
        model = Qwen3MoeForCausalLM(config).eval()
        mmf.init_weights(model, seed)
        stored, algos = quantize_moe(model, mfq)
        prompt = mmf.prompt_ids(seed, mmf.PROMPT_LEN, cfg["vocab_size"])
        probe = RouterProbe(model)
        tokens, margin = mmf.greedy(model, prompt, mmf.GREEDY_STEPS)
        gap, used = probe.stats(cfg["num_experts_per_tok"])
        probe.remove()
        if margin >= mmf.MIN_GREEDY_MARGIN and gap >= MIN_ROUTER_GAP and 2 * used >= cfg["num_experts"]:
            break
    else:
        sys.exit(f"{FPQUANT_NAME}: no seed gives a decisive greedy path and router")
    mmf.check_greedy_without_cache(model, prompt, tokens)
    logits = mmf.full_logits(model, prompt)
    folder = os.path.join(out_dir, FPQUANT_NAME)
    hf_quant = mfq.write_checkpoint(folder, FPQUANT_NAME, model, stored, algos)
    assert hf_quant["quantization"]["quant_algo"] == "MIXED_PRECISION"
    ref = os.path.join(out_dir, FPQUANT_NAME + ".reference.safetensors")
    mmf.write_reference(ref, prompt, logits, tokens, f"tools/make_moe_fixtures.py seed={seed} "
                        f"transformers={transformers.__version__} torch={torch.__version__}")
    size = mmf.dir_bytes(folder) + os.path.getsize(ref)
    print(f"{FPQUANT_NAME:20} seed {seed:5} max|logit| {float(logits.abs().max()):7.3f} margin {margin:.3f} "
          f"router gap {gap:.4f} experts used >= {used}/{cfg['num_experts']} {size} bytes")
    return size


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "models"))
    parser.add_argument("--only", nargs="*", help="variant names to (re)build")
    parser.add_argument("--fpquant-out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                              "fixtures", "fpquant"))
    parser.add_argument("--no-fpquant", action="store_true", help=f"skip {FPQUANT_NAME} (needs modelopt)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    start = time.time()
    rows = [make_variant(*v, out_dir) for v in VARIANTS if not args.only or v[0] in args.only]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {time.time() - start:.1f} s")
    total = 0
    for r in rows:
        total += r["bytes"]
        print(f"{r['name']:20} seed {r['seed']:5} max|logit| {r['max_logit']:7.3f} margin {r['margin']:.3f} "
              f"router gap {r['gap']:.4f} experts used >= {r['used']}/{r['experts']} sparse layers "
              f"{r['sparse']} {r['bytes']} bytes")
    if not args.only or GGUF_FROM in args.only:
        size = write_gguf(os.path.join(out_dir, GGUF_FROM), os.path.join(out_dir, GGUF_FROM + ".gguf"))
        total += size
        print(f"{GGUF_FROM}.gguf {size} bytes")
    if not args.no_fpquant and (not args.only or FPQUANT_NAME in args.only):
        total += make_fpquant_variant(os.path.normpath(args.fpquant_out))
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Builds tiny random-weight hybrid (Gated DeltaNet + gated attention) checkpoints and their
transformers reference outputs: Qwen3.5 (text-only and composite with a vision tower) and
Qwen3-Next.

Same layout as tools/make_model_fixtures.py (whose helpers it uses):
  tests/fixtures/models/<name>/{config.json, generation_config.json, model.safetensors}
  tests/fixtures/models/<name>.reference.safetensors
      "prompt" I32 [T], "logits" F32 [T, V], "greedy" I32 [16]
Variants with an MTP head (Qwen3.5's mtp.* tensors, which transformers does not run) also get
  "mtp_logits" F32 [T-1, V]: the head's logits at positions 0..T-2, built here from
  transformers' own modules following vLLM's qwen3_5_mtp: x = fc([norm_e(embed(t_{i+1}));
  norm_h(h_i)]) with h_i the target's final-normed hidden state (the lm_head input), one
  full-attention decoder layer (own KV, position i), final norm, the shared lm_head.
Plus tests/fixtures/fpquant/qwen3_5_mixed, Zen6's weight mix on a Qwen3.5 hybrid in ModelOpt's
MIXED_PRECISION layout (the format of tools/make_fp_quant_fixtures.py, whose quantizers and
writers it uses, so it needs nvidia-modelopt as that script does; --no-fpquant skips it):
FP8 gated-attention and Gated DeltaNet projections (q/k/v/o, in_proj_qkv, in_proj_z,
out_proj), NVFP4 MLPs, and BF16 for the rest, including in_proj_a / in_proj_b, which are
left out of quantized_layers. Its reference holds the dequantized weights, as that script's,
and also "logits_int8_act" F32 [T, V]: the same model with the NVFP4 layers' inputs rounded
as the engine's default NVFP4 path rounds them (llama.cpp's quantize_row_q8_0 per block of
32: d = amax / 127 stored as f16, q = roundf(x / d)), so that path is checked tightly too.
Plus GGUF fixtures (tests/fixtures/models/<source>.gguf beside <source>.reference.safetensors;
the sources' safetensors folders are built, converted and removed): qwen3_5_tied_f32.gguf,
that variant's checkpoint in llama.cpp's qwen35 GGUF layout, written here following its converter's rules (value heads reordered from
grouped to tiled order, the 1 of zero-centred gains folded in, A_log stored as -exp(A_log),
dt_bias as ssm_dt.bias, the conv kernel squeezed) and checked by running llama.cpp itself
(llama-cpp-python) on the prompt: its logits must agree with transformers' (llama.cpp asks for
Dk == Dv, hence the variant's head sizes). The engine's GGUF path is then tested against the
same reference as the safetensors path.
Prompts are PROMPT_LEN = 150 tokens, so the chunked delta rule (chunks of 64) crosses two
chunk boundaries and ends in a partial chunk. Float32 weights, eager attention, CPU.
Rerunning reproduces byte-identical files (fixed seeds, one CPU thread).
Run: .venv-tools/bin/python tools/make_hybrid_fixtures.py [--out tests/fixtures/models]
"""
import argparse
import dataclasses
import os
import shutil
import sys
import time
import warnings

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import GenerationConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as base  # noqa: E402  (prompt_ids, full_logits, greedy, ...)

PROMPT_LEN = 150
GREEDY_STEPS = 16
MIN_GREEDY_MARGIN = 0.05
MAX_SEED_TRIES = 50


@dataclasses.dataclass
class Variant:
    name: str
    kind: str       # "qwen3_5_text", "qwen3_5_composite", "qwen3_next"
    config: dict    # text config overrides
    seed: int
    dtype: str = "float32"  # stored weights (the reference computes in f32 either way)
    mtp: bool = False       # add an MTP head (mtp.* tensors) and its reference logits


def text_config(kind, **overrides):
    """4 layers: 3 GDN + 1 gated attention. Grouped value heads (Hv = 2 Hk), Dk != Dv so a
    mix-up of the two fails; head_dim 16 with partial rotary 0.25 rotates 4 entries."""
    common = dict(vocab_size=96, hidden_size=32, intermediate_size=32, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=512, rms_norm_eps=1e-6, hidden_act="silu",
                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                  linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                  linear_value_head_dim=8, linear_conv_kernel_dim=4,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                   "partial_rotary_factor": 0.25})
    if kind == "qwen3_next":
        # Dense MLP in every layer (num_experts = 0) unless the variant sets experts.
        common.update(num_experts=0, mlp_only_layers=[0, 1, 2, 3], decoder_sparse_step=1)
    if kind in ("qwen3_next", "qwen3_5_moe_text"):
        common.update(moe_intermediate_size=16, shared_expert_intermediate_size=24,
                      num_experts_per_tok=2)
    common.update(overrides)
    return common


VARIANTS = [
    # layer_types from full_attention_interval (every 4th layer full attention).
    Variant("qwen3_5_text_f32", "qwen3_5_text", {"full_attention_interval": 4}, seed=501, mtp=True),
    # Explicit layer_types, attention first; a vision tower the engine must ignore by rule;
    # tied embeddings at the composite's top level. Stored bf16 (small; the hybrid's bf16 path).
    Variant("qwen3_5_vl_bf16", "qwen3_5_composite",
            {"layer_types": ["full_attention", "linear_attention", "linear_attention",
                             "full_attention"]}, seed=502, dtype="bfloat16"),
    Variant("qwen3_next_f32", "qwen3_next", {"full_attention_interval": 2}, seed=601),
    # Real Qwen3-Next MLPs: 4 experts, top-2, shared expert with its sigmoid gate; layer 1
    # dense by mlp_only_layers; norm_topk_prob off (not the default) so a parser that ignores
    # it fails. Stored bf16 to stay small.
    Variant("qwen3_next_moe_bf16", "qwen3_next",
            {"num_experts": 4, "mlp_only_layers": [1], "norm_topk_prob": False},
            seed=602, dtype="bfloat16"),
    # Source of the qwen35 GGUF fixture: Dk == Dv (llama.cpp's requirement), tied embeddings
    # (no output tensor in the GGUF), grouped value heads (Hv = 2 Hk) so the tiled reorder shows.
    Variant("qwen3_5_tied_f32", "qwen3_5_text",
            {"full_attention_interval": 4, "linear_value_head_dim": 16, "tie_word_embeddings": True}, seed=511,
            mtp=True),
    # Source of the qwen3next GGUF fixture: Qwen3-Next with experts in every layer (llama.cpp's
    # qwen3next has no dense layers), Dk == Dv, tied embeddings.
    Variant("qwen3_next_tied_f32", "qwen3_next",
            {"num_experts": 4, "mlp_only_layers": [], "full_attention_interval": 4, "linear_value_head_dim": 16,
             "tie_word_embeddings": True}, seed=611),
    # Source of the qwen35moe GGUF fixture: Qwen3.5-MoE with Dk == Dv and tied embeddings.
    Variant("qwen3_5_moe_tied_f32", "qwen3_5_moe_text",
            {"num_experts": 4, "linear_value_head_dim": 16, "tie_word_embeddings": True}, seed=711),
    # Qwen3.5-MoE (text): every layer sparse, top-k always renormalised.
    Variant("qwen3_5_moe_bf16", "qwen3_5_moe_text", {"num_experts": 4}, seed=701,
            dtype="bfloat16"),
]


def make_model(variant):
    cfg = text_config(variant.kind, **variant.config)
    if variant.kind == "qwen3_5_composite":
        cfg["tie_word_embeddings"] = True  # as the top level: HF's text-only loader reads this one
    if variant.kind == "qwen3_5_text":
        config = transformers.Qwen3_5TextConfig(**cfg)
        model_cls = transformers.Qwen3_5ForCausalLM
    elif variant.kind == "qwen3_5_composite":
        vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                      out_hidden_size=32, patch_size=4, temporal_patch_size=2,
                      spatial_merge_size=2, num_position_embeddings=16)
        config = transformers.Qwen3_5Config(text_config=cfg, vision_config=vision,
                                            tie_word_embeddings=True)
        model_cls = transformers.Qwen3_5ForConditionalGeneration
    elif variant.kind == "qwen3_5_moe_text":
        cfg.pop("intermediate_size")
        config = transformers.Qwen3_5MoeTextConfig(**cfg)
        model_cls = transformers.Qwen3_5MoeForCausalLM
    elif variant.kind == "qwen3_next":
        config = transformers.Qwen3NextConfig(**cfg)
        model_cls = transformers.Qwen3NextForCausalLM
    else:
        raise ValueError(variant.kind)
    config._attn_implementation = "eager"
    return config, model_cls


def init_weights(model, seed):
    """Spread logits; decays moderate enough that the state carries across a 64-token chunk."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("linear_attn.norm.weight"):      # gated RMSNorm: plain gain
                value = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
            elif name.endswith("norm.weight"):                # zero-centred gains (1 + w)
                value = 0.2 * torch.randn(p.shape, generator=gen)
            elif name.endswith("A_log"):
                value = torch.log(0.02 + 0.28 * torch.rand(p.shape, generator=gen))
            elif name.endswith("dt_bias"):
                value = 0.5 * torch.randn(p.shape, generator=gen)
            elif name.endswith("conv1d.weight"):
                value = 0.5 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name or "lm_head" in name:
                value = 0.5 * torch.randn(p.shape, generator=gen)
            elif name.endswith(".bias"):
                value = 0.2 * torch.randn(p.shape, generator=gen)
            else:
                value = 0.2 * torch.randn(p.shape, generator=gen)
            p.copy_(value)


def build_and_save(variant, folder, seed):
    config, model_cls = make_model(variant)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    init_weights(model, seed)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    model = model.to(getattr(torch, variant.dtype))
    model.config.dtype = variant.dtype
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder)


def load_f32(variant, folder):
    """The checkpoint reloaded by the class that wrote it (the composite one for VL)."""
    _, model_cls = make_model(variant)
    return model_cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()


class MtpHead(torch.nn.Module):
    """vLLM's Qwen3_5MultiTokenPredictor from transformers' modules (one layer)."""

    def __init__(self, config, full_layer_idx):
        super().__init__()
        q35 = transformers.models.qwen3_5.modeling_qwen3_5
        H = config.hidden_size
        self.fc = torch.nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = q35.Qwen3_5RMSNorm(H, eps=config.rms_norm_eps)
        self.pre_fc_norm_hidden = q35.Qwen3_5RMSNorm(H, eps=config.rms_norm_eps)
        self.layers = torch.nn.ModuleList([q35.Qwen3_5DecoderLayer(config, full_layer_idx)])
        self.norm = q35.Qwen3_5RMSNorm(H, eps=config.rms_norm_eps)
        assert self.layers[0].block_type == "full_attention"


def add_mtp(variant, folder, seed):
    """Random MTP weights appended to model.safetensors as mtp.* (transformers ignores them)."""
    model = load_f32(variant, folder)
    config = model.config
    full = config.layer_types.index("full_attention")
    torch.manual_seed(seed + 7)
    head = MtpHead(config, full).eval()
    init_weights(head, seed + 7)
    path = os.path.join(folder, "model.safetensors")
    from safetensors.torch import load_file
    tensors = load_file(path)
    for name, p in head.state_dict().items():
        tensors["mtp." + name] = p.detach().clone().contiguous()
    save_file(tensors, path, metadata={"format": "pt"})


@torch.no_grad()
def mtp_logits(model, folder, prompt):
    """The MTP head over the whole prompt: row i predicts token i+2 from h_i and token i+1."""
    from safetensors.torch import load_file
    config = model.config
    head = MtpHead(config, config.layer_types.index("full_attention")).eval()
    weights = {k[len("mtp."):]: v for k, v in load_file(os.path.join(folder, "model.safetensors")).items()
               if k.startswith("mtp.")}
    head.load_state_dict(weights)
    ids = torch.from_numpy(prompt)[None]
    out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
    hidden = out.hidden_states[-1][0]                 # final-normed: the lm_head input
    T = ids.shape[1]
    nxt = ids[0, 1:]
    e = head.pre_fc_norm_embedding(model.model.embed_tokens(nxt))
    h = head.pre_fc_norm_hidden(hidden[:T - 1])
    x = head.fc(torch.cat([e, h], dim=-1))[None]      # [1, T-1, H]
    positions = torch.arange(T - 1)[None]
    cos_sin = model.model.rotary_emb(x, positions)
    mask = torch.full((T - 1, T - 1), float("-inf")).triu(1)[None, None]
    x = head.layers[0](x, position_embeddings=cos_sin, attention_mask=mask, position_ids=positions)
    return model.lm_head(head.norm(x))[0].float()    # [T-1, V]


def make_variant(variant, out_dir):
    folder = os.path.join(out_dir, variant.name)
    for attempt in range(MAX_SEED_TRIES):
        seed = variant.seed + 1000 * attempt
        build_and_save(variant, folder, seed)
        if variant.mtp:
            add_mtp(variant, folder, seed)
        model = load_f32(variant, folder)
        vocab = model.config.get_text_config().vocab_size
        prompt = base.prompt_ids(seed, PROMPT_LEN, vocab)
        tokens, margin = base.greedy(model, prompt, GREEDY_STEPS)
        if margin >= MIN_GREEDY_MARGIN:
            break
    else:
        sys.exit(f"{variant.name}: no seed gives a greedy margin >= {MIN_GREEDY_MARGIN}")
    base.check_greedy_without_cache(model, prompt, tokens)
    logits = base.full_logits(model, prompt)
    extra = {"mtp_logits": mtp_logits(model, folder, prompt)} if variant.mtp else {}
    ref_path = os.path.join(out_dir, variant.name + ".reference.safetensors")
    base.write_reference(ref_path, prompt, logits, tokens, f"tools/make_hybrid_fixtures.py seed={seed} "
                         f"transformers={transformers.__version__} torch={torch.__version__}", **extra)
    return dict(name=variant.name, seed=seed, vocab=vocab, margin=margin,
                max_logit=float(logits.abs().max()), folder=folder, ref=ref_path)


GGUF_FROM = "qwen3_5_tied_f32"  # also the source of the Q8_0 GGUF
GGUF_SOURCES = (GGUF_FROM, "qwen3_5_moe_tied_f32", "qwen3_next_tied_f32")
LLAMA_CPP_MAX_REL_ERR = 1e-3  # llama.cpp computes in f32 with an f16 KV cache
# With Q8_0 weights llama.cpp's AVX2 activation quantization (x * (127 / amax), rounded to
# nearest even) differs in the last bit and on halves from its reference C (x * (1 / d), roundf),
# which the reference here and the engine follow (the engine is held to 1e-4 by its tests),
# and these 32-wide rows are that sensitive to activation rounding.
LLAMA_CPP_Q8_0_MAX_REL_ERR = 2e-2


def write_gguf(folder, path, q8_0=False, legacy_ssm_in=False):
    """llama.cpp's qwen35 GGUF of the HF checkpoint in `folder`: f32 tensors, or (q8_0) every
    matrix whose rows are whole Q8_0 blocks quantized by gguf-py, as in llama.cpp's Q8_0 files.
    Returns the file size and {HF weight name: that matrix as stored, dequantized, in HF's
    layout} for the matrices. legacy_ssm_in: Qwen3-Next's qkvz kept fused as ssm_in, as older
    converters wrote it (llama.cpp still reads it)."""
    import gguf
    from safetensors.torch import load_file
    config = transformers.AutoConfig.from_pretrained(folder)
    sd = {k: v.float() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    Hk, Hv = config.linear_num_key_heads, config.linear_num_value_heads
    Dk, Dv, r = config.linear_key_head_dim, config.linear_value_head_dim, Hv // Hk
    assert Dk == Dv, "llama.cpp's qwen35 takes one head size for keys and values"

    def tiled(t, dim, head):
        """Value heads along `dim` from grouped ([Hk][r] heads of `head` rows) to tiled ([r][Hk])."""
        shape = list(t.shape)
        t = t.reshape(*shape[:dim], Hk, r, head, *shape[dim + 1:])
        return t.transpose(dim, dim + 1).contiguous().reshape(shape)

    def untiled(t, dim, head):  # the inverse: tiled ([r][Hk]) back to grouped ([Hk][r])
        shape = list(t.shape)
        t = t.reshape(*shape[:dim], r, Hk, head, *shape[dim + 1:])
        return t.transpose(dim, dim + 1).contiguous().reshape(shape)

    mtp = not q8_0 and "mtp.fc.weight" in sd  # the Q8_0 file leaves the MTP block out
    L = config.num_hidden_layers
    interval = config.layer_types.index("full_attention") + 1  # llama.cpp's schedule: an interval
    assert config.layer_types == ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                                  for i in range(config.num_hidden_layers)]
    E = getattr(config, "num_experts", 0) or 0
    next_ = config.model_type == "qwen3_next"  # llama.cpp's qwen3next: value heads stay grouped
    a = "qwen3next" if next_ else "qwen35moe" if E else "qwen35"
    if next_:
        assert E and not config.mlp_only_layers, "llama.cpp's qwen3next has experts in every layer"
    w = gguf.GGUFWriter(path, a)
    if E:
        for key, value in (("expert_count", E), ("expert_used_count", config.num_experts_per_tok),
                           ("expert_feed_forward_length", config.moe_intermediate_size),
                           ("expert_shared_feed_forward_length", config.shared_expert_intermediate_size)):
            w.add_uint32(f"{a}.{key}", value)
    rot = int(config.head_dim * config.rope_parameters.get("partial_rotary_factor", 0.25))
    for key, value in (("context_length", config.max_position_embeddings), ("embedding_length", config.hidden_size),
                       ("block_count", L + mtp),
                       ("attention.head_count", config.num_attention_heads),
                       ("attention.head_count_kv", config.num_key_value_heads),
                       ("attention.key_length", config.head_dim), ("attention.value_length", config.head_dim),
                       ("rope.dimension_count", rot), ("ssm.conv_kernel", config.linear_conv_kernel_dim),
                       ("ssm.state_size", Dk), ("ssm.group_count", Hk), ("ssm.time_step_rank", Hv),
                       ("ssm.inner_size", Dv * Hv), ("full_attention_interval", interval)):
        w.add_uint32(f"{a}.{key}", value)
    if not E:
        w.add_uint32(f"{a}.feed_forward_length", config.intermediate_size)
    if mtp:
        w.add_uint32(f"{a}.nextn_predict_layers", 1)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", config.rms_norm_eps)
    w.add_float32(f"{a}.rope.freq_base", config.rope_parameters["rope_theta"])
    if not next_:  # Qwen3.5's MRoPE (text positions are equal in every section)
        w.add_array(f"{a}.rope.dimension_sections", [rot // 4, rot // 4, rot // 2 - 2 * (rot // 4), 0])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"<t{i}>" for i in range(config.vocab_size)])
    w.add_token_merges(["<t3> <t4>"])  # llama.cpp's BPE vocabulary needs at least one merge
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)

    def put(name, t):
        """Adds t under `name`; returns it as stored (dequantized when quantized), as torch f32."""
        x = np.ascontiguousarray(t.numpy().astype(np.float32))
        if q8_0 and x.ndim == 2 and x.shape[1] % 32 == 0:  # (the MoE fixture stays f32)
            Q8_0 = gguf.GGMLQuantizationType.Q8_0
            q = gguf.quants.quantize(x, Q8_0)
            w.add_tensor(name, q, raw_dtype=Q8_0)
            return torch.from_numpy(gguf.quants.dequantize(q, Q8_0).astype(np.float32))
        w.add_tensor(name, x)
        return torch.from_numpy(x)

    stored = {"model.embed_tokens.weight": put("token_embd.weight", sd["model.embed_tokens.weight"])}
    put("output_norm.weight", sd["model.norm.weight"] + 1)
    assert config.tie_word_embeddings  # no output.weight: llama.cpp reuses token_embd
    # The MTP block is one more full-attention layer, blk.<L>, as the converter remaps mtp.*.
    layers = [(f"model.layers.{i}.", f"blk.{i}.", kind) for i, kind in enumerate(config.layer_types)]
    if mtp:
        layers.append(("mtp.layers.0.", f"blk.{L}.", "full_attention"))
        stored["mtp.fc.weight"] = put(f"blk.{L}.nextn.eh_proj.weight", sd["mtp.fc.weight"])
        for src, dst in (("pre_fc_norm_embedding", "enorm"), ("pre_fc_norm_hidden", "hnorm"), ("norm", "shared_head_norm")):
            put(f"blk.{L}.nextn.{dst}.weight", sd[f"mtp.{src}.weight"] + 1)
    for p, b, kind in layers:
        put(b + "attn_norm.weight", sd[p + "input_layernorm.weight"] + 1)
        put(b + "post_attention_norm.weight", sd[p + "post_attention_layernorm.weight"] + 1)
        names = [] if E else [("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")]
        if E:  # routed experts stacked [E, rows, cols], the shared expert, its gate as a vector
            put(b + "ffn_gate_inp.weight", sd[p + "mlp.gate.weight"])
            for src, dst in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
                put(b + dst + ".weight", torch.stack([sd[f"{p}mlp.experts.{e}.{src}.weight"] for e in range(E)]))
            for src, dst in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")):
                put(b + dst + ".weight", sd[p + "mlp.shared_expert." + src + ".weight"])
            put(b + "ffn_gate_inp_shexp.weight", sd[p + "mlp.shared_expert_gate.weight"].reshape(-1))
        if kind == "full_attention":
            names += [("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
                      ("self_attn.o_proj", "attn_output")]
            put(b + "attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"] + 1)
            put(b + "attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"] + 1)
        for src, dst in names:
            stored[p + src + ".weight"] = put(b + dst + ".weight", sd[p + src + ".weight"])
        if kind == "full_attention":
            continue
        q, kd = p + "linear_attn.", Hk * Dk
        conv = sd[q + "conv1d.weight"].squeeze(1)
        if next_ and legacy_ssm_in:
            put(b + "ssm_in.weight", sd[q + "in_proj_qkvz.weight"])
        elif next_:  # the converter splits the per-key-head [q k v z] rows into attn_qkv and attn_gate
            qkvz = sd[q + "in_proj_qkvz.weight"].reshape(Hk, 2 * Dk + 2 * r * Dv, -1)
            parts = torch.split(qkvz, [Dk, Dk, r * Dv, r * Dv], dim=1)
            flat = [x.reshape(-1, x.shape[-1]) for x in parts]
            put(b + "attn_qkv.weight", torch.cat(flat[:3]))
            put(b + "attn_gate.weight", flat[3])
        if next_:
            put(b + "ssm_ba.weight", sd[q + "in_proj_ba.weight"])
            put(b + "ssm_out.weight", sd[q + "out_proj.weight"])
            put(b + "ssm_a", -torch.exp(sd[q + "A_log"]))
            put(b + "ssm_dt.bias", sd[q + "dt_bias"])
            put(b + "ssm_conv1d.weight", conv)
            put(b + "ssm_norm.weight", sd[q + "norm.weight"])
            continue
        qkv = sd[q + "in_proj_qkv.weight"]
        back = put(b + "attn_qkv.weight", torch.cat([qkv[:2 * kd], tiled(qkv[2 * kd:], 0, Dv)]))
        stored[q + "in_proj_qkv.weight"] = torch.cat([back[:2 * kd], untiled(back[2 * kd:], 0, Dv)])
        for src, dst, head in (("in_proj_z", "attn_gate", Dv), ("in_proj_b", "ssm_beta", 1), ("in_proj_a", "ssm_alpha", 1)):
            stored[q + src + ".weight"] = untiled(put(b + dst + ".weight", tiled(sd[q + src + ".weight"], 0, head)), 0, head)
        stored[q + "out_proj.weight"] = untiled(put(b + "ssm_out.weight", tiled(sd[q + "out_proj.weight"], 1, Dv)), 1, Dv)
        put(b + "ssm_a", tiled(-torch.exp(sd[q + "A_log"]), 0, 1))
        put(b + "ssm_dt.bias", tiled(sd[q + "dt_bias"], 0, 1))
        put(b + "ssm_conv1d.weight", torch.cat([conv[:2 * kd], tiled(conv[2 * kd:], 0, Dv)]))
        put(b + "ssm_norm.weight", sd[q + "norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return os.path.getsize(path), stored


@torch.no_grad()
def q8_0_reference(variant, folder, stored, prompt):
    """The checkpoint with its matrices as the Q8_0 GGUF stores them and every linear layer's
    input rounded as Q8_0 matmuls round it (llama.cpp's and the engine's): logits, greedy
    tokens and the greedy margin. out_proj's input is rounded in the GGUF's tiled head order,
    in which both engines hold it: with Dv < 32 a block of 32 spans two heads, and which two
    depends on the order."""
    model = load_f32(variant, folder)
    model.load_state_dict({**model.state_dict(), **stored, "lm_head.weight": stored["model.embed_tokens.weight"]})
    c = model.config
    Hk, r, Dv = c.linear_num_key_heads, c.linear_num_value_heads // c.linear_num_key_heads, c.linear_value_head_dim

    def tiled_round_trip(x):
        shape = x.shape
        t = x.reshape(*shape[:-1], Hk, r, Dv).transpose(-3, -2).reshape(shape)
        t = q8_0_round_trip(t)
        return t.reshape(*shape[:-1], r, Hk, Dv).transpose(-3, -2).reshape(shape)

    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            fn = tiled_round_trip if name.endswith("linear_attn.out_proj") else q8_0_round_trip
            hooks.append(m.register_forward_pre_hook(lambda mod, args, fn=fn: (fn(args[0]),)))
    tokens, margin = base.greedy(model, prompt, GREEDY_STEPS)
    logits = base.full_logits(model, prompt)
    for hook in hooks:
        hook.remove()
    return logits, tokens, margin


def check_with_llama_cpp(path, ref_path, max_rel_err=LLAMA_CPP_MAX_REL_ERR):
    """llama.cpp's logits for the reference prompt against transformers'; returns the error."""
    from llama_cpp import Llama
    from safetensors.torch import load_file
    ref = load_file(ref_path)
    prompt, want = ref["prompt"].tolist(), ref["logits"].numpy()
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, logits_all=True, n_threads=1, verbose=False)
    llm.eval(prompt)
    got = np.array(llm.scores[:len(prompt)])
    rel = float(np.abs(got - want).max() / np.abs(want).max())
    # The greedy token at every position, except where the reference's top two are within
    # llama.cpp's error of each other.
    top2 = np.sort(want, axis=1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0]) > 2 * rel * np.abs(want).max()
    same = got.argmax(1) == want.argmax(1)
    if rel > max_rel_err or not same[decided].all():
        sys.exit(f"{path}: llama.cpp disagrees with transformers (max error {rel:.2e} of max|logit|, "
                 f"argmax differs at {int((~same & decided).sum())} decided positions)")
    return rel


def make_gguf_fixtures(out_dir, sources):
    """<name>.gguf for each GGUF source built in this run (f32, sharing its reference), the
    ssm_in variant of Qwen3-Next and qwen3_5_tied_q8_0.gguf with its own reference; all checked
    against llama.cpp. The sources' safetensors folders are only their inputs: they are removed
    afterwards (the safetensors paths are covered by the other fixtures)."""
    total = 0
    for source in sources:
        folder = os.path.join(out_dir, source)
        size, _ = write_gguf(folder, folder + ".gguf")
        rel = check_with_llama_cpp(folder + ".gguf", folder + ".reference.safetensors")
        total += size + os.path.getsize(folder + ".reference.safetensors")
        print(f"{source}.gguf {size} bytes; llama.cpp's logits within {rel:.2e} of max|logit|")
    if "qwen3_next_tied_f32" in sources:  # its qkvz fused (ssm_in), as older converters wrote it
        folder = os.path.join(out_dir, "qwen3_next_tied_f32")
        size, _ = write_gguf(folder, folder + ".ssm_in.gguf", legacy_ssm_in=True)
        rel = check_with_llama_cpp(folder + ".ssm_in.gguf", folder + ".reference.safetensors")
        total += size
        print(f"qwen3_next_tied_f32.ssm_in.gguf {size} bytes; llama.cpp's logits within {rel:.2e} of max|logit|")
    if GGUF_FROM in sources:
        total += make_q8_0_gguf(out_dir)
    for source in sources:
        shutil.rmtree(os.path.join(out_dir, source))
    return total


def make_q8_0_gguf(out_dir):
    folder = os.path.join(out_dir, GGUF_FROM)
    name = "qwen3_5_tied_q8_0"
    path = os.path.join(out_dir, name + ".gguf")
    size, stored = write_gguf(folder, path, q8_0=True)
    from safetensors.torch import load_file
    prompt = load_file(folder + ".reference.safetensors")["prompt"].numpy().astype(np.int64)
    variant = next(v for v in VARIANTS if v.name == GGUF_FROM)
    logits, tokens, margin = q8_0_reference(variant, folder, stored, prompt)
    # Its seed is the f32 variant's, so the margin is what it is; the engine's tests hold it to
    # 1e-4 of max|logit| (about 1e-3 here), so a tenth of the usual margin still decides.
    if margin < MIN_GREEDY_MARGIN / 5:
        sys.exit(f"{name}: greedy margin {margin:.4f} below {MIN_GREEDY_MARGIN / 5}")
    ref = os.path.join(out_dir, name + ".reference.safetensors")
    base.write_reference(ref, prompt, logits, tokens, f"tools/make_hybrid_fixtures.py q8_0 of {GGUF_FROM} "
                         f"transformers={transformers.__version__} torch={torch.__version__}")
    rel = check_with_llama_cpp(path, ref, LLAMA_CPP_Q8_0_MAX_REL_ERR)
    print(f"{name}.gguf {size} bytes, margin {margin:.3f}; llama.cpp's logits within {rel:.2e} of max|logit|")
    return size + os.path.getsize(ref)


FPQUANT_NAME = "qwen3_5_mixed"
FPQUANT_FP8 = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.out_proj")
FPQUANT_NVFP4 = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def q8_0_round_trip(x):
    """x as the engine's int8 NVFP4 path sees it: quantize_row_q8_0 per block of 32, then
    q * f16(d) (the integer products times the block scale)."""
    blocks = x.reshape(-1, 32)
    amax = blocks.abs().amax(dim=1, keepdim=True)
    d = amax / 127.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    v = blocks * inv
    whole = torch.trunc(v)
    q = whole + torch.where((v - whole).abs() >= 0.5, torch.sign(v), torch.zeros_like(v))  # roundf
    return (q * d.to(torch.float16).float()).reshape(x.shape)


@torch.no_grad()
def int8_act_logits(model, prompt):
    hooks = [m.register_forward_pre_hook(lambda mod, args: (q8_0_round_trip(args[0]),))
             for name, m in model.named_modules()
             if isinstance(m, torch.nn.Linear) and name.endswith(FPQUANT_NVFP4)]
    logits = base.full_logits(model, prompt)
    for hook in hooks:
        hook.remove()
    return logits


@torch.no_grad()
def quantize_hybrid(model, mfq):
    """Quantizes the model in place (weights <- dequantized values); returns the stored tensors
    and {module: algorithm}."""
    stored, algos = {}, {}
    for pname, p in model.state_dict().items():
        module = pname[:-len(".weight")] if pname.endswith(".weight") else None
        algo = None
        if module is not None and module.endswith(FPQUANT_FP8):
            algo = "FP8"
        elif module is not None and module.endswith(FPQUANT_NVFP4):
            algo = "NVFP4"
        if algo is None:  # embeddings, norms, conv, A_log, dt_bias, in_proj_a/b, lm_head: BF16
            stored[pname] = p.to(torch.bfloat16).contiguous()
            p.copy_(stored[pname].float())
            continue
        tensors, deq = mfq.QUANTIZERS[algo](p.float())
        p.copy_(deq)
        algos[module] = algo
        for suffix, t in tensors.items():
            stored[f"{module}.{suffix}"] = t.contiguous()
    return stored, algos


def make_fpquant_variant(out_dir, base_seed=801):
    import make_fp_quant_fixtures as mfq  # imports modelopt
    variant = Variant(FPQUANT_NAME, "qwen3_5_text", {"full_attention_interval": 4}, seed=base_seed)
    for attempt in range(MAX_SEED_TRIES):
        seed = variant.seed + 1000 * attempt
        config, model_cls = make_model(variant)
        torch.manual_seed(seed)
        model = model_cls(config).eval()
        init_weights(model, seed)
        stored, algos = quantize_hybrid(model, mfq)
        prompt = base.prompt_ids(seed, PROMPT_LEN, config.vocab_size)
        tokens, margin = base.greedy(model, prompt, GREEDY_STEPS)
        if margin >= MIN_GREEDY_MARGIN:
            break
    else:
        sys.exit(f"{FPQUANT_NAME}: no seed gives a greedy margin >= {MIN_GREEDY_MARGIN}")
    base.check_greedy_without_cache(model, prompt, tokens)
    logits = base.full_logits(model, prompt)
    folder = os.path.join(out_dir, FPQUANT_NAME)
    hf_quant = mfq.write_checkpoint(folder, FPQUANT_NAME, model, stored, algos)
    assert hf_quant["quantization"]["quant_algo"] == "MIXED_PRECISION"
    ref = os.path.join(out_dir, FPQUANT_NAME + ".reference.safetensors")
    int8_logits = int8_act_logits(model, prompt)
    base.write_reference(ref, prompt, logits, tokens, f"tools/make_hybrid_fixtures.py seed={seed} "
                         f"transformers={transformers.__version__} torch={torch.__version__}",
                         logits_int8_act=int8_logits)
    size = base.dir_bytes(folder) + os.path.getsize(ref)
    kinds = {a: sum(1 for v in algos.values() if v == a) for a in sorted(set(algos.values()))}
    print(f"{FPQUANT_NAME:20} seed {seed:5} max|logit| {float(logits.abs().max()):8.3f} margin {margin:6.3f} "
          f"modules {kinds} int8-activation logits differ by {float((int8_logits - logits).abs().max()):.3f} "
          f"bytes {size}")
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
    warnings.filterwarnings("ignore", category=FutureWarning)
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    start = time.time()
    rows = [make_variant(v, out_dir) for v in VARIANTS if not args.only or v.name in args.only]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{time.time() - start:.1f} s")
    total = 0
    for r in rows:
        if r["name"] in GGUF_SOURCES:  # counted with its GGUF below
            continue
        size = base.dir_bytes(r["folder"]) + os.path.getsize(r["ref"])
        total += size
        print(f"{r['name']:20} seed {r['seed']:5} vocab {r['vocab']:4} max|logit| "
              f"{r['max_logit']:8.3f} margin {r['margin']:6.3f} bytes {size}")
    sources = [r["name"] for r in rows if r["name"] in GGUF_SOURCES]
    if sources:
        total += make_gguf_fixtures(out_dir, sources)
    if not args.no_fpquant and (not args.only or FPQUANT_NAME in args.only):
        total += make_fpquant_variant(os.path.normpath(args.fpquant_out))
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()

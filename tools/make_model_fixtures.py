#!/usr/bin/env python3
"""Builds tiny random-weight HF checkpoints and their transformers reference outputs.

For every variant below this writes
  tests/fixtures/models/<name>/{config.json, generation_config.json, model.safetensors}
      a real Hugging Face checkpoint folder (save_pretrained), weights in the variant's dtype;
  tests/fixtures/models/<name>.reference.safetensors
      "prompt" I32 [T], "logits" F32 [T, V], "greedy" I32 [16], and for long-context
      variants "long_prompt" I32 [L], "long_logits" F32 [L, V].
The reference is always float32 compute (eager attention, CPU) from the weights as stored:
bf16/f16 checkpoints are reloaded and upcast, so the C++ engine can be held to f32 accuracy.
Greedy decoding ignores EOS (a manual argmax loop over the KV cache).

Rerunning reproduces byte-identical files (fixed seeds, one CPU thread).
Run: .venv-tools/bin/python tools/make_model_fixtures.py [--out tests/fixtures/models]
"""
import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
import warnings

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

GREEDY_STEPS = 16
PROMPT_LEN = 24
LONG_PROMPT_LEN = 100       # crosses YaRN's original_max_position_embeddings = 64
MIN_GREEDY_MARGIN = 0.05    # top-1 minus top-2 logit along the greedy path; else reseed
MAX_SEED_TRIES = 50

ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclasses.dataclass
class Variant:
    name: str
    arch: str
    dtype: str                      # stored weight dtype
    config: dict                    # architecture config overrides
    long_prompt: bool = False       # also record a prompt of LONG_PROMPT_LEN tokens
    seed: int = 0
    # Rewrite config.json in the transformers 4.x layout most hub checkpoints still carry:
    # top-level rope_theta, "rope_scaling" (null or a dict keyed by rope_scaling_key),
    # "torch_dtype" instead of "dtype".
    legacy_config: bool = False
    rope_scaling_key: str = "rope_type"


def base_config(arch):
    """GQA (4 query heads, 2 kv heads), 2 layers, tiny sizes."""
    common = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  hidden_act="silu", bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                  use_cache=True)
    if arch == "llama":
        return dict(common, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "qwen2":
        return dict(common, vocab_size=320, rms_norm_eps=1e-6,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    # Qwen3: head_dim (16) != hidden_size / num_attention_heads (8).
    return dict(common, vocab_size=288, head_dim=16, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def yarn(theta, **extra):
    # beta_fast/beta_slow differ from the defaults (32/1) so a parser that ignores them fails.
    return dict({"rope_type": "yarn", "rope_theta": theta, "factor": 4.0,
                 "original_max_position_embeddings": 64, "beta_fast": 16.0, "beta_slow": 2.0}, **extra)


VARIANTS = [
    Variant("llama_f32", "llama", "float32", {}, seed=101),
    Variant("llama_bf16_tied", "llama", "bfloat16", {"tie_word_embeddings": True}, seed=102),
    # Small theta so the YaRN ramp spans several of the few frequencies; explicit attention_factor.
    Variant("llama_yarn", "llama", "float32",
            {"rope_parameters": yarn(100.0, attention_factor=1.25)}, long_prompt=True, seed=103),
    Variant("llama_linear", "llama", "float32",
            {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
            long_prompt=True, seed=104),
    Variant("qwen2_f32", "qwen2", "float32", {}, seed=201),
    Variant("qwen2_bf16_tied", "qwen2", "bfloat16", {"tie_word_embeddings": True}, seed=202),
    Variant("qwen2_f16", "qwen2", "float16", {}, seed=203),
    Variant("qwen3_f32", "qwen3", "float32", {}, seed=301),
    Variant("qwen3_bf16_tied", "qwen3", "bfloat16", {"tie_word_embeddings": True}, seed=302),
    # attention_factor derived: 0.1 ln(4) + 1.
    Variant("qwen3_yarn", "qwen3", "float32", {"rope_parameters": yarn(100.0)}, long_prompt=True,
            seed=303),
    # Legacy config layouts. Qwen2.5-style YaRN: {"type": "yarn"}, default betas.
    Variant("qwen2_legacy_yarn", "qwen2", "bfloat16",
            {"rope_parameters": {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0,
                                 "original_max_position_embeddings": 64}},
            long_prompt=True, seed=204, legacy_config=True, rope_scaling_key="type"),
    # Sliding-window attention, the prompt (24 tokens) and the greedy continuation far longer
    # than the window: layers from max_window_layers on slide (transformers' rule) ...
    Variant("qwen3_sliding", "qwen3", "float32",
            {"use_sliding_window": True, "sliding_window": 7, "max_window_layers": 1, "num_hidden_layers": 3},
            seed=305),
    # ... or the layers layer_types names.
    Variant("qwen2_sliding_layer_types", "qwen2", "float32",
            {"use_sliding_window": True, "sliding_window": 5,
             "layer_types": ["sliding_attention", "full_attention"]}, seed=205),
    # Qwen3 hub style: "rope_scaling": null, tied bf16.
    Variant("qwen3_legacy", "qwen3", "bfloat16", {"tie_word_embeddings": True}, seed=304,
            legacy_config=True),
]


def init_weights(model, seed):
    """Weights larger than HF's default init so logits are spread and greedy is decisive."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):          # RMSNorm gains (also q_norm / k_norm)
                value = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
            elif name.endswith(".bias"):               # Qwen2 q/k/v bias
                value = 0.2 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name or "lm_head" in name:
                value = 0.5 * torch.randn(p.shape, generator=gen)
            else:                                      # projections
                value = 0.2 * torch.randn(p.shape, generator=gen)
            p.copy_(value)


def build_and_save(variant, folder, seed):
    config_cls, model_cls = ARCHS[variant.arch]
    cfg = dict(base_config(variant.arch), **variant.config)
    config = config_cls(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    init_weights(model, seed)
    if variant.config.get("tie_word_embeddings"):
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model = model.to(DTYPES[variant.dtype])
    model.config.dtype = variant.dtype
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder)
    if variant.legacy_config:
        write_legacy_config(os.path.join(folder, "config.json"), variant.rope_scaling_key)


def write_legacy_config(path, rope_scaling_key):
    with open(path) as f:
        cfg = json.load(f)
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    rope_type = rope.pop("rope_type")
    cfg["rope_scaling"] = None if rope_type == "default" else dict(rope, **{rope_scaling_key: rope_type})
    cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_f32(folder):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def prompt_ids(seed, length, vocab):
    rng = np.random.default_rng(seed)
    return rng.integers(3, vocab, size=length, dtype=np.int64)  # skip bos/eos ids


@torch.no_grad()
def full_logits(model, ids):
    out = model(input_ids=torch.from_numpy(ids)[None], use_cache=False)
    return out.logits[0].float()                     # [T, V]


@torch.no_grad()
def greedy(model, ids, steps):
    """Argmax decode over the KV cache, one token per step; EOS does not stop it.
    Returns the tokens and the smallest top-1 minus top-2 margin seen."""
    out = model(input_ids=torch.from_numpy(ids)[None], use_cache=True)
    tokens, margins = [], []
    for step in range(steps):
        last = out.logits[0, -1].float()
        top2 = torch.topk(last, 2).values
        margins.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        tokens.append(nxt)
        if step + 1 < steps:
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=out.past_key_values,
                        use_cache=True)
    return tokens, min(margins)


def check_greedy_without_cache(model, ids, tokens):
    """The cached loop must agree with recomputing the whole sequence each step."""
    seq = list(ids)
    for expected in tokens:
        logits = full_logits(model, np.array(seq, dtype=np.int64))
        assert int(torch.argmax(logits[-1])) == expected, "cached and uncached greedy differ"
        seq.append(expected)


def write_reference(path, prompt, logits, tokens, generator, **extra):
    """A <name>.reference.safetensors: "prompt" I32 [T], "logits" F32 [T, V], "greedy" I32 and
    any extra tensors. One metadata key: safetensors writes metadata in hash-map order, so
    several keys would make reruns differ byte-wise."""
    tensors = {"prompt": torch.from_numpy(prompt.astype(np.int32)), "logits": logits.contiguous(),
               "greedy": torch.tensor(tokens, dtype=torch.int32)}
    tensors.update({k: v.contiguous() for k, v in extra.items()})
    save_file(tensors, path, metadata={"generator": generator})


def make_variant(variant, out_dir):
    folder = os.path.join(out_dir, variant.name)
    for attempt in range(MAX_SEED_TRIES):
        seed = variant.seed + 1000 * attempt
        build_and_save(variant, folder, seed)
        model = load_f32(folder)
        vocab = model.config.vocab_size
        prompt = prompt_ids(seed, PROMPT_LEN, vocab)
        tokens, margin = greedy(model, prompt, GREEDY_STEPS)
        if margin >= MIN_GREEDY_MARGIN:
            break
    else:
        sys.exit(f"{variant.name}: no seed gives a greedy margin >= {MIN_GREEDY_MARGIN}")
    check_greedy_without_cache(model, prompt, tokens)
    logits = full_logits(model, prompt)
    extra = {}
    if variant.long_prompt:
        long_prompt = prompt_ids(seed + 1, LONG_PROMPT_LEN, vocab)
        extra = {"long_prompt": torch.from_numpy(long_prompt.astype(np.int32)),
                 "long_logits": full_logits(model, long_prompt)}
    ref_path = os.path.join(out_dir, variant.name + ".reference.safetensors")
    write_reference(ref_path, prompt, logits, tokens, f"tools/make_model_fixtures.py seed={seed} "
                    f"transformers={transformers.__version__} torch={torch.__version__}", **extra)
    return dict(name=variant.name, seed=seed, vocab=vocab, margin=margin,
                max_logit=float(logits.abs().max()), folder=folder, ref=ref_path,
                rope=model.config.rope_parameters)


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def sha8(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()[:8]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "models"))
    parser.add_argument("--only", nargs="*", help="variant names to (re)build")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)  # past_key_values -> cache rename
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)

    start = time.time()
    rows = []
    for variant in VARIANTS:
        if args.only and variant.name not in args.only:
            continue
        rows.append(make_variant(variant, out_dir))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{time.time() - start:.1f} s")
    print(f"{'name':18} {'seed':>5} {'vocab':>5} {'max|logit|':>10} {'margin':>7} "
          f"{'folder':>8} {'ref':>8} {'sha(model)':>10} rope")
    total = 0
    for r in rows:
        folder_size = dir_bytes(r["folder"])
        ref_size = os.path.getsize(r["ref"])
        total += folder_size + ref_size
        print(f"{r['name']:18} {r['seed']:5} {r['vocab']:5} {r['max_logit']:10.3f} "
              f"{r['margin']:7.3f} {folder_size:8} {ref_size:8} "
              f"{sha8(os.path.join(r['folder'], 'model.safetensors')):>10} {json.dumps(r['rope'])}")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Builds tiny Qwen3 checkpoints in FP8 / NVFP4 layouts and their f32 reference outputs.

Checkpoints (tests/fixtures/fpquant/<name>/: config.json, generation_config.json,
model.safetensors, and hf_quant_config.json for ModelOpt layouts):
  qwen3_nvfp4      ModelOpt NVFP4 (quant_algo NVFP4, group_size 16), lm_head excluded (BF16)
  qwen3_fp8        ModelOpt FP8 per-tensor (weight_scale / input_scale f32 scalars), tied
                   embeddings
  qwen3_fp8_block  Qwen-release block FP8 (tied embeddings): quant_method "fp8", weight_block_size [128, 128],
                   weight_scale_inv f32 [ceil(N/128), ceil(K/128)]; hidden 144 and
                   intermediate 192 leave partial blocks in both dimensions
  qwen3_mixed      ModelOpt MIXED_PRECISION: attention FP8, MLP NVFP4, BF16 everything else
plus <name>.reference.safetensors ("prompt" I32 [T], "logits" F32 [T, V], "greedy" I32 [16]) and
decode_tables.safetensors ("e4m3" F32 [256], "e5m2" F32 [256] from torch's float8 types,
"e2m1" F32 [16] from ModelOpt's NVFP4 table).

Quantization uses NVIDIA ModelOpt's own tensor quantizers (NVFP4QTensor, FP8QTensor: the
functions its HF export calls to produce the packed weights and scales); the file layout
(tensor names, dtypes, hf_quant_config.json, config.json quantization_config) follows
modelopt.torch.export.unified_export_hf. The reference model holds the DEQUANTIZED weights
(ModelOpt's dequantize()), and this script checks that its own numpy decoder of the stored
bytes gives bit-identical weights, so the stored bytes alone define the reference. Non-quantized
tensors are stored BF16 and the reference uses the same BF16-rounded values. Reference compute
is f32 transformers (eager attention, CPU), input quantization not emulated.

Needs: .venv-tools with torch, transformers, and `pip install --no-deps nvidia-modelopt`
(plus its small imports omegaconf, antlr4-python3-runtime==4.9.3, pulp, scipy, ninja).
Rerunning reproduces byte-identical files.
Run: .venv-tools/bin/python tools/make_fp_quant_fixtures.py
"""
import argparse
import json
import os
import sys
import warnings

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mmf  # noqa: E402  (shared weight init, prompts, greedy loop)

warnings.filterwarnings("ignore")
import modelopt  # noqa: E402
from modelopt.torch.quantization.qtensor import FP8QTensor, NVFP4QTensor  # noqa: E402
from modelopt.torch.quantization.qtensor.nvfp4_tensor import e2m1_values  # noqa: E402

GROUP = 16
BLOCK = 128
FP8_MAX = 448.0
E2M1_MAX = 6.0
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
ATTENTION = LINEARS[:4]


def tiny_config(tied):
    # head_dim 32 x 4 heads = 128 != hidden 144; intermediate 192 = 128 + 64.
    return Qwen3Config(vocab_size=256, hidden_size=144, intermediate_size=192, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       max_position_embeddings=256, hidden_act="silu", bos_token_id=1,
                       eos_token_id=2, tie_word_embeddings=tied, use_cache=True, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


VARIANTS = {
    # name: (algorithm per linear module kind, tied embeddings, seed)
    "qwen3_nvfp4": (lambda kind: "NVFP4", False, 401),
    "qwen3_fp8": (lambda kind: "FP8", True, 402),
    "qwen3_fp8_block": (lambda kind: "FP8_BLOCK", True, 403),
    "qwen3_mixed": (lambda kind: "FP8" if kind in ATTENTION else "NVFP4", False, 404),
}

# ---------------------------------------------------------------------------------------------
# The numpy decoder the C++ engine mirrors; proven equal to ModelOpt's dequantize below.


def e4m3_decode(b):
    b = np.asarray(b, dtype=np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp, mant = (b >> 3) & 0xF, b & 0x7
    val = np.where(exp == 0, mant * 2.0 ** -9, (1 + mant / 8.0) * 2.0 ** (exp - 7.0))
    val = np.where((exp == 0xF) & (mant == 0x7), np.nan, val)
    return (sign * val).astype(np.float32)


def e5m2_decode(b):
    b = np.asarray(b, dtype=np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp, mant = (b >> 2) & 0x1F, b & 0x3
    val = np.where(exp == 0, mant * 2.0 ** -16, (1 + mant / 4.0) * 2.0 ** (exp - 15.0))
    val = np.where(exp == 0x1F, np.where(mant == 0, np.inf, np.nan), val)
    return (sign * val).astype(np.float32)


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def np_dequant_nvfp4(packed, scale_e4m3, scale_2):
    codes = np.empty((packed.shape[0], packed.shape[1] * 2), np.uint8)
    codes[:, 0::2] = packed & 0xF   # low nibble = even element
    codes[:, 1::2] = packed >> 4
    block = e4m3_decode(scale_e4m3) * np.float32(scale_2)          # [N, K/16], f32 product
    return E2M1[codes] * np.repeat(block, GROUP, axis=1)


def np_dequant_fp8(q_bytes, scale_grid, block_rows, block_cols):
    n, k = q_bytes.shape
    full = np.repeat(np.repeat(scale_grid, block_rows, axis=0), block_cols, axis=1)[:n, :k]
    return e4m3_decode(q_bytes) * full.astype(np.float32)


def u8(t):
    return t.contiguous().view(torch.uint8).numpy()

# ---------------------------------------------------------------------------------------------
# Quantizers: ModelOpt's functions, checked against the numpy decoder.


def quant_nvfp4(w):
    q, scale, scale_2 = NVFP4QTensor.quantize(w.clone(), GROUP)
    deq = q.dequantize(dtype=torch.float32, scale=scale, double_scale=scale_2,
                       block_sizes={-1: GROUP})
    packed = q._quantized_data
    assert packed.dtype == torch.uint8 and scale.dtype == torch.float8_e4m3fn
    mine = np_dequant_nvfp4(packed.numpy(), u8(scale), scale_2.float().item())
    assert np.array_equal(mine, deq.numpy()), "numpy NVFP4 decoder differs from ModelOpt"
    tensors = {"weight": packed, "weight_scale": scale, "weight_scale_2": scale_2.float().reshape(())}
    return tensors, deq


def quant_fp8(w):
    q, scale = FP8QTensor.quantize(w.clone())
    deq = q.dequantize(dtype=torch.float32, scale=scale)
    qd = q._quantized_data
    mine = np_dequant_fp8(u8(qd), scale.float().reshape(1, 1).numpy(), *w.shape)
    assert np.array_equal(mine, deq.numpy()), "numpy FP8 decoder differs from ModelOpt"
    return {"weight": qd, "weight_scale": scale.float().reshape(())}, deq


def quant_fp8_block(w):
    blocks = {0: BLOCK, 1: BLOCK}
    q, scale = FP8QTensor.quantize(w.clone(), block_sizes=blocks)
    deq = q.dequantize(dtype=torch.float32, scale=scale, block_sizes=blocks)
    qd = q._quantized_data
    grid = (-(-w.shape[0] // BLOCK), -(-w.shape[1] // BLOCK))
    assert tuple(scale.shape) == grid, (scale.shape, grid)
    mine = np_dequant_fp8(u8(qd), scale.float().numpy(), BLOCK, BLOCK)
    assert np.array_equal(mine, deq.numpy()), "numpy block-FP8 decoder differs from ModelOpt"
    return {"weight": qd, "weight_scale_inv": scale.float().contiguous()}, deq


QUANTIZERS = {"NVFP4": quant_nvfp4, "FP8": quant_fp8, "FP8_BLOCK": quant_fp8_block}

# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def input_amax(model, prompt):
    """Largest |input| of every linear on the prompt (ModelOpt's calibration statistic)."""
    amax, hooks = {}, []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            hooks.append(mod.register_forward_pre_hook(
                lambda m, args, name=name: amax.__setitem__(
                    name, max(amax.get(name, 0.0), float(args[0].abs().max())))))
    mmf.full_logits(model, prompt)
    for h in hooks:
        h.remove()
    return amax


@torch.no_grad()
def build(name, seed):
    pick_algo, tied, _ = VARIANTS[name]
    config = tiny_config(tied)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    mmf.init_weights(model, seed)
    if tied:
        model.tie_weights()
    prompt = mmf.prompt_ids(seed, mmf.PROMPT_LEN, config.vocab_size)
    amax = input_amax(model, prompt)  # calibration on the unquantized model, as ModelOpt does

    stored, algos = {}, {}
    for pname, p in model.state_dict().items():
        if tied and pname == "lm_head.weight":
            continue
        module = pname[:-len(".weight")]
        kind = next((k for k in LINEARS if module.endswith(k)), None)
        if kind is None:  # embeddings, norms, lm_head: BF16 as stored, BF16-rounded reference
            stored[pname] = p.to(torch.bfloat16).contiguous()
            p.copy_(stored[pname].float())
            continue
        algo = pick_algo(kind)
        algos[module] = algo
        tensors, deq = QUANTIZERS[algo](p.float())
        p.copy_(deq)
        for suffix, t in tensors.items():
            stored[f"{module}.{suffix}"] = t.contiguous()
        if algo != "FP8_BLOCK":  # ModelOpt static input scales; Qwen's block FP8 is dynamic
            maxbound = E2M1_MAX if algo == "NVFP4" else 1.0
            stored[f"{module}.input_scale"] = torch.tensor(amax[module] / (maxbound * FP8_MAX),
                                                           dtype=torch.float32)
    return model, stored, algos, prompt


def quant_configs(name, algos):
    """(hf_quant_config.json or None, config.json quantization_config)."""
    producer = {"name": "modelopt", "version": modelopt.__version__}
    if name == "qwen3_fp8_block":
        return None, {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                      "weight_block_size": [BLOCK, BLOCK]}
    kinds = sorted(set(algos.values()))
    if len(kinds) == 1:
        q = {"quant_algo": kinds[0], "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}
        if kinds[0] == "NVFP4":
            q["group_size"] = GROUP
    else:
        layers = {m: ({"quant_algo": "NVFP4", "group_size": GROUP} if a == "NVFP4" else {"quant_algo": a})
                  for m, a in sorted(algos.items())}
        q = {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None,
             "exclude_modules": ["lm_head"], "quantized_layers": layers}
    hf_quant = {"producer": producer, "quantization": q}
    from modelopt.torch.export.convert_hf_config import convert_hf_quant_config_format
    return hf_quant, convert_hf_quant_config_format(hf_quant)


def write_json(path, obj):
    with open(path, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_checkpoint(folder, name, model, stored, algos):
    """The export folder (emptied first): config.json with dtype bfloat16 and the
    quantization_config, hf_quant_config.json for ModelOpt layouts, generation_config.json and
    model.safetensors holding `stored`. Returns hf_quant_config (None for Qwen's block FP8)."""
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    hf_quant, qc = quant_configs(name, algos)
    cfg = model.config.to_dict()
    cfg["dtype"] = "bfloat16"
    cfg["quantization_config"] = qc
    for key in ("_attn_implementation_autoset", "_name_or_path", "transformers_version"):
        cfg.pop(key, None)
    write_json(os.path.join(folder, "config.json"), cfg)
    if hf_quant is not None:
        write_json(os.path.join(folder, "hf_quant_config.json"), hf_quant)
    GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False).save_pretrained(folder)
    save_file(stored, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return hf_quant


def make_variant(name, out_dir):
    _, _, base_seed = VARIANTS[name]
    for attempt in range(mmf.MAX_SEED_TRIES):
        seed = base_seed + 1000 * attempt
        model, stored, algos, prompt = build(name, seed)
        tokens, margin = mmf.greedy(model, prompt, mmf.GREEDY_STEPS)
        if margin >= mmf.MIN_GREEDY_MARGIN:
            break
    else:
        sys.exit(f"{name}: no seed gives a greedy margin >= {mmf.MIN_GREEDY_MARGIN}")
    mmf.check_greedy_without_cache(model, prompt, tokens)
    logits = mmf.full_logits(model, prompt)

    folder = os.path.join(out_dir, name)
    write_checkpoint(folder, name, model, stored, algos)
    mmf.write_reference(os.path.join(out_dir, name + ".reference.safetensors"), prompt, logits, tokens,
                        f"tools/make_fp_quant_fixtures.py seed={seed} modelopt={modelopt.__version__} "
                        f"torch={torch.__version__}")
    return seed, margin, float(logits.abs().max()), mmf.dir_bytes(folder)


def write_decode_tables(out_dir):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    e4m3 = codes.view(torch.float8_e4m3fn).float()
    e5m2 = codes.view(torch.float8_e5m2).float()
    assert np.array_equal(e4m3.numpy(), e4m3_decode(np.arange(256)), equal_nan=True)
    assert np.array_equal(e5m2.numpy(), e5m2_decode(np.arange(256)), equal_nan=True)
    assert np.array_equal(e2m1_values.float().numpy(), E2M1)
    save_file({"e4m3": e4m3.contiguous(), "e5m2": e5m2.contiguous(),
               "e2m1": e2m1_values.float().contiguous()},
              os.path.join(out_dir, "decode_tables.safetensors"),
              metadata={"generator": f"tools/make_fp_quant_fixtures.py torch={torch.__version__}"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "fpquant"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    write_decode_tables(out_dir)
    total = 0
    for name in VARIANTS:
        seed, margin, max_logit, size = make_variant(name, out_dir)
        ref = os.path.getsize(os.path.join(out_dir, name + ".reference.safetensors"))
        total += size + ref
        print(f"{name:16} seed {seed:5} margin {margin:6.3f} max|logit| {max_logit:7.3f} "
              f"folder {size:7} ref {ref:6}")
    total += os.path.getsize(os.path.join(out_dir, "decode_tables.safetensors"))
    print(f"total {total} bytes (modelopt {modelopt.__version__}, torch {torch.__version__}, "
          f"transformers {transformers.__version__})")


if __name__ == "__main__":
    main()

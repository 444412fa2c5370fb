#!/usr/bin/env python3
"""Random-weight models with the shapes of real Qwen3 / Qwen3.5 checkpoints, for speed benchmarks.

The weights are random (normal, std 0.02; norms 1.0): the models produce nonsense, but every
tensor has the real shape and type, so speed matches a real checkpoint of the same size and
quantization. The real Qwen3 tokenizer is embedded, so both engines tokenize real text alike.

Files follow llama.cpp's conventions for arch "qwen3" (tensor names, qwen3.* keys, gpt2/qwen2
vocab), written by the `gguf` package; the BF16 master is then quantized by llama.cpp itself
(llama-cpp-python's llama_model_quantize) to Q4_K_M and Q8_0:

  models/bench/qwen3-0.6b-{bf16,q4_k_m,q8_0}.gguf
  models/bench/qwen3-1.7b-{bf16,q4_k_m,q8_0}.gguf
  models/bench/qwen35-0.8b-{bf16,q4_k_m,q8_0}.gguf   Qwen3.5-0.8B's hybrid shape (arch "qwen35":
      18 Gated DeltaNet + 6 gated-attention layers) with the Qwen3 vocabulary (151,936 rows, not
      Qwen3.5's 248,320): GGUF and llama.cpp quantization only
  models/bench/qwen35-0.8b-mtp-{bf16,q4_k_m,q8_0}.gguf   the same with Qwen3.5's MTP head as
      llama.cpp's converter writes it (qwen35.nextn_predict_layers = 1, blk.24: a gated
      full-attention layer plus nextn.eh_proj / enorm / hnorm / shared_head_norm), for --mtp

`--quants nvfp4 fp8` also writes HF checkpoint folders in NVIDIA ModelOpt's layouts from the SAME
BF16 master (same weights; llama.cpp names mapped back to HF names), quantized here in numpy with
ModelOpt's formulas (NVFP4QTensor / FP8QTensor: see quantize_nvfp4 / quantize_fp8):

  models/bench/qwen3-{size}-nvfp4/   NVFP4: U8 [N, K/2] + F8_E4M3 weight_scale [N, K/16] +
                                     F32 weight_scale_2 and input_scale
  models/bench/qwen3-{size}-fp8/     FP8: F8_E4M3 [N, K] + F32 weight_scale and input_scale
  (config.json, hf_quant_config.json, model.safetensors, tokenizer.json, tokenizer_config.json)

The embedding and the norms stay BF16 (as ModelOpt leaves them). The lm_head is written UNTIED
(tie_word_embeddings false; its values are the embedding's) and quantized in the folder's format,
not excluded as ModelOpt's default export does: llama.cpp's Q4_K_M / Q8_0 files quantize their
tied output matrix too (Q6_K / Q8_0), so the bytes read per decoded token stay comparable between
an NVFP4 folder and the Q4_K_M file, and between the FP8 folder and the Q8_0 file.
input_scale is not calibrated (random weights have no meaningful activations): every module gets
the scale of an activation amax of INPUT_AMAX (8.0, about what RMS-normalised activations of a
real Qwen3 reach), i.e. amax / (6 * 448) for NVFP4 and amax / 448 for FP8. zen validates but does
not apply it. After writing, sample tensors are read back from the file; every code is checked to
be a nearest grid value in the scaled domain where ModelOpt rounds, and the relative error of the
dequantized weights against the master is printed (NVFP4 ~0.095, FP8 ~0.026).
For tied masters the embedding's GGUF type says what llama.cpp did with the output matrix:
Q4_K_M stores token_embd as Q6_K, Q8_0 as Q8_0.
Needs ml_dtypes (`.venv-tools/bin/pip install ml_dtypes`) for the FP8 E4M3 rounding.

  .venv-tools/bin/python tools/make_bench_models.py [--sizes 0.6b 1.7b] [--out models/bench]
        [--quants q4_k_m q8_0 nvfp4 fp8] [--force]
"""
import argparse
import ctypes
import json
import pathlib
import re
import shutil
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKENIZER_DIR = pathlib.Path("/work/shared/data/tokenizers/qwen3")

# Qwen3 config.json values (hidden, layers, heads, kv heads, head_dim, ffn, vocab; all tied), and
# Qwen3.5-0.8B's (its Gated DeltaNet: key / value heads and head sizes, conv width, every 4th layer
# full attention with a quarter of head_dim rotated).
SHAPES = {
    "0.6b": dict(arch="qwen3", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072, vocab=151936),
    "1.7b": dict(arch="qwen3", hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=6144, vocab=151936),
    "0.8b": dict(arch="qwen35", hidden=1024, layers=24, heads=8, kv_heads=2, head_dim=256, ffn=3584, vocab=151936,
                 k_heads=16, v_heads=16, k_dim=128, v_dim=128, conv=4, interval=4),
}
SHAPES["0.8b-mtp"] = dict(SHAPES["0.8b"], mtp=1)
CONTEXT_LENGTH = 40960
ROPE_THETA = 1_000_000.0
RMS_EPS = 1e-6
WEIGHT_STD = 0.02


def tensor_plan(s):
    """[(name, numpy shape [rows=out, cols=in], kind)] in llama.cpp's order; kind: "matrix"
    (random bf16), "norm" (ones), "conv" (random f32), "ssm_a" (-exp(A_log), negative f32)."""
    h, hd = s["hidden"], s["head_dim"]
    plan = [("token_embd.weight", (s["vocab"], h), "matrix")]
    hybrid = s["arch"] == "qwen35"
    for i in range(s["layers"] + s.get("mtp", 0)):
        b = f"blk.{i}."
        plan.append((b + "attn_norm.weight", (h,), "norm"))
        if i >= s["layers"]:  # the MTP (nextn) block: a full-attention layer plus its own parts
            plan += [(b + "nextn.eh_proj.weight", (h, 2 * h), "matrix")]
            plan += [(b + f"nextn.{n}.weight", (h,), "norm") for n in ("enorm", "hnorm", "shared_head_norm")]
        if hybrid and i < s["layers"] and (i + 1) % s["interval"] != 0:  # Gated DeltaNet
            kd, vd, hv = s["k_heads"] * s["k_dim"], s["v_heads"] * s["v_dim"], s["v_heads"]
            plan += [
                (b + "attn_qkv.weight", (2 * kd + vd, h), "matrix"),
                (b + "attn_gate.weight", (vd, h), "matrix"),
                (b + "ssm_conv1d.weight", (2 * kd + vd, s["conv"]), "conv"),
                (b + "ssm_dt.bias", (hv,), "norm"),
                (b + "ssm_a", (hv,), "ssm_a"),
                (b + "ssm_beta.weight", (hv, h), "matrix"),
                (b + "ssm_alpha.weight", (hv, h), "matrix"),
                (b + "ssm_norm.weight", (s["v_dim"],), "norm"),
                (b + "ssm_out.weight", (h, vd), "matrix"),
            ]
        else:
            q_rows = s["heads"] * hd * (2 if hybrid else 1)  # qwen35: query and gate per head
            plan += [
                (b + "attn_q.weight", (q_rows, h), "matrix"),
                (b + "attn_k.weight", (s["kv_heads"] * hd, h), "matrix"),
                (b + "attn_v.weight", (s["kv_heads"] * hd, h), "matrix"),
                (b + "attn_q_norm.weight", (hd,), "norm"),
                (b + "attn_k_norm.weight", (hd,), "norm"),
                (b + "attn_output.weight", (h, s["heads"] * hd), "matrix"),
            ]
        plan += [
            (b + ("post_attention_norm.weight" if hybrid else "ffn_norm.weight"), (h,), "norm"),
            (b + "ffn_gate.weight", (s["ffn"], h), "matrix"),
            (b + "ffn_up.weight", (s["ffn"], h), "matrix"),
            (b + "ffn_down.weight", (h, s["ffn"]), "matrix"),
        ]
    plan.append(("output_norm.weight", (h,), "norm"))  # tied: no output.weight
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
    arch = s["arch"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"{'Qwen3.5' if arch == 'qwen35' else 'Qwen3'} {size.upper()} random-weight bench model")
    w.add_type("model")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_context_length(CONTEXT_LENGTH)
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"] + s.get("mtp", 0))
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)
    if arch == "qwen35":  # as llama.cpp's converter writes Qwen3.5 (see tools/make_hybrid_fixtures.py)
        rot = s["head_dim"] // 4
        w.add_uint32("qwen35.rope.dimension_count", rot)
        w.add_array("qwen35.rope.dimension_sections", [11, 11, 10, 0])
        w.add_uint32("qwen35.ssm.conv_kernel", s["conv"])
        w.add_uint32("qwen35.ssm.state_size", s["k_dim"])
        w.add_uint32("qwen35.ssm.group_count", s["k_heads"])
        w.add_uint32("qwen35.ssm.time_step_rank", s["v_heads"])
        w.add_uint32("qwen35.ssm.inner_size", s["v_heads"] * s["v_dim"])
        w.add_uint32("qwen35.full_attention_interval", s["interval"])
        if s.get("mtp"):
            w.add_uint32("qwen35.nextn_predict_layers", s["mtp"])

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
    for name, shape, kind in plan:
        n = int(np.prod(shape))
        if kind != "matrix":
            w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.uint16), n * 2, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape, kind in plan:
        if kind == "matrix":
            data = random_bf16(rng, shape)
        elif kind == "conv":
            data = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.5)).astype(np.float32)
        elif kind == "ssm_a":  # -exp(A_log) with A_log = log(uniform(1, 16)), as transformers initialises it
            data = -rng.uniform(1.0, 16.0, shape).astype(np.float32)
        else:
            data = np.ones(shape, np.float32)
        w.write_tensor_data(data)
    w.close()


def quantize(master, out, quant):
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0}[quant]
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(master).encode(), str(out).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({master} -> {out}) failed: {rc}")


# ---------------------------------------------------------------------------------------------
# ModelOpt NVFP4 / FP8 folders from the BF16 master.

MODELOPT_ALGOS = {"nvfp4": "NVFP4", "fp8": "FP8"}
BYTES_PER_PARAM = {"q4_k_m": 0.6, "q8_0": 1.07, "nvfp4": 1.1, "fp8": 1.6}  # measured file sizes, rounded up
FP8_MAX = np.float32(448.0)
E2M1_MAX = np.float32(6.0)
GROUP = 16
INPUT_AMAX = 8.0            # documented stand-in for a calibrated activation amax (see top)
ROWS_PER_CHUNK = 4096       # bounds memory: lm_head [151936, 2048] is quantized in slices
# ModelOpt's E2M1 rounding table: codes 0..7 are 0, .5, 1, 1.5, 2, 3, 4, 6 (bit 3 = sign).
E2M1_BOUNDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5], np.float32)
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)

# llama.cpp tensor name -> HF module (blk.{i}. becomes model.layers.{i}.).
HF_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
HF_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def hf_module(gguf_name):
    """'blk.3.ffn_down.weight' -> 'model.layers.3.mlp.down_proj' (without '.weight')."""
    stem = gguf_name.removesuffix(".weight")
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", stem)
    if m:
        return f"model.layers.{m.group(1)}.{HF_LAYER_NAMES[m.group(2)]}"
    return HF_GLOBAL_NAMES[stem]


def e4m3():
    import ml_dtypes
    return ml_dtypes.float8_e4m3fn


def bf16_bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).copy()
    bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even (finite inputs)
    return (bits >> 16).astype(np.uint16)


def bf16_amax(bits):
    """max |w| of a BF16 tensor (uint16 bit patterns), chunked: |bf16| orders like its bits & 0x7FFF."""
    top = 0
    for r0 in range(0, bits.shape[0], ROWS_PER_CHUNK):
        top = max(top, int((bits[r0:r0 + ROWS_PER_CHUNK] & 0x7FFF).max()))
    return np.float32(bf16_bits_to_f32(np.array([top], np.uint16))[0])


def cast_e2m1(x):
    """E2M1 codes of f32 values as ModelOpt's NVFP4QTensor._cast_fp4: the ordinal among the bounds,
    ties at the odd-indexed bounds (0.75, 1.75, 3.5) rounded up, i.e. round half to even; beyond 6
    saturates to 6; bit 3 is the sign (w < 0)."""
    sign = (x < 0).astype(np.uint8)
    mag = np.abs(x)
    code = np.searchsorted(E2M1_BOUNDS, mag, side="left").astype(np.uint8)
    code += np.isin(mag, E2M1_BOUNDS[[1, 3, 5]]).astype(np.uint8)
    return (sign << 3) | code


def nvfp4_scale_2(amax):
    return amax / (E2M1_MAX * FP8_MAX)  # f32, as get_weights_scaling_factor_2


def quantize_nvfp4(w, scale_2):
    """w: f32 [R, K] -> (packed U8 [R, K/2], low nibble = even element; weight_scale as e4m3 bytes
    [R, K/16]). Follows NVFP4QTensor.get_weights_scaling_factor and quantize, in f32."""
    r, k = w.shape
    groups = w.reshape(r, k // GROUP, GROUP)
    block_amax = np.abs(groups).max(axis=-1)                     # [R, K/16]
    block_scale = block_amax / (np.float32(6.0) * scale_2)
    block_scale[block_scale == 0] = 1.0
    block_scale = np.maximum(block_scale, np.float32(2.0 ** -9)).astype(e4m3())
    scaled = groups / (block_scale.astype(np.float32) * scale_2)[..., None]
    codes = cast_e2m1(scaled.reshape(r, k))
    packed = (codes[:, 1::2] << 4) | codes[:, 0::2]
    return packed, block_scale.view(np.uint8)


def dequantize_nvfp4(packed, scale_bytes, scale_2):
    r = packed.shape[0]
    codes = np.empty((r, packed.shape[1] * 2), np.uint8)
    codes[:, 0::2], codes[:, 1::2] = packed & 0xF, packed >> 4
    block = scale_bytes.view(e4m3()).astype(np.float32) * np.float32(scale_2)  # [R, K/16]
    return (E2M1_VALUES[codes].reshape(r, -1, GROUP) * block[..., None]).reshape(r, -1)


def fp8_scale(amax):
    return amax / FP8_MAX  # f32, as FP8QTensor.quantize (per tensor)


def quantize_fp8(w, scale):
    """w: f32 [R, K] -> e4m3 bytes [R, K]: (w / scale) rounded to nearest even."""
    return (w / (scale if scale != 0 else np.float32(1.0))).astype(e4m3()).view(np.uint8)


def dequantize_fp8(q, scale):
    return q.view(e4m3()).astype(np.float32) * np.float32(scale)


class SafetensorsWriter:
    """A safetensors file whose header is written first (every tensor declared with dtype and
    shape), then filled tensor by tensor and row slice by row slice, so no tensor is ever whole
    in memory twice. Offsets follow declaration order, contiguous, as the format requires."""

    def __init__(self, path):
        self.path, self.entries, self.size = path, {}, 0

    def declare(self, name, dtype, shape, itemsize):
        n = int(np.prod(shape, dtype=np.int64)) * itemsize
        self.entries[name] = dict(dtype=dtype, shape=list(shape), data_offsets=[self.size, self.size + n])
        self.size += n

    def open(self):
        header = json.dumps({"__metadata__": {"format": "pt"}, **self.entries}, separators=(",", ":")).encode()
        header += b" " * (-len(header) % 8)  # keeps the data 8-byte aligned
        self.file = open(self.path, "wb")
        self.file.write(len(header).to_bytes(8, "little") + header)
        self.base = 8 + len(header)
        self.file.truncate(self.base + self.size)

    def write(self, name, array, byte_offset=0):
        """Writes array's bytes at byte_offset inside tensor `name`."""
        begin, end = self.entries[name]["data_offsets"]
        data = np.ascontiguousarray(array).tobytes()
        assert begin + byte_offset + len(data) <= end, name
        self.file.seek(self.base + begin + byte_offset)
        self.file.write(data)

    def close(self):
        self.file.close()


def read_safetensors(path):
    """{name: numpy view} of a safetensors file (memory-mapped), for the self-check."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    data = np.memmap(path, np.uint8, "r", offset=8 + n)
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dtype = {"BF16": np.uint16, "F32": np.float32, "U8": np.uint8, "F8_E4M3": np.uint8}[e["dtype"]]
        out[name] = data[b:end].view(dtype).reshape(e["shape"])
    return out


def master_tensors(reader):
    """[(llama.cpp name, numpy array as stored)] of the master; BF16 as uint16 [rows, cols]."""
    import gguf
    out = []
    for t in reader.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.BF16:
            out.append((t.name, t.data.view(np.uint16)))
        elif t.tensor_type == gguf.GGMLQuantizationType.F32:
            out.append((t.name, t.data))
        else:
            raise SystemExit(f"{t.name}: unexpected type {t.tensor_type.name} in the BF16 master")
    return out


def master_config(reader):
    """config.json of the master's shapes (Qwen3ForCausalLM, untied: see the top)."""
    f = {k: reader.fields[k].contents() for k in reader.fields if k.startswith("qwen3.")}
    vocab = next(t for t in reader.tensors if t.name == "token_embd.weight").shape[1]
    eos = reader.fields["tokenizer.ggml.eos_token_id"].contents()
    bos = reader.fields["tokenizer.ggml.bos_token_id"].contents()
    layers = int(f["qwen3.block_count"])
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": bos, "eos_token_id": eos,
        "head_dim": int(f["qwen3.attention.key_length"]), "hidden_act": "silu",
        "hidden_size": int(f["qwen3.embedding_length"]), "initializer_range": WEIGHT_STD,
        "intermediate_size": int(f["qwen3.feed_forward_length"]),
        "layer_types": ["full_attention"] * layers,
        "max_position_embeddings": int(f["qwen3.context_length"]), "max_window_layers": layers,
        "num_attention_heads": int(f["qwen3.attention.head_count"]), "num_hidden_layers": layers,
        "num_key_value_heads": int(f["qwen3.attention.head_count_kv"]),
        "rms_norm_eps": float(f["qwen3.attention.layer_norm_rms_epsilon"]),
        "rope_parameters": {"rope_theta": float(f["qwen3.rope.freq_base"]), "rope_type": "default"},
        "sliding_window": None, "tie_word_embeddings": False, "use_cache": True, "use_sliding_window": False,
        "vocab_size": int(vocab), "dtype": "bfloat16",
    }


def quant_configs(algo):
    """(hf_quant_config.json, config.json quantization_config) as ModelOpt's export writes them,
    with nothing excluded (the lm_head is quantized: see the top)."""
    producer = {"name": "modelopt", "version": "0.47.0"}  # the layout of tests/fixtures/fpquant
    quant = {"quant_algo": algo, "kv_cache_quant_algo": None, "exclude_modules": []}
    spec = {"dynamic": False, "num_bits": 8, "type": "float"}
    if algo == "NVFP4":
        quant["group_size"] = GROUP
        spec = {"dynamic": False, "group_size": GROUP, "num_bits": 4, "type": "float"}
    hf_quant = {"producer": producer, "quantization": quant}
    qc = {"config_groups": {"group_0": {"input_activations": dict(spec), "targets": ["Linear"],
                                        "weights": dict(spec)}},
          "ignore": [], "producer": producer, "quant_algo": algo, "quant_method": "modelopt"}
    return hf_quant, qc


def plan_folder(tensors, algo):
    """[(llama.cpp name, source array, HF module, kind)]: kind 'bf16' (embedding, norms) or
    'linear'; the tied master gets an lm_head that reads the embedding."""
    plan = []
    for name, arr in tensors:
        module = hf_module(name)
        plan.append((name, arr, module, "linear" if arr.ndim == 2 and name != "token_embd.weight" else "bf16"))
        if name == "token_embd.weight" and not any(n == "output.weight" for n, _ in tensors):
            plan.append((name, arr, "lm_head", "linear"))
    return plan


def declare_folder(writer, plan, algo):
    for _, arr, module, kind in plan:
        if kind == "bf16":
            writer.declare(f"{module}.weight", "BF16", arr.shape, 2)
            continue
        n, k = arr.shape
        if algo == "NVFP4":
            writer.declare(f"{module}.weight", "U8", (n, k // 2), 1)
            writer.declare(f"{module}.weight_scale", "F8_E4M3", (n, k // GROUP), 1)
            writer.declare(f"{module}.weight_scale_2", "F32", (), 4)
        else:
            writer.declare(f"{module}.weight", "F8_E4M3", (n, k), 1)
            writer.declare(f"{module}.weight_scale", "F32", (), 4)
        writer.declare(f"{module}.input_scale", "F32", (), 4)


def write_linear(writer, module, bits, algo):
    """Quantizes one BF16 [N, K] matrix slice by slice into its declared tensors."""
    amax = bf16_amax(bits)
    k = bits.shape[1]
    if algo == "NVFP4":
        scale = nvfp4_scale_2(amax)
        writer.write(f"{module}.weight_scale_2", np.float32(scale))
        writer.write(f"{module}.input_scale", np.float32(INPUT_AMAX / (6.0 * 448.0)))
    else:
        scale = fp8_scale(amax)
        writer.write(f"{module}.weight_scale", np.float32(scale))
        writer.write(f"{module}.input_scale", np.float32(INPUT_AMAX / 448.0))
    for r0 in range(0, bits.shape[0], ROWS_PER_CHUNK):
        w = bf16_bits_to_f32(bits[r0:r0 + ROWS_PER_CHUNK])
        if algo == "NVFP4":
            packed, scales = quantize_nvfp4(w, scale)
            writer.write(f"{module}.weight", packed, r0 * (k // 2))
            writer.write(f"{module}.weight_scale", scales, r0 * (k // GROUP))
        else:
            writer.write(f"{module}.weight", quantize_fp8(w, scale), r0 * k)


def nearest_distance(x, grid):
    """|x - nearest value of grid| elementwise; grid: ascending 1-D."""
    i = np.clip(np.searchsorted(grid, x), 1, len(grid) - 1)
    return np.minimum(np.abs(x - grid[i - 1]), np.abs(x - grid[i]))


def self_check(path, plan, algo, rows=256,
               modules=("model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj", "lm_head")):
    """Reads the first rows of sample modules back from the written file and checks that every
    stored code is a nearest grid value of the weight in the scaled domain where ModelOpt rounds
    (w / (weight_scale x weight_scale_2) on the E2M1 grid; w / weight_scale on the e4m3 grid: the
    same f32 arithmetic, so the comparison is exact); prints the relative error of the dequantized
    weights against the master."""
    stored = read_safetensors(path)
    sources = {module: arr for _, arr, module, kind in plan if kind == "linear"}
    for module in modules:
        master = bf16_bits_to_f32(np.asarray(sources[module][:rows]))              # [R, K]
        r = master.shape[0]
        weight = np.asarray(stored[f"{module}.weight"][:r])
        if algo == "NVFP4":
            s2 = np.float32(stored[f"{module}.weight_scale_2"])
            scale_bytes = np.asarray(stored[f"{module}.weight_scale"][:r])
            deq = dequantize_nvfp4(weight, scale_bytes, s2)
            block = scale_bytes.view(e4m3()).astype(np.float32) * s2               # [R, K/16]
            scaled = (master.reshape(r, -1, GROUP) / block[..., None]).reshape(r, -1)
            codes = np.empty((r, weight.shape[1] * 2), np.uint8)
            codes[:, 0::2], codes[:, 1::2] = weight & 0xF, weight >> 4
            stored_values, grid = E2M1_VALUES[codes], E2M1_VALUES[:8]
        else:
            s = np.float32(stored[f"{module}.weight_scale"])
            deq = dequantize_fp8(weight, s)
            scaled = master / s
            stored_values = weight.view(e4m3()).astype(np.float32)
            grid = np.arange(0x7F, dtype=np.uint8).view(e4m3()).astype(np.float32)
        off = np.abs(np.abs(scaled) - np.abs(stored_values)) > nearest_distance(np.abs(scaled), grid)
        if off.any() or np.any((stored_values != 0) & (np.sign(stored_values) != np.sign(master))):
            raise SystemExit(f"self-check {module}: {int(off.sum())} values not rounded to nearest")
        rel = np.linalg.norm(master - deq) / np.linalg.norm(master)
        print(f"  self-check {module} (first {r} rows): every code a nearest grid value, "
              f"relative error {rel:.4f}", flush=True)


def dir_bytes(folder):
    return sum(p.stat().st_size for p in pathlib.Path(folder).iterdir() if p.is_file())


def write_folder_files(folder, config, algo, tokenizer_dir):
    """config.json (with its quantization_config), hf_quant_config.json and the tokenizer files."""
    hf_quant, qc = quant_configs(algo)
    config = dict(config, quantization_config=qc)
    for name, obj in (("config.json", config), ("hf_quant_config.json", hf_quant)):
        (folder / name).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir / name, folder / name)


def write_modelopt_folder(master, out, which):
    """models/bench/qwen3-{size}-{nvfp4,fp8}/ from the BF16 master GGUF (see the top)."""
    from gguf import GGUFReader
    algo = MODELOPT_ALGOS[which]
    reader = GGUFReader(str(master))
    plan = plan_folder(master_tensors(reader), algo)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    writer = SafetensorsWriter(tmp / "model.safetensors")
    declare_folder(writer, plan, algo)
    writer.open()
    for _, arr, module, kind in plan:
        if kind == "bf16":
            bits = arr if arr.dtype == np.uint16 else f32_to_bf16_bits(arr)
            for r0 in range(0, bits.shape[0], ROWS_PER_CHUNK):
                writer.write(f"{module}.weight", bits[r0:r0 + ROWS_PER_CHUNK], r0 * bits[0:1].nbytes)
        else:
            write_linear(writer, module, arr, algo)
    writer.close()
    write_folder_files(tmp, master_config(reader), algo, TOKENIZER_DIR)
    self_check(tmp / "model.safetensors", plan, algo)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--out", default=str(ROOT / "models/bench"))
    ap.add_argument("--quants", nargs="*", default=["q4_k_m", "q8_0"], choices=["q4_k_m", "q8_0", *MODELOPT_ALGOS])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    args = ap.parse_args()

    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for size in args.sizes:
        s = SHAPES[size]
        n_params = sum(int(np.prod(shape)) for _, shape, _ in tensor_plan(s))
        quants = args.quants
        if s["arch"] != "qwen3" and any(q in MODELOPT_ALGOS for q in quants):
            print(f"{size}: ModelOpt folders are written for qwen3 shapes only; skipping them", flush=True)
            quants = [q for q in quants if q not in MODELOPT_ALGOS]
        # bf16 master + each output (bytes per master parameter; the folders add an untied lm_head), with margin
        need = n_params * (2 + sum(BYTES_PER_PARAM[q] for q in quants)) * 1.1
        free = shutil.disk_usage(out_dir).free
        if free < need:
            sys.exit(f"not enough disk for {size}: need ~{need / 1e9:.1f} GB, free {free / 1e9:.1f} GB")
        stem = f"{s['arch']}-{size}"
        master = out_dir / f"{stem}-bf16.gguf"
        if args.force or not master.exists():
            t = time.perf_counter()
            write_master(master, size, args.seed)
            print(f"wrote {master} ({master.stat().st_size / 1e9:.2f} GB, {n_params / 1e9:.3f} B params) "
                  f"in {time.perf_counter() - t:.0f} s", flush=True)
        for q in quants:
            if q in MODELOPT_ALGOS:
                out = out_dir / f"{stem}-{q}"
                if args.force or not out.exists():
                    t = time.perf_counter()
                    write_modelopt_folder(master, out, q)
                    print(f"wrote {out}/ ({dir_bytes(out) / 1e9:.2f} GB) in {time.perf_counter() - t:.0f} s",
                          flush=True)
                continue
            out = out_dir / f"{stem}-{q}.gguf"
            if args.force or not out.exists():
                t = time.perf_counter()
                quantize(master, out, q)
                print(f"wrote {out} ({out.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t:.0f} s",
                      flush=True)


if __name__ == "__main__":
    main()

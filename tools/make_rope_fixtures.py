#!/usr/bin/env python3
"""Rotary cos/sin near the end of a 1M-position YaRN context, from transformers' own class.

For every case below this writes
  tests/fixtures/rope/<name>.config.json   an HF config.json (Qwen3) the engine parses
  tests/fixtures/rope/<name>.safetensors   "positions" I64 [P], "inv_freq" F32 [D/2],
                                           "cos" F32 [P, D/2], "sin" F32 [P, D/2]
where cos/sin are Qwen3RotaryEmbedding's output (f32, attention factor applied; its second
half repeats the first, so only the first D/2 columns are kept). Positions: the last 128 of
the 1,048,576 window, every 37th of 1,048,000..1,048,447, and a few landmarks (0, 1, the
original window's edge 262,143 / 262,144, 524,288, 999,999).
Cases (YaRN factor 4 over original_max_position_embeddings 262,144 -> 1,048,576, as Zen6):
  yarn1m_rotary64   rotary dim 64, theta 1e7: Zen6 / Qwen3.5's rotary part (head_dim 256 with
                    partial_rotary_factor 0.25 rotates 64 entries with the same frequencies;
                    this script asserts that equality against transformers' partial rotary)
  yarn1m_qwen3_128  head_dim 128, theta 1e6 (Qwen3 dense style)
Rerunning reproduces byte-identical files.
Run: .venv-tools/bin/python tools/make_rope_fixtures.py
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

ORIGINAL = 262144
FACTOR = 4.0
MAX_POS = int(ORIGINAL * FACTOR)  # 1,048,576

CASES = {
    "yarn1m_rotary64": dict(head_dim=64, theta=1.0e7),
    "yarn1m_qwen3_128": dict(head_dim=128, theta=1.0e6),
}


def positions():
    tail = list(range(MAX_POS - 128, MAX_POS))
    sampled = list(range(1048000, MAX_POS - 128, 37))
    landmarks = [0, 1, ORIGINAL - 1, ORIGINAL, 524288, 999999]
    return np.array(sorted(set(landmarks + sampled + tail)), dtype=np.int64)


def config(head_dim, theta, partial=None):
    rope = {"rope_type": "yarn", "rope_theta": theta, "factor": FACTOR,
            "original_max_position_embeddings": ORIGINAL}
    if partial is not None:
        rope["partial_rotary_factor"] = partial
    return Qwen3Config(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=head_dim,
                       max_position_embeddings=MAX_POS, rope_parameters=rope)


@torch.no_grad()
def cos_sin(cfg, pos):
    rotary = Qwen3RotaryEmbedding(cfg)
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, torch.from_numpy(pos)[None])
    return rotary.inv_freq.float(), cos[0].float(), sin[0].float()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "rope"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    pos = positions()
    for name, c in CASES.items():
        cfg = config(c["head_dim"], c["theta"])
        inv_freq, cos, sin = cos_sin(cfg, pos)
        half = c["head_dim"] // 2
        assert torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])
        if name == "yarn1m_rotary64":  # the same frequencies as Zen6's partial rotary
            p_inv, p_cos, p_sin = cos_sin(config(256, c["theta"], partial=0.25), pos)
            assert torch.equal(p_inv, inv_freq) and torch.equal(p_cos, cos) and torch.equal(p_sin, sin)
        d = cfg.to_dict()
        for key in ("transformers_version", "_name_or_path"):
            d.pop(key, None)
        with open(os.path.join(out_dir, name + ".config.json"), "w") as f:
            f.write(json.dumps(d, indent=2, sort_keys=True) + "\n")
        path = os.path.join(out_dir, name + ".safetensors")
        save_file({"positions": torch.from_numpy(pos), "inv_freq": inv_freq.contiguous(),
                   "cos": cos[:, :half].contiguous(), "sin": sin[:, :half].contiguous()}, path,
                  metadata={"generator": f"tools/make_rope_fixtures.py transformers={transformers.__version__} "
                                         f"torch={torch.__version__}"})
        # How far f32 angles (as transformers computes them) drift from exact float64 angles.
        exact = np.cos(pos[:, None].astype(np.float64) * inv_freq.double().numpy()[None, :])
        scale = float(cos[0, 0]) / 1.0  # attention factor (cos(0) = 1)
        drift = np.abs(cos[:, :half].double().numpy() / scale - exact).max()
        print(f"{name}: {len(pos)} positions, rotary dim {c['head_dim']}, attention factor {scale:.6f}, "
              f"max |cos_f32angle - cos_f64angle| = {drift:.3e}, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Builds a tiny random DFlash 2 drafter (`dflash.model.DFlash2DraftModel`, pip `dflash`) for the
existing tiny target in tests/fixtures/dflash/target/, and reference outputs of a greedy
`dflash.model.dflash_generate` with it, step by step. The reference is imported and run, never
copied. The target and the v1 fixtures (tools/make_dflash_fixtures.py) are only read.

Writes under tests/fixtures/dflash/:
  v2/{config.json, model.safetensors}
      a random DFlash2DraftModel (architectures ["DFlash2DraftModel"], model_type qwen3), float32:
      the v1 drafter's config (3 layers, hidden 32, layer_types [sliding, sliding, full],
      sliding_window 5) with dflash_config {"target_layer_ids": [1, 3], "mask_token_id": 287,
      "block_size": 4, "conv_kernel_size": 2, "conv_group_size": 8, "selector_top_k": 8,
      "selector_rank": 4}. Beyond v1's tensors, per layer i:
        layers.{i}.attention_conv.base_kernel               [2, 2, 32]  [prepare|finish, offset, channel]
        layers.{i}.attention_conv.kernel_projection.weight  [16, 32]    rows (prepare|finish, offset, group)
        layers.{i}.mlp_conv.base_kernel                     [2, 2, 32]
        layers.{i}.mlp_conv.kernel_projection.weight        [16, 32]
      and candidate_selector.{predecessor_codebook.weight [288, 4], successor_codebook.weight
      [288, 4], hidden_projection.weight [4, 32]}. save_pretrained keeps the codebooks' ".weight"
      suffix; DFlash2DraftModel.from_pretrained also accepts them without it (its key_mapping),
      both forms are checked to load.
  v2.reference.safetensors  (float32 / int32)
      "prompt"             I32 [12]   v1.reference.safetensors' prompt
      "output"             I32 [36]   dflash_generate(v2, target, prompt, 24 new tokens, greedy)
      "acceptance_lengths" I32 [S]    tokens committed per decode step (accepted drafts + 1)
      "num_steps"          I32 [1]    S
      per draft step s < S, as dflash_generate ran it (the drafter's forward, compute_logits and
      candidate_selector.select are wrapped to record what they receive and return), V = that
      step's verify size:
      "step{s}.block"           I32 [V]        anchor id, then mask ids (287)
      "step{s}.start"           I32 [1]        absolute position of the anchor
      "step{s}.ctx_taps"        F32 [n, 64]    target_hidden passed to the drafter (raw taps)
      "step{s}.ctx_start"       I32 [1]        position of the first ctx row (= start - n)
      "step{s}.draft_hidden"    F32 [V-1, 32]  drafter output (final norm) at block rows 1..V-1,
                                               as passed to propose
      "step{s}.draft_logits"    F32 [V-1, 288] compute_logits of those (target lm_head)
      "step{s}.drafts"          I32 [V-1]      the candidate selector's greedy path = the drafts
      "step{s}.argmax"          I32 [V-1]      plain argmax of draft_logits, for comparison
      "step{s}.candidates"      I32 [V-1, 8]   the top-8 draft-logit ids, by descending logit
                                               (dflash takes them unsorted; the set is the same)
      "step{s}.selector_scores" F32 [V-1, 8]   the selector's score of each candidate, same order:
                                               logit + sum_r P[pred, r] * (W h)[r] * S[cand, r],
                                               pred = anchor at row 0, else the previous draft
The script checks that the convolutions, their dynamic kernels and the selector all visibly
matter (ablations), that greedy DFlash 2 is lossless (output == the target's own argmax
continuation), that every cached drafter call equals a cache-free one, and the score margins.
Greedy decoding never stops at EOS. Compute is float32 on CPU, sdpa (drafter, as dflash hardwires
it) and eager (target).

Rerunning reproduces byte-identical files (fixed seeds, one CPU thread).
Run: .venv-tools/bin/python tools/make_dflash2_fixtures.py [--out tests/fixtures/dflash]
"""
import argparse
import copy
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import dflash.model as dfm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_dflash_fixtures import (BLOCK, MASK_ID, NEW_TOKENS, PROMPT_LEN,  # noqa: E402
                                  SLIDING_TYPES, TAP_LAYERS, WINDOW, check_draft, draft_config,
                                  target_greedy, top2_margin)
from make_model_fixtures import init_weights  # noqa: E402

CONV_KERNEL = 2
CONV_GROUP = 8             # hidden 32 -> 4 groups
TOP_K = 8
RANK = 4
HIDDEN = 32
DFLASH2_KEYS = {"conv_kernel_size": CONV_KERNEL, "conv_group_size": CONV_GROUP,
                "selector_top_k": TOP_K, "selector_rank": RANK}
CODEBOOKS = ("predecessor_codebook", "successor_codebook")
BASE_SEED = 7001
MAX_SEED_TRIES = 50
MIN_SELECTOR_MARGIN = 1e-3   # top-1 minus top-2 selector score at every drafted position
MIN_DRAFT_MARGIN = 1e-3      # same for the plain argmax of the draft logits ("step{s}.argmax")
MIN_TOPK_GAP = 1e-4          # 8th minus 9th draft logit (the candidate set's boundary)
MIN_ABLATION_DIFF = 1e-2     # max|draft_hidden - ablated| at step 0, for every ablation
MIN_SELECTOR_CHANGES = 3     # positions where the selector's path differs from the argmax


def draft2_config():
    config = draft_config(SLIDING_TYPES)
    config.dflash_config = dict(config.dflash_config, **DFLASH2_KEYS)
    config.architectures = ["DFlash2DraftModel"]
    return config


def check_draft2(model):
    check_draft(model, SLIDING_TYPES)
    for layer in model.layers:
        for conv in (layer.attention_conv, layer.mlp_conv):
            assert isinstance(conv, dfm.GroupedDynamicCausalConv)
            assert conv.kernel_size == CONV_KERNEL and conv.group_size == CONV_GROUP
    assert model.candidate_selector.top_k == TOP_K
    assert model.candidate_selector.hidden_projection.out_features == RANK


def conv_rows(part, offset):
    """kernel_projection rows feeding (prepare=0 | finish=1, offset): the output is viewed as
    (2, kernel_size, groups)."""
    groups = HIDDEN // CONV_GROUP
    first = (part * CONV_KERNEL + offset) * groups
    return slice(first, first + groups)


def init_dflash2(model, seed):
    """init_weights for everything, then DFlash 2 parts at scales where each visibly matters.
    base_kernel is torch.empty in dflash, so it must be set here."""
    init_weights(model, seed)
    gen = torch.Generator().manual_seed(seed + 17)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("base_kernel"):          # [prepare|finish, offset, channel]
                value = 0.5 * torch.randn(p.shape, generator=gen)
                value[:, 0] += 1.0                     # offset 0 near identity, offset 1 a mix-in
            elif name.endswith("kernel_projection.weight"):
                value = 0.1 * torch.randn(p.shape, generator=gen)
            elif "codebook" in name:
                value = torch.randn(p.shape, generator=gen)
            elif name.endswith("hidden_projection.weight"):
                value = 0.3 * torch.randn(p.shape, generator=gen)
            else:
                continue
            p.copy_(value)


def check_conv_semantics():
    """What the reference convolution does, on its own function: identity when base offset 0 is 1,
    the rest 0 and kernel_projection 0; causal along the sequence axis with kernel_size taps."""
    gen = torch.Generator().manual_seed(3)
    conv = dfm.GroupedDynamicCausalConv(HIDDEN, CONV_KERNEL, CONV_GROUP)
    with torch.no_grad():
        conv.base_kernel.copy_(torch.randn(conv.base_kernel.shape, generator=gen))
        conv.kernel_projection.weight.copy_(torch.randn(conv.kernel_projection.weight.shape,
                                                        generator=gen))
        x = torch.randn(1, 6, HIDDEN, generator=gen)
        y, dyn = conv.prepare(x)
        x2 = x.clone()
        x2[:, 3] += 1.0
        y2, dyn2 = conv.prepare(x2)
        changed = (y2 - y).abs().amax(dim=-1)[0] > 0
        assert changed.tolist() == [False, False, False, True, True, False], changed
        # finish uses the dynamic kernel computed by prepare from prepare's input
        assert dyn.shape == (1, 6, CONV_KERNEL, HIDDEN // CONV_GROUP)
        assert not torch.equal(dyn2[:, 3], dyn[:, 3])
        identity(conv)
        z, dyn = conv.prepare(x)
        assert torch.equal(z, x) and torch.equal(conv.finish(y, dyn), y)


def identity(conv, parts=(0, 1), offsets=None, dynamic=True, base=True):
    """Removes (parts of) a conv's effect: base offset 0 -> 1, other offsets -> 0, and the
    matching kernel_projection rows -> 0."""
    offsets = range(CONV_KERNEL) if offsets is None else offsets
    with torch.no_grad():
        for part in parts:
            for offset in offsets:
                if base:
                    conv.base_kernel[part, offset] = 1.0 if offset == 0 else 0.0
                if dynamic:
                    conv.kernel_projection.weight[conv_rows(part, offset)] = 0.0


def ablate(model, which):
    m = copy.deepcopy(model)
    for layer in m.layers:
        convs = {"attention_conv": [layer.attention_conv], "mlp_conv": [layer.mlp_conv]}.get(
            which, [layer.attention_conv, layer.mlp_conv])
        for conv in convs:
            if which in ("all_convs", "attention_conv", "mlp_conv"):
                identity(conv)
            elif which == "prepare":
                identity(conv, parts=(0,))
            elif which == "finish":
                identity(conv, parts=(1,))
            elif which == "dynamic":
                identity(conv, base=False)
            elif which == "base_kernel":       # static kernel to identity, dynamic kept
                identity(conv, dynamic=False)
            elif which == "offset1":           # only the current row: no causal mixing
                identity(conv, offsets=(1,))
            else:
                raise ValueError(which)
    return m


ABLATIONS = ["all_convs", "attention_conv", "mlp_conv", "prepare", "finish", "dynamic",
             "base_kernel", "offset1"]


def save_folder(model, folder):
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.config.dtype = "float32"
    model.save_pretrained(folder, safe_serialization=True)


def load_checked(folder, original):
    model, info = dfm.DFlash2DraftModel.from_pretrained(folder, dtype=torch.float32,
                                                       output_loading_info=True)
    assert not any(info.values()), info
    model.eval()
    check_draft2(model)
    a, b = original.state_dict(), model.state_dict()
    assert list(a) == list(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    return model


def check_codebook_key_forms(folder, original):
    """The saved checkpoint has "...codebook.weight"; the key_mapping in from_pretrained also maps
    bare "...codebook" (the published checkpoints' form). Both must load the same tensors."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(folder, "config.json"), tmp)
        tensors = load_file(os.path.join(folder, "model.safetensors"))
        for name in CODEBOOKS:
            tensors[f"candidate_selector.{name}"] = tensors.pop(f"candidate_selector.{name}.weight")
        save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        load_checked(tmp, original)


@torch.no_grad()
def fresh_draft_hidden(draft, target, taps, block, ctx_start):
    """One drafter call the way dflash_generate makes it, on a fresh cache."""
    n, v = taps.shape[0], block.shape[0]
    cache = dfm._make_cache(draft.config)
    return draft(target_hidden=taps[None],
                 noise_embedding=dfm._raw_input_embeddings(target, block[None]),
                 position_ids=torch.arange(ctx_start, ctx_start + n + v)[None],
                 past_key_values=cache, use_cache=True)[0, 1 - v:, :]


def recorded_dflash2(draft, target, prompt):
    """Runs dflash.model.dflash_generate (greedy) with the drafter's forward, compute_logits,
    candidate_selector.select and the block-embedding helper wrapped to record them."""
    steps = []
    selector = draft.candidate_selector
    orig_embed, orig_time = dfm._raw_input_embeddings, dfm._cuda_time
    orig_forward, orig_logits, orig_select = draft.forward, draft.compute_logits, selector.select

    def embed(target_model, input_ids, scale=1.0):
        assert scale == 1.0
        steps.append({"block": input_ids[0].clone()})
        return orig_embed(target_model, input_ids, scale)

    def forward(*args, **kwargs):
        assert not args
        rec = steps[-1]
        rec["ctx_taps"] = kwargs["target_hidden"][0].clone()
        rec["position_ids"] = kwargs["position_ids"][0].clone()
        rec["cache_len"] = kwargs["past_key_values"].get_seq_length()
        assert kwargs.get("attention_mask") is None
        assert torch.equal(kwargs["noise_embedding"][0],
                           target.get_input_embeddings().weight[rec["block"]])
        out = orig_forward(**kwargs)
        rec["forward_out"] = out[0].clone()
        return out

    def compute_logits(hidden, head):
        logits = orig_logits(hidden, head)
        rec = steps[-1]
        assert "draft_hidden" not in rec, "compute_logits called twice in one step"
        rec["draft_hidden"] = hidden[0].clone()
        rec["draft_logits"] = logits[0].clone()
        return logits

    def select(hidden, logits, anchor_ids, temperature):
        rec = steps[-1]
        assert temperature == 0.0
        assert torch.equal(hidden[0], rec["draft_hidden"])
        assert torch.equal(logits[0], rec["draft_logits"])
        rec["anchor"] = int(anchor_ids[0])
        path, candidates, q = orig_select(hidden, logits, anchor_ids, temperature)
        assert q is None
        rec["drafts"] = path[0].clone()
        rec["dflash_candidates"] = candidates[0].clone()
        return path, candidates, q

    dfm._raw_input_embeddings, dfm._cuda_time = embed, time.perf_counter  # no CUDA here
    draft.forward, draft.compute_logits, selector.select = forward, compute_logits, select
    try:
        result = dfm.dflash_generate(draft, target, prompt[None], max_new_tokens=NEW_TOKENS,
                                     stop_token_ids=None, temperature=0.0, return_stats=True)
    finally:
        dfm._raw_input_embeddings, dfm._cuda_time = orig_embed, orig_time
        del draft.forward, draft.compute_logits, selector.select
    return result, steps


@torch.no_grad()
def selector_scores(selector, hidden, logits, anchor, path):
    """An independent evaluation of the selector's scores along the recorded path (a check on the
    reference, and the numbers a reimplementation compares against). Candidates by descending
    logit. Returns candidates [P, K], scores [P, K]."""
    unary, candidates = torch.topk(logits, TOP_K, dim=-1, sorted=True)
    projected = selector.hidden_projection(hidden)                     # [P, R]
    pred_ids = torch.tensor([anchor] + path[:-1].tolist())
    pred = selector.predecessor_codebook.weight[pred_ids]             # [P, R]
    succ = selector.successor_codebook.weight[candidates]             # [P, K, R]
    scores = unary + torch.einsum("pr,pkr->pk", pred * projected, succ)
    return candidates, scores


@torch.no_grad()
def attempt(target, prompt, greedy, folder, seed):
    """Builds, saves and runs the drafter for one seed; returns (tensors, info) or (None, why)."""
    torch.manual_seed(seed)
    model = dfm.DFlash2DraftModel(draft2_config()).eval()
    init_dflash2(model, seed)
    check_draft2(model)
    save_folder(model, folder)
    draft = load_checked(folder, model)
    check_codebook_key_forms(folder, model)

    result, steps = recorded_dflash2(draft, target, prompt)
    output = result.output_ids[0]
    acceptance = [int(a) for a in result.acceptance_lengths]
    assert output.shape[0] == PROMPT_LEN + NEW_TOKENS and torch.equal(output[:PROMPT_LEN], prompt)
    assert output[PROMPT_LEN:].tolist() == greedy, "DFlash 2 greedy is not lossless"
    assert len(steps) == len(acceptance), (len(steps), len(acceptance))

    tensors = {"prompt": prompt.to(torch.int32), "output": output.to(torch.int32),
               "acceptance_lengths": torch.tensor(acceptance, dtype=torch.int32),
               "num_steps": torch.tensor([len(steps)], dtype=torch.int32)}
    start, history = PROMPT_LEN, []
    margins = {"selector": float("inf"), "draft_argmax": float("inf"), "topk_gap": float("inf")}
    changes = 0
    for s, rec in enumerate(steps):
        v, n = rec["block"].shape[0], rec["ctx_taps"].shape[0]
        ctx_start = start - n
        assert v == min(BLOCK, PROMPT_LEN + NEW_TOKENS - start)
        assert int(rec["block"][0]) == int(output[start]) and (rec["block"][1:] == MASK_ID).all()
        assert rec["anchor"] == int(output[start])
        assert torch.equal(rec["position_ids"], torch.arange(ctx_start, start + v))
        assert rec["cache_len"] == ctx_start, "drafter cache should hold exactly the earlier ctx rows"
        assert torch.equal(rec["draft_hidden"], rec["forward_out"][1 - v:])
        logits, drafts = rec["draft_logits"], rec["drafts"]
        argmax = torch.argmax(logits, dim=-1)
        changes += int((drafts != argmax).sum())

        candidates, scores = selector_scores(draft.candidate_selector, rec["draft_hidden"], logits,
                                             rec["anchor"], drafts)
        for p in range(v - 1):
            assert sorted(candidates[p].tolist()) == sorted(rec["dflash_candidates"][p].tolist())
            assert int(candidates[p, torch.argmax(scores[p])]) == int(drafts[p]), (s, p)
        margins["selector"] = min(margins["selector"], top2_margin(scores))
        margins["draft_argmax"] = min(margins["draft_argmax"], top2_margin(logits))
        top9 = torch.topk(logits, TOP_K + 1, dim=-1).values
        margins["topk_gap"] = min(margins["topk_gap"],
                                  float((top9[:, TOP_K - 1] - top9[:, TOP_K]).min()))

        # The cached call equals a cache-free one over every tap so far at positions [0, start).
        history.append(rec["ctx_taps"])
        fresh = fresh_draft_hidden(draft, target, torch.cat(history), rec["block"], 0)
        torch.testing.assert_close(fresh, rec["draft_hidden"], rtol=1e-4, atol=1e-4)

        tensors.update({f"step{s}.block": rec["block"].to(torch.int32),
                        f"step{s}.start": torch.tensor([start], dtype=torch.int32),
                        f"step{s}.ctx_taps": rec["ctx_taps"],
                        f"step{s}.ctx_start": torch.tensor([ctx_start], dtype=torch.int32),
                        f"step{s}.draft_hidden": rec["draft_hidden"],
                        f"step{s}.draft_logits": logits,
                        f"step{s}.drafts": drafts.to(torch.int32),
                        f"step{s}.argmax": argmax.to(torch.int32),
                        f"step{s}.candidates": candidates.to(torch.int32),
                        f"step{s}.selector_scores": scores})
        start += acceptance[s]
    assert start == PROMPT_LEN + NEW_TOKENS - 1

    # The selector with its bilinear term off is the plain argmax (sanity of the comparison).
    plain = copy.deepcopy(draft.candidate_selector)
    with torch.no_grad():
        plain.hidden_projection.weight.zero_()
    for rec in steps:
        path = plain.select(rec["draft_hidden"][None], rec["draft_logits"][None],
                            torch.tensor([rec["anchor"]]), 0.0)[0][0]
        assert torch.equal(path, torch.argmax(rec["draft_logits"], dim=-1))

    # Every DFlash 2 part changes the drafter's output at step 0.
    rec0 = steps[0]
    base = fresh_draft_hidden(draft, target, rec0["ctx_taps"], rec0["block"], 0)
    diffs = {}
    for which in ABLATIONS:
        other = fresh_draft_hidden(ablate(draft, which), target, rec0["ctx_taps"], rec0["block"], 0)
        diffs[which] = float((other - base).abs().max())

    info = dict(seed=seed, acceptance=acceptance, margins=margins, changes=changes, diffs=diffs,
                positions=sum(rec["drafts"].shape[0] for rec in steps))
    if min(diffs.values()) <= MIN_ABLATION_DIFF:
        return None, f"an ablation barely changes the draft hidden: {diffs}"
    if changes < MIN_SELECTOR_CHANGES:
        return None, f"selector differs from argmax at only {changes} positions"
    if margins["selector"] < MIN_SELECTOR_MARGIN:
        return None, f"selector score margin {margins['selector']:.2e}"
    if margins["draft_argmax"] < MIN_DRAFT_MARGIN:
        return None, f"draft logit margin {margins['draft_argmax']:.2e}"
    if margins["topk_gap"] < MIN_TOPK_GAP:
        return None, f"top-{TOP_K} boundary gap {margins['topk_gap']:.2e}"
    return tensors, info


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "dflash"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    out_dir = os.path.normpath(args.out)
    folder = os.path.join(out_dir, "v2")

    t0 = time.time()
    check_conv_semantics()
    target = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(out_dir, "target"), dtype=torch.float32, attn_implementation="eager").eval()
    v1_ref = load_file(os.path.join(out_dir, "v1.reference.safetensors"))
    prompt = v1_ref["prompt"].to(torch.long)
    greedy, target_margin = target_greedy(target, prompt, NEW_TOKENS)
    assert greedy == v1_ref["target_greedy"].tolist(), "target greedy differs from v1's record"

    for i in range(MAX_SEED_TRIES):
        tensors, info = attempt(target, prompt, greedy, folder, BASE_SEED + 1000 * i)
        if tensors is not None:
            break
        print(f"seed {BASE_SEED + 1000 * i}: {info}; reseeding")
    else:
        sys.exit("no seed satisfies the margin and ablation checks")

    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["DFlash2DraftModel"]
    assert cfg["dflash_config"] == {"target_layer_ids": TAP_LAYERS, "mask_token_id": MASK_ID,
                                    "block_size": BLOCK, **DFLASH2_KEYS}
    assert cfg["layer_types"] == SLIDING_TYPES and cfg["sliding_window"] == WINDOW
    print("v2/config.json: " + json.dumps({k: cfg.get(k) for k in (
        "architectures", "model_type", "layer_types", "sliding_window", "num_target_layers",
        "dflash_config", "dtype")}))
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        names = sorted(f.keys())
        print(f"v2/model.safetensors ({len(names)} tensors, names as saved):")
        for k in names:
            print(f"  {k:50} {f.get_slice(k).get_dtype()} {list(f.get_slice(k).get_shape())}")
    assert all(f"candidate_selector.{c}.weight" in names for c in CODEBOOKS)

    ref = os.path.join(out_dir, "v2.reference.safetensors")
    tensors = {k: v.detach().clone().contiguous() for k, v in tensors.items()}
    save_file(tensors, ref, metadata={"generator": (
        f"tools/make_dflash2_fixtures.py seed={info['seed']} dflash={importlib.metadata.version('dflash')} "
        f"transformers={transformers.__version__} torch={torch.__version__}")})

    m = info["margins"]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{time.time() - t0:.1f} s, seed {info['seed']}")
    print(f"acceptance lengths ({len(info['acceptance'])} steps): {info['acceptance']}")
    print(f"target greedy margin {target_margin:.3f}; selector score margin {m['selector']:.4f}, "
          f"draft argmax margin {m['draft_argmax']:.4f}, top-{TOP_K} boundary gap "
          f"{m['topk_gap']:.4f}; selector != argmax at {info['changes']} of "
          f"{info['positions']} drafted positions")
    print("step-0 max|draft_hidden diff| with ablated: "
          + ", ".join(f"{k} {v:.3f}" for k, v in info["diffs"].items()))
    for path in [os.path.join(folder, "config.json"), os.path.join(folder, "model.safetensors"), ref]:
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        print(f"  {os.path.relpath(path, out_dir):28} {os.path.getsize(path):8} {digest}")


if __name__ == "__main__":
    main()

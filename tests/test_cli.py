"""The `zen` command line, driven as a user would."""
import json
import math
import pathlib
import shutil
import struct

import numpy as np
import pytest

from conftest import DEFAULT_MODEL, ROOT, STORIES, need, zen

FIXTURE_MODEL = ROOT / "tests" / "fixtures" / "models" / "qwen3_f32"


def test_help_lists_commands():
    r = zen("--help")
    assert r.returncode == 0
    for cmd in ("run", "tokenize", "perplexity", "inspect"):
        assert cmd in r.stdout


def test_unknown_command_and_flag_are_named():
    r = zen("frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr
    r = zen("run", "--prompt", "x", "--temprature", "1")
    assert r.returncode == 1
    assert "unknown flag --temprature" in r.stderr and "--temperature" in r.stderr


def test_bad_flag_values_are_named():
    r = zen("run", "--prompt", "x", "--temperature", "hot")
    assert r.returncode == 1 and "--temperature expects a number, got 'hot'" in r.stderr
    r = zen("run", "--prompt", "x", "--max-tokens", "1.5")
    assert r.returncode == 1 and "--max-tokens expects an integer" in r.stderr
    r = zen("run", "--prompt", "x", "--top-p", "0", "--model", str(STORIES))
    assert r.returncode == 1 and "top_p must be in (0, 1]" in r.stderr
    r = zen("run", "--prompt", "x", "--temperature")
    assert r.returncode == 1 and "--temperature needs a value" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--threads", "0"], "--threads must be in [1, "),
    (["--threads", "-1"], "--threads must be in [1, "),
    (["--threads", "100000"], "--threads must be in [1, "),
    (["--max-num-seqs", "5000"], "--max-num-seqs must be in [1, 1024], got 5000"),
    (["--max-num-seqs", "1000000000"], "--max-num-seqs must be in [1, 1024]"),
    (["--max-num-batched-tokens", "1000000000"], "--max-num-batched-tokens must be in [1, 262144]"),
    (["--context-window", "0"], "--context-window must be positive"),
    (["--host", ""], "--host must name an address"),
    (["--max-long-partial-prefills", "9"], "--max-long-partial-prefills must be in [1, 4], got 9"),
    (["--long-prefill-token-threshold", "0"], "--long-prefill-token-threshold must be at least 1"),
])
def test_serve_refuses_resource_flags_out_of_range(args, message):
    """Refused before any model loads (no --model needed) and before any thread starts."""
    r = zen("serve", "--port", "0", *args, timeout=30)
    assert r.returncode == 1 and message in r.stderr, r.stderr


def test_run_refuses_thread_counts_out_of_range():
    for n in ("0", "-1", "100000"):
        r = zen("run", "--prompt", "x", "--threads", n, "--model", str(STORIES))
        assert r.returncode == 1 and "--threads must be in [1, " in r.stderr, r.stderr


def test_packed_kernel_choice_is_reported_and_checked():
    flags = open("/proc/cpuinfo").read()
    if " avx2 " not in flags:
        pytest.skip("no AVX2: no packed kernels to choose")
    need(DEFAULT_MODEL, "the default model")
    args = ("bench", "--model", DEFAULT_MODEL, "--concurrency", "1", "--workloads", "w:8:2", "--no-prefix-table",
            "--json", "/dev/null")
    r = zen(*args, env={"ZEN_PACKED_ISA": "avx2"})
    assert r.returncode == 0 and "Packed matmul kernels: avx2" in r.stdout, r.stderr
    r = zen(*args, env={"ZEN_PACKED_ISA": "sse9"})
    assert r.returncode == 1 and "ZEN_PACKED_ISA=sse9: expected avx2, avxvnni or avx512vnni" in r.stderr
    if " avx512_vnni " not in flags:
        r = zen(*args, env={"ZEN_PACKED_ISA": "avx512vnni"})
        assert r.returncode == 1 and "ZEN_PACKED_ISA=avx512vnni: this CPU does not have it" in r.stderr


def test_bench_reports_window_and_steady_decode(tmp_path):
    need(DEFAULT_MODEL, "the default model")
    out = tmp_path / "bench.json"
    r = zen("bench", "--model", DEFAULT_MODEL, "--concurrency", "1,4", "--workloads", "w:8:12", "--no-prefix-table",
            "--repeats", "2", "--json", out)
    assert r.returncode == 0, r.stderr
    cells = json.loads(out.read_text())["cells"]
    # Repeat by repeat, so each repeat's c4 / c1 ratio divides rates measured seconds apart.
    assert [(c["repeat"], c["concurrency"]) for c in cells] == [(0, 1), (0, 4), (1, 1), (1, 4)]
    for c in cells:
        assert c["errors"] == 0
        # The steady rate counts only tokens made while every stream decodes.
        assert c["steady_decode_tokens_per_second"] > 0
        assert c["decode_tokens_per_second"] > 0
    for kind, key in (("window", "decode_tokens_per_second"), ("steady", "steady_decode_tokens_per_second")):
        paired = sorted(cells[i + 1][key] / cells[i][key] for i in (0, 2))
        line = next(l for l in r.stdout.splitlines() if l.startswith(f"w: {kind} decode vs concurrency 1:"))
        # The median of the two paired ratios, then their range.
        expected = f"c4 {(paired[0] + paired[1]) / 2:.2f}x ({paired[0]:.2f}-{paired[1]:.2f})"
        assert line.endswith(expected), (line, expected)


def test_missing_model_is_a_clear_error():
    r = zen("run", "--model", "/nonexistent/model.gguf", "--prompt", "hi")
    assert r.returncode == 1
    assert "/nonexistent/model.gguf" in r.stderr


def test_stories260k_greedy_continuation():
    need(STORIES, "stories260K")
    r = zen("run", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "40", check=True)
    expected = ", there was a little girl named Lily. She loved to play outside in the park."
    assert r.stdout.startswith(expected), r.stdout
    assert "prefill:" in r.stderr and "decode:" in r.stderr and "tok/s" in r.stderr


def test_run_keeps_sliding_layers_to_their_window_and_equals_transformers():
    """zen run without speculation on a model with sliding-window layers goes through the
    engine (its window pool holds the sliding layers' K/V) and still greedily continues a prompt
    longer than the window exactly as transformers does. (Recycling within the pool is
    src/engine/window_engine_test.cc's; this pool outlasts 40 positions.)"""
    model = ROOT / "tests" / "fixtures" / "models" / "qwen3_sliding"
    ref = read_safetensors(model.with_name("qwen3_sliding.reference.safetensors"))
    ids = ",".join(str(int(t)) for t in ref["prompt"])
    r = zen("run", "--model", model, "--prompt-ids", ids, "--max-tokens", str(len(ref["greedy"])), "--ignore-eos",
            check=True)
    assert [int(t) for t in r.stdout.split()] == [int(t) for t in ref["greedy"]]
    assert "Sliding-window layers: 2 of 3 KV layers keep their last 7 positions apart" in r.stderr, r.stderr
    assert "speculation:" not in r.stderr  # nothing speculated, nothing to summarise


def test_run_through_the_engine_stops_as_plain_generation_does():
    """zen run through the engine (here speculating with ngram) stops on the tokenizer's
    end-of-turn tokens as generate() does, and prints neither the stop token nor counts it."""
    need(DEFAULT_MODEL, "default model")
    args = ("run", "--model", DEFAULT_MODEL, "--chat", "--prompt", "Say hello in three words.", "--max-tokens", "64")
    plain = zen(*args, check=True)
    spec = zen(*args, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}', check=True)
    assert "finish: stop" in plain.stderr, plain.stderr
    assert spec.stdout == plain.stdout
    decoded = [line.split(" in ")[0] for r in (plain, spec) for line in r.stderr.splitlines() if line.startswith("decode:")]
    assert decoded[0] == decoded[1] and "finish: stop" in spec.stderr, spec.stderr


def test_seeded_sampling_is_reproducible():
    need(STORIES, "stories260K")
    args = ("run", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "30",
            "--temperature", "1.0", "--top-p", "0.9")
    a = zen(*args, "--seed", "42", check=True).stdout
    b = zen(*args, "--seed", "42", check=True).stdout
    c = zen(*args, "--seed", "7", check=True).stdout
    assert a == b
    assert a != c


def test_ignore_eos_generates_exactly_max_tokens():
    need(STORIES, "stories260K")
    r = zen("run", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "300", "--ignore-eos", check=True)
    assert "decode: 300 tokens" in r.stderr


def read_npy(path):
    return np.load(path)


def test_perplexity_and_dumped_logits_agree(tmp_path):
    need(STORIES, "stories260K")
    text = tmp_path / "story.txt"
    text.write_text("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                    "One day, she saw a big, red ball.")
    dump = tmp_path / "logits.npy"
    r = zen("perplexity", "--model", STORIES, "--file", text, "--ctx", "16", "--dump-logits", dump, check=True)
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("perplexity: ")
    ppl = float(last.split()[1])
    logits = read_npy(dump).astype(np.float64)
    ids = [int(x) for x in zen("tokenize", "--tokenizer", STORIES, "--add-bos", text.read_text(), check=True).stdout.split()]
    assert logits.shape == (len(ids), 512)
    nll = []
    for start in range(0, len(ids), 16):
        for i in range(start, min(start + 16, len(ids)) - 1):
            row = logits[i]
            m = row.max()
            lse = m + math.log(np.exp(row - m).sum())
            nll.append(lse - row[ids[i + 1]])
    assert ppl == pytest.approx(math.exp(sum(nll) / len(nll)), rel=1e-4)


def test_inspect_default_model():
    need(DEFAULT_MODEL, "default model")
    r = zen("inspect", DEFAULT_MODEL, check=True)
    assert "architecture: qwen2" in r.stdout
    assert "strict load: ok" in r.stdout
    assert "Q4_K" in r.stdout and "Q6_K" in r.stdout
    assert "context length: 32768" in r.stdout


def write_safetensors(path, tensors):
    """tensors: name -> np.ndarray (float32)."""
    header, offset, blobs = {}, 0, []
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I32": np.int32}[info["dtype"]]
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dtype).reshape(info["shape"])
    return out


def test_inspect_names_missing_and_unexpected_tensors(tmp_path):
    need(FIXTURE_MODEL / "model.safetensors", "qwen3 fixture model")
    tensors = read_safetensors(FIXTURE_MODEL / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.vision_tower.extra.weight"] = np.zeros((2, 2), np.float32)
    (tmp_path / "config.json").write_text((FIXTURE_MODEL / "config.json").read_text())
    write_safetensors(tmp_path / "model.safetensors", tensors)
    r = zen("inspect", tmp_path)
    assert r.returncode == 1
    assert "strict load: FAILED" in r.stdout
    assert "model.layers.1.mlp.up_proj.weight" in r.stdout
    assert "model.vision_tower.extra.weight" in r.stdout
    # Running it refuses to load and names both.
    r = zen("run", "--model", tmp_path, "--prompt", "hi", "--max-tokens", "1")
    assert r.returncode == 1
    assert "model.layers.1.mlp.up_proj.weight" in r.stderr and "model.vision_tower.extra.weight" in r.stderr


def test_default_model_chat_answers():
    need(DEFAULT_MODEL, "default model")
    r = zen("run", "--chat", "--prompt", "Write a Python function that adds two numbers.", "--max-tokens", "24",
            check=True, timeout=900)
    assert "def " in r.stdout
    assert "decode:" in r.stderr


def corpus_cases(name):
    fixtures = ROOT / "tests" / "fixtures" / "tokenizer"
    texts = json.loads((fixtures / "corpus.json").read_text())["texts"]
    ref = json.loads((fixtures / f"{name}.json").read_text())
    return texts, ref


@pytest.mark.parametrize("source", ["tokenizer.json", "folder", "gguf"])
def test_tokenize_command_matches_reference_ids(source):
    """`zen tokenize` prints exactly the reference tokenizer's ids (fixtures from tools/make_tokenizer_fixtures.py)."""
    if source == "gguf":
        need(DEFAULT_MODEL, "default model")
        path, (texts, ref) = DEFAULT_MODEL, corpus_cases("default")
    else:
        folder = ROOT.parent / "shared" / "data" / "tokenizers" / "qwen3"
        need(folder, "shared Qwen3 tokenizer")
        path = folder / "tokenizer.json" if source == "tokenizer.json" else folder
        texts, ref = corpus_cases("qwen3")
    for text, ids in list(zip(texts, ref["ids"]))[:12]:
        if text.startswith("-"):
            continue  # would read as a flag
        out = zen("tokenize", "--tokenizer", path, text, check=True).stdout.split()
        assert [int(x) for x in out] == ids, text


def test_prompts_start_with_one_bos_as_in_llama_cpp(tmp_path):
    """SentencePiece GGUFs add BOS in the encoder; no caller adds a second one (prompts were
    [1, 1, 403, 407] where llama.cpp gives [1, 403, 407]). Reference ids: llama.cpp's, from
    tools/make_tokenizer_fixtures.py."""
    need(STORIES, "stories260K")
    texts, ref = corpus_cases("stories260k")
    assert ref["add_bos"]
    cases = [(t, ids) for t, ids in zip(texts, ref["ids"]) if t and not t.startswith("-")][:6]
    for text, ids in cases:
        out = zen("tokenize", "--tokenizer", STORIES, "--add-bos", text, check=True).stdout.split()
        assert [int(x) for x in out] == ids, text
        out = zen("tokenize", "--tokenizer", STORIES, text, check=True).stdout.split()
        assert [int(x) for x in out] == ids[1:], text
    text, ids = cases[1]
    (tmp_path / "t.txt").write_text(text)
    r = zen("perplexity", "--model", STORIES, "--file", tmp_path / "t.txt", "--ctx", "512", check=True)
    assert f"scored {len(ids) - 1} tokens" in r.stderr, r.stderr
    r = zen("run", "--model", STORIES, "--prompt", text, "--max-tokens", "1", check=True)
    assert f"prefill: {len(ids)} tokens" in r.stderr, r.stderr


@pytest.mark.parametrize("key, value", [("head_dim", 2**31), ("intermediate_size", 2**40),
                                        ("max_position_embeddings", 2**40)])
def test_absurd_config_values_are_refused_before_allocating(tmp_path, key, value):
    """Under a 1 GiB address-space cap: the checkpoint is refused by the config's name, not by
    bad_alloc after gigabytes were allocated."""
    import resource
    import shutil
    import subprocess
    from conftest import ZEN
    model = tmp_path / "model"
    shutil.copytree(FIXTURE_MODEL, model)
    config = json.loads((model / "config.json").read_text())
    config[key] = value
    (model / "config.json").write_text(json.dumps(config))
    cap = lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    r = subprocess.run([str(ZEN), "run", "--model", str(model), "--prompt", "hi", "--max-tokens", "1"],
                       capture_output=True, text=True, timeout=60, preexec_fn=cap)
    assert r.returncode == 1 and key in r.stderr and "bad_alloc" not in r.stderr, r.stderr


def test_kv_cache_precision_changes_perplexity_a_little():
    need(STORIES, "stories260K")
    ppl = {}
    for q in ("auto", "bf16", "fp8_e4m3", "fp8_e5m2"):
        r = zen("perplexity", "--model", STORIES, "--file", "/usr/share/common-licenses/GPL-3", "--ctx", "128",
                "--chunks", "2", "--kv-cache-quant", q, check=True)
        ppl[q] = float(r.stdout.strip().splitlines()[-1].split()[1])
    assert ppl["bf16"] == pytest.approx(ppl["auto"], rel=0.02)
    assert ppl["fp8_e4m3"] == pytest.approx(ppl["auto"], rel=0.05)
    assert ppl["fp8_e5m2"] == pytest.approx(ppl["auto"], rel=0.15)
    assert len(set(ppl.values())) > 1  # the setting really changes the cache
    r = zen("perplexity", "--model", STORIES, "--file", "/usr/share/common-licenses/GPL-3", "--kv-cache-quant", "int4")
    assert r.returncode == 1 and "--kv-cache-quant must be one of" in r.stderr


@pytest.mark.parametrize("name", ["qwen3_f32", "llama_bf16_tied", "qwen2_f16"])
def test_inspect_hf_folder_and_single_safetensors(name):
    folder = ROOT / "tests" / "fixtures" / "models" / name
    for path in (folder, folder / "model.safetensors"):
        r = zen("inspect", path, check=True)
        assert "strict load: ok" in r.stdout
        assert f"architecture: {name.split('_')[0]}" in r.stdout
    assert "format: safetensors" in zen("inspect", folder / "model.safetensors").stdout


def test_inspect_quantized_checkpoint_reports_formats():
    folder = ROOT / "tests" / "fixtures" / "fpquant" / "qwen3_mixed"
    need(folder, "mixed-precision fixture")
    r = zen("inspect", folder, check=True)
    assert "strict load: ok" in r.stdout
    assert "F8_E4M3" in r.stdout and "U8" in r.stdout


ZEN6_CONFIG = ROOT / "tests" / "fixtures" / "configs" / "zen6_shaped"


def test_inspect_config_only_zen6_shaped():
    """A config-only folder (no weights) describes the model: parameters, KV bytes per token
    (full-attention layers only), recurrent-state bytes per sequence. Expected numbers are
    derived here from the config, independently of the C++ code."""
    t = json.loads((ZEN6_CONFIG / "config.json").read_text())["text_config"]
    r = zen("inspect", ZEN6_CONFIG, check=True)
    layers, every = t["num_hidden_layers"], t["full_attention_interval"]
    full = sum(1 for i in range(layers) if (i + 1) % every == 0)
    linear = layers - full
    kv_bytes = 2 * full * t["num_key_value_heads"] * t["head_dim"] * 4
    key_dim = t["linear_num_key_heads"] * t["linear_key_head_dim"]
    value_dim = t["linear_num_value_heads"] * t["linear_value_head_dim"]
    conv_dim = 2 * key_dim + value_dim
    state = linear * (conv_dim * (t["linear_conv_kernel_dim"] - 1) +
                      t["linear_num_value_heads"] * t["linear_key_head_dim"] * t["linear_value_head_dim"]) * 4
    H, V, I, hd = t["hidden_size"], t["vocab_size"], t["intermediate_size"], t["head_dim"]
    nh, nkv, Hv = t["num_attention_heads"], t["num_key_value_heads"], t["linear_num_value_heads"]
    attn = nh * hd * 2 * H + 2 * nkv * hd * H + H * nh * hd + 2 * hd
    gdn = H * (conv_dim + value_dim + 2 * Hv) + conv_dim * 4 + 2 * Hv + t["linear_value_head_dim"] + value_dim * H
    params = 2 * V * H + H + layers * (2 * H + 3 * H * I) + full * attn + linear * gdn
    assert "format: config only (no weights)" in r.stdout
    assert "architecture: qwen3_5" in r.stdout
    assert f"parameters: {params} " in r.stdout
    assert f"layer schedule: {linear} linear attention (Gated DeltaNet) + {full} full attention" in r.stdout
    assert f"KV cache bytes per token (f32): {kv_bytes} ({full} attention layers)" in r.stdout
    assert f"recurrent state bytes per sequence (f32): {state} " in r.stdout
    assert "context length: 1048576" in r.stdout


def test_inspect_hybrid_fixture_reports_state():
    r = zen("inspect", ROOT / "tests" / "fixtures" / "models" / "qwen3_5_vl_bf16", check=True)
    assert "strict load: ok" in r.stdout
    assert "recurrent state bytes per sequence" in r.stdout
    assert "vision tower" in r.stdout  # the named ignore rule is listed


def test_inspect_mtp_head_status(tmp_path):
    """Qwen3.5's MTP head: available with mtp.fc.weight; without it, inspect says so by name
    and the rest of the head is ignored by a named rule (the model itself still loads)."""
    src = ROOT / "tests" / "fixtures" / "models" / "qwen3_5_text_f32"
    r = zen("inspect", src, check=True)
    assert "MTP: available (1 layer)" in r.stdout
    tensors = read_safetensors(src / "model.safetensors")
    del tensors["mtp.fc.weight"]
    (tmp_path / "config.json").write_text((src / "config.json").read_text())
    write_safetensors(tmp_path / "model.safetensors", tensors)
    r = zen("inspect", tmp_path, check=True)
    assert "MTP: unavailable (missing mtp.fc.weight)" in r.stdout
    assert "strict load: ok" in r.stdout
    assert "mtp.layers.0.self_attn.q_proj.weight: MTP head unavailable: mtp.fc.weight is missing" in r.stdout


def test_mtp_flag_drafts_with_the_checkpoints_head(tmp_path):
    """--mtp drafts with the checkpoint's own MTP head (its KV in the start-up table, its time
    in the summary); a checkpoint without mtp.fc.weight is refused naming it."""
    src = ROOT / "tests" / "fixtures" / "models" / "qwen3_5_text_f32"
    bench = ["bench", "--concurrency", "1", "--workloads", "w:6:8", "--repeats", "1", "--no-prefix-table",
             "--json", tmp_path / "bench.json"]
    r = zen(*bench, "--model", src, "--mtp", check=True)
    assert "Speculative decoding: mtp, k up to 3, adaptive" in r.stdout, r.stdout
    assert "KV cost of the drafter" in r.stdout
    tensors = read_safetensors(src / "model.safetensors")
    del tensors["mtp.fc.weight"]
    stripped = tmp_path / "stripped"
    stripped.mkdir()
    (stripped / "config.json").write_text((src / "config.json").read_text())
    write_safetensors(stripped / "model.safetensors", tensors)
    r = zen(*bench, "--model", stripped, "--mtp")
    assert r.returncode != 0 and "MTP head (mtp.fc.weight): unavailable (missing mtp.fc.weight)" in r.stderr, r.stderr


def test_inspect_a_drafter_shows_its_layers_and_window_memory():
    """zen inspect DRAFTER: parameters, each layer's attention kind and window, taps, block size,
    and the draft KV: per token for the full layers, a fixed store for the sliding ones."""
    r = zen("inspect", ROOT / "tests" / "fixtures" / "dflash" / "v1", check=True)
    assert "format: DFlash block drafter" in r.stdout, r.stdout
    assert "layer 0: sliding_attention, causal, window 5" in r.stdout
    assert "layer 2: full_attention, bidirectional in the block" in r.stdout
    assert "taps: target layers 1, 3 (fc 64 -> 32)" in r.stdout
    assert "block size: 4 (anchor + 3 drafted), mask token 287" in r.stdout
    # One full layer: K and V of 2 heads of 16 in f32; two sliding layers of window 5 read 4 rows
    # each and keep 2 blocks of 16 rows.
    assert ("256 bytes per context token for the full layers (beside the target's KV); the sliding "
            "layers read at most 2048 bytes per sequence, kept in 16384 bytes") in r.stdout, r.stdout


def test_dflash_flag_finds_the_bundled_drafter(tmp_path):
    """Bare --dflash takes the model folder's dflash2/, else dflash/ (Zen6 ships dflash2/), and says
    which; a folder without one, or two speculation flags, is a named error."""
    fixtures = ROOT / "tests" / "fixtures" / "dflash"
    model = tmp_path / "model"
    shutil.copytree(fixtures / "target", model)
    bench = ["bench", "--model", model, "--concurrency", "1", "--workloads", "w:6:8", "--repeats", "1",
             "--no-prefix-table", "--json", tmp_path / "bench.json"]
    r = zen(*bench, "--dflash")
    assert r.returncode != 0 and "carries no dflash2/ or dflash/ drafter folder" in r.stderr, r.stderr
    shutil.copytree(fixtures / "v1", model / "dflash")
    r = zen(*bench, "--dflash", check=True)
    assert f"Speculative decoding: dflash, k up to 3, adaptive, draft {model / 'dflash'}" in r.stdout, r.stdout
    assert "KV cost of the drafter" in r.stdout
    shutil.copytree(fixtures / "v1_full", model / "dflash2")
    r = zen(*bench, "--dflash", check=True)
    assert f"draft {model / 'dflash2'}" in r.stdout, r.stdout
    r = zen(*bench, f"--dflash={fixtures / 'v1'}", check=True)
    assert f"draft {fixtures / 'v1'}" in r.stdout, r.stdout
    r = zen(*bench, "--dflash", "--draft-model", model)
    assert r.returncode != 0 and "give one of --speculative-config, --draft-model, --dflash and --mtp" in r.stderr
    r = zen(*bench, "--speculative-config", '{"method": "dflash", "model": "%s", "num_speculative_tokens": 5}'
            % (fixtures / "v1"))
    assert r.returncode != 0 and "num_speculative_tokens 5 exceeds what the dflash proposer drafts per step (3)" in r.stderr

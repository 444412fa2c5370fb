"""`zen plan`: layouts of the full-size configs over N nodes. The simplest quantities (per-rank
weights at TP=N, collective counts and bytes, the decode bound) are recomputed here from the
config, independently of the C++ code; bad flags exit 1 with a message."""
import json
import math
import re

import pytest

from conftest import DEFAULT_MODEL, ROOT, need, zen

CONFIGS = ROOT / "tests" / "fixtures" / "configs"
ULTRA = CONFIGS / "zen4_ultra_shaped"
ZEN6 = CONFIGS / "zen6_shaped"
GIB = 1024 ** 3
ALPHA, GBPS = 20e-6, 100
BETA = GBPS * 1e9 / 8
DTYPE_BYTES = {"bf16": 2, "fp8": 1, "nvfp4": 0.5625}


def text_config(folder):
    j = json.loads((folder / "config.json").read_text())
    return j.get("text_config", j)


def tp_rank_weight_bytes(t, tp, dtype_bytes):
    """Weight bytes of one TP rank (one stage): matrices at the dtype, 1-D tensors f32."""
    H, V, hd, L = t["hidden_size"], t["vocab_size"], t["head_dim"], t["num_hidden_layers"]
    nh, kv = t["num_attention_heads"], t["num_key_value_heads"]
    kv_r = kv // tp if tp <= kv else 1
    ceil = lambda a: -(-a // tp)
    matrices = 2 * ceil(V) * H  # vocab-split embedding and lm_head (untied)
    vectors = H + 2 * H * L  # final norm, two norms per layer
    for layer in range(L):
        full = "layer_types" not in t and (layer + 1) % t.get("full_attention_interval", 1) == 0
        if "linear_num_key_heads" not in t or full:
            g = 2 if "linear_num_key_heads" in t else 1  # the hybrids' gated q_proj
            matrices += (nh // tp) * hd * g * H + 2 * kv_r * hd * H + H * (nh // tp) * hd
            vectors += 2 * hd  # q/k norms
        else:
            hk, hv = t["linear_num_key_heads"], t["linear_num_value_heads"]
            dk, dv, K = t["linear_key_head_dim"], t["linear_value_head_dim"], t["linear_conv_kernel_dim"]
            conv, value = 2 * hk * dk + hv * dv, hv * dv
            matrices += (H * (conv + value + 2 * hv) + conv * K + value * H) // tp
            vectors += 2 * hv // tp + dv
        sparse = t.get("num_experts", 0) > 0 and (layer + 1) % t.get("decoder_sparse_step", 1) == 0
        if sparse:
            matrices += t["num_experts"] * H + t["num_experts"] * 3 * H * ceil(t["moe_intermediate_size"])
        else:
            matrices += 3 * H * ceil(t["intermediate_size"])
    return matrices * dtype_bytes + vectors * 4


def plan(*args):
    r = zen("plan", *args)
    assert r.returncode == 0, r.stderr
    return r


def plan_json(*args):
    return json.loads(plan(*args, "--json", "-").stdout)


def table_rows(stdout):
    """layout -> the table's columns."""
    rows = {}
    for line in stdout.splitlines():
        m = re.match(r"^((?:tp|ep|pp)=\S+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+(yes|no)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+"
                     r"([\d.]+)\s+([\d.]+)$", line)
        if m:
            rows[m.group(1)] = m.groups()[1:]
    return rows


def test_zen4_ultra_table_on_8_nodes():
    t = text_config(ULTRA)
    args = ("--model", ULTRA, "--nodes", 8, "--memory-per-node", "256G", "--network", GBPS, "--dtype", "nvfp4")
    r = plan(*args)
    assert "parameters: 1041386471424 " in r.stdout
    rows = table_rows(r.stdout)
    assert set(rows) == {"tp=8", "ep=8", "tp=4,pp=2", "ep=4,pp=2", "tp=2,pp=4", "ep=2,pp=4", "pp=8"}
    weights, _, _, fits, calls, _, mem, net, tps = rows["tp=8"]
    expect = tp_rank_weight_bytes(t, 8, DTYPE_BYTES["nvfp4"])
    assert abs(float(weights) - expect / GIB) <= 0.05
    assert fits == "yes"
    assert int(calls) == 2 * t["num_hidden_layers"] + 1 + 1  # 2 all-reduces a layer, embedding, argmax
    assert float(tps) == pytest.approx(1000 / (float(mem) + float(net)), rel=0.01)
    # Sorted by the bound among the layouts that fit.
    bounds = [float(row[-1]) for row in rows.values()]
    assert bounds == sorted(bounds, reverse=True)

    j = plan_json(*args)
    by_name = {p["layout"]: p for p in j["layouts"]}
    tp8 = by_name["tp=8"]
    assert tp8["weight_bytes_per_rank"] == pytest.approx(expect, rel=1e-12)
    assert tp8["kv_bytes_per_token_per_rank"] == t["num_hidden_layers"] * 1 * t["head_dim"] * 2 * 2
    row = t["hidden_size"] * 2  # one [1, H] bf16
    all_reduce = [c for c in tp8["collectives"] if c["kind"] == "all-reduce"]
    assert sum(c["calls"] for c in all_reduce) == 2 * t["num_hidden_layers"] + 1
    assert all(c["payload_bytes"] == row and c["group"] == 8 for c in all_reduce)
    gather = [c for c in tp8["collectives"] if c["kind"] == "all-gather"]
    assert [(c["calls"], c["payload_bytes"]) for c in gather] == [(1, 8)]
    network = (2 * t["num_hidden_layers"] + 1) * 14 * (ALPHA + row / 8 / BETA) + 7 * (ALPHA + 8 / BETA)
    assert tp8["network_seconds"] == pytest.approx(network, rel=1e-9)
    assert tp8["tokens_per_second"] == pytest.approx(1 / (tp8["memory_seconds"] + network), rel=1e-9)
    # EP: one all-reduce per MoE layer at batch 1, dispatch + combine as the alternative.
    ep8 = by_name["ep=8"]
    assert ep8["moe_comm"] == "all-reduce"
    assert ep8["calls_per_token"] == 48
    assert sum(c["calls"] for c in ep8["collectives_alt"] if c["kind"] == "all-to-all") == 96
    assert ep8["ep_comparison"]["all_reduce_batch1_seconds"] < ep8["ep_comparison"]["all_to_all_batch1_seconds"]


def test_zen4_ultra_does_not_fit_on_two_nodes():
    r = zen("plan", "--model", ULTRA, "--nodes", 2, "--memory-per-node", "256G", "--network", GBPS, "--dtype", "nvfp4")
    assert r.returncode == 1
    assert "nothing fits on 2 nodes" in r.stderr and "internal error" not in r.stderr


def test_layout_detail_and_pipeline():
    t = text_config(ULTRA)
    r = plan("--model", ULTRA, "--nodes", 8, "--memory-per-node", "256G", "--network", GBPS, "--dtype", "nvfp4",
             "--layout", "tp=4,pp=2")
    assert "layout tp=4,pp=2: 8 ranks" in r.stdout
    assert "stage 0: layers [0, 48)" in r.stdout and "stage 1: layers [48, 96)" in r.stdout
    assert "activations to the next stage" in r.stdout and "argmax (max, index) of the new tokens" in r.stdout
    j = plan_json("--model", ULTRA, "--nodes", 8, "--memory-per-node", "256G", "--network", GBPS, "--dtype", "nvfp4",
                  "--layout", "tp=4,pp=2")
    (p,) = j["layouts"]
    kinds = {}
    for c in p["collectives"]:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + c["calls"]
    assert kinds == {"all-reduce": 2 * t["num_hidden_layers"] + 1, "all-gather": 1, "send": 2}
    assert p["memory_seconds"] == pytest.approx(sum(s["memory_seconds"] for s in p["stages"]), rel=1e-12)

    r = plan("--model", ULTRA, "--nodes", 8, "--memory-per-node", "256G", "--network", GBPS, "--dtype", "nvfp4",
             "--layout", "ep=8")
    assert "the other MoE exchange, by all-to-all" in r.stdout
    assert "batch 64:" in r.stdout


def test_zen6_hybrid_splits_gated_deltanet():
    t = text_config(ZEN6)
    j = plan_json("--model", ZEN6, "--nodes", 4, "--memory-per-node", "16G", "--network", GBPS, "--layout", "tp=4")
    (p,) = j["layouts"]
    assert p["fits"]
    assert p["weight_bytes_per_rank"] == pytest.approx(tp_rank_weight_bytes(t, 4, 2), rel=1e-12)
    calls = {c["purpose"]: c["calls"] for c in p["collectives"]}
    full = t["num_hidden_layers"] // t["full_attention_interval"]
    assert calls["Gated DeltaNet output (row-parallel out_proj)"] == t["num_hidden_layers"] - full
    assert calls["attention output (row-parallel o_proj)"] == full
    assert sum(calls.values()) == 2 * t["num_hidden_layers"] + 1 + 1
    # The f32 recurrent state of a sequence, split by heads.
    hk, hv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
    conv = 2 * hk * dk + hv * dv
    state = (t["num_hidden_layers"] - full) * (conv * (t["linear_conv_kernel_dim"] - 1) + hv * dk * dv) * 4
    assert p["stages"][0]["state_bytes_per_sequence"] * 4 == state
    assert p["kv_heads_per_rank"] == 1  # 4 KV heads over 4 ranks
    # Every factorization of 4 is listed; config.json itself is accepted too.
    r = plan("--model", ZEN6 / "config.json", "--nodes", 4, "--memory-per-node", "16G", "--network", GBPS)
    assert set(table_rows(r.stdout)) == {"tp=4", "tp=2,pp=2", "pp=4"}


def test_help():
    r = zen("plan", "--help")
    assert r.returncode == 0 and "--memory-per-node" in r.stdout and "ring all-reduce" in r.stdout
    assert "plan" in zen("--help").stdout


@pytest.mark.parametrize("args,message", [
    (["--nodes", "0"], "nodes must be"),
    (["--nodes", "x"], "--nodes expects an integer"),
    (["--memory-per-node", "12Q"], "--memory-per-node expects a size"),
    (["--memory-per-node", "-5G"], "--memory-per-node expects a size"),
    (["--network", "-1"], "network bandwidth must be positive"),
    (["--network", "fast"], "--network expects a number"),
    (["--layout", "tp=3"], "uses 3 ranks"),
    (["--layout", "bogus"], "expected tp=N"),
    (["--dtype", "int3"], "--dtype must be one of"),
    (["--reserve", "1.5"], "reserve must be in"),
    (["--model", "/nonexistent/config.json"], "no such file"),
    (["--frobnicate"], "unknown flag --frobnicate"),
    (["extra"], "unexpected argument"),
])
def test_bad_flags_exit_1_with_a_message(args, message):
    base = {"--model": str(ULTRA), "--nodes": "8", "--memory-per-node": "256G", "--network": "100"}
    flags = []
    for k, v in base.items():
        if k not in args:
            flags += [k, v]
    r = zen("plan", *flags, *args)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert "internal error" not in r.stderr


def test_missing_required_flag():
    r = zen("plan", "--model", ULTRA, "--nodes", 8)
    assert r.returncode == 1 and "give --memory-per-node" in r.stderr


def test_layout_that_does_not_fit_exits_1():
    r = zen("plan", "--model", ULTRA, "--nodes", 8, "--memory-per-node", "256G", "--network", GBPS, "--dtype", "bf16",
            "--layout", "pp=8")
    assert r.returncode == 1
    assert "fits: no" in r.stdout and "does not fit" in r.stderr


def test_logits_flag_plans_rows_that_sample():
    """--logits: the vocabulary split exchanges each rank's f32 logits slice, not (max, index)."""
    t = text_config(ULTRA)
    base = ["--model", ULTRA, "--nodes", 8, "--memory-per-node", "256G", "--network", GBPS, "--dtype", "nvfp4",
            "--layout", "tp=8"]
    (greedy,) = plan_json(*base)["layouts"]
    (sampled,) = plan_json(*base, "--logits")["layouts"]
    gathers = [c for c in sampled["collectives"] if c["kind"] == "all-gather"]
    assert [(c["calls"], c["payload_bytes"]) for c in gathers] == [(1, -(-t["vocab_size"] // 8) * 4)]
    assert sampled["network_seconds"] > greedy["network_seconds"]


@pytest.mark.parametrize("path", [ROOT / "tests" / "fixtures" / "models" / "qwen3_5_tied_f32.gguf", DEFAULT_MODEL],
                         ids=["hybrid-fixture", "default-model"])
def test_a_gguf_file_is_read_from_its_metadata(path):
    """--model may be a GGUF file: its metadata gives the shape. The planner's parameter count
    (computed from the shape, a tied lm_head counted once) equals the file's tensor elements."""
    need(path, "the GGUF file")
    gguf = pytest.importorskip("gguf")
    model = plan_json("--model", path, "--nodes", "2", "--memory-per-node", "16G", "--network", "10")["model"]
    reader = gguf.GGUFReader(str(path))
    # llama.cpp appends an MTP head as one more block holding nextn.* tensors: not a layer, and
    # not among the parameters the planner lays out (nor are rope frequency tables).
    def block(name):
        return int(name.split(".")[1]) if name.startswith("blk.") else None
    mtp_blocks = {block(t.name) for t in reader.tensors if ".nextn." in t.name}
    layers = {block(t.name) for t in reader.tensors if t.name.startswith("blk.")} - mtp_blocks
    assert model["layers"] == len(layers)
    embedding = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert model["hidden_size"] == int(embedding.shape[0])
    counted = sum(int(t.n_elements) for t in reader.tensors
                  if block(t.name) not in mtp_blocks and not t.name.startswith("rope_"))
    assert model["parameters"] == pytest.approx(counted, rel=0.01), (model["parameters"], counted)

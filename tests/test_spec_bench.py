"""bench/spec_bench.py's own arithmetic, without a server: the Prometheus parser and counter
deltas it computes acceptance from, config names, percentiles, which prompts each cell takes
(none recurs within a server's life), and the report's medians and speedups."""
import importlib.util
import random

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("spec_bench", ROOT / "bench" / "spec_bench.py")
sb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sb)

METRICS = """# HELP zen_spec_decode_num_drafts_total Drafts verified.
# TYPE zen_spec_decode_num_drafts_total counter
zen_spec_decode_num_drafts_total{model="m"} 10
zen_spec_decode_num_draft_tokens_total{model="m"} 40
zen_spec_decode_num_accepted_tokens_total{model="m"} 25
zen_spec_decode_num_accepted_tokens_per_pos_total{model="m",position="0"} 9
zen_spec_decode_num_accepted_tokens_per_pos_total{model="m",position="1"} 8
zen_spec_decode_num_accepted_tokens_per_pos_total{model="m",position="2"} 8
zen_generation_tokens_total{model="m"} 60
zen_num_requests_running{model="m"} 2 1700000000
not a sample line
"""


def counters(text):
    return sb.spec_counters(sb.parse_prometheus(text))


def test_prometheus_samples_and_labels():
    samples = sb.parse_prometheus(METRICS)
    assert ("zen_num_requests_running", {"model": "m"}, 2.0) in samples  # a timestamp is dropped
    assert sb.metric_sum(samples, "zen_spec_decode_num_accepted_tokens_per_pos_total") == 25
    assert sb.metric_sum(samples, "zen_spec_decode_num_accepted_tokens_per_pos_total", position="1") == 8
    assert sb.metric_sum(samples, "absent_total") == 0


def test_acceptance_comes_from_counter_deltas():
    before = counters(METRICS)
    after = counters(METRICS.replace("} 10", "} 14").replace("} 40", "} 56").replace("} 25", "} 35")
                     .replace('position="0"} 9', 'position="0"} 13').replace('position="1"} 8', 'position="1"} 11')
                     .replace('position="2"} 8', 'position="2"} 11').replace("} 60", "} 80"))
    d = sb.spec_delta(before, after)
    assert (d["drafts"], d["draft_tokens"], d["accepted_tokens"], d["generation_tokens"]) == (4, 16, 10, 20)
    assert d["acceptance_rate"] == pytest.approx(10 / 16)
    assert d["mean_acceptance_length"] == pytest.approx(1 + 10 / 4)
    assert d["accepted_per_position"] == [4, 3, 3]
    assert d["acceptance_rate_per_position"] == pytest.approx([1.0, 0.75, 0.75])
    idle = sb.spec_delta(before, before)  # nothing drafted: no rates, not zero ones
    assert idle["acceptance_rate"] is None and idle["mean_acceptance_length"] is None


def test_config_names():
    class Args:
        k, lookup_min, lookup_max, draft_model = 8, 2, 5, "/d.gguf"
    assert sb.spec_config("none", Args) == ("none", None)
    assert sb.spec_config("ngram:adaptive", Args)[1] == {
        "method": "ngram", "num_speculative_tokens": 8, "adaptive": True, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    assert sb.spec_config("draft:fixed", Args)[1] == {
        "method": "draft_model", "num_speculative_tokens": 8, "adaptive": False, "model": "/d.gguf"}
    assert sb.spec_config('ng4={"method": "ngram"}', Args) == ("ng4", {"method": "ngram"})
    for bad in ("ngram", "beam:adaptive", "ngram:sometimes"):
        with pytest.raises(SystemExit):
            sb.spec_config(bad, Args)


def test_percentile_interpolates_like_numpy():
    assert sb.percentile([], 0.5) is None
    assert sb.percentile([3.0], 0.95) == 3.0
    assert sb.percentile([4, 1, 3, 2], 0.5) == 2.5
    assert sb.percentile(list(range(11)), 0.05) == pytest.approx(0.5)


@pytest.mark.parametrize("levels,per_cell", [([1, 4, 16], None), ([1, 2, 4, 8], 2), ([1, 4], 3)])
def test_no_prompt_recurs_within_a_server_until_the_pack_runs_out(levels, per_cell):
    packs = {"code": [f"p{i}" for i in range(72)], "edit": [f"e{i}" for i in range(40)]}
    starts = sb.cell_starts(packs, ["code", "edit"], levels, 2, per_cell, seed=7)
    for w, pack in packs.items():
        usable = len(pack) - 1  # the last prompt is the warm-up's
        seen = []
        for rep in range(2):
            for level in levels:
                n = max(level, per_cell or 2 * level)
                seen += sb.cell_prompts(pack, starts[(w, level, rep)], n)
        assert pack[-1] not in seen
        # Consecutive cells take consecutive prompts: each run of `usable` prompts is distinct.
        for i in range(0, len(seen), usable):
            chunk = seen[i:i + usable]
            assert len(set(chunk)) == len(chunk)
    assert starts == sb.cell_starts(packs, ["code", "edit"], levels, 2, per_cell, seed=7)  # seeded


def cell(config, tok_s, rep, acc=None):
    return {"config": config, "workload": "code", "concurrency": 4, "repeat": rep, "requests": 4,
            "output_tok_s": tok_s, "errors": 0, "degraded": 0, "ok": 4, "same_as_none": 4 if config != "none" else None,
            "stream_tok_s": {k: tok_s / 4 for k in ("min", "p05", "p50", "p95", "max")}, "ttft_p50_s": 0.5,
            "achieved_concurrency": 4.0, "server_running_mean": 3.9,
            "spec": {"acceptance_rate": acc, "mean_acceptance_length": None if acc is None else 1 + 3 * acc,
                     "acceptance_rate_per_position": [] if acc is None else [acc]}}


def test_report_takes_medians_over_repeats_and_divides_by_none():
    cells = [cell("none", 40, 0), cell("none", 60, 1), cell("none", 50, 2),
             cell("ngram:adaptive", 45, 0, 0.5), cell("ngram:adaptive", 75, 1, 0.7), cell("ngram:adaptive", 55, 2, 0.6)]
    summary = sb.summarize(cells, ["none", "ngram:adaptive"], ["code"], [4])
    assert summary[("none", "code", 4)]["output_tok_s"] == 50
    assert summary[("ngram:adaptive", "code", 4)]["output_tok_s"] == 55
    assert summary[("ngram:adaptive", "code", 4)]["acceptance_rate"] == pytest.approx(0.6)
    assert sb.speedup(summary, "ngram:adaptive", "code", 4) == pytest.approx(1.1)
    assert sb.speedup(summary, "ngram:adaptive", "code", 16) is None  # no such cell
    results = {"cells": cells, "server_failures": [],
               "meta": {"model": "/m/coder/model.gguf", "started": "t", "host": "h", "git": "g", "cpu_count": 2,
                        "temperature": 0.0, "repeats": 3, "requests_per_cell": 4, "max_tokens_cap": None,
                        "prompts_per_workload": None, "prefix_cache": False,
                        "configs": {"none": None, "ngram:adaptive": {"method": "ngram"}}}}
    text, _ = sb.markdown(results, ["none", "ngram:adaptive"], ["code"], [4])
    assert "| code | 4 | 50.0 | 55.0 (1.10x, acc 60%, len 2.80) |" in text
    assert text.count("| ngram:adaptive | code | 4 |") == 3  # a detail row per repeat


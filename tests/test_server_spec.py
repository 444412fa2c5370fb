"""Speculative decoding through `zen serve` and the official openai client: greedy output equals
the server without speculation (alone and at concurrency), streamed chunks carry several tokens,
usage counts are exact, and the spec_decode counters move as documented."""
import concurrent.futures
import json

import pytest

from conftest import DEFAULT_MODEL, ROOT, need, zen
from zen_server import ZenServer

CODER_1_5B = ROOT / "models" / "coder-1.5b" / "model.gguf"

# Edit work: the model copies most of the prompt back, so lookups draft well.
MODULE = '''def parse_record(line: str) -> dict:
    """Splits a CSV line into a record."""
    name, age, city = line.strip().split(",")
    return {"name": name, "age": int(age), "city": city}


def load(lines: list[str]) -> list[dict]:
    return [parse_record(line) for line in lines if line.strip()]


def oldest(records: list[dict]) -> dict:
    return max(records, key=lambda r: r["age"])
'''
EDIT = [{"role": "user", "content": "Rename parse_record to parse_row everywhere. Return the whole module "
                                    "in one python code block and nothing else.\n\n```python\n" + MODULE + "```"}]
PROSE = [{"role": "user", "content": "Write two sentences about a lighthouse keeper."}]


def chat(server, messages, max_tokens=120, stream=False, **kw):
    client = server.client()
    if not stream:
        r = client.chat.completions.create(model=server.model, messages=messages, max_tokens=max_tokens,
                                           temperature=0, **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage, None
    chunks = list(client.chat.completions.create(model=server.model, messages=messages, max_tokens=max_tokens,
                                                 temperature=0, stream=True, logprobs=True,
                                                 stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = next(c.choices[0].finish_reason for c in reversed(chunks) if c.choices and c.choices[0].finish_reason)
    usage = next(c.usage for c in reversed(chunks) if c.usage is not None)
    per_chunk = [len(c.choices[0].logprobs.content) for c in chunks if c.choices and c.choices[0].logprobs]
    return text, finish, usage, per_chunk


@pytest.fixture(scope="module")
def plain_server():
    need(DEFAULT_MODEL, "the default model")
    server = ZenServer("--max-num-seqs", "16")
    yield server
    server.stop()


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_greedy_speculation_equals_plain_alone_and_at_concurrency(plain_server, method):
    server = ZenServer("--max-num-seqs", "16", "--speculative-config",
                       json.dumps({"method": method, "num_speculative_tokens": 8}))
    try:
        assert f"Speculative decoding: {method}" in "".join(server.output)
        prompts = [EDIT, PROSE] + [[{"role": "user", "content": f"Count from {i} to {i + 12}, comma separated."}]
                                    for i in range(6)]
        want = [chat(plain_server, p) for p in prompts]
        got_alone = [chat(server, p) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            got_together = list(pool.map(lambda p: chat(server, p), prompts))
        for w, a, t in zip(want, got_alone, got_together):
            assert a[0] == w[0] and t[0] == w[0]
            assert a[1] == w[1] and t[1] == w[1]
            assert a[2].completion_tokens == w[2].completion_tokens == t[2].completion_tokens
        drafts = server.metric("zen_spec_decode_num_drafts_total")
        draft_tokens = server.metric("zen_spec_decode_num_draft_tokens_total")
        accepted = server.metric("zen_spec_decode_num_accepted_tokens_total")
        per_pos = server.metric("zen_spec_decode_num_accepted_tokens_per_pos_total")
        assert drafts > 0 and 0 < accepted <= draft_tokens
        assert per_pos == accepted
        # The edit request's usage reports its own drafts as OpenAI's prediction counts.
        details = got_alone[0][2].completion_tokens_details
        assert details is not None and details.accepted_prediction_tokens > 0
    finally:
        server.stop()


def test_streaming_carries_several_tokens_per_chunk_and_exact_usage(plain_server):
    server = ZenServer("--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 8,
                                                            "adaptive": False}))
    try:
        before = server.metric("zen_spec_decode_num_accepted_tokens_total")
        text, finish, usage, per_chunk = chat(server, EDIT, max_tokens=150, stream=True)
        want_text, want_finish, want_usage, _ = chat(plain_server, EDIT, max_tokens=150)
        assert text == want_text and finish == want_finish
        assert usage.completion_tokens == want_usage.completion_tokens == sum(per_chunk)
        assert max(per_chunk) > 1, per_chunk  # accepted drafts arrive together
        after = server.metric("zen_spec_decode_num_accepted_tokens_total")
        assert after - before == usage.completion_tokens_details.accepted_prediction_tokens > 0
        # Stop strings still cut inside a multi-token chunk.
        cut, reason, cut_usage, _ = chat(server, EDIT, max_tokens=150, stream=True, stop=["parse_row("])
        assert reason == "stop" and "parse_row(" not in cut and want_text.startswith(cut)
        assert cut_usage.completion_tokens < usage.completion_tokens
    finally:
        server.stop()


def test_bad_speculative_config_is_refused_by_name():
    for config, words in [('{"method": "eagle"}', "unknown method"),
                          ('{"method": "ngram", "k": 3}', 'unknown key "k"'),
                          ('{"method": "ngram", "num_speculative_tokens": 0}', "num_speculative_tokens"),
                          ('{"method": "draft_model"}', "needs \"model\""),
                          ("[1]", "JSON object"), ("{", "not valid JSON")]:
        r = zen("serve", "--speculative-config", config, "--port", "0")
        assert r.returncode != 0 and words in r.stderr, (config, r.stderr)
    r = zen("run", "--prompt", "x", "--spec-trace", "/tmp/t.jsonl")
    assert r.returncode != 0 and "--spec-trace needs speculative decoding" in r.stderr


def test_zen_run_prints_the_summary_and_the_trace(tmp_path):
    need(DEFAULT_MODEL, "the default model")
    trace = tmp_path / "trace.jsonl"
    prompt = "def f(x):\n    return x * 2 + 1\n\n# again, exactly:\ndef f(x):\n"
    plain = zen("run", "--prompt", prompt, "--max-tokens", "24", "--threads", "2", check=True)
    spec = zen("run", "--prompt", prompt, "--max-tokens", "24", "--threads", "2", "--speculative-config",
               '{"method": "ngram", "adaptive": false}', "--spec-trace", trace, check=True)
    assert spec.stdout == plain.stdout
    assert "speculation:" in spec.stderr and "acceptance by position:" in spec.stderr
    records = [json.loads(l) for l in trace.read_text().splitlines()]
    lines = [l for l in records if l["kind"] == "verify"]
    steps = [l for l in records if l["kind"] == "step"]
    assert lines and all({"step", "seq", "pos", "drafted", "accepted", "draft"} <= l.keys() for l in lines)
    assert all(0 <= l["accepted"] <= l["drafted"] == len(l["draft"]) for l in lines)
    # One line per step after its verifications: its size, drafts and emitted tokens add up
    # with them, and the controller's price of it is next to what it took.
    assert len(steps) == len({l["step"] for l in records}) and {l["kind"] for l in records} == {"verify", "step"}
    for s in steps:
        mine = [l for l in lines if l["step"] == s["step"]]
        assert s["draft_tokens"] == sum(l["drafted"] for l in mine)
        assert s["tokens"] >= s["draft_tokens"] + len(mine) and s["emitted"] >= len(mine)
        assert s["seconds"] > 0 and s["draft_seconds"] >= 0 and s["predicted_seconds"] >= 0
    assert sum(s["emitted"] for s in steps) == 24  # every generated token, the prompt's first included

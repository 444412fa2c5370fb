#!/usr/bin/env python3
"""Constrained decoding benchmark: mask and compile times over the JSON Schema corpus, and
end-to-end throughput of constrained against free generation at a concurrency level.

  .venv/bin/python bench/grammar_bench.py [--cold] [--e2e] [--concurrency 16] [--zen build/zen]

Masks (always): every corpus schema compiled and every valid instance walked token by token
in one `zen grammar --batch` process (a server's situation: the vocabulary and the token
classes of equal states are shared between schemas). Each mask is timed, the last one of each
text (where only a stop token may follow) included, first uses included.
--cold: the same per schema in a fresh process each (`zen grammar --check`): nothing shared,
every state's classes computed on first use.
--e2e: one server; waves of N concurrent streamed chat requests, each with a corpus schema as
response_format (strict), alternating with waves of the same prompts unconstrained; reports
each wave's median per-stream decode rate over the first 24 content chunks of each stream
(first to last; prefill excluded, and every stream of the wave still running, so the
constrained answers' shorter lengths do not enter) and the ratio of medians.
"""
import argparse
import concurrent.futures
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "json_schemas"
MODEL = ROOT / "models" / "default" / "model.gguf"
WINDOW = 24  # tokens per stream timed in --e2e


def corpus():
    for path in sorted(CORPUS.glob("[0-9]*.json")):
        yield path.stem, json.loads(path.read_text())


def masks_warm(zen):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for name, case in corpus():
            texts = [json.dumps(v, ensure_ascii=False) for v in case["valid"]]
            f.write(json.dumps({"name": name, "schema": case["schema"], "texts": texts}, ensure_ascii=False) + "\n")
    out = subprocess.run([zen, "grammar", "--tokenizer", str(MODEL), "--batch", f.name],
                         capture_output=True, text=True)
    print("one process, all schemas (`zen grammar --batch`):")
    print("  " + out.stdout.strip().replace("\n", "\n  "))
    if out.stderr.strip():
        print("  " + out.stderr.strip().replace("\n", "\n  "))


def masks_cold(zen):
    compile_ms, mask_lines = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in corpus():
            schema = pathlib.Path(tmp, name + ".schema.json")
            schema.write_text(json.dumps(case["schema"]))
            files = []
            for i, v in enumerate(case["valid"]):
                p = pathlib.Path(tmp, f"{name}.{i}.txt")
                p.write_text(json.dumps(v, ensure_ascii=False))
                files.append(str(p))
            out = subprocess.run([zen, "grammar", "--tokenizer", str(MODEL), "--json-schema", str(schema),
                                  "--check", *files], capture_output=True, text=True).stdout
            m = re.search(r"compile: ([\d.]+) ms", out)
            if m:
                compile_ms.append(float(m.group(1)))
            m = re.search(r"masks: (\d+), avg ([\d.]+) us", out)
            if m:
                mask_lines.append((int(m.group(1)), float(m.group(2))))
    n = sum(c for c, _ in mask_lines)
    avg = sum(c * a for c, a in mask_lines) / max(n, 1)
    print("a fresh process per schema (`zen grammar --check`, nothing shared):")
    print(f"  compile: {len(compile_ms)} schemas, avg {statistics.mean(compile_ms):.1f} ms, "
          f"p50 {statistics.median(compile_ms):.1f} ms, max {max(compile_ms):.1f} ms")
    print(f"  masks: {n}, avg {avg:.1f} us (per-process averages weighted by mask count)")


def e2e(concurrency, waves):
    sys.path.insert(0, str(ROOT / "tests"))
    from zen_server import ZenServer
    cases = [case for _, case in corpus()][:concurrency]
    server = ZenServer("--max-num-seqs", str(concurrency))
    try:
        client = server.client()

        def one(i, constrained):
            """(completion tokens, seconds from the first token to the last) of one request."""
            case = cases[i % len(cases)]
            kw = {}
            if constrained:
                kw["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "s%d" % i, "schema": case["schema"], "strict": True}}
            stream = client.chat.completions.create(
                model=server.model, max_tokens=96, temperature=0.7, seed=i, stream=True,
                stream_options={"include_usage": True},
                messages=[{"role": "user", "content": "Write an example JSON document for this schema: "
                           + json.dumps(case["schema"])[:1500]}], **kw)
            times = []
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    times.append(time.time())
            # The first WINDOW tokens only: while every stream of the wave still runs, so the
            # constrained answers' earlier ends do not lighten the batch.
            times = times[:WINDOW]
            return len(times), (times[-1] - times[0]) if len(times) > 1 else 0.0

        def wave(constrained):
            """The median over the wave's streams of the decode rate over their first WINDOW
            tokens (prefill and queueing excluded)."""
            with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
                results = list(ex.map(lambda i: one(i, constrained), range(concurrency)))
            rates = [(n - 1) / t for n, t in results if n > 1 and t > 0]
            return statistics.median(rates) if rates else 0.0

        wave(True)  # compile every schema once (cached by text), warm the caches
        free, constrained = [], []
        for _ in range(waves):
            free.append(wave(False))
            constrained.append(wave(True))
        print(f"end to end, concurrency {concurrency}, {waves} alternating waves "
              "(median per-stream decode tok/s, first token to last):")
        print("  free:        " + " ".join(f"{x:.2f}" for x in free))
        print("  constrained: " + " ".join(f"{x:.2f}" for x in constrained))
        print(f"  ratio of medians: {statistics.median(constrained) / statistics.median(free):.3f}")
    finally:
        server.proc.terminate()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zen", default=str(ROOT / "build" / "zen"))
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--waves", type=int, default=3)
    a = ap.parse_args()
    masks_warm(a.zen)
    if a.cold:
        masks_cold(a.zen)
    if a.e2e:
        e2e(a.concurrency, a.waves)


if __name__ == "__main__":
    main()

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
--e2e: one server; waves of N concurrent chat requests, each with a corpus schema as
response_format (strict), alternating with waves of the same prompts unconstrained; reports
completion tokens per second of each wave and the ratio of medians.
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
            case = cases[i % len(cases)]
            kw = {}
            if constrained:
                kw["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "s%d" % i, "schema": case["schema"], "strict": True}}
            r = client.chat.completions.create(
                model=server.model, max_tokens=96, temperature=0.7, seed=i,
                messages=[{"role": "user", "content": "Write an example JSON document for this schema: "
                           + json.dumps(case["schema"])[:1500]}], **kw)
            return r.usage.completion_tokens

        def wave(constrained):
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
                tokens = sum(ex.map(lambda i: one(i, constrained), range(concurrency)))
            return tokens / (time.time() - t0)

        wave(True)  # compile every schema once (cached by text), warm the caches
        free, constrained = [], []
        for _ in range(waves):
            free.append(wave(False))
            constrained.append(wave(True))
        print(f"end to end, concurrency {concurrency}, {waves} alternating waves (completion tok/s):")
        print("  free:        " + " ".join(f"{x:.1f}" for x in free))
        print("  constrained: " + " ".join(f"{x:.1f}" for x in constrained))
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

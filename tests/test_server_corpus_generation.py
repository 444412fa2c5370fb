"""Constrained generation on the default model over the JSON Schema corpus: every answer that
finishes parses and validates against its schema (Python `jsonschema`), at temperature 0 and 1.

CI runs every ZEN_CORPUS_STRIDE-th schema (default 8: 30 schemas, 60 generations, 8 at a time);
ZEN_CORPUS_STRIDE=1 runs all 240 (bench/README.md has the last full run). An answer cut by
max_tokens cannot be checked whole: it must still be a prefix the schema's grammar accepts
(`zen grammar --check` walks it), and at most a few per run may be cut."""
import concurrent.futures
import json
import os
import subprocess

import jsonschema
import pytest

from conftest import ROOT, ZEN, DEFAULT_MODEL, need
from zen_server import ZenServer

CORPUS = ROOT / "tests" / "fixtures" / "json_schemas"
STRIDE = int(os.environ.get("ZEN_CORPUS_STRIDE", "8"))
MAX_TOKENS = 384


def cases():
    paths = sorted(CORPUS.glob("[0-9]*.json"))
    return [(p.stem, json.loads(p.read_text())["schema"]) for p in paths[::STRIDE]]


@pytest.fixture(scope="module")
def zen_server():
    need(DEFAULT_MODEL, "the default model")
    server = ZenServer("--max-num-seqs", "8")
    yield server
    server.proc.terminate()
    server.proc.wait(timeout=30)


def generate(server, name, schema, temperature):
    example = json.dumps(schema, ensure_ascii=False)[:2000]
    r = server.client().chat.completions.create(
        model=server.model, max_tokens=MAX_TOKENS, temperature=temperature, seed=11,
        messages=[{"role": "user", "content": "Produce one realistic JSON document for this JSON Schema:\n" + example}],
        response_format={"type": "json_schema", "json_schema": {"name": name[:64], "schema": schema, "strict": True}})
    return r.choices[0].message.content, r.choices[0].finish_reason


def test_corpus_generation_validates(zen_server, tmp_path):
    jobs = [(name, schema, t) for name, schema in cases() for t in (0.0, 1.0)]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda j: (j, generate(zen_server, *j)), jobs))
    failures, cut = [], []
    for (name, schema, t), (content, finish) in results:
        if finish == "stop":
            try:
                jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(json.loads(content))
            except (json.JSONDecodeError, jsonschema.ValidationError) as e:
                failures.append(f"{name} T={t}: {str(e)[:200]}\n  {content[:300]}")
            continue
        # Cut by max_tokens: the text so far must be a prefix of a valid document.
        schema_file, text_file = tmp_path / f"{name}.schema.json", tmp_path / f"{name}.{t}.txt"
        schema_file.write_text(json.dumps(schema))
        text_file.write_text(content)
        out = subprocess.run([str(ZEN), "grammar", "--tokenizer", str(DEFAULT_MODEL), "--json-schema", str(schema_file),
                              "--check", str(text_file)], capture_output=True, text=True).stdout
        cut.append(f"{name} T={t} ({finish})")
        # Only the end may be missing: a rejection before the last byte is a failure.
        for line in out.splitlines():
            if line.startswith(str(text_file)) and "rejected" in line:
                byte = int(line.rsplit("byte ", 1)[1].rstrip(")"))
                if byte < len(content.encode()):
                    failures.append(f"{name} T={t}: cut output rejected at byte {byte}: {content[:300]}")
    assert not failures, f"{len(failures)} of {len(jobs)} outputs invalid:\n" + "\n".join(failures)
    assert len(cut) <= max(2, len(jobs) // 10), f"too many outputs cut by max_tokens {MAX_TOKENS}: {cut}"

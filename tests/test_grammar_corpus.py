"""The JSON Schema corpus (tests/fixtures/json_schemas/) through `zen grammar --check`.

Each NNN_name.json holds a schema with hand-written valid and invalid instances. The instances
are first checked against the `jsonschema` package (tools/check_json_schemas.py), then written
as the engine lays JSON out (json.dumps with ensure_ascii=False: ", " and ": " separators,
properties in schema order, no trailing newline) and walked token by token through the
schema's grammar:

    zen grammar --tokenizer MODEL --json-schema SCHEMA.json --check FILE...

which prints `compile: X ms` (or exits 2 naming the reason), one `FILE: accepted` or
`FILE: rejected at token I (byte B)` line per file, then
`masks: N, avg U us, p50 U us, p99 U us, max U us`, and exits 0 when every file was accepted,
1 otherwise. Every valid instance must be accepted and every invalid one rejected; the schemas
in _unsupported.json must be refused (exit 2) naming their keyword.

ZEN_GRAMMAR_TOKENIZER picks another tokenizer (a .gguf, a model folder or tokenizer.json);
`pytest -s` prints the mask timings over the whole corpus at the end of the session.
"""
import concurrent.futures
import importlib.util
import json
import os
import pathlib
import re
import statistics
import subprocess

import pytest

from conftest import DEFAULT_MODEL, ROOT, ZEN, need

CORPUS = ROOT / "tests" / "fixtures" / "json_schemas"
TOKENIZER = pathlib.Path(os.environ.get("ZEN_GRAMMAR_TOKENIZER", DEFAULT_MODEL))
MIN_SCHEMAS = 220
TIMEOUT = 300  # seconds for one schema's CLI call

_spec = importlib.util.spec_from_file_location("check_json_schemas", ROOT / "tools" / "check_json_schemas.py")
checker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checker)

COMPILE_RE = re.compile(r"^compile: ([0-9.]+) ms\b")
FILE_RE = re.compile(r"^(?P<file>.+): (?:(?P<accepted>accepted)|rejected at token (?P<token>\d+) \(byte (?P<byte>\d+)\))$")
MASKS_RE = re.compile(r"^masks: (\d+), avg ([0-9.]+) us, p50 ([0-9.]+) us, p99 ([0-9.]+) us, max ([0-9.]+) us$")


# --- the corpus itself ----------------------------------------------------------------------

def test_corpus_agrees_with_jsonschema():
    """Valid instances validate and invalid ones do not (jsonschema, formats checked), the
    layout rules hold, no refused keyword sneaks into the main corpus."""
    pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -r tools/requirements.txt)")
    problems = checker.check_corpus(CORPUS, min_schemas=MIN_SCHEMAS)
    assert not problems, f"{len(problems)} problem(s) in {CORPUS}:\n" + "\n".join(problems)


# --- the CLI --------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def grammar_cli():
    """Skips unless `zen grammar` exists and the tokenizer is there."""
    if not ZEN.exists():
        pytest.skip(f"no zen binary at {ZEN}")
    try:
        r = subprocess.run([str(ZEN), "grammar", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"`zen grammar --help` did not run: {e}")
    if r.returncode != 0:
        pytest.skip(f"`zen grammar` is not available yet (`zen grammar --help` exited {r.returncode}: "
                    f"{(r.stderr or r.stdout).strip()[:200]})")
    need(TOKENIZER, "the tokenizer for `zen grammar` (the default model)")
    return ZEN


@pytest.fixture(scope="session")
def mask_stats():
    """Per-schema CLI timings, summarised when the session ends (shown by `pytest -s`)."""
    stats = []
    yield stats
    if stats:
        print("\n" + _summary(stats))


def _summary(stats):
    masks = [s for s in stats if s.get("masks")]
    compiles = [s for s in stats if s.get("compile_ms") is not None]
    lines = [f"grammar corpus timing over {len(stats)} schemas ({TOKENIZER.name}):"]
    if compiles:
        ms = [s["compile_ms"] for s in compiles]
        worst = max(compiles, key=lambda s: s["compile_ms"])
        lines.append(f"  compile: total {sum(ms):.1f} ms, median {statistics.median(ms):.2f} ms, "
                     f"max {worst['compile_ms']:.2f} ms ({worst['name']})")
    if masks:
        n = sum(s["masks"][0] for s in masks)
        avg = sum(s["masks"][0] * s["masks"][1] for s in masks) / n if n else 0.0
        p50s = [s["masks"][2] for s in masks]
        p99s = [s["masks"][3] for s in masks]
        worst_p99 = max(masks, key=lambda s: s["masks"][3])
        worst_max = max(masks, key=lambda s: s["masks"][4])
        lines.append(f"  masks: {n} in all, avg {avg:.1f} us (weighted by count), per-schema p50: median "
                     f"{statistics.median(p50s):.1f} us; per-schema p99: median {statistics.median(p99s):.1f} us, "
                     f"worst {worst_p99['masks'][3]:.1f} us ({worst_p99['name']}); max {worst_max['masks'][4]:.1f} us "
                     f"({worst_max['name']})")
        lines.append("  slowest p99: " + ", ".join(f"{s['name']} {s['masks'][3]:.0f} us"
                                                   for s in sorted(masks, key=lambda s: -s["masks"][3])[:5]))
    return "\n".join(lines)


def _context(data, byte, width=40):
    """The text around a byte offset, with the offset marked."""
    before = data[max(0, byte - width):byte].decode("utf-8", "replace")
    after = data[byte:byte + width].decode("utf-8", "replace")
    return f"...{before}\u2592{after}..."


def _short(inst, n=160):
    s = json.dumps(inst, ensure_ascii=False)
    return s if len(s) <= n else s[:n - 3] + "..."


def run_schema(path, doc, workdir):
    """Runs one schema's valid and invalid instances through one CLI call. Returns
    (failures, stats)."""
    name = path.stem
    workdir.mkdir(parents=True)
    (workdir / "schema.json").write_text(json.dumps(doc["schema"], ensure_ascii=False), encoding="utf-8")
    files = {}  # file name -> (kind, index, instance, bytes)
    for kind in ("valid", "invalid"):
        for i, inst in enumerate(doc[kind]):
            data = json.dumps(inst, ensure_ascii=False).encode("utf-8")
            fname = f"{kind}_{i}.json"
            (workdir / fname).write_bytes(data)
            files[fname] = (kind, i, inst, data)
    cmd = [str(ZEN), "grammar", "--tokenizer", str(TOKENIZER), "--json-schema", "schema.json", "--check", *files]
    stats = {"name": name, "compile_ms": None, "masks": None}
    try:
        r = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return [f"{name}: `zen grammar --check` ran past {TIMEOUT} s"], stats
    except OSError as e:
        return [f"{name}: could not run {ZEN}: {e}"], stats
    out = r.stdout + r.stderr
    if r.returncode == 2:
        reason = " | ".join(l for l in out.strip().splitlines() if l.strip())[:300]
        return [f"{name}: schema refused (exit 2): {reason} ({len(files)} instances unchecked)"], stats
    if r.returncode not in (0, 1):
        return [f"{name}: exit {r.returncode}:\n{out.strip()[-2000:]}"], stats

    failures, seen = [], {}
    for line in out.splitlines():
        line = line.rstrip()
        if m := COMPILE_RE.match(line):
            stats["compile_ms"] = float(m.group(1))
        elif m := MASKS_RE.match(line):
            stats["masks"] = (int(m.group(1)), *map(float, m.group(2, 3, 4, 5)))
        elif (m := FILE_RE.match(line)) and m.group("file") in files:
            seen[m.group("file")] = None if m.group("accepted") else (int(m.group("token")), int(m.group("byte")))
    if stats["compile_ms"] is None:
        failures.append(f"{name}: no `compile: X ms` line in the output")
    if stats["masks"] is None:
        failures.append(f"{name}: no `masks: N, avg ..., p50 ..., p99 ..., max ...` line in the output")
    for fname, (kind, i, inst, data) in files.items():
        label = f"{name} {kind}[{i}]"
        if fname not in seen:
            failures.append(f"{label}: no `{fname}: accepted|rejected ...` line in the output")
            continue
        verdict = seen[fname]
        if verdict is not None and not 0 <= verdict[1] <= len(data):
            failures.append(f"{label}: rejected at byte {verdict[1]}, past the end of its {len(data)} bytes")
        elif kind == "valid" and verdict is not None:
            token, byte = verdict
            failures.append(f"{label} rejected at token {token} (byte {byte}): {_context(data, byte)}")
        elif kind == "invalid" and verdict is None:
            failures.append(f"{label} accepted: {_short(inst)}")
    all_accepted = len(seen) == len(files) and all(v is None for v in seen.values())
    if (r.returncode == 0) != all_accepted:
        failures.append(f"{name}: exit {r.returncode} but {'every' if all_accepted else 'not every'} file was accepted")
    return failures, stats


def test_corpus_through_grammar_cli(grammar_cli, mask_stats, tmp_path):
    """Every valid instance accepted, every invalid one rejected, one CLI call per schema."""
    corpus = checker.load_corpus(CORPUS)
    assert len(corpus) >= MIN_SCHEMAS, f"only {len(corpus)} schemas in {CORPUS}"
    failures = []
    workers = max(1, min(8, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        jobs = [pool.submit(run_schema, path, doc, tmp_path / path.stem) for path, doc in corpus]
        for job in jobs:
            f, stats = job.result()
            failures += f
            mask_stats.append(stats)
    n_valid = sum(len(d["valid"]) for _, d in corpus)
    n_invalid = sum(len(d["invalid"]) for _, d in corpus)
    assert not failures, (f"{len(failures)} failure(s) over {len(corpus)} schemas "
                          f"({n_valid} valid, {n_invalid} invalid instances):\n" + "\n".join(failures))


def _names_keyword(text, keyword):
    """Whether the output names the keyword: quoted ('not', "not", `not`), as a JSON pointer
    segment (/not), or after the word keyword. A bare `not` or `if` in prose does not count."""
    k = re.escape(keyword)
    return bool(re.search(rf"['\"`]{k}['\"`]|/{k}(?![\w$])|\bkeyword:?\s+['\"`]?{k}(?![\w$])", text))


def test_unsupported_keywords_are_refused(grammar_cli, tmp_path):
    """Strict mode refuses what it cannot enforce: exit 2, naming the keyword."""
    entries = checker.load_unsupported(CORPUS)
    failures = []
    for e in entries:
        d = tmp_path / e["name"]
        d.mkdir()
        (d / "schema.json").write_text(json.dumps(e["schema"], ensure_ascii=False), encoding="utf-8")
        (d / "instance.json").write_text("{}", encoding="utf-8")
        try:
            r = subprocess.run([str(ZEN), "grammar", "--tokenizer", str(TOKENIZER), "--json-schema", "schema.json",
                                "--check", "instance.json"], cwd=d, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            failures.append(f"{e['name']}: ran past {TIMEOUT} s")
            continue
        except OSError as err:
            failures.append(f"{e['name']}: could not run {ZEN}: {err}")
            continue
        out = (r.stdout + r.stderr).strip()
        if r.returncode != 2:
            failures.append(f"{e['name']} ({e['keyword']}): exit {r.returncode}, expected 2: {out[:300]}")
        elif not _names_keyword(out, e["keyword"]):
            failures.append(f"{e['name']}: refused without naming {e['keyword']!r}: {out[:300]}")
    assert not failures, f"{len(failures)} of {len(entries)} unsupported schemas:\n" + "\n".join(failures)

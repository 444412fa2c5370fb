#!/usr/bin/env python3
"""Speculative-decoding benchmark of `zen serve`: speculative configs x workloads x concurrency.

Measured the way the Qwen3.6 NVFP4 model card reports it: for every speculative config (and a
baseline without one) the output throughput of each workload at each concurrency level, its
speedup over the baseline, and how many drafted tokens the target model accepted.

Configs (--configs; each starts its own `zen serve`, one server at a time):
  none                          no --speculative-config (the baseline the speedups divide by)
  ngram:fixed / ngram:adaptive  {"method": "ngram", "num_speculative_tokens": K,
                                 "prompt_lookup_min": MIN, "prompt_lookup_max": MAX, "adaptive": ...}
  suffix:fixed / suffix:adaptive   {"method": "suffix", "num_speculative_tokens": K, "adaptive": ...}
  draft:fixed / draft:adaptive  {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": K, ...}
  mtp:fixed / mtp:adaptive      {"method": "mtp", "num_speculative_tokens": K, ...}
  LABEL=JSON                    any other --speculative-config, e.g. 'ng4={"method":"ngram",...}'
K is --k (default 8; the upper bound when adaptive), MIN / MAX are --lookup-min / --lookup-max.

Workloads (--workloads; bench/prompts/<name>.jsonl, written by bench/make_spec_prompts.py):
  prose  "Write a short story about ...", max_tokens 256 (little to copy: drafting's worst case)
  code   "Write a Python module implementing ...", max_tokens 256
  edit   rename a function in a ~800-token module and return it whole (nearly all copied: the
         best case for n-gram / suffix drafting), max_tokens ~1.1x the module

A cell is (config, workload, concurrency, repeat). Each cell sends max(concurrency,
--requests-per-cell) requests (default 2 x concurrency) through `concurrency` threads, each with
its own `openai` client, all streamed with stream_options.include_usage. The cell's prompts come
from the pack, consecutive cells taking consecutive prompts from a seeded start (no prompt recurs
in a server's life until the pack runs out), the same for every config, so every
config gets the same requests. Within one server the cells run in a seeded shuffled order (the
same order for every config of a repeat); repeats rotate which config goes first, and restart
the servers. Every server gets one unmeasured warm-up request. The servers run with
--no-prefix-cache unless --prefix-cache: a pack has 72-96 prompts, so prompts repeat across cells
and inside cells of high concurrency, and cache hits would make prefill time depend on the order.

Per cell (results.json holds every cell and every request):
  output tok/s     sum of usage.completion_tokens / the cell's wall time (first request sent to
                   last response done); SSE chunks are never counted
  speedup          the config's tok/s / the baseline's, same workload and concurrency (medians
                   over repeats)
  per-stream tok/s min / p05 / p50 / p95 / max of completion_tokens / (end - first token)
  TTFT p50         request sent to first content token
  achieved conc.   time-average of requests in flight (client side), and the mean of the
                   server's zen_num_requests_running sampled every 0.5 s
  acceptance       from /metrics counter deltas over the cell: zen_spec_decode_num_drafts_total,
                   _num_draft_tokens_total, _num_accepted_tokens_total and
                   _num_accepted_tokens_per_pos_total{position="i"} (absent counters count 0):
                   acceptance rate = accepted / draft tokens, mean acceptance length =
                   1 + accepted / drafts (tokens per target forward pass), per-position rate =
                   accepted at i / drafts
  errors           requests that raised (HTTP error, dropped stream, no usage chunk)
  degraded         streams below half the cell's median per-stream rate, plus errors
  same as none     at temperature 0, requests whose output text equals the baseline's for the
                   same request (speculative decoding should not change greedy output; batch
                   composition can, so read a small mismatch rate with care)

Output, in --out (default bench/results/spec-<timestamp>):
  results.json            settings, every cell (rewritten after each), server failures
  report.md               throughput / speedup / acceptance table (rows workload x concurrency,
                          columns configs) and a detail table per cell
  speedup_<workload>.png  speedup over none against concurrency, a line per config (when
                          none and another config ran)
  throughput_<workload>.png  output tok/s against concurrency, a line per config (the PNGs
                          need matplotlib; without it they are skipped with a message)
  server-<config>-r<N>.log  each server's output

  .venv/bin/python bench/spec_bench.py --quick          # a few minutes
  .venv/bin/python bench/spec_bench.py --configs none ngram:fixed ngram:adaptive suffix:fixed \\
      suffix:adaptive draft:fixed draft:adaptive --repeats 3

--quick: all three workloads, concurrency 1 and 4, max_tokens capped at 64, configs none ngram:adaptive suffix:adaptive; each of these only where not given explicitly.
Exit status 1 when a request failed or a server did not start.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import queue
import random
import re
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "coder-1.5b", "model.gguf")
FALLBACK_MODEL = os.path.join(ROOT, "models", "default", "model.gguf")
WORKLOADS = ["prose", "code", "edit"]
METHODS = {"ngram": "ngram", "suffix": "suffix", "draft": "draft_model", "draft_model": "draft_model", "mtp": "mtp"}
SPEC_COUNTERS = {
    "drafts": "zen_spec_decode_num_drafts_total",
    "draft_tokens": "zen_spec_decode_num_draft_tokens_total",
    "accepted_tokens": "zen_spec_decode_num_accepted_tokens_total",
}
PER_POSITION = "zen_spec_decode_num_accepted_tokens_per_pos_total"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ metrics

SAMPLE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_prometheus(text):
    """[(name, {label: value}, float)] of a Prometheus text exposition; comments skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(LABEL_RE.findall(m.group(2) or "")), value))
    return out


def metric_sum(samples, name, **labels):
    """Sum of the samples of `name` whose labels include `labels` (other labels, e.g. model,
    are summed over); 0 when there are none."""
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items()))


def spec_counters(samples):
    c = {key: metric_sum(samples, name) for key, name in SPEC_COUNTERS.items()}
    per_pos = {}
    for n, l, v in samples:
        if n == PER_POSITION and "position" in l:
            per_pos[int(l["position"])] = per_pos.get(int(l["position"]), 0.0) + v
    c["per_position"] = per_pos
    c["generation_tokens"] = metric_sum(samples, "zen_generation_tokens_total")
    return c


def spec_delta(before, after):
    d = {key: after[key] - before[key] for key in (*SPEC_COUNTERS, "generation_tokens")}
    positions = sorted(set(before["per_position"]) | set(after["per_position"]))
    d["accepted_per_position"] = [after["per_position"].get(i, 0.0) - before["per_position"].get(i, 0.0)
                                  for i in range(max(positions) + 1)] if positions else []
    drafts, drafted, accepted = d["drafts"], d["draft_tokens"], d["accepted_tokens"]
    d["acceptance_rate"] = accepted / drafted if drafted else None
    d["mean_acceptance_length"] = 1 + accepted / drafts if drafts else None
    d["acceptance_rate_per_position"] = [a / drafts for a in d["accepted_per_position"]] if drafts else []
    return d


def fetch(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


# ------------------------------------------------------------------------------------- server

def spec_config(name, args):
    """(label, the --speculative-config dict or None)."""
    if "=" in name:
        label, js = name.split("=", 1)
        return label, json.loads(js)
    if name == "none":
        return name, None
    method, _, mode = name.partition(":")
    if method not in METHODS or mode not in ("fixed", "adaptive"):
        raise SystemExit(f"unknown config {name!r}: use none, {{ngram,suffix,draft,mtp}}:{{fixed,adaptive}} or LABEL=JSON")
    cfg = {"method": METHODS[method], "num_speculative_tokens": args.k, "adaptive": mode == "adaptive"}
    if cfg["method"] == "ngram":
        cfg["prompt_lookup_min"], cfg["prompt_lookup_max"] = args.lookup_min, args.lookup_max
    if cfg["method"] == "draft_model":
        cfg["model"] = args.draft_model
    return name, cfg


class ServerError(Exception):
    pass


class Server:
    """`zen serve` on 127.0.0.1 and a free port (--port 0; the URL is read from its
    'Chat page:' line), its output copied to a log file."""

    def __init__(self, args, spec, log_path):
        cmd = [args.zen, "serve", "--host", "127.0.0.1", "--port", "0", "--model", args.model,
               "--context-window", str(args.context_window), "--max-num-seqs", str(args.max_num_seqs)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        if spec is not None:
            cmd += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
            if args.spec_trace:  # next to the log: one line per verification and per step
                cmd += ["--spec-trace", os.path.splitext(log_path)[0] + ".trace.jsonl"]
        if not args.prefix_cache:
            cmd.append("--no-prefix-cache")
        cmd += shlex.split(args.server_args)
        self.cmd = cmd
        self.url = None
        self.tail = deque(maxlen=20)
        self.head = []
        self.ready = threading.Event()
        self.log = open(log_path, "w")
        self.log.write("$ " + shlex.join(cmd) + "\n")
        self.log.flush()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        threading.Thread(target=self._read, daemon=True).start()
        started = time.time()
        if not self.ready.wait(args.startup_timeout) or self.url is None:
            self.stop()
            errors = [l.strip() for l in self.head if re.search(r"error|unknown|invalid|cannot|failed", l, re.I)]
            raise ServerError(f"zen serve did not start (exit status {self.proc.returncode}): "
                              + ("; ".join(errors[:3]) if errors else "see " + log_path)
                              + "\n  output (tail):\n  " + "  ".join(self.tail))
        while True:  # the listener is up when the line is printed; make sure the API answers
            try:
                self.model_name = json.loads(fetch(self.url + "/v1/models"))["data"][0]["id"]
                break
            except OSError:
                if time.time() - started > args.startup_timeout:
                    self.stop()
                    raise ServerError("zen serve printed its URL but /v1/models did not answer")
                time.sleep(0.2)

    def _read(self):
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            self.tail.append(line)
            if len(self.head) < 40:
                self.head.append(line)
            m = re.match(r"Chat page: (http://[\d.]+:\d+)/", line)
            if m and self.url is None:
                self.url = m.group(1)
                self.ready.set()
        self.ready.set()

    def metrics(self):
        return parse_prometheus(fetch(self.url + "/metrics"))

    def wait_idle(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.metrics()
            if metric_sum(s, "zen_num_requests_running") == 0 and metric_sum(s, "zen_num_requests_waiting") == 0:
                return True
            time.sleep(0.2)
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# --------------------------------------------------------------------------------------- cell

def percentile(xs, q):
    """Linear interpolation between closest ranks (numpy's default); None for no data."""
    if not xs:
        return None
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def one_request(client, model_name, prompt, max_tokens, args):
    rec = {"id": prompt["id"], "max_tokens": max_tokens, "t_start": time.perf_counter(), "t_first": None,
           "completion_tokens": None, "prompt_tokens": None, "finish_reason": None, "error": None}
    text = []
    try:
        extra = {"ignore_eos": True} if args.ignore_eos else None
        stream = client.chat.completions.create(
            model=model_name, messages=prompt["messages"], max_tokens=max_tokens, temperature=args.temperature,
            stream=True, stream_options={"include_usage": True}, extra_body=extra)
        for chunk in stream:
            if chunk.usage is not None:
                rec["completion_tokens"] = chunk.usage.completion_tokens
                rec["prompt_tokens"] = chunk.usage.prompt_tokens
            for choice in chunk.choices:
                delta = choice.delta
                piece = (delta.content or "") if delta is not None else ""
                reasoning = getattr(delta, "reasoning_content", None) if delta is not None else None
                if rec["t_first"] is None and (piece or reasoning or (delta is not None and delta.tool_calls)):
                    rec["t_first"] = time.perf_counter()
                text.append(piece)
                if choice.finish_reason:
                    rec["finish_reason"] = choice.finish_reason
        if rec["completion_tokens"] is None:
            rec["error"] = "the stream ended without a usage chunk"
    except Exception as e:  # HTTP errors, dropped connections, timeouts
        rec["error"] = f"{type(e).__name__}: {e}"[:500]
    rec["t_end"] = time.perf_counter()
    rec["text_sha1"] = hashlib.sha1("".join(text).encode()).hexdigest()
    return rec


def cell_starts(packs, workloads, levels, repeats, requests_per_cell, seed):
    """Where each (workload, level, repeat) cell starts in its pack: consecutive cells take
    consecutive prompts (from a seeded start), so no prompt recurs within a server's life until
    the pack runs out. Recurring prompts would flatter suffix decoding, whose global cache
    remembers earlier answers. The warm-up request uses the pack's last prompt."""
    starts = {}
    for w in workloads:
        usable = max(1, len(packs[w]) - 1)
        at = random.Random(f"{seed}-{w}").randrange(usable)
        for rep in range(repeats):
            for level in levels:
                starts[(w, level, rep)] = at
                at = (at + max(level, requests_per_cell or 2 * level)) % usable
    return starts


def cell_prompts(pack, start, n):
    usable = max(1, len(pack) - 1)
    return [pack[(start + i) % usable] for i in range(n)]


def run_cell(server, prompts, concurrency, args):
    import openai
    n = len(prompts)
    work = queue.Queue()
    for i in range(n):
        work.put(i)
    records = [None] * n
    barrier = threading.Barrier(concurrency + 1)

    def worker():
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="zen-bench", max_retries=0,
                               timeout=args.request_timeout)
        barrier.wait()
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                break
            p = prompts[i]
            mt = min(p["max_tokens"], args.max_tokens) if args.max_tokens else p["max_tokens"]
            records[i] = one_request(client, server.model_name, p, mt, args)
        client.close()

    running = []
    done = threading.Event()

    def sampler():
        while not done.wait(0.5):
            try:
                running.append(metric_sum(server.metrics(), "zen_num_requests_running"))
            except OSError:
                pass

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    before = spec_counters(server.metrics())
    barrier.wait()
    t0 = time.perf_counter()
    sampler_thread = threading.Thread(target=sampler, daemon=True)
    sampler_thread.start()
    for t in threads:
        t.join()
    done.set()
    sampler_thread.join()
    after = spec_counters(server.metrics())

    wall = max(r["t_end"] for r in records) - t0
    ok = [r for r in records if r["error"] is None]
    for r in records:
        r["ttft_s"] = r["t_first"] - r["t_start"] if r["t_first"] is not None else None
        span = r["t_end"] - r["t_first"] if r["t_first"] is not None else None
        r["stream_tok_s"] = r["completion_tokens"] / span if (r["error"] is None and span and span > 0) else None
        r["latency_s"] = r["t_end"] - r["t_start"]
    rates = [r["stream_tok_s"] for r in ok if r["stream_tok_s"] is not None]
    med = statistics.median(rates) if rates else None
    degraded = sum(1 for r in records if r["error"] is not None
                   or (med and r["stream_tok_s"] is not None and r["stream_tok_s"] < 0.5 * med))
    tokens = sum(r["completion_tokens"] for r in ok)
    ttfts = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    for r in records:  # times relative to the cell's start, for results.json
        for key in ("t_start", "t_first", "t_end"):
            if r[key] is not None:
                r[key] = round(r[key] - t0, 4)
    return {
        "requests": n, "ok": len(ok), "errors": n - len(ok), "degraded": degraded,
        "error_messages": sorted({r["error"] for r in records if r["error"]})[:5],
        "wall_s": wall, "completion_tokens": tokens, "output_tok_s": tokens / wall if wall > 0 else None,
        "stream_tok_s": {"min": min(rates) if rates else None, "p05": percentile(rates, 0.05),
                         "p50": percentile(rates, 0.5), "p95": percentile(rates, 0.95),
                         "max": max(rates) if rates else None},
        "ttft_p50_s": statistics.median(ttfts) if ttfts else None,
        "achieved_concurrency": sum(r["latency_s"] for r in records) / wall if wall > 0 else None,
        "server_running_mean": statistics.fmean(running) if running else None,
        "spec": spec_delta(before, after),
        "records": records,
    }


# ------------------------------------------------------------------------------------- report

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(cells, configs, workloads, levels):
    """{(config, workload, level): medians over repeats}."""
    out = {}
    for c in configs:
        for w in workloads:
            for lv in levels:
                group = [x for x in cells if (x["config"], x["workload"], x["concurrency"]) == (c, w, lv)]
                if not group:
                    continue
                out[(c, w, lv)] = {
                    "output_tok_s": med([x["output_tok_s"] for x in group]),
                    "acceptance_rate": med([x["spec"]["acceptance_rate"] for x in group]),
                    "mean_acceptance_length": med([x["spec"]["mean_acceptance_length"] for x in group]),
                    "errors": sum(x["errors"] for x in group),
                    "degraded": sum(x["degraded"] for x in group),
                    "repeats": len(group),
                }
    return out


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def speedup(summary, c, w, lv, baseline="none"):
    s, b = summary.get((c, w, lv)), summary.get((baseline, w, lv))
    if not s or not b or not s["output_tok_s"] or not b["output_tok_s"]:
        return None
    return s["output_tok_s"] / b["output_tok_s"]


def markdown(results, configs, workloads, levels):
    cells = results["cells"]
    summary = summarize(cells, configs, workloads, levels)
    meta = results["meta"]
    lines = [f"# Speculative decoding: {os.path.basename(os.path.dirname(meta['model']))}/{os.path.basename(meta['model'])}", "",
             f"{meta['started']}, {meta['host']}, zen {meta['git']}, {meta['cpu_count']} CPUs; "
             f"temperature {meta['temperature']}, repeats {meta['repeats']}, requests per cell max(concurrency, "
             f"{meta['requests_per_cell'] or '2 x concurrency'}), max_tokens cap {meta['max_tokens_cap'] or 'none'}, "
             f"prompts per workload {meta['prompts_per_workload'] or 'all'}, prefix cache "
             f"{'on' if meta['prefix_cache'] else 'off'}.", ""]
    lines += ["Configs:", ""]
    for c in configs:
        lines.append(f"- `{c}`: " + (f"`--speculative-config '{json.dumps(meta['configs'][c], separators=(',', ':'))}'`"
                                     if meta["configs"][c] else "no speculative decoding"))
    lines += ["", "Output tok/s (all streams; median over repeats), speedup over `none`, and for speculative "
              "configs the acceptance rate (accepted / drafted tokens) and mean acceptance length "
              "(1 + accepted / drafts). `[N err]`: failed requests.", ""]
    lines.append("| workload | conc | " + " | ".join(configs) + " |")
    lines.append("|---|---:|" + "---:|" * len(configs))
    for w in workloads:
        for lv in levels:
            row = [w, str(lv)]
            for c in configs:
                s = summary.get((c, w, lv))
                if not s:
                    row.append("n/a")
                    continue
                cell = fmt(s["output_tok_s"])
                extra = []
                sp = speedup(summary, c, w, lv)
                if c != "none" and sp is not None:
                    extra.append(f"{sp:.2f}x")
                if s["acceptance_rate"] is not None:
                    extra.append(f"acc {100 * s['acceptance_rate']:.0f}%, len {s['mean_acceptance_length']:.2f}")
                if extra:
                    cell += " (" + ", ".join(extra) + ")"
                if s["errors"]:
                    cell += f" [{s['errors']} err]"
                row.append(cell)
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Every cell: per-stream tok/s = completion tokens / (end - first token); TTFT p50; achieved "
              "concurrency = client-side mean requests in flight (server: mean zen_num_requests_running); "
              "degraded = streams under half the cell's median rate, plus errors; same = outputs equal to "
              "`none`'s for the same request (temperature 0 only).", "",
              "| config | workload | conc | rep | req | tok/s | stream min / p05 / p50 / p95 / max | TTFT p50 s | "
              "conc client / server | acc % | len | per-position acc % | err | degraded | same |",
              "|---|---|---:|---:|---:|---:|---|---:|---|---:|---:|---|---:|---:|---:|"]
    key = {c: i for i, c in enumerate(configs)}
    for x in sorted(cells, key=lambda x: (workloads.index(x["workload"]), x["concurrency"], key[x["config"]], x["repeat"])):
        s, sp = x["stream_tok_s"], x["spec"]
        pos = " ".join(f"{100 * a:.0f}" for a in sp["acceptance_rate_per_position"]) or "-"
        same = "-" if x.get("same_as_none") is None else f"{x['same_as_none']}/{x['ok']}"
        lines.append(
            f"| {x['config']} | {x['workload']} | {x['concurrency']} | {x['repeat']} | {x['requests']} | "
            f"{fmt(x['output_tok_s'])} | {' / '.join(fmt(s[k]) for k in ('min', 'p05', 'p50', 'p95', 'max'))} | "
            f"{fmt(x['ttft_p50_s'], '.2f')} | {fmt(x['achieved_concurrency'], '.1f')} / {fmt(x['server_running_mean'], '.1f')} | "
            f"{fmt(None if sp['acceptance_rate'] is None else 100 * sp['acceptance_rate'], '.0f')} | "
            f"{fmt(sp['mean_acceptance_length'], '.2f')} | {pos} | {x['errors']} | {x['degraded']} | {same} |")
    if results["server_failures"]:
        lines += ["", "Servers that did not start:", ""]
        for f in results["server_failures"]:
            lines.append(f"- `{f['config']}` (repeat {f['repeat']}): {f['error'].splitlines()[0]}")
    return "\n".join(lines) + "\n", summary


def plots(out, summary, configs, workloads, levels, model):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("spec_bench: matplotlib is not installed; no PNG plots (.venv/bin/pip install matplotlib)")
        return []
    written = []
    spec_configs = [c for c in configs if c != "none"]
    kinds = ["throughput"] + (["speedup"] if "none" in configs and spec_configs else [])
    for kind in kinds:
        for w in workloads:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for c in (spec_configs if kind == "speedup" else configs):
                pts = [(lv, speedup(summary, c, w, lv) if kind == "speedup"
                        else (summary.get((c, w, lv)) or {}).get("output_tok_s")) for lv in levels]
                pts = [(lv, y) for lv, y in pts if y is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=c)
            if kind == "speedup":
                ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="none")
            else:
                ax.set_ylim(bottom=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks(levels)
            ax.set_xticklabels([str(lv) for lv in levels])
            ax.set_xlim(levels[0] / 1.3, levels[-1] * 1.3)
            ax.set_xlabel("concurrency")
            ax.set_ylabel("speedup over none (output tok/s)" if kind == "speedup" else "output tok/s (all streams)")
            ax.set_title(f"{w}: {os.path.basename(os.path.dirname(model))}, "
                         f"{'speedup over none' if kind == 'speedup' else 'output throughput'}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            path = os.path.join(out, f"{kind}_{w}.png")
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written


# --------------------------------------------------------------------------------------- main

def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def git_describe():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "") if head else "unknown"
    except OSError:
        return "unknown"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few minutes: see above")
    ap.add_argument("--configs", nargs="+", help="configs to run (default: none ngram:fixed ngram:adaptive suffix:fixed "
                    "suffix:adaptive draft:fixed draft:adaptive; --quick: none ngram:adaptive suffix:adaptive)")
    ap.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=WORKLOADS, help="default: all three")
    ap.add_argument("--levels", help="concurrency levels, comma-separated (default 1,2,4,8,16,32,64; --quick: 1,4)")
    ap.add_argument("--repeats", type=int, default=1, help="repeats of every cell (default 1)")
    ap.add_argument("--requests-per-cell", type=int,
                    help="requests per cell, at least the concurrency (default 2 x concurrency)")
    ap.add_argument("--prompts-per-workload", type=int,
                    help="use only the first N prompts of each pack (default all)")
    ap.add_argument("--max-tokens", type=int, help="cap every request's max_tokens (default: the pack's; --quick: 64)")
    ap.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    ap.add_argument("--ignore-eos", action="store_true", help="generate max_tokens every time (vLLM's ignore_eos)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the cell order and the prompt offsets (default 0)")
    ap.add_argument("--model", help=f"target model (default {os.path.relpath(DEFAULT_MODEL, ROOT)}, else "
                    f"{os.path.relpath(FALLBACK_MODEL, ROOT)} with a message)")
    ap.add_argument("--draft-model", default=FALLBACK_MODEL,
                    help=f"draft model of draft:* configs (default {os.path.relpath(FALLBACK_MODEL, ROOT)})")
    ap.add_argument("--k", type=int, default=8, help="num_speculative_tokens (default 8; the upper bound when adaptive)")
    ap.add_argument("--lookup-min", type=int, default=2, help="prompt_lookup_min of ngram configs (default 2)")
    ap.add_argument("--lookup-max", type=int, default=5, help="prompt_lookup_max of ngram configs (default 5)")
    ap.add_argument("--zen", default=os.path.join(ROOT, "build", "zen"), help="the zen binary (default build/zen)")
    ap.add_argument("--threads", type=int, help="--threads of the server (default: zen's, all cores)")
    ap.add_argument("--context-window", type=int, default=4096, help="--context-window of the server (default 4096)")
    ap.add_argument("--max-num-seqs", type=int, help="--max-num-seqs of the server (default: the highest level)")
    ap.add_argument("--prefix-cache", action="store_true",
                    help="keep the server's prefix cache (default off: prompts repeat across cells and within "
                    "big cells, and cache hits would make a cell's prefill depend on what ran before)")
    ap.add_argument("--server-args", default="", help="extra server flags, e.g. '--kv-memory 8G'")
    ap.add_argument("--spec-trace", action="store_true",
                    help="speculative servers write --spec-trace to server-<config>-r<repeat>.trace.jsonl in the "
                    "output folder (a line per verification and per step: the controller's cost model against "
                    "each step's time); --server-args would pass it to `none` too, which refuses it")
    ap.add_argument("--prompts-dir", default=os.path.join(ROOT, "bench", "prompts"), help="default bench/prompts")
    ap.add_argument("--out", help="output folder (default bench/results/spec-<timestamp>)")
    ap.add_argument("--request-timeout", type=float, default=900, help="seconds per request (default 900)")
    ap.add_argument("--startup-timeout", type=float, default=300, help="seconds for a server to start (default 300)")
    args = ap.parse_args()

    if args.configs is None:
        args.configs = (["none", "ngram:adaptive", "suffix:adaptive"] if args.quick else
                        ["none", "ngram:fixed", "ngram:adaptive", "suffix:fixed", "suffix:adaptive", "draft:fixed", "draft:adaptive"])
    if args.levels is None:
        args.levels = "1,4" if args.quick else "1,2,4,8,16,32,64"
    try:
        args.levels = sorted({int(x) for x in args.levels.split(",") if x.strip()})
    except ValueError:
        ap.error("--levels: comma-separated integers, e.g. 1,2,4")
    if not args.levels or min(args.levels) < 1:
        ap.error("--levels: positive integers")
    if args.quick:
        args.max_tokens = args.max_tokens or 64
    if args.model is None:
        args.model = DEFAULT_MODEL
        if not os.path.exists(DEFAULT_MODEL):
            log(f"spec_bench: {os.path.relpath(DEFAULT_MODEL, ROOT)} is not installed (bash tools/install_coder_1_5b.sh); "
                f"using {os.path.relpath(FALLBACK_MODEL, ROOT)}")
            args.model = FALLBACK_MODEL
    args.model = os.path.abspath(args.model)
    args.draft_model = os.path.abspath(args.draft_model)
    if not os.path.exists(args.model):
        ap.error(f"no model at {args.model}")
    if not os.access(args.zen, os.X_OK):
        ap.error(f"no zen binary at {args.zen} (ninja -C build zen)")
    args.max_num_seqs = args.max_num_seqs or max(args.levels)
    return args


def main():
    args = parse_args()
    try:
        import openai  # noqa: F401
    except ImportError:
        sys.exit("spec_bench: needs the openai client (.venv/bin/pip install openai)")
    configs = [spec_config(name, args) for name in args.configs]
    labels = [c[0] for c in configs]
    if len(set(labels)) != len(labels):
        sys.exit("spec_bench: config labels repeat")
    if any(cfg and cfg["method"] == "draft_model" for _, cfg in configs):
        if not os.path.exists(args.draft_model):
            sys.exit(f"spec_bench: no draft model at {args.draft_model}")
        if os.path.samefile(args.draft_model, args.model):
            log("spec_bench: note: the draft model is the target model itself")
    packs = {}
    for w in args.workloads:
        path = os.path.join(args.prompts_dir, f"{w}.jsonl")
        if not os.path.exists(path):
            sys.exit(f"spec_bench: no {path} (python3 bench/make_spec_prompts.py)")
        with open(path) as f:
            packs[w] = [json.loads(line) for line in f if line.strip()]
        if args.prompts_per_workload:
            packs[w] = packs[w][: args.prompts_per_workload]
    out = args.out or os.path.join(ROOT, "bench", "results", "spec-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)

    results = {
        "meta": {
            "started": datetime.datetime.now().isoformat(timespec="seconds"), "host": socket.gethostname(),
            "cpu_count": os.cpu_count(), "git": git_describe(), "zen": args.zen, "model": args.model,
            "configs": dict(configs), "workloads": args.workloads, "levels": args.levels, "repeats": args.repeats,
            "requests_per_cell": args.requests_per_cell, "max_tokens_cap": args.max_tokens,
            "prompts_per_workload": args.prompts_per_workload, "temperature": args.temperature,
            "ignore_eos": args.ignore_eos, "seed": args.seed, "context_window": args.context_window,
            "max_num_seqs": args.max_num_seqs, "threads": args.threads, "server_args": args.server_args,
            "prefix_cache": args.prefix_cache,
            "quick": args.quick,
        },
        "cells": [], "server_failures": [],
    }
    cells_per_server = [(w, lv) for w in args.workloads for lv in args.levels]
    total = len(cells_per_server) * len(configs) * args.repeats
    log(f"spec_bench: {len(configs)} configs x {len(args.workloads)} workloads x {len(args.levels)} levels x "
        f"{args.repeats} repeats = {total} cells; output in {out}")
    started = time.time()
    done = 0
    baseline_text = {}  # (workload, level, repeat, index) -> sha1 of none's output
    starts = cell_starts(packs, args.workloads, args.levels, args.repeats, args.requests_per_cell, args.seed)
    try:
        for rep in range(args.repeats):
            order = configs[rep % len(configs):] + configs[: rep % len(configs)]
            cell_order = list(cells_per_server)
            random.Random(f"{args.seed}-cells-{rep}").shuffle(cell_order)
            for label, spec in order:
                safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
                log(f"spec_bench: repeat {rep}, config {label}: starting zen serve")
                t = time.time()
                try:
                    server = Server(args, spec, os.path.join(out, f"server-{safe}-r{rep}.log"))
                except ServerError as e:
                    log(f"spec_bench: config {label}: {str(e).splitlines()[0]}")
                    results["server_failures"].append({"config": label, "repeat": rep, "error": str(e)})
                    done += len(cell_order)
                    write_json(os.path.join(out, "results.json"), results)
                    continue
                try:
                    warm = packs[args.workloads[0]][-1]
                    import openai
                    with openai.OpenAI(base_url=server.url + "/v1", api_key="zen-bench", max_retries=0,
                                       timeout=args.request_timeout) as client:
                        w_rec = one_request(client, server.model_name, warm, 16, args)
                    if w_rec["error"]:
                        log(f"spec_bench: warm-up request failed: {w_rec['error']}")
                    log(f"spec_bench: server up and warm in {time.time() - t:.1f} s ({server.url})")
                    for workload, level in cell_order:
                        n = max(level, args.requests_per_cell or 2 * level)
                        prompts = cell_prompts(packs[workload], starts[(workload, level, rep)], n)
                        server.wait_idle()
                        cell = {"config": label, "workload": workload, "concurrency": level, "repeat": rep,
                                "order": done, "started_s": round(time.time() - started, 2)}
                        cell.update(run_cell(server, prompts, level, args))
                        if args.temperature == 0:
                            for i, r in enumerate(cell["records"]):
                                k = (workload, level, rep, i)
                                if label == "none" and r["error"] is None:
                                    baseline_text[k] = r["text_sha1"]
                        results["cells"].append(cell)
                        done += 1
                        s = cell["stream_tok_s"]
                        acc = cell["spec"]["acceptance_rate"]
                        log(f"  [{done}/{total}] {label} {workload} c={level}: {fmt(cell['output_tok_s'])} tok/s, "
                            f"{cell['completion_tokens']} tokens in {cell['wall_s']:.1f} s, stream p50 {fmt(s['p50'])}, "
                            f"TTFT p50 {fmt(cell['ttft_p50_s'], '.2f')} s, conc {fmt(cell['achieved_concurrency'])}"
                            + (f", acc {100 * acc:.0f}% len {cell['spec']['mean_acceptance_length']:.2f}" if acc is not None else "")
                            + (f", {cell['errors']} errors" if cell["errors"] else ""))
                        write_json(os.path.join(out, "results.json"), results)
                finally:
                    server.stop()
    except KeyboardInterrupt:
        log("spec_bench: interrupted; writing what was measured")

    # Outputs equal to the baseline's for the same request (temperature 0).
    if args.temperature == 0 and baseline_text:
        for cell in results["cells"]:
            if cell["config"] == "none":
                continue
            pairs = [(r, baseline_text.get((cell["workload"], cell["concurrency"], cell["repeat"], i)))
                     for i, r in enumerate(cell["records"]) if r["error"] is None]
            pairs = [(r, b) for r, b in pairs if b is not None]
            if pairs:
                cell["same_as_none"] = sum(r["text_sha1"] == b for r, b in pairs)
    results["meta"]["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    results["meta"]["elapsed_s"] = round(time.time() - started, 1)
    write_json(os.path.join(out, "results.json"), results)
    md, summary = markdown(results, labels, args.workloads, args.levels)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(md)
    pngs = plots(out, summary, labels, args.workloads, args.levels, args.model) if results["cells"] else []
    print(md)
    log(f"spec_bench: {len(results['cells'])} cells in {time.time() - started:.0f} s; wrote "
        + ", ".join(os.path.relpath(p, os.getcwd()) for p in [os.path.join(out, "results.json"), os.path.join(out, "report.md"), *pngs]))
    failed = sum(c["errors"] for c in results["cells"]) + len(results["server_failures"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

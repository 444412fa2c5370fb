#!/usr/bin/env python3
"""Soak test: `zen serve` under sustained mixed traffic, watching for errors and growth.

For --minutes, --streams client threads each loop over a mix of requests:
  stream     a streamed chat completion read to the end (most requests)
  disconnect a streamed completion dropped after its first tokens (a disconnect storm: every
             --storm-every seconds all threads do this at once)
  long       a prompt of ~1,500 tokens, not streamed
  hostile    a malformed or oversized body, which must get a 4xx
Every --sample seconds it records the server's RSS and /metrics (running, waiting, KV usage).
At the end it waits for the server to go idle and prints: requests by kind, errors (any 5xx,
a hostile body that got a 2xx, a dropped connection the client did not cause, a stream without
its [DONE]), RSS at start / after warm-up / plateau (median of the last third) / end, and
whether running, waiting and KV usage returned to zero, and RSS growth over the second half.
The KV pool is committed as it fills (up to --kv-memory; the prefix cache keeps finished
requests' blocks, so under varied prompts it fills), so RSS rises by up to the pool during
warm-up and must then stay flat: growth over the second half above max(16 MiB, 2%) counts as
growing. Exit status 1 on any error, when they did not return to zero, or when RSS grew.

    .venv/bin/python bench/soak.py [--model PATH] [--minutes 30] [--streams 8] [--json OUT]
It starts its own server (127.0.0.1, a free port) unless --url names a running one (then
--pid gives its process for RSS).
"""
import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(zen, model, extra):
    cmd = [zen, "serve", "--port", "0", "--context-window", "4096", *extra]
    if model:
        cmd += ["--model", model]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.match(r"Chat page: (http://[\d.]+:\d+)/", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1)
    sys.exit("zen serve did not start")


class Soak:
    def __init__(self, url, pid, model_name):
        self.url, self.pid, self.model = url, pid, model_name
        self.host, self.port = re.match(r"http://([\d.]+):(\d+)", url).groups()
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []
        self.samples = []  # (seconds, rss MiB, running, waiting, kv usage)

    def count(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def error(self, what):
        with self.lock:
            self.errors.append(what)

    def rss(self):
        try:
            for line in open(f"/proc/{self.pid}/status"):
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return float("nan")

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        value = lambda name: sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name + "{") or l.startswith(name + " "))
        return value("zen_num_requests_running"), value("zen_num_requests_waiting"), value("zen_kv_cache_usage_ratio")

    def post(self, path, body, stream=False, drop_after=None):
        """Raw HTTP/1.1 POST; returns (status, body bytes). drop_after: close after that many
        bytes of the response."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        s = socket.create_connection((self.host, int(self.port)), timeout=120)
        try:
            s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      b"Content-Length: %d\r\n\r\n" % (path.encode(), len(data)) + data)
            got = b""
            while chunk := s.recv(65536):
                got += chunk
                if drop_after is not None and len(got) > drop_after:
                    return None, got
        finally:
            s.close()
        status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.1 ") else 0
        return status, got

    def one(self, rng, kind):
        messages = [{"role": "user", "content": f"Write a short story about {rng.choice(['a fox', 'the sea', 'a robot', 'rain'])}."}]
        if kind == "stream":
            status, got = self.post("/v1/chat/completions", {"model": self.model, "messages": messages, "stream": True,
                                                             "max_tokens": rng.randint(8, 48)})
            if status != 200 or b"data: [DONE]" not in got:
                self.error(f"stream: status {status}, {got[-200:]!r}")
        elif kind == "disconnect":
            self.post("/v1/chat/completions", {"model": self.model, "messages": messages, "stream": True,
                                               "max_tokens": 400, "ignore_eos": True}, drop_after=600)
        elif kind == "long":
            prompt = " ".join(f"item {i} of a long list;" for i in range(200))
            status, got = self.post("/v1/completions", {"model": self.model, "prompt": prompt, "max_tokens": 4})
            if status != 200:
                self.error(f"long: status {status}, {got[-200:]!r}")
        else:
            body = rng.choice([b"{", b"[" * 100000, b'{"messages": 5}', json.dumps({"messages": messages, "temperature": 9}).encode(),
                               b'{"model": "x", "prompt": "a", "max_tokens": -1}', b"\xff\xfe" * 1000,
                               json.dumps({"messages": messages, "logit_bias": {"x": 1}}).encode()])
            status, got = self.post(rng.choice(["/v1/chat/completions", "/v1/completions"]), body)
            if not (400 <= status < 500):
                self.error(f"hostile body got status {status}")
        self.count(kind)

    def client(self, seed, deadline, storm_every):
        rng = random.Random(seed)
        while time.time() < deadline:
            storm = storm_every > 0 and int(time.time()) % storm_every == 0
            kind = "disconnect" if storm else rng.choices(["stream", "disconnect", "long", "hostile"], [70, 10, 5, 15])[0]
            try:
                self.one(rng, kind)
            except (OSError, ValueError) as e:
                self.error(f"{kind}: {type(e).__name__}: {e}")

    def sampler(self, start, deadline, every):
        while time.time() < deadline:
            try:
                self.samples.append((time.time() - start, self.rss(), *self.metrics()))
            except (OSError, urllib.error.URLError) as e:
                self.error(f"metrics: {e}")
            time.sleep(every)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model for the server it starts (default: zen's default model)")
    ap.add_argument("--zen", default=os.path.join(ROOT, "build", "zen"), help="the zen binary (default build/zen)")
    ap.add_argument("--server-args", default="", help="extra flags for the server it starts, e.g. '--kv-memory 512M'")
    ap.add_argument("--url", help="a running zen serve instead")
    ap.add_argument("--pid", type=int, help="its process id (for RSS)")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--storm-every", type=int, default=60, help="seconds between disconnect storms (0: none)")
    ap.add_argument("--sample", type=float, default=5, help="seconds between RSS / metrics samples")
    ap.add_argument("--json", help="write the samples and the summary here")
    args = ap.parse_args()

    proc = None
    if args.url:
        url, pid = args.url.rstrip("/"), args.pid
    else:
        proc, url = start_server(args.zen, args.model, ["--threads", "2", *args.server_args.split()])
        pid = proc.pid
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
            model_name = json.load(r)["data"][0]["id"]
        soak = Soak(url, pid, model_name)
        start = time.time()
        deadline = start + args.minutes * 60
        rss_start = soak.rss()
        threads = [threading.Thread(target=soak.client, args=(i, deadline, args.storm_every)) for i in range(args.streams)]
        threads.append(threading.Thread(target=soak.sampler, args=(start, deadline, args.sample)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        idle_deadline = time.time() + 60
        while time.time() < idle_deadline and soak.metrics() != (0, 0, 0):
            time.sleep(0.5)
        running, waiting, kv = soak.metrics()
        rss_end = soak.rss()
    finally:
        if proc:
            proc.terminate()
            proc.wait(30)

    rss = [s[1] for s in soak.samples]
    warm = rss[min(len(rss) - 1, len(rss) // 10)] if rss else float("nan")
    plateau = statistics.median(rss[-max(1, len(rss) // 3):]) if rss else float("nan")
    peak_running = max((s[2] for s in soak.samples), default=0)
    print(f"soak: {args.minutes:g} min, {args.streams} client threads, disconnect storm every {args.storm_every} s")
    print("requests:", ", ".join(f"{k} {v}" for k, v in sorted(soak.counts.items())), f"(total {sum(soak.counts.values())})")
    print(f"errors: {len(soak.errors)}")
    for e in soak.errors[:20]:
        print("  ", e)
    print(f"RSS MiB: start {rss_start:.0f}, after warm-up {warm:.0f}, plateau {plateau:.0f} (median of the last third), "
          f"max {max(rss, default=float('nan')):.0f}, end {rss_end:.0f}")
    second_half = [s[1] for s in soak.samples if s[0] >= args.minutes * 30]
    growth = second_half[-1] - second_half[0] if len(second_half) >= 2 else float("nan")
    flat = growth <= max(16.0, 0.02 * second_half[0]) if len(second_half) >= 2 else False
    print(f"RSS growth over the second half: {growth:+.0f} MiB -> {'flat' if flat else 'GROWING'}")
    print(f"peak running {peak_running:.0f}; at the end: running {running:.0f}, waiting {waiting:.0f}, KV usage {kv:.3f}"
          f" -> {'back to zero' if (running, waiting, kv) == (0, 0, 0) else 'NOT back to zero'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": soak.counts, "errors": soak.errors, "samples": soak.samples,
                       "rss_start": rss_start, "rss_warm": warm, "rss_plateau": plateau, "rss_end": rss_end,
                       "rss_second_half_growth": growth, "end_metrics": [running, waiting, kv]}, f, indent=1)
    sys.exit(1 if soak.errors or (running, waiting, kv) != (0, 0, 0) or not flat else 0)


if __name__ == "__main__":
    main()

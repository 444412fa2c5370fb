"""Starts `zen serve` on 127.0.0.1 with a free port for the server tests."""
import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

from conftest import DEFAULT_MODEL, ZEN


class ZenServer:
    def __init__(self, *args, model=DEFAULT_MODEL, env=None, launcher=(), threads=2):
        """launcher: a command in front of zen (mpirun -np 2 ...) for multi-process serving."""
        self.model_path = model
        self.stop_pid = None
        cmd = [*launcher, str(ZEN), "serve", "--model", str(model), "--port", "0", "--threads", str(threads),
               "--context-window", "4096", "--kv-memory", "1G", *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.output = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("zen serve exited:\n" + "".join(self.output))
            self.output.append(line)
            m = re.match(r"Chat page: (http://[\d.]+:(\d+))/", line)
            if m:
                self.url, self.port = m.group(1), int(m.group(2))
                break
        else:
            raise RuntimeError("zen serve did not start:\n" + "".join(self.output))
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        self.model = re.search(r'served as "([^"]+)"', "".join(self.output)).group(1)

    def _drain(self):
        for line in self.proc.stdout:
            self.output.append(line)

    def client(self, **kw):
        import openai
        kw.setdefault("api_key", "none")
        return openai.OpenAI(base_url=self.url + "/v1", max_retries=0, timeout=300, **kw)

    def raw(self, method, path, body=None, headers=None, timeout=60):
        """(status, parsed JSON or text) of one HTTP request; body may be bytes, str or a dict."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data.decode("utf-8", "replace")

    def rss_kib(self):
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return -1

    def metric(self, name):
        """Sum of the samples of one metric in /metrics."""
        _, text = self.raw("GET", "/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self):
        """Stops the server; it must shut down cleanly on SIGTERM (exit 0; under ASan a
        LeakSanitizer report at exit makes it non-zero)."""
        # Under mpirun the signal goes to rank 0 (mpirun exits 1 on a SIGTERM of its own).
        os.kill(self.stop_pid or self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("zen serve did not stop within 60 s of SIGTERM")
        time.sleep(0.2)  # the drain thread reads the last lines
        assert self.proc.returncode == 0, f"zen serve exited with {self.proc.returncode}:\n" + "".join(self.output[-60:])

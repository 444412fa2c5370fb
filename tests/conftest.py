import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# ZEN_BINARY runs the suite against another build (test.sh: the ASan one for LeakSanitizer).
ZEN = pathlib.Path(os.environ.get("ZEN_BINARY", ROOT / "build" / "zen")).resolve()
SHARED = ROOT.parent / "shared" / "data"
STORIES = SHARED / "stories260K" / "stories260K.gguf"
DEFAULT_MODEL = pathlib.Path(os.environ.get("ZEN_DEFAULT_MODEL", ROOT / "models" / "default" / "model.gguf"))


def zen(*args, input=None, check=False, timeout=600, env=None):
    """Runs the zen binary (env: extra environment variables); returns CompletedProcess with
    text stdout/stderr."""
    proc = subprocess.run([str(ZEN), *map(str, args)], input=input, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **env) if env else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"zen {args} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def need(path, what):
    if not pathlib.Path(path).exists():
        pytest.skip(f"{what} not present at {path}")


@pytest.fixture(scope="session")
def zen_server():
    """One `zen serve` on the default model for every server test (started once: loading and
    warming the model is the slow part)."""
    need(DEFAULT_MODEL, "the default model")
    from zen_server import ZenServer
    server = ZenServer("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--max-num-seqs", "64")
    yield server
    server.stop()

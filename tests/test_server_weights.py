"""The weights' canonical root on /v1/models, and `zen serve --verify-weights` refusing a
mismatch before it listens."""
import re
import time

import pytest

from conftest import STORIES, need, zen
from zen_server import ZenServer


def root_of(path):
    out = zen("hash", path, "--no-file-hashes", check=True).stdout
    return re.search(r"^root: ([0-9a-f]{64})$", out, re.M).group(1)


def weights_entry(server, timeout=60):
    deadline = time.time() + timeout
    while True:
        status, body = server.raw("GET", "/v1/models")
        assert status == 200
        w = body["data"][0]["weights"]
        if w["status"] != "computing" or time.time() > deadline:
            return w
        time.sleep(0.2)


def test_models_report_the_weights_root(zen_server):
    w = weights_entry(zen_server)
    assert w["status"] == "computed", w
    assert w["canonicalization"] == "zen-weights-v1"
    assert w["verified"] is False
    assert w["root"] == root_of(zen_server.model_path)


def test_serve_verifies_weights_before_listening(tmp_path):
    need(STORIES, "stories260K")
    root = root_of(STORIES)
    server = ZenServer("--verify-weights", root, model=STORIES)
    try:
        w = weights_entry(server, timeout=0)
        assert w == {"canonicalization": "zen-weights-v1", "root": root, "verified": True, "status": "computed"}
        assert "verify-weights: OK" in "".join(server.output)
    finally:
        server.stop()

    wrong = root[:-1] + ("0" if root[-1] != "0" else "1")
    with pytest.raises(RuntimeError) as e:
        ZenServer("--verify-weights", wrong, model=STORIES)
    assert f"does not match {wrong}" in str(e.value) and "weights root" in str(e.value)

    manifest = tmp_path / "m.json"
    zen("hash", STORIES, "--json", manifest, check=True)
    text = manifest.read_text()
    # A manifest naming one tensor with another leaf: the refusal names that tensor.
    first_leaf = re.search(r'"leaf": "([0-9a-f]{64})"', text).group(1)
    second_leaf = re.findall(r'"leaf": "([0-9a-f]{64})"', text)[1]
    with pytest.raises(RuntimeError) as e:
        manifest.write_text(text.replace(first_leaf, second_leaf, 1))
        ZenServer("--verify-weights", manifest, model=STORIES)
    assert "do not hash to its root" in str(e.value)

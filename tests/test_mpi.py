"""Multi-process inference under a real `mpirun` (issue 22): tensor, expert and pipeline
parallelism, and grids of tensor-parallel pipeline stages, give one process's greedy tokens
(dense, MoE and hybrid models), through shared memory and through TCP; zen serve answers 16
concurrent requests as one process does; a killed rank ends the job; ranks that map different
checkpoints, or a rank count that is not the tensor parallel size, refuse to start.
Skipped, with the reason, where mpirun or an MPI build of zen is absent."""
import concurrent.futures
import json
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import time

import pytest

from conftest import DEFAULT_MODEL, ROOT, ZEN, need, zen

FIXTURES = ROOT / "tests" / "fixtures" / "models"
MPIRUN = shutil.which("mpirun")
# Root in a container is the usual CI user; Open MPI refuses it unless told twice.
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def _mpi_problem():
    if MPIRUN is None:
        return "mpirun is not installed (Debian: openmpi-bin)"
    r = zen("run", "--help")
    if "--tensor-parallel-size" not in r.stdout:
        return "this zen has no --tensor-parallel-size"
    probe = subprocess.run([MPIRUN, "-np", "2", str(ZEN), "run", "--model", FIXTURES / "qwen3_f32", "--prompt-ids",
                            "1", "--max-tokens", "1", "--tensor-parallel-size", "2"],
                           capture_output=True, text=True, timeout=120, env=MPI_ENV)
    if "built without" in probe.stderr:
        return "zen was built without MPI (libopenmpi-dev was absent at configure time)"
    return ""


PROBLEM = _mpi_problem()
pytestmark = pytest.mark.skipif(bool(PROBLEM), reason=PROBLEM or "runs")


def mpirun(*args, np=2, mca=(), timeout=300):
    cmd = [MPIRUN, "-np", str(np), *mca, str(ZEN), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=MPI_ENV)


PROMPT = "def quicksort(items):\n    \"\"\"Sort a list.\"\"\"\n"


@pytest.mark.parametrize("mca", [(), ("--mca", "btl", "tcp,self")], ids=["shared-memory", "tcp"])
def test_tensor_parallel_two_ranks_equal_one_process_on_the_default_model(mca):
    need(DEFAULT_MODEL, "the default model")
    one = zen("run", "--prompt", PROMPT, "--max-tokens", "40", "--threads", "2", check=True)
    two = mpirun("run", "--prompt", PROMPT, "--max-tokens", "40", "--tensor-parallel-size", "2", mca=mca)
    assert two.returncode == 0, two.stderr
    assert two.stdout == one.stdout
    # Rank 0 reports what its collectives did: 2 all-reduces a layer + the embedding's, one
    # all-gather of the logits, per forward.
    assert "all-reduce 49.0 calls" in two.stderr and "all-gather 1.0 calls" in two.stderr, two.stderr


@pytest.mark.parametrize("mca", [(), ("--mca", "btl", "tcp,self")], ids=["shared-memory", "tcp"])
def test_two_pipeline_stages_equal_one_process_on_the_default_model(mca):
    need(DEFAULT_MODEL, "the default model")
    one = zen("run", "--prompt", PROMPT, "--max-tokens", "40", "--threads", "2", check=True)
    two = mpirun("run", "--prompt", PROMPT, "--max-tokens", "40", "--pipeline-parallel-size", "2", mca=mca)
    assert two.returncode == 0, two.stderr
    assert two.stdout == one.stdout
    # Per forward rank 0 sends its hidden states on and receives the logits.
    assert "send 1.0 calls" in two.stderr and "recv 1.0 calls" in two.stderr, two.stderr


def test_three_pipeline_stages_equal_one_process_on_a_moe_fixture():
    ids = ",".join(str((i * 37 + 11) % 200) for i in range(30))
    args = ["run", "--model", FIXTURES / "qwen3_moe_step2", "--prompt-ids", ids, "--max-tokens", "24", "--ignore-eos"]
    one = zen(*args, "--threads", "1", check=True)
    three = mpirun(*args, "--pipeline-parallel-size", "3", np=3)
    assert three.returncode == 0, three.stderr
    assert three.stdout == one.stdout


EP = ["--tensor-parallel-size", "2", "--enable-expert-parallel"]
TP = ["--tensor-parallel-size", "2"]
PP = ["--pipeline-parallel-size", "2"]


@pytest.mark.parametrize("model,flags", [
    ("qwen2_moe_shared", EP), ("qwen3_moe_step2", EP), ("qwen3_moe_bf16_tied.gguf", EP),  # MoE, whole experts
    ("qwen2_moe_shared", TP), ("qwen3_moe_bf16_tied.gguf", TP),  # MoE, every expert sliced
    ("qwen3_5_text_f32", TP), ("qwen3_next_f32", TP), ("qwen3_5_tied_f32.gguf", TP),  # hybrid
    ("qwen3_5_moe_bf16", EP), ("qwen3_5_moe_bf16", TP),  # hybrid MoE
    ("qwen3_5_text_f32", PP), ("qwen3_next_f32", PP), ("qwen3_5_moe_bf16", PP)],  # hybrid stages
    ids=lambda v: v if isinstance(v, str) else "-".join(f.lstrip("-").split("-")[0] for f in v if f.startswith("--")))
def test_two_ranks_equal_one_process_on_moe_and_hybrid_fixtures(model, flags):
    ids = ",".join(str((i * 37 + 11) % 90) for i in range(30))
    args = ["run", "--model", FIXTURES / model, "--prompt-ids", ids, "--max-tokens", "24", "--ignore-eos"]
    one = zen(*args, "--threads", "1", check=True)
    for mca in [(), ("--mca", "btl", "tcp,self")]:
        two = mpirun(*args, *flags, mca=mca)
        assert two.returncode == 0, two.stderr
        assert two.stdout == one.stdout and len(one.stdout.split()) == 24


DFLASH = ROOT / "tests" / "fixtures" / "dflash"


@pytest.mark.parametrize("model,config", [
    (FIXTURES / "qwen3_5_text_f32", {"method": "mtp"}),
    (DFLASH / "target", {"method": "dflash", "model": str(DFLASH / "trained")}),
    (DFLASH / "hybrid" / "target", {"method": "dflash", "model": str(DFLASH / "hybrid" / "v1")})],
    ids=["mtp-hybrid", "dflash-dense-trained", "dflash-hybrid"])
def test_drafters_that_borrow_the_output_head_run_on_two_ranks_as_in_one_process(model, config):
    """MTP and DFlash on a target split two ways: rank 0 drafts; under tensor parallelism every
    rank runs its share of the embedding, the output head and the MTP head; in pipeline stages
    the first stage lends the embedding, the last the output head and the MTP head, and each
    stage sends rank 0 the taps of its layers. The tokens are plain decoding's, and the drafts
    and acceptance those of one process with the same drafter."""
    ids = ",".join(str((i * 37 + 11) % 90) for i in range(30))
    args = ["run", "--model", model, "--prompt-ids", ids, "--max-tokens", "24", "--ignore-eos"]
    spec = ["--speculative-config", json.dumps({**config, "num_speculative_tokens": 3, "adaptive": False})]
    plain = zen(*args, "--threads", "1", check=True)
    one = zen(*args, *spec, "--threads", "1", check=True)
    summary = [line for line in one.stderr.splitlines() if line.startswith("speculation:")]
    assert one.stdout == plain.stdout and summary and " 0 draft tokens" not in summary[0], one.stderr
    for layout in [TP, PP]:
        for mca in [(), ("--mca", "btl", "tcp,self")]:
            two = mpirun(*args, *spec, *layout, mca=mca)
            assert two.returncode == 0, two.stderr
            assert two.stdout == plain.stdout
            assert summary[0] in two.stderr.splitlines(), two.stderr


GRID = ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]


@pytest.mark.parametrize("model,flags", [
    ("qwen3_bf16_tied", GRID), ("qwen3_moe_bf16_tied.gguf", GRID + ["--enable-expert-parallel"]),
    ("qwen3_moe_bf16_tied.gguf", GRID), ("qwen3_5_text_f32", GRID)], ids=["dense-tied", "moe-ep", "moe-tp", "hybrid"])
def test_a_grid_of_two_stages_of_two_ranks_equals_one_process(model, flags):
    """Tensor parallelism inside each of two pipeline stages: 4 ranks, each stage's all-reduces
    on its own sub-communicator, hidden states from rank r of stage 0 to rank r of stage 1."""
    ids = ",".join(str((i * 37 + 11) % 90) for i in range(30))
    args = ["run", "--model", FIXTURES / model, "--prompt-ids", ids, "--max-tokens", "24", "--ignore-eos"]
    one = zen(*args, "--threads", "1", check=True)
    four = mpirun(*args, *flags, np=4)
    assert four.returncode == 0, four.stderr
    assert four.stdout == one.stdout and len(one.stdout.split()) == 24
    assert "tensor parallel 2 x pipeline 2: 4 ranks" in four.stderr, four.stderr


def test_what_does_not_split_is_refused_with_the_reason():
    # An intermediate size of one Q8_0 block cannot be cut in two.
    q8 = mpirun("run", "--model", FIXTURES / "qwen3_5_tied_q8_0.gguf", "--prompt-ids", "1", "--tensor-parallel-size", "2")
    assert q8.returncode != 0 and "the intermediate size 32 in blocks of 32 leaves rank 1 no rows" in q8.stderr, q8.stderr


def test_rank_count_must_equal_the_tensor_parallel_size():
    r = mpirun("run", "--model", FIXTURES / "qwen3_f32", "--prompt-ids", "1", "--tensor-parallel-size", "4")
    assert r.returncode != 0 and "mpirun started 2 ranks but --tensor-parallel-size x --pipeline-parallel-size is 4" \
        in r.stderr, r.stderr
    r = mpirun("run", "--model", FIXTURES / "qwen3_f32", "--prompt-ids", "1", "--tensor-parallel-size", "2",
               "--pipeline-parallel-size", "2", np=2)
    assert r.returncode != 0 and "mpirun started 2 ranks but --tensor-parallel-size x --pipeline-parallel-size is 4" \
        in r.stderr, r.stderr
    r = zen("run", "--model", FIXTURES / "qwen3_f32", "--prompt-ids", "1", "--tensor-parallel-size", "2")
    assert r.returncode != 0 and "launch with mpirun -np 2" in r.stderr, r.stderr


def _corrupt_copy(src, dst):
    """dst: src's folder with the first bytes of one tensor's data changed; returns its name."""
    shutil.copytree(src, dst)
    path = dst / "model.safetensors"
    raw = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    name = sorted(k for k in header if k != "__metadata__")[3]
    begin = 8 + n + header[name]["data_offsets"][0]
    raw[begin:begin + 4] = bytes(b ^ 0x5A for b in raw[begin:begin + 4])
    path.write_bytes(bytes(raw))
    return name


def test_ranks_that_map_different_weights_refuse_naming_the_tensor(tmp_path):
    good = FIXTURES / "qwen3_f32"
    name = _corrupt_copy(good, tmp_path / "other")
    common = ["--prompt-ids", "1,2", "--max-tokens", "2", "--tensor-parallel-size", "2"]
    cmd = [MPIRUN, "-np", "1", str(ZEN), "run", "--model", str(good), *common,
           ":", "-np", "1", str(ZEN), "run", "--model", str(tmp_path / "other"), *common]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=MPI_ENV)
    assert r.returncode != 0
    assert "the weights differ, first in " + name in r.stderr, r.stderr


def _rank_pids(launcher_pid):
    """{rank: pid} of the zen processes under one mpirun."""
    ranks = {}
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(ZEN).encode() not in cmdline.split(b"\0")[0]:
            continue
        vars = dict(v.split(b"=", 1) for v in env if b"=" in v)
        if vars.get(b"OMPI_COMM_WORLD_RANK") is None:
            continue
        # Our job only: a descendant of this mpirun.
        pid = int(proc.name)
        parent = pid
        while parent > 1:
            try:
                stat = (pathlib.Path("/proc") / str(parent) / "stat").read_text()
            except OSError:
                break
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent == launcher_pid:
                ranks[int(vars[b"OMPI_COMM_WORLD_RANK"])] = pid
                break
    return ranks


def _serve(*args):
    from zen_server import ZenServer
    server = ZenServer(*args, launcher=(MPIRUN, "-np", "2"), threads=1, env=MPI_ENV)
    server.stop_pid = _rank_pids(server.proc.pid).get(0)  # rank 0 shuts down and releases rank 1
    return server


# The default model's logits on two ranks stay within 0.36 of one process's (int8 activation
# requantization; src/dist/tensor_parallel_test.cc): greedy tokens are equal except where one
# process's top two are that close.
NEAR_TIE = 0.5


def _one_process_and_two_ranks(prompts, *layout):
    """Each prompt's (text, tokens, token logprobs, top-2 logprobs, completion tokens), asked
    16 at a time of `zen serve` in one process, then on two ranks with the layout flags."""
    from zen_server import ZenServer

    def answers(server):
        client = server.client()

        def one(p):
            r = client.completions.create(model=server.model, prompt=p, max_tokens=24, temperature=0, logprobs=2)
            lp = r.choices[0].logprobs
            return r.choices[0].text, lp.tokens, lp.token_logprobs, lp.top_logprobs, r.usage.completion_tokens
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            return list(pool.map(one, prompts))

    single = ZenServer("--max-num-seqs", "16")
    try:
        want = answers(single)
    finally:
        single.stop()
    split = _serve("--max-num-seqs", "16", *layout)
    try:
        got = answers(split)
    finally:
        split.stop()  # SIGTERM to rank 0: it shuts down, releases rank 1, mpirun exits 0
    return want, got


def test_serve_on_two_ranks_answers_16_concurrent_requests_as_one_process():
    need(DEFAULT_MODEL, "the default model")
    prompts = [f"# Python: a function number {i} that returns the {i}th prime.\ndef " for i in range(16)]
    want, got = _one_process_and_two_ranks(prompts, "--tensor-parallel-size", "2")
    equal = 0
    for (_, w_tokens, _, w_top, w_n), (_, g_tokens, _, _, g_n) in zip(want, got):
        assert g_n == w_n == 24
        if g_tokens == w_tokens:
            equal += 1
            continue
        i = next(i for i, (a, b) in enumerate(zip(w_tokens, g_tokens)) if a != b)
        # Where they part, one process ranked the two ranks' token second, within the bound.
        assert g_tokens[i] in w_top[i], (i, w_tokens[i], g_tokens[i], w_top[i])
        assert w_top[i][w_tokens[i]] - w_top[i][g_tokens[i]] <= NEAR_TIE, (i, w_top[i])
    print(f"{equal} of 16 answers equal to one process's")
    assert equal >= 12, f"only {equal} of 16 answers equal"


def test_serve_in_two_pipeline_stages_answers_16_concurrent_requests_exactly_as_one_process():
    need(DEFAULT_MODEL, "the default model")
    prompts = [f"# Python: a class number {i} for a binary tree.\nclass " for i in range(16)]
    want, got = _one_process_and_two_ranks(prompts, "--pipeline-parallel-size", "2")
    # Whole layers per stage, micro-batches of whole sequences: the same arithmetic, so the
    # same text and the same logprobs to the bit.
    assert got == want


def test_a_killed_rank_ends_the_job_with_a_message():
    need(DEFAULT_MODEL, "the default model")
    server = _serve("--tensor-parallel-size", "2")
    try:
        ranks = _rank_pids(server.proc.pid)
        assert set(ranks) == {0, 1}, ranks
        os.kill(ranks[1], signal.SIGKILL)
        deadline = time.time() + 60
        while server.proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert server.proc.poll() is not None, "the job outlived its killed rank by 60 s"
        assert server.proc.returncode != 0
        time.sleep(0.3)
        text = "".join(server.output)
        assert "rank 1" in text and ("signal 9" in text or "Killed" in text), text[-3000:]
        # No rank is left behind.
        assert all(not pathlib.Path(f"/proc/{pid}").exists() or
                   "zombie" in pathlib.Path(f"/proc/{pid}/status").read_text() or
                   " Z " in pathlib.Path(f"/proc/{pid}/stat").read_text()
                   for pid in ranks.values())
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()

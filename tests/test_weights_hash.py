"""Weight digests, manifests and attestations (zen hash / verify / attest, --verify-weights),
checked from the outside against an independent Python implementation of the "zen-weights-v1"
encoding that src/attest/digest.h documents, written with hashlib alone. Every checkpoint here is
a few small tensors written by the test itself; nothing expected is hard-coded, every digest is
computed in Python."""
import base64
import hashlib
import json
import pathlib
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import DEFAULT_MODEL, ZEN, need, zen

# --- The reference implementation (digest.h's top comment) ------------------------------------

CANONICALIZATION = "zen-weights-v1"


def u64(n):
    return struct.pack("<Q", n)


def ref_leaf(name, dtype, shape, data):
    """SHA-256(0x00 || "zen-weights-v1" 0x00 || len name || len dtype || ndim dims || nbytes bytes)."""
    name_b, dtype_b = name.encode("utf-8"), dtype.encode("ascii")
    h = hashlib.sha256(b"\x00" + CANONICALIZATION.encode() + b"\x00" + u64(len(name_b)) + name_b +
                       u64(len(dtype_b)) + dtype_b + u64(len(shape)) + b"".join(u64(d) for d in shape) + u64(len(data)))
    h.update(data)
    return h.digest()


def ref_merkle_root(leaves):
    """RFC 6962 section 2.1: split at the largest power of two strictly below n."""
    assert leaves, "a Merkle root needs at least one leaf"
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + ref_merkle_root(leaves[:k]) + ref_merkle_root(leaves[k:])).digest()


@dataclass
class T:
    name: str
    dtype: str  # safetensors spelling
    shape: tuple
    data: bytes

    @property
    def leaf(self):
        return ref_leaf(self.name, self.dtype, self.shape, self.data).hex()


def ref_digest(tensors):
    """(root hex, {name: leaf hex}) with leaves sorted by the names' UTF-8 bytes."""
    ordered = sorted(tensors, key=lambda t: t.name.encode("utf-8"))
    root = ref_merkle_root([bytes.fromhex(t.leaf) for t in ordered]).hex()
    return root, {t.name: t.leaf for t in ordered}


def test_reference_merkle_tree_shape():
    """The reference itself, against RFC 6962's tree written out by hand for n = 1..5 (so a bug in
    ref_merkle_root cannot hide behind agreeing with a zen that has the same bug)."""
    h = lambda *parts: hashlib.sha256(b"".join(parts)).digest()
    a, b, c, d, e = (hashlib.sha256(bytes([i])).digest() for i in range(5))
    assert ref_merkle_root([a]) == a
    assert ref_merkle_root([a, b]) == h(b"\x01", a, b)
    assert ref_merkle_root([a, b, c]) == h(b"\x01", h(b"\x01", a, b), c)
    assert ref_merkle_root([a, b, c, d]) == h(b"\x01", h(b"\x01", a, b), h(b"\x01", c, d))
    assert ref_merkle_root([a, b, c, d, e]) == h(b"\x01", h(b"\x01", h(b"\x01", a, b), h(b"\x01", c, d)), e)


# --- Writing checkpoints ------------------------------------------------------------------------

def mixed_tensors():
    """Seven tensors of mixed dtypes and ranks, deterministic contents. Names chosen so that byte
    order differs from natural and case-insensitive order ("Positions" < "embed", "layers.10" <
    "layers.2"); seven leaves make an unbalanced tree."""
    rng = np.random.default_rng(1234)
    f32 = lambda *s: rng.standard_normal(s).astype("<f4")
    bf16 = rng.integers(0, 1 << 16, size=(3, 2, 4), dtype=np.uint16).astype("<u2")  # raw BF16 bits
    return [
        T("embed.weight", "F32", (5, 3), f32(5, 3).tobytes()),
        T("layers.0.attn.q.weight", "F16", (4, 6), rng.standard_normal((4, 6)).astype("<f2").tobytes()),
        T("layers.10.mlp.weight", "BF16", (3, 2, 4), bf16.tobytes()),
        T("layers.2.norm.weight", "F32", (4,), f32(4).tobytes()),
        T("Positions", "I32", (6,), rng.integers(-1000, 1000, size=6, dtype=np.int32).astype("<i4").tobytes()),
        T("scale", "F32", (), f32(1).tobytes()),
        T("zero.rows", "F32", (0, 4), b""),
    ]


def f32_tensors():
    """All F32, 1- to 3-D, non-square, so a GGUF copy's reversed ne[] shows."""
    rng = np.random.default_rng(99)
    arrays = {
        "token_embd.weight": rng.standard_normal((6, 4)),
        "blk.0.attn_q.weight": rng.standard_normal((3, 5)),
        "blk.0.ffn_up.weight": rng.standard_normal((2, 3, 4)),
        "blk.0.attn_norm.weight": rng.standard_normal(4),
        "output_norm.weight": rng.standard_normal(7),
    }
    return [T(n, "F32", a.shape, a.astype("<f4").tobytes()) for n, a in arrays.items()]


def write_safetensors(path, tensors, order=None, metadata=None, pad=0):
    """A safetensors file: u64 LE header length, JSON header (entries in ORDER, data in the same
    order), spaces padding the header to 8-byte alignment plus PAD more, then the data."""
    order = order or [t.name for t in tensors]
    by_name = {t.name: t for t in tensors}
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in order:
        t = by_name[name]
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(t.data)]}
        blobs.append(t.data)
        offset += len(t.data)
    text = json.dumps(header).encode()
    text += b" " * ((-len(text)) % 8 + pad)
    pathlib.Path(path).write_bytes(u64(len(text)) + text + b"".join(blobs))
    return pathlib.Path(path)


CONFIG = {"architectures": ["TinyForTest"], "hidden_size": 4, "torch_dtype": "float32"}


def write_model_dir(folder, tensors, config=CONFIG, tokenizer=False):
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "model.safetensors", tensors, metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))
    if tokenizer:
        (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}}))
    return folder


def write_sharded_dir(folder, tensors, n_shards=3):
    """The same tensors as a Hugging Face folder: shards in reversed tensor order, each with its
    own __metadata__ and header padding, an index naming them, and the same config.json."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = [t.name for t in reversed(tensors)]
    groups = [names[i::n_shards] for i in range(n_shards)]
    weight_map = {}
    for i, group in enumerate(groups):
        shard = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        write_safetensors(folder / shard, [t for t in tensors if t.name in group], order=group,
                          metadata={"shard": str(i), "note": "x" * (i * 7)}, pad=8 * (i + 1))
        weight_map.update({n: shard for n in group})
    total = sum(len(t.data) for t in tensors)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return folder


def write_gguf(path, arrays, arch="llama"):
    """ARRAYS: name -> numpy array (row-major; the writer stores ne[] reversed) or
    (uint16 array, "BF16")."""
    import gguf
    w = gguf.GGUFWriter(str(path), arch)
    for name, a in arrays.items():
        if isinstance(a, tuple):
            w.add_tensor(name, a[0], raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return pathlib.Path(path)


# --- Running zen ----------------------------------------------------------------------------------

def manifest_of(path, *extra):
    r = zen("hash", path, "--json", "-", *extra, timeout=120)
    assert r.returncode == 0, f"zen hash {path} failed ({r.returncode}):\n{r.stderr}"
    return json.loads(r.stdout)


def assert_matches_reference(manifest, tensors, what):
    root, leaves = ref_digest(tensors)
    by_name = {t.name: t for t in tensors}
    assert manifest["canonicalization"] == CANONICALIZATION, what
    names = [t["name"] for t in manifest["tensors"]]
    assert names == list(leaves), f"{what}: zen's tensor list (in order) differs from the byte-sorted names"
    for entry in manifest["tensors"]:
        t = by_name[entry["name"]]
        assert entry["dtype"] == t.dtype, f"{what}: dtype of {t.name}"
        assert tuple(entry["shape"]) == tuple(t.shape), f"{what}: shape of {t.name}"
        assert entry["bytes"] == len(t.data), f"{what}: byte count of {t.name}"
        assert entry["leaf"] == leaves[t.name], f"{what}: leaf of {t.name} differs from the reference encoding"
    assert manifest["tensor_count"] == len(tensors), what
    assert manifest["tensor_bytes"] == sum(len(t.data) for t in tensors), what
    assert manifest["root"] == root, f"{what}: zen's root {manifest['root']} is not the reference root {root}"


def exits_cleanly_with(r, code, what):
    """A refusal is an ordinary exit, never an internal error (3) or a signal (negative)."""
    assert r.returncode != 3 and r.returncode >= 0, \
        f"{what}: zen crashed or hit an internal error ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert r.returncode == code, f"{what}: exit {r.returncode}, expected {code}:\n{r.stdout}\n{r.stderr}"


def problem_lines(r):
    return sorted(l[len("verify: "):] for l in r.stdout.splitlines()
                  if l.startswith("verify: ") and not l.startswith(("verify: OK", "verify: FAILED")))


def sha256_file(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


# --- 1. The canonical digest --------------------------------------------------------------------

def test_single_safetensors_file_matches_reference(tmp_path):
    tensors = mixed_tensors()
    path = write_safetensors(tmp_path / "model.safetensors", tensors, metadata={"format": "pt"})
    manifest = manifest_of(path)
    assert_matches_reference(manifest, tensors, "single safetensors file")
    assert manifest["format"] == "safetensors"
    weights = [f for f in manifest["files"] if f["role"] == "weights"]
    assert weights == [{"path": "model.safetensors", "role": "weights", "bytes": path.stat().st_size,
                        "sha256": sha256_file(path)}], manifest["files"]
    # Text output: the same root, and the file line in sha256sum's format.
    r = zen("hash", path)
    assert r.returncode == 0, r.stderr
    assert f"root: {manifest['root']}" in r.stdout.splitlines(), r.stdout
    assert f"{sha256_file(path)}  model.safetensors\t(weights)" in r.stdout.splitlines(), r.stdout
    # --no-file-hashes: the root alone, unchanged.
    bare = manifest_of(path, "--no-file-hashes", "--threads", "1")
    assert bare["root"] == manifest["root"] and not [f for f in bare["files"] if f["role"] == "weights"]


def test_storage_layout_does_not_change_the_digest(tmp_path):
    """Another tensor order, padding and __metadata__ in one file, or three shards behind an
    index: the same leaves and root; the files list has each file's plain SHA-256."""
    tensors = mixed_tensors()
    names = [t.name for t in tensors]
    single = write_model_dir(tmp_path / "single", tensors)
    reordered = write_safetensors(tmp_path / "reordered.safetensors", tensors, order=names[3:] + names[:3],
                                  metadata={"other": "metadata", "format": "np"}, pad=40)
    sharded = write_sharded_dir(tmp_path / "sharded", tensors)
    assert sha256_file(single / "model.safetensors") != sha256_file(reordered), "the test should store them differently"

    m_single = manifest_of(single)
    m_reordered = manifest_of(reordered)
    m_sharded = manifest_of(sharded)
    for m, what in ((m_single, "folder with model.safetensors"), (m_reordered, "reordered, padded file"),
                    (m_sharded, "three shards with an index")):
        assert_matches_reference(m, tensors, what)
    assert m_single["tensors"] == m_sharded["tensors"] == m_reordered["tensors"]

    shard_files = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(shard_files) == 3
    files = {f["path"]: f for f in m_sharded["files"]}
    assert [f["path"] for f in m_sharded["files"] if f["role"] == "weights"] == shard_files, m_sharded["files"]
    for name in shard_files:
        assert files[name]["sha256"] == sha256_file(sharded / name), f"{name}: not sha256sum's digest"
        assert files[name]["bytes"] == (sharded / name).stat().st_size, name
    assert files["config.json"]["role"] == "config", files
    assert files["config.json"]["sha256"] == sha256_file(sharded / "config.json")
    assert "model.safetensors.index.json" not in files  # the root covers what it maps

    # The resharded folder and the unchanged one both verify against the single file's manifest.
    (tmp_path / "single.json").write_text(json.dumps(m_single))
    for folder in (single, sharded):
        r = zen("verify", folder, "--manifest", tmp_path / "single.json")
        exits_cleanly_with(r, 0, f"verify {folder.name} against the single file's manifest")
        assert "verify: OK" in r.stdout and problem_lines(r) == [], r.stdout


def test_gguf_f32_matches_safetensors(tmp_path):
    """The same F32 tensors as GGUF (ne[] reversed on disk) and as safetensors: identical leaves."""
    tensors = f32_tensors()
    st = write_safetensors(tmp_path / "f32.safetensors", tensors)
    arrays = {t.name: np.frombuffer(t.data, dtype="<f4").reshape(t.shape) for t in tensors}
    gg = write_gguf(tmp_path / "f32.gguf", arrays)

    from gguf import GGUFReader
    on_disk = {t.name: list(t.shape) for t in GGUFReader(str(gg)).tensors}
    assert on_disk["blk.0.attn_q.weight"] == [5, 3], f"the writer should store ne[] reversed: {on_disk}"

    m_st, m_gguf = manifest_of(st), manifest_of(gg)
    assert_matches_reference(m_st, tensors, "all-F32 safetensors")
    assert_matches_reference(m_gguf, tensors, "all-F32 GGUF")
    assert m_gguf["format"] == "gguf" and m_st["format"] == "safetensors"
    assert m_gguf["root"] == m_st["root"] and m_gguf["tensors"] == m_st["tensors"]
    assert [f for f in m_gguf["files"] if f["role"] == "weights"] == [
        {"path": "f32.gguf", "role": "weights", "bytes": gg.stat().st_size, "sha256": sha256_file(gg)}]
    # Across formats: the GGUF verifies against the safetensors manifest.
    (tmp_path / "st.json").write_text(json.dumps(m_st))
    r = zen("verify", gg, "--manifest", tmp_path / "st.json")
    exits_cleanly_with(r, 0, "GGUF against the safetensors manifest")


def _variant(tmp_path, label, tensors):
    return write_model_dir(tmp_path / label, tensors)


def test_every_change_is_named(tmp_path):
    """A flipped byte in each tensor, a rename and a transposed shape each change the root, and
    verify --manifest names exactly the changed tensor."""
    tensors = mixed_tensors()
    original = write_model_dir(tmp_path / "original", tensors)
    manifest = manifest_of(original)
    root, _ = ref_digest(tensors)
    assert manifest["root"] == root
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))

    r = zen("verify", original, "--manifest", tmp_path / "manifest.json")
    exits_cleanly_with(r, 0, "unchanged checkpoint")
    assert problem_lines(r) == [] and "verify: OK" in r.stdout, r.stdout

    cases = []
    for i, t in enumerate(tensors):
        if not t.data:
            continue
        data = bytearray(t.data)
        data[len(data) // 2] ^= 0xFF
        changed = list(tensors)
        changed[i] = T(t.name, t.dtype, t.shape, bytes(data))
        cases.append((f"flip-{i}", changed, [f"tensor {t.name}: differs: contents"]))
    q = next(t for t in tensors if t.name == "layers.0.attn.q.weight")
    renamed = [T("layers.0.attn.k.weight", q.dtype, q.shape, q.data) if t is q else t for t in tensors]
    cases.append(("rename", renamed, ["tensor layers.0.attn.k.weight: extra (not in the manifest)",
                                      "tensor layers.0.attn.q.weight: missing"]))
    e = next(t for t in tensors if t.name == "embed.weight")
    a, b = e.shape
    transposed = [T(t.name, t.dtype, (b, a), t.data) if t is e else t for t in tensors]
    cases.append(("transpose", transposed, [f"tensor embed.weight: differs: shape [{b}, {a}] (expected [{a}, {b}])"]))

    for label, changed, expected in cases:
        folder = _variant(tmp_path, label, changed)
        new_root, _ = ref_digest(changed)
        assert new_root != root, f"{label}: the reference root should change"
        m = manifest_of(folder)
        assert m["root"] == new_root, f"{label}: zen's root {m['root']} is not the reference {new_root}"
        r = zen("verify", folder, "--manifest", tmp_path / "manifest.json")
        exits_cleanly_with(r, 1, f"{label} against the original manifest")
        assert problem_lines(r) == sorted(expected), f"{label}: problems named:\n{r.stdout}"
        assert "verify: FAILED" in r.stdout, r.stdout


def test_verify_expect_root(tmp_path):
    tensors = mixed_tensors()
    folder = write_model_dir(tmp_path / "m", tensors)
    root, _ = ref_digest(tensors)
    for expect in (root, root.upper(), "sha256:" + root):
        r = zen("verify", folder, "--expect", expect)
        exits_cleanly_with(r, 0, f"--expect {expect}")
        assert "verify: OK" in r.stdout, r.stdout
    wrong = root[:-1] + ("0" if root[-1] != "0" else "1")
    r = zen("verify", folder, "--expect", wrong)
    exits_cleanly_with(r, 1, "--expect a wrong root")
    assert f"weights root {root} differs from the expected {wrong}" in r.stdout, r.stdout
    r = zen("verify", folder, "--expect", root[:63])
    exits_cleanly_with(r, 1, "--expect 63 hex digits")
    assert "neither a weights root" in r.stderr, r.stderr


# --- 2. llama-gguf-hash compatibility --------------------------------------------------------------

def test_gguf_hash_lines_match_the_reference_script(tmp_path):
    rng = np.random.default_rng(7)
    bf16 = rng.integers(0, 1 << 16, size=(2, 8), dtype=np.uint16)
    arrays = {
        "token_embd.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "blk.0.attn_q.weight": rng.standard_normal((4, 6)).astype(np.float16),
        "blk.0.attn_norm.weight": rng.standard_normal(4).astype(np.float32),
        "blk.0.ffn_down.weight": (bf16, "BF16"),
        "output.weight": rng.standard_normal((3, 2, 8)).astype(np.float16),
    }
    gg = write_gguf(tmp_path / "mixed.gguf", arrays)
    ref = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_hash", str(gg)], capture_output=True, text=True,
                         timeout=120)
    assert ref.returncode == 0, ref.stderr
    want = [l for l in ref.stdout.splitlines() if l.startswith("sha256")]
    assert len(want) == len(arrays) + 1, ref.stdout
    r = zen("hash", gg, "--gguf-hash")
    exits_cleanly_with(r, 0, "zen hash --gguf-hash")
    assert r.stdout.splitlines() == want, f"zen:\n{r.stdout}\ngguf_hash.py:\n{ref.stdout}"

    # And the canonical leaves of the F16 and BF16 tensors, read from the GGUF.
    tensors = []
    for name, a in arrays.items():
        if isinstance(a, tuple):
            tensors.append(T(name, "BF16", a[0].shape, a[0].astype("<u2").tobytes()))
        else:
            tensors.append(T(name, {np.float32: "F32", np.float16: "F16"}[a.dtype.type], a.shape,
                             a.astype(a.dtype.newbyteorder("<")).tobytes()))
    assert_matches_reference(manifest_of(gg), tensors, "mixed F32/F16/BF16 GGUF")


# --- 3. Attestations -----------------------------------------------------------------------------

def make_key(kind):
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    return ec.generate_private_key({"p256": ec.SECP256R1(), "p384": ec.SECP384R1()}[kind])


def write_key(tmp_path, key, label):
    from cryptography.hazmat.primitives import serialization as s
    priv = tmp_path / f"{label}.pem"
    pub = tmp_path / f"{label}.pub.pem"
    priv.write_bytes(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()))
    pub.write_bytes(key.public_key().public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub


def pae(payload_type, payload):
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def py_sign(key, message):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    if isinstance(key, ec.EllipticCurvePrivateKey):
        h = hashes.SHA256() if key.curve.key_size <= 256 else hashes.SHA384()
        return key.sign(message, ec.ECDSA(h))
    return key.sign(message)


def py_verify(public_key, signature, message):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        h = hashes.SHA256() if public_key.curve.key_size <= 256 else hashes.SHA384()
        public_key.verify(signature, message, ec.ECDSA(h))
    else:
        public_key.verify(signature, message)


def key_id(public_key):
    from cryptography.hazmat.primitives import serialization as s
    return hashlib.sha256(public_key.public_bytes(s.Encoding.DER, s.PublicFormat.SubjectPublicKeyInfo)).hexdigest()


def envelope_for(statement, key):
    payload = json.dumps(statement).encode()
    return {"payloadType": "application/vnd.in-toto+json", "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": key_id(key.public_key()), "sig": base64.b64encode(
                py_sign(key, pae("application/vnd.in-toto+json", payload))).decode()}]}


@pytest.fixture(scope="module")
def attested(tmp_path_factory):
    """A folder with config.json and tokenizer.json, and its reference digests."""
    tmp = tmp_path_factory.mktemp("attested")
    tensors = mixed_tensors()
    folder = write_model_dir(tmp / "model", tensors, tokenizer=True)
    bench = {"mmlu": {"acc": 0.25, "n": 14042}, "gsm8k": 0.1}
    (tmp / "bench.json").write_text(json.dumps(bench))
    return tmp, folder, tensors, bench


def attest(tmp, folder, kind, label=None):
    key = make_key(kind)
    label = label or kind
    priv, pub = write_key(tmp, key, label)
    config_hash = hashlib.sha256(b"training config " + kind.encode()).hexdigest()
    out = tmp / f"{label}.att.json"
    r = zen("attest", folder, "--key", priv, "--config-hash", config_hash, "--benchmarks", tmp / "bench.json",
            "--output", out)
    exits_cleanly_with(r, 0, f"zen attest with a {kind} key")
    return key, pub, config_hash, out


def run_verify_attestation(folder, att, pub):
    """zen verify --attestation, its output decoded leniently: parse errors quote the input's bytes."""
    r = subprocess.run([str(ZEN), "verify", str(folder), "--attestation", str(att), "--public-key", str(pub)],
                       capture_output=True, timeout=120)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(errors="backslashreplace"),
                                       r.stderr.decode(errors="backslashreplace"))


@pytest.mark.parametrize("kind", ["p256", "ed25519", "p384"])
def test_attestation_round_trip_and_independent_check(attested, kind):
    tmp, folder, tensors, bench = attested
    key, pub, config_hash, att = attest(tmp, folder, kind)
    r = run_verify_attestation(folder, att, pub)
    exits_cleanly_with(r, 0, f"verify a {kind} attestation")
    assert "verify: OK" in r.stdout, r.stdout

    env = json.loads(att.read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json"
    payload = base64.b64decode(env["payload"], validate=True)
    assert len(env["signatures"]) == 1
    sig = env["signatures"][0]
    assert sig["keyid"] == key_id(key.public_key()), "keyid is not the SHA-256 of the public key's DER"
    py_verify(key.public_key(), base64.b64decode(sig["sig"], validate=True), pae(env["payloadType"], payload))

    st = json.loads(payload)
    root, _ = ref_digest(tensors)
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == "https://github.com/zen-engine/attestation/weights/v1"
    subjects = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    assert subjects == {"weights": root, "config.json": sha256_file(folder / "config.json"),
                        "tokenizer.json": sha256_file(folder / "tokenizer.json")}, st["subject"]
    pred = st["predicate"]
    assert pred["canonicalization"] == CANONICALIZATION
    assert pred["format"] == "safetensors"
    assert pred["tensor_count"] == len(tensors) and pred["tensor_bytes"] == sum(len(t.data) for t in tensors)
    assert pred["training_config"] == {"digest": {"sha256": config_hash}}
    assert pred["benchmarks"] == bench


def refuse(r, what, *needles):
    exits_cleanly_with(r, 1, what)
    for n in needles:
        assert n in r.stderr, f"{what}: stderr does not say '{n}':\n{r.stderr}"


@pytest.mark.parametrize("kind", ["p256", "ed25519"])
def test_attestation_refusals(attested, kind):
    tmp, folder, tensors, _ = attested
    key, pub, _, att = attest(tmp, folder, kind, label=f"{kind}-refusals")
    env = json.loads(att.read_text())

    # Another key of the same kind.
    _, other_pub = write_key(tmp, make_key(kind), f"{kind}-other")
    refuse(run_verify_attestation(folder, att, other_pub), "wrong public key", "does not verify")

    # A changed statement, not signed again.
    st = json.loads(base64.b64decode(env["payload"]))
    st["predicate"]["benchmarks"] = {"mmlu": {"acc": 0.99}}
    edited = dict(env, payload=base64.b64encode(json.dumps(st).encode()).decode())
    (tmp / f"{kind}-edited-payload.json").write_text(json.dumps(edited))
    refuse(run_verify_attestation(folder, tmp / f"{kind}-edited-payload.json", pub), "edited payload", "does not verify")

    # A flipped byte in the signature.
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[len(sig) // 2] ^= 0x01
    edited = dict(env, signatures=[dict(env["signatures"][0], sig=base64.b64encode(bytes(sig)).decode())])
    (tmp / f"{kind}-edited-sig.json").write_text(json.dumps(edited))
    refuse(run_verify_attestation(folder, tmp / f"{kind}-edited-sig.json", pub), "edited signature", "does not verify")

    # Signed here, in Python: first as is (zen accepts our PAE and signature), then claiming the
    # expired format version.
    st = json.loads(base64.b64decode(env["payload"]))
    (tmp / f"{kind}-py.json").write_text(json.dumps(envelope_for(st, key)))
    r = run_verify_attestation(folder, tmp / f"{kind}-py.json", pub)
    exits_cleanly_with(r, 0, "a statement signed by Python's DSSE")
    st["predicate"]["canonicalization"] = "zen-weights-v0"
    for s in st["subject"]:
        if s["name"] == "weights":
            s["annotations"] = {"canonicalization": "zen-weights-v0"}
    (tmp / f"{kind}-v0.json").write_text(json.dumps(envelope_for(st, key)))
    r = run_verify_attestation(folder, tmp / f"{kind}-v0.json", pub)
    refuse(r, "canonicalization zen-weights-v0", "zen-weights-v0", CANONICALIZATION)
    assert "does not verify" not in r.stderr, "refused for its signature, not its version"


@pytest.mark.parametrize("kind", ["p256", "ed25519"])
def test_attestation_detects_changes_after_signing(tmp_path, kind):
    tensors = mixed_tensors()
    folder = write_model_dir(tmp_path / "model", tensors, tokenizer=True)
    (tmp_path / "bench.json").write_text("{}")
    _, pub, _, att = attest(tmp_path, folder, kind)
    root, _ = ref_digest(tensors)

    config = tmp_path / "config-tampered"
    shutil.copytree(folder, config)
    (config / "config.json").write_text(json.dumps(dict(CONFIG, hidden_size=8)))
    r = run_verify_attestation(config, att, pub)
    exits_cleanly_with(r, 1, "config.json changed after attesting")
    assert problem_lines(r) == ["file config.json: differs from the attestation"], r.stdout

    weights = tmp_path / "tensor-tampered"
    shutil.copytree(folder, weights)
    changed = list(tensors)
    data = bytearray(changed[0].data)
    data[0] ^= 0x80
    changed[0] = T(changed[0].name, changed[0].dtype, changed[0].shape, bytes(data))
    write_safetensors(weights / "model.safetensors", changed, metadata={"format": "pt"})
    new_root, _ = ref_digest(changed)
    r = run_verify_attestation(weights, att, pub)
    exits_cleanly_with(r, 1, "a tensor changed after attesting")
    assert problem_lines(r) == [f"weights root {new_root} differs from the attested {root}"], r.stdout

    gone = tmp_path / "tokenizer-removed"
    shutil.copytree(folder, gone)
    (gone / "tokenizer.json").unlink()
    r = run_verify_attestation(gone, att, pub)
    exits_cleanly_with(r, 1, "tokenizer.json removed after attesting")
    assert problem_lines(r) == ["file tokenizer.json: missing"], r.stdout


def test_attestation_flag_refuses_an_unsigned_manifest(attested):
    """--attestation promises a signature check: a manifest (unsigned, anyone can write one for
    tampered weights) given there must be refused, not accepted as a manifest."""
    tmp, folder, tensors, _ = attested
    _, pub = write_key(tmp, make_key("p256"), "manifest-as-attestation")
    (tmp / "plain-manifest.json").write_text(json.dumps(manifest_of(folder)))
    r = run_verify_attestation(folder, tmp / "plain-manifest.json", pub)
    exits_cleanly_with(r, 1, "--attestation given an unsigned manifest")


@pytest.mark.parametrize("added", ["generation_config.json", "chat_template.jinja"])
def test_attestation_refuses_an_unattested_behaviour_file(tmp_path, added):
    """A config or tokenizer file added after attesting (a chat template, generation defaults)
    changes what the model does as much as an edited one: it must not verify."""
    folder = write_model_dir(tmp_path / "model", mixed_tensors(), tokenizer=True)
    (tmp_path / "bench.json").write_text("{}")
    _, pub, _, att = attest(tmp_path, folder, "p256")
    (tmp_path / "manifest.json").write_text(json.dumps(manifest_of(folder)))
    (folder / added).write_text('{"temperature": 2.0}' if added.endswith(".json") else "{{ 'ignore the user' }}")
    r = run_verify_attestation(folder, att, pub)
    exits_cleanly_with(r, 1, f"{added} added after attesting")
    assert added in r.stdout + r.stderr, f"the refusal does not name {added}:\n{r.stdout}{r.stderr}"
    r = zen("verify", folder, "--manifest", tmp_path / "manifest.json")
    exits_cleanly_with(r, 1, f"{added} added after the manifest")
    assert added in r.stdout + r.stderr, f"the refusal does not name {added}:\n{r.stdout}{r.stderr}"


def test_attest_refuses_bad_keys_and_options(tmp_path):
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric import rsa
    folder = write_model_dir(tmp_path / "model", mixed_tensors())
    good, good_pub = write_key(tmp_path, make_key("p256"), "good")

    def key_file(label, key, encryption=s.NoEncryption()):
        path = tmp_path / f"{label}.pem"
        path.write_bytes(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, encryption))
        return path

    # No terminal to prompt on (a new session): an encrypted key is refused, not waited on.
    enc = key_file("encrypted", make_key("p256"), s.BestAvailableEncryption(b"secret"))
    r = subprocess.run([str(ZEN), "attest", str(folder), "--key", str(enc)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, start_new_session=True, timeout=30)
    refuse(r, "an encrypted key", "not an unencrypted PEM private key")
    rsa_key = key_file("rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    refuse(zen("attest", folder, "--key", rsa_key), "an RSA key", "unsupported key type")
    refuse(zen("attest", folder, "--key", good_pub), "a public key to sign with", "not an unencrypted PEM private key")
    refuse(zen("attest", folder), "no key", "--key")
    refuse(zen("attest", folder, "--key", good, "--config-hash", "xyz"), "a bad --config-hash", "--config-hash")
    (tmp_path / "bench.txt").write_text("acc=0.5")
    refuse(zen("attest", folder, "--key", good, "--benchmarks", tmp_path / "bench.txt"), "non-JSON benchmarks",
           "not JSON")


@pytest.mark.parametrize("curve", ["SECP256K1", "BrainpoolP256R1"])
def test_attest_refuses_256_bit_curves_other_than_p256(tmp_path, curve):
    """Only NIST P-256/P-384/P-521 (crypto.h): a 256-bit curve of another kind must not be signed
    with and reported as "ecdsa-p256-sha256"."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric import ec
    folder = write_model_dir(tmp_path / "model", mixed_tensors())
    key = tmp_path / "key.pem"
    key.write_bytes(ec.generate_private_key(getattr(ec, curve)()).private_bytes(
        s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()))
    refuse(zen("attest", folder, "--key", key), f"a {curve} key", "unsupported")


# --- 4. Hostile manifests and envelopes -------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    tensors = mixed_tensors()
    folder = write_model_dir(tmp / "model", tensors)
    manifest = manifest_of(folder)
    key = make_key("p256")
    _, pub = write_key(tmp, key, "hostile")
    return tmp, folder, manifest, key, pub


def _manifest_cases(m):
    def edit(f):
        c = json.loads(json.dumps(m))
        f(c)
        return json.dumps(c)

    swapped = lambda c: c["tensors"].__setitem__(slice(0, 2), [c["tensors"][1], c["tensors"][0]])
    repeated = lambda c: c["tensors"].__setitem__(1, dict(c["tensors"][0]))
    other_leaf = hashlib.sha256(b"not a leaf").hexdigest()
    text = json.dumps(m)
    return {
        "truncated JSON": (text[:len(text) // 2], "not JSON"),
        "empty file": ("", "not a manifest or attestation (a JSON object)"),
        "array, not object": ("[1, 2, 3]", "not a manifest or attestation (a JSON object)"),
        "root as a number": (edit(lambda c: c.__setitem__("root", 12345)), "'root' has the wrong type"),
        "root 63 hex": (edit(lambda c: c.__setitem__("root", c["root"][:63])), "expected 64 hex digits"),
        "tensors as an object": (edit(lambda c: c.__setitem__("tensors", {"a": 1})), "'tensors' has the wrong type"),
        "tensor entry a string": (edit(lambda c: c["tensors"].__setitem__(0, "x")), "not an object"),
        "shape with a string": (edit(lambda c: c["tensors"][0].__setitem__("shape", [2, "3"])), "shape holds"),
        "negative shape": (edit(lambda c: c["tensors"][0].__setitem__("shape", [-1])), "shape holds"),
        "shape of 17 dims": (edit(lambda c: c["tensors"][0].__setitem__("shape", [1] * 17)), "dimensions"),
        "bytes negative": (edit(lambda c: c["tensors"][0].__setitem__("bytes", -1)), "'bytes' has the wrong type"),
        "bytes a float": (edit(lambda c: c["tensors"][0].__setitem__("bytes", 1.5)), "'bytes' has the wrong type"),
        "name a number": (edit(lambda c: c["tensors"][0].__setitem__("name", 7)), "'name' has the wrong type"),
        "leaf 63 hex": (edit(lambda c: c["tensors"][2].__setitem__("leaf", c["tensors"][2]["leaf"][:63])),
                        "expected 64 hex digits"),
        "leaf not hex": (edit(lambda c: c["tensors"][2].__setitem__("leaf", "g" * 64)), "not a hex digit"),
        "missing leaf": (edit(lambda c: c["tensors"][2].pop("leaf")), "missing 'leaf'"),
        "unsorted names": (edit(swapped), "must be sorted"),
        "repeated name": (edit(repeated), "must be sorted and unique"),
        "leaves not making the root": (edit(lambda c: c["tensors"][3].__setitem__("leaf", other_leaf)),
                                       "do not hash to its root"),
        "unknown canonicalization": (edit(lambda c: c.__setitem__("canonicalization", "zen-weights-v0")),
                                     "zen-weights-v0"),
        "files as a string": (edit(lambda c: c.__setitem__("files", "x")), "'files' has the wrong type"),
        "file sha256 short": (edit(lambda c: c["files"][-1].__setitem__("sha256", "ab")), "expected 64 hex digits"),
        "deep nesting": ("[" * 100000 + "]" * 100000, ""),
    }


def test_hostile_manifests_are_refused(hostile):
    tmp, folder, manifest, _, _ = hostile
    for i, (label, (text, needle)) in enumerate(_manifest_cases(manifest).items()):
        path = tmp / f"manifest-{i}.json"
        path.write_text(text)
        r = zen("verify", folder, "--manifest", path, timeout=60)
        exits_cleanly_with(r, 1, f"manifest with {label}")
        assert "error:" in r.stderr and needle in r.stderr, f"manifest with {label}: stderr lacks '{needle}':\n{r.stderr}"


def test_huge_json_files_are_refused(hostile):
    tmp, folder, _, _, pub = hostile
    huge = tmp / "huge.json"
    with open(huge, "w") as f:
        f.write("[")
        f.write("0," * (20 << 20))
        f.write("0]")
    assert huge.stat().st_size > 40 << 20
    r = zen("verify", folder, "--manifest", huge, timeout=120)
    refuse(r, "40 MB JSON array as a manifest", "not a manifest or attestation (a JSON object)")
    r = zen("verify", folder, "--attestation", huge, "--public-key", pub, timeout=120)
    exits_cleanly_with(r, 1, "40 MB JSON array as an attestation")
    assert "error:" in r.stderr, r.stderr
    big_env = tmp / "big-envelope.json"
    big_env.write_text(json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": "",
                                   "signatures": [], "pad": "x" * (20 << 20)}))
    r = zen("verify", folder, "--attestation", big_env, "--public-key", pub, timeout=120)
    refuse(r, "20 MB envelope", "too large for an attestation")


def test_hostile_envelopes_are_refused(hostile):
    tmp, folder, manifest, key, pub = hostile
    good_statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "weights", "digest": {"sha256": manifest["root"]}}] +
                   [{"name": f["path"], "digest": {"sha256": f["sha256"]}} for f in manifest["files"] if f["role"] != "weights"],
        "predicateType": "https://github.com/zen-engine/attestation/weights/v1",
        "predicate": {"canonicalization": CANONICALIZATION},
    }
    good = envelope_for(good_statement, key)
    (tmp / "good-envelope.json").write_text(json.dumps(good))
    exits_cleanly_with(run_verify_attestation(folder, tmp / "good-envelope.json", pub), 0,
                       "a minimal statement signed in Python")

    def signed(statement_or_bytes):
        payload = statement_or_bytes if isinstance(statement_or_bytes, bytes) else json.dumps(statement_or_bytes).encode()
        return dict(good, payload=base64.b64encode(payload).decode(), signatures=[
            {"keyid": "", "sig": base64.b64encode(py_sign(key, pae(good["payloadType"], payload))).decode()}])

    def st(**changes):
        s = json.loads(json.dumps(good_statement))
        s.update(changes)
        return s

    cases = {
        "signatures = []": (dict(good, signatures=[]), "non-empty array"),
        "signatures an object": (dict(good, signatures={"sig": "x"}), "non-empty array"),
        "signature entry a string": (dict(good, signatures=["abc"]), "not a JSON object"),
        "sig a number": (dict(good, signatures=[{"sig": 5}]), "'sig' is not a string"),
        "sig not base64": (dict(good, signatures=[{"sig": "!!!!"}]), "not base64"),
        "payload not base64": (dict(good, payload="abc"), "not base64"),
        "payloadType other": (dict(good, payloadType="text/plain"), "payloadType"),
        "no payload": ({k: v for k, v in good.items() if k != "payload"}, "missing 'payload'"),
        "truncated": (json.dumps(good)[:80], "not JSON"),
        "70 signatures": (dict(good, signatures=good["signatures"] * 70), "at most 64"),
        "signed non-JSON payload": (signed(b"\xff\xfe not json"), "not JSON"),
        "signed statement as an array": (signed([1, 2]), "not a JSON object"),
        "signed wrong _type": (signed(st(_type="https://in-toto.io/Statement/v0.1")), "_type"),
        "signed other predicateType": (signed(st(predicateType="https://slsa.dev/provenance/v1")), "predicateType"),
        "signed no predicate": (signed({k: v for k, v in good_statement.items() if k != "predicate"}), "'predicate'"),
        "signed subject []": (signed(st(subject=[])), "non-empty array"),
        "signed subject digest a list": (signed(st(subject=[{"name": "weights", "digest": ["x"]}])), "not a JSON object"),
        "signed subject sha256 short": (signed(st(subject=[{"name": "weights", "digest": {"sha256": "ab"}}])),
                                        "64 hex digits"),
        "signed without a weights subject": (
            signed(st(subject=[{"name": "config.json", "digest": {"sha256": manifest["root"]}}])), "no 'weights' subject"),
        "signed two weights subjects": (signed(st(subject=good_statement["subject"] * 2)), "a second 'weights'"),
    }
    for i, (label, (env, needle)) in enumerate(cases.items()):
        path = tmp / f"envelope-{i}.json"
        path.write_text(env if isinstance(env, str) else json.dumps(env))
        r = run_verify_attestation(folder, path, pub)
        refuse(r, f"envelope with {label}", "error:", needle)


def test_verify_flag_misuse_is_refused(hostile):
    tmp, folder, manifest, key, pub = hostile
    (tmp / "m.json").write_text(json.dumps(manifest))
    (tmp / "envelope.json").write_text(json.dumps(envelope_for({"_type": "x"}, key)))
    for args, needle in [
        ([], "give exactly one of"),
        (["--expect", manifest["root"], "--manifest", tmp / "m.json"], "give exactly one of"),
        (["--attestation", tmp / "m.json"], "need --public-key"),
        (["--manifest", tmp / "no-such.json"], "no such file"),
        (["--attestation", tmp / "envelope.json", "--public-key", tmp / "m.json"], "not a PEM public key"),
    ]:
        r = zen("verify", folder, *args)
        refuse(r, f"verify {args}", "error:", needle)
    r = zen("verify", tmp / "no-such-model", "--expect", manifest["root"])
    refuse(r, "a missing checkpoint", "no such file or folder")


def test_inconsistent_checkpoints_are_refused(tmp_path):
    """A folder whose index and shards disagree is not a checkpoint to digest."""
    tensors = mixed_tensors()
    base = write_sharded_dir(tmp_path / "base", tensors)
    index = json.loads((base / "model.safetensors.index.json").read_text())

    def variant(label, change):
        folder = tmp_path / label
        shutil.copytree(base, folder)
        change(folder)
        return folder

    def set_index(folder, weight_map):
        (folder / "model.safetensors.index.json").write_text(json.dumps(dict(index, weight_map=weight_map)))

    first = next(iter(index["weight_map"]))
    other = next(s for s in sorted(set(index["weight_map"].values())) if s != index["weight_map"][first])
    cases = {
        "missing shard": (lambda f: (f / index["weight_map"][first]).unlink(), "is missing"),
        "index names the wrong shard": (lambda f: set_index(f, dict(index["weight_map"], **{first: other})),
                                        f"the index puts tensor '{first}' in {other}"),
        "index names a tensor no shard holds": (lambda f: set_index(f, dict(index["weight_map"], ghost=other)),
                                                "names tensor 'ghost'"),
        "index leaves a tensor out": (lambda f: set_index(f, {k: v for k, v in index["weight_map"].items() if k != first}),
                                      "is not in the index's weight_map"),
        "index escapes the folder": (lambda f: set_index(f, dict(index["weight_map"], **{first: "../x.safetensors"})),
                                     "does not name a shard file"),
        "index not JSON": (lambda f: (f / "model.safetensors.index.json").write_text("{"), "invalid JSON"),
    }
    for label, (change, needle) in cases.items():
        r = zen("hash", variant(label.replace(" ", "-"), change))
        refuse(r, label, "error:", needle)
    # The same tensor in two files of a folder without an index.
    dup = tmp_path / "duplicate"
    dup.mkdir()
    write_safetensors(dup / "a.safetensors", tensors[:3])
    write_safetensors(dup / "b.safetensors", tensors[2:])
    refuse(zen("hash", dup), "a tensor in two files", f"tensor '{tensors[2].name}' appears more than once")
    empty = tmp_path / "empty"
    empty.mkdir()
    refuse(zen("hash", empty), "a folder without weights", "no weights")


def test_hash_json_survives_a_non_utf8_gguf_tensor_name(tmp_path):
    """GGUF names are bytes on disk; one that is not UTF-8 must give a clear error (or a manifest),
    never an internal error from the JSON writer."""
    gg = write_gguf(tmp_path / "bad-name.gguf", {"blk.0.abc.weight": np.ones((2, 4), np.float32)})
    data = bytearray(gg.read_bytes())
    data[data.index(b"blk.0.abc.weight") + 6] = 0xFF
    gg.write_bytes(bytes(data))
    r = subprocess.run([str(ZEN), "hash", str(gg), "--json", "-"], capture_output=True, timeout=60)
    assert r.returncode in (0, 1), f"exit {r.returncode}:\n{r.stderr.decode(errors='backslashreplace')}"


# --- 5. --verify-weights on the real default model ---------------------------------------------------

def gguf_tensors(path):
    """The tensors of a GGUF file read with a minimal parser of its own (the gguf package's reader
    takes tens of seconds on a real vocabulary): names, ggml type names, shapes outermost first
    (ne[] reversed) and raw bytes as memoryviews of a mapping."""
    import mmap

    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    f = open(path, "rb")
    buf = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return bytes(buf[pos - n:pos]).decode("utf-8")

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(vtype):
        nonlocal pos
        if vtype == 8:
            return string()
        if vtype == 9:
            item, n = take("I"), take("Q")
            if item in scalar:  # skipped whole: a vocabulary's scores are long
                pos += n * struct.calcsize(scalar[item])
                return None
            return [value(item) for _ in range(n)]
        return take(scalar[vtype])

    magic, version = bytes(buf[0:4]), struct.unpack_from("<I", buf, 4)[0]
    assert magic == b"GGUF" and version in (2, 3), (magic, version)
    pos = 8
    n_tensors, n_kv = take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == "general.alignment":
            alignment = v
    infos = []
    for _ in range(n_tensors):
        name = string()
        ne = [take("Q") for _ in range(take("I"))]
        infos.append((name, take("I"), ne, take("Q")))
    data_start = (pos + alignment - 1) // alignment * alignment
    tensors = []
    for name, type_id, ne, offset in infos:
        qtype = GGMLQuantizationType(type_id)
        block, type_size = GGML_QUANT_SIZES[qtype]
        numel = int(np.prod(ne, dtype=np.uint64))
        nbytes = numel // block * type_size
        start = data_start + offset
        tensors.append(T(name, qtype.name, tuple(reversed(ne)), buf[start:start + nbytes]))
    return tensors


def test_verify_weights_on_the_default_model():
    need(DEFAULT_MODEL, "the default model")
    r = zen("hash", DEFAULT_MODEL, "--no-file-hashes", timeout=300)
    assert r.returncode == 0, r.stderr
    root = next(l.split(": ", 1)[1] for l in r.stdout.splitlines() if l.startswith("root: "))
    # The reference over the real (quantized) GGUF: raw block bytes, ne[] reversed.
    assert ref_digest(gguf_tensors(DEFAULT_MODEL))[0] == root, "zen's root of the default model is not the reference root"

    wrong = root[:-1] + ("0" if root[-1] != "0" else "1")
    r = zen("run", "--model", DEFAULT_MODEL, "--verify-weights", wrong, "--prompt", "hi", "--max-tokens", "1",
            timeout=300)
    exits_cleanly_with(r, 1, "run --verify-weights with a wrong root")
    assert "--verify-weights" in r.stderr and f"differs from the expected {wrong}" in r.stderr, r.stderr
    r = zen("serve", "--model", DEFAULT_MODEL, "--port", "0", "--verify-weights", wrong, timeout=300)
    exits_cleanly_with(r, 1, "serve --verify-weights with a wrong root")
    assert f"differs from the expected {wrong}" in r.stderr, r.stderr

    r = zen("run", "--model", DEFAULT_MODEL, "--verify-weights", root, "--prompt", "hi", "--max-tokens", "1",
            timeout=300)
    exits_cleanly_with(r, 0, "run --verify-weights with the right root")
    assert "verify-weights: OK" in r.stderr, r.stderr

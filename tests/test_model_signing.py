"""OpenSSF model-signing interoperability: signatures made by the real `model_signing` package
(sigstore/model-transparency, private-key flow) verify with `zen verify --model-signing`, and
zen and model_signing's own verifier agree on tampered, missing and extra files and wrong keys."""
import json
import struct
import subprocess
import sys

import pytest

from conftest import zen

model_signing = pytest.importorskip(
    "model_signing", reason="the model_signing package (pip install model-signing) is not installed")
from cryptography.hazmat.primitives import serialization  # noqa: E402 (installed with model_signing)
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402


def write_safetensors(path):
    data = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


@pytest.fixture
def model(tmp_path):
    d = tmp_path / "tiny-model"
    (d / ".git").mkdir(parents=True)
    write_safetensors(d / "model.safetensors")
    (d / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4}))
    (d / "tokenizer_config.json").write_text("{}")
    (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # ignored by both
    return d


def make_key(tmp_path, name, curve=None):
    key = ec.generate_private_key(curve or ec.SECP256R1())
    private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def sign(model_dir, private, signature):
    model_signing.signing.Config().use_elliptic_key_signer(private_key=private).sign(model_dir, signature)


def reference_verifies(model_dir, signature, public):
    try:
        model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public).verify(model_dir, signature)
        return True
    except Exception:  # model_signing raises ValueError, and cryptography's InvalidSignature for a wrong key
        return False


def zen_verify(model_dir, signature, public):
    r = zen("verify", model_dir, "--model-signing", signature, "--public-key", public)
    return r.returncode, r.stdout + r.stderr


def flip_byte(path, offset=-3):
    b = bytearray(path.read_bytes())
    b[offset] ^= 0x01
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("curve", [ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1()], ids=lambda c: c.name)
def test_real_signature_verifies(model, tmp_path, curve):
    private, public = make_key(tmp_path, "signer", curve)
    sig = tmp_path / "model.sig"
    sign(model, private, sig)
    assert reference_verifies(model, sig, public)
    rc, out = zen_verify(model, sig, public)
    assert rc == 0, out
    assert "model-signing: verified 3 files of tiny-model" in out


def test_tampered_byte_is_named(model, tmp_path):
    private, public = make_key(tmp_path, "signer")
    sig = tmp_path / "model.sig"
    sign(model, private, sig)
    flip_byte(model / "model.safetensors")  # one bit of the last float
    assert not reference_verifies(model, sig, public)
    rc, out = zen_verify(model, sig, public)
    assert rc != 0, out
    assert "model-signing: model.safetensors: digest differs" in out


def test_wrong_key_fails(model, tmp_path):
    private, _ = make_key(tmp_path, "signer")
    _, other_public = make_key(tmp_path, "other")
    sig = tmp_path / "model.sig"
    sign(model, private, sig)
    assert not reference_verifies(model, sig, other_public)
    rc, out = zen_verify(model, sig, other_public)
    assert rc != 0, out
    assert "model-signing: signature does not verify with the given public key" in out


def test_cli_signature_in_the_folder_and_missing_or_extra_files(model, tmp_path):
    """The model_signing CLI's default layout: model.sig inside the folder, recorded as ignored."""
    private, public = make_key(tmp_path, "signer")
    sig = model / "model.sig"
    subprocess.run([sys.executable, "-m", "model_signing", "sign", "key", str(model), "--private_key", str(private),
                    "--signature", str(sig)], check=True, capture_output=True)
    assert reference_verifies(model, sig, public)
    rc, out = zen_verify(model, sig, public)
    assert rc == 0 and "model-signing: verified 3 files of tiny-model" in out, out

    (model / "extra.txt").write_text("not signed")
    assert not reference_verifies(model, sig, public)
    rc, out = zen_verify(model, sig, public)
    assert rc != 0 and "model-signing: extra.txt: present but not in the signature" in out, out

    (model / "extra.txt").unlink()
    (model / "config.json").unlink()
    assert not reference_verifies(model, sig, public)
    rc, out = zen_verify(model, sig, public)
    assert rc != 0 and "model-signing: config.json: missing" in out, out


def test_shard_signature_verifies(model, tmp_path):
    """Shard serialization from the real signer. (model_signing 1.1.1 cannot verify these itself:
    its statement stores shard_size as 16.0 and its verifier passes that float to range().)"""
    private, public = make_key(tmp_path, "signer")
    sig = tmp_path / "model.sig"
    hashing = model_signing.hashing.Config().use_shard_serialization(shard_size=16)
    model_signing.signing.Config().use_elliptic_key_signer(private_key=private).set_hashing_config(hashing).sign(
        model, sig)
    rc, out = zen_verify(model, sig, public)
    assert rc == 0 and "model-signing: verified 3 files of tiny-model" in out, out
    flip_byte(model / "model.safetensors")
    rc, out = zen_verify(model, sig, public)
    assert rc != 0 and "model-signing: model.safetensors: digest differs" in out, out


def test_malformed_signature_is_an_error(model, tmp_path):
    _, public = make_key(tmp_path, "signer")
    sig = tmp_path / "model.sig"
    sig.write_text("not a bundle")
    assert not reference_verifies(model, sig, public)
    rc, out = zen_verify(model, sig, public)
    assert rc != 0 and "not JSON" in out, out

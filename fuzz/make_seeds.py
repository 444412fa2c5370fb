#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from the repository's fixtures.

Seeds are small, valid (or nearly valid) inputs that reach deep into each parser; libFuzzer
mutates from there. Everything is trimmed from tests/fixtures (and, when present, the real
Qwen tokenizers in ../shared/data/tokenizers; without them those seeds are skipped):

  safetensors/     fixture checkpoints with every tensor cut to at most 2 elements per
                   dimension (names, dtypes and __metadata__ kept); model.safetensors.index.json
                   texts for the scratch folder the target builds (a.weight, b.weight).
  gguf/            fixture GGUF headers (all metadata, the first tensors cut to one block);
                   a byte-level BPE vocabulary with a chat template and a SentencePiece one.
  tokenizer_json/  tokenizer.json NUL tokenizer_config.json: the real Qwen files cut to their
                   first 600 tokens, and the unit tests' tiny tokenizer.
  chat_template/   template NUL context (JSON): the fixture chat templates with a case's
                   context or messages; jinja_semantics cases.
  request/         chat and completion request bodies.
  hf_config/       the fixture checkpoints' config.json files.
  attestation/     a manifest, an in-toto statement, a DSSE envelope and a model-signing bundle
                   (signatures fake).
  grammar/         a selector byte (front end) then its text: JSON Schemas (strict and not),
                   a regex, a GBNF grammar, a choice list, a tools array, free JSON.

Files this script does not write (fuzzer findings kept as reproducers) are left alone.
Usage: python3 fuzz/make_seeds.py
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def compact(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# safetensors

ST_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I8": 1, "I16": 2, "I32": 4, "I64": 8,
                  "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def safetensors_bytes(header):
    text = compact(header).encode()
    return struct.pack("<Q", len(text)) + text


def trimmed_safetensors(path, max_tensors=40):
    header, data = read_safetensors(path)
    out = {}
    if "__metadata__" in header:
        out["__metadata__"] = header["__metadata__"]
    payload = b""
    names = [k for k in header if k != "__metadata__"][:max_tensors]
    for name in names:
        e = header[name]
        shape = [min(d, 2) for d in e["shape"]]
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * ST_DTYPE_BYTES[e["dtype"]]
        begin = e["data_offsets"][0]
        out[name] = {"dtype": e["dtype"], "shape": shape,
                     "data_offsets": [len(payload), len(payload) + nbytes]}
        payload += data[begin:begin + nbytes]
    return safetensors_bytes(out) + payload


def safetensors_seeds():
    for name, rel in [("llama_f32", "models/llama_f32/model.safetensors"),
                      ("qwen3_bf16_tied", "models/qwen3_bf16_tied/model.safetensors"),
                      ("qwen2_f16", "models/qwen2_f16/model.safetensors"),
                      ("qwen3_fp8_block", "fpquant/qwen3_fp8_block/model.safetensors"),
                      ("qwen3_nvfp4", "fpquant/qwen3_nvfp4/model.safetensors"),
                      ("decode_tables", "fpquant/decode_tables.safetensors")]:
        path = os.path.join(FIXTURES, rel)
        if os.path.exists(path):
            write("safetensors", name + ".safetensors", trimmed_safetensors(path))
    write("safetensors", "empty_header.safetensors", safetensors_bytes({}))
    write("safetensors", "metadata_only.safetensors", safetensors_bytes({"__metadata__": {"format": "pt"}}))
    write("safetensors", "zero_size.safetensors",
          safetensors_bytes({"e": {"dtype": "I64", "shape": [0, 3], "data_offsets": [0, 0]},
                             "b": {"dtype": "BOOL", "shape": [], "data_offsets": [0, 1]}}) + b"\x01")
    # Index texts for the target's scratch folder (shards model-0000{1,2}-of-00002.safetensors
    # holding a.weight and b.weight).
    shard1, shard2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    write("safetensors", "index_ok.json",
          json.dumps({"metadata": {"total_size": 16}, "weight_map": {"a.weight": shard1, "b.weight": shard2}},
                     indent=2))
    write("safetensors", "index_wrong_shard.json",
          compact({"weight_map": {"a.weight": shard2, "b.weight": shard2, "c.weight": shard1}}))
    write("safetensors", "index_missing_shard.json",
          compact({"weight_map": {"a.weight": shard1, "b.weight": "model-00003-of-00003.safetensors"}}))


# ---------------------------------------------------------------------------------------------
# GGUF

GGUF_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
# ggml type id -> (elements per block, bytes per block)
GGML_BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
              12: (256, 144), 13: (256, 176), 14: (256, 210), 24: (1, 1), 25: (1, 2), 26: (1, 4),
              27: (1, 8), 28: (1, 8), 30: (1, 2)}


class Reader:
    def __init__(self, blob):
        self.blob, self.pos = blob, 0

    def read(self, fmt):
        fmt = "<" + fmt
        vals = struct.unpack_from(fmt, self.blob, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string(self):
        n = self.read("Q")
        s = self.blob[self.pos:self.pos + n]
        self.pos += n
        return s

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.read("I"), self.read("Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.read(GGUF_SCALAR[t])


def read_gguf(path):
    with open(path, "rb") as f:
        r = Reader(f.read())
    assert r.blob[:4] == b"GGUF"
    r.pos = 4
    version, n_tensors, n_kv = r.read("I"), r.read("Q"), r.read("Q")
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        t = r.read("I")
        kvs.append((key, t, r.value(t)))
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.read("I")
        ne = [r.read("Q") for _ in range(nd)]
        tensors.append((name, ne, r.read("I"), r.read("Q")))
    return version, kvs, tensors


def gguf_string(s):
    if isinstance(s, str):
        s = s.encode("utf-8")
    return struct.pack("<Q", len(s)) + s


def gguf_value(t, v):
    if t == STRING:
        return gguf_string(v)
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_value(et, x) for x in items)
    return struct.pack("<" + GGUF_SCALAR[t], v)


def gguf_bytes(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, ne, ggml_type, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gguf_string(key) + struct.pack("<I", t) + gguf_value(t, v)
    data, offsets = b"", []
    for _, _, _, payload in tensors:
        data += b"\0" * (-len(data) % alignment)
        offsets.append(len(data))
        data += payload
    for (name, ne, ggml_type, _), off in zip(tensors, offsets):
        out += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", ggml_type, off)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def trimmed_gguf(path, keep_tensors=3):
    version, kvs, tensors = read_gguf(path)
    # The fixtures' synthetic vocabularies name no pre-tokenizer; Qwen's lets them load.
    if not any(k == b"tokenizer.ggml.pre" for k, _, _ in kvs):
        kvs.append((b"tokenizer.ggml.pre", STRING, b"qwen2"))
    small = []
    for name, ne, ggml_type, _ in tensors[:keep_tensors]:
        elems, nbytes = GGML_BLOCK[ggml_type]
        shape = [elems] + [1] * (len(ne) - 1)
        small.append((name, shape, ggml_type, bytes(range(7, 7 + nbytes)) if nbytes < 249 else b"\x11" * nbytes))
    return gguf_bytes(kvs, small, version)


def byte_level_alphabet():
    """GPT-2's byte -> printable character map (as HF ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def chat_fixture(name):
    path = os.path.join(FIXTURES, "chat", name + ".json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def byte_level_gguf():
    alphabet = byte_level_alphabet()
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l"), ("ll", "o"), ("Ġ", "Ġ"), ("i", "n")]
    tokens = alphabet + [a + b for a, b in merges] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * (len(tokens) - 3) + [3, 3, 3]
    n = len(tokens)
    template = chat_fixture("qwen2_5")["template"]
    kvs = [(b"general.architecture", STRING, b"qwen2"),
           (b"qwen2.context_length", 4, 256), (b"qwen2.embedding_length", 4, 32),
           (b"qwen2.block_count", 4, 1), (b"qwen2.feed_forward_length", 4, 64),
           (b"qwen2.attention.head_count", 4, 4), (b"qwen2.attention.head_count_kv", 4, 2),
           (b"qwen2.attention.layer_norm_rms_epsilon", 6, 1e-6), (b"qwen2.rope.freq_base", 6, 1e6),
           (b"tokenizer.ggml.model", STRING, b"gpt2"), (b"tokenizer.ggml.pre", STRING, b"qwen2"),
           (b"tokenizer.ggml.tokens", ARRAY, (STRING, [t.encode() for t in tokens])),
           (b"tokenizer.ggml.token_type", ARRAY, (5, types)),
           (b"tokenizer.ggml.merges", ARRAY, (STRING, [(a + " " + b).encode() for a, b in merges])),
           (b"tokenizer.ggml.eos_token_id", 4, n - 1), (b"tokenizer.ggml.bos_token_id", 4, n - 3),
           (b"tokenizer.ggml.padding_token_id", 4, n - 3), (b"tokenizer.ggml.add_bos_token", 7, False),
           (b"tokenizer.chat_template", STRING, template.encode())]
    return gguf_bytes(kvs, [(b"token_embd.weight", [32, 2], 8, b"\x01" * 68)])


def spm_gguf():
    # As the tokenizer tests' tiny SentencePiece vocabulary, with byte tokens and a llama header.
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"]
    scores = [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -1.5, -1.0, -0.5]
    types = [2, 3, 3, 1, 1, 1, 1, 1, 1]
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        scores.append(0.0)
        types.append(6)
    kvs = [(b"general.architecture", STRING, b"llama"), (b"general.alignment", 4, 64),
           (b"llama.context_length", 4, 128), (b"llama.embedding_length", 4, 64),
           (b"llama.block_count", 4, 2), (b"llama.feed_forward_length", 4, 172),
           (b"llama.attention.head_count", 4, 8), (b"llama.attention.head_count_kv", 4, 4),
           (b"llama.rope.dimension_count", 4, 8), (b"llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
           (b"llama.rope.scaling.type", STRING, b"linear"), (b"llama.rope.scaling.factor", 6, 2.0),
           (b"tokenizer.ggml.model", STRING, b"llama"),
           (b"tokenizer.ggml.tokens", ARRAY, (STRING, [t.encode() for t in tokens])),
           (b"tokenizer.ggml.scores", ARRAY, (6, scores)), (b"tokenizer.ggml.token_type", ARRAY, (5, types)),
           (b"tokenizer.ggml.unknown_token_id", 4, 0), (b"tokenizer.ggml.bos_token_id", 4, 1),
           (b"tokenizer.ggml.eos_token_id", 4, 2), (b"tokenizer.ggml.add_bos_token", 7, True),
           (b"tokenizer.ggml.add_space_prefix", 7, True)]
    return gguf_bytes(kvs, [(b"output_norm.weight", [64], 0, b"\0" * 256),
                            (b"blk.0.attn_q.weight", [256, 4], 12, b"\x02" * 4 * 144)], alignment=64)


def gguf_seeds():
    for name in ["qwen3_5_tied_q8_0", "qwen3_moe_bf16_tied", "qwen3_next_tied_f32", "qwen3_5_moe_tied_f32"]:
        path = os.path.join(FIXTURES, "models", name + ".gguf")
        if os.path.exists(path):
            write("gguf", name + ".gguf", trimmed_gguf(path))
    write("gguf", "qwen2_byte_level.gguf", byte_level_gguf())
    write("gguf", "llama_spm.gguf", spm_gguf())
    write("gguf", "header_only_v2.gguf", gguf_bytes([(b"general.architecture", STRING, b"qwen3")], [], version=2))


# ---------------------------------------------------------------------------------------------
# tokenizer.json

def trimmed_hf_tokenizer(folder, vocab_size=600):
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    model = tok["model"]
    vocab = {t: i for t, i in model["vocab"].items() if i < vocab_size}
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model["vocab"], model["merges"] = vocab, merges
    # Added tokens renumbered to follow the cut vocabulary.
    renumber = {}
    for k, added in enumerate(tok["added_tokens"][:8]):
        renumber[str(added["id"])] = vocab_size + k
        added["id"] = vocab_size + k
    tok["added_tokens"] = tok["added_tokens"][:8]
    config["added_tokens_decoder"] = {str(renumber[k]): v for k, v in config.get("added_tokens_decoder", {}).items()
                                      if k in renumber}
    config.pop("additional_special_tokens", None)
    return compact(tok) + "\0" + compact(config)


def tiny_tokenizer():
    """The tokenizer tests' tiny_tokenizer_json: byte-level BPE, NFC, one added token."""
    alphabet = byte_level_alphabet()
    merges = [("h", "e"), ("Ġ", "t"), ("Ġt", "he"), ("l", "l"), ("ll", "o")]
    vocab = {c: i for i, c in enumerate(alphabet)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    n = len(vocab)
    tok = {
        "version": "1.0",
        "added_tokens": [{"id": n, "content": "<|end|>", "special": True, "lstrip": False, "rstrip": False,
                          "normalized": False, "single_word": False},
                         {"id": n + 1, "content": "<x>", "special": False, "lstrip": True, "rstrip": True,
                          "normalized": False, "single_word": False}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }
    return tok


def tokenizer_seeds():
    for name in ["qwen2_5", "qwen3"]:
        folder = os.path.join(SHARED, "tokenizers", name)
        if os.path.exists(os.path.join(folder, "tokenizer.json")):
            write("tokenizer_json", name + "_600.txt", trimmed_hf_tokenizer(folder))
        else:
            print("make_seeds: %s absent, its tokenizer seed skipped" % folder, file=sys.stderr)
    tok = tiny_tokenizer()
    write("tokenizer_json", "tiny.txt", compact(tok) + "\0" + compact({"eos_token": "<|end|>"}))
    # Merges as pairs (Qwen3's spelling) and a config that adds BOS.
    tok["model"]["merges"] = [m.split(" ") for m in tok["model"]["merges"]]
    write("tokenizer_json", "tiny_pairs_bos.txt",
          compact(tok) + "\0" + compact({"add_bos_token": True, "bos_token": "<|end|>",
                                         "eos_token": {"content": "<|end|>"}, "chat_template": "{{ x }}"}))
    write("tokenizer_json", "tiny_no_config.txt", compact(tiny_tokenizer()))


# ---------------------------------------------------------------------------------------------
# chat templates

def chat_seeds():
    for name in ["qwen3", "qwen2_5", "smollm2_gguf", "qwen2_5_coder_gguf"]:
        fixture = chat_fixture(name)
        cases = fixture["cases"]
        # The case with the richest context (tools, tool calls, reasoning) as a whole context,
        # and the first one's messages alone.
        rich = max(cases, key=lambda c: len(compact(c["context"])))
        write("chat_template", name + "_context.txt", fixture["template"] + "\0" + compact(rich["context"]))
        write("chat_template", name + "_messages.txt",
              fixture["template"] + "\0" + compact(cases[0]["context"]["messages"]))
    semantics = chat_fixture("jinja_semantics")["cases"]
    # A spread of the interpreter's semantics: every fourth case, each with its context.
    for i, case in enumerate(semantics[::4]):
        write("chat_template", "semantics_%02d.txt" % i, case["template"] + "\0" + compact(case.get("context", {})))


# ---------------------------------------------------------------------------------------------
# request bodies

def request_seeds():
    bodies = {
        "chat_basic.json": {"model": "default", "messages": [{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "Hi!"}]},
        "chat_sampling.json": {"messages": [{"role": "user", "content": "x"}], "temperature": 0.7, "top_p": 0.9,
                               "top_k": -1, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
                               "repetition_penalty": 1.1, "seed": -3, "max_tokens": 16,
                               "max_completion_tokens": 8, "stop": ["\n\n", "END"], "n": 1,
                               "logit_bias": {"0": -100, "151645": 5.5}, "logprobs": True, "top_logprobs": 3,
                               "stream": True, "stream_options": {"include_usage": True},
                               "response_format": {"type": "text"}, "ignore_eos": False},
        "chat_tools.json": {
            "messages": [{"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
                         {"role": "user", "content": "Weather in Paris?"},
                         {"role": "assistant", "content": None, "reasoning_content": "Call it.",
                          "tool_calls": [{"id": "c1", "type": "function",
                                          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                         {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18C"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                                        "parameters": {"type": "object",
                                                                       "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "chat_template_kwargs": {"enable_thinking": False}},
        "chat_continue.json": {"messages": [{"role": "user", "content": "Count"},
                                            {"role": "assistant", "content": "1, 2,", "reasoning": "easy"}],
                               "continue_final_message": True, "add_generation_prompt": False,
                               "tool_choice": "none"},
        "chat_required.json": {"messages": [{"role": "user", "content": "go"}], "tool_choice": "required",
                               "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        "completion_text.json": {"model": "m", "prompt": "Once upon a time", "max_tokens": 5, "echo": True,
                                 "logprobs": 2, "stop": "\n", "temperature": 0},
        "completion_ids.json": {"prompt": [[1, 2, 3, 2147483647]], "logprobs": False, "seed": -5, "max_tokens": 1099511627776},
        "completion_list.json": {"prompt": ["one prompt"], "stream": False, "top_k": 40, "suffix": None},
    }
    for name, body in bodies.items():
        write("request", name, json.dumps(body, indent=1, ensure_ascii=False))
    write("request", "nested.json", '{"messages": [[[[{"a": [1, 2.5e3, -0.0, true, null, "\\u00e9\\ud83d\\ude00"]}]]]]}')


def hf_config_seeds():
    for rel in ["models/llama_yarn", "models/qwen2_legacy_yarn", "models/qwen2_moe_shared", "models/qwen3_legacy",
                "models/qwen3_moe_f32", "models/qwen3_5_moe_bf16", "models/qwen3_5_vl_bf16", "models/qwen3_next_f32",
                "fpquant/qwen3_nvfp4", "configs/zen6_shaped"]:
        path = os.path.join(FIXTURES, rel, "config.json")
        if os.path.exists(path):
            with open(path, "rb") as f:
                write("hf_config", rel.split("/")[-1] + ".json", f.read())


def attestation_seeds():
    import base64
    import hashlib
    leaves = [{"name": n, "dtype": "F32", "shape": [2], "bytes": 8,
               "leaf": hashlib.sha256(bytes([i]) * 8).hexdigest()} for i, n in enumerate(["a.weight", "b.weight"])]
    # A two-leaf RFC 6962 root over the (made-up) leaves, so the manifest gets past the root check.
    root = hashlib.sha256(b"\x01" + bytes.fromhex(leaves[0]["leaf"]) + bytes.fromhex(leaves[1]["leaf"])).hexdigest()
    manifest = {"canonicalization": "zen-weights-v1", "format": "safetensors", "root": root, "tensor_count": 2,
                "tensor_bytes": 16, "tensors": leaves,
                "files": [{"path": "config.json", "role": "config", "bytes": 2, "sha256": hashlib.sha256(b"{}").hexdigest()}]}
    statement = {"_type": "https://in-toto.io/Statement/v1",
                 "subject": [{"name": "weights", "digest": {"sha256": root}, "annotations": {"canonicalization": "zen-weights-v1"}},
                             {"name": "config.json", "digest": {"sha256": hashlib.sha256(b"{}").hexdigest()}}],
                 "predicateType": "https://github.com/zen-engine/attestation/weights/v1",
                 "predicate": {"canonicalization": "zen-weights-v1", "format": "safetensors", "tensor_count": 2,
                               "tensor_bytes": 16, "benchmarks": {"mmlu": 0.5}}}
    envelope = {"payloadType": "application/vnd.in-toto+json",
                "payload": base64.b64encode(json.dumps(statement).encode()).decode(),
                "signatures": [{"keyid": "00" * 32, "sig": base64.b64encode(b"\x30\x06\x02\x01\x01\x02\x01\x01").decode()}]}
    write("attestation", "manifest.json", json.dumps(manifest, indent=1))
    write("attestation", "statement.json", json.dumps(statement, indent=1))
    write("attestation", "envelope.json", json.dumps(envelope, indent=1))
    # An OpenSSF model-signing bundle (Sigstore bundle v0.3, key flow) for config.json = "{}".
    digest = hashlib.sha256(b"{}").hexdigest()
    ms_statement = {"_type": "https://in-toto.io/Statement/v1",
                    "subject": [{"name": "model", "digest": {"sha256": hashlib.sha256(bytes.fromhex(digest)).hexdigest()}}],
                    "predicateType": "https://model_signing/signature/v1.0",
                    "predicate": {"serialization": {"method": "files", "hash_type": "sha256", "allow_symlinks": False,
                                                    "ignore_paths": [".git", "model.sig"]},
                                  "resources": [{"name": "config.json", "algorithm": "sha256", "digest": digest}]}}
    bundle = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
              "verificationMaterial": {"publicKey": {"hint": "00" * 32}, "tlogEntries": []},
              "dsseEnvelope": {"payload": base64.b64encode(json.dumps(ms_statement).encode()).decode(),
                               "payloadType": "application/vnd.in-toto+json",
                               "signatures": [{"sig": envelope["signatures"][0]["sig"], "keyid": ""}]}}
    write("attestation", "model_signing.sig", json.dumps(bundle, indent=1))


def grammar_seeds():
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 300},
                                               "b": {"type": "array", "items": {"$ref": "#"}}}, "required": ["a"]}
    pattern = {"type": "string", "pattern": "^[a-z]+(-[0-9]{2,4})?$", "maxLength": 12}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}}]
    write("grammar", "schema_recursive", b"\x00" + compact(schema).encode())
    write("grammar", "schema_pattern", b"\x01" + compact(pattern).encode())
    write("grammar", "regex", b"\x02" + rb"\d{3}-[A-Z]{2}(x|yz)*")
    write("grammar", "gbnf", b"\x03" + b'root ::= "(" expr ")"\nexpr ::= [0-9]+ ("+" expr)?\n')
    write("grammar", "choice", b"\x04red\ngreen\nblue")
    write("grammar", "tools", b"\x05" + compact(tools).encode())
    write("grammar", "json_object", b'\x06{"a": [1, true]}')


def main():
    attestation_seeds()
    grammar_seeds()
    safetensors_seeds()
    hf_config_seeds()
    gguf_seeds()
    tokenizer_seeds()
    chat_seeds()
    request_seeds()
    total = 0
    for dirpath, _, files in os.walk(CORPUS):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    print("fuzz/corpus: %d bytes" % total)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer/*.json: a varied corpus and the token ids the reference
implementations give for it.

  corpus.json      the texts, and Python's NFC of each text (plus NFC-only cases)
  qwen3.json       HF `tokenizers` with ../shared/data/tokenizers/qwen3/tokenizer.json
  qwen2_5.json     the same with qwen2_5 ("a b" merges instead of pairs)
  stories260k.json llama.cpp (llama-cpp-python, vocab_only) on stories260K.gguf (SPM)
  default.json     llama.cpp on the default model's GGUF (Qwen2.5-Coder, gpt2/qwen2)
  smollm2.json     llama.cpp on SmolLM2-135M-Instruct (gpt2/smollm)

Each vocabulary file holds, per text: ids (special tokens parsed), ids_plain (parse_special
off: HF encode_special_tokens / llama.cpp special=False), decoded (reference decode of ids,
specials kept) and decoded_skip (specials skipped). Only ids and texts; the tokenizer files
are read from where they live. Rerun to reproduce exactly (same package versions):
    .venv-tools/bin/python tools/make_tokenizer_fixtures.py [--default-gguf PATH] [--smollm-gguf PATH]
"""
import argparse
import ctypes
import importlib.util
import json
import os
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

CORPUS = [
    "Hello world",
    "Hello, world! How are you doing today?",
    "",
    " ",
    "   leading and trailing spaces   ",
    "DON'T you dare, I'M sure they'LL say WE'VE done it; it's John's and you'Re",
    "It'ſ odd: 'ſ and 'S and 's, I'ſt we'ſſ",
    "'s 't 'RE 'Ve 'M 'LL 'D '' 'x ' s",
    "你好，世界！今天天气很好。我们一起去公园散步吧。",
    "こんにちは、世界。東京タワーは高いです。カタカナとひらがな。",
    "Grüße aus München! Die Straße ist schön, Ärger über Öl.",
    "안녕하세요 세계, 한국어 텍스트입니다.",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    "const f = (x) => { return x ** 2; }; // arrow\nconsole.log(`value: ${f(3)}`);",
    "fn main() -> Result<(), Box<dyn Error>> {\n    let s: &str = \"héllo\";\n    println!(\"{s:?}\");\n    Ok(())\n}",
    "<div class=\"a\">&nbsp;<b>bold</b></div>\nSELECT * FROM t WHERE x >= 10;",
    "I love 🍕 and 🎉! 👍🏽 👨‍👩‍👧‍👦 family 🏳️‍🌈 flags 🇯🇵🇺🇸🇩🇪",
    "a\t\tb   c\n\n\nd \n \n e\u00a0f\u3000g\u2003h\u0085i",
    "line one\r\nline two\r\n\r\nline four\n",
    "x  \n  y\t\n\t\tz    ",
    "In 2024, 1234567890 people paid $3.14159 or 1,000,000.50 € each; ½ ² ٣ ४ Ⅻ",
    "12345678901234567890123456789012345678901234567890",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nLet me think.\n</think>\n\nThe answer is 42.",
    "foo<|endoftext|>bar<|im_end|><|im_start|>",
    "<|im_start hello <|im_end| <|foo|> <||> <|im_start|",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "e\u0301 vs \u00e9, a\u0308 vs \u00e4, \u1e9b\u0323, Q\u0307\u0323, \u0915\u094d\u0937, \u212b",
    "\u1100\u1161\u11a8 and \uac00\u11a8 and \u0041\u030a\u0301",
    "مرحبا بالعالم שלום עולם",
    "Привет, мир! Γειά σου Κόσμε",
    "สวัสดีชาวโลก नमस्ते दुनिया",
    "Wait... what?!?! (yes) [no] {maybe} --- *** ___ ~~~ ''' \"\"\"",
    "Visit https://example.com/path?q=1&r=2#frag or mail me@example.org.",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!!!!!!!!!!!!!!??????",
    "zero\u200bwidth\u200cjoiner\u200d\ufeffbom",
    "tab\tbell\x07null\x00esc\x1b[0m",
    "It’s the user’s ‘quote’ and “double”",
    "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```\n",
    "∑_{i=1}^{n} x_i² ≤ √(n·∑x_i⁴) → ∞ ≠ ∅",
    "naïve café résumé coöperate Zürich İstanbul ß ẞ ﬁ",
    "\n\n   indented\n\tTabbed",
    "\n",
    "  \n",
    "<|im_start|>system\nYou are SmolLM<|im_end|>",
    "<s>Once upon a time</s> there was <unk>",
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    "\ue000\ue001 private use",
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "GPT-4o和Claude 3.5都是AI模型，version 2.0发布于2024年。",
    "Hello!\n\nWorld?\r\n",
    "  <|im_end|>  <|im_end|>\u0301",
    "The quick brown fox jumps over the lazy dog. " * 3,
]

# Extra strings for the NFC test only (reordering, Hangul, exclusions, singletons).
NFC_ONLY = [
    "a\u0323\u0301\u0302 a\u0301\u0323",
    "\u1100\u1161 \u1100\u1161\u11a8 \uac00\u11a8 \u1100\u0301\u1161",
    "\u0958\u2126\u212a\u2000\u0344\u0f73 \u1e0a\u0323 \u1e0c\u0307",
    "\u0041\u030a\u0328 \u0061\u0328\u030a \u00c5\u0328",
    "\u05d0\u05b7\u05bc \u0627\u0653\u0654",
    "\U0001d15e\U0001d165 \U000110a5\U000110ba",
]


def pretokenizer_fixture():
    """Pieces of every corpus text under each pre-tokenizer, from HF's own pre-tokenizers."""
    from tokenizers import Regex, pre_tokenizers as pt
    byte_level = pt.ByteLevel(add_prefix_space=False, use_regex=False)

    def split(pattern):
        return pt.Sequence([pt.Split(Regex(pattern), behavior="isolated", invert=False), byte_level])

    qwen2 = json.load(open(os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json")))
    qwen2_regex = qwen2["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    kinds = {
        "qwen2": split(qwen2_regex),
        "qwen35": split(qwen2_regex.replace("]?\\p{L}+", "]?[\\p{L}\\p{M}]+")
                        .replace("[^\\s\\p{L}\\p{N}]", "[^\\s\\p{L}\\p{M}\\p{N}]")),
        "llama3": split(qwen2_regex.replace("|\\p{N}|", "|\\p{N}{1,3}|")),
        "gpt2": pt.ByteLevel(add_prefix_space=False, use_regex=True),
        "digits_gpt2": pt.Sequence([pt.Digits(individual_digits=True),
                                    pt.ByteLevel(add_prefix_space=False, use_regex=True)]),
    }
    out = {"patterns": {"qwen2": qwen2_regex}}
    for name, pre in kinds.items():
        out[name] = [[text[a:b] for _, (a, b) in pre.pre_tokenize_str(text)] for text in CORPUS]
    return out


def hf_fixture(path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    ids, plain, decoded, decoded_skip = [], [], [], []
    for text in CORPUS:
        tok.encode_special_tokens = False
        enc = tok.encode(text).ids
        tok.encode_special_tokens = True
        enc_plain = tok.encode(text).ids
        tok.encode_special_tokens = False
        ids.append(enc)
        plain.append(enc_plain)
        decoded.append(tok.decode(enc, skip_special_tokens=False))
        decoded_skip.append(tok.decode(enc, skip_special_tokens=True))
    import tokenizers
    return {"reference": f"tokenizers {tokenizers.__version__}", "ids": ids,
            "ids_plain": plain, "decoded": decoded, "decoded_skip": decoded_skip}


def llama_cpp_fixture(path):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))

    def detokenize(tokens, remove_special, unparse_special):
        arr = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        size = 64 + 16 * len(tokens)
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_detokenize(vocab, arr, len(tokens), buf, size,
                                           remove_special, unparse_special)
            if n >= 0:
                return buf.raw[:n].decode("utf-8")
            size = -n + 16

    ids, plain, decoded, decoded_skip = [], [], [], []
    for text in CORPUS:
        enc = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        ids.append(enc)
        plain.append(llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False))
        decoded.append(detokenize(enc, False, True))
        decoded_skip.append(detokenize(enc, True, False))
    return {"reference": f"llama-cpp-python {llama_cpp.__version__}", "add_bos": add_bos,
            "ids": ids, "ids_plain": plain, "decoded": decoded, "decoded_skip": decoded_skip}


def write(name, data):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--default-gguf", default=os.environ.get("ZEN_DEFAULT_MODEL", "models/default/model.gguf"))
    ap.add_argument("--smollm-gguf", default="models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()

    nfc_texts = CORPUS + NFC_ONLY
    write("corpus.json", {"unicode": unicodedata.unidata_version, "texts": CORPUS,
                          "nfc_inputs": nfc_texts,
                          "nfc": [unicodedata.normalize("NFC", t) for t in nfc_texts]})
    if os.path.exists(os.path.join(SHARED, "tokenizers", "qwen3", "tokenizer.json")):
        write("pretokenizers.json", pretokenizer_fixture())
    for name in ["qwen3", "qwen2_5"]:
        path = os.path.join(SHARED, "tokenizers", name, "tokenizer.json")
        if os.path.exists(path):
            write(f"{name}.json", {"source": f"shared/data/tokenizers/{name}", **hf_fixture(path)})
        else:
            print(f"skipped {name}: {path} not found", file=sys.stderr)
    for name, path in [("stories260k", os.path.join(SHARED, "stories260K", "stories260K.gguf")),
                       ("default", args.default_gguf), ("smollm2", args.smollm_gguf)]:
        if not os.path.exists(path):
            print(f"skipped {name}: {path} not found", file=sys.stderr)
        elif importlib.util.find_spec("llama_cpp") is None:
            print(f"skipped {name}: llama_cpp (llama-cpp-python) is not installed", file=sys.stderr)
        else:
            write(f"{name}.json", {"source": os.path.basename(path), **llama_cpp_fixture(path)})


if __name__ == "__main__":
    main()

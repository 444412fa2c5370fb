#!/usr/bin/env bash
# The whole test suite: setup (deps, build, default model), then C++ and CLI tests.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
export ZEN_DEFAULT_MODEL="$PWD/models/default/model.gguf"
# One test process at a time: the model tests use every core, and oversubscribed spinning
# thread pools slow each other down badly.
ctest --test-dir build --output-on-failure -j1 --timeout 1800
.venv/bin/python -m pytest -q tests

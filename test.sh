#!/usr/bin/env bash
# The whole test suite: setup (deps, build, default model), then C++ and CLI tests.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
export ZEN_DEFAULT_MODEL="$PWD/models/default/model.gguf"
ctest --test-dir build --output-on-failure -j2 --timeout 1800
.venv/bin/python -m pytest -q tests

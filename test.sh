#!/usr/bin/env bash
# The whole test suite: setup (deps, build, default model), then C++ and CLI tests.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
export ZEN_DEFAULT_MODEL="$PWD/models/default/model.gguf"
# One test process at a time: the model tests use every core, and oversubscribed spinning
# thread pools slow each other down badly.
ctest --test-dir build --output-on-failure -j1 --timeout 1800
# The same C++ tests under AddressSanitizer + LeakSanitizer + UBSan (any report fails), but
# the real-model forwards (the default model one process and on two ranks), which take minutes each there and run the code paths the tiny
# fixtures already cover; then LeakSanitizer over a server fed hostile, oversized and large
# requests (its clean exit on SIGTERM is checked). About 10 min of build and 5 of tests here.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEN_SANITIZE=ON >/dev/null
ninja -C build-asan -j"$(nproc)" zen zen_tests
ctest --test-dir build-asan --output-on-failure -j1 --timeout 1800 -E "EngineDefaultModel|EngineSpecRealModels|GoldenDefaultModel[.]|TensorParallel[.]DefaultModel"
ZEN_BINARY=build-asan/zen .venv/bin/python -m pytest -q tests/test_server_robustness.py -k "hostile or body_limit or memory or pipelined"
# The NEON kernels, cross-built for aarch64 and run under qemu (about 3 min with the install):
# the x86 build never compiles them, so only this catches a change that breaks them.
tools/test_aarch64.sh --install
# Every libFuzzer target for 30 s from its committed seeds (clang, ASan + UBSan; about 8 min of
# build and 4 of fuzzing here); a fixed seed so a finding reproduces. Longer runs: fuzz/README.md.
ZEN_FUZZ_ARGS="-seed=1 ${ZEN_FUZZ_ARGS:-}" tools/fuzz.sh all 30
.venv/bin/python -m pytest -q tests

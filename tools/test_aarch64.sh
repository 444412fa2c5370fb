#!/usr/bin/env bash
# Cross-builds the CPU kernels and their tests for aarch64 (cmake/kernel_tests) and runs them
# under qemu-user twice: on a CPU with the dot-product extension (-cpu max: the SDOT kernels)
# and on one without (-cpu cortex-a72: the widening-multiply kernels). Both must pass and the
# NEON kernels must equal the scalar references as the tests demand.
#
# Needs Debian's g++-aarch64-linux-gnu, qemu-user and googletest (sources in
# /usr/src/googletest). Without them it says so and exits 0, unless --install is given, which
# apt-get installs them first (via sudo unless root). Extra arguments go to the test binary
# (e.g. --gtest_filter='VecDot*').
#   tools/test_aarch64.sh [--install] [gtest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

install=0
if [[ "${1:-}" == "--install" ]]; then
  install=1
  shift
fi

missing() {
  command -v aarch64-linux-gnu-g++ >/dev/null || echo g++-aarch64-linux-gnu
  command -v qemu-aarch64 >/dev/null || echo qemu-user
  [[ -f /usr/src/googletest/CMakeLists.txt ]] || echo googletest
}

packages=$(missing | tr '\n' ' ')
if [[ -n "$packages" && $install == 1 ]]; then
  sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $packages >/dev/null
  packages=$(missing | tr '\n' ' ')
fi
if [[ -n "$packages" ]]; then
  echo "test_aarch64: skipped, missing Debian packages: $packages(apt-get install them, or pass --install)"
  exit 0
fi

build=build-aarch64
cmake -S cmake/kernel_tests -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" >/dev/null
ninja -C "$build" -j"${ZEN_JOBS:-2}" zen_kernel_tests

# cpu model -> the kernels the dispatch must pick on it
status=0
for run in "max neon+dotprod" "cortex-a72 neon"; do
  read -r cpu want <<<"$run"
  echo "== qemu-aarch64 -cpu $cpu (expect kernels: $want)"
  log=$(mktemp)
  if ! qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu "$cpu" "$build/zen_kernel_tests" "$@" >"$log" 2>&1; then
    status=1
  fi
  grep -E '^\[  (PASSED|FAILED) |^\[ info \]' "$log" || true
  if grep -q '^\[ info \] kernels in use:' "$log" && ! grep -q "^\[ info \] kernels in use: $want\$" "$log"; then
    echo "test_aarch64: -cpu $cpu ran the wrong kernels (want $want)"
    status=1
  fi
  [[ $status == 0 ]] || tail -n 60 "$log"
  rm -f "$log"
done
exit $status

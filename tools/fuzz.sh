#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (clang, ASan + UBSan) into build-fuzz/ and runs them.
#
#   tools/fuzz.sh [TARGET|all] [SECONDS]
#
# TARGET: safetensors, gguf, tokenizer_json, chat_template, request, hf_config, attestation, grammar,
# or all
# (default); fuzz/README.md says what each one parses.
# Each target runs for SECONDS (default 30) on build-fuzz/corpus/<target>, a working copy of
# its seeds in fuzz/corpus/<target> (inputs the fuzzer finds accumulate there, never in the
# repository). Per target the final libFuzzer status line is printed (exec/s, corpus size).
# Exit status: 0 when every target ran clean; 1 when any crashed, tripped a sanitizer, hung
# (-timeout=10), or went past -rss_limit_mb=2048; the input that did it is printed (a file
# under build-fuzz/artifacts/<target>/): reproduce with build-fuzz/fuzz_<target> FILE.
# Without clang++ or libFuzzer (Debian: clang, libclang-rt-NN-dev) it says so and exits 0.
#
# Environment: ZEN_FUZZ_JOBS build jobs (default: all cores); ZEN_FUZZ_CXX the clang++ (default
# clang++); ZEN_FUZZ_ARGS extra libFuzzer flags (e.g. "-workers=2 -jobs=2");
# ZEN_FUZZ_STRICT_CHECKS=0 to accept a failed internal check (ZEN_CHECK) as an ordinary
# error (by default it is a finding: untrusted input should be refused by validation).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-fuzz"
ALL_TARGETS=(safetensors gguf tokenizer_json chat_template request hf_config attestation grammar)

target="${1:-all}"
seconds="${2:-30}"
if [[ "$target" == "-h" || "$target" == "--help" ]]; then
  sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [[ "$target" == "all" ]]; then
  targets=("${ALL_TARGETS[@]}")
elif [[ " ${ALL_TARGETS[*]} " == *" $target "* ]]; then
  targets=("$target")
else
  echo "tools/fuzz.sh: unknown target '$target' (one of: ${ALL_TARGETS[*]}, all)" >&2
  exit 2
fi
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "tools/fuzz.sh: SECONDS must be a positive integer, got '$seconds'" >&2
  exit 2
fi

# clang with libFuzzer, or skip.
cxx="${ZEN_FUZZ_CXX:-clang++}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "tools/fuzz.sh: SKIPPED: $cxx not found (install clang and libclang-rt-dev for libFuzzer)"
  exit 0
fi
if ! "$cxx" --version 2>/dev/null | grep -qi clang; then
  echo "tools/fuzz.sh: SKIPPED: $cxx is not clang (libFuzzer needs clang; set ZEN_FUZZ_CXX=clang++)"
  exit 0
fi
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
  >"$probe_dir/probe.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cc" -o "$probe_dir/probe" >"$probe_dir/log" 2>&1; then
  echo "tools/fuzz.sh: SKIPPED: $cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer runtime missing?" \
    "Debian: libclang-rt-$("$cxx" -dumpversion | cut -d. -f1)-dev):"
  sed 's/^/  /' "$probe_dir/log" | head -5
  exit 0
fi

# Build.
jobs="${ZEN_FUZZ_JOBS:-$(nproc)}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S "$ROOT/fuzz" -B "$BUILD" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
echo "tools/fuzz.sh: building ${build_targets[*]} in build-fuzz/ (-j$jobs)"
cmake --build "$BUILD" -j "$jobs" --target "${build_targets[@]}"

dict_for() {
  case "$1" in
    gguf) echo "$ROOT/fuzz/dict/gguf.dict" ;;
    chat_template) echo "$ROOT/fuzz/dict/jinja.dict" ;;
    *) echo "$ROOT/fuzz/dict/json.dict" ;;
  esac
}

# Run, one target at a time.
failed=()
summary=()
for t in "${targets[@]}"; do
  corpus="$BUILD/corpus/$t"
  artifacts="$BUILD/artifacts/$t"
  log="$BUILD/logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  cp -f "$ROOT/fuzz/corpus/$t/"* "$corpus/"
  stamp="$probe_dir/$t.stamp"
  touch "$stamp"
  dict_args=()
  [[ -f "$(dict_for "$t")" ]] && dict_args=(-dict="$(dict_for "$t")")
  echo "== $t: ${seconds}s (log: build-fuzz/logs/$t.log)"
  # TMPDIR: the targets' scratch files (left behind when a finding aborts a target).
  mkdir -p "$BUILD/tmp"
  set +e
  # shellcheck disable=SC2086 # ZEN_FUZZ_ARGS is a list of flags
  TMPDIR="$BUILD/tmp" ZEN_FUZZ_STRICT_CHECKS="${ZEN_FUZZ_STRICT_CHECKS:-1}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    "$BUILD/fuzz_$t" "$corpus" "${dict_args[@]}" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" ${ZEN_FUZZ_ARGS:-} >"$log" 2>&1
  rc=$?
  set -e
  final="$(grep -aE '^#[0-9]+[[:space:]]' "$log" | tail -n 1 || true)"
  echo "   ${final:-no status line}"
  new_artifacts="$(find "$artifacts" -type f -newer "$stamp" | sort)"
  if [[ $rc -ne 0 || -n "$new_artifacts" ]]; then
    failed+=("$t")
    echo "   FAILED (exit $rc): $(grep -aE 'ERROR: |runtime error|what\(\)|internal check failed' "$log" | head -n 3 | tr '\n' ' ')"
    for a in $new_artifacts; do echo "   crash input: $a"; done
    summary+=("$t: FAILED")
  else
    summary+=("$t: ok  ${final:-}")
  fi
done

echo "== summary"
printf '  %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "tools/fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]} (reproduce: build-fuzz/fuzz_<target> <crash input>)"
  exit 1
fi

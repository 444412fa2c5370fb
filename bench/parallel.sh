#!/usr/bin/env bash
# One process (all cores) against tensor parallel and pipeline parallel over MPI on the same
# host (one rank per core), alternating the three so drift hits them alike:
#   bench/parallel.sh [REPEATS] [CONCURRENCY]       (defaults: 3, 1,4,16)
# Prints, per layout and repeat, zen bench's rows (decode tok/s at each concurrency) and rank
# 0's collective statistics, then zen run's prefill and decode rates on a 420-token prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
conc=${2:-1,4,16}
zen=./build/zen
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
prompt=$(mktemp)
trap 'rm -f "$prompt"' EXIT
python3 -c "
import random
random.seed(1)
words='the a model tensor rank layer engine token cache block stage sum reduce gather send vector matrix'.split()
print(' '.join(random.choice(words) for _ in range(420)))" >"$prompt"

layouts=("one process, $cores threads" "tensor parallel $cores" "pipeline parallel $cores")
run_layout() {  # $1: index into layouts; the rest: zen arguments
  local i=$1
  shift
  case $i in
    0) "$zen" "$@" --threads "$cores" ;;
    1) mpirun -np "$cores" "$zen" "$@" --tensor-parallel-size "$cores" ;;
    2) mpirun -np "$cores" "$zen" "$@" --pipeline-parallel-size "$cores" ;;
  esac
}

echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores"
for r in $(seq 1 "$repeats"); do
  for i in 0 1 2; do
    echo "== ${layouts[$i]} (repeat $r): zen bench --concurrency $conc --workloads chat:128:64"
    run_layout "$i" bench --concurrency "$conc" --workloads chat:128:64 --no-prefix-table --json /dev/null 2>&1 |
      grep -E '^(workload|chat  )|parallel \(' || true
    echo "== ${layouts[$i]} (repeat $r): zen run, 420-token prompt, 128 tokens"
    run_layout "$i" run --prompt-file "$prompt" --max-tokens 128 --ignore-eos 2>&1 >/dev/null |
      grep -E '^(prefill|decode)|parallel \(' || true
  done
done

#!/usr/bin/env bash
# A MoE model on one host three ways, alternated so drift hits them alike: one process (all
# cores), tensor parallel with every expert sliced, and tensor parallel with whole experts per
# rank (--enable-expert-parallel); one rank per core.
#   bench/moe_parallel.sh MODEL [REPEATS] [CONCURRENCY]     (defaults: 3, 1,4,16)
# MODEL: a MoE checkpoint, e.g. tools/make_moe_bench_models.py's moe (64 experts, top-8).
# Prints, per layout and repeat, zen bench's decode rows and rank 0's collective statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/moe_parallel.sh MODEL [REPEATS] [CONCURRENCY]}
repeats=${2:-3}
conc=${3:-1,4,16}
zen=./build/zen
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
layouts=("one process, $cores threads" "tensor parallel $cores, experts sliced" "tensor parallel $cores, whole experts")
run_layout() {  # $1: index into layouts; the rest: zen arguments
  local i=$1
  shift
  case $i in
    0) "$zen" "$@" --threads "$cores" ;;
    1) mpirun -np "$cores" "$zen" "$@" --tensor-parallel-size "$cores" ;;
    2) mpirun -np "$cores" "$zen" "$@" --tensor-parallel-size "$cores" --enable-expert-parallel ;;
  esac
}
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; model: $model"
for r in $(seq 1 "$repeats"); do
  for i in 0 1 2; do
    echo "== ${layouts[$i]} (repeat $r): zen bench --concurrency $conc --workloads chat:128:64"
    run_layout "$i" bench --model "$model" --concurrency "$conc" --workloads chat:128:64 --no-prefix-table \
      --json /dev/null 2>&1 | grep -E '^(workload|chat  )|parallel \(' || true
  done
done

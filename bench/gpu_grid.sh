#!/usr/bin/env bash
# The loss ablation grid (8 aux losses + SMMD on 2 control kernels, 5 seeds) on a GPU machine, writing the
# same results.md / results.csv as `vlm-smmd compare`. One compare process per seed runs in parallel, all
# into one --out (each variant has its own run folder; a variant is done once its done.json exists), then
# a last compare call over every seed finds them all done and writes the tables.
#
#   bash bench/gpu_grid.sh [CONFIG] [OUT] [extra compare/config overrides...]
#   bash bench/gpu_grid.sh configs/scratch_cpu_bar.yaml outputs/compare_bar_gpu      # the CPU grid, ~5-8 min
#   bash bench/gpu_grid.sh configs/scratch_gpu_chart.yaml outputs/compare_gpu_chart  # 10x setting, ~1 h
# SEEDS=0,1,2 AUX=none,smmd bash bench/gpu_grid.sh ...   narrows the grid. Rerunning resumes.
set -euo pipefail
CONFIG=${1:-configs/scratch_cpu_bar.yaml}
OUT=${2:-outputs/compare_gpu}
shift $(( $# < 2 ? $# : 2 ))
SEEDS=${SEEDS:-0,1,2,3,4}
AUX=${AUX:-none,smmd,mmd,smooth,ntl_mse,ntl_was,dist2,gce}
CONTROLS=${CONTROLS-random,shuffled}
DEVICE=(--use_cpu false)                       # the CPU configs set use_cpu: true
ARGS=(--aux "$AUX" --kernel-controls "$CONTROLS" --out "$OUT" --eval-batch-size 100 --disable_tqdm true
      "${DEVICE[@]}" "$@")
THREADS=$(( $(nproc) / $(echo "$SEEDS" | tr ',' '\n' | wc -l) ))
export OMP_NUM_THREADS=$(( THREADS > 0 ? THREADS : 1 ))
mkdir -p "$(dirname "$OUT")"
IFS=, read -ra seeds <<< "$SEEDS"
pids=()
for i in "${!seeds[@]}"; do
  vlm-smmd compare "$CONFIG" --seeds "${seeds[$i]}" "${ARGS[@]}" > "$OUT.seed${seeds[$i]}.log" 2>&1 &
  pids+=($!)
  if [ "$i" = 0 ]; then  # the first process renders the data and writes compare.json; the others resume it
    until [ -f "$OUT/compare.json" ] || ! kill -0 "${pids[0]}" 2>/dev/null; do sleep 1; done
  fi
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ "$status" = 0 ] || echo "some variants failed (see $OUT.seed*.log); the last call retries them" >&2
vlm-smmd compare "$CONFIG" --seeds "$SEEDS" "${ARGS[@]}"

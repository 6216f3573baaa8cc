#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 31's ablation on GPUs: every recipe x every seed with the GPU training program, one run per
# GPU at a time, then the table (final gap and tokens to the bf16 run's loss at 80 % of training,
# mean +- standard error over seeds), a CSV of every run's loss curve and a PNG of the curves
# (tools/twin/ablation_table.py; the PNG needs matplotlib).
#   tools/twin/ablation.sh TRAIN_GPU OUT_DIR [extra training-program flags...]
# Environment: STEPS (default 2000), SEEDS (default "0 1 2"), GPUS (default: nvidia-smi's count),
# RECIPES (default: all below), DATA (a corpus file; default: the Python standard library's .py
# files, about 10 MB, built into OUT_DIR as tools/twin/issue31_gpu.sh builds it: the repository's
# 0.3 MB corpus is seen 55 times in 1000 default steps and memorized (training loss 0.016), which
# leaves nothing for an ablation to compare. A run that would read its training text more than
# 4 times is refused: up to about 4 epochs, repeated data trains about as well as new data
# (Muennighoff et al., 2023, "Scaling Data-Constrained Language Models").
# TOKENS_PER_STEP (default 16384 = the default batch 16 x seq 1024; set it with --batch/--seq).
# STOP_AT (seconds since the epoch): no run starts from then on, so a call with a time limit ends
# with whole runs; a later call resumes (finished runs are skipped).
# Cost: 11 recipes x 3 seeds = 33 runs of STEPS x 16 x 1024 tokens on the default 100 M model;
# at about 400 k tokens/s per H100 (docs/perf/training.md), 1 B tokens a run (STEPS 61035) is
# about 42 minutes: 23 GPU-hours in all (3 hours on 8 GPUs). The default STEPS 2000 (32.8 M
# tokens, 3.4 epochs of the default corpus) is about 1.4 minutes a run: 45 GPU-minutes, 6 minutes
# on 8 GPUs. A longer run needs a larger DATA.
set -euo pipefail
prog=$1 out=$2
shift 2
extra=("$@")
steps=${STEPS:-2000}
seeds=${SEEDS:-"0 1 2"}
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
(( gpus >= 1 )) || gpus=1
heal=$((steps * 8 / 10))
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# name: training-program flags
declare -A recipe=(
  [bf16]="--recipe bf16"
  [fp8]="--recipe fp8"
  [mxfp8]="--recipe mxfp8"
  [mxfp4-no-hadamard]="--recipe mxfp4-no-hadamard"
  [mxfp4-h16-all]="--recipe mxfp4"
  [mxfp4-h16-wgrad]="--recipe mxfp4-wgrad"
  [mxfp4-random-h16-wgrad-sr]="--recipe mxfp4-nvidia"
  [mxfp4-wgrad-bf16]="--recipe mxfp4-wgrad-bf16"
  [mxfp4-bf16-edges]="--recipe mxfp4-bf16-edges"
  [mxfp4-heal-fp8]="--recipe mxfp4 --switch-to fp8 --switch-at $heal"
  [mxfp4-heal-bf16]="--recipe mxfp4 --switch-to bf16 --switch-at $heal"
)
names=${RECIPES:-"bf16 fp8 mxfp8 mxfp4-no-hadamard mxfp4-h16-all mxfp4-h16-wgrad mxfp4-random-h16-wgrad-sr mxfp4-wgrad-bf16 mxfp4-bf16-edges mxfp4-heal-fp8 mxfp4-heal-bf16"}
corpus=${DATA:-$out/python_stdlib.txt}
if [[ -z "${DATA:-}" && ! -s $corpus ]]; then
  find /usr/lib/python3* -name '*.py' -not -path '*/site-packages/*' -not -path '*/dist-packages/*' | LC_ALL=C sort | xargs cat > "$corpus"
fi
bytes=$(stat -c %s "$corpus") tokens=$((steps * ${TOKENS_PER_STEP:-16384}))
if (( bytes * 9 / 10 * 4 < tokens )); then  # the training program trains on 90 % of the file
  echo "ablation: $corpus holds $bytes bytes; a run's $tokens tokens would read its training text more" \
    "than 4 times. Give DATA a larger corpus or fewer STEPS." >&2
  exit 2
fi
data=(--data "$corpus")
jobs=()
for s in $seeds; do for n in $names; do jobs+=("$n:$s"); done; done
worker() {  # worker GPU: every gpus-th job
  local g=$1 i
  for ((i = g; i < ${#jobs[@]}; i += gpus)); do
    local n=${jobs[$i]%%:*} s=${jobs[$i]##*:}
    [[ -s "$out/$n.seed$s.csv" ]] && continue  # done in an earlier call
    if [[ -n "${STOP_AT:-}" ]] && (( $(date +%s) >= STOP_AT )); then
      echo "STOP_AT passed: run $n seed $s and later ones left for the next call"
      return
    fi
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES=$g "$prog" ${recipe[$n]} --steps "$steps" --seed "$s" --log-every 10 --eval-every 0 \
      --csv "$out/$n.seed$s.csv" "${data[@]}" "${extra[@]}" > "$out/$n.seed$s.log" 2>&1 || echo "run $n seed $s failed: $out/$n.seed$s.log"
  done
}
for ((g = 0; g < gpus; ++g)); do worker "$g" & done
wait
python3 "$here/ablation_table.py" "$out" --tokens-per-step "${TOKENS_PER_STEP:-16384}" --baseline bf16 --names $names

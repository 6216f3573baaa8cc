#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The MXFP4 gap measured by mxkit's training program and by the PyTorch twin from the same weights
# and batches, per seed, on a CPU-sized model (docs/perf/fidelity.md). Then the agreement test.
#   tools/twin/gap_study.sh TRAIN_PROGRAM OUT_DIR [STEPS] [SEEDS...]
# PYTHON (default python3) must have torch; DATA (default: the repository's corpora) is the corpus.
set -euo pipefail
prog=$1 out=$2 steps=${3:-300}
shift $(( $# >= 3 ? 3 : $# ))
seeds=${*:-"0 1 2"}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
shape=(--layers 2 --d-model 64 --heads 2 --kv-heads 1 --ffn 128 --seq 64 --batch 4)
run=(--steps "$steps" --warmup $((steps / 10)) --lr 2e-3 --activations f32 --log-every 1 --eval-every 0)
data=()
[[ -n "${DATA:-}" ]] && data=(--data "$DATA")
recipes=${RECIPES:-"bf16 mxfp4-no-hadamard"}
for s in $seeds; do
  "$py" "$here/twin.py" init --out "$out/init$s.safetensors" --n-layers 2 --d-model 64 --n-heads 2 --n-kv-heads 1 --d-ff 128 --seed "$s"
  for r in $recipes; do
    "$prog" "${shape[@]}" "${run[@]}" "${data[@]}" --seed "$s" --recipe "$r" --init-from "$out/init$s.safetensors" \
      --dump-batches "$out/batches$s.bin" --csv "$out/mxkit_${r}_$s.csv" > /dev/null
    "$py" "$here/twin.py" train --init-from "$out/init$s.safetensors" --batches "$out/batches$s.bin" --recipe "$r" \
      --lr 2e-3 --warmup $((steps / 10)) --seed "$s" --csv "$out/twin_${r}_$s.csv" --mxkit-csv "$out/mxkit_${r}_$s.csv" > "$out/twin_${r}_$s.log"
  done
done
for r in $recipes; do
  [[ $r == bf16 ]] && continue
  echo "== $r gap to bf16"
  "$py" "$here/twin.py" compare --last $((steps / 6)) \
    --mxkit $(for s in $seeds; do echo "$out/mxkit_${r}_$s.csv"; done) --twin $(for s in $seeds; do echo "$out/twin_${r}_$s.csv"; done) \
    --baseline-mxkit $(for s in $seeds; do echo "$out/mxkit_bf16_$s.csv"; done) \
    --baseline-twin $(for s in $seeds; do echo "$out/twin_bf16_$s.csv"; done) || true
done
